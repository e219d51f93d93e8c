//! Runs and histograms: what a plan's records add up to, per run and per
//! time bucket, in one pass over them.
//!
//! A run is one `_file_` of the opened path (a loose record file, a
//! storyline generation's file, a compact-jsonl row's `_file_`), except
//! that the shards of one record-store session (`<session>.<token>.jsonl`
//! and `.jsonseq` in one directory) make one run together. Each record is
//! looked at only for the few fields a summary needs (a role, a type,
//! token usage); its other bytes are skipped without being kept.

mod peek;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::ControlFlow;

use serde::Serialize;

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
    // This thread reads and counts; another looks into the records'
    // bytes, handed over in batches, so a pass costs about what reading
    // alone does.
    let (send, receive) = std::sync::mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT);
    let looker = std::thread::Builder::new()
        .name("pchronicle-runs".into())
        .spawn(move || {
            let mut looked = Looked::default();
            for batch in receive {
                looked.add(&batch);
            }
            looked
        })
        .map_err(|e| {
            crate::error::Error::new(
                crate::error::ErrorCode::Io,
                format!("cannot start a thread: {e}"),
            )
        })?;
    let mut tally = RunTally {
        send: Some(send),
        ..RunTally::default()
    };
    let visited = plan.visit(catalog, Position::default(), true, &mut tally);
    tally.hand_over();
    drop(tally.send.take());
    let looked = looker.join().expect("the runs thread does not panic");
    let _ = visited?;
    let mut states = tally.runs;
    for (at, seen) in looked.runs.into_iter().enumerate() {
        let summary = &mut states[at].summary;
        summary.steps = seen.steps;
        summary.tokens = seen.tokens;
    }
    let mut runs: Vec<RunSummary> = states.into_iter().map(RunState::finish).collect();
    runs.sort_by(|a, b| a.run.cmp(&b.run));
    // A run's records all come from sources of one directory, so they
    // share its hive attributes.
    let mut facets: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for run in &runs {
        for (key, value) in &run.path_attrs {
            *facets
                .entry(key.clone())
                .or_default()
                .entry(value.clone())
                .or_default() += run.records;
        }
    }
    Ok(Runs {
        runs,
        facets,
        roles: looked.roles,
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
    runs: Vec<RunState>,
    /// Where each run is in `runs`.
    by_name: HashMap<String, usize>,
    /// The last record's `_file_` and its run's place (most records
    /// follow one of the same file, and then cost one comparison).
    last: Option<(String, usize)>,
    /// Record bytes on their way to the thread that looks into them.
    batch: Batch,
    send: Option<std::sync::mpsc::SyncSender<Batch>>,
}

/// Longest role counted (in bytes).
const ROLE_AT_MOST: usize = 64;

/// Records' bytes handed to the looking thread at once.
const BATCH_BYTES: usize = 1 << 20;
/// Batches on their way at most (bounding the memory of a pass).
const BATCHES_IN_FLIGHT: usize = 4;

/// Valid records' bytes, each with its run's place.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// (run, end of the record in `bytes`)
    records: Vec<(usize, usize)>,
}

impl RunTally {
    /// Sends the batch gathered so far.
    fn hand_over(&mut self) {
        if self.batch.records.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        if let Some(send) = &self.send {
            // The looking thread ends only when this side drops `send`.
            let _ = send.send(batch);
        }
    }
}

/// What the looking thread found: per run (by place), and roles.
#[derive(Default)]
struct Looked {
    runs: Vec<RunLooked>,
    roles: BTreeMap<String, u64>,
}

#[derive(Default, Clone, Copy)]
struct RunLooked {
    steps: u64,
    tokens: Option<Tokens>,
}

impl Looked {
    fn add(&mut self, batch: &Batch) {
        let mut start = 0;
        for &(at, end) in &batch.records {
            let bytes = &batch.bytes[start..end];
            start = end;
            let Some(seen) = peek::seen(bytes) else {
                continue;
            };
            // A role is a word; a long one is some writer's text, not kept.
            if let Some(role) = seen.role.filter(|r| r.len() <= ROLE_AT_MOST) {
                match self.roles.get_mut(&*role) {
                    Some(n) => *n += 1,
                    None => {
                        self.roles.insert(role.into_owned(), 1);
                    }
                }
            }
            if self.runs.len() <= at {
                self.runs.resize(at + 1, RunLooked::default());
            }
            let run = &mut self.runs[at];
            run.steps += seen.steps;
            if let Some(tokens) = seen.tokens {
                let sum = run.tokens.get_or_insert_with(Tokens::default);
                sum.input += tokens.input;
                sum.output += tokens.output;
                sum.total += tokens.total;
            }
        }
    }
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
            let (run, glob) = run_of(file);
            let at = match self.by_name.get(&run) {
                Some(&at) => at,
                None => {
                    self.runs.push(RunState {
                        summary: RunSummary {
                            run: run.clone(),
                            file: glob,
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
                    self.by_name.insert(run, self.runs.len() - 1);
                    self.runs.len() - 1
                }
            };
            self.last = Some((file.to_string(), at));
        }
        let at = self.last.as_ref().expect("set just above").1;
        let state = &mut self.runs[at];
        state.summary.records += 1;
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
        self.batch.bytes.extend_from_slice(bytes);
        self.batch.records.push((at, self.batch.bytes.len()));
        if self.batch.bytes.len() >= BATCH_BYTES {
            self.hand_over();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_shards_make_one_run_and_globs_match_only_themselves() {
        assert_eq!(
            run_of("store/s-1.0a1b2c3d.jsonl").0,
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
