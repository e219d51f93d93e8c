//! Counting one large record file on several threads.
//!
//! The file is cut into about as many byte ranges as there are threads,
//! each cut placed just past a separator, so no segment straddles two
//! ranges and the ranges' counts add up to the serial count exactly. Each
//! range is read with `pread`, so the threads share no file cursor.

use std::io::{self, Read};

use super::count::{RecordStats, count_segments};
use super::segments::find_separator;
use crate::warehouse::Blob;

/// Files at least this large are counted on several threads.
const PARALLEL_MIN_BYTES: u64 = 32 << 20;
/// More threads than this gain nothing against one disk.
const MAX_THREADS: usize = 4;

/// How many threads counting a file of `size` bytes is worth: one below
/// [`PARALLEL_MIN_BYTES`], else as many as the machine has, at most
/// [`MAX_THREADS`].
pub(crate) fn threads_for(size: u64) -> usize {
    if size < PARALLEL_MIN_BYTES {
        return 1;
    }
    std::thread::available_parallelism()
        .map(|n| n.get().min(MAX_THREADS))
        .unwrap_or(1)
}

/// Splits `file` at separators into about `parts` ranges and counts each
/// on its own thread.
pub(super) fn count_segments_parallel(
    file: &Blob,
    size: u64,
    parts: usize,
) -> io::Result<RecordStats> {
    let cuts = cut_points(file, size, parts)?;
    // Each range is part of the caller's work, under its budget, and
    // reads for the answer this thread builds (a failure of an object
    // store there is that answer's).
    let work = crate::work::current();
    let answer = crate::error::Answer::current();
    std::thread::scope(|scope| {
        let workers: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let range = RangeReader {
                    file,
                    pos: w[0],
                    end: w[1],
                };
                let (work, answer) = (work.clone(), answer.clone());
                scope.spawn(move || {
                    let _in = answer.enter();
                    crate::work::within_opt(work.as_ref(), || count_segments(range))
                })
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

/// Where to cut `file` (of `size` bytes) into about `parts` byte ranges,
/// each cut just past a separator: `0`, the cuts, and `size`, so that
/// consecutive pairs are the ranges and no segment straddles two.
pub(crate) fn cut_points(file: &Blob, size: u64, parts: usize) -> io::Result<Vec<u64>> {
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
    Ok(cuts)
}

/// The offset just past the first separator at or after `from`, or `size`.
fn next_cut(file: &Blob, from: u64, size: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = from;
    while pos < size {
        let n = file.read_at(&mut buf, pos)?;
        if n == 0 {
            break;
        }
        if let Some(i) = find_separator(&buf[..n]) {
            return Ok(pos + i as u64 + 1);
        }
        pos += n as u64;
    }
    Ok(size)
}

/// `pread`-based reader over one byte range of a file, so several threads
/// can read one file without sharing a cursor (and the file's own
/// position, shared with its duplicates, never moves).
pub(crate) struct RangeReader<'a> {
    pub(crate) file: &'a Blob,
    pub(crate) pos: u64,
    pub(crate) end: u64,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let want = self.end.saturating_sub(self.pos).min(out.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut out[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// `n` records with timestamps, a torn one every 997th and a packed
/// separator every third: what ranges and steps must count alike.
#[cfg(test)]
pub(super) fn mixed_records(n: u64) -> Vec<u8> {
    let mut data = Vec::new();
    for i in 0..n {
        if i % 997 == 0 {
            data.extend_from_slice(b"{\"torn\":\n");
        }
        data.extend_from_slice(format!("{{\"i\":{i},\"ts\":{}}}\n", 1_700_000_000 + i).as_bytes());
        if i % 3 == 0 {
            data.push(super::RECORD_SEPARATOR);
        }
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_ranges_match_serial_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.jsonl");
        let data = mixed_records(20_000);
        std::fs::write(&path, &data).unwrap();
        let serial = count_segments(&data[..]).unwrap();
        let file = Blob::Local(std::fs::File::open(&path).unwrap());
        for parts in [2, 3, 4, 7] {
            let parallel = count_segments_parallel(&file, data.len() as u64, parts).unwrap();
            assert_eq!(parallel, serial, "{parts} parts");
        }
        assert_eq!(serial.record_count, 20_000 + 21);
        assert_eq!(serial.failed_count, 21);
    }
}
