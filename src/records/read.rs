//! Reading the records of a record file back out, one at a time, each as
//! it is stored, with the place to resume after it.
//!
//! The records are the ones counting counts and importing imports: the
//! non-blank segments of a line or packed stream (trimmed of surrounding
//! ASCII whitespace, except a segment too large to buffer, which is given
//! whole, as an import stores it), or the elements of a `.json` document.
//! Each comes with a [`Resume`]: reading again from there yields exactly
//! the records after it, which is what lets a reader of a long stream
//! (the mount's `.records`) restart near any offset instead of at the top.

use std::io::{self, Read};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::parallel::RangeReader;
use super::read_parallel::Ended;
use super::scan::{Landmarks, RecordScanner};
use super::segments::{OversizeSegment, SegmentVisitor, for_each_segment_sized};
use super::timestamp::Micros;
use super::{ProbedSegment, RecordFormat};
use crate::warehouse::Blob;

/// A `.json` document is read whole; larger ones should be JSON Lines.
pub const MAX_JSON_DOCUMENT: u64 = 256 << 20;

/// Where reading a source can start again. For a line or packed file:
/// the byte offset of the next segment and the records before it; for a
/// `.json` document: the elements before it; for a leaf: which of its
/// files or rows (`part`) and where in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resume {
    pub part: u64,
    pub offset: u64,
    pub line: u64,
}

/// What a reader wants of a source's records, for a store that can leave
/// the rest out before reading it (a Lance scan filters and projects).
/// Whatever a store does not leave out, the reader still checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// Failed records too.
    pub failed: bool,
    /// The records' bytes (a count or a query of other columns needs none).
    pub bodies: bool,
    /// Where each record came from and its time (`_file_`, `line`,
    /// `timestamp`): a plain listing of valid records needs none of them.
    /// Without, a store may give them as unknown (`""`, 0, none).
    pub heads: bool,
    /// Only records at or after this time.
    pub since: Option<Micros>,
    /// Only records before this time.
    pub until: Option<Micros>,
}

impl Default for Wanted {
    fn default() -> Self {
        Wanted {
            failed: false,
            bodies: true,
            heads: true,
            since: None,
            until: None,
        }
    }
}

/// One record as read from where it is stored.
pub struct Record<'a> {
    /// The file inside the source the record belongs to: empty for a
    /// record file source (the record belongs to the source itself), a
    /// generation's file for a storyline leaf, the `_file_` column for a
    /// compact-jsonl leaf.
    pub file: &'a str,
    /// 1-based ordinal of the record in its file.
    pub line: u64,
    pub timestamp: Option<Micros>,
    /// Not valid JSON: its raw text is the body.
    pub failed: bool,
    pub body: Body<'a>,
    /// Where its run-summary fields are in `body`, when the read found
    /// them (a record scanned as it was read).
    pub landmarks: Option<Landmarks>,
}

/// A record's stored bytes.
pub enum Body<'a> {
    Bytes(&'a [u8]),
    /// Too large to hold: `len` bytes to be read from `reader`.
    Stream {
        reader: &'a mut dyn Read,
        len: u64,
    },
}

/// Receives records in order. Returning `Break` stops the read.
pub trait RecordSink {
    /// `next`: resuming there reads the records after this one.
    fn record(&mut self, record: Record<'_>, next: Resume) -> io::Result<ControlFlow<()>>;

    /// Records a store holds back to back, handed on in one call; by
    /// default one by one to [`RecordSink::record`].
    fn span(&mut self, span: &Span<'_>) -> io::Result<ControlFlow<()>> {
        span.each(|record, next| self.record(record, next))
    }

    /// Whether records should come with their [`Landmarks`] (finding them
    /// costs a scan a little; only a run summary reads them).
    fn wants_landmarks(&self) -> bool {
        false
    }
}

/// Valid records held back to back in one buffer, as a columnar store
/// reads them: handed on in one call rather than one call each. None is
/// failed or streamed, and none says where it came from or its time (a
/// store makes spans only when those were not asked for). The record
/// after `i` records resumes at the first's [`Resume`] with its offset
/// `i` rows on.
#[derive(Clone, Copy)]
pub struct Span<'a> {
    text: &'a [u8],
    /// Where each record starts in `text`, and where the last ends.
    bounds: &'a [i64],
    first: Resume,
}

impl<'a> Span<'a> {
    /// The records `text[bounds[i]..bounds[i + 1]]`; `first` resumes after
    /// the first of them. A bound outside `text` reads as an empty record.
    pub fn new(text: &'a [u8], bounds: &'a [i64], first: Resume) -> Span<'a> {
        Span {
            text,
            bounds,
            first,
        }
    }

    pub fn len(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of record `i`.
    pub fn bytes(&self, i: usize) -> &'a [u8] {
        self.between(self.bounds[i], self.bounds[i + 1])
    }

    /// The bytes from the first record's start to the last one's end.
    pub fn all_bytes(&self) -> &'a [u8] {
        match (self.bounds.first(), self.bounds.last()) {
            (Some(&start), Some(&end)) => self.between(start, end),
            _ => &[],
        }
    }

    fn between(&self, start: i64, end: i64) -> &'a [u8] {
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            return &[];
        };
        self.text.get(start..end).unwrap_or(&[])
    }

    /// Where reading resumes after record `i`.
    pub fn next(&self, i: usize) -> Resume {
        Resume {
            offset: self.first.offset + i as u64,
            ..self.first
        }
    }

    /// Its first `n` records.
    pub fn prefix(&self, n: usize) -> Span<'a> {
        if self.bounds.is_empty() {
            return *self;
        }
        Span {
            bounds: &self.bounds[..=n.min(self.len())],
            ..*self
        }
    }

    /// Hands its records to `each` one at a time, until one says `Break`.
    pub fn each(
        &self,
        mut each: impl FnMut(Record<'a>, Resume) -> io::Result<ControlFlow<()>>,
    ) -> io::Result<ControlFlow<()>> {
        for i in 0..self.len() {
            let record = Record {
                file: "",
                line: 0,
                timestamp: None,
                failed: false,
                body: Body::Bytes(self.bytes(i)),
                landmarks: None,
            };
            if each(record, self.next(i))?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Reads the records of an open record file from `from`, in order, in
/// its first `limit` bytes at most (a snapshot reads a growing file as it
/// was when it was taken). `Break` when the sink stopped the read.
pub fn read_file(
    file: &Blob,
    format: RecordFormat,
    name: &str,
    from: Resume,
    limit: Option<u64>,
    sink: &mut dyn RecordSink,
) -> io::Result<ControlFlow<()>> {
    let size = file.size()?.min(limit.unwrap_or(u64::MAX));
    if format == RecordFormat::Json {
        return read_document(file, size, name, from, sink);
    }
    if from.offset >= size {
        return Ok(ControlFlow::Continue(()));
    }
    let mut from = from;
    // A remote file streams best read front to back by one reader.
    let threads = match file.local() {
        Some(_) => parallel_threads(size - from.offset),
        None => 1,
    };
    // A file that shrank below the offset reads as ended.
    if threads > 1 {
        match super::read_parallel::read_parallel(file, name, from, size, threads, sink)? {
            Ended::Stopped => return Ok(ControlFlow::Break(())),
            Ended::Done => return Ok(ControlFlow::Continue(())),
            // A segment longer than a chunk: read on serially.
            Ended::Oversize(resume) => from = resume,
        }
    }
    read_serial(file, name, from, size, sink)
}

/// Reads the records of `[from.offset, size)` on this thread alone.
pub(super) fn read_serial(
    file: &Blob,
    name: &str,
    from: Resume,
    size: u64,
    sink: &mut dyn RecordSink,
) -> io::Result<ControlFlow<()>> {
    let mut reader = SegmentReader {
        file,
        name,
        part: from.part,
        offset: from.offset,
        line: from.line,
        scanner: RecordScanner::default(),
        landmarks: sink.wants_landmarks(),
        sink,
        stopped: false,
    };
    let from_offset = RangeReader {
        file,
        pos: from.offset,
        end: size,
    };
    let result = for_each_segment_sized(from_offset, (size - from.offset) as usize, &mut reader);
    match result {
        Err(e) if reader.stopped && e.get_ref().is_some_and(|e| e.is::<Stopped>()) => {
            Ok(ControlFlow::Break(()))
        }
        Err(e) => Err(e),
        Ok(()) => Ok(ControlFlow::Continue(())),
    }
}

/// Files with at least this much left to read are validated on several
/// threads.
const PARALLEL_MIN_BYTES: u64 = 16 << 20;

/// The most scanning threads one read may use (see [`limit_threads`]).
static MAX_THREADS: AtomicUsize = AtomicUsize::new(4);

/// Caps the scanning threads of every later read in this process: a
/// daemon serving many readers at once keeps each to one thread and the
/// memory of its read-ahead.
pub fn limit_threads(threads: usize) {
    MAX_THREADS.store(threads.max(1), Ordering::Relaxed);
}

thread_local! {
    /// This thread's reads are made on it alone (see [`serially`]).
    static SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every record file it reads on this thread read on this
/// thread alone: for a caller that already reads several files at once,
/// one per thread, where scanning threads of each would only contend.
pub fn serially<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Scanning threads worth using for `left` bytes: one below
/// [`PARALLEL_MIN_BYTES`] or within [`serially`], else one per core, at
/// most the limit.
fn parallel_threads(left: u64) -> usize {
    if left < PARALLEL_MIN_BYTES || SERIAL.with(std::cell::Cell::get) {
        return 1;
    }
    let cap = MAX_THREADS.load(Ordering::Relaxed);
    std::thread::available_parallelism().map_or(1, |n| n.get().min(cap))
}

/// `len` bytes of a file from `pos`.
struct FileRange<'f> {
    file: &'f Blob,
    pos: u64,
    end: u64,
}

impl Read for FileRange<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(out.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut out[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the record file shrank while it was read",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// The marker error a segment visitor returns to stop the splitter.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped by the reader")
    }
}

impl std::error::Error for Stopped {}

struct SegmentReader<'a> {
    file: &'a Blob,
    name: &'a str,
    part: u64,
    /// Offset of the segment about to be visited.
    offset: u64,
    /// Records before it.
    line: u64,
    scanner: RecordScanner,
    sink: &'a mut dyn RecordSink,
    stopped: bool,
    /// The sink wants each record's landmarks.
    landmarks: bool,
}

/// A record's scan: `None` when it is not valid JSON, else its timestamp;
/// its landmarks when `landmarks` asks for them.
pub(super) fn scanned(
    scanner: &mut RecordScanner,
    text: &[u8],
    landmarks: bool,
) -> (Option<Option<Micros>>, Option<Landmarks>) {
    if !landmarks {
        return (scanner.scan(text), None);
    }
    match scanner.facts(text) {
        Some(facts) => (Some(facts.timestamp()), Some(facts.landmarks())),
        None => (None, None),
    }
}

impl SegmentReader<'_> {
    fn deliver(&mut self, record: Record<'_>, next: u64) -> io::Result<()> {
        let resume = Resume {
            part: self.part,
            offset: next,
            line: self.line,
        };
        if self.sink.record(record, resume)?.is_break() {
            self.stopped = true;
            return Err(io::Error::other(Stopped));
        }
        Ok(())
    }
}

impl SegmentVisitor for SegmentReader<'_> {
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()> {
        let start = self.offset;
        // Each segment is followed by exactly one separator (the last one
        // perhaps by none, when resuming past the end reads nothing).
        let next = start + segment.len() as u64 + 1;
        self.offset = next;
        let text = segment.trim_ascii();
        if text.is_empty() {
            return Ok(());
        }
        self.line += 1;
        let (timestamp, landmarks) = scanned(&mut self.scanner, text, self.landmarks);
        let record = Record {
            file: self.name,
            line: self.line,
            timestamp: timestamp.flatten(),
            failed: timestamp.is_none(),
            body: Body::Bytes(text),
            landmarks,
        };
        self.deliver(record, next)
    }

    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()> {
        // Validate it streaming while counting its length, then hand its
        // bytes over from the file itself.
        let start = self.offset;
        let mut counted = Counted {
            inner: &mut *segment,
            n: 0,
        };
        let probed = super::probe_stream(&mut counted);
        let probed_len = counted.n;
        // A read error inside the segment is that, not bad JSON.
        if let Some(e) = segment.take_io_error() {
            return Err(e);
        }
        let probed = probed?;
        let len = probed_len + io::copy(segment, &mut io::sink())?;
        if let Some(e) = segment.take_io_error() {
            return Err(e);
        }
        let next = start + len + 1;
        self.offset = next;
        let Some(probed) = probed else {
            return Ok(());
        };
        self.line += 1;
        let (failed, timestamp) = match probed {
            ProbedSegment::Record(ts) => (false, ts),
            ProbedSegment::Failed => (true, None),
        };
        let mut range = FileRange {
            file: self.file,
            pos: start,
            end: start + len,
        };
        let record = Record {
            file: self.name,
            line: self.line,
            timestamp,
            failed,
            body: Body::Stream {
                reader: &mut range,
                len,
            },
            landmarks: None,
        };
        self.deliver(record, next)
    }
}

struct Counted<'a, R: Read> {
    inner: &'a mut R,
    n: u64,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.n += n as u64;
        Ok(n)
    }
}

/// The records of a `.json` document as an import stores them: each
/// element of a top-level array (then the rest of the text, when the
/// document stops being valid JSON), or the whole document.
pub fn document_records(text: &[u8]) -> Vec<&[u8]> {
    let document = text.trim_ascii();
    if document.is_empty() {
        return Vec::new();
    }
    if document.first() != Some(&b'[') {
        return vec![document];
    }
    let (mut elements, rest) = super::split_json_array(document);
    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
        elements.push(rest);
    }
    elements
}

fn read_document(
    file: &Blob,
    size: u64,
    name: &str,
    from: Resume,
    sink: &mut dyn RecordSink,
) -> io::Result<ControlFlow<()>> {
    if size > MAX_JSON_DOCUMENT {
        return Err(io::Error::other(format!(
            "a .json document over {} MiB is not read record by record; convert it to JSON Lines",
            MAX_JSON_DOCUMENT >> 20
        )));
    }
    let mut text = Vec::with_capacity(size as usize);
    RangeReader {
        file,
        pos: 0,
        end: size,
    }
    .read_to_end(&mut text)?;
    let mut scanner = RecordScanner::default();
    for (index, element) in document_records(&text)
        .into_iter()
        .enumerate()
        .skip(from.offset as usize)
    {
        let (timestamp, landmarks) = scanned(&mut scanner, element, sink.wants_landmarks());
        let record = Record {
            file: name,
            line: index as u64 + 1,
            timestamp: timestamp.flatten(),
            failed: timestamp.is_none(),
            body: Body::Bytes(element),
            landmarks,
        };
        let next = Resume {
            part: from.part,
            offset: index as u64 + 1,
            line: index as u64 + 1,
        };
        if sink.record(record, next)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Every record as (line, failed, text, resume).
    #[derive(Default)]
    struct Collect(Vec<(u64, bool, Vec<u8>, Resume)>, Option<usize>);

    impl RecordSink for Collect {
        fn record(&mut self, record: Record<'_>, next: Resume) -> io::Result<ControlFlow<()>> {
            let bytes = match record.body {
                Body::Bytes(b) => b.to_vec(),
                Body::Stream { reader, len } => {
                    let mut v = Vec::new();
                    reader.read_to_end(&mut v)?;
                    assert_eq!(v.len() as u64, len);
                    v
                }
            };
            self.0.push((record.line, record.failed, bytes, next));
            Ok(match self.1 {
                Some(stop) if self.0.len() >= stop => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            })
        }
    }

    fn file_with(bytes: &[u8]) -> Blob {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        Blob::Local(f)
    }

    fn read_all(file: &Blob, format: RecordFormat, from: Resume) -> Collect {
        let mut sink = Collect::default();
        let _ = read_file(file, format, "", from, None, &mut sink).unwrap();
        sink
    }

    #[test]
    fn records_come_out_trimmed_with_failures_marked() {
        let f = file_with(b"{\"a\":1}\r\n\n  \x1e{\"a\":\n[2] \n");
        let got = read_all(&f, RecordFormat::Jsonl, Resume::default());
        let texts: Vec<(u64, bool, &[u8])> =
            got.0.iter().map(|r| (r.0, r.1, r.2.as_slice())).collect();
        assert_eq!(
            texts,
            vec![
                (1, false, &b"{\"a\":1}"[..]),
                (2, true, &b"{\"a\":"[..]),
                (3, false, &b"[2]"[..]),
            ]
        );
    }

    #[test]
    fn resuming_after_any_record_reads_exactly_the_rest() {
        let input = b"{\"a\":1}\n\n{\"b\":2}\x1e{torn\n{\"c\":3}";
        let f = file_with(input);
        let all = read_all(&f, RecordFormat::Jsonl, Resume::default());
        assert_eq!(all.0.len(), 4);
        for (i, record) in all.0.iter().enumerate() {
            let rest = read_all(&f, RecordFormat::Jsonl, record.3);
            let expected: Vec<_> = all.0[i + 1..].iter().map(|r| (r.0, r.2.clone())).collect();
            let got: Vec<_> = rest.0.iter().map(|r| (r.0, r.2.clone())).collect();
            assert_eq!(got, expected, "after record {i}");
        }
    }

    #[test]
    fn a_sink_can_stop_the_read() {
        let f = file_with(b"1\n2\n3\n");
        let mut sink = Collect(Vec::new(), Some(2));
        let flow = read_file(
            &f,
            RecordFormat::Jsonl,
            "",
            Resume::default(),
            None,
            &mut sink,
        )
        .unwrap();
        assert!(flow.is_break());
        assert_eq!(sink.0.len(), 2);
    }

    #[test]
    fn oversize_records_stream_from_the_file_untrimmed() {
        let big = format!(" {{\"pad\":\"{}\"}}", "x".repeat(17 << 20));
        let input = format!("{{\"a\":1}}\n{big}\n{{\"b\":2}}\n");
        let f = file_with(input.as_bytes());
        let got = read_all(&f, RecordFormat::Jsonl, Resume::default());
        assert_eq!(got.0.len(), 3);
        assert_eq!(got.0[1].2, big.as_bytes());
        assert!(!got.0[1].1);
        let rest = read_all(&f, RecordFormat::Jsonl, got.0[1].3);
        assert_eq!(rest.0.len(), 1);
        assert_eq!(rest.0[0].2, b"{\"b\":2}");
    }

    #[test]
    fn json_documents_give_elements_and_resume_by_index() {
        let f = file_with(b"[{\"a\":1},\n {\"b\":\n 2}, {\"c\":");
        let got = read_all(&f, RecordFormat::Json, Resume::default());
        let texts: Vec<&[u8]> = got.0.iter().map(|r| r.2.as_slice()).collect();
        assert_eq!(texts, vec![&b"{\"a\":1}"[..], b"{\"b\":\n 2}", b"{\"c\":"]);
        assert!(got.0[2].1, "the unfinished rest is a failed record");
        let rest = read_all(&f, RecordFormat::Json, got.0[0].3);
        assert_eq!(rest.0.len(), 2);
        assert_eq!(rest.0[0].0, 2);
    }
}
