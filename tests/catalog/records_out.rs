//! Records out of compact-jsonl leaves and through SQL: what goes in
//! through `import` comes back out through `cat`, `.records` and `query`,
//! byte for byte, and filters prune leaves without opening them.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use pchronicle::catalog::{Catalog, CatalogOptions};
use pchronicle::extract::{Selection, Shape};
use pchronicle::store::compact::{CompactJsonlStore, ImportMode};
use pchronicle::store::{LeafStore, Stores, StorylineStore};
use serde_json::Value;

use crate::extract::cat;
use crate::support::{Warehouse, pchronicle, stdout};

/// The valid records of a line or packed stream as a reader outside
/// pchronicle sees them: split on both separators, trimmed, blank ones
/// skipped, kept when serde_json accepts them.
fn valid_records(bytes: &[u8]) -> Vec<&[u8]> {
    bytes
        .split(|b| *b == b'\n' || *b == 0x1e)
        .map(|s| s.trim_ascii())
        .filter(|s| !s.is_empty() && serde_json::from_slice::<Value>(s).is_ok())
        .collect()
}

fn joined(records: &[&[u8]]) -> Vec<u8> {
    records
        .iter()
        .flat_map(|r| r.iter().copied().chain([b'\n']))
        .collect()
}

const JAN_1: i64 = 1_767_225_600;

/// Records of several roles and sessions over two days, a torn one, a
/// record over the 1 MiB offload threshold, and one over 16 MiB (streamed
/// into `_offload/` by the import, never held).
fn source_text(tag: &str) -> Vec<u8> {
    let roles = ["user", "assistant", "tool"];
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!(
            "{{\"id\":\"{tag}{i}\",\"role\":\"{}\",\"ts\":{},\"text\":\"t{i}\"}}\n",
            roles[i % 3],
            JAN_1 + i as i64 * 600
        ));
        if i == 100 {
            text.push_str("{\"role\":\"user\",\"torn\":\n\n");
        }
        if i == 150 {
            let pad = "p".repeat(1_200_000);
            text.push_str(&format!(
                "{{\"role\":\"tool\",\"ts\":{JAN_1},\"pad\":\"{pad}\"}}\n"
            ));
        }
        if i == 200 {
            let pad = "q".repeat(17 << 20);
            text.push_str(&format!("{{\"role\":\"tool\",\"pad\":\"{pad}\"}}\n"));
        }
    }
    text.into_bytes()
}

fn imported(w: &Warehouse, source: &str, leaf: &str, bytes: &[u8]) {
    w.file(source, bytes);
    CompactJsonlStore::default()
        .import_path(&w.abs(source), &w.abs(leaf), ImportMode::Create)
        .unwrap();
}

#[test]
fn every_imported_record_comes_back_out_byte_for_byte() {
    let w = Warehouse::new();
    let text = source_text("a");
    imported(&w, "in/a.jsonl", "wh/leaf", &text);
    let catalog = Catalog::new(&w.abs("wh"), CatalogOptions::default()).unwrap();
    let got = cat(&catalog, "leaf", Selection::default(), Shape::Plain);
    let want = joined(&valid_records(&text));
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "cat of the leaf differs from the source's valid records"
    );
    // The same bytes as the loose file gives, and through the CLI.
    let loose = Catalog::new(&w.abs("in"), CatalogOptions::default()).unwrap();
    assert!(cat(&loose, "a.jsonl", Selection::default(), Shape::Plain) == want);
    let cli = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(["cat", w.abs("wh/leaf").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(cli.status.success());
    assert!(cli.stdout == want);
    // And through the filesystem's `.records`.
    let fs = pchronicle::fs::WarehouseFs::new(Arc::new(catalog), Default::default());
    let records = crate::fs::driver::cat(&fs, "leaf/.records");
    assert!(records == want, "`.records` differs from cat");
    // Failed records come out with --failed, naming where they are.
    let with_failed = Selection {
        failed: true,
        ..Selection::default()
    };
    let catalog = Catalog::new(&w.abs("wh"), CatalogOptions::default()).unwrap();
    let all = cat(&catalog, "leaf", with_failed, Shape::Plain);
    let failed: Vec<Value> = all
        .split(|b| *b == b'\n')
        .filter(|l| l.starts_with(b"{\"_file_\""))
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["_file_"], "a.jsonl");
    assert_eq!(failed[0]["line"], 102);
    assert_eq!(failed[0]["raw"], "{\"role\":\"user\",\"torn\":");
}

/// A leaf hands Lance's batches on whole when it can: the limit and
/// `--contains` must cut and pick the same records as they do from the
/// loose file, record by record, across batches of 8,192 rows, with a
/// record over the offload threshold and multi-line records among them.
#[test]
fn limits_and_contains_pick_the_same_records_from_a_leaf_as_from_its_source() {
    let w = Warehouse::new();
    let mut text = String::new();
    for i in 0..20_000 {
        match i {
            12_000 => text.push_str(&format!(
                "{{\"n\":{i},\"pad\":\"{}\"}}\n",
                "p".repeat(2 << 20)
            )),
            15_000 => text.push_str(&format!("[{i},\r\"crlf\"]\n")),
            _ => text.push_str(&format!(
                "{{\"n\":{i},\"say\":\"{}\"}}\n",
                ["hello", "bye"][i % 7 / 6]
            )),
        }
    }
    imported(&w, "in/s.jsonl", "wh/leaf", text.as_bytes());
    let leaf = Catalog::new(&w.abs("wh"), CatalogOptions::default()).unwrap();
    let loose = Catalog::new(&w.abs("in"), CatalogOptions::default()).unwrap();
    let mut selections = Vec::new();
    for limit in [1, 8_191, 8_192, 8_193, 12_001, 19_999, 20_000, 30_000] {
        selections.push(Selection {
            limit: Some(limit),
            ..Selection::default()
        });
    }
    for (contains, limit) in [("bye", None), ("bye", Some(1_500)), ("crlf", None)] {
        let mut selection = Selection {
            limit,
            ..Selection::default()
        };
        selection.set_contains(contains).unwrap();
        selections.push(selection);
    }
    for selection in selections {
        let want = cat(&loose, "s.jsonl", selection.clone(), Shape::Plain);
        let got = cat(&leaf, "leaf", selection.clone(), Shape::Plain);
        let lines = want.iter().filter(|b| **b == b'\n').count();
        assert!(lines > 0);
        if let Some(limit) = selection.limit {
            assert!(lines as u64 == limit.min(20_000) || selection.contains.is_some());
        }
        assert!(
            got == want,
            "limit {:?}: {} lines from the leaf, {lines} from the file",
            selection.limit,
            got.iter().filter(|b| **b == b'\n').count()
        );
    }
}

#[test]
fn filters_prune_leaves_without_opening_their_datasets() {
    let w = Warehouse::new();
    let early: String = (0..50)
        .map(|i| format!("{{\"ts\":{}}}\n", JAN_1 + i))
        .collect();
    let late: String = (0..50)
        .map(|i| format!("{{\"ts\":{}}}\n", JAN_1 + 40 * 86_400 + i))
        .collect();
    imported(&w, "in/early.jsonl", "wh/team=a/early", early.as_bytes());
    imported(&w, "in/late.jsonl", "wh/team=b/late", late.as_bytes());
    let store = Arc::new(CompactJsonlStore::default());
    let catalog = Catalog::with_stores(
        &w.abs("wh"),
        CatalogOptions::default(),
        Stores::empty()
            .with(Arc::new(StorylineStore))
            .with(Arc::clone(&store) as Arc<dyn LeafStore>),
    )
    .unwrap();
    let mut feb = Selection::default();
    feb.set_time("2026-02-01T00:00:00Z", false).unwrap();
    let got = cat(&catalog, ".", feb, Shape::Plain);
    assert_eq!(got, late.as_bytes());
    assert_eq!(store.dataset_opens(), 1, "only the late leaf is opened");
    let mut team_a = Selection::default();
    team_a.add_where("team=a").unwrap();
    assert_eq!(cat(&catalog, ".", team_a, Shape::Plain), early.as_bytes());
    assert_eq!(store.dataset_opens(), 2);
    let mut glob = Selection::default();
    glob.set_file("team=b/**").unwrap();
    assert_eq!(cat(&catalog, ".", glob, Shape::Plain), late.as_bytes());
    assert_eq!(store.dataset_opens(), 3);
    let mut none = Selection::default();
    none.set_file("elsewhere/**").unwrap();
    assert!(cat(&catalog, ".", none, Shape::Plain).is_empty());
    assert_eq!(
        store.dataset_opens(),
        3,
        "a glob no leaf can match opens none"
    );
    // A window inside the late leaf is checked row by row (by Lance).
    let mut minute = Selection::default();
    minute.set_time("2026-02-10T00:00:10Z", false).unwrap();
    minute.set_time("2026-02-10T00:00:20Z", true).unwrap();
    let got = cat(&catalog, ".", minute, Shape::Plain);
    assert_eq!(got.iter().filter(|b| **b == b'\n').count(), 10);
}

/// Runs `pchronicle query PATH SQL --json` and parses the rows.
fn query(path: &Path, sql: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["query", path.to_str().unwrap(), sql, "--json"];
    args.extend_from_slice(extra);
    let out = stdout(&pchronicle(&args));
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A warehouse of two sessions (one a compact-jsonl leaf, one loose
/// JSONL) under hive directories, with its records as the reference
/// reads them.
fn query_warehouse() -> (Warehouse, Vec<(String, String, Value, bool)>) {
    let w = Warehouse::new();
    let a: String = (0..120)
        .map(|i| {
            let role = ["user", "assistant", "tool"][i % 3];
            format!(
                "{{\"role\":\"{role}\",\"ts\":{},\"n\":{i}}}\n",
                JAN_1 + i as i64 * 1800
            )
        })
        .collect::<String>()
        + "{\"torn\":\n";
    let b: String = (0..80)
        .map(|i| {
            let role = ["user", "assistant"][i % 2];
            format!(
                "{{\"role\":\"{role}\",\"ts\":{},\"n\":{i}}}\n",
                JAN_1 + 86_400 + i as i64 * 60
            )
        })
        .collect::<String>()
        + "not json\n";
    imported(&w, "in/a.jsonl", "wh/session=a/leaf", a.as_bytes());
    w.file("wh/session=b/b.jsonl", b.as_bytes());
    let mut reference = Vec::new();
    for (session, file, text) in [
        ("a", "session=a/leaf/a.jsonl", &a),
        ("b", "session=b/b.jsonl", &b),
    ] {
        for line in text.lines() {
            match serde_json::from_str::<Value>(line) {
                Ok(v) => reference.push((session.to_string(), file.to_string(), v, false)),
                Err(_) => {
                    reference.push((session.to_string(), file.to_string(), Value::Null, true))
                }
            }
        }
    }
    (w, reference)
}

#[test]
fn query_answers_agree_with_an_independent_count() {
    let (w, reference) = query_warehouse();
    let wh = w.abs("wh");
    // Records per role.
    let rows = query(
        &wh,
        "SELECT json_get_str(record, 'role') AS role, count(*) AS n FROM records WHERE NOT failed GROUP BY role ORDER BY role",
        &[],
    );
    let mut want = std::collections::BTreeMap::new();
    for (_, _, v, failed) in &reference {
        if !failed {
            *want
                .entry(v["role"].as_str().unwrap().to_string())
                .or_insert(0u64) += 1;
        }
    }
    let got: std::collections::BTreeMap<String, u64> = rows
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap().to_string(),
                r["n"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);
    // The files with failed records.
    let rows = query(
        &wh,
        "SELECT _file_, count(*) AS failed FROM records WHERE failed GROUP BY _file_ ORDER BY _file_",
        &[],
    );
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["_file_"], "session=a/leaf/a.jsonl");
    assert_eq!(rows[1]["_file_"], "session=b/b.jsonl");
    // One session in a time window, by its hive column and by --where.
    let since = JAN_1 + 86_400 + 600;
    let until = JAN_1 + 86_400 + 1800;
    let want = reference
        .iter()
        .filter(|(s, _, v, f)| {
            s == "b" && !f && v["ts"].as_i64().is_some_and(|t| t >= since && t < until)
        })
        .count() as u64;
    let rows = query(
        &wh,
        "SELECT count(*) AS n FROM records WHERE session = 'b' AND timestamp >= '2026-01-02T00:10:00Z' AND timestamp < '2026-01-02T00:30:00Z'",
        &[],
    );
    assert_eq!(rows[0]["n"].as_u64(), Some(want));
    let rows = query(
        &wh,
        "SELECT count(*) AS n FROM records",
        &[
            "--where",
            "session=b",
            "--since",
            "2026-01-02T00:10:00Z",
            "--until",
            "2026-01-02T00:30:00Z",
        ],
    );
    assert_eq!(rows[0]["n"].as_u64(), Some(want));
    // Lines and the record text as stored.
    let rows = query(
        &wh,
        "SELECT line, record FROM records WHERE session = 'a' AND line = 7",
        &[],
    );
    assert_eq!(rows.len(), 1);
    let stored: Value = serde_json::from_str(rows[0]["record"].as_str().unwrap()).unwrap();
    assert_eq!(stored, reference[6].2);
    // The sources table holds the rows of `.sources`.
    let rows = query(
        &wh,
        "SELECT _file_, kind, record_count, failed_count FROM sources ORDER BY _file_",
        &[],
    );
    let listed = stdout(&pchronicle(&[
        "ls",
        wh.to_str().unwrap(),
        "--sources",
        "--json",
    ]));
    let listed: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), listed.len());
    for (row, source) in rows.iter().zip(&listed) {
        for key in ["_file_", "kind", "record_count", "failed_count"] {
            assert_eq!(row[key], source[key], "{key}");
        }
    }
    // --contains narrows both tables as it narrows cat and ls --sources:
    // only session a has a record with n = 119.
    let needle = ["--contains", "\"n\":119"];
    let held = reference
        .iter()
        .filter(|(_, _, v, failed)| !failed && v["n"] == 119)
        .count() as u64;
    let rows = query(&wh, "SELECT count(*) AS n FROM records", &needle);
    assert_eq!(rows[0]["n"].as_u64(), Some(held));
    let rows = query(&wh, "SELECT _file_ FROM sources ORDER BY _file_", &needle);
    let mut args = vec!["ls", wh.to_str().unwrap(), "--sources", "--json"];
    args.extend_from_slice(&needle);
    let narrowed: Vec<Value> = stdout(&pchronicle(&args))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(narrowed.len(), 1, "{narrowed:?}");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["_file_"], narrowed[0]["_file_"]);
    assert!(
        rows[0]["_file_"]
            .as_str()
            .unwrap()
            .starts_with("session=a/")
    );
}

#[test]
fn query_prints_tables_and_csv_and_codes_its_errors() {
    let (w, _) = query_warehouse();
    let wh = w.abs("wh");
    let wh = wh.to_str().unwrap();
    let table = stdout(&pchronicle(&[
        "query",
        wh,
        "SELECT session, count(*) AS n FROM records GROUP BY session ORDER BY session",
    ]));
    assert!(table.contains("| session | n "), "{table}");
    assert!(table.contains("| a       | 121 |"), "{table}");
    let csv = stdout(&pchronicle(&[
        "query",
        wh,
        "SELECT session, count(*) AS n FROM records GROUP BY session ORDER BY session",
        "--csv",
    ]));
    assert_eq!(csv, "session,n\na,121\nb,81\n");
    let bad = pchronicle(&["query", wh, "SELECT count(*) FROM records WHERE nosuch = 1"]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("PCHRONICLE_QUERY_INVALID"), "{err}");
    let bad = pchronicle(&["query", wh, "SELEC 1"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("PCHRONICLE_QUERY_INVALID") && err.contains("line 1, column"),
        "{err}"
    );
    assert!(err.contains("    ^"), "{err}");
}

/// `head -1` of a 1 GiB leaf is answered at once: nothing reads ahead of
/// what is written.
#[test]
fn head_of_a_gib_leaf_returns_at_once() {
    let w = Warehouse::new();
    let line = format!("{{\"role\":\"user\",\"pad\":\"{}\"}}\n", "x".repeat(1000));
    let count = (1usize << 30) / line.len();
    {
        use std::io::Write;
        std::fs::create_dir_all(w.abs("in")).unwrap();
        let mut f = std::io::BufWriter::new(std::fs::File::create(w.abs("in/big.jsonl")).unwrap());
        for _ in 0..count {
            f.write_all(line.as_bytes()).unwrap();
        }
    }
    let report = CompactJsonlStore::default()
        .import_path(&w.abs("in/big.jsonl"), &w.abs("wh/big"), ImportMode::Create)
        .unwrap();
    assert_eq!(report.record_count, count as u64);
    assert!(report.source_bytes >= (1u64 << 30) - 4096);
    std::fs::remove_file(w.abs("in/big.jsonl")).unwrap();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(["cat", w.abs("wh/big").to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = vec![0u8; line.len()];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let status = child.wait().unwrap();
    let took = started.elapsed();
    assert_eq!(first, line.as_bytes());
    assert!(status.success());
    assert!(took.as_secs_f64() < 3.0, "head -1 took {took:?}");
}

/// Lance reads as the daemon: another user gets a leaf's rows only when it
/// could read every file Lance opens.
#[test]
fn another_user_gets_no_rows_of_a_leaf_whose_files_it_cannot_read() {
    use std::os::unix::fs::PermissionsExt;
    let w = Warehouse::new();
    imported(&w, "in/a.jsonl", "wh/leaf", b"{\"secret\":1}\n");
    let fs = pchronicle::fs::WarehouseFs::new(
        Arc::new(Catalog::new(&w.abs("wh"), CatalogOptions::default()).unwrap()),
        Default::default(),
    );
    let nobody = pchronicle::fs::Caller {
        uid: 65534,
        gid: 65534,
        pid: 1,
    };
    let read_as_nobody = || {
        let ino = crate::fs::driver::walk_as(&fs, &nobody, "leaf/.records")
            .unwrap()
            .attr
            .ino
            .0;
        fs.open(&nobody, ino, false)
            .and_then(|opened| fs.read(opened.fh, 0, 4096))
            .map(|data| data.as_slice().to_vec())
    };
    assert_eq!(read_as_nobody().unwrap(), b"{\"secret\":1}\n");
    for entry in std::fs::read_dir(w.abs("wh/leaf/data")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    assert_eq!(
        crate::fs::driver::errno(read_as_nobody()),
        nix::errno::Errno::EACCES
    );
    // Root still reads it.
    assert_eq!(
        crate::fs::driver::cat(&fs, "leaf/.records"),
        b"{\"secret\":1}\n"
    );
}
