//! Who may ask, and what every answer carries.
//!
//! A request must name this server in its `Host` header (a page of
//! another site that resolves its own name to 127.0.0.1 cannot read the
//! answers: DNS rebinding), and bring the token: as the `token` of the URL
//! the server printed (a page then sets it as a cookie and sends the
//! browser on to the same URL without it), as that cookie, or as
//! `Authorization: Bearer TOKEN`. Every answer forbids scripts and styles
//! from anywhere but this server, content sniffing and framing.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::state::{Answer, Served};
use crate::error::{Error, ErrorCode};

const COOKIE: &str = "pchronicle_token";

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Checks the request, answers it, and adds the headers every answer
/// carries.
pub async fn check(State(served): State<Arc<Served>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let endpoint = endpoint_name(request.uri().path());
    let mut response = match admit(&served, &request) {
        Admit::Yes => next.run(request).await,
        Admit::Redirect(to) => redirect_with_cookie(&served, &to),
        Admit::No(e) => Answer::error(&e).to_response(None),
    };
    secure(response.headers_mut());
    served
        .metrics
        .request(endpoint, response.status().as_u16(), started.elapsed());
    response
}

enum Admit {
    Yes,
    /// The token came in the URL: set the cookie, go on without it.
    Redirect(String),
    No(Error),
}

fn admit(served: &Served, request: &Request) -> Admit {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !served.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return Admit::No(Error::new(
            ErrorCode::ServeRequestInvalid,
            format!(
                "the Host header {host:?} does not name this server; use {}",
                served.hosts.join(" or ")
            ),
        ));
    }
    let Some(token) = &served.token else {
        return Admit::Yes;
    };
    if bearer(request.headers()).is_some_and(|t| same(t, token))
        || cookie(request.headers()).is_some_and(|t| same(t, token))
    {
        return Admit::Yes;
    }
    let uri = request.uri();
    let params: Vec<(String, String)> =
        form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    if params.iter().any(|(k, v)| k == "token" && same(v, token)) {
        // A program that put the token in the URL gets its answer; a
        // browser on a page is moved to a URL without it.
        if uri.path().starts_with("/api/") || uri.path() == "/metrics" {
            return Admit::Yes;
        }
        let rest: Vec<&(String, String)> = params.iter().filter(|(k, _)| k != "token").collect();
        let mut to = uri.path().to_string();
        if !rest.is_empty() {
            to.push('?');
            to.push_str(
                &form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(rest.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .finish(),
            );
        }
        return Admit::Redirect(to);
    }
    Admit::No(Error::new(
        ErrorCode::ServeUnauthorized,
        "this server needs its token: open the URL `pchronicle serve` printed, or send `Authorization: Bearer TOKEN`",
    ))
}

fn redirect_with_cookie(served: &Served, to: &str) -> Response {
    let token = served.token.as_deref().unwrap_or("");
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let (Ok(location), Ok(cookie)) = (HeaderValue::from_str(to), HeaderValue::from_str(&cookie))
    {
        headers.insert(header::LOCATION, location);
        headers.insert(header::SET_COOKIE, cookie);
    }
    response
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
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
            header::COOKIE,
            HeaderValue::from_static("a=1; pchronicle_token=xyz; b=2"),
        );
        assert_eq!(cookie(&headers), Some("xyz"));
    }
}
