//! `--version N|TAG`: a compact-jsonl leaf read as it was at one of its
//! versions, the same Snapshot through `stats`, `ls --sources` and `cat`.

use pchronicle::store::compact::CompactJsonlStore;

use crate::support::{Warehouse, jsonl, pchronicle, stdout};

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&stdout(&pchronicle(args))).unwrap()
}

#[test]
fn every_version_of_a_leaf_reads_as_it_was() {
    let w = Warehouse::new();
    let (source, dest) = (w.abs("src"), w.abs("wh/leaf"));
    let store = CompactJsonlStore::default();
    // Five versions: 3, 5, 5 - 3 + 4, 6, 6 + 2 records.
    w.file("src/a.jsonl", jsonl(3, 0));
    store.sync_path(&source, &dest, false).unwrap();
    w.file_append("src/a.jsonl", &jsonl(2, 10));
    store.sync_path(&source, &dest, false).unwrap();
    w.file("src/a.jsonl", jsonl(2, 20))
        .file("src/b.jsonl", jsonl(4, 30));
    store.sync_path(&source, &dest, false).unwrap();
    store.create_tag(&dest, "before-eval", None).unwrap();
    std::fs::remove_file(w.abs("src/b.jsonl")).unwrap();
    w.file("src/c.jsonl", jsonl(4, 40));
    store.sync_path(&source, &dest, false).unwrap();
    w.file_append("src/c.jsonl", &jsonl(2, 50));
    store.sync_path(&source, &dest, false).unwrap();
    let leaf = dest.to_str().unwrap();
    let expected = [(1, 3), (2, 5), (3, 6), (4, 6), (5, 8)];
    for (version, records) in expected {
        let v = version.to_string();
        let stats = json(&["stats", leaf, "--json", "--version", &v]);
        assert_eq!(stats["record_count"], records, "stats of version {v}");
        let sources = stdout(&pchronicle(&[
            "ls",
            "--sources",
            leaf,
            "--json",
            "--version",
            &v,
        ]));
        let source: serde_json::Value = serde_json::from_str(sources.trim()).unwrap();
        assert_eq!(source["fingerprint"], format!("lance:version:{v}"));
        assert_eq!(source["cut"], "version");
        assert_eq!(source["record_count"], records);
        let cat = stdout(&pchronicle(&["cat", leaf, "--version", &v]));
        assert_eq!(cat.lines().count() as u64, records, "cat of version {v}");
    }
    // The newest, read without --version, is not marked as cut.
    let now = stdout(&pchronicle(&["ls", "--sources", leaf, "--json"]));
    assert!(!now.contains("\"cut\""));
    // A tag names its version.
    let tagged = json(&["stats", leaf, "--json", "--version", "before-eval"]);
    assert_eq!(tagged["record_count"], 6);
    let cat = stdout(&pchronicle(&["cat", leaf, "--version", "before-eval"]));
    assert!(cat.contains("\"ts\":30") && !cat.contains("\"ts\":40"));
}

#[test]
fn a_version_that_is_not_there_is_refused_with_a_code() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0));
    let dest = w.abs("wh/leaf");
    CompactJsonlStore::default()
        .sync_path(&w.abs("src"), &dest, false)
        .unwrap();
    let leaf = dest.to_str().unwrap();
    let code = |args: &[&str]| {
        let out = pchronicle(args);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(code(&["stats", leaf, "--version", "7"]).contains("PCHRONICLE_VERSION_NOT_FOUND"));
    assert!(code(&["cat", leaf, "--version", "no-such-tag"]).contains("PCHRONICLE_TAG_NOT_FOUND"));
    assert!(code(&["cat", leaf, "--version", "../x"]).contains("PCHRONICLE_TAG_INVALID"));
    let wh = w.abs("wh");
    assert!(
        code(&["stats", wh.to_str().unwrap(), "--version", "1"])
            .contains("PCHRONICLE_PATH_INVALID")
    );
}
