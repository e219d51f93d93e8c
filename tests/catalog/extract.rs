//! Records out (`pchronicle cat`, `extract::Plan`): every valid record as
//! stored, in `_file_` then record order, and filters that prune sources
//! before opening them.

use std::io::{self, Read, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Command, Stdio};

use pchronicle::catalog::Catalog;
use pchronicle::extract::{Output, Plan, Position, Selection, Shape};
use pchronicle::records::timestamp;

use crate::support::{Warehouse, pchronicle, stdout};

/// A plan's output, in memory.
#[derive(Default)]
pub struct Collected(pub Vec<u8>);

impl Write for Collected {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output for Collected {
    fn record_end(&mut self, _after: Position) -> io::Result<ControlFlow<()>> {
        Ok(ControlFlow::Continue(()))
    }
}

/// What `cat` writes for `rel` with `selection`.
pub fn cat(catalog: &Catalog, rel: &str, selection: Selection, shape: Shape) -> Vec<u8> {
    let plan = Plan::new(catalog, Path::new(rel), selection, shape).unwrap();
    let mut out = Collected::default();
    let _ = plan.run(catalog, Position::default(), &mut out).unwrap();
    out.0
}

/// The valid records of a line or packed stream as the reference reads
/// them: split on both separators, trimmed, blank ones skipped, kept when
/// serde_json accepts them.
fn valid_records(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split(|b| *b == b'\n' || *b == 0x1e)
        .map(|s| s.trim_ascii())
        .filter(|s| !s.is_empty() && serde_json::from_slice::<serde_json::Value>(s).is_ok())
        .map(<[u8]>::to_vec)
        .collect()
}

fn lines(records: &[Vec<u8>]) -> Vec<u8> {
    records
        .iter()
        .flat_map(|r| r.iter().copied().chain([b'\n']))
        .collect()
}

const DAY: i64 = 86_400;
const JAN_1: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn records_at(first: i64, n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"tag\":\"{tag}\",\"ts\":{},\"i\":{i}}}\n",
                first + i as i64 * 60
            )
        })
        .collect()
}

/// team=a (January), team=b (February, packed), a pretty `.json` array and
/// a storyline leaf, with torn records and blank lines among them.
fn warehouse() -> Warehouse {
    let w = Warehouse::new();
    let a = format!(
        "{}\r\n\n{{\"torn\":\n{}",
        records_at(JAN_1, 3, "a1").trim_end(),
        records_at(JAN_1 + 3600, 2, "a1")
    );
    w.file("team=a/session=s1/s1.jsonl", a);
    w.file(
        "team=a/session=s2/s2.jsonl",
        records_at(JAN_1 + DAY, 4, "a2"),
    );
    let packed: String = records_at(JAN_1 + 31 * DAY, 3, "b")
        .lines()
        .map(|l| format!("\u{1e}{l}"))
        .collect::<String>()
        + "\u{1e}{\"x\":";
    w.file("team=b/session=s3/s3.jsonseq", packed);
    w.file(
        "notes.json",
        "[\n  {\"tag\": \"doc\",\n   \"ts\": 1767225600},\n  [1, 2]\n]\n",
    );
    w.storyline("story", 5);
    w
}

#[test]
fn cat_gives_every_valid_record_as_stored_in_file_order() {
    let w = warehouse();
    let catalog = w.catalog();
    let got = cat(&catalog, ".", Selection::default(), Shape::Plain);
    // The reference, source by source in `_file_` order.
    let mut expected = Vec::new();
    expected.extend(b"{\"tag\": \"doc\",    \"ts\": 1767225600}\n[1, 2]\n");
    for rel in [
        "story/generations/g2/part-0.jsonl",
        "team=a/session=s1/s1.jsonl",
        "team=a/session=s2/s2.jsonl",
        "team=b/session=s3/s3.jsonseq",
    ] {
        expected.extend(lines(&valid_records(&std::fs::read(w.abs(rel)).unwrap())));
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&expected)
    );
    // The CLI prints the same bytes.
    let cli = pchronicle(&["cat", w.path().to_str().unwrap()]);
    assert_eq!(stdout(&cli).as_bytes(), &got[..]);
    // A single record file and a leaf alone.
    let one = cat(
        &catalog,
        "team=a/session=s2/s2.jsonl",
        Selection::default(),
        Shape::Plain,
    );
    assert_eq!(one, records_at(JAN_1 + DAY, 4, "a2").into_bytes());
    let leaf = cat(&catalog, "story", Selection::default(), Shape::Plain);
    assert_eq!(leaf.iter().filter(|b| **b == b'\n').count(), 5);
}

#[test]
fn failed_and_annotated_records_say_where_they_are() {
    let w = warehouse();
    let catalog = w.catalog();
    let selection = Selection {
        failed: true,
        ..Selection::default()
    };
    let got = cat(&catalog, "team=a", selection, Shape::Annotated);
    let rows: Vec<serde_json::Value> = got
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3 + 1 + 2 + 4);
    let torn = &rows[3];
    assert_eq!(torn["_file_"], "session=s1/s1.jsonl");
    assert_eq!(torn["line"], 4);
    assert_eq!(torn["failed"], true);
    assert_eq!(torn["raw"], "{\"torn\":");
    assert_eq!(torn["record"], serde_json::Value::Null);
    let first = &rows[0];
    assert_eq!(first["path_attrs"]["session"], "s1");
    assert_eq!(first["timestamp"], "2026-01-01T00:00:00Z");
    assert_eq!(first["record"]["tag"], "a1");
    assert_eq!(rows[4]["line"], 5, "lines count records, torn ones too");
}

/// Every filter leaves out the sources it cannot match without opening
/// them, and keeps exactly the records a reference filter keeps.
#[test]
fn filters_prune_sources_unopened_and_agree_with_a_reference() {
    let w = warehouse();
    // Counts of files written this instant are not cached (their mtime
    // could still move within its granularity); let them settle.
    crate::support::settle();
    let everything = {
        let catalog = w.catalog();
        let selection = Selection {
            failed: false,
            ..Selection::default()
        };
        cat(&catalog, ".", selection, Shape::Annotated)
    };
    let all: Vec<serde_json::Value> = everything
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let check = |selection: Selection, opened: u64, keep: &dyn Fn(&serde_json::Value) -> bool| {
        let catalog = w.catalog();
        // Known time ranges come from counts the cache already holds.
        catalog.stats(Path::new(".")).unwrap();
        let before = catalog.cache_hits().files_opened;
        let got = cat(&catalog, ".", selection.clone(), Shape::Annotated);
        let opened_now = catalog.cache_hits().files_opened - before;
        let expected: Vec<u8> = all
            .iter()
            .filter(|r| keep(r))
            .flat_map(|r| serde_json::to_vec(r).unwrap().into_iter().chain([b'\n']))
            .collect();
        let got_values: Vec<serde_json::Value> = got
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        let expected_values: Vec<serde_json::Value> = expected
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(got_values, expected_values, "{selection:?}");
        assert_eq!(opened_now, opened, "files opened for {selection:?}");
    };
    let mut team_a = Selection::default();
    team_a.add_where("team=a").unwrap();
    check(team_a, 2, &|r| r["path_attrs"]["team"] == "a");

    let mut either = Selection::default();
    either.add_where("session=s1").unwrap();
    either.add_where("session=s3").unwrap();
    check(either, 2, &|r| {
        r["path_attrs"]["session"] == "s1" || r["path_attrs"]["session"] == "s3"
    });

    let mut glob = Selection::default();
    glob.set_file("team=*/**/*.jsonseq").unwrap();
    check(glob, 1, &|r| {
        r["_file_"].as_str().unwrap().ends_with(".jsonseq")
    });

    // February: only the packed shard overlaps; January's files and the
    // storyline leaf (2026-01-01) are pruned by their known ranges.
    let mut feb = Selection::default();
    feb.set_time("2026-02-01T00:00:00Z", false).unwrap();
    let since = timestamp::parse_rfc3339("2026-02-01T00:00:00Z").unwrap();
    check(feb, 1, &|r| {
        r["timestamp"]
            .as_str()
            .and_then(timestamp::parse_rfc3339)
            .is_some_and(|t| t >= since)
    });

    // A window inside team=a/s1's range: only that file is opened, and
    // only its records in the window come out.
    let mut hour = Selection::default();
    hour.set_time("2026-01-01T00:01:00Z", false).unwrap();
    hour.set_time("2026-01-01T01:00:30Z", true).unwrap();
    let (from, to) = (
        timestamp::parse_rfc3339("2026-01-01T00:01:00Z").unwrap(),
        timestamp::parse_rfc3339("2026-01-01T01:00:30Z").unwrap(),
    );
    check(hour, 1, &|r| {
        r["timestamp"]
            .as_str()
            .and_then(timestamp::parse_rfc3339)
            .is_some_and(|t| t >= from && t < to)
    });
}

#[test]
fn limit_stops_early_and_a_closed_pipe_is_not_an_error() {
    let w = Warehouse::new();
    let line = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(200));
    w.file("big.jsonl", line.repeat(200_000));
    let catalog = w.catalog();
    let selection = Selection {
        limit: Some(3),
        ..Selection::default()
    };
    assert_eq!(
        cat(&catalog, "big.jsonl", selection, Shape::Plain),
        line.repeat(3).into_bytes()
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(["cat", w.abs("big.jsonl").to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = vec![0u8; line.len()];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe is closed here, with most of the file unread.
    let output = child.wait_with_output().unwrap();
    assert_eq!(first, line.as_bytes());
    assert!(output.status.success(), "{:?}", output);
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn bad_filters_are_coded() {
    let w = warehouse();
    let path = w.path().to_str().unwrap();
    for args in [
        vec!["cat", path, "--since", "yesterday"],
        vec!["cat", path, "--where", "team"],
        vec!["cat", path, "--file", "[a"],
        vec![
            "cat",
            path,
            "--since",
            "2026-02-01T00:00:00Z",
            "--until",
            "2026-01-01T00:00:00Z",
        ],
        vec!["ls", path, "--where", "team=a"],
    ] {
        let out = pchronicle(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("PCHRONICLE_FILTER_INVALID"), "{args:?}: {err}");
    }
}

#[test]
fn ls_sources_and_stats_take_the_same_filters() {
    let w = warehouse();
    let path = w.path().to_str().unwrap();
    let listed = stdout(&pchronicle(&[
        "ls",
        path,
        "--sources",
        "--json",
        "--where",
        "team=b",
    ]));
    let rows: Vec<serde_json::Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["_file_"], "team=b/session=s3/s3.jsonseq");
    let stats = stdout(&pchronicle(&["stats", path, "--json", "--where", "team=a"]));
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["sources"], 2);
    assert_eq!(stats["record_count"], 6 + 4);
}
