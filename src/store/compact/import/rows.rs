//! The producer side of an import: source files read segment by segment
//! (the splitter the counters use), each record turned into a row, rows
//! gathered into Arrow batches of bounded rows and bytes and sent to
//! Lance's writer. A `.json` document is read whole: each element of a
//! top-level array is a row.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use arrow::array::{
    BooleanBuilder, LargeStringBuilder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
    UInt64Builder,
};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use super::offload::{OffloadTee, Offloader};
use super::{Progress, SourceFile, Tally};
use crate::error::{Error, ErrorCode, Result};
use crate::records::scan::RecordScanner;
use crate::records::{OversizeSegment, ProbedSegment, SegmentVisitor, for_each_segment};
use crate::records::{RecordFormat, timestamp::Micros};

/// Rows per batch sent to Lance.
const BATCH_ROWS: usize = 8192;

/// Record bytes per batch sent to Lance.
const BATCH_BYTES: usize = 8 << 20;

/// Reads every source into batches. On a read error it sends an error into
/// the channel (so Lance aborts the write) and returns the coded error.
pub(super) fn produce(
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
    for mut file in files {
        rows.file.clone_from(&file.rel);
        rows.line = file.first_line;
        rows.tally.files += 1;
        let mut digest = file.digest.take();
        let result = match file.format {
            RecordFormat::Json => {
                import_json_document(&file.path, &mut rows, progress, digest.as_mut())
            }
            _ => File::open(&file.path).and_then(|mut f| {
                f.seek(SeekFrom::Start(file.start))?;
                let length = file
                    .end
                    .map_or(u64::MAX, |end| end.saturating_sub(file.start));
                let mut reader = CountingReader {
                    inner: f.take(length),
                    progress,
                    read: 0,
                    digest: digest.as_mut(),
                };
                for_each_segment(&mut reader, &mut rows)?;
                // A range named to the byte must be read whole: a file cut
                // short meanwhile is an error, not fewer records.
                match file.end {
                    Some(_) if reader.read < length => {
                        Err(io::Error::other("the file was cut short while it was read"))
                    }
                    _ => Ok(()),
                }
            }),
        };
        rows.tally.lines.push(rows.line);
        rows.tally
            .digests
            .push(digest.map(|d| crate::warehouse::hex(&sha2::Digest::finalize(d))));
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

/// Imports a `.json` document: each element of a top-level array is a row,
/// any other value is one row; a document that stops being valid JSON
/// keeps the elements before the error and adds one failed row holding the
/// rest of the text.
fn import_json_document(
    path: &Path,
    rows: &mut RowWriter,
    progress: &Progress,
    digest: Option<&mut sha2::Sha256>,
) -> io::Result<()> {
    let size = fs::metadata(path)?.len();
    if size > crate::records::read::MAX_JSON_DOCUMENT {
        return Err(io::Error::other(format!(
            "a .json document over {} MiB is not imported; convert it to JSON Lines",
            crate::records::read::MAX_JSON_DOCUMENT >> 20
        )));
    }
    let text = fs::read(path)?;
    progress.add(text.len() as u64);
    if let Some(digest) = digest {
        sha2::Digest::update(digest, &text);
    }
    for record in crate::records::read::document_records(&text) {
        rows.record(record)?;
    }
    Ok(())
}

/// Counts the bytes read from the sources for the progress line, and
/// feeds them to the file's digest: every byte the rows are made from
/// passes here once, so the digest and the rows cannot disagree.
struct CountingReader<'p> {
    inner: io::Take<File>,
    progress: &'p Progress,
    /// Bytes read so far.
    read: u64,
    digest: Option<&'p mut sha2::Sha256>,
}

impl Read for CountingReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.progress.add(n as u64);
        self.read += n as u64;
        if let Some(digest) = self.digest.as_deref_mut() {
            sha2::Digest::update(digest, &out[..n]);
        }
        Ok(n)
    }
}
