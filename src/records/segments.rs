//! The one place a line or packed byte stream is cut into record segments.
//!
//! A line file (`.jsonl`, `.ndjson`) and a packed shard (`.jsonseq`) are
//! read the same way: the stream is split on both `\n` and U+001E
//! ([`RECORD_SEPARATOR`], the JSON text sequence separator), so a reader
//! never needs to know which writer produced a file, and a torn record — a
//! writer killed mid-record — is ended by the next separator of either
//! kind. JSON strings cannot hold a raw newline or U+001E, so splitting on
//! them never cuts a valid record. Segments are contiguous: each is
//! followed by exactly one separator byte (the last one perhaps by none),
//! which is what lets a visitor know every segment's offset by adding up.
//!
//! Splitting streams through a fixed buffer searched with `memchr`, so
//! memory stays constant however large the file is. A single segment too
//! large to buffer (a multi-GiB file with no separator) is handed over as
//! a reader ([`OversizeSegment`]) instead of being held.

use std::io::{self, Read};

use super::timestamp::Micros;
use super::validate::probe_stream;

/// The record separator of packed (`.jsonseq`) shards, U+001E.
pub const RECORD_SEPARATOR: u8 = 0x1E;

/// Bytes read per call.
pub(super) const READ_CHUNK: usize = 1 << 20;
/// A segment larger than this is handed to the visitor as a stream
/// ([`OversizeSegment`]) instead of being buffered whole.
pub(super) const MAX_BUFFERED_SEGMENT: usize = 16 << 20;

/// The index of the first separator (`\n` or U+001E) in `bytes`: the
/// one definition of where a record segment ends.
#[inline]
pub fn find_separator(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', RECORD_SEPARATOR, bytes)
}

/// Receives the segments of a line or packed stream, in order.
pub trait SegmentVisitor {
    /// A segment held in memory, without its separator (it may be blank).
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()>;

    /// A segment too large to buffer, to be read from `segment` (which ends
    /// at the separator). Whatever the visitor leaves unread is skipped.
    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()>;

    /// Consecutive buffered segments, each followed by its separator
    /// (`run` ends with one). By default each is handed to
    /// [`buffered`](Self::buffered) in turn; a visitor that can take many
    /// records in one pass (counting) takes the run whole.
    fn run(&mut self, run: &[u8]) -> io::Result<()> {
        split_run(self, run)
    }
}

/// Hands each segment of `run` (segments each followed by a separator) to
/// `visitor.buffered`, in order.
pub(crate) fn split_run<V: SegmentVisitor + ?Sized>(visitor: &mut V, run: &[u8]) -> io::Result<()> {
    let mut rest = run;
    while let Some(i) = find_separator(rest) {
        visitor.buffered(&rest[..i])?;
        rest = &rest[i + 1..];
    }
    debug_assert!(rest.is_empty(), "a run ends with a separator");
    Ok(())
}

/// The index of the last separator in `bytes`.
pub(super) fn find_last_separator(bytes: &[u8]) -> Option<usize> {
    memchr::memrchr2(b'\n', RECORD_SEPARATOR, bytes)
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
        if let Some(i) = find_last_separator(&buf[scanned..end]) {
            let last = scanned + i;
            visitor.run(&buf[start..=last])?;
            start = last + 1;
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

pub(super) fn read_retrying<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
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

    /// Appends the rest of the segment to `whole`, for a consumer that
    /// needs every record in memory however large (an index build, which
    /// locates and parses each one).
    pub fn read_whole(&mut self, whole: &mut Vec<u8>) -> io::Result<()> {
        let read = self.read_to_end(whole);
        match self.io_error.take() {
            Some(err) => Err(err),
            None => read.map(drop),
        }
    }

    /// The read error met inside the segment, if any (it reads as the
    /// segment's end to whoever reads it as a stream).
    pub fn take_io_error(&mut self) -> Option<io::Error> {
        self.io_error.take()
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
                        self.separator_at = find_separator(&self.chunk[..n]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{RecordStats, count_segments};

    fn count(bytes: &[u8]) -> RecordStats {
        count_segments(bytes).unwrap()
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
}
