//! Listings of a remote warehouse's prefixes: one `LIST` with `/` as
//! delimiter per directory, paged and bounded, kept for a TTL (or for a
//! whole walk of the tree), asked for once per prefix however many
//! readers wait for it, and compared whole with the one before so that a
//! directory's identity (its generation) moves only when its content did.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as KeyPath;
use parking_lot::Mutex;

use super::{Bucket, FAN_OUT, ObjectInfo, block_on, failure, key_path};
use crate::error::RemoteFailure;

/// How long a listing is trusted before it is asked again, unless set
/// with [`set_listing_ttl`] (a mount sets its attribute TTL).
pub const DEFAULT_LISTING_TTL: Duration = Duration::from_secs(1);
/// Bytes of listings kept per bucket (names, ETags and their maps).
pub(super) const LISTINGS_KEPT: u64 = 256 << 20;
/// The most names one listing holds (a directory of millions of keys
/// costs a thousand pages, not thousands): the catalog's own bound on a
/// directory is lower.
pub const LISTED_MAX: usize = 200_000;
/// The most pages one listing reads (a page holds at most 1,000 keys,
/// those kept and those cut out).
pub const LISTED_PAGES_MAX: usize = 250;
/// The most bytes of names and ETags one listing holds, as weighed for
/// the listings kept: every listing fits the budget many times over, and
/// the listings asked for at once ([`FAN_OUT`]) hold at most 512 MiB
/// while they come in.
pub const LISTED_BYTES_MAX: u64 = 32 << 20;
/// How long a listing asks for more pages: past it, it stops with what it
/// has (`truncated`), so a server that answers slowly page after page
/// holds the readers waiting for it no longer (a full listing at a good
/// store takes a few seconds).
pub const LISTING_TIME_MAX: Duration = Duration::from_secs(120);
/// The longest one listing may take at all, its last page and that page's
/// retries included; past it the listing fails.
pub const LISTING_HARD_MAX: Duration = Duration::from_secs(180);

static LISTING_TTL_MS: AtomicU64 = AtomicU64::new(DEFAULT_LISTING_TTL.as_millis() as u64);

/// Sets how long a listing is trusted before it is asked again.
pub fn set_listing_ttl(ttl: Duration) {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    LISTING_TTL_MS.store(ms, Ordering::Relaxed);
}

fn listing_ttl() -> Duration {
    Duration::from_millis(LISTING_TTL_MS.load(Ordering::Relaxed))
}

/// The walks in progress, each with when it began (see [`hold_listings`]).
static WALKS: Mutex<Vec<(u64, Instant)>> = Mutex::new(Vec::new());
static WALK_IDS: AtomicU64 = AtomicU64::new(0);

/// Listings held for one walk of a tree: while it lasts, a listing asked
/// for since it began is trusted past the TTL, so a walk that takes longer
/// than the TTL (a first `.stats` of a large warehouse) lists each prefix
/// once, not again for its last part. A listing older than the walk is
/// not held.
#[derive(Debug)]
pub struct WalkHold(u64);

pub fn hold_listings() -> WalkHold {
    let id = WALK_IDS.fetch_add(1, Ordering::Relaxed);
    WALKS.lock().push((id, Instant::now()));
    WalkHold(id)
}

impl Drop for WalkHold {
    fn drop(&mut self) {
        WALKS.lock().retain(|(id, _)| *id != self.0);
    }
}

/// Whether a listing asked for at `fetched` is still trusted.
fn is_fresh(fetched: Instant) -> bool {
    fetched.elapsed() < listing_ttl() || WALKS.lock().iter().any(|(_, began)| *began <= fetched)
}

/// One level of a prefix: its subdirectories and its files.
#[derive(Debug)]
pub struct Listing {
    /// When it was asked for (its TTL counts from then).
    fetched: Instant,
    /// Changes only when the content of the listing does.
    pub generation: u64,
    weight: u64,
    pub dirs: BTreeSet<String>,
    pub files: BTreeMap<String, ObjectInfo>,
    /// The listing stopped at its bound ([`LISTED_MAX`] names,
    /// [`LISTED_BYTES_MAX`] bytes, [`LISTED_PAGES_MAX`] pages or
    /// [`LISTING_TIME_MAX`]): it holds the first names in key order.
    pub truncated: bool,
}

/// What an entry of a cache weighs beyond its names and bytes (the maps'
/// own nodes, the strings' headers).
pub(super) const ENTRY_WEIGHT: u64 = 128;

impl Listing {
    /// About the bytes the listing holds: its names, ETags and maps.
    fn weight(&self) -> u64 {
        self.weight
    }

    /// Whether the listing holds anything at all.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.files.is_empty()
    }
}

impl Bucket {
    /// The listing of `prefix` (`""` for the bucket's root): kept for the
    /// listing TTL, then asked again.
    pub fn listing(&self, prefix: &str) -> io::Result<Arc<Listing>> {
        let fresh = || {
            let cached = self.listings.lock().get(prefix).cloned();
            match cached {
                Some(listing) if is_fresh(listing.fetched) => Ok(listing),
                cached => Err(cached),
            }
        };
        if let Ok(listing) = fresh() {
            return Ok(listing);
        }
        // One request per prefix at a time: the readers that found the
        // same listing expired wait for the first one's answer. When that
        // answer is a failure, those who waited for it get it too, rather
        // than each sending the request (and its retries) again in turn:
        // a dead store costs every reader one retry budget, not N.
        let waiting_since = Instant::now();
        let flight = Arc::clone(self.flights.lock().entry(prefix.to_string()).or_default());
        let result = {
            let mut failed = flight.lock();
            fresh().or_else(|cached| match &*failed {
                Some(Failed { at, error }) if *at >= waiting_since => Err(again(error)),
                _ => match self.fetch_listing(prefix, cached.as_deref()) {
                    Ok(listing) => {
                        self.keep_listing(prefix.to_string(), Arc::clone(&listing));
                        Ok(listing)
                    }
                    Err(error) => {
                        let shared = again(&error);
                        *failed = Some(Failed {
                            at: Instant::now(),
                            error,
                        });
                        Err(shared)
                    }
                },
            })
        };
        // The last reader out takes the lock away (the table holds one).
        let mut flights = self.flights.lock();
        drop(flight);
        if flights
            .get(prefix)
            .is_some_and(|flight| Arc::strong_count(flight) == 1)
        {
            flights.remove(prefix);
        }
        result
    }

    /// Lists every prefix in `prefixes` not listed within the TTL, at most
    /// [`FAN_OUT`] at once, until one fails.
    pub fn prefetch_listings(&self, prefixes: Vec<String>) -> io::Result<()> {
        let stale: Vec<(String, Option<Arc<Listing>>)> = {
            let mut listings = self.listings.lock();
            prefixes
                .into_iter()
                .filter_map(|p| {
                    let cached = listings.get(&p).cloned();
                    match &cached {
                        Some(l) if is_fresh(l.fetched) => None,
                        _ => Some((p, cached)),
                    }
                })
                .collect()
        };
        if stale.len() < 2 {
            return Ok(());
        }
        // Each listing is kept as it comes, not all of them held first.
        // The first failure ends the prefetch (the requests still out are
        // dropped) and is given back: a store that is down costs one retry
        // budget here, not one per FAN_OUT prefixes.
        block_on(
            futures::stream::iter(stale)
                .map(|(prefix, cached)| async move {
                    let raw = self.list_once(&prefix).await?;
                    Ok::<_, io::Error>((prefix, cached, raw))
                })
                .buffer_unordered(FAN_OUT)
                .try_for_each(|(prefix, cached, raw)| async move {
                    let listing = Arc::new(self.settle(raw, cached.as_deref()));
                    self.keep_listing(prefix, listing);
                    Ok(())
                }),
        )?
    }

    /// Keeps `listing` unless one asked for later is already kept (a slow
    /// answer must not replace a newer one).
    fn keep_listing(&self, prefix: String, listing: Arc<Listing>) {
        let weight = listing.weight() + prefix.len() as u64;
        let mut listings = self.listings.lock();
        if listings
            .get(&prefix)
            .is_some_and(|kept| kept.fetched > listing.fetched)
        {
            return;
        }
        listings.put(prefix, listing, weight);
    }

    fn fetch_listing(&self, prefix: &str, cached: Option<&Listing>) -> io::Result<Arc<Listing>> {
        let raw = block_on(self.list_once(prefix))??;
        Ok(Arc::new(self.settle(raw, cached)))
    }

    /// One `LIST`: a page per thousand keys, up to [`LISTED_MAX`] names,
    /// no page asked for after [`LISTING_TIME_MAX`], and failing past
    /// [`LISTING_HARD_MAX`].
    async fn list_once(&self, prefix: &str) -> io::Result<RawListing> {
        tokio::time::timeout(LISTING_HARD_MAX, self.list_pages(prefix))
            .await
            .unwrap_or_else(|_| {
                Err(RemoteFailure::unavailable(format!(
                    "{prefix}: the listing took longer than {} s",
                    LISTING_HARD_MAX.as_secs()
                )))
            })
    }

    async fn list_pages(&self, prefix: &str) -> io::Result<RawListing> {
        use object_store::list::{PaginatedListOptions, PaginatedListStore};
        let key = match prefix {
            "" => None,
            prefix => Some(key_path(prefix)?),
        };
        let below = key.as_ref().map(|k| format!("{k}/"));
        let mut raw = RawListing::new();
        let (mut page_token, mut pages) = (None, 0);
        loop {
            let options = PaginatedListOptions {
                delimiter: Some("/".into()),
                page_token: page_token.clone(),
                ..PaginatedListOptions::default()
            };
            let page = self
                .lister
                .list_paginated(below.as_deref(), options)
                .await
                .map_err(|e| failure(prefix, e))?;
            raw.add(key.as_ref(), page.result);
            pages += 1;
            let next = page.page_token;
            if next.is_none() || raw.truncated {
                return Ok(raw);
            }
            // Keys cut out of pages (see `list_page.rs`) count too: the
            // pages are bounded, not only the names kept. A server that
            // hands the same token back is not listed forever, nor one
            // that takes minutes over it.
            if pages >= LISTED_PAGES_MAX
                || next == page_token
                || raw.asked.elapsed() > LISTING_TIME_MAX
            {
                raw.truncated = true;
                return Ok(raw);
            }
            page_token = next;
        }
    }

    /// A fresh listing, keeping the generation of `cached` when nothing
    /// in it changed.
    fn settle(&self, raw: RawListing, cached: Option<&Listing>) -> Listing {
        // Compared whole, not by a digest: whoever writes keys could make
        // two listings with one digest and hide a change behind it.
        let generation = match cached {
            Some(c)
                if c.dirs == raw.dirs && c.files == raw.files && c.truncated == raw.truncated =>
            {
                c.generation
            }
            _ => self.generations.fetch_add(1, Ordering::Relaxed) + 1,
        };
        Listing {
            fetched: raw.asked,
            generation,
            weight: raw.weight,
            dirs: raw.dirs,
            files: raw.files,
            truncated: raw.truncated,
        }
    }

    /// Forgets every listing at or below `prefix`, so the next question
    /// lists again (a refresh).
    pub fn forget_below(&self, prefix: &str) {
        let mut listings = self.listings.lock();
        let below: Vec<String> = listings
            .keys()
            .filter(|key| {
                prefix.is_empty()
                    || key.as_str() == prefix
                    || key.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'))
            })
            .cloned()
            .collect();
        for key in below {
            listings.pop(&key);
        }
    }
}

struct RawListing {
    /// When the first page was asked for.
    asked: Instant,
    dirs: BTreeSet<String>,
    files: BTreeMap<String, ObjectInfo>,
    /// What the names held so far weigh (as [`Listing::weight`] counts).
    weight: u64,
    truncated: bool,
}

impl RawListing {
    /// An empty listing, asked for now.
    fn new() -> RawListing {
        RawListing {
            asked: Instant::now(),
            dirs: BTreeSet::new(),
            files: BTreeMap::new(),
            weight: ENTRY_WEIGHT,
            truncated: false,
        }
    }

    /// Whether one more entry weighing `weight` fits the listing's bounds;
    /// if not, the listing is `truncated` from here on.
    fn room_for(&mut self, weight: u64) -> bool {
        let full = self.dirs.len() + self.files.len() >= LISTED_MAX
            || self.weight + weight > LISTED_BYTES_MAX;
        if full {
            self.truncated = true;
            return false;
        }
        self.weight += weight;
        true
    }

    /// Adds one page of the listing of `key` (`None`: the bucket's root),
    /// up to the listing's bounds (past them it is `truncated`).
    fn add(&mut self, key: Option<&KeyPath>, page: object_store::ListResult) {
        for dir in page.common_prefixes {
            if let Some(name) = dir.filename() {
                if !self.room_for(name.len() as u64 + ENTRY_WEIGHT) {
                    return;
                }
                self.dirs.insert(name.to_string());
            }
        }
        for object in page.objects {
            // A "folder" marker (the key `prefix/`) is the directory
            // itself, not a file in it.
            if key == Some(&object.location) {
                continue;
            }
            let Some(name) = object.location.filename() else {
                continue;
            };
            let etag = object.e_tag.as_ref().map_or(0, String::len);
            if !self.room_for((name.len() + etag) as u64 + 2 * ENTRY_WEIGHT) {
                return;
            }
            let modified = (
                object.last_modified.timestamp(),
                i64::from(object.last_modified.timestamp_subsec_nanos()),
            );
            self.files.insert(
                name.to_string(),
                ObjectInfo {
                    size: object.size,
                    etag: object.e_tag,
                    modified,
                },
            );
        }
    }
}

/// A listing that failed, and when: handed to the readers that waited for
/// it.
#[derive(Debug)]
pub(super) struct Failed {
    at: Instant,
    error: io::Error,
}

/// The same failure once more (`io::Error` is not `Clone`), keeping what
/// gives it its code: the remote failure, or the kind and system error. A
/// store's failure handed on counts for the answer of the reader it is
/// handed to, which met it as surely as the one that asked.
fn again(error: &io::Error) -> io::Error {
    if let Some(RemoteFailure::Unavailable(message)) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<RemoteFailure>())
    {
        return RemoteFailure::unavailable(message.clone());
    }
    match (error.raw_os_error(), error.get_ref()) {
        (Some(raw), _) => io::Error::from_raw_os_error(raw),
        (None, Some(inner)) => io::Error::new(error.kind(), inner.to_string()),
        (None, None) => io::Error::from(error.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::config;
    use super::*;

    #[test]
    fn a_listing_keeps_names_up_to_its_bytes_bound_and_says_it_stopped() {
        let long = "n".repeat(1_000);
        let page = |from: usize, n: usize| object_store::ListResult {
            common_prefixes: (from..from + n)
                .map(|i| KeyPath::from(format!("wh/{i:05}{long}")))
                .collect(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        let wh = KeyPath::from("wh");
        let mut raw = RawListing::new();
        raw.add(Some(&wh), page(0, 1_000));
        assert!(!raw.truncated);
        for first in (1_000..40_000).step_by(1_000) {
            raw.add(Some(&wh), page(first, 1_000));
        }
        assert!(raw.truncated);
        let each = 1_005 + ENTRY_WEIGHT;
        assert_eq!(
            raw.dirs.len() as u64,
            (LISTED_BYTES_MAX - ENTRY_WEIGHT) / each
        );
        assert!(raw.weight <= LISTED_BYTES_MAX);
    }

    #[test]
    fn readers_waiting_for_a_failed_listing_share_its_failure() {
        use std::io::{Read, Write};
        // A store answering every request 503: one listing is sent
        // MAX_RETRIES + 1 times before it fails.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = stream.read(&mut [0; 8192]);
                    let _ = stream.write_all(
                        b"HTTP/1.1 503 Slow Down\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                });
            }
        });
        let settings = config::Settings::for_endpoint(&endpoint, "id", "secret", "us-east-1");
        let bucket = Arc::new(Bucket::new("down", &settings).unwrap());
        let readers = 6;
        let start = Arc::new(std::sync::Barrier::new(readers));
        let waiting: Vec<_> = (0..readers)
            .map(|_| {
                let (bucket, start) = (Arc::clone(&bucket), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    bucket.listing("wh").unwrap_err()
                })
            })
            .collect();
        for reader in waiting {
            let error = reader.join().unwrap();
            assert!(
                matches!(
                    error
                        .get_ref()
                        .and_then(|e| e.downcast_ref::<RemoteFailure>()),
                    Some(RemoteFailure::Unavailable(_))
                ),
                "{error:?}"
            );
        }
        // One round of retries, two if a reader came late: never one per
        // reader.
        let round = (config::MAX_RETRIES + 1) as u64;
        let sent = bucket.requests().lists;
        assert!(
            (round..=2 * round).contains(&sent),
            "{sent} LISTs for {readers} readers (a round is {round})"
        );
    }
}
