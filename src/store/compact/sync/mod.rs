//! `sync`: keeps a compact-jsonl leaf in step with live record files.
//!
//! A sync compares the record files under a source (the scan `import`
//! makes) with what the leaf took of each at the last sync, and publishes
//! what changed as one new Lance version:
//! - a new file is taken whole, up to its last complete record;
//! - a file that only grew (the bytes taken before still hash the same) is
//!   taken from where the last sync stopped, its `line` numbers going on;
//! - a file changed in any other way has its rows replaced, and a file
//!   gone has them deleted (by `_file_`).
//!
//! A torn last record (no newline after it yet) is left for a later sync:
//! the file may still be being written. What was taken of each file (bytes,
//! their SHA-256, the last `line`, the file's identity as seen) is written
//! in the same commit as the rows, as a property of the version's
//! transaction, so the state read back is always the one of the version it
//! describes. A file whose identity (size, times, inode) did not change
//! since is not read at all; a file is read only once its last change is
//! older than a timestamp tick (see `plan`), so no identity recorded can
//! hide a second write in the same tick. The digest of a taken file is fed the very bytes its rows are made from,
//! so the state never describes bytes the rows were not made of. A file
//! that cannot be read is a warning, never a failed sync: its rows stay.
//! A leaf whose newest version was not written by
//! a sync (an `import`, another writer) is rebuilt: its rows are replaced
//! by the whole source. A sync killed at any point leaves the leaf at the
//! version before (Lance commits atomically; data files written before the
//! commit are left unreferenced). Two syncs of one leaf at once: the second
//! fails with `PCHRONICLE_SYNC_BUSY`.

mod plan;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatchIterator;
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{CommitBuilder, DeleteBuilder, InsertBuilder, WriteMode, WriteParams};
use serde::{Deserialize, Serialize};

use super::engine::uri_of;
use super::import::{Scan, scan_sources};
use super::{CompactJsonlStore, DATA_STORAGE_VERSION};
use crate::error::{Error, ErrorCode, Result};
use plan::{Plan, plan};

/// The transaction property holding what a sync took.
pub const SYNC_STATE_KEY: &str = "pchronicle.sync";

/// The state's layout version.
const SYNC_STATE_SCHEMA: u32 = 1;

/// What the leaf took of every source file, as of one version.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SyncState {
    schema: u32,
    /// When the sync that wrote this state started reading files (ns since
    /// the epoch); 0 in states written before it was kept.
    #[serde(default)]
    taken_at_ns: i64,
    files: BTreeMap<String, Taken>,
}

/// What was taken of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Taken {
    /// Bytes taken: every record before this offset is in the leaf.
    taken: u64,
    /// SHA-256 of those bytes.
    sha256: String,
    /// The `line` of the last record taken.
    lines: u64,
    /// The file as it was seen: it is not read again while all hold.
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    dev: u64,
}

/// How one file changed since the last sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    New,
    Grown,
    Replaced,
    Gone,
}

/// One file's change, with the bytes taken (`from`..`to`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    pub file: String,
    pub change: Change,
    pub from: u64,
    pub to: u64,
}

/// A file a sync could not treat as usual, said without failing the sync.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncWarning {
    /// Relative to the source, as its `_file_` (or a directory's path).
    pub file: String,
    pub code: ErrorCode,
    pub message: String,
}

/// What a sync did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    pub dry_run: bool,
    /// Whether a new version was (or would be) published.
    pub changed: bool,
    /// The leaf's version afterwards (`None`: there is no leaf yet).
    pub version: Option<u64>,
    /// The newest version was not written by a sync: every row is
    /// replaced by the whole source.
    pub rebuilt: bool,
    pub changes: Vec<FileChange>,
    pub unchanged_files: u64,
    /// Files whose last record is not complete yet (left for later).
    pub torn_files: u64,
    pub imported_records: u64,
    pub imported_failed: u64,
    /// Files left as they were (unreadable) or dropped with a reason the
    /// user should hear (became a symlink).
    pub warnings: Vec<SyncWarning>,
}

impl CompactJsonlStore {
    /// Brings the leaf at `dest` in step with the record files under
    /// `source` in one new version (none when nothing changed); `dry_run`
    /// only says what would change.
    pub fn sync_path(&self, source: &Path, dest: &Path, dry_run: bool) -> Result<SyncReport> {
        let scan = scan_sources(source, dest)?;
        let created = !dest.exists();
        fs::create_dir_all(dest).map_err(|e| Error::io(dest, &e))?;
        let _lock = match lock(dest) {
            Ok(lock) => lock,
            Err(e) => {
                if created {
                    let _ = fs::remove_dir(dest);
                }
                return Err(e);
            }
        };
        let result = self.sync_locked(scan, dest, dry_run);
        // A sync that made nothing leaves nothing behind.
        if created && super::versions::latest_version(dest).is_err() {
            let _ = fs::remove_dir_all(dest);
        }
        if let Ok(report) = &result {
            for w in &report.warnings {
                log::warn!(
                    "sync of {}: {}: {}: {}",
                    dest.display(),
                    w.code,
                    w.file,
                    w.message
                );
            }
        }
        result
    }

    fn sync_locked(&self, scan: Scan, dest: &Path, dry_run: bool) -> Result<SyncReport> {
        let dataset = match super::versions::latest_version(dest) {
            Ok(_) => Some(Arc::new(self.open_compact(dest)?)),
            Err(_) => None,
        };
        let (state, rebuilt) = match &dataset {
            Some(dataset) => match self.read_state(dataset, dest)? {
                Some(state) => (state, false),
                None => (SyncState::default(), true),
            },
            None => (SyncState::default(), false),
        };
        let plan = plan(scan, &state, !dry_run)?;
        let changed = rebuilt || !plan.changes.is_empty();
        let mut report = SyncReport {
            dry_run,
            changed,
            version: dataset.as_ref().map(|d| d.version().version),
            rebuilt,
            changes: plan.changes.clone(),
            unchanged_files: plan.unchanged,
            torn_files: plan.torn,
            imported_records: 0,
            imported_failed: 0,
            warnings: plan.warnings.clone(),
        };
        if dry_run || !changed || (dataset.is_none() && plan.take.is_empty()) {
            report.changed &= dataset.is_some() || !plan.take.is_empty();
            return Ok(report);
        }
        let (version, imported, failed) = self.commit_plan(plan, dataset, dest, rebuilt)?;
        self.publish_after(dest, version)?;
        report.version = Some(version);
        report.imported_records = imported;
        report.imported_failed = failed;
        Ok(report)
    }

    /// The state the leaf's newest version was written with, if a sync
    /// wrote it.
    fn read_state(&self, dataset: &Dataset, dest: &Path) -> Result<Option<SyncState>> {
        let transaction = self
            .block_on(dataset.read_transaction())?
            .map_err(|e| Error::at(ErrorCode::Lance, dest, e.to_string()))?;
        let Some(text) = transaction
            .and_then(|t| t.transaction_properties)
            .and_then(|p| p.get(SYNC_STATE_KEY).cloned())
        else {
            return Ok(None);
        };
        let state: SyncState = serde_json::from_str(&text).map_err(|e| {
            Error::at(
                ErrorCode::SyncState,
                dest,
                format!("the sync state of the newest version cannot be read: {e}"),
            )
        })?;
        if state.schema != SYNC_STATE_SCHEMA {
            return Err(Error::at(
                ErrorCode::SyncState,
                dest,
                format!(
                    "the sync state has layout {}, this pchronicle reads {SYNC_STATE_SCHEMA}",
                    state.schema
                ),
            ));
        }
        Ok(Some(state))
    }

    /// Writes the rows `plan` takes and deletes the ones it drops, then
    /// commits both with the new state as one version. Gives the version
    /// and the records (and failed ones) taken.
    fn commit_plan(
        &self,
        plan: Plan,
        dataset: Option<Arc<Dataset>>,
        dest: &Path,
        rebuilt: bool,
    ) -> Result<(u64, u64, u64)> {
        let lance = |e: lance::Error| Error::at(ErrorCode::Lance, dest, e.to_string());
        let uri = uri_of(dest)?;
        let Plan {
            take,
            mut next,
            deleted,
            bytes,
            ..
        } = plan;
        let taken_names: Vec<String> = take.iter().map(|f| f.rel.clone()).collect();
        let taken_paths: Vec<(String, std::path::PathBuf)> = take
            .iter()
            .map(|f| (f.rel.clone(), f.path.clone()))
            .collect();
        let params = WriteParams {
            mode: if dataset.is_some() {
                WriteMode::Append
            } else {
                WriteMode::Create
            },
            data_storage_version: Some(DATA_STORAGE_VERSION),
            session: Some(self.session()),
            ..WriteParams::default()
        };
        let (tally, staged) = if take.is_empty() {
            (super::import::Tally::default(), None)
        } else {
            let (tally, staged) = self.produce_rows(take, bytes, dest, |rows, schema| {
                let batches = RecordBatchIterator::new(rows.into_iter(), schema);
                let builder = match &dataset {
                    Some(dataset) => InsertBuilder::new(Arc::clone(dataset)),
                    None => InsertBuilder::new(uri.as_str()),
                };
                self.block_on(
                    builder
                        .with_params(&params)
                        .execute_uncommitted_stream(batches),
                )?
                .map_err(lance)
            })?;
            (tally, Some(staged))
        };
        if let Some(hook) = &self.sync_hook {
            hook();
        }
        // The rows were read after the plan's stat. A file only appended
        // to meanwhile gave the bytes planned (the rows stop at the plan's
        // end); one replaced or cut short may not have, so nothing is
        // committed and the next sync starts from the last one. A file
        // rewritten in place needs no check here: its digest is of the
        // bytes the rows were made from, so the next sync finds the file
        // differs from them and replaces its rows.
        for (name, path) in &taken_paths {
            let now = fs::symlink_metadata(path).map_err(|e| Error::io(path, &e))?;
            let kept = |seen: &Taken| {
                seen.ino == now.ino() && seen.dev == now.dev() && now.len() >= seen.taken
            };
            if next.files.get(name).is_some_and(|seen| !kept(seen)) {
                return Err(Error::at(
                    ErrorCode::SyncChanged,
                    path,
                    "the file was written to while it was synced; nothing was published",
                ));
            }
        }
        for ((name, lines), digest) in taken_names.iter().zip(&tally.lines).zip(&tally.digests) {
            if let Some(taken) = next.files.get_mut(name) {
                taken.lines = *lines;
                taken.sha256 = digest.clone().unwrap_or_default();
            }
        }
        let state = serde_json::to_string(&next).expect("a sync state serializes");
        let properties = Arc::new(HashMap::from([(SYNC_STATE_KEY.to_string(), state)]));
        let committed = match dataset {
            None => {
                let mut transaction = staged.expect("a new leaf takes rows");
                transaction.transaction_properties = Some(properties);
                self.block_on(
                    CommitBuilder::new(uri.as_str())
                        .with_session(self.session())
                        .with_storage_format(DATA_STORAGE_VERSION)
                        .execute(transaction),
                )?
                .map_err(lance)?
            }
            Some(dataset) => {
                let new_fragments = match staged.map(|t| t.operation) {
                    Some(Operation::Append { fragments }) => fragments,
                    None => Vec::new(),
                    Some(other) => {
                        return Err(Error::at(
                            ErrorCode::Lance,
                            dest,
                            format!("Lance staged an unexpected {other} for new rows"),
                        ));
                    }
                };
                let predicate = if rebuilt {
                    Some("true".to_string())
                } else {
                    in_files(&deleted)
                };
                let (updated_fragments, removed_fragment_ids) = match predicate {
                    None => (Vec::new(), Vec::new()),
                    Some(predicate) => {
                        let staged = self
                            .block_on(
                                DeleteBuilder::new(Arc::clone(&dataset), predicate)
                                    .execute_uncommitted(),
                            )?
                            .map_err(lance)?;
                        match staged.transaction.operation {
                            Operation::Delete {
                                updated_fragments,
                                deleted_fragment_ids,
                                ..
                            } => (updated_fragments, deleted_fragment_ids),
                            other => {
                                return Err(Error::at(
                                    ErrorCode::Lance,
                                    dest,
                                    format!("Lance staged an unexpected {other} for a delete"),
                                ));
                            }
                        }
                    }
                };
                let operation = Operation::Update {
                    removed_fragment_ids,
                    updated_fragments,
                    new_fragments,
                    fields_modified: Vec::new(),
                    compacted_sstables: Vec::new(),
                    fields_for_preserving_frag_bitmap: Vec::new(),
                    update_mode: None,
                    inserted_rows_filter: None,
                    updated_fragment_offsets: None,
                };
                let transaction = TransactionBuilder::new(dataset.version().version, operation)
                    .transaction_properties(Some(properties))
                    .build();
                self.block_on(
                    CommitBuilder::new(dataset)
                        .with_session(self.session())
                        .execute(transaction),
                )?
                .map_err(lance)?
            }
        };
        Ok((committed.version().version, tally.records, tally.failed))
    }
}

/// A filter matching the rows of `files`, `None` for no file.
fn in_files(files: &[String]) -> Option<String> {
    if files.is_empty() {
        return None;
    }
    let quoted: Vec<String> = files
        .iter()
        .map(|f| format!("'{}'", f.replace('\'', "''")))
        .collect();
    Some(format!("_file_ IN ({})", quoted.join(", ")))
}

/// An exclusive lock on the leaf's directory for the sync's length.
fn lock(dest: &Path) -> Result<SyncLock> {
    let dir = File::open(dest).map_err(|e| Error::io(dest, &e))?;
    match rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(SyncLock(dir)),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(Error::at(
            ErrorCode::SyncBusy,
            dest,
            "another sync of this leaf is running",
        )),
        Err(e) => Err(Error::io(dest, &io::Error::from(e))),
    }
}

/// A leaf's sync lock, released when dropped. It is unlocked, not only
/// closed: a process forked by another thread holds a copy of the
/// descriptor until it runs its program, and the lock would stay held
/// with that copy, failing the next sync of the leaf with SYNC_BUSY.
struct SyncLock(File);

impl Drop for SyncLock {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.0, rustix::fs::FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::lock;

    #[test]
    fn a_lock_is_released_though_a_copy_of_its_descriptor_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        assert!(lock(dir.path()).is_err(), "held");
        // What a fork by another thread leaves until its child runs its
        // program: a second descriptor of the same open directory.
        let copy = held.0.try_clone().unwrap();
        drop(held);
        let again = lock(dir.path());
        assert!(again.is_ok(), "{:?}", again.err());
        drop(copy);
    }
}
