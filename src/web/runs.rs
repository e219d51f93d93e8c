//! `/api/runs` and `/api/runs/summary`: a selection's runs a page at a
//! time, in the order asked for, and what they add up to.
//!
//! Both are cut from one tally of the selection, made once per Snapshot
//! (its key is every selected source's `_file_` and fingerprint, with the
//! filters) and kept: a reader scrolling through 100,000 runs reads the
//! records once, and each page after the first costs one pass over the
//! runs kept, not over their records.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use parking_lot::Mutex;

use super::api::{kept, scan, snapshot_key};
use super::cursor;
use super::params::{Params, invalid};
use super::state::{Answer, JSON, Served};
use crate::error::{Error, ErrorCode, Result};
use crate::extract::runs::compare::{self, STEPS_AT_MOST, STEPS_DEFAULT};
use crate::extract::runs::page::{self, PAGE_AT_MOST, PAGE_DEFAULT, PageAnswer, Sort};
use crate::extract::runs::{self, RunFilter, RunSummary, Runs};

pub async fn page_of_runs(
    State(s): State<Arc<Served>>,
    RawQuery(q): RawQuery,
    h: HeaderMap,
) -> Response {
    kept(s, "runs", q, h, scan, |served, params| {
        params.only(&[
            "path",
            "sort",
            "limit",
            "after",
            "model",
            "agent",
            "stop",
            "group",
            "ungrouped",
        ])?;
        let sort = match params.one("sort")? {
            None => Sort::default(),
            Some(text) => Sort::parse(text).ok_or_else(|| {
                invalid(format!("`sort={text}`: expected one of {}", Sort::names()))
            })?,
        };
        let limit = params.number("limit", PAGE_DEFAULT as u64, PAGE_AT_MOST as u64)? as usize;
        // A cursor is good only for the request that handed it out: the
        // same path, filters and sort (the page size may change).
        let asked = params.canonical(&["after", "limit", "token"]);
        let after = match params.one("after")? {
            Some(text) => Some(cursor::parse_after(text, &served.cursor_key, &asked)?),
            None => None,
        };
        let filter = run_filter(params)?;
        let all = all_runs(served, params)?;
        let chosen = all.chosen(&filter);
        let total = chosen.len();
        let page = page::page(chosen, sort, after.as_ref(), limit);
        let next = page
            .next
            .as_ref()
            .map(|after| cursor::format_after(after, &served.cursor_key, &asked));
        let mut answer = PageAnswer::of(&all, total, page, sort, next.clone());
        if filter.ungrouped && after.is_none() {
            answer.groups = Some(all.groups(&filter));
        }
        let body = answer.to_json();
        let mut answer = Answer::ok(JSON, body.into_bytes());
        if let Some(next) = next {
            answer.headers.push(("x-next-cursor", next));
        }
        Ok(answer)
    })
    .await
}

pub async fn summary_of_runs(
    State(s): State<Arc<Served>>,
    RawQuery(q): RawQuery,
    h: HeaderMap,
) -> Response {
    kept(s, "runs-summary", q, h, scan, |served, params| {
        params.only(&["path", "model", "agent", "stop", "group", "ungrouped"])?;
        let filter = run_filter(params)?;
        let all = all_runs(served, params)?;
        let summary = all.summary_of(&filter);
        let mut body = serde_json::to_vec(&summary).expect("a summary serializes");
        body.push(b'\n');
        Ok(Answer::ok(JSON, body))
    })
    .await
}

/// `/api/compare`: runs `a` and `b` of the path side by side, their steps
/// `from..from+limit` aligned.
pub async fn compare_runs(
    State(s): State<Arc<Served>>,
    RawQuery(q): RawQuery,
    h: HeaderMap,
) -> Response {
    kept(s, "compare", q, h, scan, |served, params| {
        // Runs are looked up among all of the path's, and each is read
        // whole (as the Run page reads it): a filter would make its
        // figures and its steps disagree.
        params.only(&["path", "a", "b", "from", "limit"])?;
        if params.has_filters() {
            return Err(invalid(
                "`/api/compare` takes no filters: two runs are compared whole".into(),
            ));
        }
        let all = all_runs(served, params)?;
        let run = |key: &str| -> Result<RunSummary> {
            let name = params.one(key)?.filter(|n| !n.is_empty()).ok_or_else(|| {
                invalid(
                    "`a` and `b` (two runs' names, as `/api/runs` gives them) are required".into(),
                )
            })?;
            all.named(name).cloned().ok_or_else(|| {
                Error::new(
                    ErrorCode::RunNotFound,
                    format!("no run named {name:?} under this path (`{key}=`)"),
                )
            })
        };
        let (a, b) = (run("a")?, run("b")?);
        let from = params.number("from", 1, u64::MAX)?;
        let limit = params.number("limit", STEPS_DEFAULT, STEPS_AT_MOST)?;
        let rel = served.rel(&params.path()?);
        let comparison = compare::compare(&served.catalog, &rel, a, b, from, limit)?;
        let mut body = serde_json::to_vec(&comparison).expect("a comparison serializes");
        body.push(b'\n');
        Ok(Answer::ok(JSON, body))
    })
    .await
}

/// The run filters of `params` (`model`, `agent`, `stop`, `group`,
/// `ungrouped`).
fn run_filter(params: &Params) -> Result<RunFilter> {
    let mut filter = RunFilter::default();
    for name in RunFilter::NAMES {
        if let Some(value) = params.one(name)? {
            filter.set(name, value.to_string());
        }
    }
    filter.group = params.one("group")?.map(str::to_string);
    filter.ungrouped = params.flag("ungrouped")?;
    Ok(filter)
}

/// Every run of the selection `params` names: within the TTL of its last
/// plan, the runs kept for that plan's Snapshot (no plan is made: at
/// 100,000 runs one costs most of a second); else kept from an earlier
/// request of the same Snapshot, or tallied now. Requests for the same
/// selection that come while it is planned or tallied (a page and the
/// summary, asked at once by the Runs page) wait for that instead of
/// making their own.
fn all_runs(served: &Served, params: &Params) -> Result<Arc<Runs>> {
    let selection = format!("{}\0{:?}", params.path()?.display(), params.selection()?);
    let recent = |served: &Served| {
        let key = served.runs_key_recent(&selection)?;
        served.runs_kept(&key)
    };
    if let Some(kept) = recent(served) {
        return Ok(kept);
    }
    let gate = gate(&served.runs_gates, &selection);
    let _planning = gate.lock();
    if let Some(kept) = recent(served) {
        return Ok(kept);
    }
    // The runs are as fresh as the plan: the TTL counts from it.
    let planned = std::time::Instant::now();
    let (mut plan, key) = snapshot_key(served, params, "runs")?;
    let all = match served.runs_kept(&key) {
        Some(kept) => kept,
        None => {
            let all = Arc::new(runs::runs(&served.catalog, &mut plan)?);
            served.keep_runs(key.clone(), &all);
            all
        }
    };
    served.note_runs_key(selection, key, planned);
    Ok(all)
}

/// Selections being planned or tallied: one lock each, alive while
/// someone holds or waits for it.
pub type Gates = Mutex<HashMap<String, Weak<Mutex<()>>>>;

fn gate(gates: &Gates, key: &str) -> Arc<Mutex<()>> {
    let mut gates = gates.lock();
    if let Some(gate) = gates.get(key).and_then(Weak::upgrade) {
        return gate;
    }
    gates.retain(|_, gate| gate.strong_count() > 0);
    let gate = Arc::new(Mutex::new(()));
    gates.insert(key.to_string(), Arc::downgrade(&gate));
    gate
}
