//! The HTTP client the object store sends its requests through: the
//! reqwest 0.12 client Lance already builds (so the S3 client adds no TLS
//! stack of its own), counting every request it sends by kind.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService,
};

use crate::logbudget::warn_limited;

/// How long a connection may take to open; a dead server refuses at once,
/// an unroutable one is given up on after this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long an answer may stall: no byte for this long fails the
/// request (which is then retried), however slow the link.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a ranged read may take from start to its last byte: a block
/// of 16 MiB at 60 KB/s, so a slow link that keeps sending still gets
/// there (other requests: [`SMALL_REQUEST_TIMEOUT`]).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a request for a few bytes may take (a page of a listing, a
/// manifest, a `HEAD`): a server that sends them a byte at a time cannot
/// hold a reader for [`REQUEST_TIMEOUT`].
pub const SMALL_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes an answer without a `Range` may carry (listing pages,
/// manifests, pointers, `indexes.json`, Lance's metadata): a server
/// cannot make the client hold more.
pub const MAX_UNRANGED_BODY: u64 = 64 << 20;
/// The most bytes a page of a listing may carry: a page holds at most
/// 1,000 keys of at most 1,024 bytes each, with their sizes, dates and
/// ETags, well under this.
pub const MAX_LISTING_PAGE: u64 = 8 << 20;

/// Requests sent to the object store, by kind (every attempt counts: a
/// retried request is two).
#[derive(Debug, Default)]
pub struct Requests {
    /// `GET ?list-type=2`: one page of a listing.
    pub lists: AtomicU64,
    /// `GET` of a whole object.
    pub gets: AtomicU64,
    /// `GET` with a `Range`.
    pub ranged_gets: AtomicU64,
    /// `HEAD`.
    pub heads: AtomicU64,
    /// Anything else (`PUT`, `POST`, `DELETE`): a read-only warehouse
    /// sends none, and the tests hold it to that.
    pub writes: AtomicU64,
    /// Requests that got no answer (refused, timed out, cut short).
    pub failed: AtomicU64,
    /// Answers with a 5xx status or 429 (which the client retries).
    pub server_errors: AtomicU64,
}

/// A copy of [`Requests`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    pub lists: u64,
    pub gets: u64,
    pub ranged_gets: u64,
    pub heads: u64,
    pub writes: u64,
    pub failed: u64,
    pub server_errors: u64,
}

impl RequestCounts {
    /// Every request sent.
    pub fn total(&self) -> u64 {
        self.lists + self.gets + self.ranged_gets + self.heads + self.writes
    }

    /// What was sent between `earlier` and this.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            lists: self.lists - earlier.lists,
            gets: self.gets - earlier.gets,
            ranged_gets: self.ranged_gets - earlier.ranged_gets,
            heads: self.heads - earlier.heads,
            writes: self.writes - earlier.writes,
            failed: self.failed - earlier.failed,
            server_errors: self.server_errors - earlier.server_errors,
        }
    }
}

impl Requests {
    pub fn snapshot(&self) -> RequestCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            lists: get(&self.lists),
            gets: get(&self.gets),
            ranged_gets: get(&self.ranged_gets),
            heads: get(&self.heads),
            writes: get(&self.writes),
            failed: get(&self.failed),
            server_errors: get(&self.server_errors),
        }
    }

    fn note(&self, request: &HttpRequest) {
        let counter = match *request.method() {
            http::Method::GET if is_listing(request) => &self.lists,
            http::Method::GET if request.headers().contains_key(http::header::RANGE) => {
                &self.ranged_gets
            }
            http::Method::GET => &self.gets,
            http::Method::HEAD => &self.heads,
            _ => &self.writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Connects the object store to one shared reqwest client.
#[derive(Debug)]
pub struct Connector {
    pub requests: Arc<Requests>,
}

impl HttpConnector for Connector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(IDLE_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            // Bytes as stored: a ranged read must get the object's own.
            .no_gzip()
            // A redirect could carry the signed headers to another host.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })?;
        Ok(HttpClient::new(Service {
            client,
            requests: Arc::clone(&self.requests),
        }))
    }
}

#[derive(Debug)]
struct Service {
    client: reqwest::Client,
    requests: Arc<Requests>,
}

#[async_trait::async_trait]
impl HttpService for Service {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.requests.note(&request);
        let limit = body_limit(&request);
        let listing = is_listing(&request);
        let ranged = request.headers().contains_key(http::header::RANGE);
        let (parts, body) = request.into_parts();
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|e| HttpError::new(HttpErrorKind::Request, e))?;
        let mut outgoing = reqwest::Request::new(parts.method, url);
        *outgoing.headers_mut() = parts.headers;
        if !ranged {
            *outgoing.timeout_mut() = Some(SMALL_REQUEST_TIMEOUT);
        }
        let bytes = body
            .collect()
            .await
            .map_err(|e| HttpError::new(HttpErrorKind::Request, e))?
            .to_bytes();
        *outgoing.body_mut() = Some(reqwest::Body::from(bytes));
        let response = match self.client.execute(outgoing).await {
            Ok(response) => response,
            Err(e) => {
                self.requests.failed.fetch_add(1, Ordering::Relaxed);
                return Err(HttpError::new(kind_of(&e), e));
            }
        };
        let status = response.status();
        if status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS {
            self.requests.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        if response.content_length().is_some_and(|n| n > limit) {
            self.requests.failed.fetch_add(1, Ordering::Relaxed);
            return Err(HttpError::new(
                HttpErrorKind::Decode,
                std::io::Error::other(format!(
                    "the server announced more than the {limit} bytes asked for"
                )),
            ));
        }
        let response: http::Response<reqwest::Body> = response.into();
        let (parts, body) = response.into_parts();
        let requests = Arc::clone(&self.requests);
        // Never more than asked for, whatever the server sends.
        let body = http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX))
            .map_err(move |e| {
                requests.failed.fetch_add(1, Ordering::Relaxed);
                let kind = match e.downcast_ref::<reqwest::Error>() {
                    Some(e) => kind_of(e),
                    None => HttpErrorKind::Decode,
                };
                HttpError::new_boxed(kind, e)
            });
        let body = HttpResponseBody::new(body);
        if !(listing && parts.status.is_success()) {
            return Ok(HttpResponse::from_parts(parts, body));
        }
        let page = body.bytes().await?;
        let page = match super::list_page::drop_unusable_keys(&page) {
            Some((kept, dropped)) => {
                warn_limited!(
                    "skipped {} key(s) of a listing that cannot be paths (an empty, `.` or `..` \
                     component, a control character, a leading `/`): {}",
                    dropped.len(),
                    shown(&dropped)
                );
                HttpResponseBody::from(kept)
            }
            None => HttpResponseBody::from(page),
        };
        Ok(HttpResponse::from_parts(parts, page))
    }
}

/// Whether `request` asks for a page of a listing (`ListObjectsV2`).
fn is_listing(request: &HttpRequest) -> bool {
    request.method() == http::Method::GET
        && request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("list-type=")))
}

/// A few keys for a log line, escaped and shortened (they are anyone's).
fn shown(keys: &[String]) -> String {
    const SHOWN: usize = 5;
    const LONGEST: usize = 120;
    let mut text: Vec<String> = keys
        .iter()
        .take(SHOWN)
        .map(|key| {
            let short: String = key.chars().take(LONGEST).collect();
            format!("{short:?}")
        })
        .collect();
    if keys.len() > SHOWN {
        text.push(format!("and {} more", keys.len() - SHOWN));
    }
    text.join(", ")
}

/// The most bytes the answer to `request` may hold: the length of its
/// `Range` (`bytes=A-B`), [`MAX_LISTING_PAGE`] for a page of a listing,
/// else [`MAX_UNRANGED_BODY`].
fn body_limit(request: &HttpRequest) -> u64 {
    if is_listing(request) {
        return MAX_LISTING_PAGE;
    }
    let range = request
        .headers()
        .get(http::header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
    match range {
        Some((first, last)) if last >= first => last - first + 1,
        _ => MAX_UNRANGED_BODY,
    }
}

/// How the object store should treat a failed request: connection
/// failures, timeouts and bodies cut short are retried.
fn kind_of(e: &reqwest::Error) -> HttpErrorKind {
    if e.is_timeout() {
        HttpErrorKind::Timeout
    } else if e.is_connect() {
        HttpErrorKind::Connect
    } else if e.is_body() || e.is_request() {
        HttpErrorKind::Interrupted
    } else if e.is_decode() {
        HttpErrorKind::Decode
    } else {
        HttpErrorKind::Unknown
    }
}
