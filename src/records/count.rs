//! Counting a record file: how many records, how many failed, and the
//! span of their timestamps, in one streaming pass.
//!
//! Every non-blank segment of a line or packed stream (see
//! [`super::segments`]) is a record; one that is not valid JSON is a
//! *failed* record, counted and skipped, never fatal. Buffered segments go
//! through the validating scanner ([`super::scan`]), a segment too large
//! to buffer through the streaming validator ([`super::validate`]). Large
//! files are counted in ranges on several threads ([`super::parallel`]),
//! which is what lets counting keep up with the disk; a `.json` document
//! is counted by [`super::document`].

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use super::RecordFormat;
use super::document::count_json_document;
use super::parallel::{self, count_segments_parallel};
use super::scan::RecordScanner;
use super::segments::{
    OversizeSegment, ProbedSegment, SegmentVisitor, for_each_segment_sized, split_run,
};
use super::structural::{self, Structural};
use super::timestamp::Micros;
use crate::warehouse::Blob;

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
    pub(super) fn add_record(&mut self, ts: Option<Micros>) {
        self.record_count += 1;
        self.note_timestamps(ts, ts);
    }

    pub(super) fn add_failed(&mut self) {
        self.record_count += 1;
        self.failed_count += 1;
    }

    pub(super) fn note_timestamps(&mut self, min: Option<Micros>, max: Option<Micros>) {
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

/// The failure of a count handed to the background: the file's counts
/// are not known yet (a later answer has them).
#[derive(Debug, thiserror::Error)]
#[error("the file is being counted in the background; ask again later")]
pub struct CountingLater;

/// Whether `err` is a count left to the background ([`CountingLater`]).
pub fn is_counting_later(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<CountingLater>())
}

/// Counts the records of the file at `path` (a path named from outside).
pub fn count_file(path: &Path, format: RecordFormat) -> io::Result<RecordStats> {
    count_open(Blob::Local(File::open(path)?), format)
}

/// Counts the records of an open file.
pub fn count_open(file: Blob, format: RecordFormat) -> io::Result<RecordStats> {
    if let Some(local) = file.local() {
        advise_sequential(local);
    }
    if format == RecordFormat::Json {
        return count_json_document(file.reader_at(0));
    }
    let size = file.size()?;
    // A remote file streams best read front to back by one reader.
    let threads = match file.local() {
        Some(_) => parallel::threads_for(size),
        None => 1,
    };
    if threads > 1 {
        count_segments_parallel(&file, size, threads)
    } else {
        count_segments_sized(
            file.reader_at(0),
            usize::try_from(size).unwrap_or(usize::MAX),
        )
    }
}

/// Tells the kernel the whole file will be read front to back, which
/// widens its read-ahead. Only a hint: a failure changes nothing.
fn advise_sequential(file: &File) {
    use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
    let _ = posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_SEQUENTIAL);
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

/// Counts one buffered segment into `stats` (a blank one is no record).
pub(super) fn count_segment(scanner: &mut RecordScanner, segment: &[u8], stats: &mut RecordStats) {
    let segment = segment.trim_ascii();
    if !segment.is_empty() {
        match scanner.scan(segment) {
            Some(ts) => stats.add_record(ts),
            None => stats.add_failed(),
        }
    }
}

#[derive(Default)]
struct SegmentCounter {
    stats: RecordStats,
    scanner: RecordScanner,
    structural: Structural,
}

impl SegmentVisitor for SegmentCounter {
    fn run(&mut self, run: &[u8]) -> io::Result<()> {
        if structural::available() {
            self.structural
                .count_run(run, &mut self.stats, &mut self.scanner);
            Ok(())
        } else {
            split_run(self, run)
        }
    }

    fn buffered(&mut self, segment: &[u8]) -> io::Result<()> {
        count_segment(&mut self.scanner, segment, &mut self.stats);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::timestamp;

    fn count(bytes: &[u8]) -> RecordStats {
        count_segments(bytes).unwrap()
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
    fn invalid_utf8_is_a_failed_record() {
        let stats = count(b"{\"a\":\"\xff\"}\n{\"a\":1}\n");
        assert_eq!((stats.record_count, stats.failed_count), (2, 1));
        let doc = count_json_document(&b"[\"\xc3\"]"[..]).unwrap();
        assert_eq!(doc.failed_count, 1);
    }
}
