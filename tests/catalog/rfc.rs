//! The seven "Required unit tests (v1)" of RFC-0015, one named test each,
//! each run twice: over the stand-in compact-jsonl store (which counts
//! what it is asked to open) and, with Lance built, over real leaves that
//! `import` wrote on Lance.

use std::path::Path;
use std::sync::Arc;

use pchronicle::catalog::{Catalog, CatalogOptions, Entry, NodeKind, SourceKind, StatsOrigin};
use pchronicle::records::RecordStats;
use pchronicle::store::manifest::Manifest;
use pchronicle::store::{LeafStore, Stores, StorylineStore};

use crate::support::{FakeCompactStore, Warehouse, jsonl, pchronicle, stdout};

const N: usize = 42;

/// Which compact-jsonl leaves a test runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaves {
    StandIn,
    #[cfg(feature = "compact-jsonl")]
    Lance,
}

fn every_kind(test: impl Fn(Leaves)) {
    test(Leaves::StandIn);
    #[cfg(feature = "compact-jsonl")]
    test(Leaves::Lance);
}

/// warehouse/ with team/ (a directory holding the codex_jsonl compact leaf)
/// and archive/ (a compact leaf), plus a loose record file.
struct Rfc {
    w: Warehouse,
    leaves: Leaves,
    /// Where records to import are written (outside the warehouse).
    sources: tempfile::TempDir,
    stand_in: Arc<FakeCompactStore>,
    #[cfg(feature = "compact-jsonl")]
    lance: Arc<pchronicle::store::compact::CompactJsonlStore>,
}

impl Rfc {
    fn new(leaves: Leaves) -> Rfc {
        let rfc = Rfc {
            w: Warehouse::new(),
            leaves,
            sources: tempfile::tempdir().unwrap(),
            stand_in: Arc::default(),
            #[cfg(feature = "compact-jsonl")]
            lance: Arc::default(),
        };
        rfc.leaf("team/codex_jsonl", 3, N);
        rfc.leaf("archive", 1, N);
        rfc.w.file("notes.jsonl", jsonl(5, 0));
        rfc
    }

    /// A compact-jsonl leaf whose newest version `version` holds `records`.
    fn leaf(&self, rel: &str, version: u64, records: usize) {
        match self.leaves {
            Leaves::StandIn => {
                self.w.compact(rel, version, records);
            }
            #[cfg(feature = "compact-jsonl")]
            Leaves::Lance => {
                use pchronicle::store::compact::ImportMode;
                let per = records / version as usize;
                for v in 0..version {
                    self.import(
                        rel,
                        per,
                        if v == 0 {
                            ImportMode::Create
                        } else {
                            ImportMode::Append
                        },
                    );
                }
            }
        }
    }

    #[cfg(feature = "compact-jsonl")]
    fn import(&self, rel: &str, records: usize, mode: pchronicle::store::compact::ImportMode) {
        let source = self.sources.path().join("records.jsonl");
        std::fs::write(&source, jsonl(records, 0)).unwrap();
        // Imported by a store of its own: the one under test counts only
        // what reading opens.
        pchronicle::store::compact::CompactJsonlStore::default()
            .import_path(&source, &self.w.abs(rel), mode)
            .unwrap();
    }

    /// Publishes a new version of a leaf holding `more` more records.
    fn publish(&self, rel: &str, version: u64, total: usize, more: usize) {
        match self.leaves {
            Leaves::StandIn => {
                let _ = more;
                self.w
                    .file(&format!("{rel}/_versions/{version}.manifest"), b"lance");
                self.w
                    .file(&format!("{rel}/data/rows.jsonl"), jsonl(total, 0));
                let stats = RecordStats {
                    record_count: total as u64,
                    ..RecordStats::default()
                };
                Manifest::leaf(
                    "compact-jsonl/v1",
                    &format!("lance:version:{version}"),
                    stats,
                )
                .write_at(&self.w.abs(rel))
                .unwrap();
            }
            #[cfg(feature = "compact-jsonl")]
            Leaves::Lance => {
                self.import(rel, more, pchronicle::store::compact::ImportMode::Append);
            }
        }
    }

    /// A catalog over the store under test.
    fn catalog(&self) -> Catalog {
        let store: Arc<dyn LeafStore> = match self.leaves {
            Leaves::StandIn => Arc::clone(&self.stand_in) as _,
            #[cfg(feature = "compact-jsonl")]
            Leaves::Lance => Arc::clone(&self.lance) as _,
        };
        let stores = Stores::empty().with(Arc::new(StorylineStore)).with(store);
        Catalog::with_stores(self.w.path(), CatalogOptions::default(), stores).unwrap()
    }

    /// How often the store opened a leaf's data.
    fn opened(&self) -> u64 {
        match self.leaves {
            Leaves::StandIn => self.stand_in.scans() as u64,
            #[cfg(feature = "compact-jsonl")]
            Leaves::Lance => self.lance.dataset_opens(),
        }
    }
}

#[test]
fn rfc1_list_is_one_level() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        let listing = rfc.catalog().list(Path::new(".")).unwrap();
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
            ],
            "{leaves:?}"
        );
        let Entry::Dataset { preview, .. } = &listing.entries[0] else {
            panic!("archive is a dataset")
        };
        assert_eq!(preview.counts.record_count, Some(N as u64));
        assert!(
            listing.entries.iter().all(|e| !e.name().contains('/')),
            "never flattened"
        );
        assert_eq!(rfc.opened(), 0, "{leaves:?}");
    });
}

#[test]
fn rfc2_open_is_a_virtual_dataset_without_opening_lance() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        let snapshot = rfc.catalog().open(Path::new(".")).unwrap();
        let files: Vec<_> = snapshot.sources.iter().map(|s| s.file.as_str()).collect();
        assert_eq!(files, ["archive", "notes.jsonl", "team/codex_jsonl"]);
        let codex = &snapshot.sources[2];
        assert_eq!(codex.kind, SourceKind::Dataset);
        assert_eq!(codex.format, "compact-jsonl/v1");
        assert_eq!(codex.counts.record_count, Some(N as u64));
        assert_eq!(codex.stats_origin, StatsOrigin::Manifest, "{leaves:?}");
        assert!(codex.trusted);
        assert_eq!(
            rfc.opened(),
            0,
            "a trusted manifest answers without opening the data ({leaves:?})"
        );
        assert_eq!(snapshot.stats().record_count, 2 * N as u64 + 5);
    });
}

#[test]
fn rfc3_list_of_leaf_hides_lance_interiors() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        let catalog = rfc.catalog();
        let listing = catalog.list(Path::new("archive")).unwrap();
        assert_eq!(listing.kind, NodeKind::Dataset);
        assert_eq!(listing.entries.len(), 1);
        let Entry::Dataset { name, preview } = &listing.entries[0] else {
            panic!("a dataset")
        };
        assert_eq!(name, ".");
        assert_eq!(preview.counts.record_count, Some(N as u64));
        assert_eq!(preview.fingerprint.as_deref(), Some("lance:version:1"));
        for interior in ["archive/_versions", "archive/data"] {
            let err = catalog.list(Path::new(interior)).unwrap_err();
            assert_eq!(
                err.code,
                pchronicle::ErrorCode::PathNotFound,
                "{leaves:?} {interior}"
            );
        }
    });
}

#[test]
fn rfc4_open_of_leaf_does_not_recurse_into_a_nested_manifest() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        rfc.w.storyline("archive/nested", 7).manifest(
            "archive/inner",
            "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n[stats]\nrecord_count = 1000\n",
        );
        let catalog = rfc.catalog();
        let leaf = catalog.open(Path::new("archive")).unwrap();
        assert_eq!(leaf.sources.len(), 1);
        assert_eq!(leaf.sources[0].file, ".");
        assert_eq!(leaf.stats().record_count, N as u64, "{leaves:?}");
        let all = catalog.open(Path::new(".")).unwrap();
        assert!(all.sources.iter().all(|s| !s.file.starts_with("archive/")));
    });
}

#[test]
fn rfc5_updating_a_leaf_manifest_never_touches_parent_branches() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        let w = &rfc.w;
        w.branch("team");
        let catalog = rfc.catalog();
        let before = w.snapshot_files("team/codex_jsonl");
        // Publish a new version of the leaf: only its own files change.
        rfc.publish("team/codex_jsonl", 4, N + 8, 8);
        let listing = catalog.list(Path::new("team")).unwrap();
        let Entry::Dataset { preview, .. } = &listing.entries[1] else {
            panic!("codex_jsonl")
        };
        assert_eq!(
            preview.counts.record_count,
            Some((N + 8) as u64),
            "{leaves:?}"
        );
        assert_eq!(preview.fingerprint.as_deref(), Some("lance:version:4"));
        assert_eq!(preview.stats_origin, StatsOrigin::Manifest);
        // A leaf left without a manifest is repaired in place, and still
        // only the leaf's own file is written.
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
            "no ancestor was rewritten ({leaves:?})"
        );
    });
}

#[test]
fn rfc6_cli_ls_json_matches_library_list() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        let w = &rfc.w;
        w.storyline("team/planner", 4).branch("team");
        // The CLI reads with the real stores; the library side does too.
        let catalog = w.catalog();
        // Repairs are a first-read effect; settle them so both sides see
        // the same on-disk state.
        catalog.open(Path::new(".")).unwrap();
        for rel in [".", "team", "archive", "team/planner", "notes.jsonl"] {
            let path = w.abs(rel);
            let cli = stdout(&pchronicle(&["ls", "--json", path.to_str().unwrap()]));
            assert_eq!(
                cli,
                catalog.list(Path::new(rel)).unwrap().to_json(),
                "ls --json {rel} ({leaves:?})"
            );
            let cli = stdout(&pchronicle(&["stats", "--json", path.to_str().unwrap()]));
            assert_eq!(
                cli,
                catalog.stats(Path::new(rel)).unwrap().to_json(),
                "stats --json {rel} ({leaves:?})"
            );
        }
    });
}

#[test]
fn rfc7_ls_sources_matches_open() {
    every_kind(|leaves| {
        let rfc = Rfc::new(leaves);
        let snapshot = rfc.w.catalog().open(Path::new(".")).unwrap();
        let cli = stdout(&pchronicle(&[
            "ls",
            "--sources",
            "--json",
            rfc.w.path().to_str().unwrap(),
        ]));
        assert_eq!(cli, snapshot.sources_jsonl(), "{leaves:?}");
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
    });
}
