//! Record stores: the sealed-shard writer, its rotation rule (one test per
//! sealing condition), concurrent writers, and readers of both formats.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pchronicle::catalog::{Catalog, CatalogOptions};
use pchronicle::error::ErrorCode;
use pchronicle::records::{RecordFormat, count_file};
use pchronicle::shards::rotation::{MAX_SHARD_BYTES, ShardState};
use pchronicle::shards::{ShardFormat, ShardName, Writer, append_records, validate_record};

use crate::support::{Warehouse, pchronicle, stdout};

fn record(session: &str, i: usize) -> String {
    format!(r#"{{"id":"{session}-{i}","session":"{session}","ts":"2026-11-30T10:00:00Z","n":{i}}}"#)
}

/// The shard files of a store, sorted by name.
fn shards(store: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_file() && ShardName::parse(p.file_name().unwrap().to_str().unwrap()).is_some()
        })
        .collect();
    out.sort();
    out
}

fn append(writer: &mut Writer, text: &str) -> pchronicle::shards::Appended {
    writer
        .append(validate_record(text.as_bytes()).unwrap())
        .unwrap()
}

/// A store inside a warehouse (which has a `.pchronicle/` directory).
fn store() -> (Warehouse, PathBuf) {
    let wh = Warehouse::new();
    wh.dir(".pchronicle");
    let store = wh.abs("sessions");
    (wh, store)
}

/// Appends two records and stops (as a process would, leaving its state
/// hint), then breaks one condition with `break_it(state file, shard)`,
/// then appends as a new writer: the shard must be new and the first one
/// untouched, then and afterwards.
fn sealed_by(
    break_it: impl FnOnce(&Path, &Path),
    format_after: ShardFormat,
) -> (Vec<PathBuf>, Warehouse) {
    let (wh, store) = store();
    let mut writer = Writer::open(&store, "s1", ShardFormat::Line).unwrap();
    let first = append(&mut writer, &record("s1", 0)).shard;
    assert_eq!(
        append(&mut writer, &record("s1", 1)).shard,
        first,
        "an unbroken shard is reused"
    );
    let state_path = writer.state_path().to_path_buf();
    drop(writer);
    break_it(&state_path, &first);
    let before = fs::read(&first).ok();
    let mut writer = Writer::open(&store, "s1", format_after).unwrap();
    let next = append(&mut writer, &record("s1", 2));
    assert!(next.started, "a new shard is started");
    assert_ne!(next.shard, first);
    assert_eq!(
        fs::read(&first).ok(),
        before,
        "the sealed shard is untouched"
    );
    // And it stays sealed, for this writer and for the next one.
    assert_eq!(append(&mut writer, &record("s1", 3)).shard, next.shard);
    drop(writer);
    let mut writer = Writer::open(&store, "s1", format_after).unwrap();
    assert_eq!(append(&mut writer, &record("s1", 4)).shard, next.shard);
    assert_eq!(fs::read(&first).ok(), before);
    (shards(&store), wh)
}

/// The control for every sealing test: with nothing broken, the next
/// writer continues the same shard (so the state hint it reads is exact,
/// and each test below is sealed by its own condition only).
#[test]
fn an_unbroken_shard_is_continued_by_the_next_writer() {
    let (_wh, store) = store();
    let mut writer = Writer::open(&store, "s1", ShardFormat::Line).unwrap();
    let first = append(&mut writer, &record("s1", 0)).shard;
    append(&mut writer, &record("s1", 1));
    drop(writer);
    let mut writer = Writer::open(&store, "s1", ShardFormat::Line).unwrap();
    let next = append(&mut writer, &record("s1", 2));
    assert!(!next.started);
    assert_eq!(next.shard, first);
    assert_eq!(shards(&store).len(), 1);
}

#[test]
fn lost_state_starts_a_new_shard() {
    sealed_by(
        |state, _| fs::remove_file(state).unwrap(),
        ShardFormat::Line,
    );
}

#[test]
fn torn_state_starts_a_new_shard() {
    sealed_by(
        |state, _| {
            let text = fs::read(state).unwrap();
            fs::write(state, &text[..text.len() / 2]).unwrap();
        },
        ShardFormat::Line,
    );
}

#[test]
fn a_state_naming_another_file_starts_a_new_shard() {
    sealed_by(
        |path, shard| {
            let mut state: ShardState = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
            state.shard = format!("../{}", shard.file_name().unwrap().to_str().unwrap());
            fs::write(path, serde_json::to_vec(&state).unwrap()).unwrap();
        },
        ShardFormat::Line,
    );
}

#[test]
fn a_shard_someone_else_appended_to_is_sealed() {
    sealed_by(
        |_, shard| {
            let mut f = fs::OpenOptions::new().append(true).open(shard).unwrap();
            f.write_all(format!("{}\n", record("other", 0)).as_bytes())
                .unwrap();
        },
        ShardFormat::Line,
    );
}

#[test]
fn a_torn_record_seals_the_shard_and_readers_count_it_as_failed() {
    let (shards, _wh) = sealed_by(
        |_, shard| {
            // A writer killed in the middle of a record.
            let mut f = fs::OpenOptions::new().append(true).open(shard).unwrap();
            f.write_all(br#"{"id":"s1-torn","sess"#).unwrap();
        },
        ShardFormat::Line,
    );
    let mut counts: Vec<(u64, u64)> = shards
        .iter()
        .map(|p| {
            let stats = count_file(p, RecordFormat::Jsonl).unwrap();
            (stats.record_count, stats.failed_count)
        })
        .collect();
    counts.sort();
    // The sealed shard: two records and the torn one, counted as failed;
    // the next shard's records are read whole.
    assert_eq!(counts, [(3, 0), (3, 1)]);
}

#[test]
fn a_replaced_shard_is_sealed() {
    sealed_by(
        |_, shard| {
            let copy = shard.with_extension("copy");
            fs::copy(shard, &copy).unwrap();
            fs::rename(&copy, shard).unwrap();
        },
        ShardFormat::Line,
    );
}

#[test]
fn a_deleted_shard_is_not_recreated() {
    let (shards, _wh) = sealed_by(
        |_, shard| fs::remove_file(shard).unwrap(),
        ShardFormat::Line,
    );
    assert_eq!(shards.len(), 1);
}

#[test]
fn switching_to_packed_seals_the_line_shard() {
    let (shards, _wh) = sealed_by(|_, _| {}, ShardFormat::Packed);
    let exts: Vec<_> = shards
        .iter()
        .map(|p| p.extension().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(exts.iter().filter(|e| *e == "jsonseq").count(), 1);
    assert_eq!(exts.iter().filter(|e| *e == "jsonl").count(), 1);
}

#[test]
fn a_shard_a_sidecar_index_covers_is_never_appended_again() {
    sealed_by(
        |_, shard| {
            let mut manifest = shard.as_os_str().to_os_string();
            manifest.push(".indexes.json");
            fs::write(manifest, "{}").unwrap();
        },
        ShardFormat::Line,
    );
}

#[test]
fn a_lone_index_file_seals_the_shard_it_indexes() {
    // An index whose manifest is gone (or that another tool wrote) still
    // seals the shard; the store is listed because it changed.
    sealed_by(
        |_, shard| {
            let key = vec!["id".to_string()];
            pchronicle::sidecar::build_index(shard, &key).unwrap();
            fs::remove_file(pchronicle::sidecar::manifest_path(shard)).unwrap();
            assert!(pchronicle::sidecar::build::index_path(shard, &key).exists());
        },
        ShardFormat::Line,
    );
}

#[test]
fn packed_writing_is_off_by_default_and_on_with_its_variable() {
    let (_wh, store) = store();
    let run = |session: &str, packed: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pchronicle"));
        cmd.args([
            "append",
            "--store",
            store.to_str().unwrap(),
            "--session",
            session,
        ])
        .arg(record(session, 0))
        .env("RUST_LOG", "off")
        .env_remove(pchronicle::shards::PACKED_ENV);
        if let Some(value) = packed {
            cmd.env(pchronicle::shards::PACKED_ENV, value);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("plain", None);
    run("off", Some("0"));
    run("on", Some("1"));
    let names: BTreeSet<String> = shards(&store)
        .iter()
        .map(|p| {
            let name = ShardName::parse(p.file_name().unwrap().to_str().unwrap()).unwrap();
            format!("{} {:?}", name.session, name.format)
        })
        .collect();
    assert_eq!(
        names,
        ["off Line", "on Packed", "plain Line"]
            .map(String::from)
            .into_iter()
            .collect()
    );
}

#[test]
fn a_full_shard_is_sealed() {
    let (_wh, store) = store();
    let mut writer = Writer::open(&store, "big", ShardFormat::Line).unwrap();
    let payload = "x".repeat(60_000);
    let text = format!(r#"{{"id":"big","pad":"{payload}"}}"#);
    let first = append(&mut writer, &text).shard;
    let mut rotated = None;
    for _ in 0..100 {
        let a = append(&mut writer, &text);
        if a.shard != first {
            rotated = Some(a);
            break;
        }
    }
    let rotated = rotated.expect("the writer rotates");
    assert!(rotated.started);
    let len = fs::metadata(&first).unwrap().len();
    assert!(
        len >= MAX_SHARD_BYTES && len < MAX_SHARD_BYTES + text.len() as u64 + 1,
        "{len}"
    );
}

#[test]
fn packed_shards_start_and_end_records_with_the_separator() {
    let (_wh, store) = store();
    let report = append_records(
        &store,
        "p.1",
        &[b"{\"a\":1}", b" [2] ", b"\"three\""],
        ShardFormat::Packed,
    )
    .unwrap();
    assert_eq!(report.records, 3);
    assert_eq!(report.new_shards.len(), 1);
    let bytes = fs::read(&report.shard).unwrap();
    assert_eq!(bytes, b"\x1e{\"a\":1}\x1e[2]\x1e\"three\"\x1e");
    let name = ShardName::parse(report.shard.file_name().unwrap().to_str().unwrap()).unwrap();
    assert_eq!(
        (name.session.as_str(), name.format),
        ("p.1", ShardFormat::Packed)
    );
    let stats = count_file(&report.shard, RecordFormat::Jsonseq).unwrap();
    assert_eq!((stats.record_count, stats.failed_count), (3, 0));
}

#[test]
fn invalid_records_are_refused_and_nothing_is_written() {
    let (_wh, store) = store();
    let err = append_records(
        &store,
        "s",
        &[b"{\"ok\":1}", b"{\"torn\":"],
        ShardFormat::Line,
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::RecordInvalid);
    assert!(err.message.starts_with("record 2:"), "{}", err.message);
    assert!(!store.exists() || shards(&store).is_empty());
    let err = append_records(&store, "a/b", &[b"{}"], ShardFormat::Line).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionInvalid);
}

#[test]
fn legacy_files_are_read_and_never_appended_to() {
    let (wh, store) = store();
    wh.file("sessions/s1.jsonl", format!("{}\n", record("s1", 0)));
    let before = fs::read(wh.abs("sessions/s1.jsonl")).unwrap();
    let report = append_records(
        &store,
        "s1",
        &[record("s1", 1).as_bytes()],
        ShardFormat::Line,
    )
    .unwrap();
    assert_ne!(report.shard, wh.abs("sessions/s1.jsonl"));
    assert_eq!(fs::read(wh.abs("sessions/s1.jsonl")).unwrap(), before);
    let stats = Catalog::new(wh.path(), CatalogOptions::default())
        .unwrap()
        .stats(Path::new("sessions"))
        .unwrap();
    assert_eq!(stats.record_count, 2);
}

#[test]
fn two_writers_racing_cost_at_most_one_extra_shard() {
    let (_wh, store) = store();
    let mut first_writer = Writer::open(&store, "s", ShardFormat::Line).unwrap();
    let first = append(&mut first_writer, &record("s", 0)).shard;
    drop(first_writer);
    // Two writers start from the same hint and append in turn: the second
    // finds the shard moved by the first, starts its own once, and each
    // continues its own shard from then on.
    let mut a = Writer::open(&store, "s", ShardFormat::Line).unwrap();
    let mut b = Writer::open(&store, "s", ShardFormat::Line).unwrap();
    for i in 1..21 {
        let writer = if i % 2 == 0 { &mut a } else { &mut b };
        append(writer, &record("s", i));
    }
    let all = shards(&store);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all.contains(&first));
    let total: u64 = all
        .iter()
        .map(|p| count_file(p, RecordFormat::Jsonl).unwrap().record_count)
        .sum();
    assert_eq!(total, 21);
}

/// Every record in a store's shards, parsed; panics on a torn one.
fn read_back(store: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for shard in shards(store) {
        for segment in fs::read(&shard)
            .unwrap()
            .split(|b| *b == b'\n' || *b == 0x1e)
        {
            if segment.trim_ascii().is_empty() {
                continue;
            }
            out.push(serde_json::from_slice(segment).unwrap_or_else(|e| {
                panic!(
                    "torn record in {}: {e}: {}",
                    shard.display(),
                    String::from_utf8_lossy(segment)
                )
            }));
        }
    }
    out
}

#[test]
fn four_processes_appending_5000_records_each_lose_and_tear_none() {
    let (_wh, store) = store();
    fs::create_dir_all(&store).unwrap();
    let children: Vec<_> = (0..4)
        .map(|p| {
            let mut child = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
                .args(["append", "--store"])
                .arg(&store)
                .args(["--session", "shared", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let input: String = (0..5000)
                .map(|i| record(&format!("p{p}"), i) + "\n")
                .collect();
            let mut stdin = child.stdin.take().unwrap();
            std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
            child
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let records = read_back(&store);
    assert_eq!(records.len(), 20_000, "no record lost");
    let ids: BTreeSet<String> = records
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 20_000, "no record twice");
    // Readers agree: the catalog counts every record and no failed one.
    let stats = Catalog::new(store.parent().unwrap(), CatalogOptions::default())
        .unwrap()
        .stats(Path::new("sessions"))
        .unwrap();
    assert_eq!((stats.record_count, stats.failed_count), (20_000, 0));
    // Each writer ends up on a shard of its own: at most one extra shard per
    // writer that started from another's hint.
    let used = shards(&store).len();
    eprintln!("4 racing writers used {used} shards");
    assert!(used <= 8, "{used} shards for 4 writers");
}

#[test]
fn the_cli_appends_from_an_argument_and_from_stdin() {
    let (_wh, store) = store();
    let s = store.to_str().unwrap();
    let out = stdout(&pchronicle(&[
        "append",
        "--store",
        s,
        "--session",
        "cli",
        "--json",
        r#"{"id":1}"#,
    ]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["records"], 1);
    assert_eq!(report["format"], "line");
    let bad = pchronicle(&["append", "--store", s, "--session", "cli", "{nope"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("error[PCHRONICLE_RECORD_INVALID]"));
    let bad = pchronicle(&["append", "--store", s, "--session", "../x", "{}"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("error[PCHRONICLE_SESSION_INVALID]"));
    assert_eq!(read_back(&store).len(), 1);
}
