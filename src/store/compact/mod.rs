//! `compact-jsonl/v1` leaves: one Lance dataset per leaf, one row per record.
//!
//! This is the only module that touches Lance, and only with the cargo
//! feature `compact-jsonl` (on by default; [`engine`] and [`import`]).
//! Without it the crate builds without Lance: a compact-jsonl leaf is then
//! classified by its manifest alone and fingerprinted by `_versions/`, its
//! counts are trusted while the manifest's fingerprint matches and
//! unverified otherwise, and imports are refused with
//! `PCHRONICLE_LANCE_NOT_BUILT`.
//!
//! With Lance, the store holds one tokio runtime
//! and one Lance `Session` (with small, explicit cache limits) for every
//! dataset it opens, both created on first use, so a catalog that answers
//! from trusted manifests never starts either. The sync [`LeafStore`]
//! methods `block_on` that runtime; they must not be called from inside an
//! async task.
//!
//! What the catalog asks of it, and what each costs:
//! - `fingerprint`: the newest name in `_versions/` (a directory listing;
//!   no dataset is opened), so a trusted manifest is checked for free;
//! - `detect` (only for a directory without a manifest): opens the dataset
//!   and reads its schema metadata;
//! - `scan`: opens the dataset, takes the row count from its metadata and
//!   reads only the `failed` and `timestamp` columns.
//!
//! Leaves are published only by [`CompactJsonlStore::import_path`] and
//! [`CompactJsonlStore::publish_manifest`]; an import whose manifest cannot
//! be written fails.

#[cfg(feature = "compact-jsonl")]
pub mod engine;
#[cfg(feature = "compact-jsonl")]
pub mod import;
#[cfg(feature = "compact-jsonl")]
mod read;
#[cfg(all(feature = "compact-jsonl", feature = "remote"))]
mod remote;
#[cfg(feature = "compact-jsonl")]
pub mod sync;
#[cfg(feature = "compact-jsonl")]
pub mod tags;
pub mod versions;
#[cfg(not(feature = "compact-jsonl"))]
mod without_lance;

use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::{LeafScan, LeafStore, RecordCounter};
use crate::error::{Error, ErrorCode, Result};
use crate::records::read::{RecordSink, Resume, Wanted};
use crate::warehouse::Dir;

#[cfg(feature = "compact-jsonl")]
pub use engine::{COMPRESSION_KEY, DATA_STORAGE_VERSION, RECORD_COMPRESSION, schema};

pub const FORMAT: &str = "compact-jsonl/v1";
/// The schema metadata key that marks a dataset as compact-jsonl.
pub const FORMAT_METADATA_KEY: &str = "pchronicle.format";
/// Where records over the offload threshold are kept, by SHA-256.
pub const OFFLOAD_DIR: &str = "_offload";
/// Records larger than this go to `_offload/` instead of the `record` column.
pub const DEFAULT_OFFLOAD_THRESHOLD: usize = 1 << 20;

/// The entries of a Lance dataset Lance opens by path; each must be a real
/// directory holding only regular files (see
/// [`CompactJsonlStore::check_interiors`]).
const LANCE_INTERIORS: [&str; 6] = [
    versions::VERSIONS_DIR,
    "data",
    OFFLOAD_DIR,
    "_transactions",
    "_deletions",
    "_indices",
];

/// How an import treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImportMode {
    /// The destination must not hold a dataset yet.
    Create,
    /// Add rows to an existing compact-jsonl dataset.
    Append,
    /// Replace the dataset's rows with a new version (or create it).
    Overwrite,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub mode: ImportMode,
    /// The Lance version the import published.
    pub version: u64,
    pub fingerprint: String,
    /// Rows in the dataset after the import (all versions' rows that remain).
    pub record_count: u64,
    pub failed_count: u64,
    /// Rows this import added.
    pub imported_records: u64,
    pub imported_failed: u64,
    /// Records this import wrote to `_offload/`.
    pub offloaded_records: u64,
    pub source_files: u64,
    pub source_bytes: u64,
}

/// The store of compact-jsonl leaves.
pub struct CompactJsonlStore {
    #[cfg(feature = "compact-jsonl")]
    engine: engine::Engine,
    opens: AtomicU64,
    offload_threshold: usize,
    /// Called by `sync` after it read the rows and before it commits them.
    #[cfg(feature = "compact-jsonl")]
    sync_hook: Option<SyncHook>,
}

/// See [`CompactJsonlStore::with_sync_hook`].
#[cfg(feature = "compact-jsonl")]
type SyncHook = std::sync::Arc<dyn Fn() + Send + Sync>;

impl Default for CompactJsonlStore {
    fn default() -> Self {
        CompactJsonlStore {
            #[cfg(feature = "compact-jsonl")]
            engine: engine::Engine::default(),
            opens: AtomicU64::new(0),
            offload_threshold: DEFAULT_OFFLOAD_THRESHOLD,
            #[cfg(feature = "compact-jsonl")]
            sync_hook: None,
        }
    }
}

impl CompactJsonlStore {
    /// A store that offloads records larger than `bytes`.
    pub fn with_offload_threshold(mut self, bytes: usize) -> Self {
        self.offload_threshold = bytes;
        self
    }

    /// A store whose `sync` calls `hook` between reading the source files
    /// and committing what it read: the seam where a writer may change a
    /// file under a running sync, for tests that do so on purpose.
    #[doc(hidden)]
    #[cfg(feature = "compact-jsonl")]
    pub fn with_sync_hook(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.sync_hook = Some(std::sync::Arc::new(hook));
        self
    }

    /// How many times this store has opened a Lance dataset.
    pub fn dataset_opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }

    /// Refuses a dataset whose Lance interiors are not plain: Lance opens
    /// them by path, so a symlinked directory, or a symlink, FIFO or device
    /// among their files, would make it read elsewhere or block. Each
    /// interior directory is opened without following a symlink (and as
    /// the viewer, when there is one) and its entries are typed from the
    /// listing; `_indices` holds one directory per index.
    fn check_interiors(dir: &Dir) -> Result<()> {
        for name in LANCE_INTERIORS {
            check_interior(dir, name, name == "_indices")?;
        }
        Ok(())
    }

    /// Refuses tags Lance would read from anything but plain files:
    /// `_refs/` (its subdirectories allowed) and `_refs/tags/` checked as
    /// the interiors are.
    #[cfg(feature = "compact-jsonl")]
    fn check_refs(dir: &Dir) -> Result<()> {
        if !check_interior(dir, REFS_DIR, true)? {
            return Ok(());
        }
        let refs = dir
            .open_dir(REFS_DIR)
            .map_err(|e| Error::io(dir.path().join(REFS_DIR), &e))?;
        check_interior(&refs, "tags", false).map(drop)
    }
}

/// Where Lance keeps a dataset's tags (`_refs/tags/NAME.json`).
#[cfg(feature = "compact-jsonl")]
const REFS_DIR: &str = "_refs";

/// Refuses the interior `name` of `dir` unless it is a real directory
/// holding only regular files (and directories, with `dirs`). `false`
/// when there is no such interior.
fn check_interior(dir: &Dir, name: &str, dirs: bool) -> Result<bool> {
    let path = dir.path().join(name);
    let refuse = |why: &str| Error::at(ErrorCode::NotRegularFile, &path, why.to_string());
    let interior = match dir.open_dir(name) {
        Ok(interior) => interior,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
            return Err(refuse(
                "a Lance dataset's interior must be a real directory, not a symlink or file",
            ));
        }
        Err(e) => return Err(Error::io(&path, &e)),
    };
    let odd = interior
        .first_unplain(dirs)
        .map_err(|e| Error::io(&path, &e))?;
    if let Some(entry) = odd {
        return Err(refuse(&format!(
            "{} in a Lance dataset's interior is not a regular file",
            String::from_utf8_lossy(&entry)
        )));
    }
    Ok(true)
}

impl CompactJsonlStore {
    /// Refuses (`EACCES`) to read a leaf's rows for a viewer who could not
    /// read every file Lance will open: Lance reads as the daemon, so the
    /// viewer's permissions are checked here, on each file of the Lance
    /// interiors (and one level into `_indices`).
    fn check_viewer_reads(dir: &Dir) -> Result<()> {
        for name in LANCE_INTERIORS {
            let path = dir.path().join(name);
            let interior = match dir.open_dir(name) {
                Ok(interior) => interior,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&path, &e)),
            };
            let mut dirs = vec![interior];
            while let Some(current) = dirs.pop() {
                let entries = current
                    .entries()
                    .map_err(|e| Error::io(current.path(), &e))?;
                for entry in entries {
                    let entry_name = std::ffi::OsStr::from_bytes(&entry.name);
                    let checked = current.stat_at(entry_name).and_then(|stat| {
                        if stat.is_dir() && name == "_indices" && current.path() == path {
                            dirs.push(current.open_dir(entry_name)?);
                            Ok(())
                        } else {
                            current.check_readable(&stat)
                        }
                    });
                    checked.map_err(|e| Error::io(current.path().join(entry_name), &e))?;
                }
            }
        }
        Ok(())
    }
}

fn fingerprint_of(version: u64) -> String {
    format!("lance:version:{version}")
}

/// The version a fingerprint names, if it is one of ours.
fn version_of(fingerprint: &str) -> Option<u64> {
    fingerprint.strip_prefix("lance:version:")?.parse().ok()
}

impl LeafStore for CompactJsonlStore {
    fn format(&self) -> &'static str {
        FORMAT
    }

    fn keeps_history(&self) -> bool {
        cfg!(feature = "compact-jsonl")
    }

    /// The versions named in `_versions/` (no dataset is opened).
    #[cfg(feature = "compact-jsonl")]
    fn history(&self, dir: &Dir) -> Result<Option<Vec<String>>> {
        let kept = versions::committed_in(dir)?;
        Ok(Some(kept.iter().map(u64::to_string).collect()))
    }

    /// The version's manifest; a name that is not a version number as
    /// Lance writes it (`3`, never `03` or `+3`) names none.
    #[cfg(feature = "compact-jsonl")]
    fn revision_meta(&self, dir: &Dir, name: &str) -> Result<Option<crate::warehouse::Stat>> {
        match name.parse::<u64>() {
            Ok(version) if version.to_string() == name => versions::manifest_meta(dir, version),
            _ => Ok(None),
        }
    }

    fn revision_fingerprint(&self, name: &str) -> Option<String> {
        let version: u64 = name.parse().ok()?;
        (version.to_string() == name).then(|| fingerprint_of(version))
    }

    fn names_revisions(&self) -> bool {
        cfg!(feature = "compact-jsonl")
    }

    #[cfg(feature = "compact-jsonl")]
    fn revision_names(&self, dir: &Dir) -> Result<Vec<(String, String)>> {
        Self::check_interiors(dir)?;
        Self::check_refs(dir)?;
        if dir.is_viewed() {
            Self::check_viewer_reads(dir)?;
        }
        let tags = self.tags(dir.path())?;
        Ok(tags
            .into_iter()
            .map(|tag| (tag.name, tag.version.to_string()))
            .collect())
    }

    #[cfg(feature = "compact-jsonl")]
    fn at_version(
        &self,
        dir: &Dir,
        version: &str,
        _counter: &dyn RecordCounter,
    ) -> Result<Option<LeafScan>> {
        Self::check_interiors(dir)?;
        if version.parse::<u64>().is_err() {
            Self::check_refs(dir)?;
        }
        if dir.is_viewed() {
            Self::check_viewer_reads(dir)?;
        }
        let version = self.resolve_version(dir.path(), version)?;
        self.dataset_stats_at(dir.path(), Some(version)).map(Some)
    }

    #[cfg(feature = "compact-jsonl")]
    fn revision_at(
        &self,
        dir: &Dir,
        at: crate::records::timestamp::Micros,
    ) -> Result<Option<super::RevisionAt>> {
        Self::check_interiors(dir)?;
        if dir.is_viewed() {
            Self::check_viewer_reads(dir)?;
        }
        Ok(self
            .version_at(dir.path(), at)?
            .map(|version| super::RevisionAt {
                name: version.to_string(),
                exact: true,
            }))
    }

    fn markers(&self) -> &'static [&'static str] {
        &[versions::VERSIONS_DIR]
    }

    fn detect(&self, dir: &Dir) -> Result<bool> {
        let has_versions = dir
            .stat_at(versions::VERSIONS_DIR)
            .is_ok_and(|m| m.is_dir());
        if !has_versions || versions::latest_version_in(dir).is_err() {
            return Ok(false);
        }
        Self::check_interiors(dir)?;
        self.holds_compact_dataset(dir.path())
    }

    fn fingerprint(&self, dir: &Dir) -> Result<String> {
        versions::latest_version_in(dir).map(fingerprint_of)
    }

    fn scan(&self, dir: &Dir, _counter: &dyn RecordCounter) -> Result<LeafScan> {
        Self::check_interiors(dir)?;
        self.dataset_stats(dir.path())
    }

    /// Rows of the version the fingerprint names (Lance keeps old
    /// versions until they are cleaned up), in stored order, projected as
    /// `wanted` says and, with a time window, filtered by Lance;
    /// `from.offset` counts the rows of that scan (see `read_rows`).
    fn read_records(
        &self,
        dir: &Dir,
        fingerprint: Option<&str>,
        from: Resume,
        wanted: &Wanted,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        Self::check_interiors(dir)?;
        if dir.is_viewed() {
            Self::check_viewer_reads(dir)?;
        }
        self.read_rows(dir, fingerprint.and_then(version_of), from, wanted, sink)
    }
}
