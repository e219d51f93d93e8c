//! Physical leaf layouts behind one trait.
//!
//! A [`LeafStore`] knows one leaf format: how to recognise a directory of
//! that format from its physical markers, how to read the current physical
//! revision cheaply (the fingerprint that a manifest is checked against),
//! how to compute stats from the data, and how to publish a manifest. The
//! catalog only talks to this trait, so a new format (the Lance-backed
//! compact-jsonl store) plugs in by registering one more store in
//! [`Stores`], without touching classification or `list`/`open`.
//!
//! [`manifest`] reads and writes `chronicle.manifest`, the record a store
//! publishes at a leaf's root. It lives here, below the catalog, because
//! the stores write it and the catalog reads it to classify.

pub mod compact;
pub mod manifest;
pub mod storyline;

use std::io;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::error::Result;
use crate::records::read::{RecordSink, Resume, Wanted};
use crate::records::timestamp::Micros;
use crate::records::{RecordFormat, RecordStats};
use crate::warehouse::{Dir, Stat};
use manifest::{Manifest, ManifestKind};

pub use compact::CompactJsonlStore;
pub use storyline::StorylineStore;

/// What a physical scan of a leaf found, bound to the revision it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafScan {
    /// The physical revision the stats belong to.
    pub fingerprint: String,
    pub stats: RecordStats,
}

/// The revision a leaf had at a time (see [`LeafStore::revision_at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionAt {
    pub name: String,
    /// The store records when each revision was made (a Lance version's
    /// timestamp); `false` when that is judged from file times (a
    /// storyline generation's directory).
    pub exact: bool,
}

/// Counts the record file `name` of `dir`. The catalog passes its cached
/// counter, so stores that keep records in plain files (storyline) reuse
/// the refresh cache.
pub trait RecordCounter {
    fn count(&self, dir: &Dir, name: &str, format: RecordFormat) -> io::Result<RecordStats>;
}

/// Counting without a cache.
pub struct DirectCounter;

impl RecordCounter for DirectCounter {
    fn count(&self, dir: &Dir, name: &str, format: RecordFormat) -> io::Result<RecordStats> {
        let (file, _) = dir.open_file(name)?;
        crate::records::count_open(file, format)
    }
}

/// One physical leaf format.
pub trait LeafStore: Send + Sync {
    /// The manifest `format` this store handles, e.g. `storyline/v1`.
    fn format(&self) -> &'static str;

    /// Names of entries directly inside a leaf whose presence marks the
    /// format and whose stat identity changes with the physical revision.
    /// The refresh cache re-stats them to validate a cached preview.
    fn markers(&self) -> &'static [&'static str];

    /// Entries directly inside a leaf that classifying it reads (its
    /// markers and what checking its fingerprint reads), asked for ahead
    /// of time on object storage, where each is a request.
    fn classify_reads(&self) -> &'static [&'static str] {
        self.markers()
    }

    /// Whether `dir` is physically a leaf of this format (no manifest is
    /// consulted). Must not recurse below `dir`.
    fn detect(&self, dir: &Dir) -> Result<bool>;

    /// The fingerprint of the current physical revision. Must be cheap: no
    /// scan of the records.
    fn fingerprint(&self, dir: &Dir) -> Result<String>;

    /// Stats computed from the physical data.
    fn scan(&self, dir: &Dir, counter: &dyn RecordCounter) -> Result<LeafScan>;

    /// Hands the records of the leaf's revision `fingerprint` (the newest
    /// when `None` or when that revision is gone) to `sink`, from `from`,
    /// in stored order. A store may leave out before reading what `wanted`
    /// does not ask for. `Break` when the sink stopped.
    fn read_records(
        &self,
        dir: &Dir,
        fingerprint: Option<&str>,
        from: Resume,
        wanted: &Wanted,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>>;

    /// Whether this store can read its leaves' older revisions (and so
    /// shows them as `.versions/`).
    fn keeps_history(&self) -> bool {
        false
    }

    /// The names of the revisions the leaf keeps, oldest first (what
    /// [`Self::at_version`] takes: a Lance version number, a storyline
    /// generation's name). `Ok(None)`: this store keeps no history.
    fn history(&self, _dir: &Dir) -> Result<Option<Vec<String>>> {
        Ok(None)
    }

    /// The stat of what stands for the revision `name` (a version's
    /// manifest, a generation's directory), whose times say when it was
    /// made; `Ok(None)` when the leaf keeps no such revision.
    fn revision_meta(&self, _dir: &Dir, _name: &str) -> Result<Option<Stat>> {
        Ok(None)
    }

    /// The fingerprint of the revision `name` (what a scan of it says),
    /// `None` when `name` cannot name one.
    fn revision_fingerprint(&self, _name: &str) -> Option<String> {
        None
    }

    /// Whether this store names revisions (tags), shown as `.tags/`.
    fn names_revisions(&self) -> bool {
        false
    }

    /// The leaf's names for revisions: `(name, revision)`, by name.
    fn revision_names(&self, _dir: &Dir) -> Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }

    /// The leaf as it was at `version` (a revision's name, or a name the
    /// store resolves to one, such as a tag): that revision's fingerprint
    /// and stats. `Ok(None)`: this store keeps no versions.
    fn at_version(
        &self,
        _dir: &Dir,
        _version: &str,
        _counter: &dyn RecordCounter,
    ) -> Result<Option<LeafScan>> {
        Ok(None)
    }

    /// The revision that was the leaf's newest at `at` (microseconds since
    /// the epoch): its name, and whether the store knows when each
    /// revision was made ([`RevisionAt::exact`]). `Ok(None)`: no revision
    /// was made by then.
    fn revision_at(&self, dir: &Dir, _at: Micros) -> Result<Option<RevisionAt>> {
        Err(crate::error::Error::at(
            crate::error::ErrorCode::VersionNotFound,
            dir.path(),
            format!("{} leaves keep no versions to read", self.format()),
        ))
    }

    /// How a read of one of the leaf's past revisions is marked in
    /// `.sources` (`cut`): `version`, `generation`.
    fn revision_cut(&self) -> &'static str {
        "version"
    }

    /// Writes the leaf's manifest for `scan`, keeping every unknown key of
    /// `existing` when it is a leaf manifest. Only this leaf's manifest is
    /// written, never an ancestor's.
    fn write_manifest(
        &self,
        dir: &Dir,
        existing: Option<Manifest>,
        scan: &LeafScan,
    ) -> Result<Manifest> {
        let manifest = match existing {
            Some(mut m) if m.kind == ManifestKind::Leaf => {
                m.set_leaf_state(&scan.fingerprint, scan.stats);
                m
            }
            _ => Manifest::leaf(self.format(), &scan.fingerprint, scan.stats),
        };
        manifest.write(dir)?;
        Ok(manifest)
    }

    /// Makes the leaf's manifest current: when it is missing or its
    /// fingerprint does not match the physical revision, the data is
    /// scanned and the manifest rewritten in place. A manifest that cannot
    /// be read is an error, never overwritten.
    fn ensure_manifest(&self, dir: &Dir, counter: &dyn RecordCounter) -> Result<Manifest> {
        let existing = manifest::read(dir)?;
        let current = self.fingerprint(dir)?;
        if let Some(m) = &existing {
            if m.kind == ManifestKind::Leaf
                && m.fingerprint.as_deref() == Some(&current)
                && m.stats.is_some()
            {
                return Ok(m.clone());
            }
        }
        let scan = self.scan(dir, counter)?;
        self.write_manifest(dir, existing, &scan)
    }
}

/// The registered leaf stores, in classification order.
#[derive(Clone)]
pub struct Stores {
    stores: Vec<Arc<dyn LeafStore>>,
}

impl Default for Stores {
    /// The stores this build can open, in classification order: storyline
    /// (a `CURRENT` file) before compact-jsonl (a Lance dataset).
    fn default() -> Self {
        Stores {
            stores: vec![
                Arc::new(StorylineStore),
                Arc::new(CompactJsonlStore::default()),
            ],
        }
    }
}

impl Stores {
    /// No stores at all: every leaf is recognised only by its manifest and
    /// reported unverified.
    pub fn empty() -> Self {
        Stores { stores: Vec::new() }
    }

    /// Registers `store` after the existing ones.
    pub fn with(mut self, store: Arc<dyn LeafStore>) -> Self {
        self.stores.push(store);
        self
    }

    /// The store for a manifest `format`, if this build can open it.
    pub fn by_format(&self, format: &str) -> Option<&Arc<dyn LeafStore>> {
        self.stores.iter().find(|s| s.format() == format)
    }

    /// The stores in classification order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn LeafStore>> {
        self.stores.iter()
    }
}
