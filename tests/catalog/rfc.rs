//! The seven "Required unit tests (v1)" of RFC-0015, one named test each.

use std::path::Path;
use std::sync::Arc;

use pchronicle::catalog::{Entry, NodeKind, SourceKind, StatsOrigin};
use pchronicle::records::RecordStats;
use pchronicle::store::manifest::Manifest;

use crate::support::{FakeCompactStore, Warehouse, pchronicle, stdout};

const N: usize = 42;

/// warehouse/ with team/ (a directory holding the codex_jsonl compact leaf)
/// and archive/ (a compact leaf), plus a loose record file.
fn rfc_warehouse() -> Warehouse {
    let w = Warehouse::new();
    w.compact("team/codex_jsonl", 3, N)
        .compact("archive", 1, N)
        .file("notes.jsonl", crate::support::jsonl(5, 0));
    w
}

#[test]
fn rfc1_list_is_one_level() {
    let w = rfc_warehouse();
    let store = Arc::new(FakeCompactStore::default());
    let listing = w.catalog_with_compact(&store).list(Path::new(".")).unwrap();
    let names: Vec<_> = listing
        .entries
        .iter()
        .map(|e| (e.name(), e.kind()))
        .collect();
    assert_eq!(
        names,
        [
            ("archive", NodeKind::Dataset),
            ("notes.jsonl", NodeKind::File),
            ("team", NodeKind::Directory)
        ]
    );
    let Entry::Dataset { preview, .. } = &listing.entries[0] else {
        panic!("archive is a dataset")
    };
    assert_eq!(preview.counts.record_count, Some(N as u64));
    assert!(
        listing.entries.iter().all(|e| !e.name().contains('/')),
        "never flattened"
    );
    assert_eq!(store.scans(), 0);
}

#[test]
fn rfc2_open_is_a_virtual_dataset_without_opening_lance() {
    let w = rfc_warehouse();
    let store = Arc::new(FakeCompactStore::default());
    let snapshot = w.catalog_with_compact(&store).open(Path::new(".")).unwrap();
    let files: Vec<_> = snapshot.sources.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(files, ["archive", "notes.jsonl", "team/codex_jsonl"]);
    let codex = &snapshot.sources[2];
    assert_eq!(codex.kind, SourceKind::Dataset);
    assert_eq!(codex.format, "compact-jsonl/v1");
    assert_eq!(codex.counts.record_count, Some(N as u64));
    assert_eq!(codex.stats_origin, StatsOrigin::Manifest);
    assert!(codex.trusted);
    assert_eq!(
        store.scans(),
        0,
        "a trusted manifest answers without opening the data"
    );
    assert_eq!(snapshot.stats().record_count, 2 * N as u64 + 5);
}

#[test]
fn rfc3_list_of_leaf_hides_lance_interiors() {
    let w = rfc_warehouse();
    let store = Arc::new(FakeCompactStore::default());
    let listing = w
        .catalog_with_compact(&store)
        .list(Path::new("archive"))
        .unwrap();
    assert_eq!(listing.kind, NodeKind::Dataset);
    assert_eq!(listing.entries.len(), 1);
    let Entry::Dataset { name, preview } = &listing.entries[0] else {
        panic!("a dataset")
    };
    assert_eq!(name, ".");
    assert_eq!(preview.counts.record_count, Some(N as u64));
    assert_eq!(preview.fingerprint.as_deref(), Some("lance:version:1"));
    let err = w
        .catalog_with_compact(&store)
        .list(Path::new("archive/_versions"))
        .unwrap_err();
    assert_eq!(err.code, pchronicle::ErrorCode::PathNotFound);
}

#[test]
fn rfc4_open_of_leaf_does_not_recurse_into_a_nested_manifest() {
    let w = rfc_warehouse();
    w.storyline("archive/nested", 7).manifest(
        "archive/inner",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n[stats]\nrecord_count = 1000\n",
    );
    let store = Arc::new(FakeCompactStore::default());
    let catalog = w.catalog_with_compact(&store);
    let leaf = catalog.open(Path::new("archive")).unwrap();
    assert_eq!(leaf.sources.len(), 1);
    assert_eq!(leaf.sources[0].file, ".");
    assert_eq!(leaf.stats().record_count, N as u64);
    let all = catalog.open(Path::new(".")).unwrap();
    assert!(all.sources.iter().all(|s| !s.file.starts_with("archive/")));
}

#[test]
fn rfc5_updating_a_leaf_manifest_never_touches_parent_branches() {
    let w = rfc_warehouse();
    w.branch("team");
    let store = Arc::new(FakeCompactStore::default());
    let catalog = w.catalog_with_compact(&store);
    let before = w.snapshot_files("team/codex_jsonl");
    // Publish a new version of the leaf: only its own manifest changes.
    w.file("team/codex_jsonl/_versions/4.manifest", b"lance");
    w.file(
        "team/codex_jsonl/data/rows.jsonl",
        crate::support::jsonl(N + 8, 0),
    );
    let stats = RecordStats {
        record_count: (N + 8) as u64,
        ..RecordStats::default()
    };
    Manifest::leaf("compact-jsonl/v1", "lance:version:4", stats)
        .write_at(&w.abs("team/codex_jsonl"))
        .unwrap();
    let listing = catalog.list(Path::new("team")).unwrap();
    let Entry::Dataset { preview, .. } = &listing.entries[1] else {
        panic!("codex_jsonl")
    };
    assert_eq!(preview.counts.record_count, Some((N + 8) as u64));
    assert_eq!(preview.stats_origin, StatsOrigin::Manifest);
    // A leaf left without a manifest is repaired in place, and still only
    // the leaf's own file is written.
    w.storyline("team/fresh", 3);
    let before_repair = w.snapshot_files("team/fresh");
    let opened = catalog.open(Path::new("team")).unwrap();
    let fresh = opened.sources.iter().find(|s| s.file == "fresh").unwrap();
    assert_eq!(fresh.stats_origin, StatsOrigin::Repaired);
    assert!(w.abs("team/fresh/chronicle.manifest").exists());
    assert_eq!(w.snapshot_files("team/fresh"), before_repair);
    let after = w.snapshot_files("team/codex_jsonl");
    let without_fresh = |files: Vec<(std::path::PathBuf, Vec<u8>)>| -> Vec<_> {
        files
            .into_iter()
            .filter(|(p, _)| !p.starts_with(w.abs("team/fresh")))
            .collect()
    };
    assert_eq!(
        without_fresh(before),
        without_fresh(after),
        "no ancestor was rewritten"
    );
}

#[test]
fn rfc6_cli_ls_json_matches_library_list() {
    let w = rfc_warehouse();
    w.storyline("team/planner", 4).branch("team");
    let catalog = w.catalog();
    // Repairs are a first-read effect; settle them so both sides see the
    // same on-disk state.
    catalog.open(Path::new(".")).unwrap();
    for rel in [".", "team", "archive", "team/planner", "notes.jsonl"] {
        let path = w.abs(rel);
        let cli = stdout(&pchronicle(&["ls", "--json", path.to_str().unwrap()]));
        assert_eq!(
            cli,
            catalog.list(Path::new(rel)).unwrap().to_json(),
            "ls --json {rel}"
        );
        let cli = stdout(&pchronicle(&["stats", "--json", path.to_str().unwrap()]));
        assert_eq!(
            cli,
            catalog.stats(Path::new(rel)).unwrap().to_json(),
            "stats --json {rel}"
        );
    }
}

#[test]
fn rfc7_ls_sources_matches_open() {
    let w = rfc_warehouse();
    let catalog = w.catalog();
    let snapshot = catalog.open(Path::new(".")).unwrap();
    let cli = stdout(&pchronicle(&[
        "ls",
        "--sources",
        "--json",
        w.path().to_str().unwrap(),
    ]));
    assert_eq!(cli, snapshot.sources_jsonl());
    let files: Vec<String> = cli
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["_file_"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(files, ["archive", "notes.jsonl", "team/codex_jsonl"]);
}
