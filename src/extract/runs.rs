//! Runs and histograms: what a plan's records add up to, per run and per
//! time bucket, in one pass over them.
//!
//! A run is one `_file_` of the opened path (a loose record file, a
//! storyline generation's file, a compact-jsonl row's `_file_`), except
//! that the shards of one record-store session (`<session>.<token>.jsonl`
//! and `.jsonseq` in one directory) make one run together. Each record is
//! looked at only for the few fields a summary needs (a role, a type,
//! token usage); its other bytes are skipped without being kept.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};

use super::{Plan, Position, Selected};
use crate::catalog::{Catalog, Source, Timestamp, Warning};
use crate::error::Result;
use crate::records::read::{Body, Record};
use crate::records::timestamp::Micros;
use crate::shards::ShardName;

/// Records larger than this are counted but not looked into.
const PEEK_LIMIT: usize = 4 << 20;

/// One run's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// The run's name: its `_file_`, or `DIR/SESSION` for a session's
    /// shards.
    pub run: String,
    /// A `--file` glob that selects exactly this run's records.
    pub file: String,
    pub records: u64,
    pub failed: u64,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
    pub duration_seconds: Option<f64>,
    /// Assistant turns (ATIF: agent steps).
    pub steps: u64,
    /// Token totals; `null` when no record carried usage.
    pub tokens: Option<Tokens>,
    pub path_attrs: BTreeMap<String, String>,
}

/// Token totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub total: u64,
}

/// The runs of a plan: `GET /api/runs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Runs {
    pub runs: Vec<RunSummary>,
    /// Records by the value of each hive path attribute.
    pub facets: BTreeMap<String, BTreeMap<String, u64>>,
    /// Records by role (`role`, `message.role`, else `type`).
    pub roles: BTreeMap<String, u64>,
    pub truncated: bool,
    pub warnings: Vec<Warning>,
}

/// A histogram's bucket width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    Hour,
    Day,
    Week,
}

impl Bucket {
    pub fn parse(text: &str) -> Option<Bucket> {
        match text {
            "hour" => Some(Bucket::Hour),
            "day" => Some(Bucket::Day),
            "week" => Some(Bucket::Week),
            _ => None,
        }
    }

    /// The start of the bucket holding `ts` (UTC; weeks start on Monday).
    fn start(self, ts: Micros) -> Micros {
        const HOUR: Micros = 3_600_000_000;
        const DAY: Micros = 24 * HOUR;
        match self {
            Bucket::Hour => ts.div_euclid(HOUR) * HOUR,
            Bucket::Day => ts.div_euclid(DAY) * DAY,
            // 1970-01-01 was a Thursday: Monday is three days later.
            Bucket::Week => {
                let monday = 4 * DAY;
                (ts - monday).div_euclid(7 * DAY) * 7 * DAY + monday
            }
        }
    }
}

/// One histogram bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BucketCount {
    pub start: Timestamp,
    pub records: u64,
    pub failed: u64,
}

/// Records per time bucket: `GET /api/histogram`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    pub bucket: Bucket,
    pub buckets: Vec<BucketCount>,
    /// Records without a timestamp.
    pub untimed: u64,
    pub truncated: bool,
    pub warnings: Vec<Warning>,
}

/// The runs of `plan`'s records (its selection's `failed` is ignored:
/// failed records are counted as such).
pub fn runs(catalog: &Catalog, plan: &mut Plan) -> Result<Runs> {
    let mut selection = plan.selection().clone();
    selection.failed = true;
    selection.limit = None;
    plan.set_selection(selection);
    let mut tally = RunTally::default();
    let _ = plan.visit(catalog, Position::default(), true, &mut tally)?;
    let mut runs: Vec<RunSummary> = tally.runs.into_values().map(RunState::finish).collect();
    runs.sort_by(|a, b| a.run.cmp(&b.run));
    Ok(Runs {
        runs,
        facets: tally.facets,
        roles: tally.roles,
        truncated: plan.truncated(),
        warnings: plan.warnings().to_vec(),
    })
}

/// The records of `plan` per `bucket` (failed ones counted as such).
pub fn histogram(catalog: &Catalog, plan: &mut Plan, bucket: Bucket) -> Result<Histogram> {
    let mut selection = plan.selection().clone();
    selection.failed = true;
    selection.limit = None;
    plan.set_selection(selection);
    let mut tally = BucketTally {
        bucket,
        counts: BTreeMap::new(),
        untimed: 0,
    };
    let _ = plan.visit(catalog, Position::default(), false, &mut tally)?;
    Ok(Histogram {
        bucket,
        buckets: tally
            .counts
            .into_iter()
            .map(|(start, (records, failed))| BucketCount {
                start: Timestamp(start),
                records,
                failed,
            })
            .collect(),
        untimed: tally.untimed,
        truncated: plan.truncated(),
        warnings: plan.warnings().to_vec(),
    })
}

/// `text` as a glob that matches only itself.
pub fn glob_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The run a record of `_file_` `file` belongs to, and the glob that
/// selects that run.
fn run_of(file: &str) -> (String, String) {
    let (dir, name) = match file.rsplit_once('/') {
        Some((dir, name)) => (Some(dir), name),
        None => (None, file),
    };
    match ShardName::parse(name) {
        Some(shard) if shard.token.is_some() => {
            let run = match dir {
                Some(dir) => format!("{dir}/{}", shard.session),
                None => shard.session.clone(),
            };
            // The token is eight characters; the extension either format.
            let glob = format!("{}.????????.json*", glob_literal(&run));
            (run, glob)
        }
        _ => (file.to_string(), glob_literal(file)),
    }
}

#[derive(Default)]
struct RunTally {
    runs: HashMap<String, RunState>,
    /// The run of the last record's `_file_` (most records follow one of
    /// the same file).
    last: Option<(String, String)>,
    facets: BTreeMap<String, BTreeMap<String, u64>>,
    roles: BTreeMap<String, u64>,
}

struct RunState {
    summary: RunSummary,
    first: Option<Micros>,
    last: Option<Micros>,
}

impl RunState {
    fn finish(mut self) -> RunSummary {
        self.summary.first = self.first.map(Timestamp);
        self.summary.last = self.last.map(Timestamp);
        self.summary.duration_seconds = match (self.first, self.last) {
            (Some(a), Some(b)) => Some((b - a) as f64 / 1e6),
            _ => None,
        };
        self.summary
    }
}

impl Selected for RunTally {
    fn selected(
        &mut self,
        source: &Source,
        file: &str,
        record: Record<'_>,
        _after: Position,
    ) -> io::Result<ControlFlow<()>> {
        if self.last.as_ref().is_none_or(|(f, _)| f != file) {
            self.last = Some((file.to_string(), run_of(file).0));
        }
        let run = &self.last.as_ref().expect("set just above").1;
        let state = self.runs.entry(run.clone()).or_insert_with(|| RunState {
            summary: RunSummary {
                run: run.clone(),
                file: run_of(file).1,
                records: 0,
                failed: 0,
                first: None,
                last: None,
                duration_seconds: None,
                steps: 0,
                tokens: None,
                path_attrs: source.path_attrs.clone(),
            },
            first: None,
            last: None,
        });
        state.summary.records += 1;
        for (key, value) in &source.path_attrs {
            *self
                .facets
                .entry(key.clone())
                .or_default()
                .entry(value.clone())
                .or_default() += 1;
        }
        if let Some(ts) = record.timestamp {
            state.first = Some(state.first.map_or(ts, |f| f.min(ts)));
            state.last = Some(state.last.map_or(ts, |l| l.max(ts)));
        }
        if record.failed {
            state.summary.failed += 1;
            return Ok(ControlFlow::Continue(()));
        }
        let Body::Bytes(bytes) = record.body else {
            return Ok(ControlFlow::Continue(()));
        };
        if bytes.len() > PEEK_LIMIT {
            return Ok(ControlFlow::Continue(()));
        }
        if let Ok(peek) = serde_json::from_slice::<Peek<'_>>(bytes) {
            let seen = peek.seen();
            if let Some(role) = seen.role {
                *self.roles.entry(role.into_owned()).or_default() += 1;
            }
            state.summary.steps += seen.steps;
            if let Some(tokens) = seen.tokens {
                let sum = state.summary.tokens.get_or_insert_with(Tokens::default);
                sum.input += tokens.input;
                sum.output += tokens.output;
                sum.total += tokens.total;
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

struct BucketTally {
    bucket: Bucket,
    counts: BTreeMap<Micros, (u64, u64)>,
    untimed: u64,
}

impl Selected for BucketTally {
    fn selected(
        &mut self,
        _source: &Source,
        _file: &str,
        record: Record<'_>,
        _after: Position,
    ) -> io::Result<ControlFlow<()>> {
        match record.timestamp {
            Some(ts) => {
                let count = self.counts.entry(self.bucket.start(ts)).or_default();
                count.0 += 1;
                count.1 += u64::from(record.failed);
            }
            None => self.untimed += 1,
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// The fields of a record a run summary reads; everything else is skipped.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Peek<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    usage: Option<Usage>,
    #[serde(borrow)]
    message: Option<PeekMessage<'a>>,
    /// Codex rollout lines wrap the item.
    #[serde(borrow)]
    payload: Option<PeekMessage<'a>>,
    #[serde(borrow)]
    schema_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    steps: Option<Vec<AtifStep<'a>>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PeekMessage<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    usage: Option<Usage>,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(default)]
struct Usage {
    input_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    output_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

impl Usage {
    fn tokens(self) -> Tokens {
        let input = self.input_tokens.or(self.prompt_tokens).unwrap_or(0);
        let output = self.output_tokens.or(self.completion_tokens).unwrap_or(0);
        Tokens {
            input,
            output,
            total: self.total_tokens.unwrap_or(input + output),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AtifStep<'a> {
    #[serde(borrow)]
    source: Option<Cow<'a, str>>,
    metrics: Option<Usage>,
}

/// What one record adds to its run.
struct Seen<'a> {
    role: Option<Cow<'a, str>>,
    steps: u64,
    tokens: Option<Tokens>,
}

impl<'a> Peek<'a> {
    fn seen(self) -> Seen<'a> {
        if self
            .schema_version
            .as_deref()
            .is_some_and(|v| v.starts_with("ATIF-"))
        {
            return atif(self.steps.unwrap_or_default());
        }
        let inner = self.message.or(self.payload).unwrap_or_default();
        let role = self
            .role
            .or(inner.role)
            .or(self.kind.clone())
            .or(inner.kind);
        let assistant =
            role.as_deref() == Some("assistant") || self.kind.as_deref() == Some("assistant");
        let usage = self.usage.or(inner.usage);
        Seen {
            role,
            steps: u64::from(assistant),
            tokens: usage.map(Usage::tokens),
        }
    }
}

/// A whole ATIF trajectory in one record: its agent steps and their
/// token metrics.
fn atif(steps: Vec<AtifStep<'_>>) -> Seen<'static> {
    let mut tokens: Option<Tokens> = None;
    let mut agent = 0;
    for step in steps {
        agent += u64::from(step.source.as_deref() == Some("agent"));
        if let Some(metrics) = step.metrics {
            let t = metrics.tokens();
            let sum = tokens.get_or_insert_with(Tokens::default);
            sum.input += t.input;
            sum.output += t.output;
            sum.total += t.total;
        }
    }
    Seen {
        role: Some(Cow::Borrowed("trajectory")),
        steps: agent,
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(json: &str) -> (Option<String>, u64, Option<Tokens>) {
        let s = serde_json::from_str::<Peek<'_>>(json).unwrap().seen();
        (s.role.map(Cow::into_owned), s.steps, s.tokens)
    }

    #[test]
    fn roles_steps_and_tokens_of_the_common_shapes() {
        // OpenAI chat
        let (role, steps, tokens) = seen(
            r#"{"role":"assistant","content":"hi","usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
        );
        assert_eq!(role.as_deref(), Some("assistant"));
        assert_eq!(steps, 1);
        assert_eq!(
            tokens,
            Some(Tokens {
                input: 10,
                output: 5,
                total: 15
            })
        );
        // Claude Code
        let (role, steps, tokens) = seen(
            r#"{"type":"assistant","message":{"role":"assistant","usage":{"input_tokens":3,"output_tokens":4,"total_tokens":9}}}"#,
        );
        assert_eq!((role.as_deref(), steps), (Some("assistant"), 1));
        assert_eq!(tokens.unwrap().total, 9);
        // Codex
        let (role, steps, tokens) =
            seen(r#"{"type":"response_item","payload":{"type":"function_call","name":"sh"}}"#);
        assert_eq!(
            (role.as_deref(), steps, tokens),
            (Some("response_item"), 0, None)
        );
        // ATIF
        let (role, steps, tokens) = seen(
            r#"{"schema_version":"ATIF-v1.4","steps":[{"source":"user"},{"source":"agent","metrics":{"prompt_tokens":7,"completion_tokens":2}},{"source":"agent"}]}"#,
        );
        assert_eq!((role.as_deref(), steps), (Some("trajectory"), 2));
        assert_eq!(tokens.unwrap().total, 9);
        // Not an object at all
        assert!(serde_json::from_str::<Peek<'_>>("[1,2]").is_err());
    }

    #[test]
    fn session_shards_make_one_run_and_globs_match_only_themselves() {
        assert_eq!(
            run_of("store/s-1.abcdefgh.jsonl").0,
            "store/s-1",
            "a shard's run is its session"
        );
        assert_eq!(
            run_of("a/b[1].jsonl"),
            ("a/b[1].jsonl".into(), r"a/b\[1\].jsonl".into())
        );
        let glob = crate::extract::Glob::new(&run_of("a/b*[1].jsonl").1).unwrap();
        assert!(glob.matches("a/b*[1].jsonl"));
        assert!(!glob.matches("a/bx1.jsonl"));
    }

    #[test]
    fn buckets_are_utc_and_weeks_start_on_monday() {
        let t = crate::records::timestamp::parse_rfc3339("2026-12-03T13:45:00Z").unwrap();
        let fmt = crate::records::timestamp::format_rfc3339;
        assert_eq!(fmt(Bucket::Hour.start(t)), "2026-12-03T13:00:00Z");
        assert_eq!(fmt(Bucket::Day.start(t)), "2026-12-03T00:00:00Z");
        // 2026-12-03 is a Thursday.
        assert_eq!(fmt(Bucket::Week.start(t)), "2026-11-30T00:00:00Z");
    }
}
