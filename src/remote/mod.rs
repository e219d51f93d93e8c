//! Warehouses on S3-compatible object storage (`s3://bucket/prefix`),
//! read only, through `object_store` (the client Lance reads with).
//!
//! A remote warehouse answers the questions a local one answers through
//! [`crate::warehouse::Dir`]: what is in a directory, what an entry is,
//! the bytes of a file. Object storage has no directories, so a directory
//! is a key prefix and its listing is one `LIST` with `/` as delimiter
//! ([`Bucket::listing`]): the common prefixes are its subdirectories, the
//! objects its files. A listing is kept for the listing TTL and then asked
//! again; a directory's identity is the generation of its listing, which
//! changes only when a new listing differs (a name, a size or an ETag), so
//! everything the catalog derived from it stays valid across re-listings
//! that find nothing new.
//!
//! A file's identity is its key, size and ETag: the inode number shown for
//! it is derived from all three, and every read of it is a ranged `GET`
//! conditional on that ETag, so a file replaced while it is read answers
//! `ESTALE`, never a mix of two versions. Small metadata files (manifests,
//! pointers, `indexes.json`) are kept by ETag once read, so re-listing an
//! unchanged warehouse reads no object again.
//!
//! A key that cannot be a path (an empty, `.` or `..` component, a
//! control character, a leading `/`) is left out of its listing
//! with a warning (`list_page.rs`), as a local name that cannot be shown
//! is: a directory whose every key is such shows empty.
//!
//! Nothing is ever written remotely: every write answers
//! [`RemoteFailure::ReadOnly`](crate::error::RemoteFailure).
//!
//! Requests are retried a few times with a short backoff and then fail
//! with `PCHRONICLE_REMOTE_UNAVAILABLE` (`EIO` in a mount), so a dead
//! server costs a reader about a second, not minutes.

pub mod config;
mod crypto;
pub mod http;
mod kept;
mod list_page;
pub mod location;
mod object;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as KeyPath;
use object_store::{GetOptions, ObjectStore};
use parking_lot::Mutex;

pub use http::{RequestCounts, Requests};
use kept::Kept;
pub use location::{Location, SCHEME, is_remote, join_key};
pub use object::RemoteFile;

use crate::error::RemoteFailure;
use crate::warehouse::Stat;

/// How long a listing is trusted before it is asked again, unless set
/// with [`set_listing_ttl`] (a mount sets its attribute TTL).
pub const DEFAULT_LISTING_TTL: Duration = Duration::from_secs(1);
/// Bytes of listings kept per bucket (names, ETags and their maps).
const LISTINGS_KEPT: u64 = 256 << 20;
/// Bytes of small objects kept by ETag per bucket, and the largest kept.
const CONTENTS_KEPT: u64 = 64 << 20;
const CONTENT_KEPT_MAX: u64 = 1 << 20;
/// The most names one listing holds (a directory of millions of keys
/// costs a thousand pages, not thousands): the catalog's own bound on a
/// directory is lower.
pub const LISTED_MAX: usize = 200_000;
/// The most pages one listing reads (a page holds at most 1,000 keys,
/// those kept and those cut out).
const LISTED_PAGES_MAX: usize = 250;
/// Requests one operation sends at once (a listing's children's listings,
/// their manifests).
pub const FAN_OUT: usize = 16;

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

/// The runtime and the buckets of this process. A fork (a daemon going to
/// the background) leaves the runtime's threads behind, so both are made
/// again in a process that did not make them.
struct Registry {
    pid: u32,
    runtime: Arc<tokio::runtime::Runtime>,
    buckets: HashMap<String, Arc<Bucket>>,
}

static REGISTRY: OnceLock<Mutex<Option<Registry>>> = OnceLock::new();

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> io::Result<T>) -> io::Result<T> {
    let mut registry = REGISTRY.get_or_init(|| Mutex::new(None)).lock();
    let pid = std::process::id();
    if registry.as_ref().is_none_or(|r| r.pid != pid) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("pchronicle-s3")
            .enable_all()
            .build()?;
        *registry = Some(Registry {
            pid,
            runtime: Arc::new(runtime),
            buckets: HashMap::new(),
        });
    }
    f(registry.as_mut().expect("made above"))
}

/// Runs `future` to completion on the remote runtime. Called from inside
/// another runtime (a SQL table scanned by DataFusion asks the catalog),
/// it waits on a thread of its own, since a runtime cannot block its own
/// workers.
pub fn block_on<F>(future: F) -> io::Result<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let runtime = with_registry(|r| Ok(Arc::clone(&r.runtime)))?;
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(runtime.block_on(future));
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| runtime.block_on(future))
            .join()
            .map_err(|_| io::Error::other("a remote request's thread panicked"))
    })
}

/// Settings given by the embedding program instead of the environment.
static SETTINGS: Mutex<Option<config::Settings>> = Mutex::new(None);

/// Makes every bucket not yet used in this process use `settings` instead
/// of the environment (a program embedding the library, tests).
pub fn configure(settings: config::Settings) {
    *SETTINGS.lock() = Some(settings);
}

/// The bucket `name`, its client made on first use from the settings given
/// to [`configure`], else from the environment.
pub fn bucket(name: &str) -> io::Result<Arc<Bucket>> {
    with_registry(|registry| {
        if let Some(bucket) = registry.buckets.get(name) {
            return Ok(Arc::clone(bucket));
        }
        let given = SETTINGS.lock().clone();
        let settings = match given {
            Some(settings) => settings,
            None => config::Settings::from_environment()?,
        };
        let bucket = Arc::new(Bucket::new(name, &settings)?);
        registry
            .buckets
            .insert(name.to_string(), Arc::clone(&bucket));
        Ok(bucket)
    })
}

/// The bucket `name` if this process already opened a warehouse in it:
/// what is handed to Lance, which must read nowhere else.
pub fn opened_bucket(name: &str) -> Option<Arc<Bucket>> {
    with_registry(|registry| Ok(registry.buckets.get(name).cloned()))
        .ok()
        .flatten()
}

/// What a listing says about one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectInfo {
    pub size: u64,
    pub etag: Option<String>,
    /// Last modified, seconds and nanoseconds since the epoch.
    pub modified: (i64, i64),
}

/// One level of a prefix: its subdirectories and its files.
#[derive(Debug)]
pub struct Listing {
    /// When it was asked for (its TTL counts from then).
    fetched: Instant,
    digest: u64,
    /// Changes only when the content of the listing does.
    pub generation: u64,
    pub dirs: BTreeSet<String>,
    pub files: BTreeMap<String, ObjectInfo>,
    /// More names were there than [`LISTED_MAX`]: the listing holds the
    /// first in key order.
    pub truncated: bool,
}

/// What an entry of a cache weighs beyond its names and bytes (the maps'
/// own nodes, the strings' headers).
const ENTRY_WEIGHT: u64 = 128;

impl Listing {
    /// About the bytes the listing holds.
    fn weight(&self) -> u64 {
        let dirs: u64 = self
            .dirs
            .iter()
            .map(|d| d.len() as u64 + ENTRY_WEIGHT)
            .sum();
        let files: u64 = self
            .files
            .iter()
            .map(|(name, info)| {
                let etag = info.etag.as_ref().map_or(0, String::len);
                (name.len() + etag) as u64 + 2 * ENTRY_WEIGHT
            })
            .sum();
        ENTRY_WEIGHT + dirs + files
    }

    /// Whether the listing holds anything at all.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.files.is_empty()
    }
}

/// One bucket: its store (shared with Lance), the requests sent to it,
/// and what was learnt of it.
pub struct Bucket {
    pub name: String,
    pub store: Arc<dyn ObjectStore>,
    /// The same client, for listings page by page.
    lister: Arc<object_store::aws::AmazonS3>,
    pub requests: Arc<Requests>,
    /// The device number every entry of this bucket shows.
    dev: u64,
    listings: Mutex<Kept<String, Arc<Listing>>>,
    contents: Mutex<Kept<(String, String), Bytes>>,
    /// A lock per prefix being listed (see [`Bucket::listing`]).
    flights: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    generations: AtomicU64,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("name", &self.name).finish()
    }
}

impl Bucket {
    fn new(name: &str, settings: &config::Settings) -> io::Result<Bucket> {
        let requests = Arc::new(Requests::default());
        let client = Arc::new(settings.build(name, Arc::clone(&requests))?);
        Ok(Bucket {
            name: name.to_string(),
            store: Arc::clone(&client) as Arc<dyn ObjectStore>,
            lister: client,
            requests,
            dev: dev_of(&settings.endpoint_or_default(), name),
            listings: Mutex::new(Kept::new(LISTINGS_KEPT)),
            contents: Mutex::new(Kept::new(CONTENTS_KEPT)),
            flights: Mutex::new(HashMap::new()),
            generations: AtomicU64::new(0),
        })
    }

    /// The requests sent so far.
    pub fn requests(&self) -> RequestCounts {
        self.requests.snapshot()
    }

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
        // same listing expired wait for the first one's answer.
        let flight = Arc::clone(self.flights.lock().entry(prefix.to_string()).or_default());
        let result = {
            let _turn = flight.lock();
            fresh().or_else(|cached| {
                let listing = self.fetch_listing(prefix, cached.as_deref())?;
                self.keep_listing(prefix.to_string(), Arc::clone(&listing));
                Ok(listing)
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
    /// [`FAN_OUT`] at once (errors are left for the caller's own listing
    /// to meet).
    pub fn prefetch_listings(&self, prefixes: Vec<String>) {
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
            return;
        }
        // Each listing is kept as it comes, not all of them held first.
        let _ = block_on(
            futures::stream::iter(stale)
                .map(|(prefix, cached)| async move {
                    let result = self.list_once(&prefix).await;
                    (prefix, cached, result)
                })
                .buffer_unordered(FAN_OUT)
                .for_each(|(prefix, cached, result)| async move {
                    if let Ok(raw) = result {
                        let listing = Arc::new(self.settle(raw, cached.as_deref()));
                        self.keep_listing(prefix, listing);
                    }
                }),
        );
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

    /// One `LIST`: a page per thousand keys, up to [`LISTED_MAX`] names.
    async fn list_once(&self, prefix: &str) -> io::Result<RawListing> {
        use object_store::list::{PaginatedListOptions, PaginatedListStore};
        let key = match prefix {
            "" => None,
            prefix => Some(key_path(prefix)?),
        };
        let below = key.as_ref().map(|k| format!("{k}/"));
        let mut raw = RawListing {
            asked: Instant::now(),
            dirs: BTreeSet::new(),
            files: BTreeMap::new(),
            truncated: false,
        };
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
            if next.is_none() {
                return Ok(raw);
            }
            // Keys cut out of pages (see `list_page.rs`) count too: the
            // pages are bounded, not only the names kept. A server that
            // hands the same token back is not listed forever.
            if raw.dirs.len() + raw.files.len() >= LISTED_MAX
                || pages >= LISTED_PAGES_MAX
                || next == page_token
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
        let digest = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            raw.dirs.hash(&mut h);
            raw.files.hash(&mut h);
            raw.truncated.hash(&mut h);
            h.finish()
        };
        let generation = match cached {
            Some(c) if c.digest == digest => c.generation,
            _ => self.generations.fetch_add(1, Ordering::Relaxed) + 1,
        };
        Listing {
            fetched: raw.asked,
            digest,
            generation,
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

    /// The whole object `key`, as listed (`info`), at most `cap` bytes:
    /// from memory when this very version was read before. `Ok(None)`:
    /// larger than `cap`.
    pub fn read_small(&self, key: &str, info: &ObjectInfo, cap: u64) -> io::Result<Option<Bytes>> {
        if info.size > cap {
            return Ok(None);
        }
        if let Some(bytes) = self.kept(key, info) {
            return Ok(Some(bytes));
        }
        block_on(self.fetch_small(key, info))?.map(Some)
    }

    /// Reads the small objects `jobs` not yet kept, at most [`FAN_OUT`] at
    /// once (errors are left for the caller's own read to meet).
    pub fn prefetch_small(&self, jobs: Vec<(String, ObjectInfo)>) {
        let jobs: Vec<_> = jobs
            .into_iter()
            .filter(|(key, info)| {
                info.etag.is_some()
                    && info.size <= CONTENT_KEPT_MAX
                    && self.kept(key, info).is_none()
            })
            .collect();
        if jobs.len() < 2 {
            return;
        }
        let _ = fan_out(jobs, |(key, info)| async move {
            let _ = self.fetch_small(&key, &info).await;
        });
    }

    /// The bytes of this very version of `key`, when kept.
    fn kept(&self, key: &str, info: &ObjectInfo) -> Option<Bytes> {
        let etag = info.etag.clone()?;
        self.contents.lock().get(&(key.to_string(), etag)).cloned()
    }

    /// One `GET` of the whole object, conditional on the listed ETag; kept
    /// when small.
    async fn fetch_small(&self, key: &str, info: &ObjectInfo) -> io::Result<Bytes> {
        let options = GetOptions {
            if_match: info.etag.clone(),
            ..GetOptions::default()
        };
        let bytes = self.get(key, options).await?;
        if bytes.len() as u64 != info.size {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        if let (Some(etag), true) = (&info.etag, info.size <= CONTENT_KEPT_MAX) {
            let weight = (key.len() + etag.len() + bytes.len()) as u64 + ENTRY_WEIGHT;
            self.contents
                .lock()
                .put((key.to_string(), etag.clone()), bytes.clone(), weight);
        }
        Ok(bytes)
    }

    /// One `GET` of `key` with `options`, its whole body.
    async fn get(&self, key: &str, options: GetOptions) -> io::Result<Bytes> {
        let path = key_path(key)?;
        async {
            let result = self.store.get_opts(&path, options).await?;
            result.bytes().await
        }
        .await
        .map_err(|e| failure(key, e))
    }

    /// The bytes `range` of the object `key` in its version `etag`.
    pub(crate) async fn read_range(
        &self,
        key: &str,
        etag: Option<&str>,
        range: std::ops::Range<u64>,
    ) -> io::Result<Bytes> {
        let expected = range.end - range.start;
        let options = GetOptions {
            if_match: etag.map(str::to_string),
            range: Some(object_store::GetRange::Bounded(range)),
            ..GetOptions::default()
        };
        let bytes = self.get(key, options).await?;
        if bytes.len() as u64 != expected {
            return Err(RemoteFailure::Unavailable(format!(
                "{key}: {} bytes came back for a read of {expected}",
                bytes.len()
            ))
            .into_io());
        }
        Ok(bytes)
    }

    /// The stat a directory (`prefix`, as listed) shows. Its change time is
    /// its listing's generation, so the catalog's caches hold exactly as
    /// long as the listing does not change.
    pub fn dir_stat(&self, prefix: &str, listing: &Listing) -> Stat {
        let newest = listing
            .files
            .values()
            .map(|f| f.modified)
            .max()
            .unwrap_or((0, 0));
        Stat {
            dev: self.dev,
            ino: inode_of(&[prefix.as_bytes(), b"/"]),
            mode: libc::S_IFDIR | 0o555,
            nlink: 2,
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            size: 0,
            blksize: 4096,
            blocks: 0,
            atime: newest.0,
            atime_nsec: newest.1,
            mtime: newest.0,
            mtime_nsec: newest.1,
            ctime: 0,
            ctime_nsec: listing.generation as i64,
        }
    }

    /// The stat a file shows: its inode number names the key and the
    /// version (size and ETag), so a replaced object is another file.
    pub fn file_stat(&self, key: &str, info: &ObjectInfo) -> Stat {
        let etag = info.etag.as_deref().unwrap_or("");
        Stat {
            dev: self.dev,
            ino: inode_of(&[
                key.as_bytes(),
                b"\0",
                etag.as_bytes(),
                &info.size.to_le_bytes(),
            ]),
            mode: libc::S_IFREG | 0o444,
            nlink: 1,
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            size: info.size,
            blksize: 4096,
            blocks: info.size.div_ceil(512),
            atime: info.modified.0,
            atime_nsec: info.modified.1,
            mtime: info.modified.0,
            mtime_nsec: info.modified.1,
            ctime: info.modified.0,
            ctime_nsec: info.modified.1,
        }
    }
}

struct RawListing {
    /// When the first page was asked for.
    asked: Instant,
    dirs: BTreeSet<String>,
    files: BTreeMap<String, ObjectInfo>,
    truncated: bool,
}

impl RawListing {
    /// Adds one page of the listing of `key` (`None`: the bucket's root).
    fn add(&mut self, key: Option<&KeyPath>, page: object_store::ListResult) {
        for dir in page.common_prefixes {
            if let Some(name) = dir.filename() {
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

/// The object key `key`, its components as they are (never re-encoded):
/// a key with an empty, `.` or `..` component or a control character is
/// refused, as `object_store` refuses it in a listing.
pub fn key_path(key: &str) -> io::Result<KeyPath> {
    KeyPath::parse(key).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// A failure of the store about `key`, as the `io::Error` the warehouse
/// surface returns: a missing object is `NotFound`, a version that changed
/// is `ESTALE`, anything else `PCHRONICLE_REMOTE_UNAVAILABLE`.
pub fn failure(key: &str, e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => io::Error::from(io::ErrorKind::NotFound),
        object_store::Error::Precondition { .. } => io::Error::from_raw_os_error(libc::ESTALE),
        e => RemoteFailure::Unavailable(format!("{key}: {}", shown(&e.to_string()))).into_io(),
    }
}

/// A message that carries a server's answer, for a terminal or a log: its
/// control characters escaped, and at most [`SHOWN_MAX`] characters.
fn shown(message: &str) -> String {
    const SHOWN_MAX: usize = 600;
    let mut out: String = message
        .chars()
        .take(SHOWN_MAX)
        .flat_map(|c| match c {
            c if c.is_control() => c.escape_default().collect::<Vec<_>>(),
            c => vec![c],
        })
        .collect();
    if message.chars().count() > SHOWN_MAX {
        out.push('…');
    }
    out
}

/// A 64-bit number for an endpoint and bucket: the device every entry of
/// the bucket shows (the top bit set, away from local devices).
fn dev_of(endpoint: &str, bucket: &str) -> u64 {
    inode_of(&[endpoint.as_bytes(), b"\0", bucket.as_bytes()]) | 1 << 63
}

/// A stable 64-bit number for `parts` (SHA-256, first eight bytes; never
/// 0 or 1, which FUSE reserves).
fn inode_of(parts: &[&[u8]]) -> u64 {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let n = u64::from_le_bytes(digest[..8].try_into().expect("eight bytes"));
    n.max(2)
}

/// Sends at most `FAN_OUT` of `jobs` at once and gives their results in
/// the order of `jobs`.
pub fn fan_out<T, F, Fut>(jobs: Vec<T>, each: F) -> io::Result<Vec<Fut::Output>>
where
    T: Send,
    F: Fn(T) -> Fut + Send,
    Fut: std::future::Future + Send,
    Fut::Output: Send,
{
    block_on(
        futures::stream::iter(jobs)
            .map(each)
            .buffered(FAN_OUT)
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_answer_is_shown_escaped_and_short() {
        assert_eq!(
            shown("ok: 503\tSlow\n\u{1b}[2J"),
            "ok: 503\\tSlow\\n\\u{1b}[2J"
        );
        let long = "x".repeat(10_000);
        assert_eq!(shown(&long).chars().count(), 601);
    }
}
