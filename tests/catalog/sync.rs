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

/// A filesystem whose timestamps are whole seconds (ext4 with 128-byte
/// inodes, in an image file on a loop device), unmounted on drop; `None`
/// where this machine cannot make one (not root, no loop device).
struct CoarseFs {
    mount: std::path::PathBuf,
}

impl CoarseFs {
    fn make(w: &Warehouse) -> Option<CoarseFs> {
        let image = w.abs("coarse.img");
        let mount = w.abs("coarse");
        std::fs::create_dir(&mount).ok()?;
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            Command::new(program)
                .args(args)
                .output()
                .is_ok_and(|out| out.status.success())
        };
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(32 << 20))
            .ok()?;
        let made = run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-I".as_ref(),
                "128".as_ref(),
                image.as_os_str(),
            ],
        ) && run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mount.as_os_str(),
            ],
        );
        made.then_some(CoarseFs { mount })
    }
}

impl Drop for CoarseFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// Runs `pchronicle sync --json SOURCE DEST`, as a user would.
fn sync_cli(source: &Path, dest: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(["sync", "--json"])
        .arg(source)
        .arg(dest)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_rewrite_in_the_same_second_as_a_sync_is_taken_by_the_next() {
    // On a filesystem with one-second timestamps, a same-size rewrite in
    // the second a sync read the file keeps size, mtime, ctime and inode.
    let w = Warehouse::new();
    let Some(coarse) = CoarseFs::make(&w) else {
        assert!(
            std::env::var("PCHRONICLE_REQUIRE_FUSE").as_deref() != Ok("1"),
            "cannot mount a loop-device ext4 here (root, mkfs.ext4 and a loop device are needed)"
        );
        eprintln!("skipping: cannot mount a loop-device ext4 here");
        return;
    };
    let source = coarse.mount.join("src");
    std::fs::create_dir(&source).unwrap();
    let path = source.join("a.jsonl");
    let dest = w.abs("leaf");
    for round in 0..3 {
        let (old, new) = (
            format!("{{\"v\":\"A{round}\"}}\n"),
            format!("{{\"v\":\"B{round}\"}}\n"),
        );
        // Start at the top of a second, so that a sync taking less than
        // one leaves the rewrite in the same second.
        let into = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        std::thread::sleep(Duration::from_nanos(u64::from(1_000_000_000 - into)));
        std::fs::write(&path, &old).unwrap();
        sync_cli(&source, &dest);
        std::fs::write(&path, &new).unwrap();
        let next = sync_cli(&source, &dest);
        let rows = leaf(&dest).0;
        assert_eq!(
            rows.iter().map(|r| r.2.as_str()).collect::<Vec<_>>(),
            [new.trim_end()],
            "round {round}: {next}"
        );
    }
    drop(coarse);
}

#[test]
fn a_leaf_inside_its_source_under_another_name_is_never_read() {
    // Offloading every record puts `.json` files in the leaf's `_offload/`:
    // read back as sources, they would come in as rows of their own.
    let store = || CompactJsonlStore::default().with_offload_threshold(8);
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0));
    std::os::unix::fs::symlink(w.abs("src"), w.abs("link")).unwrap();
    let plain = w.abs("src/leaf");
    for (dest, named) in [
        (w.abs("src/../src/leaf"), plain.clone()),
        (w.abs("link/leaf"), plain.clone()),
    ] {
        let first = store().sync_path(&w.abs("src"), &dest, false).unwrap();
        assert_eq!(changes(&first), [("a.jsonl".into(), Change::New)]);
        let again = store().sync_path(&w.abs("src"), &dest, false).unwrap();
        assert!(!again.changed, "{dest:?}: {:?}", again.changes);
        let (rows, _) = leaf(&named);
        assert_eq!(rows.len(), 3, "{dest:?}: {rows:?}");
        assert!(rows.iter().all(|r| r.0 == "a.jsonl"), "{rows:?}");
        std::fs::remove_dir_all(&named).unwrap();
    }
    // `import` follows the same rule.
    store()
        .import_path(&w.abs("src"), &plain, ImportMode::Create)
        .unwrap();
    let appended = store()
        .import_path(&w.abs("src/../src/leaf/.."), &plain, ImportMode::Append)
        .unwrap();
    assert_eq!(appended.source_files, 1);
    // A source inside the leaf is refused by both.
    let inside = w.abs("link/leaf/_offload");
    let refused = store().sync_path(&inside, &plain, false).unwrap_err();
    assert_eq!(refused.code, ErrorCode::ImportSource);
    let refused = store()
        .import_path(&inside, &plain, ImportMode::Append)
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::ImportSource);
}

/// Runs `pchronicle sync --json SOURCE DEST` as the user `nobody`.
fn sync_as_nobody(source: &Path, dest: &Path) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(["sync", "--json"])
        .arg(source)
        .arg(dest)
        .env_remove("RUST_LOG")
        .env("HOME", "/nonexistent")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap()
}

#[test]
fn an_unreadable_entry_is_a_warning_and_its_rows_stay() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root to run a sync as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let w = Warehouse::new();
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    w.file("src/a.jsonl", jsonl(3, 0))
        .file("src/private.jsonl", jsonl(2, 10))
        .file("src/closed/c.jsonl", jsonl(4, 20));
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    std::fs::create_dir(&dest).unwrap();
    std::os::unix::fs::chown(&dest, Some(65534), Some(65534)).unwrap();
    let first = sync_as_nobody(&source, &dest);
    assert!(first.status.success(), "{first:?}");
    let before = leaf(&dest).0;
    assert_eq!(before.len(), 9);

    // Files of another user, closed to the syncing one, all with news.
    append(&w, "src/a.jsonl", &jsonl(2, 50));
    append(&w, "src/private.jsonl", &jsonl(1, 60));
    append(&w, "src/closed/c.jsonl", &jsonl(1, 70));
    w.file("src/closed/new.jsonl", jsonl(1, 80));
    std::fs::set_permissions(
        w.abs("src/private.jsonl"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(w.abs("src/closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let second = sync_as_nobody(&source, &dest);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(report["changes"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["changes"][0]["file"], "a.jsonl");
    let warned: Vec<(String, String)> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["file"].as_str().unwrap().to_string(),
                w["code"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        warned,
        [
            ("closed".to_string(), "PCHRONICLE_IO".to_string()),
            (
                "private.jsonl".to_string(),
                "PCHRONICLE_RECORD_FILE_UNREADABLE".to_string()
            ),
        ]
    );
    assert!(
        stderr.contains("PCHRONICLE_RECORD_FILE_UNREADABLE") && stderr.contains("private.jsonl"),
        "the warning is logged: {stderr}"
    );
    // The readable file moved on; the unreadable ones kept their rows.
    let rows = leaf(&dest).0;
    let of = |rows: &[Row], file: &str| -> Vec<Row> {
        rows.iter().filter(|r| r.0 == file).cloned().collect()
    };
    assert_eq!(of(&rows, "a.jsonl").len(), 5);
    assert_eq!(of(&rows, "private.jsonl"), of(&before, "private.jsonl"));
    assert_eq!(of(&rows, "closed/c.jsonl"), of(&before, "closed/c.jsonl"));
    assert!(of(&rows, "closed/new.jsonl").is_empty());

    // Readable again: taken up where they were.
    std::fs::set_permissions(
        w.abs("src/private.jsonl"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(w.abs("src/closed"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let third = sync_as_nobody(&source, &dest);
    assert!(third.status.success(), "{third:?}");
    assert_eq!(leaf(&dest).0, model(&source));
}

#[test]
fn a_symlinked_source_file_is_read_by_sync_as_by_import() {
    let w = Warehouse::new();
    w.file("data/a.jsonl", jsonl(3, 0));
    let link = w.abs("link.jsonl");
    std::os::unix::fs::symlink(w.abs("data/a.jsonl"), &link).unwrap();
    let synced = sync(&link, &w.abs("synced"));
    assert_eq!(changes(&synced), [("link.jsonl".into(), Change::New)]);
    CompactJsonlStore::default()
        .import_path(&link, &w.abs("imported"), ImportMode::Create)
        .unwrap();
    let (rows, _) = leaf(&w.abs("synced"));
    assert_eq!(rows.len(), 3);
    assert_eq!(rows, leaf(&w.abs("imported")).0);
    assert!(!sync(&link, &w.abs("synced")).changed);
    append(&w, "data/a.jsonl", &jsonl(1, 9));
    let grown = sync(&link, &w.abs("synced"));
    assert_eq!(changes(&grown), [("link.jsonl".into(), Change::Grown)]);
}

#[test]
fn a_file_that_becomes_a_symlink_loses_its_rows_with_a_warning() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0))
        .file("src/b.jsonl", jsonl(1, 0))
        .file("elsewhere/x.jsonl", jsonl(2, 0));
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    sync(&source, &dest);
    std::fs::remove_file(w.abs("src/a.jsonl")).unwrap();
    std::os::unix::fs::symlink(w.abs("elsewhere/x.jsonl"), w.abs("src/a.jsonl")).unwrap();
    let report = sync(&source, &dest);
    assert_eq!(changes(&report), [("a.jsonl".into(), Change::Gone)]);
    let warned: Vec<(&str, ErrorCode)> = report
        .warnings
        .iter()
        .map(|w| (w.file.as_str(), w.code))
        .collect();
    assert_eq!(warned, [("a.jsonl", ErrorCode::PathNotFound)]);
    let (rows, _) = leaf(&dest);
    assert!(rows.iter().all(|r| r.0 == "b.jsonl"), "{rows:?}");
    // Said once: the next sync has nothing of it left to drop.
    assert!(sync(&source, &dest).warnings.is_empty());
}

#[test]
fn a_file_rewritten_in_place_while_synced_is_replaced_at_the_next_sync() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", "{\"v\":\"AAAA\"}\n");
    let (source, dest) = (w.abs("src"), w.abs("leaf"));
    sync(&source, &dest);
    append(&w, "src/a.jsonl", "{\"v\":\"CCCC\"}\n");
    let path = w.abs("src/a.jsonl");
    // Between reading the rows and committing them, the file is rewritten
    // in place: the same inode, the same length.
    let store = CompactJsonlStore::default().with_sync_hook(move || {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all(b"{\"v\":\"BBBB\"}\n{\"v\":\"DDDD\"}\n")
            .unwrap();
    });
    let grown = store.sync_path(&source, &dest, false).unwrap();
    assert_eq!(changes(&grown), [("a.jsonl".into(), Change::Grown)]);
    let records: Vec<String> = leaf(&dest).0.into_iter().map(|r| r.2).collect();
    assert_eq!(records, ["{\"v\":\"AAAA\"}", "{\"v\":\"CCCC\"}"]);
    // The state describes the bytes those rows came from, so the next
    // sync sees the rewrite and replaces them.
    let next = sync(&source, &dest);
    assert_eq!(changes(&next), [("a.jsonl".into(), Change::Replaced)]);
    assert_eq!(leaf(&dest).0, model(&source));
}
