//! What every request shares: the open warehouse, the answers kept for a
//! while, the bound on work in progress, and the shape of an answer.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::metrics::Metrics;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode, Result};

/// The bounds of `pchronicle serve`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests whose work runs at once.
    pub max_requests: usize,
    /// Requests waiting for one of those before `503`.
    pub max_waiting: usize,
    /// Longest a request waits for its answer before `503`.
    pub request_time: Duration,
    /// Longest a scan (runs, histograms) may go on: one that outlasts its
    /// request goes on for the next request of the same filters to join.
    pub scan_time: Duration,
    /// Bytes of one answer made from records (a query's rows, runs,
    /// histograms) at most.
    pub answer_bytes: usize,
    /// Rows `POST /api/query` returns at most.
    pub query_rows: u64,
    /// Longest a query may run.
    pub query_time: Duration,
    /// Memory one query's sorts, groupings and joins may hold.
    pub query_memory: usize,
    /// How long an answer is reused before the warehouse is looked at again.
    pub ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_requests: 16,
            max_waiting: 256,
            request_time: Duration::from_secs(60),
            scan_time: Duration::from_secs(300),
            answer_bytes: 64 << 20,
            query_rows: 10_000,
            query_time: Duration::from_secs(30),
            query_memory: 256 << 20,
            ttl: Duration::from_secs(2),
        }
    }
}

/// Answers kept, by request.
const ANSWERS_KEPT: usize = 1024;
/// Runs and histograms kept, by Snapshot fingerprint.
const TALLIES_KEPT: usize = 256;
/// The runs of this many selections kept, by Snapshot fingerprint.
const RUNS_KEPT: usize = 16;
/// Larger answers are not kept.
const KEEP_AT_MOST: usize = 8 << 20;
/// Bytes of answers kept at most, in each of the caches.
const KEPT_BYTES: usize = 128 << 20;

/// One answer, ready to send.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: &'static str,
    /// Shared, not copied, when a kept answer is given again.
    pub body: Bytes,
    /// Extra headers (`X-Next-Cursor`, the query's limits).
    pub headers: Vec<(&'static str, String)>,
    pub etag: String,
}

pub const JSON: &str = "application/json";
pub const JSON_LINES: &str = "application/x-ndjson";

impl Answer {
    pub fn ok(content_type: &'static str, body: Vec<u8>) -> Answer {
        let etag = etag_of(&body);
        Answer {
            status: StatusCode::OK,
            content_type,
            body: Bytes::from(body),
            headers: Vec::new(),
            etag,
        }
    }

    /// `{"code", "message", "fix"}` with the status the code stands for.
    pub fn error(e: &Error) -> Answer {
        let message = match &e.path {
            Some(path) => format!("{}: {}", path.display(), e.message),
            None => e.message.clone(),
        };
        let body = serde_json::json!({
            "code": e.code.as_str(),
            "message": message,
            "fix": e.code.fixup(),
        });
        let mut body = serde_json::to_vec_pretty(&body).expect("a JSON value serializes");
        body.push(b'\n');
        let mut answer = Answer::ok(JSON, body);
        answer.status = status_of(e);
        answer
    }

    /// This answer, or `304` when the client holds it already.
    pub fn to_response(&self, if_none_match: Option<&HeaderValue>) -> Response {
        self.clone().into_response_once(if_none_match)
    }

    /// [`Answer::to_response`] of an answer not kept: its body is handed
    /// over, not copied.
    pub fn into_response_once(self, if_none_match: Option<&HeaderValue>) -> Response {
        let etag = HeaderValue::from_str(&self.etag).expect("an ETag is hex in quotes");
        if self.status == StatusCode::OK && if_none_match.is_some_and(|v| v == etag) {
            return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
        }
        let mut response = (self.status, self.body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        if self.status == StatusCode::OK {
            headers.insert(header::ETAG, etag);
        }
        for (name, value) in &self.headers {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(*name, value);
            }
        }
        response
    }
}

/// A strong ETag of `body`.
pub fn etag_of(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// The HTTP status an error stands for.
fn status_of(e: &Error) -> StatusCode {
    match e.code {
        ErrorCode::FilterInvalid
        | ErrorCode::PathInvalid
        | ErrorCode::NameNotUtf8
        | ErrorCode::ServeRequestInvalid
        | ErrorCode::QueryInvalid
        | ErrorCode::QueryRefused
        | ErrorCode::TagInvalid => StatusCode::BAD_REQUEST,
        ErrorCode::QueryMemory => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::ServeUnauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::PathNotFound
        | ErrorCode::VersionNotFound
        | ErrorCode::TagNotFound
        | ErrorCode::RunNotFound => StatusCode::NOT_FOUND,
        ErrorCode::CursorInvalid => StatusCode::CONFLICT,
        ErrorCode::Busy | ErrorCode::AnswerLate | ErrorCode::RemoteUnavailable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        // A worker the query was spread over failed it.
        ErrorCode::WorkerUnavailable
        | ErrorCode::WorkerLost
        | ErrorCode::WorkerToken
        | ErrorCode::WorkerVersion
        | ErrorCode::WorkerRoot
        | ErrorCode::WorkerRefused => StatusCode::BAD_GATEWAY,
        ErrorCode::Io => match e.os_error {
            Some(libc::ENOENT | libc::ENOTDIR) => StatusCode::NOT_FOUND,
            Some(libc::EACCES | libc::EPERM) => StatusCode::FORBIDDEN,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The server's shared state.
pub struct Served {
    pub catalog: Arc<Catalog>,
    /// The served path, relative to the catalog's root.
    base: PathBuf,
    pub token: Option<String>,
    /// `Host` values a request may carry.
    pub hosts: Vec<String>,
    pub limits: Limits,
    pub metrics: Metrics,
    /// Signs the cursors this process hands out (`api.rs`), so only those
    /// are read from.
    pub cursor_key: String,
    answers: Mutex<Kept<(Instant, Arc<Answer>)>>,
    tallies: Mutex<Kept<Arc<Answer>>>,
    /// Every run of a selection, its pages cut from it.
    runs: Mutex<Kept<Arc<crate::extract::runs::Runs>>>,
    /// Runs being tallied, so a second request for them waits for them.
    pub runs_gates: super::runs::Gates,
    /// The Snapshot key each selection had when last planned, and when:
    /// within the TTL, a page is cut from its runs without planning again.
    runs_keys: Mutex<lru::LruCache<String, (Instant, String)>>,
    /// Answers made from the catalog's state.
    state_pool: Pool,
    /// Answers that read records.
    scan_pool: Pool,
    /// Scans being made, by request: a second request of the same joins.
    pub making: Mutex<std::collections::HashMap<String, Making>>,
}

/// A scan being made, shared by every request waiting for it.
pub type Making = futures::future::Shared<futures::future::BoxFuture<'static, Arc<Answer>>>;

/// Which work a request's answer is: each kind has places of its own, so
/// answers from the catalog's state never wait behind scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Listings, counted stats, sources: the catalog's state.
    State,
    /// Runs, histograms, records, queries: reads of records.
    Scan,
}

/// The places of one [`Lane`].
struct Pool {
    running: Arc<tokio::sync::Semaphore>,
    waiting: AtomicUsize,
}

impl Pool {
    fn new(places: usize) -> Pool {
        Pool {
            running: Arc::new(tokio::sync::Semaphore::new(places.max(1))),
            waiting: AtomicUsize::new(0),
        }
    }
}

impl Served {
    pub fn new(
        catalog: Catalog,
        base: PathBuf,
        token: Option<String>,
        local: SocketAddr,
        limits: Limits,
        cursor_key: String,
    ) -> Served {
        // A loopback server is what DNS rebinding reaches: it answers only
        // to its own names. Another address needs the token in a header,
        // which a page of another origin never has, and may be reached
        // by any name (a LAN address, a DNS name).
        let port = local.port();
        let mut hosts = Vec::new();
        if local.ip().is_loopback() {
            for name in ["localhost", "127.0.0.1", "[::1]"] {
                hosts.push(format!("{name}:{port}"));
                if port == 80 {
                    hosts.push(name.to_string());
                }
            }
            if let SocketAddr::V4(v4) = local {
                if v4.ip().octets() != [127, 0, 0, 1] {
                    hosts.push(format!("{}:{port}", v4.ip()));
                }
            }
        }
        Served {
            catalog: Arc::new(catalog),
            base,
            token,
            hosts,
            limits,
            metrics: Metrics::default(),
            cursor_key,
            answers: Mutex::new(Kept::new(ANSWERS_KEPT)),
            tallies: Mutex::new(Kept::new(TALLIES_KEPT)),
            runs: Mutex::new(Kept::new(RUNS_KEPT)),
            runs_gates: Default::default(),
            runs_keys: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(TALLIES_KEPT).expect("non-zero"),
            )),
            state_pool: Pool::new(limits.max_requests),
            scan_pool: Pool::new(limits.max_requests),
            making: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// A request's path (relative to the served root) relative to the
    /// catalog's root.
    pub fn rel(&self, path: &Path) -> PathBuf {
        match (self.base.as_os_str() == ".", path.as_os_str() == ".") {
            (true, _) => path.to_path_buf(),
            (false, true) => self.base.clone(),
            (false, false) => self.base.join(path),
        }
    }

    /// The answer to `key` given within the TTL, if any.
    pub fn recent(&self, key: &str) -> Option<Arc<Answer>> {
        let mut answers = self.answers.lock();
        match answers.lru.get(key) {
            Some(((at, answer), _)) if at.elapsed() < self.limits.ttl => {
                self.metrics.answer_kept(true);
                Some(Arc::clone(answer))
            }
            _ => {
                self.metrics.answer_kept(false);
                None
            }
        }
    }

    /// Keeps `answer` to `key` for the TTL (a successful one, not too large).
    pub fn keep(&self, key: String, answer: &Arc<Answer>) {
        if answer.status == StatusCode::OK && answer.body.len() <= KEEP_AT_MOST {
            let size = answer.body.len();
            self.answers
                .lock()
                .put(key, (Instant::now(), Arc::clone(answer)), size);
        }
    }

    /// A tally kept for a Snapshot fingerprint.
    pub fn tally(&self, key: &str) -> Option<Arc<Answer>> {
        let hit = self.tallies.lock().lru.get(key).map(|(v, _)| Arc::clone(v));
        self.metrics.tally_kept(hit.is_some());
        hit
    }

    pub fn keep_tally(&self, key: String, answer: &Arc<Answer>) {
        if answer.body.len() <= KEEP_AT_MOST {
            let size = answer.body.len();
            self.tallies.lock().put(key, Arc::clone(answer), size);
        }
    }

    /// The runs kept for a Snapshot fingerprint.
    pub fn runs_kept(&self, key: &str) -> Option<Arc<crate::extract::runs::Runs>> {
        let hit = self.runs.lock().lru.get(key).map(|(v, _)| Arc::clone(v));
        self.metrics.tally_kept(hit.is_some());
        hit
    }

    /// The Snapshot key `selection` had within the TTL, if it was planned
    /// then.
    pub fn runs_key_recent(&self, selection: &str) -> Option<String> {
        let mut keys = self.runs_keys.lock();
        match keys.get(selection) {
            Some((at, key)) if at.elapsed() < self.limits.ttl => Some(key.clone()),
            _ => None,
        }
    }

    /// Notes the Snapshot key `selection` had when planned at `planned`.
    pub fn note_runs_key(&self, selection: String, key: String, planned: Instant) {
        self.runs_keys.lock().put(selection, (planned, key));
    }

    /// Keeps `runs` unless they alone would pass the bound of the cache.
    pub fn keep_runs(&self, key: String, runs: &Arc<crate::extract::runs::Runs>) {
        let size = runs.weight();
        if size <= KEPT_BYTES {
            self.runs.lock().put(key, Arc::clone(runs), size);
        }
    }

    /// Runs `work` on a thread of its own, within the request's time,
    /// once one of the lane's `max_requests` places is free
    /// (`PCHRONICLE_BUSY` when too many already wait,
    /// `PCHRONICLE_ANSWER_LATE` past the time: the work is then stopped at
    /// its next read).
    pub async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        lane: Lane,
        what: &'static str,
        work: impl FnOnce(&Served) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.run_for(lane, self.limits.request_time, what, work)
            .await
    }

    /// [`Served::run`] within `budget`.
    pub async fn run_for<T: Send + 'static>(
        self: &Arc<Self>,
        lane: Lane,
        budget: Duration,
        what: &'static str,
        work: impl FnOnce(&Served) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let pool = match lane {
            Lane::State => &self.state_pool,
            Lane::Scan => &self.scan_pool,
        };
        let waiting = pool.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&pool.waiting);
        if waiting >= self.limits.max_waiting {
            return Err(Error::new(
                ErrorCode::Busy,
                format!("{waiting} requests are waiting already; try again shortly"),
            ));
        }
        // The place is held by the work, not by the request: work stopped
        // at the budget keeps it until it has really stopped, so no more
        // than `max_requests` pieces of work ever run.
        let permit = tokio::time::timeout(budget, Arc::clone(&pool.running).acquire_owned())
            .await
            .map_err(|_| late(what, budget))?
            .expect("the semaphore is never closed");
        let job = crate::work::Work::within_budget(what, budget);
        let (send, receive) = tokio::sync::oneshot::channel();
        let served = Arc::clone(self);
        let stop = Arc::clone(&job);
        self.metrics.job_started();
        std::thread::Builder::new()
            .name("pchronicle-answer".into())
            .spawn(move || {
                let result = crate::work::within(&job, || work(&served));
                drop(permit);
                let _ = send.send(result);
            })
            .map_err(|e| Error::new(ErrorCode::Busy, format!("cannot start a thread: {e}")))?;
        match tokio::time::timeout(budget, receive).await {
            Ok(Ok(result)) => result.map_err(|e| self.shown(e)),
            Ok(Err(_)) => Err(Error::new(
                ErrorCode::RequestFailed,
                format!("{what} panicked"),
            )),
            Err(_) => {
                stop.cancel();
                Err(late(what, budget))
            }
        }
    }
}

impl Served {
    /// `e` as a client is shown it: paths relative to the served root, as
    /// the client named them, not where the server keeps the warehouse.
    fn shown(&self, mut e: Error) -> Error {
        e.message = crate::error::without_source_locations(&e.message);
        let root = if self.base.as_os_str() == "." {
            self.catalog.root().to_path_buf()
        } else {
            self.catalog.root().join(&self.base)
        };
        if let Some(rel) = e.path.as_deref().and_then(|p| p.strip_prefix(&root).ok()) {
            e.path = Some(if rel.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                rel.to_path_buf()
            });
        }
        let text = root.display().to_string();
        if text.len() > 1 {
            // As the system names it, and as an object store does (no
            // leading slash); only where a path starts, never inside
            // another name.
            e.message = strip_root(&e.message, &format!("{text}/"));
            e.message = strip_root(&e.message, &format!("{}/", &text[1..]));
        }
        e
    }
}

/// `message` without `root` (ending in `/`) where it begins a path: at the
/// start, or after a space, a quote, a bracket, `:` or `=`.
fn strip_root(message: &str, root: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(root) {
        let starts_path = at == 0
            || rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| " \t\"'`([<:=,".contains(c));
        out.push_str(&rest[..at]);
        if !starts_path {
            out.push_str(root);
        }
        rest = &rest[at + root.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod shown_tests {
    use super::strip_root;

    #[test]
    fn the_root_goes_only_where_a_path_starts() {
        let root = "/data/wh/";
        assert_eq!(strip_root("/data/wh/a/b: no", root), "a/b: no");
        assert_eq!(strip_root("at \"/data/wh/x\"", root), "at \"x\"");
        assert_eq!(strip_root("/data/wh2/x", root), "/data/wh2/x");
        assert_eq!(strip_root("/srv/w/x", "/w/"), "/srv/w/x");
        assert_eq!(
            strip_root(
                "Object at location data/wh/leaf/_versions/3.manifest",
                "data/wh/"
            ),
            "Object at location leaf/_versions/3.manifest"
        );
    }
}

/// An LRU of answers bounded in entries and in bytes.
struct Kept<V> {
    lru: lru::LruCache<String, (V, usize)>,
    bytes: usize,
}

impl<V> Kept<V> {
    fn new(entries: usize) -> Kept<V> {
        Kept {
            lru: lru::LruCache::new(NonZeroUsize::new(entries).expect("non-zero")),
            bytes: 0,
        }
    }

    fn put(&mut self, key: String, value: V, size: usize) {
        if let Some((_, (_, old))) = self.lru.push(key, (value, size)) {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.bytes > KEPT_BYTES {
            match self.lru.pop_lru() {
                Some((_, (_, old))) => self.bytes -= old,
                None => break,
            }
        }
    }
}

fn late(what: &str, budget: Duration) -> Error {
    Error::new(
        ErrorCode::AnswerLate,
        format!(
            "{what} took longer than {} s and was stopped",
            budget.as_secs()
        ),
    )
}

/// Counts a waiting request out when it is done, however it ends.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
