//! The pages' files, built into the binary: one HTML shell for every page
//! (the scripts draw the page its URL names), the scripts and the styles.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::state::etag_of;

const INDEX: &str = include_str!("assets/index.html");

/// Every file under `/assets/`, by name.
const FILES: &[(&str, &str, &str)] = &[
    ("core.js", include_str!("assets/core.js"), JS),
    ("datasets.js", include_str!("assets/datasets.js"), JS),
    ("runs.js", include_str!("assets/runs.js"), JS),
    ("reading.js", include_str!("assets/reading.js"), JS),
    (
        "conversation.js",
        include_str!("assets/conversation.js"),
        JS,
    ),
    ("compare.js", include_str!("assets/compare.js"), JS),
    ("sql.js", include_str!("assets/sql.js"), JS),
    ("app.js", include_str!("assets/app.js"), JS),
    (
        "app.css",
        include_str!("assets/app.css"),
        "text/css; charset=utf-8",
    ),
];

const JS: &str = "text/javascript; charset=utf-8";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(etag) = HeaderValue::from_str(&etag_of(body.as_bytes())) {
        headers.insert(header::ETAG, etag);
    }
    response
}

/// The shell of every page.
pub async fn page() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `/assets/NAME`.
pub async fn file(Path(name): Path<String>) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, body, content_type)) => asset(body, content_type),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}
