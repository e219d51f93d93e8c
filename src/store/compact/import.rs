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

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use arrow::array::{
    BooleanBuilder, LargeStringBuilder, RecordBatch, RecordBatchIterator, StringBuilder,
    TimestampMicrosecondBuilder, UInt64Builder,
};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{CompactJsonlStore, DATA_STORAGE_VERSION, OFFLOAD_DIR, schema, uri_of};
use crate::atomic::write_atomic;
use crate::error::{Error, ErrorCode, Result};
use crate::records::scan::RecordScanner;
use crate::records::{OversizeSegment, ProbedSegment, SegmentVisitor, for_each_segment};
use crate::records::{RecordFormat, timestamp::Micros};

/// Rows per batch sent to Lance.
const BATCH_ROWS: usize = 8192;
/// Record bytes per batch sent to Lance.
const BATCH_BYTES: usize = 8 << 20;
/// A `.json` document is parsed in memory; larger ones should be JSONL.
const MAX_JSON_DOCUMENT: u64 = 256 << 20;

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

/// One file to import.
struct SourceFile {
    path: PathBuf,
    /// Relative to the import root; the `_file_` column.
    rel: String,
    format: RecordFormat,
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
        let written = self.write_batches(receiver, schema, dest, mode);
        // The producer ends when it has sent everything or when the writer
        // dropped the channel; its own error explains a failed write best.
        let produced = producer
            .join()
            .map_err(|_| Error::new(ErrorCode::Io, "the import thread panicked"))?;
        progress.finish();
        let tally = produced?;
        let version = written?;

        let manifest = self.publish_manifest(dest).map_err(|e| {
            Error::at(
                ErrorCode::ImportManifest,
                dest,
                format!(
                    "Lance version {version} was written but its manifest was not: {}",
                    e.message
                ),
            )
        })?;
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
    fn write_batches(
        &self,
        receiver: Receiver<std::result::Result<RecordBatch, ArrowError>>,
        schema: SchemaRef,
        dest: &Path,
        mode: ImportMode,
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
            ..WriteParams::default()
        };
        let batches = RecordBatchIterator::new(receiver.into_iter(), schema);
        let dataset = self
            .block_on(Dataset::write(batches, uri.as_str(), Some(params)))?
            .map_err(|e| Error::at(ErrorCode::Lance, dest, e.to_string()))?;
        Ok(dataset.version().version)
    }
}

/// The record files under `source`, sorted by relative path; symlinks and
/// pchronicle's own state are skipped, and so is `dest` if it lies inside.
fn collect_sources(source: &Path, dest: &Path) -> Result<Vec<SourceFile>> {
    let meta = fs::metadata(source).map_err(|e| Error::io(source, &e))?;
    if meta.is_file() {
        let name = source
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let format = RecordFormat::from_name(name).ok_or_else(|| {
            Error::at(
                ErrorCode::ImportSource,
                source,
                "not a record file (.jsonl, .ndjson, .jsonseq or .json)",
            )
        })?;
        return Ok(vec![SourceFile {
            path: source.to_path_buf(),
            rel: name.to_string(),
            format,
        }]);
    }
    let dest = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
    let mut files = Vec::new();
    let mut stack = vec![(source.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        if std::path::absolute(&dir).is_ok_and(|d| d == dest) {
            continue;
        }
        for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, &e))? {
            let entry = entry.map_err(|e| Error::io(&dir, &e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if kind.is_dir() && name != crate::catalog::STATE_DIR {
                stack.push((entry.path(), child_rel));
            } else if let Some(format) = RecordFormat::from_name(&name).filter(|_| kind.is_file()) {
                files.push(SourceFile {
                    path: entry.path(),
                    rel: child_rel,
                    format,
                });
            }
        }
    }
    if files.is_empty() {
        return Err(Error::at(
            ErrorCode::ImportSource,
            source,
            "no record files found",
        ));
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(files)
}

/// Counts kept by the producer.
#[derive(Default)]
struct Tally {
    files: u64,
    records: u64,
    failed: u64,
    offloaded: u64,
}

/// Reads every source into batches. On a read error it sends an error into
/// the channel (so Lance aborts the write) and returns the coded error.
fn produce(
    files: Vec<SourceFile>,
    schema: SchemaRef,
    offload_dir: PathBuf,
    threshold: usize,
    sender: SyncSender<std::result::Result<RecordBatch, ArrowError>>,
    progress: &Progress,
) -> Result<Tally> {
    let mut rows = RowWriter {
        batch: BatchBuilder::new(schema),
        sender,
        offload: Offloader { dir: offload_dir },
        threshold,
        scanner: RecordScanner::default(),
        tally: Tally::default(),
        file: String::new(),
        line: 0,
        closed: false,
    };
    for file in &files {
        rows.file.clone_from(&file.rel);
        rows.line = 0;
        rows.tally.files += 1;
        let result = match file.format {
            RecordFormat::Json => import_json_document(&file.path, &mut rows, progress),
            _ => File::open(&file.path).and_then(|f| {
                let reader = CountingReader { inner: f, progress };
                for_each_segment(reader, &mut rows)
            }),
        };
        if rows.closed {
            // Lance stopped reading: the write failed; it reports why.
            return Ok(rows.tally);
        }
        if let Err(e) = result {
            let error = Error::at(ErrorCode::ImportSource, &file.path, e.to_string());
            let _ = rows
                .sender
                .send(Err(ArrowError::ExternalError(Box::new(e))));
            return Err(error);
        }
    }
    rows.flush();
    Ok(rows.tally)
}

/// Turns segments into rows.
struct RowWriter {
    batch: BatchBuilder,
    sender: SyncSender<std::result::Result<RecordBatch, ArrowError>>,
    offload: Offloader,
    threshold: usize,
    scanner: RecordScanner,
    tally: Tally,
    file: String,
    line: u64,
    /// The writer hung up; stop producing.
    closed: bool,
}

impl RowWriter {
    /// Adds one record (already known not to be blank).
    fn record(&mut self, text: &[u8]) -> io::Result<()> {
        let facts = self.scanner.facts(text);
        let (timestamp, id) = match &facts {
            Some(facts) => (facts.timestamp(), facts.id(text).map(|id| id.into_owned())),
            None => (None, None),
        };
        let offloaded = if text.len() > self.threshold {
            Some(self.offload.store(text)?)
        } else {
            None
        };
        self.push(Row {
            id,
            timestamp,
            failed: facts.is_none(),
            record: text,
            offload_sha256: offloaded,
        })
    }

    fn push(&mut self, row: Row<'_>) -> io::Result<()> {
        self.line += 1;
        self.tally.records += 1;
        self.tally.failed += u64::from(row.failed);
        self.tally.offloaded += u64::from(row.offload_sha256.is_some());
        self.batch.push(&self.file, self.line, &row);
        if self.batch.is_full() {
            self.flush();
        }
        if self.closed {
            return Err(io::Error::other("the Lance writer stopped"));
        }
        Ok(())
    }

    fn flush(&mut self) {
        if let Some(batch) = self.batch.finish() {
            if self.sender.send(batch).is_err() {
                self.closed = true;
            }
        }
    }
}

impl SegmentVisitor for RowWriter {
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()> {
        let segment = segment.trim_ascii();
        if segment.is_empty() {
            return Ok(());
        }
        self.record(segment)
    }

    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()> {
        // Too large to hold: stream it into the offload store while a
        // streaming parser validates the same bytes.
        let mut tee = OffloadTee::new(&self.offload.dir, segment)?;
        let probed = tee.probe()?;
        let Some(probed) = probed else {
            tee.discard();
            return Ok(());
        };
        let sha = tee.commit()?;
        let (failed, timestamp) = match probed {
            ProbedSegment::Record(ts) => (false, ts),
            ProbedSegment::Failed => (true, None),
        };
        self.push(Row {
            id: None,
            timestamp,
            failed,
            record: b"",
            offload_sha256: Some(sha),
        })
    }
}

struct Row<'a> {
    id: Option<String>,
    timestamp: Option<Micros>,
    failed: bool,
    /// The raw record; ignored when offloaded.
    record: &'a [u8],
    offload_sha256: Option<String>,
}

/// Column builders for one batch.
struct BatchBuilder {
    schema: SchemaRef,
    file: StringBuilder,
    line: UInt64Builder,
    record_id: StringBuilder,
    timestamp: TimestampMicrosecondBuilder,
    failed: BooleanBuilder,
    record: LargeStringBuilder,
    offload_sha256: StringBuilder,
    rows: usize,
    bytes: usize,
}

impl BatchBuilder {
    fn new(schema: SchemaRef) -> Self {
        BatchBuilder {
            schema,
            file: StringBuilder::new(),
            line: UInt64Builder::new(),
            record_id: StringBuilder::new(),
            timestamp: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            failed: BooleanBuilder::new(),
            record: LargeStringBuilder::new(),
            offload_sha256: StringBuilder::new(),
            rows: 0,
            bytes: 0,
        }
    }

    fn push(&mut self, file: &str, line: u64, row: &Row<'_>) {
        self.file.append_value(file);
        self.line.append_value(line);
        self.record_id.append_option(row.id.as_deref());
        self.timestamp.append_option(row.timestamp);
        self.failed.append_value(row.failed);
        match &row.offload_sha256 {
            Some(sha) => {
                self.record.append_null();
                self.offload_sha256.append_value(sha);
            }
            None => {
                // A failed record may not be UTF-8; the column is text, so
                // invalid bytes become U+FFFD.
                self.record
                    .append_value(String::from_utf8_lossy(row.record));
                self.offload_sha256.append_null();
                self.bytes += row.record.len();
            }
        }
        self.rows += 1;
    }

    fn is_full(&self) -> bool {
        self.rows >= BATCH_ROWS || self.bytes >= BATCH_BYTES
    }

    fn finish(&mut self) -> Option<std::result::Result<RecordBatch, ArrowError>> {
        if self.rows == 0 {
            return None;
        }
        self.rows = 0;
        self.bytes = 0;
        Some(RecordBatch::try_new(
            Arc::clone(&self.schema),
            vec![
                Arc::new(self.file.finish()),
                Arc::new(self.line.finish()),
                Arc::new(self.record_id.finish()),
                Arc::new(self.timestamp.finish()),
                Arc::new(self.failed.finish()),
                Arc::new(self.record.finish()),
                Arc::new(self.offload_sha256.finish()),
            ],
        ))
    }
}

/// The `_offload/` store: one file per distinct record, named by the
/// SHA-256 of its bytes, written atomically and never rewritten.
struct Offloader {
    dir: PathBuf,
}

impl Offloader {
    fn store(&self, bytes: &[u8]) -> io::Result<String> {
        let sha = hex(&Sha256::digest(bytes));
        let path = self.dir.join(format!("{sha}.json"));
        if !path.exists() {
            write_atomic(&path, bytes)?;
        }
        Ok(sha)
    }
}

/// Streams an oversize segment into a temporary file in `_offload/`,
/// hashing it on the way, while the caller's parser reads the same bytes.
struct OffloadTee<'s, 'a> {
    segment: &'s mut OversizeSegment<'a>,
    temp: PathBuf,
    file: Option<File>,
    hasher: Sha256,
    dir: PathBuf,
}

impl<'s, 'a> OffloadTee<'s, 'a> {
    fn new(dir: &Path, segment: &'s mut OversizeSegment<'a>) -> io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".partial.{}.{n}", std::process::id()));
        let file = File::create(&temp)?;
        Ok(OffloadTee {
            segment,
            temp,
            file: Some(file),
            hasher: Sha256::new(),
            dir: dir.to_path_buf(),
        })
    }

    /// Validates the segment as it streams through; everything read is
    /// also written and hashed.
    fn probe(&mut self) -> io::Result<Option<ProbedSegment>> {
        // The parser reads through the tee, so every byte reaches the file
        // and the hash exactly once; probing drains the rest.
        crate::records::probe_stream(TeeReader { owner: self })
    }

    /// Moves the streamed record to `_offload/<sha>.json`.
    fn commit(mut self) -> io::Result<String> {
        let mut file = self.file.take().expect("the tee is committed once");
        file.flush()?;
        file.sync_all()?;
        drop(file);
        let sha = hex(&std::mem::take(&mut self.hasher).finalize());
        let path = self.dir.join(format!("{sha}.json"));
        if path.exists() {
            fs::remove_file(&self.temp)?;
        } else {
            fs::rename(&self.temp, &path)?;
        }
        Ok(sha)
    }

    fn discard(self) {
        drop(self.file);
        let _ = fs::remove_file(&self.temp);
    }
}

/// Reads from the oversize segment, copying every byte to the temporary
/// file and the hash.
struct TeeReader<'t, 's, 'a> {
    owner: &'t mut OffloadTee<'s, 'a>,
}

impl Read for TeeReader<'_, '_, '_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.owner.segment.read(out)?;
        self.owner.hasher.update(&out[..n]);
        if let Some(file) = self.owner.file.as_mut() {
            file.write_all(&out[..n])?;
        }
        Ok(n)
    }
}

/// Imports a `.json` document: each element of a top-level array is a row,
/// any other value is one row; a document that stops being valid JSON
/// keeps the elements before the error and adds one failed row holding the
/// rest of the text.
fn import_json_document(path: &Path, rows: &mut RowWriter, progress: &Progress) -> io::Result<()> {
    let size = fs::metadata(path)?.len();
    if size > MAX_JSON_DOCUMENT {
        return Err(io::Error::other(format!(
            "a .json document over {} MiB is not imported; convert it to JSON Lines",
            MAX_JSON_DOCUMENT >> 20
        )));
    }
    let text = fs::read(path)?;
    progress.add(text.len() as u64);
    let document = text.trim_ascii();
    if document.is_empty() {
        return Ok(());
    }
    if document.first() != Some(&b'[') {
        return rows.record(document);
    }
    let (elements, rest) = crate::records::split_json_array(document);
    for element in elements {
        rows.record(element)?;
    }
    match rest {
        Some(rest) if !rest.is_empty() => rows.record(rest),
        _ => Ok(()),
    }
}

/// Counts the bytes read from the sources for the progress line.
struct CountingReader<'p> {
    inner: File,
    progress: &'p Progress,
}

impl Read for CountingReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.progress.add(n as u64);
        Ok(n)
    }
}

/// A progress line on stderr, shown only when stderr is a terminal.
struct Progress {
    total: u64,
    done: AtomicU64,
    last: parking_lot::Mutex<Instant>,
    on_terminal: bool,
}

impl Progress {
    fn new(total: u64) -> Self {
        // SAFETY: isatty only inspects the descriptor number.
        let on_terminal = unsafe { libc::isatty(libc::STDERR_FILENO) == 1 };
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

    fn finish(&self) {
        if self.on_terminal {
            eprintln!("\rimporting: done{}", " ".repeat(40));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
