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
use std::sync::{Arc, mpsc};

use futures::TryStreamExt;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::scanner::DatasetRecordBatchStream;
use lance::session::Session;

use super::engine::{RUNTIME_WORKERS, lance_error, uri_of};
use super::{CompactJsonlStore, OFFLOAD_DIR};
use crate::error::{Error, ErrorCode, Result};
use crate::records::read::{Body, Record, RecordSink, Resume, Span, Wanted};
use crate::warehouse::{Dir, OwnedBlobReader, Viewer};

/// Rows per batch read from Lance (each batch is one hop from Lance's
/// runtime to the reading thread).
const BATCH_ROWS: usize = 8192;
/// Bytes of a leaf's files a scan may have read and not yet decoded, on
/// a local disk. Lance's own default, 2 GiB, reads a whole leaf ahead of
/// a reader that paused, and a reader may pause for seconds on each of
/// many open files: four paused readers of a 121 MB leaf held 527 MB of
/// the daemon's memory with a bound of 64 MiB (and all of the leaf's
/// pages with Lance's), about 320 MB with this one. Reading a whole leaf
/// is as fast with this bound as with either.
const IO_AHEAD: u64 = 16 << 20;
/// The same bound for a leaf on an object store, where each read waits
/// for a round trip and more of them must be under way at once.
const IO_AHEAD_REMOTE: u64 = 64 << 20;
/// About this many bytes per batch (records are at most the offload
/// threshold each, so a batch of large ones is cut short).
const BATCH_BYTES: u64 = 8 << 20;

impl CompactJsonlStore {
    /// Hands the rows of `version` (the newest when `None`) from
    /// row `from.offset` of the scan to `sink`. With a time window Lance
    /// leaves out the rows outside it (and failed ones, unless wanted);
    /// without, failed rows are left out here ([`row_filter`] says why).
    /// Without `bodies` the record columns are not read. Offsets count
    /// the rows of the scan, so they mean the same for the same `wanted`.
    pub(super) fn read_rows(
        &self,
        dir: &Dir,
        version: Option<u64>,
        from: Resume,
        wanted: &Wanted,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        let path = dir.path();
        let scan = Scan {
            uri: uri_of(path)?,
            version,
            offset: from.offset,
            wanted: *wanted,
        };
        self.opens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut deliver = |batches: &mut dyn FnMut() -> Result<Option<RecordBatch>>| {
            let mut offload: Option<Dir> = None;
            let mut row = from.offset;
            loop {
                let Some(batch) = batches()? else {
                    return Ok(ControlFlow::Continue(()));
                };
                let rows = Rows::of(&batch).ok_or_else(|| {
                    Error::at(
                        ErrorCode::NotCompactJsonl,
                        path,
                        "a column of the compact-jsonl schema has another type",
                    )
                })?;
                if let Some((text, bounds)) = rows.span() {
                    let first = Resume {
                        part: 0,
                        offset: row + 1,
                        line: 0,
                    };
                    row += batch.num_rows() as u64;
                    let flow = sink
                        .span(&Span::new(text, bounds, first))
                        .map_err(|e| Error::io(path, &e))?;
                    if flow.is_break() {
                        return Ok(flow);
                    }
                    continue;
                }
                for i in 0..batch.num_rows() {
                    row += 1;
                    if !wanted.failed && rows.failed(i) {
                        continue;
                    }
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
        };
        match dir.viewer() {
            None => {
                let session = self.session();
                let mut batches = self
                    .block_on(scan.open(session))?
                    .map_err(|e| lance_error(path, e))?;
                deliver(&mut || {
                    self.block_on(batches.try_next())?
                        .map_err(|e| lance_error(path, e))
                })
            }
            Some(viewer) => as_viewer(viewer, &scan, path, deliver),
        }
    }
}

/// One scan of a leaf, as `read_rows` asks for it.
struct Scan {
    uri: String,
    version: Option<u64>,
    offset: u64,
    wanted: Wanted,
}

impl Scan {
    fn read_ahead(&self) -> u64 {
        if crate::warehouse::is_remote_path(std::path::Path::new(&self.uri)) {
            return IO_AHEAD_REMOTE;
        }
        IO_AHEAD
    }

    /// Opens the dataset (the version named or nothing: another version
    /// would not resume at the same rows) and starts the scan.
    async fn open(&self, session: Arc<Session>) -> lance::Result<DatasetRecordBatchStream> {
        let builder = DatasetBuilder::from_uri(&self.uri).with_session(session);
        let dataset = match self.version {
            Some(v) => builder.with_version(v).load().await?,
            None => builder.load().await?,
        };
        super::engine::check_own_files(&dataset)?;
        let mut scanner = dataset.scan();
        let mut columns = vec!["failed"];
        if self.wanted.heads {
            columns.extend(["_file_", "line", "timestamp"]);
        }
        if self.wanted.bodies {
            columns.extend(["record", "offload_sha256"]);
        }
        scanner.project(&columns)?;
        if let Some(filter) = row_filter(&self.wanted) {
            scanner.filter_expr(filter);
        }
        if self.offset > 0 {
            // Past i64's range is past any leaf's rows.
            let offset = i64::try_from(self.offset).unwrap_or(i64::MAX);
            scanner.limit(None, Some(offset))?;
        }
        // Lance decodes as many batches at once as it counts cores beyond
        // two it keeps for I/O: one on a machine of two, where a leaf whose
        // records are slow to decode (a zstd frame each) then decodes on
        // one core while the other waits.
        scanner
            .scan_in_order(true)
            .batch_size(BATCH_ROWS)
            .batch_size_bytes(BATCH_BYTES)
            .batch_readahead(RUNTIME_WORKERS)
            .io_buffer_size(self.read_ahead());
        scanner.try_into_stream().await
    }
}

/// Reads the scan with the viewer's credentials: Lance opens files by
/// path, so the kernel, not a check made beforehand, decides what it may
/// read, whatever a writer swaps in meanwhile. The scan runs on a thread
/// of its own that takes the viewer's uid, gid and groups (Linux
/// credentials are per thread), with a runtime whose every thread does
/// the same, and a session of its own (no metadata cached for another
/// user). Batches come back through a two-batch channel.
fn as_viewer(
    viewer: &Viewer,
    scan: &Scan,
    path: &std::path::Path,
    deliver: impl FnOnce(&mut dyn FnMut() -> Result<Option<RecordBatch>>) -> Result<ControlFlow<()>>,
) -> Result<ControlFlow<()>> {
    let (sender, batches) = mpsc::sync_channel::<Result<RecordBatch>>(2);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let failed = |e: Error| {
                let _ = sender.send(Err(e));
            };
            if let Err(e) = viewer.become_on_this_thread() {
                return failed(Error::reading(ErrorCode::Io, path, &e));
            }
            let thread_viewer = viewer.clone();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_start(move || {
                    // A thread started by one already running as the
                    // viewer inherits its credentials; one started by
                    // another thread of the daemon takes them here. One
                    // that cannot must not run the viewer's I/O as the
                    // daemon, and failing it would leave the read waiting
                    // for good: the process stops instead (the daemon
                    // could take credentials a moment ago, so this is a
                    // broken system, not a hostile input).
                    if rustix::process::geteuid().as_raw() == thread_viewer.uid {
                        return;
                    }
                    if let Err(e) = thread_viewer.become_on_this_thread() {
                        eprintln!("pchronicle: a reader thread could not take a viewer's credentials ({e}); stopping");
                        std::process::abort();
                    }
                })
                .build();
            let runtime = match runtime {
                Ok(runtime) => runtime,
                Err(e) => return failed(Error::reading(ErrorCode::Lance, path, &e)),
            };
            runtime.block_on(async {
                let mut stream = match scan.open(super::engine::new_session()).await {
                    Ok(stream) => stream,
                    Err(e) => return failed(lance_error(path, e)),
                };
                loop {
                    let next = match stream.try_next().await {
                        Ok(Some(batch)) => Ok(batch),
                        Ok(None) => return,
                        Err(e) => Err(lance_error(path, e)),
                    };
                    let stop = next.is_err();
                    if sender.send(next).is_err() || stop {
                        return;
                    }
                }
            });
        });
        let delivered = deliver(&mut || match batches.recv() {
            Ok(batch) => batch.map(Some),
            Err(_) => Ok(None),
        });
        // Dropping the receiver ends the reader at its next batch.
        drop(batches);
        if reader.join().is_err() {
            return Err(Error::at(
                ErrorCode::Lance,
                path,
                "the reader thread failed (it could not take the viewer's credentials)",
            ));
        }
        delivered
    })
}

/// The filter Lance applies for `wanted`, if any: only with a time
/// window. A filter makes Lance read the filter's columns first and then
/// take the rows that pass by their addresses, which on short records
/// costs about 70 % more CPU than the scan itself (pylance 14.0.2, 256 MiB
/// of records under 256 bytes: 170 against 100 ms), so leaving out the
/// few failed rows is cheaper after the scan.
fn row_filter(wanted: &Wanted) -> Option<Expr> {
    if wanted.since.is_none() && wanted.until.is_none() {
        return None;
    }
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

/// The columns of one batch (the head and record columns only when
/// projected).
struct Rows<'b> {
    file: Option<&'b StringArray>,
    line: Option<&'b UInt64Array>,
    timestamp: Option<&'b TimestampMicrosecondArray>,
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
            file: optional(batch, "_file_")?,
            line: optional(batch, "line")?,
            timestamp: optional(batch, "timestamp")?,
            failed: column(batch, "failed")?,
            record: optional(batch, "record")?,
            offload: optional(batch, "offload_sha256")?,
        })
    }

    /// The batch's records as one [`Span`] (their text and bounds), when
    /// every row is a valid record held inline and no head was asked for.
    fn span(&self) -> Option<(&'b [u8], &'b [i64])> {
        let record = self.record?;
        let heads = self.file.is_some() || self.line.is_some() || self.timestamp.is_some();
        let inline = self.offload.is_none_or(|o| o.null_count() == o.len());
        if heads || !inline || record.null_count() > 0 || self.failed.true_count() > 0 {
            return None;
        }
        Some((record.value_data(), record.value_offsets()))
    }

    fn failed(&self, i: usize) -> bool {
        !self.failed.is_null(i) && self.failed.value(i)
    }

    fn deliver(
        &self,
        i: usize,
        leaf: &Dir,
        offload_dir: &mut Option<Dir>,
        next: Resume,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        let file = self
            .file
            .filter(|f| !f.is_null(i))
            .map_or("", |f| f.value(i));
        let timestamp = self.timestamp.filter(|t| !t.is_null(i)).map(|t| t.value(i));
        let failed = self.failed(i);
        let line = self
            .line
            .filter(|l| !l.is_null(i))
            .map_or(0, |l| l.value(i));
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
                landmarks: None,
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
            landmarks: None,
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
) -> Result<(io::Take<OwnedBlobReader>, u64)> {
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
    let reader = OwnedBlobReader {
        blob: file,
        offset: 0,
    };
    Ok((reader.take(len), len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::compact::ImportMode;
    use std::os::unix::fs::PermissionsExt;

    struct Count(usize);

    impl RecordSink for Count {
        fn record(&mut self, _: Record<'_>, _: Resume) -> std::io::Result<ControlFlow<()>> {
            self.0 += 1;
            Ok(ControlFlow::Continue(()))
        }
    }

    /// Counts the records handed one by one and in spans.
    #[derive(Default)]
    struct Ways {
        one_by_one: usize,
        in_spans: usize,
    }

    impl RecordSink for Ways {
        fn record(&mut self, _: Record<'_>, _: Resume) -> std::io::Result<ControlFlow<()>> {
            self.one_by_one += 1;
            Ok(ControlFlow::Continue(()))
        }

        fn span(&mut self, span: &Span<'_>) -> std::io::Result<ControlFlow<()>> {
            self.in_spans += span.len();
            Ok(ControlFlow::Continue(()))
        }
    }

    /// Without heads, Lance's batches of valid records go on whole; a
    /// batch holding a failed row goes row by row, and heads asked for
    /// make every batch go row by row.
    #[test]
    fn batches_of_valid_records_go_on_whole_when_no_head_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("a.jsonl");
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("{{\"n\":{i}}}\n"));
        }
        text.push_str("{\"torn\":\n");
        std::fs::write(&source, text).unwrap();
        let leaf = dir.path().join("leaf");
        let store = CompactJsonlStore::default();
        store
            .import_path(&source, &leaf, ImportMode::Create)
            .unwrap();
        let read = |wanted: Wanted| {
            let opened = Dir::open_root(&leaf).unwrap();
            let mut ways = Ways::default();
            let flow = store
                .read_rows(&opened, None, Resume::default(), &wanted, &mut ways)
                .unwrap();
            assert!(flow.is_continue());
            (ways.one_by_one, ways.in_spans)
        };
        let plain = Wanted {
            heads: false,
            ..Wanted::default()
        };
        let (one_by_one, in_spans) = read(plain);
        assert_eq!(one_by_one + in_spans, 20_000, "the failed row is left out");
        assert_eq!(in_spans, 2 * BATCH_ROWS, "the two whole batches");
        assert_eq!(read(Wanted::default()), (20_000, 0));
    }

    /// The viewer's rows are read with the viewer's credentials: a data
    /// file the viewer may not read fails in the kernel even when no check
    /// before the read looked at it (as after a swap).
    #[test]
    fn a_viewers_rows_are_read_with_the_viewers_credentials() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: switching credentials needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let source = dir.path().join("a.jsonl");
        std::fs::write(&source, "{\"a\":1}\n{\"a\":2}\n").unwrap();
        let leaf = dir.path().join("leaf");
        let store = CompactJsonlStore::default();
        store
            .import_path(&source, &leaf, ImportMode::Create)
            .unwrap();
        let nobody = Arc::new(Viewer {
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        });
        let read_as = |viewer: Option<Arc<Viewer>>| {
            let opened = Dir::open_root(&leaf).unwrap().viewed_by(viewer).unwrap();
            let mut count = Count(0);
            store
                .read_rows(
                    &opened,
                    None,
                    Resume::default(),
                    &Wanted::default(),
                    &mut count,
                )
                .map(|_| count.0)
        };
        assert_eq!(read_as(Some(Arc::clone(&nobody))).unwrap(), 2);
        for entry in std::fs::read_dir(leaf.join("data")).unwrap() {
            let path = entry.unwrap().path();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let refused = read_as(Some(nobody)).unwrap_err();
        assert!(
            refused.message.to_lowercase().contains("permission denied"),
            "{}",
            refused.render()
        );
        assert_eq!(
            read_as(None).unwrap(),
            2,
            "the daemon's own reads are unchanged"
        );
    }
}
