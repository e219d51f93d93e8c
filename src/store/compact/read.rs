//! Reading a compact-jsonl leaf's records back out (cargo feature
//! `compact-jsonl`): a Lance scan of one version, projected to the columns
//! a record needs, in stored order, in batches bounded by rows and bytes;
//! an offloaded record is streamed from `_offload/`, opened below the leaf
//! like every other warehouse file.

use std::io::{self, Read};
use std::ops::ControlFlow;

use arrow::array::{
    Array, BooleanArray, LargeStringArray, RecordBatch, StringArray, TimestampMicrosecondArray,
    UInt64Array,
};
use datafusion::prelude::{Expr, col, lit};
use datafusion::scalar::ScalarValue;
use futures::TryStreamExt;
use lance::dataset::builder::DatasetBuilder;

use super::engine::{lance_error, uri_of};
use super::{CompactJsonlStore, OFFLOAD_DIR};
use crate::error::{Error, ErrorCode, Result};
use crate::records::read::{Body, Record, RecordSink, Resume, Wanted};
use crate::warehouse::Dir;

/// Rows per batch read from Lance (each batch is one hop from Lance's
/// runtime to the reading thread).
const BATCH_ROWS: usize = 8192;
/// About this many bytes per batch (records are at most the offload
/// threshold each, so a batch of large ones is cut short).
const BATCH_BYTES: u64 = 8 << 20;

impl CompactJsonlStore {
    /// Hands the rows of `version` (the newest when `None`) from
    /// row `from.offset` of the scan to `sink`. Lance leaves out the rows
    /// `wanted` does not ask for (failed ones, those outside the time
    /// window) and, without `bodies`, the record columns; offsets count
    /// the rows left.
    pub(super) fn read_rows(
        &self,
        dir: &Dir,
        version: Option<u64>,
        from: Resume,
        wanted: &Wanted,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        let path = dir.path();
        let uri = uri_of(path)?;
        let session = self.session();
        // A snapshot reads the version it named or nothing: another
        // version would not resume at the same rows.
        let opened = self.block_on(async {
            let builder = DatasetBuilder::from_uri(&uri).with_session(session);
            match version {
                Some(v) => builder.with_version(v).load().await,
                None => builder.load().await,
            }
        })?;
        self.opens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dataset = opened.map_err(|e| lance_error(path, e))?;
        let mut scanner = dataset.scan();
        let columns: &[&str] = if wanted.bodies {
            &[
                "_file_",
                "line",
                "timestamp",
                "failed",
                "record",
                "offload_sha256",
            ]
        } else {
            &["_file_", "line", "timestamp", "failed"]
        };
        let configured = (|| {
            scanner.project(columns)?;
            if let Some(filter) = row_filter(wanted) {
                scanner.filter_expr(filter);
            }
            if from.offset > 0 {
                scanner.limit(None, Some(from.offset as i64))?;
            }
            scanner
                .scan_in_order(true)
                .batch_size(BATCH_ROWS)
                .batch_size_bytes(BATCH_BYTES);
            Ok::<_, lance::Error>(())
        })();
        configured.map_err(|e| lance_error(path, e))?;
        let mut batches = self
            .block_on(scanner.try_into_stream())?
            .map_err(|e| lance_error(path, e))?;
        let mut offload: Option<Dir> = None;
        let mut row = from.offset;
        loop {
            let batch = self
                .block_on(batches.try_next())?
                .map_err(|e| lance_error(path, e))?;
            let Some(batch) = batch else {
                return Ok(ControlFlow::Continue(()));
            };
            let rows = Rows::of(&batch).ok_or_else(|| {
                Error::at(
                    ErrorCode::NotCompactJsonl,
                    path,
                    "a column of the compact-jsonl schema has another type",
                )
            })?;
            for i in 0..batch.num_rows() {
                row += 1;
                let next = Resume {
                    part: 0,
                    offset: row,
                    line: 0,
                };
                let flow = rows.deliver(i, dir, &mut offload, next, sink)?;
                if flow.is_break() {
                    return Ok(flow);
                }
            }
        }
    }
}

/// The filter Lance applies for `wanted`, if any.
fn row_filter(wanted: &Wanted) -> Option<Expr> {
    let at = |micros: i64| {
        lit(ScalarValue::TimestampMicrosecond(
            Some(micros),
            Some("UTC".into()),
        ))
    };
    let mut terms = Vec::new();
    if !wanted.failed {
        terms.push(col("failed").is_not_true());
    }
    if let Some(since) = wanted.since {
        terms.push(col("timestamp").gt_eq(at(since)));
    }
    if let Some(until) = wanted.until {
        terms.push(col("timestamp").lt(at(until)));
    }
    terms.into_iter().reduce(Expr::and)
}

/// The columns of one batch (the record columns only when projected).
struct Rows<'b> {
    file: &'b StringArray,
    line: &'b UInt64Array,
    timestamp: &'b TimestampMicrosecondArray,
    failed: &'b BooleanArray,
    record: Option<&'b LargeStringArray>,
    offload: Option<&'b StringArray>,
}

impl<'b> Rows<'b> {
    fn of(batch: &'b RecordBatch) -> Option<Rows<'b>> {
        fn column<'b, T: 'static>(batch: &'b RecordBatch, name: &str) -> Option<&'b T> {
            batch.column_by_name(name)?.as_any().downcast_ref::<T>()
        }
        /// `Some(None)` when not projected; `None` (a schema error) when
        /// present with another type.
        fn optional<'b, T: 'static>(batch: &'b RecordBatch, name: &str) -> Option<Option<&'b T>> {
            match batch.column_by_name(name) {
                None => Some(None),
                Some(c) => c.as_any().downcast_ref::<T>().map(Some),
            }
        }
        Some(Rows {
            file: column(batch, "_file_")?,
            line: column(batch, "line")?,
            timestamp: column(batch, "timestamp")?,
            failed: column(batch, "failed")?,
            record: optional(batch, "record")?,
            offload: optional(batch, "offload_sha256")?,
        })
    }

    fn deliver(
        &self,
        i: usize,
        leaf: &Dir,
        offload_dir: &mut Option<Dir>,
        next: Resume,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        let file = if self.file.is_null(i) {
            ""
        } else {
            self.file.value(i)
        };
        let timestamp = (!self.timestamp.is_null(i)).then(|| self.timestamp.value(i));
        let failed = !self.failed.is_null(i) && self.failed.value(i);
        let line = if self.line.is_null(i) {
            0
        } else {
            self.line.value(i)
        };
        let sink_error = |e: io::Error| Error::io(leaf.path(), &e);
        if let Some(sha) = self.offload.filter(|o| !o.is_null(i)).map(|o| o.value(i)) {
            let (mut object, len) = open_offloaded(leaf, offload_dir, sha)?;
            let record = Record {
                file,
                line,
                timestamp,
                failed,
                body: Body::Stream {
                    reader: &mut object,
                    len,
                },
            };
            return sink.record(record, next).map_err(sink_error);
        }
        let text = match self.record {
            Some(record) if !record.is_null(i) => record.value(i),
            _ => "",
        };
        let record = Record {
            file,
            line,
            timestamp,
            failed,
            body: Body::Bytes(text.as_bytes()),
        };
        sink.record(record, next).map_err(sink_error)
    }
}

/// Opens `_offload/<sha>.json` of the leaf (as the leaf's viewer, never
/// through a symlink); the name must be a SHA-256 in hex.
fn open_offloaded(
    leaf: &Dir,
    offload_dir: &mut Option<Dir>,
    sha: &str,
) -> Result<(io::Take<std::fs::File>, u64)> {
    let where_ = leaf.path().join(OFFLOAD_DIR).join(format!("{sha}.json"));
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::at(
            ErrorCode::NotCompactJsonl,
            &where_,
            "a row names an offloaded record that is not a SHA-256",
        ));
    }
    if offload_dir.is_none() {
        *offload_dir = Some(
            leaf.open_dir(OFFLOAD_DIR)
                .map_err(|e| Error::io(&where_, &e))?,
        );
    }
    let dir = offload_dir.as_ref().expect("set just above");
    let (file, stat) = dir
        .open_file(format!("{sha}.json"))
        .map_err(|e| Error::io(&where_, &e))?;
    let len = stat.len();
    Ok((file.take(len), len))
}
