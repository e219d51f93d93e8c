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
use sha2::{Digest, Sha256};

use super::assets;
use super::params::{Params, invalid};
use super::state::{Answer, JSON, JSON_LINES, Served};
use crate::catalog::Fingerprint;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::runs::{self, Bucket};
use crate::extract::{Output, Plan, Position, Shape};
use crate::query::{self, Limits, ResultFormat};
use crate::records::read::Resume;

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
        .route("/api/runs", get(runs_of))
        .route("/api/histogram", get(histogram))
        .route("/api/query", post(query_of))
        .route("/metrics", get(metrics))
        .route("/", get(|| async { Redirect::to("/datasets") }))
        .route("/datasets", get(assets::page))
        .route("/runs", get(assets::page))
        .route("/run", get(assets::page))
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
/// endpoint and its query.
async fn kept(
    served: Arc<Served>,
    endpoint: &'static str,
    query: Option<String>,
    headers: HeaderMap,
    make: fn(&Served, &Params) -> Result<Answer>,
) -> Response {
    let key = format!("{endpoint}?{}", query.as_deref().unwrap_or(""));
    let if_none_match = headers.get(header::IF_NONE_MATCH).cloned();
    if let Some(answer) = served.recent(&key) {
        return answer.to_response(if_none_match.as_ref());
    }
    let answer = served
        .run(endpoint, move |served| {
            let params = Params::parse(query.as_deref());
            make(served, &params)
        })
        .await
        .unwrap_or_else(|e| Answer::error(&e));
    let answer = Arc::new(answer);
    served.keep(key, &answer);
    answer.to_response(if_none_match.as_ref())
}

async fn tree(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "tree", q, h, |served, params| {
        params.only(&["path"])?;
        params.no_filters()?;
        let listing = served.catalog.list(&served.rel(&params.path()?))?;
        Ok(Answer::ok(JSON, listing.to_json().into_bytes()))
    })
    .await
}

async fn stats(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "stats", q, h, |served, params| {
        params.only(&["path"])?;
        let rel = served.rel(&params.path()?);
        let stats = crate::extract::stats(&served.catalog, &rel, &params.selection()?)?;
        Ok(Answer::ok(JSON, stats.to_json().into_bytes()))
    })
    .await
}

async fn sources(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "sources", q, h, |served, params| {
        params.only(&["path"])?;
        let rel = served.rel(&params.path()?);
        let snapshot = crate::extract::sources(&served.catalog, &rel, &params.selection()?)?;
        Ok(Answer::ok(
            JSON_LINES,
            snapshot.sources_jsonl().into_bytes(),
        ))
    })
    .await
}

async fn runs_of(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "runs", q, h, |served, params| {
        params.only(&["path"])?;
        tallied(served, params, "runs", |served, plan| {
            let runs = runs::runs(&served.catalog, plan)?;
            Ok(serde_json::to_vec(&runs).expect("runs serialize"))
        })
    })
    .await
}

async fn histogram(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    kept(s, "histogram", q, h, |served, params| {
        params.only(&["path", "bucket"])?;
        let text = params.one("bucket")?.unwrap_or("day");
        let bucket = Bucket::parse(text)
            .ok_or_else(|| invalid(format!("`bucket={text}`: expected hour, day or week")))?;
        tallied(served, params, text, move |served, plan| {
            let histogram = runs::histogram(&served.catalog, plan, bucket)?;
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
    let rel = served.rel(&params.path()?);
    let selection = params.selection()?;
    let mut plan = Plan::new(&served.catalog, &rel, selection.clone(), Shape::Plain)?;
    let mut key = Sha256::new();
    key.update(format!("{what}\0{}\0{selection:?}\0", rel.display()));
    for source in plan.sources() {
        key.update(&source.file);
        key.update(b"\0");
        let fingerprint = source.fingerprint.as_ref().map(Fingerprint::text);
        key.update(fingerprint.as_deref().unwrap_or("?"));
        key.update(b"\0");
    }
    let key: String = key.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if let Some(kept) = served.tally(&key) {
        return Ok((*kept).clone());
    }
    let mut body = tally(served, &mut plan)?;
    body.push(b'\n');
    let answer = Arc::new(Answer::ok(JSON, body));
    served.keep_tally(key, &answer);
    Ok((*answer).clone())
}

async fn records(State(s): State<Arc<Served>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    let if_none_match = h.get(header::IF_NONE_MATCH).cloned();
    s.run("records", move |served| {
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
        Some(text) => cursor::parse(text, &plan, &served.cursor_key, &asked)?,
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
        answer.headers.push((
            "x-next-cursor",
            cursor::format(after, &plan, &served.cursor_key, &asked),
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

/// `after=`: where a page ended, as text a client hands back unchanged.
mod cursor {
    use super::*;

    /// `SOURCE.PART.OFFSET.LINE.TAG`. The tag signs, with a key of this
    /// process, the position, the request's path and filters (`asked`),
    /// the source's `_file_` and, for a leaf, its fingerprint (a leaf's
    /// offsets count rows of one version): a cursor for other filters, into
    /// a leaf that changed, or not handed out here (made up, edited, from
    /// before a restart) is refused, never read from. A record file's
    /// offsets are bytes, good while it grows: its size is not signed.
    pub fn format(at: Position, plan: &Plan, key: &str, asked: &str) -> String {
        let Resume { part, offset, line } = at.within;
        let position = format!("{}.{part}.{offset}.{line}", at.source);
        let tag = tag(plan, at.source, &position, key, asked);
        format!("{position}.{tag}")
    }

    pub fn parse(text: &str, plan: &Plan, key: &str, asked: &str) -> Result<Position> {
        let bad = || {
            Error::new(
                ErrorCode::CursorInvalid,
                format!(
                    "the cursor {text:?} is not one this server handed out for this path and these filters"
                ),
            )
        };
        let (position, given) = text.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = position.split('.').collect();
        let [source, part, offset, line] = parts.as_slice() else {
            return Err(bad());
        };
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let source = usize::try_from(number(source)?).map_err(|_| bad())?;
        if source >= plan.sources().len() || tag(plan, source, position, key, asked) != given {
            return Err(bad());
        }
        Ok(Position {
            source,
            within: Resume {
                part: number(part)?,
                offset: number(offset)?,
                line: number(line)?,
            },
        })
    }

    fn tag(plan: &Plan, source: usize, position: &str, key: &str, asked: &str) -> String {
        let found = plan.sources().get(source);
        let file = found.map_or("", |s| s.file.as_str());
        let version = match found {
            Some(s) if s.kind == crate::catalog::SourceKind::Dataset => {
                s.fingerprint.as_ref().map(Fingerprint::text)
            }
            _ => None,
        };
        let version = version.as_deref().unwrap_or("");
        let mut digest = Sha256::new();
        for piece in [key, asked, file, version, position] {
            digest.update((piece.len() as u64).to_le_bytes());
            digest.update(piece.as_bytes());
        }
        digest.finalize()[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
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
    s.run("query", move |served| run_query(served, &body))
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
