//! `compact-jsonl/v1` leaves: one Lance dataset per leaf, one row per record.
//!
//! This is the only module that touches Lance. It holds one tokio runtime
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

pub mod import;
pub mod versions;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, BooleanArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::io::ObjectStoreRegistry;
use lance::session::Session;
use lance_file::version::LanceFileVersion;

use super::manifest::{self, Manifest, ManifestKind};
use super::{LeafScan, LeafStore, RecordCounter};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordStats;
use crate::warehouse::Dir;

pub use import::{ImportMode, ImportReport};

pub const FORMAT: &str = "compact-jsonl/v1";
/// The schema metadata key that marks a dataset as compact-jsonl.
pub const FORMAT_METADATA_KEY: &str = "pchronicle.format";
/// Where records over the offload threshold are kept, by SHA-256.
pub const OFFLOAD_DIR: &str = "_offload";
/// Records larger than this go to `_offload/` instead of the `record` column.
pub const DEFAULT_OFFLOAD_THRESHOLD: usize = 1 << 20;
/// The Lance data storage version every write uses, chosen explicitly so
/// that a Lance upgrade does not silently change what is written. 2.1 is
/// readable by every Lance release since it became stable.
pub const DATA_STORAGE_VERSION: LanceFileVersion = LanceFileVersion::V2_1;

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

/// Lance's fragment-metadata cache, shared by every dataset opened.
const METADATA_CACHE_BYTES: usize = 32 << 20;
/// Lance's index cache; compact-jsonl leaves have no indexes.
const INDEX_CACHE_BYTES: usize = 1 << 20;

/// The Arrow schema of a compact-jsonl dataset (SPEC 2.3).
pub fn schema() -> Schema {
    let fields = vec![
        Field::new("_file_", DataType::Utf8, false),
        Field::new("line", DataType::UInt64, false),
        Field::new("record_id", DataType::Utf8, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("failed", DataType::Boolean, false),
        Field::new("record", DataType::LargeUtf8, true),
        Field::new("offload_sha256", DataType::Utf8, true),
    ];
    let metadata = HashMap::from([(FORMAT_METADATA_KEY.to_string(), FORMAT.to_string())]);
    Schema::new_with_metadata(fields, metadata)
}

/// The Lance-backed store of compact-jsonl leaves.
pub struct CompactJsonlStore {
    runtime: OnceLock<std::result::Result<tokio::runtime::Runtime, String>>,
    session: OnceLock<Arc<Session>>,
    opens: AtomicU64,
    offload_threshold: usize,
}

impl Default for CompactJsonlStore {
    fn default() -> Self {
        CompactJsonlStore {
            runtime: OnceLock::new(),
            session: OnceLock::new(),
            opens: AtomicU64::new(0),
            offload_threshold: DEFAULT_OFFLOAD_THRESHOLD,
        }
    }
}

impl CompactJsonlStore {
    /// A store that offloads records larger than `bytes`.
    pub fn with_offload_threshold(mut self, bytes: usize) -> Self {
        self.offload_threshold = bytes;
        self
    }

    /// How many times this store has opened a Lance dataset.
    pub fn dataset_opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }

    /// Runs a future on the store's runtime. Lance spawns tasks, so this is
    /// a multi-thread runtime; its workers are not the caller's thread.
    fn block_on<F: std::future::Future>(&self, future: F) -> Result<F::Output> {
        let runtime = self.runtime.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("pchronicle-lance")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        });
        match runtime {
            Ok(runtime) => Ok(runtime.block_on(future)),
            Err(e) => Err(Error::new(
                ErrorCode::Lance,
                format!("cannot start the Lance runtime: {e}"),
            )),
        }
    }

    fn session(&self) -> Arc<Session> {
        let session = self.session.get_or_init(|| {
            Arc::new(Session::new(
                INDEX_CACHE_BYTES,
                METADATA_CACHE_BYTES,
                Arc::new(ObjectStoreRegistry::default()),
            ))
        });
        Arc::clone(session)
    }

    /// Opens the dataset at `dir` (its newest version).
    pub fn open(&self, dir: &Path) -> Result<Dataset> {
        let uri = uri_of(dir)?;
        self.opens.fetch_add(1, Ordering::Relaxed);
        let session = self.session();
        self.block_on(DatasetBuilder::from_uri(&uri).with_session(session).load())?
            .map_err(|e| lance_error(dir, e))
    }

    /// Opens the dataset at `dir`, refusing one without the compact-jsonl
    /// schema marker.
    pub fn open_compact(&self, dir: &Path) -> Result<Dataset> {
        let dataset = self.open(dir)?;
        if Self::is_compact(&dataset) {
            Ok(dataset)
        } else {
            Err(Error::at(
                ErrorCode::NotCompactJsonl,
                dir,
                format!("the dataset's schema metadata has no {FORMAT_METADATA_KEY} = {FORMAT}"),
            ))
        }
    }

    /// Whether the dataset at `dir` carries the compact-jsonl schema marker.
    fn is_compact(dataset: &Dataset) -> bool {
        dataset
            .schema()
            .metadata
            .get(FORMAT_METADATA_KEY)
            .map(String::as_str)
            == Some(FORMAT)
    }

    /// Counts what the newest version of the dataset at `dir` holds: rows
    /// from the metadata, failed rows and the time range from the `failed`
    /// and `timestamp` columns alone.
    pub fn dataset_stats(&self, dir: &Path) -> Result<LeafScan> {
        let dataset = self.open_compact(dir)?;
        let version = dataset.version().version;
        let stats = self
            .block_on(async {
                let rows = dataset.count_rows(None).await? as u64;
                let mut scanner = dataset.scan();
                scanner.project(&["failed", "timestamp"])?;
                let mut batches = scanner.try_into_stream().await?;
                let mut stats = RecordStats {
                    record_count: rows,
                    ..RecordStats::default()
                };
                while let Some(batch) = batches.try_next().await? {
                    if let Some(failed) = batch
                        .column_by_name("failed")
                        .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
                    {
                        stats.failed_count = stats
                            .failed_count
                            .saturating_add(failed.true_count() as u64);
                    }
                    if let Some(times) = batch
                        .column_by_name("timestamp")
                        .and_then(|c| c.as_any().downcast_ref::<TimestampMicrosecondArray>())
                    {
                        for t in times.iter().flatten() {
                            stats.min_timestamp = Some(stats.min_timestamp.map_or(t, |m| m.min(t)));
                            stats.max_timestamp = Some(stats.max_timestamp.map_or(t, |m| m.max(t)));
                        }
                    }
                }
                Ok::<_, lance::Error>(stats)
            })?
            .map_err(|e| lance_error(dir, e))?;
        Ok(LeafScan {
            fingerprint: fingerprint_of(version),
            stats,
        })
    }

    /// Writes the leaf's manifest for the dataset's newest version, keeping
    /// unknown keys of an existing leaf manifest.
    pub fn publish_manifest(&self, dir: &Path) -> Result<Manifest> {
        let scan = self.dataset_stats(dir)?;
        let opened = Dir::open_root(dir).map_err(|e| Error::io(dir, &e))?;
        // A manifest that cannot be read is reported, never overwritten.
        let existing = manifest::read(&opened)?.filter(|m| m.kind == ManifestKind::Leaf);
        self.write_manifest(&opened, existing, &scan)
    }

    /// Refuses a dataset whose Lance interiors are not plain: Lance opens
    /// them by path, so a symlinked directory, or a symlink, FIFO or device
    /// among their files, would make it read elsewhere or block. Each
    /// interior directory is opened without following a symlink (and as
    /// the viewer, when there is one) and its entries are typed from the
    /// listing; `_indices` holds one directory per index.
    fn check_interiors(dir: &Dir) -> Result<()> {
        for name in LANCE_INTERIORS {
            let path = dir.path().join(name);
            let refuse = |why: &str| Error::at(ErrorCode::NotRegularFile, &path, why.to_string());
            let interior = match dir.open_dir(name) {
                Ok(interior) => interior,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                    return Err(refuse(
                        "a Lance dataset's interior must be a real directory, not a symlink or file",
                    ));
                }
                Err(e) => return Err(Error::io(&path, &e)),
            };
            let odd = interior
                .first_unplain(name == "_indices")
                .map_err(|e| Error::io(&path, &e))?;
            if let Some(entry) = odd {
                return Err(refuse(&format!(
                    "{} in a Lance dataset's interior is not a regular file",
                    String::from_utf8_lossy(&entry)
                )));
            }
        }
        Ok(())
    }
}

fn fingerprint_of(version: u64) -> String {
    format!("lance:version:{version}")
}

fn uri_of(dir: &Path) -> Result<String> {
    let absolute = std::path::absolute(dir).map_err(|e| Error::io(dir, &e))?;
    absolute.to_str().map(str::to_string).ok_or_else(|| {
        Error::at(
            ErrorCode::NameNotUtf8,
            dir,
            "a Lance dataset path must be UTF-8",
        )
    })
}

fn lance_error(dir: &Path, e: lance::Error) -> Error {
    Error::at(ErrorCode::Lance, dir, e.to_string())
}

impl LeafStore for CompactJsonlStore {
    fn format(&self) -> &'static str {
        FORMAT
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
        Ok(Self::is_compact(&self.open(dir.path())?))
    }

    fn fingerprint(&self, dir: &Dir) -> Result<String> {
        versions::latest_version_in(dir).map(fingerprint_of)
    }

    fn scan(&self, dir: &Dir, _counter: &dyn RecordCounter) -> Result<LeafScan> {
        Self::check_interiors(dir)?;
        self.dataset_stats(dir.path())
    }
}
