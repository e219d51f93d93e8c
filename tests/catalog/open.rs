//! `open` and `list` behaviour: hive attributes, bounds, symlinks, torn
//! records, hidden state, and the refresh cache.

use std::collections::BTreeMap;
use std::path::Path;

use pchronicle::catalog::{CatalogOptions, NodeKind, SourceKind};
use pchronicle::error::ErrorCode;

use crate::support::{Warehouse, jsonl, settle};

fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn hive_attributes_come_from_segments_between_path_and_source() {
    let w = Warehouse::new();
    w.file(
        "runs/date=2026-11-01__agent=codex/k=ignored.jsonl",
        jsonl(2, 0),
    )
    .file("runs/date=2026-11-02/agent=claude/s.jsonl", jsonl(1, 0))
    .storyline("runs/date=2026-11-03/region=eu", 4)
    .file("runs/plain/x.ndjson", jsonl(1, 0));
    let catalog = w.catalog();
    let snapshot = catalog.open(Path::new(".")).unwrap();
    let got: Vec<_> = snapshot
        .sources
        .iter()
        .map(|s| (s.file.as_str(), s.path_attrs.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "runs/date=2026-11-01__agent=codex/k=ignored.jsonl",
                attrs(&[("agent", "codex"), ("date", "2026-11-01")])
            ),
            (
                "runs/date=2026-11-02/agent=claude/s.jsonl",
                attrs(&[("agent", "claude"), ("date", "2026-11-02")])
            ),
            (
                "runs/date=2026-11-03/region=eu",
                attrs(&[("date", "2026-11-03")])
            ),
            ("runs/plain/x.ndjson", attrs(&[])),
        ]
    );
    // Opening below a partition drops the segments above the opened path.
    let inner = catalog.open(Path::new("runs/date=2026-11-02")).unwrap();
    assert_eq!(inner.sources[0].file, "agent=claude/s.jsonl");
    assert_eq!(inner.sources[0].path_attrs, attrs(&[("agent", "claude")]));
}

#[test]
fn sources_are_ordered_by_file_path() {
    let w = Warehouse::new();
    w.file("a/b.jsonl", "{}\n")
        .file("a.jsonl", "{}\n")
        .file("a-b.jsonl", "{}\n")
        .file("B.jsonl", "{}\n")
        .file("a0.jsonl", "{}\n")
        .file("a0/c.jsonl", "{}\n");
    let snapshot = w.catalog().open(Path::new(".")).unwrap();
    let files: Vec<_> = snapshot.sources.iter().map(|s| s.file.as_str()).collect();
    // A directory sorts as `name/`: after `a.jsonl` ('.' < '/'), before
    // `a0.jsonl` ('/' < '0').
    assert_eq!(
        files,
        [
            "B.jsonl",
            "a-b.jsonl",
            "a.jsonl",
            "a/b.jsonl",
            "a0.jsonl",
            "a0/c.jsonl"
        ]
    );
}

#[test]
fn max_entries_truncates_a_listing() {
    let w = Warehouse::new();
    for i in 0..10 {
        w.file(&format!("f{i}.jsonl"), "{}\n");
    }
    let catalog = w.catalog_with(CatalogOptions {
        max_entries: 3,
        ..CatalogOptions::default()
    });
    let listing = catalog.list(Path::new(".")).unwrap();
    assert!(listing.truncated);
    assert_eq!(listing.entries.len(), 3);
    assert_eq!(listing.warnings[0].code, ErrorCode::BoundReached);
    let snapshot = catalog.open(Path::new(".")).unwrap();
    assert!(snapshot.truncated);
    assert_eq!(snapshot.sources.len(), 3);
    assert!(snapshot.stats().truncated);
}

#[test]
fn max_files_truncates_an_open() {
    let w = Warehouse::new();
    for i in 0..5 {
        w.file(&format!("d{i}/x.jsonl"), "{}\n");
    }
    let catalog = w.catalog_with(CatalogOptions {
        max_files: 2,
        ..CatalogOptions::default()
    });
    let snapshot = catalog.open(Path::new(".")).unwrap();
    assert!(snapshot.truncated);
    assert_eq!(snapshot.sources.len(), 2);
    assert!(
        snapshot
            .warnings
            .iter()
            .any(|w| w.code == ErrorCode::BoundReached)
    );
    let listing = catalog.list(Path::new(".")).unwrap();
    assert!(
        !listing.truncated,
        "max_files does not bound a one-level listing"
    );
}

#[test]
fn symlinks_are_ignored_everywhere() {
    let w = Warehouse::new();
    w.file("real/x.jsonl", jsonl(3, 0))
        .symlink("real", "link_dir")
        .symlink("real/x.jsonl", "link_file.jsonl")
        .symlink("nowhere", "dangling.jsonl")
        .symlink(".", "real/loop")
        .symlink("..", "real/up");
    let catalog = w.catalog();
    let names: Vec<_> = catalog
        .list(Path::new("."))
        .unwrap()
        .entries
        .iter()
        .map(|e| e.name().to_string())
        .collect();
    assert_eq!(names, ["real"]);
    let snapshot = catalog.open(Path::new(".")).unwrap();
    assert_eq!(snapshot.sources.len(), 1);
    assert_eq!(snapshot.stats().record_count, 3);
    for rel in [
        "link_dir",
        "link_file.jsonl",
        "real/loop",
        "real/loop/x.jsonl",
    ] {
        assert_eq!(
            catalog.list(Path::new(rel)).unwrap_err().code,
            ErrorCode::PathNotFound,
            "{rel}"
        );
    }
}

#[test]
fn torn_records_are_counted_as_failed_in_every_format() {
    let w = Warehouse::new();
    w.file("line.jsonl", "{\"a\":1}\n{\"a\":\n{\"a\":3}\n")
        .file(
            "packed.jsonseq",
            "\u{1e}{\"a\":1}\u{1e}{\"a\"\u{1e}{\"a\":3}\u{1e}",
        )
        .file("doc.json", "[{\"a\":1},{\"a\":")
        .file("killed.ndjson", "{\"a\":1}\n{\"a\":2,\"b\":\"unfinish");
    let snapshot = w.catalog().open(Path::new(".")).unwrap();
    let counts: Vec<_> = snapshot
        .sources
        .iter()
        .map(|s| {
            (
                s.file.as_str(),
                s.counts.record_count.unwrap(),
                s.counts.failed_count.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            ("doc.json", 2, 1),
            ("killed.ndjson", 2, 1),
            ("line.jsonl", 3, 1),
            ("packed.jsonseq", 3, 1)
        ]
    );
    let stats = snapshot.stats();
    assert_eq!((stats.record_count, stats.failed_count), (10, 4));
}

#[test]
fn sidecars_and_state_are_never_sources() {
    let w = Warehouse::new();
    w.file("r.jsonl", "{}\n")
        .file("r.jsonl.3fa2.idx", b"PCHRNIDX\x03")
        .file("r.jsonl.indexes.json", "{}")
        .branch(".")
        .file(".pchronicle/shards/s.json", "{}")
        .file(".pchronicle/x.jsonl", "{}\n");
    let catalog = w.catalog();
    let snapshot = catalog.open(Path::new(".")).unwrap();
    let files: Vec<_> = snapshot.sources.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(files, ["r.jsonl"]);
    let names: Vec<_> = catalog
        .list(Path::new("."))
        .unwrap()
        .entries
        .iter()
        .map(|e| e.name().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "chronicle.manifest",
            "r.jsonl",
            "r.jsonl.3fa2.idx",
            "r.jsonl.indexes.json"
        ]
    );
    assert_eq!(
        catalog.list(Path::new(".pchronicle")).unwrap_err().code,
        ErrorCode::PathNotFound
    );
}

#[test]
fn open_of_a_file_and_of_a_leaf() {
    let w = Warehouse::new();
    w.file("x.jsonl", jsonl(4, 10))
        .file("notes.txt", "hi")
        .storyline("s", 2);
    let catalog = w.catalog();
    let file = catalog.open(Path::new("x.jsonl")).unwrap();
    assert_eq!(file.kind, NodeKind::File);
    assert_eq!(file.sources.len(), 1);
    assert_eq!(file.sources[0].file, ".");
    assert_eq!(file.sources[0].kind, SourceKind::File);
    assert_eq!(file.stats().format.as_deref(), Some("jsonl"));
    assert_eq!(
        catalog.open(Path::new("notes.txt")).unwrap().sources.len(),
        0
    );
    let leaf = catalog.open(Path::new("s")).unwrap();
    assert_eq!(leaf.kind, NodeKind::Dataset);
    assert_eq!(leaf.stats().format.as_deref(), Some("storyline/v1"));
}

#[test]
fn paths_outside_the_warehouse_are_refused() {
    let w = Warehouse::new();
    w.dir("a");
    let catalog = w.catalog();
    assert_eq!(
        catalog.list(Path::new("../")).unwrap_err().code,
        ErrorCode::PathInvalid
    );
    assert_eq!(
        catalog.list(Path::new("/etc")).unwrap_err().code,
        ErrorCode::PathInvalid
    );
    assert_eq!(
        catalog.list(Path::new("a/missing")).unwrap_err().code,
        ErrorCode::PathNotFound
    );
    assert_eq!(
        catalog.list(Path::new("./a/.")).unwrap().kind,
        NodeKind::Directory
    );
}

#[test]
fn unchanged_warehouse_is_answered_from_the_cache() {
    let w = Warehouse::new();
    w.file("p=1/a.jsonl", jsonl(3, 0))
        .storyline("s", 2)
        .file("b.jsonl", jsonl(1, 0));
    let catalog = w.catalog();
    catalog.open(Path::new(".")).unwrap();
    settle();
    let first = catalog.open(Path::new(".")).unwrap();
    let warm = catalog.cache_hits();
    let second = catalog.open(Path::new(".")).unwrap();
    let hot = catalog.cache_hits();
    assert_eq!(first, second);
    assert_eq!(
        hot.files.misses, warm.files.misses,
        "no record file re-read"
    );
    assert_eq!(
        hot.nodes.misses, warm.nodes.misses,
        "no directory re-classified"
    );
    assert_eq!(hot.dirs.misses, warm.dirs.misses, "no directory re-read");
    assert!(hot.files.hits > warm.files.hits);
}

#[test]
fn cache_follows_appends_rewrites_and_new_entries() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(3, 0)).storyline("s", 2);
    let catalog = w.catalog();
    settle();
    assert_eq!(catalog.stats(Path::new(".")).unwrap().record_count, 5);
    assert_eq!(catalog.stats(Path::new(".")).unwrap().record_count, 5);
    // Append: size changes.
    w.file("a.jsonl", jsonl(4, 0));
    assert_eq!(catalog.stats(Path::new(".")).unwrap().record_count, 6);
    // Same-size rewrite (identity changes through mtime/ctime).
    settle();
    catalog.stats(Path::new(".")).unwrap();
    w.file("a.jsonl", jsonl(4, 0).replacen('{', "x", 1));
    assert_eq!(catalog.stats(Path::new(".")).unwrap().failed_count, 1);
    // A new directory with a record file, and a new storyline generation.
    w.file("new/b.jsonl", jsonl(10, 0));
    w.file("s/generations/g3/x.jsonl", jsonl(7, 0))
        .file("s/CURRENT", "g3");
    let stats = catalog.stats(Path::new(".")).unwrap();
    assert_eq!(stats.record_count, 4 + 10 + 7);
    // Removal.
    std::fs::remove_dir_all(w.abs("new")).unwrap();
    assert_eq!(catalog.stats(Path::new(".")).unwrap().record_count, 4 + 7);
}

#[test]
fn leaf_preview_cache_sees_an_in_place_manifest_edit() {
    let w = Warehouse::new();
    w.manifest(
        "x",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"other/v1\"\n[stats]\nrecord_count = 1\n",
    );
    let catalog = w.catalog();
    settle();
    assert_eq!(catalog.stats(Path::new(".")).unwrap().record_count, 1);
    // Rewrite in place (same inode, same directory mtime).
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(w.abs("x/chronicle.manifest"))
        .unwrap();
    f.write_all(
        b"schema_version = 1\nkind = \"leaf\"\nformat = \"other/v1\"\n[stats]\nrecord_count = 2\n",
    )
    .unwrap();
    drop(f);
    assert_eq!(catalog.stats(Path::new(".")).unwrap().record_count, 2);
}

#[test]
fn list_with_meta_pairs_each_entry_with_its_own_stat() {
    use std::os::unix::fs::MetadataExt;
    let wh = Warehouse::new();
    wh.file("a.jsonl", jsonl(2, 0))
        .file("notes.txt", "x")
        .dir("plain")
        .storyline("leaf", 3)
        .symlink("a.jsonl", "link.jsonl");
    let catalog = wh.catalog();
    // The first read repairs the leaf's manifest; compare after it.
    catalog.list(Path::new("")).unwrap();
    let plain = catalog.list(Path::new("")).unwrap();
    let (listing, metas) = catalog.list_with_meta(Path::new("")).unwrap();
    assert_eq!(listing, plain);
    assert_eq!(listing.entries.len(), metas.len());
    for (entry, meta) in listing.entries.iter().zip(&metas) {
        let under = std::fs::symlink_metadata(wh.abs(entry.name())).unwrap();
        assert_eq!(meta.ino, under.ino(), "{}", entry.name());
        assert_eq!(meta.is_dir(), entry.kind() != NodeKind::File);
    }
    let (leaf, leaf_metas) = catalog.list_with_meta(Path::new("leaf")).unwrap();
    assert_eq!(leaf.kind, NodeKind::Dataset);
    assert_eq!(
        leaf_metas[0].ino,
        std::fs::metadata(wh.abs("leaf")).unwrap().ino()
    );
}

#[test]
fn node_reports_kind_and_refuses_what_list_hides() {
    let wh = Warehouse::new();
    wh.file("a.jsonl", jsonl(2, 0))
        .storyline("leaf", 3)
        .file(".pchronicle/state", "x")
        .symlink("a.jsonl", "link.jsonl");
    let catalog = wh.catalog();
    assert_eq!(
        catalog.node(Path::new("")).unwrap().kind,
        NodeKind::Directory
    );
    assert_eq!(
        catalog.node(Path::new("leaf")).unwrap().kind,
        NodeKind::Dataset
    );
    assert_eq!(
        catalog.node(Path::new("a.jsonl")).unwrap().kind,
        NodeKind::File
    );
    for hidden in [
        "leaf/CURRENT",
        "leaf/generations",
        ".pchronicle",
        "link.jsonl",
        "missing",
    ] {
        let err = catalog.node(Path::new(hidden)).unwrap_err();
        assert_eq!(err.code, ErrorCode::PathNotFound, "{hidden}");
    }
}
