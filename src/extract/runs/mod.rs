//! Runs and histograms: what a plan's records add up to, per run and per
//! time bucket, in one pass over them.
//!
//! A run is one `_file_` of the opened path (a loose record file, a
//! storyline generation's file, a compact-jsonl row's `_file_`), except
//! that the shards of one record-store session (`<session>.<token>.jsonl`
//! and `.jsonseq` in one directory) make one run together. Each record is
//! looked at only for the few fields a summary needs (a role, a type,
//! token usage); its other bytes are skipped without being kept.

mod atif;
pub mod compare;
mod cut;
mod histogram;
mod json;
mod looked;
pub mod page;
mod peek;
mod select;
pub mod steps;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::ControlFlow;

use serde::Serialize;

use super::{Plan, Position, Selected};
use crate::catalog::{Catalog, Source, Timestamp, Warning};
use crate::error::Result;
use crate::records::read::{Body, Record};
use crate::records::scan::Landmarks;
use crate::records::timestamp::Micros;
use crate::shards::ShardName;
pub use cut::{BUCKETS_AT_MOST, CUT_MARK, KEY_CHARS_AT_MOST, Other, RunsOther, VALUES_AT_MOST};
pub use histogram::{Bucket, BucketCount, Histogram, histogram};
use looked::Looked;
pub use looked::{Outcome, TASK_CHARS_AT_MOST};
pub use select::{GROUPS_AT_MOST, Groups, GroupsLeft, RunFilter, group_of};

/// Records larger than this are counted but not looked into.
const PEEK_LIMIT: usize = 4 << 20;

/// One run's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// The run's name: its `_file_`, or `DIR/SESSION` for a session's
    /// shards (never cut: `file` must select exactly this run).
    pub run: String,
    /// A `--file` glob that selects exactly this run's records.
    pub file: String,
    pub records: u64,
    pub failed: u64,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
    pub duration_seconds: Option<f64>,
    /// Agent turns: a model response with its tool calls, however many
    /// records it is written as (ATIF: agent steps).
    pub steps: u64,
    /// Token totals; `null` when no record carried usage.
    pub tokens: Option<Tokens>,
    /// The first user message's words, cut at [`TASK_CHARS_AT_MOST`]
    /// characters.
    pub task: Option<String>,
    /// The first model a record names.
    pub model: Option<String>,
    /// The agent, where a record names it (ATIF `agent.name`, a Codex
    /// `session_meta`'s `originator`).
    pub agent: Option<String>,
    pub tool_calls: u64,
    /// Tool results marked as failed.
    pub tool_errors: u64,
    pub outcome: Outcome,
    /// The hive attributes of its directory, each key and value cut as
    /// [`cut::key`] cuts them.
    pub path_attrs: BTreeMap<String, String>,
}

/// Token totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub total: u64,
}

impl Tokens {
    /// Two runs' totals together (`None`: neither carried usage).
    fn sum(a: Option<Tokens>, b: Option<Tokens>) -> Option<Tokens> {
        match (a, b) {
            (Some(x), Some(y)) => Some(Tokens {
                input: x.input.saturating_add(y.input),
                output: x.output.saturating_add(y.output),
                total: x.total.saturating_add(y.total),
            }),
            (x, y) => x.or(y),
        }
    }
}

/// The runs of a plan: every run (answered a page at a time, see
/// [`page`]) and their [`Summary`].
#[derive(Debug, Clone, PartialEq)]
pub struct Runs {
    /// Every run, by name.
    pub runs: Vec<RunSummary>,
    pub summary: Summary,
}

/// What a plan's runs add up to, without listing them: `GET
/// /api/runs/summary`. Each list a writer decides the length of is cut;
/// `other` says what was left out of which.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Runs, records and failed records in all.
    pub runs: u64,
    pub records: u64,
    pub failed: u64,
    /// Records by the value of each hive path attribute.
    pub facets: BTreeMap<String, BTreeMap<String, u64>>,
    /// Records by role (`role`, `message.role`, else `type`), of every
    /// run of the selection (a run filter leaves them as they are).
    pub roles: BTreeMap<String, u64>,
    /// Runs by `model`, `agent` and `stop` (the outcome's stop reason).
    pub reviewed: BTreeMap<&'static str, BTreeMap<String, u64>>,
    pub other: RunsOther,
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
    // Sources in groups of about equal bytes, each read and looked into
    // on a thread of its own; a single source is read on this thread
    // while another looks into its records.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS));
    let groups = plan.balanced(threads);
    let tallies = if groups.len() > 1 {
        let parts: Vec<Plan> = groups
            .iter()
            .map(|group| plan.part(|j, _| group.binary_search(&j).is_ok()))
            .collect();
        in_parallel(catalog, &parts)?
    } else {
        vec![with_looker(catalog, plan)?]
    };
    let (runs, roles) = merged(tallies);
    let summary = Summary::of(
        runs.iter(),
        (roles, None),
        plan.truncated(),
        plan.warnings().to_vec(),
    );
    Ok(Runs { runs, summary })
}

impl Runs {
    /// Bytes it holds, about: what keeping it costs (a map of attributes
    /// is a node of about 550 bytes; each string has the allocator's
    /// overhead too).
    pub fn weight(&self) -> usize {
        let run = |r: &RunSummary| {
            let attrs: usize = match r.path_attrs.len() {
                0 => 0,
                _ => {
                    560 + r
                        .path_attrs
                        .iter()
                        .map(|(k, v)| k.len() + v.len() + 32)
                        .sum::<usize>()
                }
            };
            let texts = [&r.task, &r.model, &r.agent, &r.outcome.stop]
                .iter()
                .filter_map(|t| t.as_ref().map(|t| t.len() + 16))
                .sum::<usize>();
            std::mem::size_of::<RunSummary>() + r.run.len() + r.file.len() + 32 + attrs + texts
        };
        self.runs.iter().map(run).sum::<usize>() + (64 << 10)
    }
}

/// Threads reading a plan's sources for its runs, at most.
const MAX_THREADS: usize = 8;

/// What one part of a plan adds up to.
struct Tallied {
    /// Steps and tokens included.
    runs: Vec<RunState>,
    roles: BTreeMap<String, u64>,
}

/// Tallies each part on a thread of its own, each reading its files on
/// that thread alone and looking into the records as it goes.
fn in_parallel(catalog: &Catalog, parts: &[Plan]) -> Result<Vec<Tallied>> {
    let work = crate::work::current();
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(parts.len());
        for part in parts {
            let work = work.clone();
            let handle = std::thread::Builder::new()
                .name("pchronicle-runs".into())
                .spawn_scoped(scope, move || {
                    crate::work::within_opt(work.as_ref(), || {
                        crate::records::read::serially(|| tallied(catalog, part, None))
                    })
                })
                .map_err(thread_error)?;
            handles.push(handle);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::error::Error::new(
                        crate::error::ErrorCode::RequestFailed,
                        "a runs thread panicked",
                    ))
                })
            })
            .collect()
    })
}

/// Tallies `plan` reading on this thread while another looks into the
/// records' bytes, handed over in batches, so a pass costs about what
/// reading alone does.
fn with_looker(catalog: &Catalog, plan: &Plan) -> Result<Tallied> {
    let (send, receive) = std::sync::mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT);
    // Batches looked into come back to be filled again.
    let (give_back, returned) = std::sync::mpsc::channel::<Batch>();
    let looker = std::thread::Builder::new()
        .name("pchronicle-runs".into())
        .spawn(move || {
            let mut looked = Looked::default();
            for mut batch in receive {
                let mut start = 0;
                for &(at, end, marks) in &batch.records {
                    looked.look(at, &batch.bytes[start..end], marks.as_ref());
                    start = end;
                }
                batch.bytes.clear();
                batch.records.clear();
                let _ = give_back.send(batch);
            }
            looked
        })
        .map_err(thread_error)?;
    tallied(catalog, plan, Some((send, returned, looker)))
}

/// Tallies `plan`: with a looking thread, its bytes go there; without,
/// they are looked into here.
fn tallied(
    catalog: &Catalog,
    plan: &Plan,
    looker: Option<(
        std::sync::mpsc::SyncSender<Batch>,
        std::sync::mpsc::Receiver<Batch>,
        std::thread::JoinHandle<Looked>,
    )>,
) -> Result<Tallied> {
    let (send, returned, thread) = match looker {
        Some((send, returned, thread)) => (Some(send), Some(returned), Some(thread)),
        None => (None, None, None),
    };
    let mut tally = RunTally {
        send,
        returned,
        ..RunTally::default()
    };
    let visited = plan.visit(catalog, Position::default(), true, &mut tally);
    tally.hand_over();
    drop(tally.send.take());
    // What this thread looked into itself, then what the looking thread
    // found: a run's records looked into here all come before those sent
    // there.
    let mut looked = std::mem::take(&mut tally.looked);
    if let Some(thread) = thread {
        looked.then(thread.join().expect("the runs thread does not panic"));
    }
    let _ = visited?;
    let mut runs = tally.runs;
    for (at, seen) in looked.runs.into_iter().enumerate() {
        let run = &mut runs[at];
        if let Some((first, last)) = seen.span {
            run.first = Some(run.first.map_or(first, |f| f.min(first)));
            run.last = Some(run.last.map_or(last, |l| l.max(last)));
        }
        seen.fill(&mut run.summary);
    }
    Ok(Tallied {
        runs,
        roles: looked.roles,
    })
}

/// The runs of all parts (a run's records may be in several), by name.
fn merged(tallies: Vec<Tallied>) -> (Vec<RunSummary>, BTreeMap<String, u64>) {
    let mut roles: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_name: BTreeMap<String, RunState> = BTreeMap::new();
    for tally in tallies {
        for (role, n) in tally.roles {
            *roles.entry(role).or_default() += n;
        }
        for state in tally.runs {
            match by_name.entry(state.summary.run.clone()) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(state);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().absorb(state),
            }
        }
    }
    let runs = by_name.into_values().map(RunState::finish).collect();
    (runs, roles)
}

fn thread_error(e: io::Error) -> crate::error::Error {
    crate::error::Error::new(
        crate::error::ErrorCode::Io,
        format!("cannot start a thread: {e}"),
    )
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
    /// Batches the looking thread is done with.
    returned: Option<std::sync::mpsc::Receiver<Batch>>,
    /// Without a looking thread: what this one found.
    looked: Looked,
}

/// Records' bytes handed to the looking thread at once.
const BATCH_BYTES: usize = 1 << 20;
/// Batches on their way at most (bounding the memory of a pass).
const BATCHES_IN_FLIGHT: usize = 4;

/// Valid records' bytes, each with its run's place.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// (run, end of the record in `bytes`, its landmarks)
    records: Vec<(usize, usize, Option<Landmarks>)>,
}

impl RunTally {
    /// Sends the batch gathered so far.
    fn hand_over(&mut self) {
        if self.batch.records.is_empty() {
            return;
        }
        let empty = self
            .returned
            .as_ref()
            .and_then(|r| r.try_recv().ok())
            .unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, empty);
        if let Some(send) = &self.send {
            // The looking thread ends only when this side drops `send`.
            let _ = send.send(batch);
        }
    }
}

struct RunState {
    summary: RunSummary,
    first: Option<Micros>,
    last: Option<Micros>,
    /// Its records go to the looking thread from now on.
    sent: bool,
}

impl RunState {
    /// Takes in the same run's records from another part.
    fn absorb(&mut self, other: RunState) {
        let (a, b) = (&mut self.summary, other.summary);
        a.records += b.records;
        a.failed += b.failed;
        a.steps += b.steps;
        a.tokens = Tokens::sum(a.tokens, b.tokens);
        a.task = a.task.take().or(b.task);
        a.model = a.model.take().or(b.model);
        a.agent = a.agent.take().or(b.agent);
        a.tool_calls = a.tool_calls.saturating_add(b.tool_calls);
        a.tool_errors = a.tool_errors.saturating_add(b.tool_errors);
        a.outcome = std::mem::take(&mut a.outcome).or(b.outcome);
        self.first = self.first.into_iter().chain(other.first).min();
        self.last = self.last.into_iter().chain(other.last).max();
    }

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
    fn wants_landmarks(&self) -> bool {
        true
    }

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
                            task: None,
                            model: None,
                            agent: None,
                            tool_calls: 0,
                            tool_errors: 0,
                            outcome: Outcome::default(),
                            path_attrs: source
                                .path_attrs
                                .iter()
                                .map(|(k, v)| (cut::key(k).into_owned(), cut::key(v).into_owned()))
                                .collect(),
                        },
                        first: None,
                        last: None,
                        sent: false,
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
        // A run's records are looked into here (a role and a few short
        // fields cost little) until one has a `message`, `payload` or
        // trajectory to walk; from it on, all of the run's go to the
        // looking thread, when there is one. So each thread sees its part
        // of a run in order, and this one's part comes first.
        let deep = record
            .landmarks
            .is_none_or(|m| m.inner().is_some() || m.schema_version().is_some());
        if self.send.is_none() || (!deep && !state.sent) {
            self.looked.look(at, bytes, record.landmarks.as_ref());
            return Ok(ControlFlow::Continue(()));
        }
        state.sent = true;
        self.batch.bytes.extend_from_slice(bytes);
        self.batch
            .records
            .push((at, self.batch.bytes.len(), record.landmarks));
        if self.batch.bytes.len() >= BATCH_BYTES {
            self.hand_over();
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn empty_summary() -> RunSummary {
        let (run, file) = run_of("r.jsonl");
        RunSummary {
            run,
            file,
            records: 0,
            failed: 0,
            first: None,
            last: None,
            duration_seconds: None,
            steps: 0,
            tokens: None,
            task: None,
            model: None,
            agent: None,
            tool_calls: 0,
            tool_errors: 0,
            outcome: Outcome::default(),
            path_attrs: BTreeMap::new(),
        }
    }

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
