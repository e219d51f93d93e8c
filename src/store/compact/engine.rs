//! The Lance side of the compact-jsonl store (cargo feature
//! `compact-jsonl`): the runtime and session every dataset is opened with,
//! the schema, opening, counting and publishing a leaf's manifest.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, BooleanArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::io::ObjectStoreRegistry;
use lance::session::Session;
use lance_file::version::LanceFileVersion;

use super::{CompactJsonlStore, FORMAT, FORMAT_METADATA_KEY, fingerprint_of};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordStats;
use crate::store::manifest::{self, Manifest, ManifestKind};
use crate::store::{LeafScan, LeafStore};
use crate::warehouse::Dir;

/// The Lance data storage version every write uses, chosen explicitly so
/// that a Lance upgrade does not silently change what is written. 2.1 is
/// readable by every Lance release since it became stable.
pub const DATA_STORAGE_VERSION: LanceFileVersion = LanceFileVersion::V2_1;

/// Lance's fragment-metadata cache, shared by every dataset opened.
const METADATA_CACHE_BYTES: usize = 32 << 20;
/// Lance's index cache; compact-jsonl leaves have no indexes.
const INDEX_CACHE_BYTES: usize = 1 << 20;

/// Lance's field metadata key naming a column's compression.
pub const COMPRESSION_KEY: &str = "lance-encoding:compression";

/// How the `record` column is compressed: FSST, Lance's own default for
/// text, asked for by name so that a Lance upgrade cannot change it
/// unseen. Lance honours it in pages of short records and in pages
/// holding records of 256 bytes or more, up to 32 KiB; a page holding a
/// longer one is compressed a record at a time with zstd whatever is
/// asked. LZ4 (asked for from 2026-12-02 to 2026-12-06) is honoured only
/// in pages of records all under 256 bytes; a page holding a longer one
/// became a zstd frame per record, slow to read back. On agent
/// transcripts whose tool outputs stay under 32 KiB (256 MiB), FSST
/// imports in 1.9 s instead of 3.1 s and reads back 1.5 to 2 times as
/// fast, for 167 MB on disk instead of 130 (docs/performance.md).
pub const RECORD_COMPRESSION: &str = "fsst";

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
        Field::new("record", DataType::LargeUtf8, true).with_metadata(HashMap::from([(
            COMPRESSION_KEY.to_string(),
            RECORD_COMPRESSION.to_string(),
        )])),
        Field::new("offload_sha256", DataType::Utf8, true),
    ];
    let metadata = HashMap::from([(FORMAT_METADATA_KEY.to_string(), FORMAT.to_string())]);
    Schema::new_with_metadata(fields, metadata)
}

/// Worker threads of the store's runtime, where Lance decodes.
pub(super) const RUNTIME_WORKERS: usize = 2;

/// The runtime and session a store opens every dataset with, both
/// created on first use.
#[derive(Default)]
pub(super) struct Engine {
    runtime: OnceLock<std::result::Result<tokio::runtime::Runtime, String>>,
    session: OnceLock<Arc<Session>>,
}

impl CompactJsonlStore {
    /// Runs a future on the store's runtime. Lance spawns tasks, so this is
    /// a multi-thread runtime; its workers are not the caller's thread.
    pub(super) fn block_on<F: std::future::Future>(&self, future: F) -> Result<F::Output> {
        let runtime = self.engine.runtime.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(RUNTIME_WORKERS)
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

    pub(super) fn session(&self) -> Arc<Session> {
        let session = self.engine.session.get_or_init(new_session);
        Arc::clone(session)
    }

    /// Opens the dataset at `dir` (its newest version).
    pub fn open(&self, dir: &Path) -> Result<Dataset> {
        self.open_at(dir, None)
    }

    /// Opens the dataset at `dir` as of `version` (the newest when `None`).
    pub fn open_at(&self, dir: &Path, version: Option<u64>) -> Result<Dataset> {
        let uri = uri_of(dir)?;
        self.opens.fetch_add(1, Ordering::Relaxed);
        let session = self.session();
        self.block_on(async {
            let builder = DatasetBuilder::from_uri(&uri).with_session(session);
            let dataset = match version {
                Some(version) => builder.with_version(version).load().await?,
                None => builder.load().await?,
            };
            check_own_files(&dataset)?;
            Ok::<_, lance::Error>(dataset)
        })?
        .map_err(|e| lance_error(dir, e))
    }

    /// Opens the dataset at `dir`, refusing one without the compact-jsonl
    /// schema marker.
    pub fn open_compact(&self, dir: &Path) -> Result<Dataset> {
        Self::compact_only(dir, self.open(dir)?)
    }

    /// `dataset` if it carries the compact-jsonl schema marker.
    fn compact_only(dir: &Path, dataset: Dataset) -> Result<Dataset> {
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

    /// Whether the directory at `dir` (which has `_versions/`) holds a
    /// dataset carrying the compact-jsonl schema marker.
    pub(super) fn holds_compact_dataset(&self, dir: &Path) -> Result<bool> {
        Ok(Self::is_compact(&self.open(dir)?))
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
        self.dataset_stats_at(dir, None)
    }

    /// As [`dataset_stats`](Self::dataset_stats), of `version` (the newest
    /// when `None`).
    pub fn dataset_stats_at(&self, dir: &Path, version: Option<u64>) -> Result<LeafScan> {
        let dataset = Self::compact_only(dir, self.open_at(dir, version)?)?;
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
}

/// A Lance session whose store registry also opens `s3://` leaves,
/// through the remote backend's own store: the same credentials, retries
/// and request counts.
pub(super) fn new_session() -> Arc<Session> {
    let registry = ObjectStoreRegistry::default();
    #[cfg(feature = "remote")]
    registry.insert("s3", Arc::new(super::remote::BucketProvider));
    Arc::new(Session::new(
        INDEX_CACHE_BYTES,
        METADATA_CACHE_BYTES,
        Arc::new(registry),
    ))
}

/// Refuses a dataset whose manifest names base paths: Lance would read
/// its fragments from there (another bucket, a local path), while a
/// warehouse leaf's files lie below the leaf.
pub(super) fn check_own_files(dataset: &Dataset) -> lance::Result<()> {
    if dataset.manifest().base_paths.is_empty() {
        Ok(())
    } else {
        Err(lance::Error::invalid_input(
            "the dataset's manifest names base paths outside the dataset; only datasets \
             whose files lie below them are read",
        ))
    }
}

pub(super) fn uri_of(dir: &Path) -> Result<String> {
    #[cfg(feature = "remote")]
    if crate::remote::is_remote(dir) {
        // The URL of a remote leaf, as its directory shows it. Lance parses
        // it as a URL: a name holding `%`, `#` or `?` would name another
        // key there (`%2e%2e` is `..`), and a URL loses the spaces it ends
        // with (`leaf ` would be `leaf`), so such a leaf is not opened.
        let url = dir.to_string_lossy().into_owned();
        if url.contains(['%', '#', '?']) || url.ends_with(|c: char| c <= ' ') {
            return Err(Error::at(
                ErrorCode::RemoteLocationInvalid,
                dir,
                "a remote compact-jsonl leaf's path may not hold `%`, `#` or `?`, nor end in a \
                 space (Lance reads it as a URL)",
            ));
        }
        return Ok(url);
    }
    let absolute = std::path::absolute(dir).map_err(|e| Error::io(dir, &e))?;
    absolute.to_str().map(str::to_string).ok_or_else(|| {
        Error::at(
            ErrorCode::NameNotUtf8,
            dir,
            "a Lance dataset path must be UTF-8",
        )
    })
}

/// A failure of Lance on the dataset `dir`. When it is the object store
/// under a remote dataset that failed (not a missing object, a changed
/// version or an object it refuses to read), it is the store's failure,
/// counted as one for the answer being built (see
/// [`crate::error::FailureWatch`]): the dataset is not at fault, and what
/// was derived meanwhile must not be kept.
pub(super) fn lance_error(dir: &Path, e: lance::Error) -> Error {
    #[cfg(feature = "remote")]
    if crate::warehouse::is_remote_path(dir) && store_failed(&e) {
        let failure = crate::error::RemoteFailure::unavailable(format!("{}: {e}", dir.display()));
        return Error::io(dir, &failure);
    }
    Error::at(
        ErrorCode::Lance,
        dir,
        crate::error::without_source_locations(&e.to_string()),
    )
}

/// Whether an object store's failure is behind `error`: neither a missing
/// object nor a version that changed, which say something of the dataset.
#[cfg(feature = "remote")]
fn store_failed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(store) = e.downcast_ref::<object_store::Error>() {
            // An object the store refuses to read (403, 400) is the
            // dataset's: it cannot be read, like a local file without
            // permission.
            if crate::remote::refusal(store).is_some() {
                return false;
            }
            return !matches!(
                store,
                object_store::Error::NotFound { .. }
                    | object_store::Error::Precondition { .. }
                    | object_store::Error::NotModified { .. }
                    | object_store::Error::AlreadyExists { .. }
            );
        }
        cause = e.source();
    }
    false
}

#[cfg(all(test, feature = "remote"))]
mod tests {
    use super::*;

    #[test]
    fn a_remote_leaf_path_a_url_would_read_as_another_is_refused() {
        assert_eq!(
            uri_of(Path::new("s3://b/wh/leaf")).unwrap(),
            "s3://b/wh/leaf"
        );
        for other in [
            "s3://b/wh/leaf ",
            "s3://b/wh/a%2e",
            "s3://b/wh/a#b",
            "s3://b/wh/a?b",
        ] {
            assert_eq!(
                uri_of(Path::new(other)).unwrap_err().code,
                ErrorCode::RemoteLocationInvalid,
                "{other:?}"
            );
        }
    }
}
