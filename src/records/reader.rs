//! Streaming record counting for loose record files and shards.
//!
//! A line file (`.jsonl`, `.ndjson`) and a packed shard (`.jsonseq`) are
//! read the same way: the byte stream is split on both `\n` and U+001E (the
//! JSON text sequence separator), so a reader never needs to know which
//! writer produced a file, and a torn record — a writer killed mid-record —
//! is ended by the next separator of either kind. Every non-blank segment is
//! a record; one that is not valid JSON is a *failed* record, counted and
//! skipped, never fatal. JSON strings cannot hold a raw newline or U+001E,
//! so splitting on them never cuts a valid record.
//!
//! Counting streams through a fixed buffer, so memory stays constant however
//! large the file is. A single segment too large to buffer (a multi-GiB file
//! with no separator) is validated by a streaming parser instead of being
//! held. Large files are split at separators into ranges that are counted
//! on several threads, which is what lets counting keep up with the disk.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::scan::RecordScanner;
use super::timestamp::{self, Micros};

/// The record separator of packed (`.jsonseq`) shards, U+001E.
pub const RECORD_SEPARATOR: u8 = 0x1E;

/// Bytes read per call.
const READ_CHUNK: usize = 1 << 20;
/// A segment larger than this is parsed by the streaming parser instead of
/// being buffered whole.
const MAX_BUFFERED_SEGMENT: usize = 16 << 20;
/// Files at least this large are counted on several threads.
const PARALLEL_MIN_BYTES: u64 = 32 << 20;
/// More threads than this gain nothing against one disk.
const MAX_THREADS: usize = 4;

/// The on-disk shape of a record file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordFormat {
    /// One record per line.
    Jsonl,
    /// One record per line (another name for the same thing).
    Ndjson,
    /// Packed: each record preceded by U+001E.
    Jsonseq,
    /// One JSON value; a top-level array is one record per element.
    Json,
}

impl RecordFormat {
    /// The record format of a file name, or `None` when the file is not a
    /// record source. Sidecar files (`chronicle.manifest`, `*.idx`,
    /// `*.indexes.json`) are never record sources.
    pub fn from_name(name: &str) -> Option<RecordFormat> {
        let (stem, ext) = name.rsplit_once('.')?;
        if stem.is_empty() {
            return None;
        }
        match ext {
            "jsonl" => Some(RecordFormat::Jsonl),
            "ndjson" => Some(RecordFormat::Ndjson),
            "jsonseq" => Some(RecordFormat::Jsonseq),
            "json" if !stem.ends_with(".indexes") => Some(RecordFormat::Json),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecordFormat::Jsonl => "jsonl",
            RecordFormat::Ndjson => "ndjson",
            RecordFormat::Jsonseq => "jsonseq",
            RecordFormat::Json => "json",
        }
    }
}

/// What counting a record file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Every record, failed ones included.
    pub record_count: u64,
    /// Records that are not valid JSON (torn or corrupt).
    pub failed_count: u64,
    /// Earliest top-level `timestamp` / `ts` seen.
    pub min_timestamp: Option<Micros>,
    /// Latest top-level `timestamp` / `ts` seen.
    pub max_timestamp: Option<Micros>,
}

impl RecordStats {
    fn add_record(&mut self, ts: Option<Micros>) {
        self.record_count += 1;
        self.note_timestamps(ts, ts);
    }

    fn add_failed(&mut self) {
        self.record_count += 1;
        self.failed_count += 1;
    }

    fn note_timestamps(&mut self, min: Option<Micros>, max: Option<Micros>) {
        self.min_timestamp = match (self.min_timestamp, min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max_timestamp = match (self.max_timestamp, max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// Adds another count into this one.
    pub fn merge(&mut self, other: &RecordStats) {
        self.record_count = self.record_count.saturating_add(other.record_count);
        self.failed_count = self.failed_count.saturating_add(other.failed_count);
        self.note_timestamps(other.min_timestamp, other.max_timestamp);
    }
}

/// Counts the records of the file at `path` (a path named from outside).
pub fn count_file(path: &Path, format: RecordFormat) -> io::Result<RecordStats> {
    count_open(File::open(path)?, format)
}

/// Counts the records of an open file.
pub fn count_open(file: File, format: RecordFormat) -> io::Result<RecordStats> {
    advise_sequential(&file);
    if format == RecordFormat::Json {
        return count_json_document(file);
    }
    let size = file.metadata()?.len();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get().min(MAX_THREADS))
        .unwrap_or(1);
    if size >= PARALLEL_MIN_BYTES && threads > 1 {
        count_segments_parallel(&file, size, threads)
    } else {
        count_segments_sized(file, usize::try_from(size).unwrap_or(usize::MAX))
    }
}

/// Tells the kernel the whole file will be read front to back, which
/// widens its read-ahead. Only a hint: a failure changes nothing.
fn advise_sequential(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise only reads the descriptor number, which `file`
    // keeps open for the duration of the call.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
    }
}

/// Receives the segments of a line or packed stream, in order.
pub trait SegmentVisitor {
    /// A segment held in memory, without its separator (it may be blank).
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()>;

    /// A segment too large to buffer, to be read from `segment` (which ends
    /// at the separator). Whatever the visitor leaves unread is skipped.
    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()>;
}

/// Splits a line or packed stream on `\n` and U+001E and hands each segment
/// to `visitor`, streaming through a fixed buffer.
pub fn for_each_segment<R: Read, V: SegmentVisitor>(reader: R, visitor: &mut V) -> io::Result<()> {
    for_each_segment_sized(reader, usize::MAX, visitor)
}

/// [`for_each_segment`] for a stream of about `size` bytes: the buffer is
/// no larger than the stream needs (small files are read through a small
/// buffer; a longer stream or segment still works, the buffer cycles or
/// grows).
pub fn for_each_segment_sized<R: Read, V: SegmentVisitor>(
    mut reader: R,
    size: usize,
    visitor: &mut V,
) -> io::Result<()> {
    let chunk = size
        .saturating_add(1)
        .clamp(4096, READ_CHUNK)
        .next_power_of_two()
        .min(READ_CHUNK);
    let mut buf = vec![0u8; chunk];
    // buf[start..end] is the unfinished segment; buf[start..scanned] is
    // known to hold no separator.
    let (mut start, mut scanned, mut end) = (0usize, 0usize, 0usize);
    loop {
        while let Some(i) = memchr::memchr2(b'\n', RECORD_SEPARATOR, &buf[scanned..end]) {
            let sep = scanned + i;
            visitor.buffered(&buf[start..sep])?;
            start = sep + 1;
            scanned = start;
        }
        scanned = end;
        if start > 0 {
            buf.copy_within(start..end, 0);
            end -= start;
            scanned = end;
            start = 0;
        }
        if end == buf.len() {
            if buf.len() >= MAX_BUFFERED_SEGMENT {
                let mut segment = OversizeSegment::new(&buf[..end], &mut reader);
                visitor.oversize(&mut segment)?;
                io::copy(&mut segment, &mut io::sink())?;
                if let Some(err) = segment.io_error.take() {
                    return Err(err);
                }
                if segment.at_eof {
                    return Ok(());
                }
                let rest = segment.chunk[segment.pos..segment.len].to_vec();
                buf[..rest.len()].copy_from_slice(&rest);
                (start, scanned, end) = (0, 0, rest.len());
                continue;
            }
            buf.resize((buf.len() * 2).min(MAX_BUFFERED_SEGMENT), 0);
        }
        let n = read_retrying(&mut reader, &mut buf[end..])?;
        if n == 0 {
            return visitor.buffered(&buf[start..end]);
        }
        end += n;
    }
}

/// Counts the records of a line or packed stream (split on `\n` and
/// U+001E).
pub fn count_segments<R: Read>(reader: R) -> io::Result<RecordStats> {
    count_segments_sized(reader, usize::MAX)
}

/// [`count_segments`] of a stream of about `size` bytes.
fn count_segments_sized<R: Read>(reader: R, size: usize) -> io::Result<RecordStats> {
    let mut counter = SegmentCounter::default();
    for_each_segment_sized(reader, size, &mut counter)?;
    Ok(counter.stats)
}

#[derive(Default)]
struct SegmentCounter {
    stats: RecordStats,
    scanner: RecordScanner,
}

impl SegmentVisitor for SegmentCounter {
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()> {
        let segment = segment.trim_ascii();
        if !segment.is_empty() {
            match self.scanner.scan(segment) {
                Some(ts) => self.stats.add_record(ts),
                None => self.stats.add_failed(),
            }
        }
        Ok(())
    }

    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()> {
        match segment.probe()? {
            Some(ProbedSegment::Record(ts)) => self.stats.add_record(ts),
            Some(ProbedSegment::Failed) => self.stats.add_failed(),
            None => {}
        }
        Ok(())
    }
}

fn read_retrying<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// What validating an oversize segment found.
pub enum ProbedSegment {
    /// Valid JSON, with its top-level timestamp if any.
    Record(Option<Micros>),
    /// Not valid JSON (or not UTF-8).
    Failed,
}

/// A segment too large to buffer: `head` (its start, with no separator in
/// it), then `inner` up to the next separator.
pub struct OversizeSegment<'a> {
    head: &'a [u8],
    inner: &'a mut dyn Read,
    chunk: Vec<u8>,
    pos: usize,
    len: usize,
    /// Index in `chunk` of the next separator, once the chunk was searched.
    separator_at: Option<usize>,
    finished: bool,
    at_eof: bool,
    /// An I/O error from `inner`, kept so it is not mistaken for bad JSON.
    io_error: Option<io::Error>,
}

impl<'a> OversizeSegment<'a> {
    fn new(head: &'a [u8], inner: &'a mut dyn Read) -> Self {
        OversizeSegment {
            head,
            inner,
            chunk: vec![0; READ_CHUNK],
            pos: 0,
            len: 0,
            separator_at: None,
            finished: false,
            at_eof: false,
            io_error: None,
        }
    }

    /// Reads the rest of the segment through a streaming JSON parser.
    /// `None` when the segment was blank.
    pub fn probe(&mut self) -> io::Result<Option<ProbedSegment>> {
        let probed = probe_stream(&mut *self);
        match self.io_error.take() {
            Some(err) => Err(err),
            None => probed,
        }
    }
}

impl Read for OversizeSegment<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.finished || out.is_empty() {
            return Ok(0);
        }
        let source = if !self.head.is_empty() {
            let n = self.head.len().min(out.len());
            let (taken, rest) = self.head.split_at(n);
            self.head = rest;
            taken
        } else {
            if self.pos == self.len {
                match read_retrying(self.inner, &mut self.chunk) {
                    Ok(0) => {
                        self.finished = true;
                        self.at_eof = true;
                        return Ok(0);
                    }
                    Ok(n) => {
                        self.pos = 0;
                        self.len = n;
                        self.separator_at =
                            memchr::memchr2(b'\n', RECORD_SEPARATOR, &self.chunk[..n]);
                    }
                    Err(e) => {
                        self.finished = true;
                        self.at_eof = true;
                        let kind = e.kind();
                        self.io_error = Some(e);
                        return Err(io::Error::from(kind));
                    }
                }
            }
            let limit = self.separator_at.unwrap_or(self.len);
            let n = (limit - self.pos).min(out.len());
            let taken = &self.chunk[self.pos..self.pos + n];
            self.pos += n;
            if Some(self.pos) == self.separator_at {
                self.pos += 1;
                self.finished = true;
            }
            taken
        };
        out[..source.len()].copy_from_slice(source);
        Ok(source.len())
    }
}

/// Splits `file` at separators into about `parts` ranges and counts each
/// on its own thread.
fn count_segments_parallel(file: &File, size: u64, parts: usize) -> io::Result<RecordStats> {
    let mut cuts = vec![0u64];
    for k in 1..parts as u64 {
        let nominal = size * k / parts as u64;
        let last = *cuts.last().expect("cuts starts with 0");
        if nominal <= last {
            continue;
        }
        let cut = next_cut(file, nominal, size)?;
        if cut > last && cut < size {
            cuts.push(cut);
        }
    }
    cuts.push(size);
    std::thread::scope(|scope| {
        let workers: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let range = RangeReader {
                    file,
                    pos: w[0],
                    end: w[1],
                };
                scope.spawn(move || count_segments(range))
            })
            .collect();
        let mut total = RecordStats::default();
        for worker in workers {
            let part = worker
                .join()
                .map_err(|_| io::Error::other("a counting thread panicked"))??;
            total.merge(&part);
        }
        Ok(total)
    })
}

/// The offset just past the first separator at or after `from`, or `size`.
fn next_cut(file: &File, from: u64, size: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = from;
    while pos < size {
        let n = file.read_at(&mut buf, pos)?;
        if n == 0 {
            break;
        }
        if let Some(i) = memchr::memchr2(b'\n', RECORD_SEPARATOR, &buf[..n]) {
            return Ok(pos + i as u64 + 1);
        }
        pos += n as u64;
    }
    Ok(size)
}

/// `pread`-based reader over one byte range of a file, so several threads
/// can read one file without sharing a cursor.
struct RangeReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(out.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut out[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Validates one record read from `reader` to its end with a streaming
/// parser. `None` when the stream is blank.
pub fn probe_stream<R: Read>(reader: R) -> io::Result<Option<ProbedSegment>> {
    let mut input = WhitespaceTracker::new(reader);
    let parsed = {
        let mut de = serde_json::Deserializer::from_reader(BufReader::new(&mut input));
        Probe::deserialize(&mut de).and_then(|probe| de.end().map(|()| probe))
    };
    io::copy(&mut input, &mut io::sink())?;
    if let Some(err) = input.io_error.take() {
        return Err(err);
    }
    Ok(match parsed {
        Ok(probe) if input.utf8.is_valid() => Some(ProbedSegment::Record(probe.0)),
        Err(_) if !input.saw_content => None,
        _ => Some(ProbedSegment::Failed),
    })
}

/// Splits a JSON array document (starting with `[`) into the text of its
/// elements, with serde_json deciding where each element ends (so the
/// elements are the ones [`count_json_document`] counts). When the document
/// stops being valid JSON, the elements read so far are returned with the
/// rest of the text after them.
pub fn split_json_array(document: &[u8]) -> (Vec<&[u8]>, Option<&[u8]>) {
    let skip_ws = |mut i: usize| {
        while document.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let mut elements = Vec::new();
    let mut i = skip_ws(1);
    if document.get(i) == Some(&b']') {
        let after = skip_ws(i + 1);
        return (
            elements,
            (after < document.len()).then(|| &document[after..]),
        );
    }
    loop {
        let mut values =
            serde_json::Deserializer::from_slice(&document[i..]).into_iter::<IgnoredAny>();
        if !matches!(values.next(), Some(Ok(_))) {
            break;
        }
        let end = i + values.byte_offset();
        elements.push(&document[i..end]);
        i = skip_ws(end);
        match document.get(i) {
            Some(b',') => i = skip_ws(i + 1),
            Some(b']') => {
                let after = skip_ws(i + 1);
                if after == document.len() {
                    return (elements, None);
                }
                i = after;
                break;
            }
            _ => break,
        }
    }
    (elements, Some(&document[i.min(document.len())..]))
}

/// Counts a `.json` file: one value, or one record per element of a
/// top-level array. A document that stops being valid JSON keeps the
/// elements read before the error and counts one failed record for the rest.
pub fn count_json_document<R: Read>(reader: R) -> io::Result<RecordStats> {
    let mut stats = RecordStats::default();
    let mut input = WhitespaceTracker::new(reader);
    let parsed = {
        let mut de =
            serde_json::Deserializer::from_reader(BufReader::with_capacity(READ_CHUNK, &mut input));
        DocumentSeed(&mut stats)
            .deserialize(&mut de)
            .and_then(|()| de.end())
    };
    if let Some(err) = input.io_error.take() {
        return Err(err);
    }
    if (parsed.is_err() || !input.utf8.is_valid()) && input.saw_content {
        stats.add_failed();
    }
    Ok(stats)
}

/// Remembers whether any non-whitespace byte went through, so a blank
/// `.json` file counts as zero records rather than one failed record, and
/// whether all of it was UTF-8.
struct WhitespaceTracker<R> {
    inner: R,
    saw_content: bool,
    utf8: Utf8Validator,
    io_error: Option<io::Error>,
}

impl<R> WhitespaceTracker<R> {
    fn new(inner: R) -> Self {
        WhitespaceTracker {
            inner,
            saw_content: false,
            utf8: Utf8Validator::default(),
            io_error: None,
        }
    }
}

impl<R: Read> Read for WhitespaceTracker<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match read_retrying(&mut self.inner, out) {
            Ok(n) => {
                if !self.saw_content {
                    self.saw_content = out[..n].iter().any(|b| !b.is_ascii_whitespace());
                }
                self.utf8.feed(&out[..n]);
                Ok(n)
            }
            Err(e) => {
                let kind = e.kind();
                self.io_error = Some(e);
                Err(io::Error::from(kind))
            }
        }
    }
}

/// UTF-8 validation of a stream fed in arbitrary chunks: a character cut
/// by a chunk boundary is carried to the next chunk.
#[derive(Default)]
struct Utf8Validator {
    pending: [u8; 4],
    pending_len: usize,
    invalid: bool,
}

impl Utf8Validator {
    fn feed(&mut self, mut input: &[u8]) {
        if self.invalid || input.is_empty() {
            return;
        }
        if self.pending_len > 0 {
            let take = (4 - self.pending_len).min(input.len());
            let mut joined = [0u8; 8];
            joined[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
            joined[self.pending_len..self.pending_len + take].copy_from_slice(&input[..take]);
            let total = self.pending_len + take;
            match std::str::from_utf8(&joined[..total]) {
                Ok(_) => input = &input[take..],
                // The carried character completed (it starts at 0, so any
                // valid prefix covers it); continue after what was valid.
                Err(e) if e.valid_up_to() > 0 => {
                    input = &input[e.valid_up_to() - self.pending_len..]
                }
                Err(e) if e.error_len().is_some() => {
                    self.invalid = true;
                    return;
                }
                Err(_) => {
                    self.pending[..total].copy_from_slice(&joined[..total]);
                    self.pending_len = total;
                    return;
                }
            }
            self.pending_len = 0;
        }
        if let Err(e) = std::str::from_utf8(input) {
            match e.error_len() {
                Some(_) => self.invalid = true,
                None => {
                    let tail = &input[e.valid_up_to()..];
                    self.pending[..tail.len()].copy_from_slice(tail);
                    self.pending_len = tail.len();
                }
            }
        }
    }

    /// Whether everything fed so far was UTF-8 and no character is cut off.
    fn is_valid(&self) -> bool {
        !self.invalid && self.pending_len == 0
    }
}

struct DocumentSeed<'a>(&'a mut RecordStats);

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(probe) = seq.next_element::<Probe>()? {
            self.0.add_record(probe.0);
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let probe = ProbeVisitor.visit_map(map)?;
        self.0.add_record(probe.0);
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
}

/// A validated record and its top-level timestamp, if any. Deserializing
/// it checks the whole value is valid JSON while keeping nothing but the
/// `timestamp` (preferred) or `ts` field.
struct Probe(Option<Micros>);

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ProbeVisitor)
    }
}

struct ProbeVisitor;

impl<'de> Visitor<'de> for ProbeVisitor {
    type Value = Probe;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Probe, A::Error> {
        let (mut timestamp, mut ts) = (None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Timestamp => timestamp = map.next_value::<TimestampValue>()?.0,
                Key::Ts => ts = map.next_value::<TimestampValue>()?.0,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Probe(timestamp.or(ts)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Probe, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        Ok(Probe(None))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_unit<E>(self) -> Result<Probe, E> {
        Ok(Probe(None))
    }
}

/// A top-level key, matched without allocating.
enum Key {
    Timestamp,
    Ts,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "timestamp" => Key::Timestamp,
                    "ts" => Key::Ts,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A `timestamp`/`ts` value: RFC 3339 text or epoch seconds/millis.
/// Anything else is accepted as valid JSON and yields no timestamp.
struct TimestampValue(Option<Micros>);

impl<'de> Deserialize<'de> for TimestampValue {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TsVisitor;
        impl<'de> Visitor<'de> for TsVisitor {
            type Value = TimestampValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a timestamp")
            }
            fn visit_str<E>(self, v: &str) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::parse_rfc3339(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::from_epoch(v as f64)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::from_epoch(v as f64)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::from_epoch(v)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<TimestampValue, E> {
                Ok(TimestampValue(None))
            }
            fn visit_unit<E>(self) -> Result<TimestampValue, E> {
                Ok(TimestampValue(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<TimestampValue, A::Error> {
                IgnoredAny.visit_seq(seq)?;
                Ok(TimestampValue(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TimestampValue, A::Error> {
                IgnoredAny.visit_map(map)?;
                Ok(TimestampValue(None))
            }
        }
        d.deserialize_any(TsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(bytes: &[u8]) -> RecordStats {
        count_segments(bytes).unwrap()
    }

    #[test]
    fn record_format_from_name() {
        assert_eq!(
            RecordFormat::from_name("a.jsonl"),
            Some(RecordFormat::Jsonl)
        );
        assert_eq!(
            RecordFormat::from_name("a.b.ndjson"),
            Some(RecordFormat::Ndjson)
        );
        assert_eq!(
            RecordFormat::from_name("s.0a1b2c3d.jsonseq"),
            Some(RecordFormat::Jsonseq)
        );
        assert_eq!(
            RecordFormat::from_name("doc.json"),
            Some(RecordFormat::Json)
        );
        assert_eq!(RecordFormat::from_name("a.jsonl.indexes.json"), None);
        assert_eq!(RecordFormat::from_name("a.jsonl.3f2a.idx"), None);
        assert_eq!(RecordFormat::from_name("chronicle.manifest"), None);
        assert_eq!(RecordFormat::from_name(".jsonl"), None);
        assert_eq!(RecordFormat::from_name("README"), None);
    }

    #[test]
    fn lines_and_packed_records_count_alike() {
        let line = count(b"{\"a\":1}\n{\"a\":2}\n");
        let packed = count(b"\x1e{\"a\":1}\x1e{\"a\":2}\x1e");
        assert_eq!(line.record_count, 2);
        assert_eq!(line, packed);
    }

    #[test]
    fn torn_record_is_failed_and_the_next_is_read() {
        let stats = count(b"{\"a\":1}\n{\"a\":\n{\"a\":3}\n");
        assert_eq!((stats.record_count, stats.failed_count), (3, 1));
        let packed = count(b"\x1e{\"a\":1}\x1e{\"a\":\x1e{\"a\":3}\x1e");
        assert_eq!((packed.record_count, packed.failed_count), (3, 1));
    }

    #[test]
    fn blank_segments_and_crlf_are_skipped() {
        let stats = count(b"\n\n  \r\n{\"a\":1}\r\n\x1e\x1e\n");
        assert_eq!((stats.record_count, stats.failed_count), (1, 0));
    }

    #[test]
    fn last_record_without_separator_counts() {
        assert_eq!(count(b"{\"a\":1}\n[1,2]").record_count, 2);
    }

    #[test]
    fn timestamps_from_timestamp_or_ts() {
        let stats = count(
            b"{\"ts\":1767225600}\n{\"timestamp\":\"2026-01-02T00:00:00Z\",\"ts\":0}\n{\"nested\":{\"timestamp\":\"1990-01-01T00:00:00Z\"}}\n{\"ts\":\"garbage\"}\n",
        );
        assert_eq!(stats.record_count, 4);
        assert_eq!(stats.failed_count, 0);
        assert_eq!(
            timestamp::format_rfc3339(stats.min_timestamp.unwrap()),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            timestamp::format_rfc3339(stats.max_timestamp.unwrap()),
            "2026-01-02T00:00:00Z"
        );
    }

    #[test]
    fn records_spanning_read_chunks() {
        let record = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(READ_CHUNK / 3));
        let input = record.repeat(7);
        assert_eq!(count(input.as_bytes()).record_count, 7);
    }

    #[test]
    fn oversize_segment_is_streamed_not_buffered() {
        let big = format!(
            "{{\"ts\":5,\"pad\":\"{}\"}}",
            "y".repeat(MAX_BUFFERED_SEGMENT + 10)
        );
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"a\":1}\n");
        input.extend_from_slice(big.as_bytes());
        input.extend_from_slice(b"\n{\"a\":3}\n");
        let stats = count(&input);
        assert_eq!((stats.record_count, stats.failed_count), (3, 0));
        assert_eq!(stats.min_timestamp, Some(5_000_000));
        let mut torn = big.into_bytes();
        torn.truncate(torn.len() - 2);
        torn.extend_from_slice(b"\x1e{\"a\":3}");
        let stats = count(&torn);
        assert_eq!((stats.record_count, stats.failed_count), (2, 1));
    }

    #[test]
    fn oversize_blank_segment_is_skipped() {
        let mut input = vec![b' '; MAX_BUFFERED_SEGMENT + 10];
        input.extend_from_slice(b"\n{}\n");
        assert_eq!(count(&input).record_count, 1);
    }

    #[test]
    fn json_documents() {
        let doc = |b: &[u8]| count_json_document(b).unwrap();
        assert_eq!(doc(b"[{\"a\":1},{\"a\":2},3]").record_count, 3);
        assert_eq!(doc(b"{\"ts\":1}").record_count, 1);
        assert_eq!(doc(b"  \n").record_count, 0);
        assert_eq!(doc(b"[]").record_count, 0);
        let torn = doc(b"[{\"a\":1},{\"a\":");
        assert_eq!((torn.record_count, torn.failed_count), (2, 1));
        let trailing = doc(b"{} {}");
        assert_eq!((trailing.record_count, trailing.failed_count), (2, 1));
    }

    #[test]
    fn utf8_validator_across_chunk_boundaries() {
        let text = "añ€𝄞z".repeat(3);
        for chunk in 1..=7 {
            let mut v = Utf8Validator::default();
            for piece in text.as_bytes().chunks(chunk) {
                v.feed(piece);
            }
            assert!(v.is_valid(), "chunk {chunk}");
        }
        let mut cut = Utf8Validator::default();
        cut.feed(&"€".as_bytes()[..2]);
        assert!(!cut.is_valid());
        let mut bad = Utf8Validator::default();
        bad.feed(b"ok\xe2\x82");
        bad.feed(b"\x41");
        assert!(!bad.is_valid());
    }

    #[test]
    fn invalid_utf8_is_a_failed_record() {
        let stats = count(b"{\"a\":\"\xff\"}\n{\"a\":1}\n");
        assert_eq!((stats.record_count, stats.failed_count), (2, 1));
        let doc = count_json_document(&b"[\"\xc3\"]"[..]).unwrap();
        assert_eq!(doc.failed_count, 1);
    }

    #[test]
    fn json_arrays_split_where_they_count() {
        let split = |text: &str| {
            let (elements, rest) = split_json_array(text.as_bytes());
            let elements: Vec<String> = elements
                .iter()
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .collect();
            (
                elements,
                rest.map(|r| String::from_utf8_lossy(r).into_owned()),
            )
        };
        assert_eq!(split("[]"), (vec![], None));
        assert_eq!(
            split("[ {\"a\":[1,2]} , \"x,]\" ,3 ]\n"),
            (
                vec!["{\"a\":[1,2]}".into(), "\"x,]\"".into(), "3".into()],
                None
            )
        );
        assert_eq!(
            split("[{\"a\":1},{\"a\":"),
            (vec!["{\"a\":1}".into()], Some("{\"a\":".into()))
        );
        assert_eq!(
            split("[1,2] x"),
            (vec!["1".into(), "2".into()], Some("x".into()))
        );
        for text in ["[]", "[1,[2]]", "[{\"a\":1},{\"a\":", "[1,2] x", "[1 2]"] {
            let (elements, rest) = split_json_array(text.as_bytes());
            let counted = count_json_document(text.as_bytes()).unwrap();
            assert_eq!(
                elements.len() as u64 + u64::from(rest.is_some()),
                counted.record_count,
                "{text}"
            );
        }
    }

    #[test]
    fn parallel_ranges_match_serial_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.jsonl");
        let mut data = Vec::new();
        for i in 0..20_000u64 {
            if i % 997 == 0 {
                data.extend_from_slice(b"{\"torn\":\n");
            }
            data.extend_from_slice(
                format!("{{\"i\":{i},\"ts\":{}}}\n", 1_700_000_000 + i).as_bytes(),
            );
            if i % 3 == 0 {
                data.push(RECORD_SEPARATOR);
            }
        }
        std::fs::write(&path, &data).unwrap();
        let serial = count_segments(&data[..]).unwrap();
        let file = File::open(&path).unwrap();
        for parts in [2, 3, 4, 7] {
            let parallel = count_segments_parallel(&file, data.len() as u64, parts).unwrap();
            assert_eq!(parallel, serial, "{parts} parts");
        }
        assert_eq!(serial.record_count, 20_000 + 21);
        assert_eq!(serial.failed_count, 21);
    }
}
