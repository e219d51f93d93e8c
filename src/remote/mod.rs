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
//! changes only when a new listing differs (a name, a size, an ETag, a
//! last-modified time), so everything the catalog derived from it stays
//! valid across re-listings that find nothing new.
//!
//! A file's identity is its key, size and ETag: the inode number shown for
//! it is derived from all three, and every read of it is a ranged `GET`
//! conditional on that ETag, so a file replaced while it is read answers
//! `ESTALE`, never a mix of two versions. Small metadata files (manifests,
//! pointers, `indexes.json`) are kept by ETag once read, so re-listing an
//! unchanged warehouse reads no object again.
//!
//! A key that cannot be a path (an empty, `.` or `..` component, an
//! ASCII control character, a leading `/`, a component longer than a
//! local name can be) is left out of its listing
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
mod listing;
pub mod location;
mod object;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as KeyPath;
use object_store::{GetOptions, ObjectStore};
use parking_lot::Mutex;

pub use http::{RequestCounts, Requests};
use kept::Kept;
pub use listing::{
    DEFAULT_LISTING_TTL, LISTED_BYTES_MAX, LISTED_MAX, LISTED_PAGES_MAX, LISTING_TIME_MAX, Listing,
    WalkHold, hold_listings, set_listing_ttl,
};
use listing::{ENTRY_WEIGHT, Failed, LISTINGS_KEPT};
pub use location::{Location, SCHEME, is_remote, join_key};
pub use object::RemoteFile;

use crate::error::RemoteFailure;
use crate::warehouse::Stat;

/// Bytes of small objects kept by ETag per bucket, and the largest kept.
const CONTENTS_KEPT: u64 = 64 << 20;
const CONTENT_KEPT_MAX: u64 = 1 << 20;
/// The permissions every remote entry shows, owned by the user and group
/// the process runs as: the store is read with this process's
/// credentials, so through a mount shared with `--allow-other` only that
/// user and group may read what those credentials reach, never everyone.
pub const REMOTE_DIR_MODE: u32 = 0o550;
pub const REMOTE_FILE_MODE: u32 = 0o440;
/// Requests one operation sends at once (a listing's children's listings,
/// their manifests).
pub const FAN_OUT: usize = 16;

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
    let future = InAnswer::new(future);
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

/// A future that works for the answer being built where it was made: a
/// store's failure met while it runs counts for that answer, whichever
/// thread polls it (see [`crate::error::FailureWatch`]).
pub(crate) struct InAnswer<F> {
    answer: crate::error::Answer,
    future: std::pin::Pin<Box<F>>,
}

impl<F: std::future::Future> InAnswer<F> {
    pub(crate) fn new(future: F) -> InAnswer<F> {
        InAnswer {
            answer: crate::error::Answer::current(),
            future: Box::pin(future),
        }
    }
}

impl<F: std::future::Future> std::future::Future for InAnswer<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.get_mut();
        let _in = this.answer.enter();
        this.future.as_mut().poll(cx)
    }
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub size: u64,
    pub etag: Option<String>,
    /// Last modified, seconds and nanoseconds since the epoch.
    pub modified: (i64, i64),
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
    /// A turn per prefix being listed, holding the last failure (see
    /// [`Bucket::listing`]).
    flights: Mutex<HashMap<String, Arc<Mutex<Option<Failed>>>>>,
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
    /// once, until the store fails (an object replaced or gone since it was
    /// listed is left for the caller's own read to meet).
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
        let _ = block_on(
            futures::stream::iter(jobs)
                .map(|(key, info)| async move {
                    match self.fetch_small(&key, &info).await {
                        Err(e) if crate::error::is_remote_failure(&e) => Err(e),
                        _ => Ok(()),
                    }
                })
                .buffer_unordered(FAN_OUT)
                .try_for_each(|()| async { Ok(()) }),
        );
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
        let bytes = self.get(key, info.size, options).await?;
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

    /// One `GET` of `key` with `options`, its whole body, refused
    /// (`ESTALE`) unless the answer is of the version listed, `size` bytes
    /// long in all and with the ETag asked for when it names one: a store
    /// that ignores `If-Match` must not mix two versions of a file.
    async fn get(&self, key: &str, size: u64, options: GetOptions) -> io::Result<Bytes> {
        let path = key_path(key)?;
        let asked = options.if_match.clone();
        let result = self
            .store
            .get_opts(&path, options)
            .await
            .map_err(|e| object_failure(key, e))?;
        let answered = result.meta.e_tag.as_deref();
        let same_etag = match (asked.as_deref(), answered) {
            (Some(asked), Some(answered)) => bare_etag(asked) == bare_etag(answered),
            _ => true,
        };
        if result.meta.size != size || !same_etag {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        result.bytes().await.map_err(|e| failure(key, e))
    }

    /// The bytes `range` of the object `key` in its version `etag`, `size`
    /// bytes long in all.
    pub(crate) async fn read_range(
        &self,
        key: &str,
        etag: Option<&str>,
        size: u64,
        range: std::ops::Range<u64>,
    ) -> io::Result<Bytes> {
        let expected = range.end - range.start;
        let options = GetOptions {
            if_match: etag.map(str::to_string),
            range: Some(object_store::GetRange::Bounded(range)),
            ..GetOptions::default()
        };
        let bytes = self.get(key, size, options).await?;
        if bytes.len() as u64 != expected {
            return Err(RemoteFailure::unavailable(format!(
                "{key}: {} bytes came back for a read of {expected}",
                bytes.len()
            )));
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
            mode: libc::S_IFDIR | REMOTE_DIR_MODE,
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
            mode: libc::S_IFREG | REMOTE_FILE_MODE,
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
        e => RemoteFailure::unavailable(format!("{key}: {}", shown(&e.to_string()))),
    }
}

/// A failure of the store to read the object `key`: as [`failure`], but
/// an answer refusing this one object (see [`refusal`]) makes the object
/// unreadable (`EACCES`), not the store unavailable.
pub fn object_failure(key: &str, e: object_store::Error) -> io::Error {
    match refusal(&e) {
        Some(why) => RemoteFailure::denied(format!(
            "{key}: the object store refuses to read this object ({why}; an archived \
             storage class, SSE-C or KMS encryption, or a policy)"
        )),
        None => failure(key, e),
    }
}

/// The S3 error codes that refuse the credentials, not one object: a
/// request answered with one of them says nothing of the object it asked
/// for, and the store stays unavailable.
const CREDENTIALS_REFUSED: &[&str] = &[
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AuthorizationHeaderMalformed",
    "AccountProblem",
    "AllAccessDisabled",
    "RequestTimeTooSkewed",
    "MissingSecurityHeader",
];

/// Why the store refused to read one object, when it did: a `403` or a
/// `400` (an archived object, an SSE-C object read without its key, a KMS
/// key the credentials may not use, a policy on the key) whose S3 error
/// code does not refuse the credentials themselves. `None` for any other
/// failure.
pub fn refusal(e: &object_store::Error) -> Option<String> {
    let text = e.to_string();
    let status = match e {
        object_store::Error::PermissionDenied { .. } => 403,
        // object_store gives a 400 no variant of its own; its message
        // names the status.
        object_store::Error::Generic { .. } if text.contains("non-2xx status code: 400 ") => 400,
        _ => return None,
    };
    let code = xml_field(&text, "Code");
    if code.is_some_and(|code| CREDENTIALS_REFUSED.contains(&code)) {
        return None;
    }
    let mut why = format!("HTTP {status}");
    for part in [code, xml_field(&text, "Message")].into_iter().flatten() {
        why.push_str(": ");
        why.push_str(&shown(part));
    }
    Some(why)
}

/// The text of the first `<NAME>…</NAME>` of an S3 error body.
fn xml_field<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&format!("</{name}>"))?;
    Some(&text[start..start + len])
}

/// An ETag without its quotes or weak mark (stores differ in how they
/// write the same one in a listing and in an answer).
fn bare_etag(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_object_is_told_from_refused_credentials() {
        let refused = |body: &str| {
            refusal(&object_store::Error::PermissionDenied {
                path: "wh/a.jsonl".into(),
                source: format!("Server returned non-2xx status code: 403 Forbidden: {body}")
                    .into(),
            })
        };
        assert_eq!(
            refused("<Error><Code>InvalidObjectState</Code><Message>archived</Message></Error>")
                .as_deref(),
            Some("HTTP 403: InvalidObjectState: archived")
        );
        assert_eq!(refused("").as_deref(), Some("HTTP 403"));
        assert_eq!(
            refused("<Error><Code>InvalidAccessKeyId</Code></Error>"),
            None
        );
        let bad_request = |body: &str| object_store::Error::Generic {
            store: "S3",
            source: format!("Server returned non-2xx status code: 400 Bad Request: {body}").into(),
        };
        assert_eq!(
            refusal(&bad_request("<Code>InvalidRequest</Code>")).as_deref(),
            Some("HTTP 400: InvalidRequest")
        );
        assert_eq!(
            refusal(&bad_request("<Code>AuthorizationHeaderMalformed</Code>")),
            None
        );
        let unavailable = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 503 Service Unavailable".into(),
        };
        assert_eq!(refusal(&unavailable), None);
    }

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
