//! `pchronicle sync` against an independent model: after every step of a
//! scripted history, the leaf's rows are exactly the complete records of
//! the source files, each with its file and 1-based record number, as a
//! whole import of the source would give; a sync with nothing new
//! publishes nothing; a killed sync leaves the leaf at a whole version.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use arrow::array::{Array, BooleanArray, LargeStringArray, StringArray, UInt64Array};
use lance::Dataset;
use pchronicle::error::ErrorCode;
use pchronicle::store::compact::sync::{Change, SyncReport};
use pchronicle::store::compact::{CompactJsonlStore, ImportMode};

use crate::support::{Warehouse, jsonl, lance_runtime, scan_all};

/// One row: file, record number, record text, failed.
type Row = (String, u64, String, bool);

/// The model: every complete record (a line ended by a newline, not blank)
/// of every `.jsonl` file below `source`, numbered from 1 per file.
fn model(source: &Path) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut stack = vec![source.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
                continue;
            }
            let rel = path
                .strip_prefix(source)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let complete = &text[..text.rfind('\n').map_or(0, |at| at + 1)];
            let mut line = 0;
            for record in complete
                .split('\n')
                .map(str::trim)
                .filter(|r| !r.is_empty())
            {
                line += 1;
                let failed = serde_json::from_str::<serde_json::Value>(record).is_err();
                rows.push((rel.clone(), line, record.to_string(), failed));
            }
        }
    }
    rows.sort();
    rows
}

/// The leaf's rows, and its version.
fn leaf(dest: &Path) -> (Vec<Row>, u64) {
    let rt = lance_runtime();
    let dataset = rt.block_on(Dataset::open(dest.to_str().unwrap())).unwrap();
    let mut rows = Vec::new();
    for batch in scan_all(&rt, &dataset) {
        let col = |name: &str| batch.column_by_name(name).unwrap().clone();
        let files = col("_file_");
        let files = files.as_any().downcast_ref::<StringArray>().unwrap();
        let lines = col("line");
        let lines = lines.as_any().downcast_ref::<UInt64Array>().unwrap();
        let records = col("record");
        let records = records.as_any().downcast_ref::<LargeStringArray>().unwrap();
        let failed = col("failed");
        let failed = failed.as_any().downcast_ref::<BooleanArray>().unwrap();
        for i in 0..batch.num_rows() {
            rows.push((
                files.value(i).to_string(),
                lines.value(i),
                records.value(i).to_string(),
                failed.value(i),
            ));
        }
    }
    rows.sort();
    (rows, dataset.version().version)
}

fn sync(source: &Path, dest: &Path) -> SyncReport {
    CompactJsonlStore::default()
        .sync_path(source, dest, false)
        .unwrap()
}

fn changes(report: &SyncReport) -> Vec<(String, Change)> {
    report
        .changes
        .iter()
        .map(|c| (c.file.clone(), c.change))
        .collect()
}

fn append(w: &Warehouse, rel: &str, text: &str) {
    w.file_append(rel, text);
}

#[test]
fn sync_follows_a_scripted_history() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0))
        .file("src/sub/b.jsonl", format!("{}{{\"id\":\"torn", jsonl(2, 0)));
    let (source, dest) = (w.abs("src"), w.abs("leaf"));

    // New files, one with a torn tail: the tail is left.
    let first = sync(&source, &dest);
    assert_eq!(
        changes(&first),
        [
            ("a.jsonl".into(), Change::New),
            ("sub/b.jsonl".into(), Change::New)
        ]
    );
    assert_eq!(first.torn_files, 1);
    let (rows, v1) = leaf(&dest);
    assert_eq!(rows, model(&source));
    assert_eq!(rows.len(), 5);

    // Nothing new: no version.
    let same = sync(&source, &dest);
    assert!(!same.changed);
    assert_eq!(same.version, Some(v1));
    assert_eq!(leaf(&dest).1, v1);

    // Appends, and the torn record completed: numbering goes on.
    append(&w, "src/a.jsonl", &jsonl(2, 50));
    append(&w, "src/sub/b.jsonl", "\"}\nnot json\n");
    let grown = sync(&source, &dest);
    assert_eq!(
        changes(&grown),
        [
            ("a.jsonl".into(), Change::Grown),
            ("sub/b.jsonl".into(), Change::Grown)
        ]
    );
    let (rows, v2) = leaf(&dest);
    assert_eq!(v2, v1 + 1, "one version per sync");
    assert_eq!(rows, model(&source));
    assert!(rows.iter().any(|r| r.1 == 5 && r.0 == "a.jsonl"));
    assert!(
        rows.iter().any(|r| r.3),
        "the invalid record is a failed row"
    );

    // A rewrite of the same size: the taken bytes no longer match.
    let text = std::fs::read_to_string(w.abs("src/a.jsonl")).unwrap();
    w.file(
        "src/a.jsonl",
        text.replacen("\"id\":\"r0\"", "\"id\":\"r9\"", 1),
    );
    let rewritten = sync(&source, &dest);
    assert_eq!(changes(&rewritten), [("a.jsonl".into(), Change::Replaced)]);
    assert_eq!(leaf(&dest).0, model(&source));

    // A file removed, another added, in one sync.
    std::fs::remove_file(w.abs("src/sub/b.jsonl")).unwrap();
    w.file("src/c.jsonl", jsonl(4, 100));
    let moved = sync(&source, &dest);
    assert_eq!(
        changes(&moved),
        [
            ("c.jsonl".into(), Change::New),
            ("sub/b.jsonl".into(), Change::Gone)
        ]
    );
    let (rows, v4) = leaf(&dest);
    assert_eq!(rows, model(&source));
    assert_eq!(v4, v2 + 2);

    // Only touched (same bytes, new times): nothing to publish.
    let touched = std::fs::read(w.abs("src/c.jsonl")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(w.abs("src/c.jsonl"), touched).unwrap();
    assert!(!sync(&source, &dest).changed);
    assert_eq!(leaf(&dest).1, v4);

    // The leaf written by something else since: rebuilt from the source.
    CompactJsonlStore::default()
        .import_path(&w.abs("src/c.jsonl"), &dest, ImportMode::Append)
        .unwrap();
    let rebuilt = sync(&source, &dest);
    assert!(rebuilt.rebuilt);
    assert_eq!(leaf(&dest).0, model(&source));
    assert!(!sync(&source, &dest).changed);

    // Every file gone: every row goes.
    std::fs::remove_file(w.abs("src/a.jsonl")).unwrap();
    std::fs::remove_file(w.abs("src/c.jsonl")).unwrap();
    let emptied = sync(&source, &dest);
    assert_eq!(emptied.changes.len(), 2);
    assert_eq!(leaf(&dest).0, Vec::<Row>::new());
}

#[test]
fn a_packed_shard_is_taken_record_by_record() {
    let w = Warehouse::new();
    w.file("src/s.jsonseq", "\x1e{\"id\":1}\x1e\x1e{\"id\":2}\x1e");
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    assert_eq!(sync(&source, &dest).torn_files, 0);
    assert_eq!(leaf(&dest).0.len(), 2);
    append(&w, "src/s.jsonseq", "\x1e{\"id\":3}\x1e\x1e{\"id\":");
    let grown = sync(&source, &dest);
    assert_eq!(grown.torn_files, 1);
    let (rows, _) = leaf(&dest);
    let lines: Vec<u64> = rows.iter().map(|r| r.1).collect();
    assert_eq!(lines, [1, 2, 3]);
    assert!(rows.iter().all(|r| !r.3), "no torn record taken as failed");
    append(&w, "src/s.jsonseq", "4}\x1e");
    sync(&source, &dest);
    assert_eq!(leaf(&dest).0.len(), 4);
}

#[test]
fn a_dry_run_writes_nothing() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0));
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    let dry = CompactJsonlStore::default()
        .sync_path(&source, &dest, true)
        .unwrap();
    assert!(dry.changed && dry.dry_run);
    assert!(!dest.exists(), "a dry run creates no leaf");
    sync(&source, &dest);
    append(&w, "src/a.jsonl", &jsonl(1, 9));
    let version = leaf(&dest).1;
    let dry = CompactJsonlStore::default()
        .sync_path(&source, &dest, true)
        .unwrap();
    assert_eq!(changes(&dry), [("a.jsonl".into(), Change::Grown)]);
    assert_eq!(leaf(&dest).1, version);
}

#[test]
fn two_syncs_of_one_leaf_never_run_at_once() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0));
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    sync(&source, &dest);
    let held = std::fs::File::open(&dest).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    append(&w, "src/a.jsonl", &jsonl(1, 9));
    let busy = CompactJsonlStore::default()
        .sync_path(&source, &dest, false)
        .unwrap_err();
    assert_eq!(busy.code, ErrorCode::SyncBusy);
    drop(held);
    assert!(sync(&source, &dest).changed);
}

#[test]
fn a_killed_sync_leaves_a_whole_version_and_the_next_converges() {
    let w = Warehouse::new();
    for i in 0..8 {
        w.file(&format!("src/f{i}.jsonl"), jsonl(2_000, i * 10_000));
    }
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    sync(&source, &dest);
    for (round, delay_ms) in [5u64, 35, 45, 50, 55, 60, 70, 150].into_iter().enumerate() {
        for i in 0..8 {
            append(
                &w,
                &format!("src/f{i}.jsonl"),
                &jsonl(10_000, round as i64 * 1_000),
            );
        }
        let before = leaf(&dest);
        let mut child = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
            .args(["sync", source.to_str().unwrap(), dest.to_str().unwrap()])
            .env("RUST_LOG", "off")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        let (rows, version) = leaf(&dest);
        eprintln!(
            "killed after {delay_ms} ms: version {} -> {version}",
            before.1
        );
        if version == before.1 {
            assert_eq!(
                rows, before.0,
                "killed after {delay_ms} ms: the version before"
            );
        } else {
            assert_eq!(version, before.1 + 1);
            assert_eq!(
                rows,
                model(&source),
                "killed after {delay_ms} ms: the new version"
            );
        }
        sync(&source, &dest);
        assert_eq!(
            leaf(&dest).0,
            model(&source),
            "converged after {delay_ms} ms"
        );
    }
}
