//! Importing record files into a compact-jsonl leaf.
//!
//! A producer thread reads the source files segment by segment (the same
//! splitter the counters use), turns each record into a row and sends
//! batches through a two-slot channel to Lance's writer, which pulls them
//! as a `RecordBatchReader`. Memory is bounded by the two batches in flight
//! plus Lance's write buffers, whatever the input size. Records larger than
//! the offload threshold are written to `_offload/<sha256>.json` (a record
//! too large to buffer is streamed there) and the row keeps only the hash.
//!
//! After Lance commits, the leaf's manifest is published from the dataset
//! itself; if that fails, the import fails.
//!
//! This file runs the import as a whole (destination checks, the two
//! threads, the manifest); `scan.rs` finds the source files (for `sync`
//! too), `rows.rs` is the producer that turns records into batches,
//! `offload.rs` the `_offload/` store it writes to.

mod offload;
mod rows;
mod scan;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

use arrow::array::{RecordBatch, RecordBatchIterator};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};

use super::engine::uri_of;
use super::{
    CompactJsonlStore, DATA_STORAGE_VERSION, ImportMode, ImportReport, OFFLOAD_DIR, schema,
};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordFormat;
use rows::produce;
pub(super) use scan::{Scan, SkipReason, scan_sources};

/// A batch of rows, or why the producer stopped.
pub(super) type Batch = std::result::Result<RecordBatch, ArrowError>;

/// One file to import, or the part of it from `start` to `end`.
pub(super) struct SourceFile {
    pub(super) path: PathBuf,
    /// Relative to the import root; the `_file_` column.
    pub(super) rel: String,
    pub(super) format: RecordFormat,
    /// Where the records to take begin (a record boundary).
    pub(super) start: u64,
    /// Where they end (the end of the file when `None`).
    pub(super) end: Option<u64>,
    /// The `line` of the record before the first one taken.
    pub(super) first_line: u64,
    /// A hasher fed the bytes before `start`, to be fed the bytes the rows
    /// are made from (a sync's digest); `None` hashes nothing.
    pub(super) digest: Option<sha2::Sha256>,
}

impl CompactJsonlStore {
    /// Imports `source` (a record file, or a directory scanned recursively
    /// for record files) into the leaf at `dest`, then publishes its
    /// manifest.
    pub fn import_path(
        &self,
        source: &Path,
        dest: &Path,
        mode: ImportMode,
    ) -> Result<ImportReport> {
        let files = collect_sources(source, dest)?;
        let source_bytes = files
            .iter()
            .map(|f| fs::metadata(&f.path).map_or(0, |m| m.len()))
            .sum();
        self.check_destination(dest, mode)?;
        let created = !dest.exists();
        let result = self.import_files(files, source_bytes, dest, mode);
        if let Err(e) = &result {
            // A failed import into a new directory leaves nothing behind,
            // unless Lance already committed (then the data stays, and the
            // next read repairs the manifest, as the error says).
            if created && e.code != ErrorCode::ImportManifest {
                let _ = fs::remove_dir_all(dest);
            }
        }
        result
    }

    fn import_files(
        &self,
        files: Vec<SourceFile>,
        source_bytes: u64,
        dest: &Path,
        mode: ImportMode,
    ) -> Result<ImportReport> {
        let (tally, version) = self.produce_rows(files, source_bytes, dest, |rows, schema| {
            self.write_batches(rows, schema, dest, mode, None)
        })?;

        let manifest = self.publish_after(dest, version)?;
        let stats = manifest.stats.unwrap_or_default();
        Ok(ImportReport {
            mode,
            version,
            fingerprint: manifest.fingerprint.unwrap_or_default(),
            record_count: stats.record_count,
            failed_count: stats.failed_count,
            imported_records: tally.records,
            imported_failed: tally.failed,
            offloaded_records: tally.offloaded,
            source_files: tally.files,
            source_bytes,
        })
    }

    /// Publishes the manifest of the leaf at `dest` after Lance committed
    /// `version`: failing, the import (or sync) fails with a code saying
    /// the version is there but its manifest is not.
    pub(super) fn publish_after(
        &self,
        dest: &Path,
        version: u64,
    ) -> Result<crate::store::manifest::Manifest> {
        self.publish_manifest(dest).map_err(|e| {
            Error::at(
                ErrorCode::ImportManifest,
                dest,
                format!(
                    "Lance version {version} was written but its manifest was not: {}",
                    e.message
                ),
            )
        })
    }

    /// Turns `files` into rows on a thread of its own while `consume`
    /// takes the batches (Lance's writer); gives what both made.
    pub(super) fn produce_rows<T>(
        &self,
        files: Vec<SourceFile>,
        source_bytes: u64,
        dest: &Path,
        consume: impl FnOnce(Receiver<Batch>, SchemaRef) -> Result<T>,
    ) -> Result<(Tally, T)> {
        let offload_dir = dest.join(OFFLOAD_DIR);
        fs::create_dir_all(&offload_dir).map_err(|e| Error::io(&offload_dir, &e))?;
        let schema: SchemaRef = Arc::new(schema());
        let (sender, receiver) = sync_channel(2);
        let progress = Arc::new(Progress::new(source_bytes));
        let producer = {
            let schema = Arc::clone(&schema);
            let progress = Arc::clone(&progress);
            let threshold = self.offload_threshold;
            std::thread::Builder::new()
                .name("pchronicle-import".into())
                .spawn(move || produce(files, schema, offload_dir, threshold, sender, &progress))
                .map_err(|e| {
                    Error::new(
                        ErrorCode::Io,
                        format!("cannot start the import thread: {e}"),
                    )
                })?
        };
        let consumed = consume(receiver, schema);
        // The producer ends when it has sent everything or when the writer
        // dropped the channel; its own error explains a failed write best.
        let produced = producer
            .join()
            .map_err(|_| Error::new(ErrorCode::Io, "the import thread panicked"))?;
        progress.finish();
        let tally = produced?;
        Ok((tally, consumed?))
    }

    fn check_destination(&self, dest: &Path, mode: ImportMode) -> Result<()> {
        let has_dataset = super::versions::latest_version(dest).is_ok();
        match mode {
            ImportMode::Create if has_dataset => Err(Error::at(
                ErrorCode::ImportDestinationExists,
                dest,
                "a dataset already exists here",
            )),
            ImportMode::Append if !has_dataset => Err(Error::at(
                ErrorCode::ImportDestinationMissing,
                dest,
                "there is no dataset here to append to",
            )),
            ImportMode::Append => self.open_compact(dest).map(drop),
            _ => Ok(()),
        }
    }

    /// Hands the batches to Lance and returns the version it committed.
    pub(super) fn write_batches(
        &self,
        receiver: Receiver<Batch>,
        schema: SchemaRef,
        dest: &Path,
        mode: ImportMode,
        properties: Option<std::collections::HashMap<String, String>>,
    ) -> Result<u64> {
        let uri = uri_of(dest)?;
        let params = WriteParams {
            mode: match mode {
                ImportMode::Create => WriteMode::Create,
                ImportMode::Append => WriteMode::Append,
                ImportMode::Overwrite => WriteMode::Overwrite,
            },
            data_storage_version: Some(DATA_STORAGE_VERSION),
            session: Some(self.session()),
            transaction_properties: properties.map(Arc::new),
            ..WriteParams::default()
        };
        let batches = RecordBatchIterator::new(receiver.into_iter(), schema);
        let dataset = self
            .block_on(Dataset::write(batches, uri.as_str(), Some(params)))?
            .map_err(|e| Error::at(ErrorCode::Lance, dest, e.to_string()))?;
        Ok(dataset.version().version)
    }
}

/// The record files under `source`, sorted by relative path (the rules
/// are [`scan`]'s). A directory that cannot be listed fails the import: a
/// one-time copy is whole or not made.
pub(super) fn collect_sources(source: &Path, dest: &Path) -> Result<Vec<SourceFile>> {
    let scan = scan_sources(source, dest)?;
    for skipped in scan.skipped {
        if let SkipReason::Unreadable(e) = skipped.why {
            return Err(Error::io(&skipped.path, &e));
        }
    }
    if scan.files.is_empty() {
        return Err(Error::at(
            ErrorCode::ImportSource,
            source,
            "no record files found",
        ));
    }
    Ok(scan.files)
}

impl SourceFile {
    fn whole(path: PathBuf, rel: String, format: RecordFormat) -> SourceFile {
        SourceFile {
            path,
            rel,
            format,
            start: 0,
            end: None,
            first_line: 0,
            digest: None,
        }
    }
}

/// Counts kept by the producer.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) files: u64,
    pub(super) records: u64,
    pub(super) failed: u64,
    pub(super) offloaded: u64,
    /// The `line` of each file's last record taken, in file order.
    pub(super) lines: Vec<u64>,
    /// Each file's digest (hex SHA-256) when it had a hasher, in file
    /// order: the bytes the rows were made from, and nothing else.
    pub(super) digests: Vec<Option<String>>,
}

/// A progress line on stderr, shown only when stderr is a terminal.
pub(super) struct Progress {
    total: u64,
    done: AtomicU64,
    last: parking_lot::Mutex<Instant>,
    on_terminal: bool,
}

impl Progress {
    pub(super) fn new(total: u64) -> Self {
        let on_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress {
            total,
            done: AtomicU64::new(0),
            last: parking_lot::Mutex::new(Instant::now()),
            on_terminal,
        }
    }

    fn add(&self, bytes: u64) {
        let done = self.done.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if !self.on_terminal {
            return;
        }
        let mut last = self.last.lock();
        if last.elapsed() >= Duration::from_millis(250) {
            *last = Instant::now();
            let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
            let percent = if self.total == 0 {
                100.0
            } else {
                100.0 * done as f64 / self.total as f64
            };
            eprint!(
                "\rimporting: {:.1} / {:.1} MiB ({percent:.0}%)",
                mib(done),
                mib(self.total)
            );
        }
    }

    pub(super) fn finish(&self) {
        if self.on_terminal {
            eprintln!("\rimporting: done{}", " ".repeat(40));
        }
    }
}
