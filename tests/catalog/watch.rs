//! Answers kept while nothing below them changes (`CatalogOptions::watch`):
//! after every kind of change a writer makes, a watching catalog answers
//! exactly as a new catalog without any cache does; while nothing changes,
//! it answers without validating a single leaf.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use pchronicle::catalog::{Catalog, CatalogOptions};
use pchronicle::store::{LeafStore, Stores, StorylineStore};

use crate::support::{FakeCompactStore, Warehouse, jsonl};

/// Every directory the checks ask about (those that exist at the time).
const DIRS: &[&str] = &[".", "p=1", "p=1/q=2", "team", "team/deep", "moved", "grown"];

/// Without repair: a catalog that writes a leaf's manifest tells that it
/// did (`Repaired`), one that reads it afterwards does not, so two
/// catalogs could not be compared.
fn catalog(w: &Warehouse, watch: bool) -> Catalog {
    let stores = Stores::empty()
        .with(Arc::new(StorylineStore))
        .with(Arc::new(FakeCompactStore::default()) as Arc<dyn LeafStore>);
    let options = CatalogOptions {
        watch,
        repair: false,
        ..CatalogOptions::default()
    };
    Catalog::with_stores(w.path(), options, stores).unwrap()
}

/// What a listing shows of each entry, attributes included.
fn listed(catalog: &Catalog, rel: &Path) -> String {
    let (listing, metas) = catalog.list_with_meta(rel).unwrap();
    let attrs: Vec<_> = metas
        .iter()
        .map(|m| (m.size, m.mtime_ns(), m.ctime_ns(), m.mode))
        .collect();
    format!("{listing:?} {attrs:?}")
}

/// Asks the watching catalog everything, as a poller would, so that each
/// answer is kept.
fn ask(watching: &Catalog, w: &Warehouse) {
    for dir in DIRS.iter().filter(|d| w.abs(d).is_dir()) {
        let rel = Path::new(dir);
        watching.list_with_meta(rel).unwrap();
        watching.open(rel).unwrap();
        watching.open_for_reading(rel).unwrap();
        watching.stats(rel).unwrap();
    }
}

/// The watching catalog answers as a new catalog does, for every directory.
#[track_caller]
fn agrees(watching: &Catalog, w: &Warehouse, step: &str) {
    let fresh = catalog(w, false);
    for dir in DIRS.iter().filter(|d| w.abs(d).is_dir()) {
        let rel = Path::new(dir);
        assert_eq!(
            listed(watching, rel),
            listed(&fresh, rel),
            "{step}: list {dir}"
        );
        assert_eq!(
            watching.open(rel).unwrap(),
            fresh.open(rel).unwrap(),
            "{step}: open {dir}"
        );
        assert_eq!(
            watching.open_for_reading(rel).unwrap(),
            fresh.open_for_reading(rel).unwrap(),
            "{step}: open for reading {dir}"
        );
        assert_eq!(
            watching.stats(rel).unwrap(),
            fresh.stats(rel).unwrap(),
            "{step}: stats {dir}"
        );
    }
}

#[test]
fn kept_answers_follow_every_change() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(3, 0))
        .file("p=1/q=2/b.jsonl", jsonl(4, 0))
        .storyline("team/s", 2)
        .compact("team/deep/c", 1, 5)
        .manifest(
            "team/x",
            "schema_version = 1\nkind = \"leaf\"\nformat = \"other/v1\"\n[stats]\nrecord_count = 1\n",
        )
        .dir("grown");
    let watching = catalog(&w, true);
    let steps: Vec<(&str, Box<dyn Fn(&Warehouse)>)> = vec![
        (
            "append",
            Box::new(|w| w.file_append("a.jsonl", &jsonl(1, 9))),
        ),
        (
            "same-size rewrite deep down",
            Box::new(|w| {
                let text = std::fs::read_to_string(w.abs("p=1/q=2/b.jsonl")).unwrap();
                w.file("p=1/q=2/b.jsonl", text.replacen('{', "x", 1));
            }),
        ),
        (
            "a new nested directory",
            Box::new(|w| {
                w.file("p=1/q=3/r/c.jsonl", jsonl(6, 0));
            }),
        ),
        (
            "a new storyline generation",
            Box::new(|w| {
                w.file("team/s/generations/g3/x.jsonl", jsonl(7, 0))
                    .file("team/s/CURRENT", "g3\n");
            }),
        ),
        (
            "a new compact version",
            Box::new(|w| {
                w.file("team/deep/c/data/rows.jsonl", jsonl(8, 0))
                    .file("team/deep/c/_versions/2.manifest", b"lance");
            }),
        ),
        (
            "a manifest edited in place",
            Box::new(|w| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(w.abs("team/x/chronicle.manifest"))
                    .unwrap();
                f.write_all(
                    b"schema_version = 1\nkind = \"leaf\"\nformat = \"other/v1\"\n[stats]\nrecord_count = 2\n",
                )
                .unwrap();
            }),
        ),
        (
            "a plain directory becoming a leaf",
            Box::new(|w| {
                w.compact("grown", 3, 2);
            }),
        ),
        (
            "the grown leaf's next version",
            Box::new(|w| {
                w.file("grown/data/rows.jsonl", jsonl(9, 0))
                    .file("grown/_versions/4.manifest", b"lance");
            }),
        ),
        (
            "a mode change",
            Box::new(|w| {
                let perms = std::fs::Permissions::from_mode(0o600);
                std::fs::set_permissions(w.abs("a.jsonl"), perms).unwrap();
            }),
        ),
        (
            "a directory moved away and another moved into its place",
            Box::new(|w| {
                std::fs::rename(w.abs("team/deep"), w.abs("moved")).unwrap();
                w.file("elsewhere/y.jsonl", jsonl(11, 0));
                std::fs::rename(w.abs("elsewhere"), w.abs("team/deep")).unwrap();
            }),
        ),
        (
            "a new version of a leaf below the moved directory",
            Box::new(|w| {
                w.file("moved/c/data/rows.jsonl", jsonl(10, 0))
                    .file("moved/c/_versions/3.manifest", b"lance");
            }),
        ),
        (
            "a change below the directory moved in",
            Box::new(|w| w.file_append("team/deep/y.jsonl", &jsonl(2, 0))),
        ),
        (
            "a removal",
            Box::new(|w| std::fs::remove_dir_all(w.abs("p=1/q=3")).unwrap()),
        ),
        (
            "a leaf removed and the directory made again, empty",
            Box::new(|w| {
                std::fs::remove_dir_all(w.abs("grown")).unwrap();
                w.dir("grown");
            }),
        ),
    ];
    ask(&watching, &w);
    agrees(&watching, &w, "before any change");
    for (step, change) in &steps {
        ask(&watching, &w);
        let before = watching.cache_hits().kept;
        change(&w);
        agrees(&watching, &w, step);
        // Nothing is given again right after a change; asked once more,
        // unchanged, everything is.
        ask(&watching, &w);
        let again = watching.cache_hits().kept;
        assert!(again.hits > before.hits, "{step}: answers kept again");
    }
}

#[test]
fn a_quiet_warehouse_is_answered_without_validating_a_leaf() {
    let w = Warehouse::new();
    for team in 0..20 {
        w.file(&format!("t{team}/a.jsonl"), jsonl(2, 0))
            .storyline(&format!("t{team}/s"), 1);
    }
    let watching = catalog(&w, true);
    let root = Path::new(".");
    let first = watching.stats(root).unwrap();
    let listed = watching.list(root).unwrap();
    let opened = watching.open(root).unwrap();
    let warm = watching.cache_hits();
    for _ in 0..5 {
        assert_eq!(watching.stats(root).unwrap(), first);
        assert_eq!(watching.list(root).unwrap(), listed);
        assert_eq!(watching.open(root).unwrap(), opened);
    }
    let hot = watching.cache_hits();
    assert_eq!(hot.kept.hits - warm.kept.hits, 15, "every answer kept");
    assert_eq!(hot.nodes, warm.nodes, "no classification checked");
    assert_eq!(hot.dirs, warm.dirs, "no directory listed");
    assert_eq!(hot.files, warm.files, "no record file's count checked");
    // A change in one team's storyline is seen at once, and the next
    // answers are kept again.
    w.file("t7/s/generations/g3/x.jsonl", jsonl(5, 0))
        .file("t7/s/CURRENT", "g3\n");
    let changed = watching.stats(root).unwrap();
    assert_eq!(changed.record_count, first.record_count + 4);
    let after = watching.cache_hits().kept;
    watching.stats(root).unwrap();
    assert_eq!(watching.cache_hits().kept.hits, after.hits + 1);
}

/// `keeps` says an answer is kept only while it is, quiet, and would be
/// given again without a walk.
#[test]
fn keeps_tells_an_answer_kept_and_quiet() {
    let w = Warehouse::new();
    w.file("a/b.jsonl", jsonl(2, 0));
    crate::support::settle();
    let watching = catalog(&w, true);
    if !watching.keeps_answers() {
        return; // this filesystem reports no changes
    }
    let a = Path::new("a");
    assert!(!watching.keeps(a), "nothing asked yet");
    watching.open(a).unwrap();
    assert!(watching.keeps(a));
    assert!(!watching.keeps(Path::new(".")), "only what was asked");
    w.file("a/c.jsonl", jsonl(1, 0));
    // The change is seen once the watcher reads its reports.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while watching.keeps(a) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!watching.keeps(a), "a change below ends it");
    assert!(!catalog(&w, false).keeps(a), "without watching, never");
}

#[test]
fn without_watching_nothing_is_kept() {
    let w = Warehouse::new();
    w.file("a/b.jsonl", jsonl(2, 0));
    let plain = catalog(&w, false);
    for _ in 0..3 {
        plain.stats(Path::new(".")).unwrap();
    }
    assert_eq!(plain.cache_hits().kept.hits, 0);
}

#[test]
fn a_directory_above_turning_into_a_leaf_ends_the_answers_below() {
    let w = Warehouse::new();
    w.file("a/b/c.jsonl", jsonl(2, 0));
    let watching = catalog(&w, true);
    let below = Path::new("a/b");
    for _ in 0..2 {
        watching.list(below).unwrap();
        watching.stats(below).unwrap();
    }
    assert!(watching.cache_hits().kept.hits >= 2, "kept while quiet");
    // `a` becomes a leaf: its interior is no longer a path of the
    // warehouse, for a new catalog and for the watching one alike.
    w.compact("a", 1, 1);
    let fresh = catalog(&w, false);
    assert_eq!(
        watching.list(below).map_err(|e| e.code),
        fresh.list(below).map_err(|e| e.code)
    );
    assert_eq!(
        watching.stats(below).map_err(|e| e.code),
        fresh.stats(below).map_err(|e| e.code)
    );
}
