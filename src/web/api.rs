//! The endpoints: each takes its parameters apart, makes its answer with
//! the same call the CLI command it names makes, and keeps it for the TTL
//! (runs and histograms for as long as their Snapshot is unchanged).

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures::FutureExt;
use sha2::{Digest, Sha256};

use super::assets;
use super::cursor;
use super::params::{Params, invalid};
use super::state::{Answer, JSON, JSON_LINES, Lane, Making, Served};
use crate::catalog::Fingerprint;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::runs::{self, Bucket};
use crate::extract::{Output, Plan, Position, Shape};
use crate::query::{self, Limits, ResultFormat};

/// Records one `/api/records` page holds at most.
const PAGE_RECORDS: u64 = 10_000;
/// Bytes after which a page ends (at a record's end) whatever its count.
const PAGE_BYTES: usize = 16 << 20;
/// Largest request body (`POST /api/query`).
const BODY_LIMIT: usize = 64 << 10;

pub fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/api/explorer/tree", get(tree))
        .route("/api/stats", get(stats))
        .route("/api/sources", get(sources))
        .route("/api/records", get(records))
        .route("/api/runs", get(super::runs::page_of_runs))
        .route("/api/runs/summary", get(super::runs::summary_of_runs))
        .route("/api/compare", get(super::runs::compare_runs))
        .route("/api/histogram", get(histogram))
        .route("/api/query", post(query_of))
        .route("/metrics", get(metrics))
        .route("/", get(|| async { Redirect::to("/datasets") }))
        .route("/datasets", get(assets::page))
        .route("/runs", get(assets::page))
        .route("/run", get(assets::page))
        .route("/compare", get(assets::page))
        .route("/sql", get(assets::page))
        .route("/assets/{name}", get(assets::file))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&served),
            super::guard::check,
        ))
        .with_state(served)
}

async fn not_found() -> Response {
    let mut answer = Answer::error(&invalid(
        "no such page or endpoint (see docs/web.md)".into(),
    ));
    answer.status = StatusCode::NOT_FOUND;
    answer.to_response(None)
}

/// Answers a `GET` with `make`'s answer, kept for the TTL under the
/// endpoint and its parameters. Answers from the catalog's state are made
/// in the state lane. A scan is made once for every request of the same
/// endpoint and parameters that comes while it runs: each waits for it up
/// to the request's time, and a scan that takes longer goes on (up to the
/// scan time) for the next request to join.
pub(super) async fn kept(
    served: Arc<Served>,
    endpoint: &'static str,
    query: Option<String>,
    headers: HeaderMap,
    lane: fn(&Params) -> Lane,
    make: fn(&Served, &Params) -> Result<Answer>,
) -> Response {
    let params = Params::parse(query.as_deref());
    let key = format!("{endpoint}?{}", params.canonical(&[]));
    let if_none_match = headers.get(header::IF_NONE_MATCH).cloned();
    if let Some(answer) = served.recent(&key) {
        return answer.to_response(if_none_match.as_ref());
    }
    let answer = match lane(&params) {
        Lane::State => {
            let budget = served.limits.request_time;
            made(&served, Lane::State, budget, key, endpoint, query, make).await
        }
        Lane::Scan => {
            let making = joined(&served, key, endpoint, query, make);
            match tokio::time::timeout(served.limits.request_time, making).await {
                Ok(answer) => answer,
                Err(_) => {
                    let mut answer = Answer::error(&Error::new(
                        ErrorCode::AnswerLate,
                        format!(
                            "{endpoint} was not ready within {} s; it goes on, and asking again joins it",
                            served.limits.request_time.as_secs()
                        ),
                    ));
                    answer.headers.push(("retry-after", "5".into()));
                    Arc::new(answer)
                }
            }
        }
    };
    answer.to_response(if_none_match.as_ref())
}

/// Makes the answer `key` in `lane` within `budget`, and keeps it.
async fn made(
    served: &Arc<Served>,
    lane: Lane,
    budget: std::time::Duration,
    key: String,
    endpoint: &'static str,
    query: Option<String>,
    make: fn(&Served, &Params) -> Result<Answer>,
) -> Arc<Answer> {
    let answer = served
        .run_for(lane, budget, endpoint, move |served| {
            make(served, &Params::parse(query.as_deref()))
        })
        .await
        .unwrap_or_else(|e| Answer::error(&e));
    let answer = Arc::new(answer);
    served.keep(key, &answer);
    answer
}

/// The scan `key` being made, joined, or started.
fn joined(
    served: &Arc<Served>,
    key: String,
    endpoint: &'static str,
    query: Option<String>,
    make: fn(&Served, &Params) -> Result<Answer>,
) -> Making {
    let mut making = served.making.lock();
    if let Some(scan) = making.get(&key) {
        served.metrics.answer_kept(true);
        return scan.clone();
    }
    let task = tokio::spawn({
        let served = Arc::clone(served);
        let key = key.clone();
        async move {
            // However the scan ends, it is no longer being made.
            let _forget = Forget(Arc::clone(&served), key.clone());
            let budget = served.limits.scan_time;
            made(&served, Lane::Scan, budget, key, endpoint, query, make).await
        }
    });
    let scan: Making = async move {
        task.await.unwrap_or_else(|_| {
            Arc::new(Answer::error(&Error::new(
                ErrorCode::RequestFailed,
                "a scan panicked",
            )))
        })
    }
    .boxed()
    .shared();
    making.insert(key, scan.clone());
    scan
}

/// Takes a scan out of those being made when dropped.
struct Forget(Arc<Served>, String);

impl Drop for Forget {
    fn drop(&mut self) {
        self.0.making.lock().remove(&self.1);
    }
}

/// Listings and unfiltered stats and sources come from the catalog's
/// state; filters that select records read them.
fn state_unless_filtered(params: &Params) -> Lane {
    if params.has_filters() {
        Lane::Scan
    } else {
        Lane::State
    }
}

pub(super) fn scan(_: &Params) -> Lane {
    Lane::Scan
}

async fn tree(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(
        s,
        "tree",
        q,
        h,
        |_| Lane::State,
        |served, params| {
            params.only(&["path"])?;
            params.no_filters()?;
            let listing = served.catalog.list(&served.rel(&params.path()?))?;
            Ok(Answer::ok(JSON, listing.to_json().into_bytes()))
        },
    )
    .await
}

async fn stats(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "stats", q, h, state_unless_filtered, |served, params| {
        params.only(&["path"])?;
        let rel = served.rel(&params.path()?);
        let stats = crate::extract::stats(&served.catalog, &rel, &params.selection()?)?;
        Ok(Answer::ok(JSON, stats.to_json().into_bytes()))
    })
    .await
}

async fn sources(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(
        s,
        "sources",
        q,
        h,
        state_unless_filtered,
        |served, params| {
            params.only(&["path"])?;
            let rel = served.rel(&params.path()?);
            let snapshot = crate::extract::sources(&served.catalog, &rel, &params.selection()?)?;
            Ok(Answer::ok(
                JSON_LINES,
                snapshot.sources_jsonl().into_bytes(),
            ))
        },
    )
    .await
}

async fn histogram(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "histogram", q, h, scan, |served, params| {
        params.only(&["path", "bucket"])?;
        let text = params.one("bucket")?.unwrap_or("day");
        let bucket = Bucket::parse(text)
            .ok_or_else(|| invalid(format!("`bucket={text}`: expected hour, day or week")))?;
        tallied(served, params, text, move |served, plan| {
            let histogram = runs::histogram(&served.catalog, plan, bucket)?;
            // Its buckets are cut at a count (see `runs::histogram`).
            Ok(serde_json::to_vec(&histogram).expect("a histogram serializes"))
        })
    })
    .await
}

/// A tally of the plan of `params`, computed once per Snapshot: its key
/// is every selected source's `_file_` and fingerprint, with the filters.
fn tallied(
    served: &Served,
    params: &Params,
    what: &str,
    tally: impl FnOnce(&Served, &mut Plan) -> Result<Vec<u8>>,
) -> Result<Answer> {
    let (mut plan, key) = snapshot_key(served, params, what)?;
    if let Some(kept) = served.tally(&key) {
        return Ok((*kept).clone());
    }
    let mut body = tally(served, &mut plan)?;
    body.push(b'\n');
    let answer = Arc::new(Answer::ok(JSON, body));
    served.keep_tally(key, &answer);
    Ok((*answer).clone())
}

/// The plan of `params`, and the key of its Snapshot for the tally
/// `what`: every selected source's `_file_` and fingerprint, with the
/// filters.
pub(super) fn snapshot_key(served: &Served, params: &Params, what: &str) -> Result<(Plan, String)> {
    let rel = served.rel(&params.path()?);
    let selection = params.selection()?;
    let plan = Plan::new(&served.catalog, &rel, selection.clone(), Shape::Plain)?;
    let mut key = Sha256::new();
    key.update(format!("{what}\0{}\0{selection:?}\0", rel.display()));
    for source in plan.sources() {
        key.update(&source.file);
        key.update(b"\0");
        let fingerprint = source.fingerprint.as_ref().map(Fingerprint::text);
        key.update(fingerprint.as_deref().unwrap_or("?"));
        key.update(b"\0");
    }
    Ok((plan, crate::warehouse::hex(&key.finalize())))
}

async fn records(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    let if_none_match = h.get(header::IF_NONE_MATCH).cloned();
    s.run(Lane::Scan, "records", move |served| {
        let params = Params::parse(q.as_deref());
        page_of_records(served, &params)
    })
    .await
    .unwrap_or_else(|e| Answer::error(&e))
    .into_response_once(if_none_match.as_ref())
}

/// One page of `cat`: at most `limit` records from `after` on.
fn page_of_records(served: &Served, params: &Params) -> Result<Answer> {
    params.only(&["path", "limit", "after", "failed", "annotate"])?;
    let rel = served.rel(&params.path()?);
    let mut selection = params.selection()?;
    selection.failed = params.flag("failed")?;
    let shape = if params.flag("annotate")? {
        Shape::Annotated
    } else {
        Shape::Plain
    };
    let limit = params.number("limit", 100, PAGE_RECORDS)?;
    let plan = Plan::new(&served.catalog, &rel, selection, shape)?;
    // A cursor is good only for the request that handed it out: the same
    // path and filters (the page size may change).
    let asked = params.canonical(&["after", "limit", "token"]);
    let from = match params.one("after")? {
        Some(text) => cursor::parse(text, &plan, &served.cursor_key, &asked, &|at| {
            cursor::identity(served, &rel, &plan, at)
        })?,
        None => Position::default(),
    };
    let mut page = Page {
        body: Vec::new(),
        records: 0,
        limit,
        kept: None,
        more: false,
    };
    let _ = plan.run(&served.catalog, from, &mut page)?;
    let mut answer = Answer::ok(JSON_LINES, Vec::new());
    if page.more {
        let (_, after) = page.kept.expect("a page with more has kept its end");
        let identity = cursor::identity(served, &rel, &plan, after);
        answer.headers.push((
            "x-next-cursor",
            cursor::format(after, &plan, &served.cursor_key, &asked, &identity),
        ));
    }
    answer.etag = super::state::etag_of(&page.body);
    answer.body = page.body.into();
    Ok(answer)
}

/// Collects one page, and reads one record past it to know whether more
/// remain (that record's bytes are cut off again).
struct Page {
    body: Vec<u8>,
    records: u64,
    limit: u64,
    /// The page's end: its length and the position after its last record.
    kept: Option<(usize, Position)>,
    more: bool,
}

impl Write for Page {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        // Past the page's end only whether a record follows matters: its
        // bytes are not kept (it may be as large as its writer made it).
        if self.kept.is_none() {
            self.body.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output for Page {
    fn record_end(&mut self, after: Position) -> io::Result<ControlFlow<()>> {
        if self.kept.is_some() {
            self.more = true;
            return Ok(ControlFlow::Break(()));
        }
        self.records += 1;
        if self.records >= self.limit || self.body.len() >= PAGE_BYTES {
            self.kept = Some((self.body.len(), after));
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// `POST /api/query`: `{"path", "sql", FILTERS}`.
async fn query_of(State(s): State<Arc<Served>>, h: HeaderMap, body: axum::body::Body) -> Response {
    let json = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
    if !json {
        // A form of another site cannot send this type without asking.
        return Answer::error(&invalid(
            "send the query as JSON (Content-Type: application/json)".into(),
        ))
        .to_response(None);
    }
    // The body within the time a head gets: a client that announces one
    // and sends nothing does not keep its connection busy.
    let body =
        match tokio::time::timeout(super::HEAD_TIMEOUT, axum::body::to_bytes(body, BODY_LIMIT))
            .await
        {
            Ok(Ok(body)) => body,
            Ok(Err(_)) => {
                let mut answer = Answer::error(&invalid(format!(
                    "the body is larger than {} KiB (or was cut off)",
                    BODY_LIMIT >> 10
                )));
                answer.status = StatusCode::PAYLOAD_TOO_LARGE;
                return answer.to_response(None);
            }
            Err(_) => {
                let mut answer = Answer::error(&invalid(format!(
                    "the body did not arrive within {} s",
                    super::HEAD_TIMEOUT.as_secs()
                )));
                answer.status = StatusCode::REQUEST_TIMEOUT;
                return answer.to_response(None);
            }
        };
    s.run(Lane::Scan, "query", move |served| run_query(served, &body))
        .await
        .unwrap_or_else(|e| Answer::error(&e))
        .into_response_once(None)
}

fn run_query(served: &Served, body: &[u8]) -> Result<Answer> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("the body is not a JSON object: {e}")))?;
    let serde_json::Value::Object(mut fields) = value else {
        return Err(invalid("the body must be a JSON object".into()));
    };
    let sql = match fields.remove("sql") {
        Some(serde_json::Value::String(sql)) => sql,
        _ => return Err(invalid("`sql` (a string) is required".into())),
    };
    let params = Params::from_json(&fields)?;
    params.only(&["path"])?;
    let rel = served.rel(&params.path()?);
    let limits = Limits {
        rows: Some(served.limits.query_rows),
        time: Some(served.limits.query_time),
        memory: Some(served.limits.query_memory),
        bytes: Some(served.limits.answer_bytes),
    };
    let mut out = Vec::new();
    let outcome = query::run_limited(
        Arc::clone(&served.catalog),
        &rel,
        params.selection()?,
        &sql,
        ResultFormat::Json,
        limits,
        &mut out,
    )?;
    let mut answer = Answer::ok(JSON_LINES, out);
    if outcome.rows_capped {
        answer
            .headers
            .push(("x-row-cap", served.limits.query_rows.to_string()));
    }
    if outcome.bytes_capped {
        answer
            .headers
            .push(("x-byte-cap", served.limits.answer_bytes.to_string()));
    }
    if outcome.timed_out {
        answer.headers.push((
            "x-time-limit",
            format!("{}", served.limits.query_time.as_secs()),
        ));
    }
    Ok(answer)
}

async fn metrics(State(s): State<Arc<Served>>) -> Response {
    let text = s.metrics.render(s.catalog.cache_hits());
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}
