//! The sample warehouse `pchronicle demo` builds: every layout this build
//! reads, small enough to read by eye, deterministic so docs and tests can
//! quote it.

use std::fmt;
use std::fs;
use std::path::Path;

use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordStats;
use crate::store::manifest::Manifest;
use crate::store::{DirectCounter, LeafStore, StorylineStore};

/// What was built.
#[derive(Debug, Default)]
pub struct DemoSummary {
    pub leaves: usize,
    pub record_files: usize,
    pub records: u64,
    pub indexes: usize,
}

impl fmt::Display for DemoSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} dataset leaves, {} loose record files, {} records, {} sidecar index",
            self.leaves, self.record_files, self.records, self.indexes
        )
    }
}

/// The tasks, commands and outputs demo sessions are made of.
const TASKS: [&str; 4] = [
    "The date parser rejects 2026-02-29; find out why and fix it.",
    "Add a --limit flag to the export command and document it.",
    "CI is red on the integration tests since yesterday. Investigate.",
    "Summarise what changed in the storage layer this week.",
];
const CALLS: [(&str, &str, &str); 4] = [
    (
        "shell",
        r#"{\"cmd\":\"cargo test parser::dates\"}"#,
        r#"test parser::dates::leap_day ... FAILED\nassertion failed: parse(\"2026-02-29\").is_err()"#,
    ),
    (
        "read_file",
        r#"{\"path\":\"src/export.rs\"}"#,
        "pub fn export(records: &[Record], out: &mut dyn Write) -> io::Result<()> { ... }",
    ),
    (
        "shell",
        r#"{\"cmd\":\"git log --oneline -5 -- tests/\"}"#,
        r#"a1b2c3d tests: pin the fixture clock\n9f8e7d6 storage: batch the fsyncs"#,
    ),
    (
        "search",
        r#"{\"query\":\"fn open_leaf\"}"#,
        "src/catalog/mod.rs:496: pub fn open_leaf(&self, rel: &Path) -> Result<Dir>",
    ),
];

/// A session's records, as an agent's run: a user's task, then assistant
/// turns that call a tool and the tool's results, in turn. Every record
/// carries `id`, `session`, `ts` and `role` (the demo index is by role);
/// `anthropic` picks Anthropic-style content blocks over OpenAI-style
/// chat messages.
fn session_records(session: &str, day: u32, turns: u32) -> Vec<String> {
    let anthropic = !(session.starts_with("s-0001") || session.starts_with("c-"));
    let seed = session.bytes().map(usize::from).sum::<usize>();
    (0..turns)
        .map(|i| {
            let head = format!(
                r#""id":"{session}-{i:04}","session":"{session}","ts":"2026-11-{day:02}T{:02}:{:02}:00Z""#,
                9 + i / 60,
                i % 60
            );
            let step = (seed + i as usize / 3) % CALLS.len();
            let (tool, args, output) = CALLS[step];
            let call = format!("call_{session}_{:04}", i - i % 3 + 1);
            let tokens = 900 + 37 * i + (seed as u32 % 100);
            match (i % 3, anthropic) {
                (0, false) => format!(
                    r#"{{{head},"role":"user","content":"{}"}}"#,
                    TASKS[(seed + i as usize) % TASKS.len()]
                ),
                (0, true) => format!(
                    r#"{{{head},"role":"user","content":[{{"type":"text","text":"{}"}}]}}"#,
                    TASKS[(seed + i as usize) % TASKS.len()]
                ),
                (1, false) => format!(
                    r#"{{{head},"role":"assistant","content":"Let me look.","tool_calls":[{{"id":"{call}","type":"function","function":{{"name":"{tool}","arguments":"{args}"}}}}],"usage":{{"prompt_tokens":{tokens},"completion_tokens":{},"total_tokens":{}}}}}"#,
                    tokens / 10,
                    tokens + tokens / 10
                ),
                (1, true) => format!(
                    r#"{{{head},"role":"assistant","content":[{{"type":"thinking","thinking":"I should check this with {tool} first."}},{{"type":"text","text":"Let me look."}},{{"type":"tool_use","id":"{call}","name":"{tool}","input":{}}}],"usage":{{"input_tokens":{tokens},"output_tokens":{}}}}}"#,
                    args.replace("\\\"", "\""),
                    tokens / 10
                ),
                (_, false) => format!(
                    r#"{{{head},"role":"tool","tool_call_id":"{call}","content":"{output}"}}"#
                ),
                (_, true) => format!(
                    r#"{{{head},"role":"tool","content":[{{"type":"tool_result","tool_use_id":"{call}","content":"{output}"}}]}}"#
                ),
            }
        })
        .collect()
}

/// The lines a Claude Code session writes: `type`, `message` (with its
/// `role`, content blocks and `usage`), `timestamp`, `sessionId`, `uuid`.
fn claude_code_lines(session: &str, day: u32, turns: u32) -> Vec<String> {
    let seed = session.bytes().map(usize::from).sum::<usize>();
    (0..turns)
        .map(|i| {
            let head = format!(
                r#""sessionId":"{session}","uuid":"{session}-{i:04}","timestamp":"2026-11-{day:02}T{:02}:{:02}:00Z","cwd":"/work/app""#,
                10 + i / 60,
                i % 60
            );
            let (tool, args, output) = CALLS[(seed + i as usize / 3) % CALLS.len()];
            let call = format!("toolu_{session}_{:04}", i - i % 3 + 1);
            let tokens = 1200 + 41 * i;
            match i % 3 {
                0 => format!(
                    r#"{{"type":"user",{head},"message":{{"role":"user","content":"{}"}}}}"#,
                    TASKS[(seed + i as usize) % TASKS.len()]
                ),
                1 => format!(
                    r#"{{"type":"assistant",{head},"message":{{"role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"thinking","thinking":"{tool} will tell me more."}},{{"type":"tool_use","id":"{call}","name":"{tool}","input":{}}}],"usage":{{"input_tokens":{tokens},"output_tokens":{},"cache_read_input_tokens":{}}}}}}}"#,
                    args.replace("\\\"", "\""),
                    tokens / 12,
                    tokens / 2
                ),
                _ => format!(
                    r#"{{"type":"user",{head},"message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{call}","content":"{output}"}}]}}}}"#
                ),
            }
        })
        .collect()
}

/// The items a Codex session's rollout holds: `response_item`s whose
/// payload is a `message`, a `reasoning`, a `function_call` or its
/// `function_call_output`.
fn codex_rollout_lines(session: &str, day: u32, turns: u32) -> Vec<String> {
    let seed = session.bytes().map(usize::from).sum::<usize>();
    (0..turns)
        .map(|i| {
            let ts = format!(
                "2026-11-{day:02}T{:02}:{:02}:30Z",
                14 + i / 60,
                i % 60
            );
            let (tool, args, output) = CALLS[(seed + i as usize / 4) % CALLS.len()];
            let call = format!("call_{session}_{:04}", i - i % 4 + 2);
            let payload = match i % 4 {
                0 => format!(
                    r#"{{"type":"message","role":"user","content":[{{"type":"input_text","text":"{}"}}]}}"#,
                    TASKS[(seed + i as usize) % TASKS.len()]
                ),
                1 => format!(
                    r#"{{"type":"reasoning","summary":[{{"type":"summary_text","text":"Start with {tool}."}}]}}"#
                ),
                2 => format!(
                    r#"{{"type":"function_call","name":"{tool}","arguments":"{args}","call_id":"{call}"}}"#
                ),
                _ => format!(
                    r#"{{"type":"function_call_output","call_id":"{call}","output":"{output}"}}"#
                ),
            };
            format!(r#"{{"timestamp":"{ts}","type":"response_item","payload":{payload}}}"#)
        })
        .collect()
}

/// One whole run as a single record in the Agent Trajectory Interchange
/// Format: the agent, and steps with their messages, tool calls,
/// observations and metrics.
fn atif_trajectory(session: &str, day: u32) -> String {
    let seed = session.bytes().map(usize::from).sum::<usize>();
    let (tool, args, output) = CALLS[seed % CALLS.len()];
    let task = TASKS[seed % TASKS.len()];
    let at = |minute: u32| format!("2026-11-{day:02}T16:{minute:02}:00Z");
    format!(
        r#"{{"schema_version":"ATIF-v1.2","session_id":"{session}","agent":{{"name":"harbor-agent","version":"0.4.1","model_name":"gpt-5"}},"steps":[{{"step_id":1,"timestamp":"{}","source":"user","message":"{task}"}},{{"step_id":2,"timestamp":"{}","source":"agent","message":"Checking with {tool}.","reasoning_content":"The quickest evidence comes from {tool}.","tool_calls":[{{"tool_call_id":"tc-{session}-1","function_name":"{tool}","arguments":{}}}],"observation":{{"results":[{{"source_call_id":"tc-{session}-1","content":"{output}"}}]}},"metrics":{{"prompt_tokens":{},"completion_tokens":{}}}}},{{"step_id":3,"timestamp":"{}","source":"agent","message":"Done: the cause is in the output above.","metrics":{{"prompt_tokens":{},"completion_tokens":{}}}}}],"final_metrics":{{"total_prompt_tokens":{},"total_completion_tokens":{},"total_steps":3}}}}"#,
        at(0),
        at(1),
        args.replace("\\\"", "\""),
        1500 + seed,
        120,
        at(3),
        1700 + seed,
        40,
        3200 + 2 * seed,
        160,
    )
}

fn write(dir: &Path, rel: &str, content: &str) -> Result<()> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, &e))?;
    }
    fs::write(&path, content).map_err(|e| Error::io(&path, &e))
}

fn lines(records: &[String]) -> String {
    records.iter().map(|r| format!("{r}\n")).collect()
}

fn packed(records: &[String]) -> String {
    records
        .iter()
        .map(|r| format!("\u{1e}{r}"))
        .collect::<String>()
        + "\u{1e}"
}

/// Builds the demo warehouse in `dir`, which must be new or empty.
pub fn build(dir: &Path) -> Result<DemoSummary> {
    if let Ok(mut entries) = fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(Error::at(
                ErrorCode::DemoTargetNotEmpty,
                dir,
                "the directory is not empty",
            ));
        }
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, &e))?;
    let mut summary = DemoSummary::default();
    let mut loose = |rel: &str, content: String, records: u64| -> Result<()> {
        summary.record_files += 1;
        summary.records += records;
        write(dir, rel, &content)
    };

    // Loose record files in hive-style partitions: line, packed, a torn
    // record, and a JSON array document.
    loose(
        "runs/date=2026-11-01__agent=codex/s-0001.jsonl",
        lines(&session_records("s-0001", 1, 12)),
        12,
    )?;
    let mut torn = lines(&session_records("s-0002", 2, 8));
    torn.push_str("{\"id\":\"s-0002-0008\",\"session\":\"s-00\n");
    loose("runs/date=2026-11-02/agent=claude/s-0002.ndjson", torn, 9)?;
    loose(
        "runs/date=2026-11-02/agent=claude/s-0003.5e1f0a2b.jsonseq",
        packed(&session_records("s-0003", 2, 6)),
        6,
    )?;
    // Three runs exported as ATIF trajectories, one record each.
    loose(
        "exports/highlights.json",
        format!(
            "[{}]\n",
            ["h-0001", "h-0002", "h-0003"]
                .iter()
                .enumerate()
                .map(|(i, s)| atif_trajectory(s, 7 + i as u32))
                .collect::<Vec<_>>()
                .join(",")
        ),
        3,
    )?;
    // A record store: per-session sealed shards, line (`.jsonl`) and
    // packed (`.jsonseq`), one session rotated onto a second shard, and a
    // legacy shard named without a token. `agent-a` is a Claude Code
    // session, `agent-b` a Codex one.
    let claude = claude_code_lines("agent-a", 4, 9);
    for (rel, content, records) in [
        ("sessions/agent-a.3f9c21d0.jsonl", lines(&claude[..5]), 5),
        ("sessions/agent-a.7b20e4c1.jsonl", lines(&claude[5..]), 4),
        (
            "sessions/agent-b.c0ffee12.jsonseq",
            packed(&codex_rollout_lines("agent-b", 5, 6)),
            6,
        ),
        (
            "sessions/agent-old.jsonl",
            lines(&session_records("agent-old", 1, 3)),
            3,
        ),
    ] {
        loose(rel, content, records)?;
    }
    // A sidecar point-lookup index over one record file, by role.
    crate::sidecar::build_index(
        &dir.join("runs/date=2026-11-01__agent=codex/s-0001.jsonl"),
        &["role".to_string()],
    )?;
    let summary_records = summary.records;
    let record_files = summary.record_files;
    write(
        dir,
        "README.txt",
        "A sample trajectory warehouse built by `pchronicle demo`.\n",
    )?;

    // Storyline leaves: one whose manifest is written here, one left for
    // the first reader to repair, under a branch that only describes.
    let mut leaves = 0;
    let mut records = summary_records;
    for (rel, sessions, write_manifest) in
        [("team/planner", 3u32, true), ("archive/2026-10", 2, false)]
    {
        let leaf = dir.join(rel);
        write(
            dir,
            &format!("{rel}/generations/g1/part-0000.jsonl"),
            &lines(&session_records("old", 1, 4)),
        )?;
        for s in 0..sessions {
            let session = format!("p-{s:04}");
            let content = session_records(&session, 3 + s, 10);
            let name = format!("{rel}/generations/g2/{session}.jsonl");
            write(dir, &name, &lines(&content))?;
            records += 10;
        }
        write(dir, &format!("{rel}/CURRENT"), "g2\n")?;
        if write_manifest {
            let opened =
                crate::warehouse::Dir::open_root(&leaf).map_err(|e| Error::io(&leaf, &e))?;
            StorylineStore.ensure_manifest(&opened, &DirectCounter)?;
        }
        leaves += 1;
    }
    Manifest::branch().write_at(&dir.join("team"))?;

    // A compact-jsonl leaf (a Lance dataset), in a build with Lance.
    #[cfg(feature = "compact-jsonl")]
    {
        records += compact_leaf(dir)?;
        leaves += 1;
    }

    // A leaf of a format this build cannot open: reported from its manifest.
    let foreign = Manifest::leaf(
        "parquet-trajectories/v2",
        "parquet:snapshot:7",
        RecordStats {
            record_count: 1000,
            ..RecordStats::default()
        },
    );
    fs::create_dir_all(dir.join("vendor/parquet_export")).map_err(|e| Error::io(dir, &e))?;
    foreign.write_at(&dir.join("vendor/parquet_export"))?;
    leaves += 1;

    Ok(DemoSummary {
        leaves,
        record_files,
        records,
        indexes: 1,
    })
}

/// Imports `team/codex_jsonl`, a compact-jsonl leaf, from records staged
/// under the hidden state directory and removed afterwards; returns how
/// many records it holds.
#[cfg(feature = "compact-jsonl")]
fn compact_leaf(dir: &Path) -> Result<u64> {
    let staging = dir.join(crate::warehouse::STATE_DIR).join("demo-import");
    let staged: Vec<String> = (0..4)
        .flat_map(|s| session_records(&format!("c-{s:04}"), 6 + s, 15))
        .collect();
    write(
        dir,
        &format!("{}/demo-import/codex.jsonl", crate::warehouse::STATE_DIR),
        &lines(&staged),
    )?;
    let report = crate::store::CompactJsonlStore::default().import_path(
        &staging,
        &dir.join("team/codex_jsonl"),
        crate::store::compact::ImportMode::Create,
    )?;
    fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, &e))?;
    Ok(report.record_count)
}
