//! Counting one record file a step at a time, resumable between steps.
//!
//! A file of many gigabytes is counted in the background, and must never
//! hold the thread that counts it longer than one step, nor start over
//! when it is taken up again: [`count_step`] counts about one step's
//! bytes from where [`CountProgress`] stands and moves it on. Each step
//! ends just past a separator, so the counts of the steps add up to the
//! count of the whole file exactly (as the ranges of a parallel count do).
//!
//! One segment longer than a step (no separator in it) is the hard case:
//! a hostile file of 60 GB of zeros is one such segment. Its first bytes
//! usually show that it is no JSON; then the steps only look for its end
//! (`in_failed`), each as bounded as any other, and the segment counts as
//! one failed record there. A long segment whose start is still valid
//! JSON is counted whole in one step (its verdict needs all of it).

use std::io;

use super::count::{RecordStats, count_segments};
use super::parallel::RangeReader;
use super::segments::{find_last_separator, find_separator};
use super::{RecordFormat, document::count_json_document};
use crate::warehouse::Blob;

/// Bytes read to decide whether a long segment is already invalid.
const PREFIX_PROBE: usize = 1 << 20;
/// The block a separator is looked for in.
const BLOCK: usize = 1 << 20;

/// Where an incremental count of one file stands: the bytes before
/// `offset` are counted into `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountProgress {
    pub offset: u64,
    pub stats: RecordStats,
    /// `offset` lies inside a segment already known to be a failed
    /// record, whose end is still to be found.
    pub in_failed: bool,
}

/// Counts about `step` more bytes of `file` (`size` bytes long, in
/// `format`) from `progress`, and moves it on. True once the whole file
/// is counted: `progress.stats` is then its count.
pub fn count_step(
    file: &Blob,
    size: u64,
    format: RecordFormat,
    progress: &mut CountProgress,
    step: u64,
) -> io::Result<bool> {
    let start = progress.offset;
    if start >= size {
        return Ok(true);
    }
    if format == RecordFormat::Json {
        // One document: its verdict needs all of it.
        progress.stats = count_json_document(file.reader_at(0))?;
        progress.offset = size;
        return Ok(true);
    }
    let step = step.max(BLOCK as u64);
    let end = start.saturating_add(step).min(size);
    if progress.in_failed {
        match first_separator(file, start, end)? {
            Some(at) => {
                progress.stats.add_failed();
                progress.offset = at + 1;
                progress.in_failed = false;
            }
            None if end == size => {
                progress.stats.add_failed();
                progress.offset = size;
                progress.in_failed = false;
            }
            None => progress.offset = end,
        }
        return Ok(progress.offset >= size);
    }
    if end == size {
        count_range(file, start, size, progress)?;
        return Ok(true);
    }
    match last_separator(file, start, end)? {
        Some(at) => count_range(file, start, at + 1, progress)?,
        None if prefix_fails(file, start, end)? => {
            // No separator in [start, end): the segment goes on past it.
            progress.in_failed = true;
            progress.offset = end;
        }
        None => {
            let cut = first_separator(file, end, size)?.map_or(size, |at| at + 1);
            count_range(file, start, cut, progress)?;
        }
    }
    Ok(progress.offset >= size)
}

fn count_range(file: &Blob, start: u64, end: u64, progress: &mut CountProgress) -> io::Result<()> {
    let counted = count_segments(RangeReader {
        file,
        pos: start,
        end,
    })?;
    progress.stats.merge(&counted);
    progress.offset = end;
    Ok(())
}

/// The offset of the first separator in `[from, to)`.
fn first_separator(file: &Blob, from: u64, to: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; BLOCK];
    let mut pos = from;
    while pos < to {
        let want = ((to - pos) as usize).min(BLOCK);
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        if let Some(i) = find_separator(&buf[..n]) {
            return Ok(Some(pos + i as u64));
        }
        pos += n as u64;
    }
    Ok(None)
}

/// The offset of the last separator in `[from, to)`, read from the end.
fn last_separator(file: &Blob, from: u64, to: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; BLOCK];
    let mut block_end = to;
    while block_end > from {
        let block_start = block_end.saturating_sub(BLOCK as u64).max(from);
        let len = (block_end - block_start) as usize;
        file.read_exact_at(&mut buf[..len], block_start)?;
        if let Some(i) = find_last_separator(&buf[..len]) {
            return Ok(Some(block_start + i as u64));
        }
        block_end = block_start;
    }
    Ok(None)
}

/// Whether the first bytes of the segment at `start` (no separator before
/// `end`) already show it is no valid JSON: a syntax error, or a whole
/// value followed by more than whitespace. Undecided is false.
fn prefix_fails(file: &Blob, start: u64, end: u64) -> io::Result<bool> {
    use serde::Deserialize;
    let len = ((end - start) as usize).min(PREFIX_PROBE);
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, start)?;
    if buf.trim_ascii().is_empty() {
        return Ok(false);
    }
    let mut de = serde_json::Deserializer::from_slice(&buf);
    Ok(match serde::de::IgnoredAny::deserialize(&mut de) {
        Ok(_) => de.end().is_err_and(|e| !e.is_eof()),
        Err(e) => !e.is_eof(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(bytes: &[u8]) -> (tempfile::TempDir, Blob) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.jsonl");
        std::fs::write(&path, bytes).unwrap();
        (dir, Blob::Local(std::fs::File::open(&path).unwrap()))
    }

    fn stepped(bytes: &[u8], step: u64) -> (RecordStats, usize) {
        let (_dir, file) = blob(bytes);
        let mut progress = CountProgress::default();
        let mut steps = 1;
        while !count_step(
            &file,
            bytes.len() as u64,
            RecordFormat::Jsonl,
            &mut progress,
            step,
        )
        .unwrap()
        {
            steps += 1;
        }
        (progress.stats, steps)
    }

    #[test]
    fn steps_add_up_to_the_whole_count() {
        let data = crate::records::parallel::mixed_records(60_000);
        let whole = count_segments(&data[..]).unwrap();
        let (stats, steps) = stepped(&data, BLOCK as u64);
        assert_eq!(stats, whole);
        assert!(steps > 1, "{} bytes in {steps} steps", data.len());
    }

    #[test]
    fn a_long_invalid_segment_is_skipped_in_bounded_steps() {
        // A record, 5 MiB of zeros (one failed segment), a record.
        let mut data = b"{\"a\":1}\n".to_vec();
        data.extend(std::iter::repeat_n(0u8, 5 << 20));
        data.extend_from_slice(b"\n{\"a\":2}\n");
        let (stats, steps) = stepped(&data, BLOCK as u64);
        assert_eq!(stats, count_segments(&data[..]).unwrap());
        assert_eq!((stats.record_count, stats.failed_count), (3, 1));
        assert!(steps >= 5, "{steps} steps");
        // Zeros to the end of the file.
        let mut data = b"{\"a\":1}\n".to_vec();
        data.extend(std::iter::repeat_n(0u8, 3 << 20));
        let (stats, _) = stepped(&data, BLOCK as u64);
        assert_eq!(stats, count_segments(&data[..]).unwrap());
    }

    #[test]
    fn a_long_valid_segment_is_counted_whole() {
        let mut data = b"{\"a\":1}\n{\"big\":\"".to_vec();
        data.extend(std::iter::repeat_n(b'x', 3 << 20));
        data.extend_from_slice(b"\"}\n{\"a\":2}");
        let (stats, _) = stepped(&data, BLOCK as u64);
        assert_eq!(stats, count_segments(&data[..]).unwrap());
        assert_eq!((stats.record_count, stats.failed_count), (3, 0));
    }
}
