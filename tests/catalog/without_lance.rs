//! The compact-jsonl store in a build without Lance (`--no-default-features`):
//! leaves are classified by their manifests and fingerprinted by
//! `_versions/`, their counts trusted only while the manifest matches, and
//! imports refused. The leaves
//! here are the stand-in layout of [`Warehouse::compact`], which is all a
//! build without Lance reads.

use std::path::Path;

use pchronicle::catalog::{NodeKind, StatsOrigin};
use pchronicle::error::ErrorCode;

use crate::support::{Warehouse, jsonl, pchronicle};

fn preview(w: &Warehouse, rel: &str) -> (pchronicle::catalog::DatasetPreview, Vec<ErrorCode>) {
    let listing = w.catalog().list(Path::new(rel)).unwrap();
    let pchronicle::catalog::Entry::Dataset { preview, .. } = &listing.entries[0] else {
        panic!("{rel} lists as a dataset: {:?}", listing.entries);
    };
    let codes = listing.warnings.iter().map(|w| w.code).collect();
    (preview.clone(), codes)
}

#[test]
fn a_leaf_whose_manifest_matches_versions_is_trusted() {
    let w = Warehouse::new();
    w.compact("leaf", 3, 5);
    let (preview, warnings) = preview(&w, "leaf");
    assert_eq!(preview.counts.record_count, Some(5));
    assert!(preview.trusted);
    assert_eq!(preview.stats_origin, StatsOrigin::Manifest);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn a_stale_manifest_is_reported_unverified_with_a_code() {
    let w = Warehouse::new();
    w.compact("leaf", 3, 5);
    // A newer Lance version than the manifest names.
    w.file("leaf/_versions/4.manifest", b"lance");
    let (preview, warnings) = preview(&w, "leaf");
    assert_eq!(preview.counts.record_count, Some(5));
    assert!(!preview.trusted);
    assert_eq!(preview.stats_origin, StatsOrigin::Unverified);
    assert_eq!(
        preview.fingerprint.as_deref(),
        Some("lance:version:4"),
        "the revision on disk"
    );
    assert_eq!(warnings, [ErrorCode::LanceNotBuilt]);
}

#[test]
fn without_a_manifest_versions_alone_make_no_leaf() {
    let w = Warehouse::new();
    w.compact_without_manifest("leaf", 1, 5);
    // As with Lance when the dataset cannot be confirmed: a plain
    // directory, and nothing in it is a record file of its rows.
    assert_eq!(
        w.catalog().kind_of(Path::new("leaf")).unwrap(),
        NodeKind::Directory
    );
}

#[test]
fn import_is_refused_with_a_code() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(2, 0));
    let out = pchronicle(&[
        "import",
        w.abs("src").to_str().unwrap(),
        w.abs("dest").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PCHRONICLE_LANCE_NOT_BUILT"), "{err}");
    assert!(!w.abs("dest/_versions").exists());
}
