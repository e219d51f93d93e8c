//! One test per classification rule (SPEC 2.2) and per leaf-preview path.

use std::path::Path;
use std::sync::Arc;

use pchronicle::catalog::{CatalogOptions, Entry, NodeKind, StatsOrigin};
use pchronicle::error::ErrorCode;
use pchronicle::store::manifest;

use crate::support::{FakeCompactStore, Warehouse};

fn kind(w: &Warehouse, rel: &str) -> NodeKind {
    w.catalog().kind_of(Path::new(rel)).unwrap()
}

fn preview_of(listing: &pchronicle::catalog::Listing) -> &pchronicle::catalog::DatasetPreview {
    match &listing.entries[0] {
        Entry::Dataset { preview, .. } => preview,
        other => panic!("expected a dataset, got {other:?}"),
    }
}

#[test]
fn leaf_manifest_makes_a_leaf_without_markers() {
    let w = Warehouse::new();
    w.manifest(
        "x",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"mystery/v3\"\n[identity]\nfingerprint = \"m:1\"\n[stats]\nrecord_count = 9\nfailed_count = 1\n",
    );
    assert_eq!(kind(&w, "x"), NodeKind::Dataset);
    let listing = w.catalog().list(Path::new("x")).unwrap();
    let preview = preview_of(&listing);
    assert_eq!(preview.format, "mystery/v3");
    assert_eq!(
        (preview.counts.record_count, preview.counts.failed_count),
        (Some(9), Some(1))
    );
    assert_eq!(preview.stats_origin, StatsOrigin::Unverified);
    assert!(!preview.trusted);
    assert_eq!(listing.warnings[0].code, ErrorCode::FormatUnsupported);
}

#[test]
fn current_file_makes_a_storyline_leaf_and_is_repaired() {
    let w = Warehouse::new();
    w.storyline("s", 5);
    let catalog = w.catalog();
    let first = catalog.list(Path::new("s")).unwrap();
    assert_eq!(first.kind, NodeKind::Dataset);
    assert_eq!(preview_of(&first).stats_origin, StatsOrigin::Repaired);
    assert_eq!(preview_of(&first).counts.record_count, Some(5));
    assert_eq!(
        preview_of(&first).fingerprint.as_deref(),
        Some("storyline:generation:g2")
    );
    let written = manifest::read_at(&w.abs("s")).unwrap().unwrap();
    assert_eq!(
        written.fingerprint.as_deref(),
        Some("storyline:generation:g2")
    );
    let second = catalog.list(Path::new("s")).unwrap();
    assert_eq!(preview_of(&second).stats_origin, StatsOrigin::Manifest);
    assert_eq!(preview_of(&second).counts, preview_of(&first).counts);
}

#[test]
fn storyline_generation_switch_makes_the_manifest_stale() {
    let w = Warehouse::new();
    w.storyline("s", 5);
    let catalog = w.catalog();
    catalog.list(Path::new("s")).unwrap();
    w.file("s/generations/g3/a.jsonl", crate::support::jsonl(11, 0))
        .file("s/CURRENT", "g3\n");
    let listing = catalog.list(Path::new("s")).unwrap();
    assert_eq!(preview_of(&listing).counts.record_count, Some(11));
    assert_eq!(preview_of(&listing).stats_origin, StatsOrigin::Repaired);
}

#[test]
fn compact_marker_makes_a_leaf_only_with_its_store() {
    let w = Warehouse::new();
    w.compact_without_manifest("c", 2, 6);
    assert_eq!(
        kind(&w, "c"),
        NodeKind::Directory,
        "a _versions/ directory that Lance cannot open is a plain directory"
    );
    let store = Arc::new(FakeCompactStore::default());
    let catalog = w.catalog_with_compact(&store);
    assert_eq!(catalog.kind_of(Path::new("c")).unwrap(), NodeKind::Dataset);
    let listing = catalog.list(Path::new("c")).unwrap();
    assert_eq!(preview_of(&listing).counts.record_count, Some(6));
    assert_eq!(
        preview_of(&listing).fingerprint.as_deref(),
        Some("lance:version:2")
    );
}

#[test]
fn current_is_checked_before_the_compact_marker() {
    let w = Warehouse::new();
    w.compact_without_manifest("both", 1, 3)
        .storyline("both", 2);
    let store = Arc::new(FakeCompactStore::default());
    let listing = w
        .catalog_with_compact(&store)
        .list(Path::new("both"))
        .unwrap();
    assert_eq!(preview_of(&listing).format, "storyline/v1");
}

#[test]
fn branch_manifest_is_a_directory() {
    let w = Warehouse::new();
    w.branch("b").file("b/x.jsonl", "{}\n");
    assert_eq!(kind(&w, "b"), NodeKind::Directory);
    let listing = w.catalog().list(Path::new("b")).unwrap();
    let names: Vec<_> = listing.entries.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["chronicle.manifest", "x.jsonl"]);
    assert!(listing.warnings.is_empty());
}

#[test]
fn branch_manifest_does_not_hide_physical_markers() {
    let w = Warehouse::new();
    w.storyline("b", 4).branch("b");
    assert_eq!(kind(&w, "b"), NodeKind::Dataset);
}

#[test]
fn malformed_manifest_falls_back_to_markers_with_its_code() {
    let cases = [
        ("schema_version = [", ErrorCode::ManifestParse),
        (
            "schema_version = 7\nkind = \"leaf\"\nformat = \"storyline/v1\"",
            ErrorCode::ManifestVersion,
        ),
        (
            "schema_version = 1\nkind = \"twig\"",
            ErrorCode::ManifestKind,
        ),
        (
            "schema_version = 1\nkind = \"leaf\"",
            ErrorCode::ManifestFormatMissing,
        ),
    ];
    for (text, code) in cases {
        let w = Warehouse::new();
        w.storyline("s", 3).manifest("s", text).manifest("d", text);
        let catalog = w.catalog_with(CatalogOptions {
            repair: false,
            ..CatalogOptions::default()
        });
        let listing = catalog.list(Path::new(".")).unwrap();
        assert_eq!(
            listing.entries[0].kind(),
            NodeKind::Directory,
            "{text:?}: d has no markers"
        );
        assert_eq!(
            listing.entries[1].kind(),
            NodeKind::Dataset,
            "{text:?}: s has CURRENT"
        );
        let codes: Vec<_> = listing
            .warnings
            .iter()
            .map(|w| (w.code, w.path.as_str()))
            .collect();
        assert_eq!(
            codes,
            [
                (code, "d/chronicle.manifest"),
                (code, "s/chronicle.manifest")
            ],
            "{text:?}"
        );
        assert_eq!(
            std::fs::read_to_string(w.abs("s/chronicle.manifest")).unwrap(),
            text,
            "left alone"
        );
    }
}

#[test]
fn stale_manifest_without_repair_is_scanned_and_left_alone() {
    let w = Warehouse::new();
    w.storyline("s", 3).manifest(
        "s",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n[identity]\nfingerprint = \"storyline:generation:g1\"\n[stats]\nrecord_count = 99\n",
    );
    let before = std::fs::read(w.abs("s/chronicle.manifest")).unwrap();
    let catalog = w.catalog_with(CatalogOptions {
        repair: false,
        ..CatalogOptions::default()
    });
    let listing = catalog.list(Path::new("s")).unwrap();
    let preview = preview_of(&listing);
    assert_eq!(preview.counts.record_count, Some(3));
    assert_eq!(preview.stats_origin, StatsOrigin::Scan);
    assert_eq!(listing.warnings[0].code, ErrorCode::ManifestStale);
    assert_eq!(
        std::fs::read(w.abs("s/chronicle.manifest")).unwrap(),
        before
    );
}

#[test]
fn stale_manifest_repair_keeps_unknown_keys() {
    let w = Warehouse::new();
    w.storyline("s", 3).manifest(
        "s",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\nowner = \"ops\"\n[identity]\nfingerprint = \"storyline:generation:g1\"\n[stats]\nrecord_count = 99\ntokens = 5\n",
    );
    w.catalog().list(Path::new("s")).unwrap();
    let text = std::fs::read_to_string(w.abs("s/chronicle.manifest")).unwrap();
    assert!(text.contains("owner = \"ops\""), "{text}");
    assert!(text.contains("tokens = 5"), "{text}");
    assert!(text.contains("record_count = 3"), "{text}");
    assert!(text.contains("storyline:generation:g2"), "{text}");
}

#[test]
fn an_unreadable_manifest_is_kept_and_the_leaf_counted_from_its_data() {
    let w = Warehouse::new();
    // A directory where the manifest should be: unreadable, and never
    // replaced.
    w.storyline("s", 3).dir("s/chronicle.manifest/blocker");
    let listing = w.catalog().list(Path::new("s")).unwrap();
    let preview = preview_of(&listing);
    assert_eq!(preview.counts.record_count, Some(3));
    assert_eq!(preview.stats_origin, StatsOrigin::Scan);
    let codes: Vec<_> = listing.warnings.iter().map(|w| w.code).collect();
    assert_eq!(
        codes,
        [ErrorCode::ManifestUnreadable, ErrorCode::ManifestKept]
    );
    assert!(w.abs("s/chronicle.manifest/blocker").is_dir());
}

#[test]
fn failed_repair_falls_back_to_the_scan() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root to read as a user who cannot write");
        return;
    }
    let w = Warehouse::new();
    w.storyline("s", 3);
    std::fs::set_permissions(
        w.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // Another user may read the leaf but not write its manifest.
    let viewer = pchronicle::warehouse::Viewer {
        uid: 4242,
        gid: 4242,
        groups: Vec::new(),
    };
    let catalog = w.catalog().viewed_by(viewer).unwrap();
    let listing = catalog.list(Path::new("s")).unwrap();
    let preview = preview_of(&listing);
    assert_eq!(preview.counts.record_count, Some(3));
    assert_eq!(preview.stats_origin, StatsOrigin::Scan);
    let codes: Vec<_> = listing.warnings.iter().map(|w| w.code).collect();
    assert_eq!(codes, [ErrorCode::ManifestWrite]);
    assert!(!w.abs("s/chronicle.manifest").exists());
}

#[test]
fn storyline_leaf_with_broken_current_is_still_a_leaf() {
    let w = Warehouse::new();
    w.storyline("s", 3).file("s/CURRENT", "g9\n");
    let listing = w.catalog().list(Path::new("s")).unwrap();
    assert_eq!(listing.kind, NodeKind::Dataset);
    let preview = preview_of(&listing);
    assert_eq!(preview.stats_origin, StatsOrigin::Unavailable);
    assert_eq!(preview.counts.record_count, None);
    assert_eq!(
        listing.warnings[0].code,
        ErrorCode::StorylineGenerationMissing
    );
    let stats = w.catalog().stats(Path::new(".")).unwrap();
    assert_eq!(stats.unreadable_sources, 1);
    assert_eq!(stats.untrusted_sources, 1);
}

#[test]
fn list_classifies_children_without_recursing() {
    let w = Warehouse::new();
    // A deep tree below a plain directory: listing the parent must not
    // descend into it (the leaf below would otherwise be repaired).
    w.storyline("a/b/c/leaf", 2);
    w.catalog().list(Path::new(".")).unwrap();
    assert!(!w.abs("a/b/c/leaf/chronicle.manifest").exists());
}
