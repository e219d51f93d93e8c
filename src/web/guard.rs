//! Who may ask, and what every answer carries.
//!
//! A request to a loopback server must name it in its `Host` header (a
//! page of another site that resolves its own name to 127.0.0.1 cannot
//! read the answers: DNS rebinding). Every API call and `/metrics` must
//! bring the token, as `Authorization: Bearer TOKEN` (what the pages send:
//! they take it from the fragment of the URL the server printed, which no
//! server ever sees, and keep it in the origin's storage) or as a `token`
//! parameter (a program, a JSON link). The pages' shell and scripts hold
//! no data and need no token. There is no cookie: a cookie would be sent
//! to every other server on the same host, whatever its port. Every answer
//! forbids scripts and styles from anywhere but this server, content
//! sniffing and framing.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

use super::state::{Answer, Served};
use crate::error::{Error, ErrorCode};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Checks the request, answers it, and adds the headers every answer
/// carries.
pub async fn check(State(served): State<Arc<Served>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let endpoint = endpoint_name(request.uri().path());
    let mut response = match admit(&served, &request, endpoint) {
        Ok(()) => next.run(request).await,
        Err(e) => Answer::error(&e).to_response(None),
    };
    secure(response.headers_mut());
    served
        .metrics
        .request(endpoint, response.status().as_u16(), started.elapsed());
    response
}

fn admit(served: &Served, request: &Request, endpoint: &str) -> Result<(), Error> {
    if !served.hosts.is_empty() {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !served.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Err(Error::new(
                ErrorCode::ServeRequestInvalid,
                format!(
                    "the Host header {host:?} does not name this server; use {}",
                    served.hosts.join(" or ")
                ),
            ));
        }
    }
    // The shell of the pages and their scripts hold nothing of the
    // warehouse.
    if matches!(endpoint, "page" | "asset") || holds_token(served, request) {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::ServeUnauthorized,
        "this server needs its token: open the URL `pchronicle serve` printed, or send `Authorization: Bearer TOKEN`",
    ))
}

/// Whether `request` brings the server's token (any request does, on a
/// server without one).
fn holds_token<B>(served: &Served, request: &axum::http::Request<B>) -> bool {
    let Some(token) = &served.token else {
        return true;
    };
    let query = request.uri().query().unwrap_or("");
    let in_query =
        form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "token" && same(&v, token));
    in_query || bearer(request.headers()).is_some_and(|t| same(t, token))
}

/// Whether `request` makes its connection trusted (`connections.rs`): it
/// asks the API with the token. Pages and scripts never do, so a client
/// that only fetches those stays anonymous, token or not.
pub fn trusts<B>(served: &Served, request: &axum::http::Request<B>) -> bool {
    let endpoint = endpoint_name(request.uri().path());
    !matches!(endpoint, "page" | "asset" | "other") && holds_token(served, request)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Compares in time that depends only on the lengths.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn secure(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, header::CONTENT_SECURITY_POLICY, CSP);
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::REFERRER_POLICY, "no-referrer");
    // Answers are revalidated with their ETag, never reused unasked.
    set(headers, header::CACHE_CONTROL, "no-cache");
    set(
        headers,
        header::HeaderName::from_static("cross-origin-resource-policy"),
        "same-origin",
    );
}

/// The metrics label of a request path (a fixed set: a label per
/// requested path would let anyone grow the metrics without bound).
fn endpoint_name(path: &str) -> &'static str {
    match path {
        "/api/explorer/tree" => "tree",
        "/api/stats" => "stats",
        "/api/sources" => "sources",
        "/api/records" => "records",
        "/api/runs" => "runs",
        "/api/histogram" => "histogram",
        "/api/query" => "query",
        "/metrics" => "metrics",
        "/" | "/datasets" | "/runs" | "/run" | "/sql" => "page",
        p if p.starts_with("/assets/") => "asset",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer xyz"),
        );
        assert_eq!(bearer(&headers), Some("xyz"));
    }
}
