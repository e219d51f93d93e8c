//! Reading a large line or packed file's records with validation on
//! several threads, handed to the sink in order.
//!
//! The calling thread reads the file in chunks of [`CHUNK`] bytes, each
//! cut just past its last separator (so no segment straddles two chunks),
//! and hands them to worker threads, which find each chunk's records and
//! validate them. The calling thread takes the scanned chunks back in file
//! order and delivers their records, so the sink sees exactly what the
//! serial reader gives (the same records, lines and resume points), at
//! most [`IN_FLIGHT`] chunks ahead of it. A chunk with no separator at all
//! (a segment longer than a chunk) ends the parallel part: the serial
//! reader, which streams segments of any length, takes over there.

use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;
use std::sync::mpsc;

use super::read::{Body, Record, RecordSink, Resume};
use super::scan::{Landmarks, RecordScanner};
use super::segments::find_separator;
use super::timestamp::Micros;
use crate::warehouse::Blob;

/// Bytes read and scanned as one piece of work.
pub(super) const CHUNK: usize = 4 << 20;
/// Chunks read ahead of the sink, per worker.
const IN_FLIGHT: usize = 3;

/// One record found in a chunk.
struct Found {
    /// The record's bytes within the chunk (trimmed).
    start: usize,
    end: usize,
    /// Just past its separator, within the chunk.
    after: usize,
    /// `None` when it is not valid JSON, else its timestamp.
    scanned: Option<Option<Micros>>,
}

struct Scanned {
    offset: u64,
    bytes: Vec<u8>,
    found: Vec<Found>,
    /// The landmarks of each valid record in `found`, in order, when the
    /// sink wants them.
    landmarks: Vec<Landmarks>,
    /// Its scan failed (a panic); reading stops with an error.
    failed: bool,
}

/// How reading stopped.
pub(super) enum Ended {
    /// The sink stopped it.
    Stopped,
    /// Every record up to `end` was delivered.
    Done,
    /// A segment longer than a chunk starts at this resume point; read on
    /// serially from there.
    Oversize(Resume),
}

/// Delivers the records of `file` in `[from.offset, end)` with `threads`
/// scanning threads.
pub(super) fn read_parallel(
    file: &Blob,
    name: &str,
    from: Resume,
    end: u64,
    threads: usize,
    sink: &mut dyn RecordSink,
) -> io::Result<Ended> {
    let (jobs, job_queue) = mpsc::sync_channel::<(u64, Vec<u8>)>(threads * IN_FLIGHT);
    let (results, scanned) = mpsc::channel::<Scanned>();
    let job_queue = Mutex::new(job_queue);
    let wants_landmarks = sink.wants_landmarks();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let results = results.clone();
            let job_queue = &job_queue;
            scope.spawn(move || {
                let mut scanner = RecordScanner::default();
                loop {
                    let job = job_queue.lock().map(|queue| queue.recv());
                    let Ok(Ok((offset, bytes))) = job else {
                        return;
                    };
                    // A panic (a bug) is sent on as a failed chunk, never
                    // left for the reader to wait on.
                    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        scan_chunk(&bytes, &mut scanner, wants_landmarks)
                    }));
                    let failed = found.is_err();
                    let (found, landmarks) = found.unwrap_or_default();
                    let scanned = Scanned {
                        offset,
                        bytes,
                        found,
                        landmarks,
                        failed,
                    };
                    if results.send(scanned).is_err() || failed {
                        return;
                    }
                }
            });
        }
        drop(results);
        let reading = Reading {
            file,
            offset: from.offset,
            end,
            oversize_at: None,
            spare: Vec::new(),
        };
        // `jobs` moves into the delivery, so every way out of it closes
        // the queue and the workers end before the scope does.
        deliver(
            jobs,
            scanned,
            reading,
            threads * IN_FLIGHT,
            name,
            from,
            sink,
        )
    })
}

/// Reads chunks into the queue, at most `ahead` in flight, and delivers
/// the scanned ones in file order.
fn deliver(
    jobs: mpsc::SyncSender<(u64, Vec<u8>)>,
    scanned: mpsc::Receiver<Scanned>,
    mut reading: Reading<'_>,
    ahead: usize,
    name: &str,
    from: Resume,
    sink: &mut dyn RecordSink,
) -> io::Result<Ended> {
    let stopped = || io::Error::other("a scanning thread stopped");
    let (mut sent, mut delivered) = (0usize, 0usize);
    let mut pending: BTreeMap<u64, Scanned> = BTreeMap::new();
    let mut next_offset = from.offset;
    let mut line = from.line;
    loop {
        while sent - delivered < ahead {
            let Some(chunk) = reading.next_chunk()? else {
                break;
            };
            sent += 1;
            jobs.send(chunk).map_err(|_| stopped())?;
        }
        if sent == delivered {
            return Ok(match reading.oversize_at {
                Some(offset) => Ended::Oversize(Resume {
                    part: from.part,
                    offset,
                    line,
                }),
                None => Ended::Done,
            });
        }
        while !pending.contains_key(&next_offset) {
            let chunk = scanned.recv().map_err(|_| stopped())?;
            pending.insert(chunk.offset, chunk);
        }
        let chunk = pending.remove(&next_offset).expect("just checked");
        if chunk.failed {
            return Err(io::Error::other("scanning the records failed (a bug)"));
        }
        delivered += 1;
        next_offset = chunk.offset + chunk.bytes.len() as u64;
        let flow = deliver_chunk(&chunk, name, from.part, &mut line, sink)?;
        reading.spare.push(chunk.bytes);
        if flow.is_break() {
            return Ok(Ended::Stopped);
        }
    }
}

/// Hands one scanned chunk's records to the sink.
fn deliver_chunk(
    chunk: &Scanned,
    name: &str,
    part: u64,
    line: &mut u64,
    sink: &mut dyn RecordSink,
) -> io::Result<std::ops::ControlFlow<()>> {
    let mut marks = chunk.landmarks.iter();
    for found in &chunk.found {
        *line += 1;
        let record = Record {
            file: name,
            line: *line,
            timestamp: found.scanned.flatten(),
            failed: found.scanned.is_none(),
            body: Body::Bytes(&chunk.bytes[found.start..found.end]),
            landmarks: match found.scanned {
                Some(_) => marks.next().copied(),
                None => None,
            },
        };
        let resume = Resume {
            part,
            offset: chunk.offset + found.after as u64,
            line: *line,
        };
        if sink.record(record, resume)?.is_break() {
            return Ok(std::ops::ControlFlow::Break(()));
        }
    }
    Ok(std::ops::ControlFlow::Continue(()))
}

/// Reads chunks that end just past a separator (the last one may end at
/// the end of the range without one).
struct Reading<'f> {
    file: &'f Blob,
    offset: u64,
    end: u64,
    /// Where a chunk without any separator started: reading stops there.
    oversize_at: Option<u64>,
    /// Buffers of chunks delivered, read into again (not allocated and
    /// zeroed anew for every chunk).
    spare: Vec<Vec<u8>>,
}

impl Reading<'_> {
    fn next_chunk(&mut self) -> io::Result<Option<(u64, Vec<u8>)>> {
        if self.offset >= self.end || self.oversize_at.is_some() {
            return Ok(None);
        }
        let want = (self.end - self.offset).min(CHUNK as u64) as usize;
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.resize(want, 0);
        let mut filled = 0;
        while filled < want {
            match self
                .file
                .read_at(&mut bytes[filled..], self.offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        bytes.truncate(filled);
        let at_end = self.offset + filled as u64 >= self.end || filled < want;
        if !at_end {
            match memchr::memrchr2(b'\n', super::RECORD_SEPARATOR, &bytes) {
                Some(last) => bytes.truncate(last + 1),
                None => {
                    self.oversize_at = Some(self.offset);
                    return Ok(None);
                }
            }
        }
        if bytes.is_empty() {
            return Ok(None);
        }
        let offset = self.offset;
        self.offset += bytes.len() as u64;
        if at_end {
            self.end = self.offset;
        }
        Ok(Some((offset, bytes)))
    }
}

/// The records of one chunk, validated.
fn scan_chunk(
    bytes: &[u8],
    scanner: &mut RecordScanner,
    landmarks: bool,
) -> (Vec<Found>, Vec<Landmarks>) {
    let mut found = Vec::new();
    let mut marks = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let (segment_end, after) = match find_separator(&bytes[start..]) {
            Some(i) => (start + i, start + i + 1),
            None => (bytes.len(), bytes.len() + 1),
        };
        let segment = &bytes[start..segment_end];
        let lead = segment.len() - segment.trim_ascii_start().len();
        let text = segment.trim_ascii();
        if !text.is_empty() {
            found.push(Found {
                start: start + lead,
                end: start + lead + text.len(),
                after,
                scanned: {
                    let (scanned, landmarks) = super::read::scanned(scanner, text, landmarks);
                    marks.extend(landmarks);
                    scanned
                },
            });
        }
        start = after;
    }
    (found, marks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::read::read_serial;
    use std::io::Write;
    use std::ops::ControlFlow;

    type Seen = Vec<(u64, bool, Option<Micros>, Vec<u8>, Resume)>;

    #[derive(Default)]
    struct Collect(Seen, Option<usize>);

    impl RecordSink for Collect {
        fn record(&mut self, record: Record<'_>, next: Resume) -> io::Result<ControlFlow<()>> {
            let bytes = match record.body {
                Body::Bytes(b) => b.to_vec(),
                Body::Stream { reader, .. } => {
                    let mut v = Vec::new();
                    reader.read_to_end(&mut v)?;
                    v
                }
            };
            self.0
                .push((record.line, record.failed, record.timestamp, bytes, next));
            Ok(match self.1 {
                Some(stop) if self.0.len() >= stop => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            })
        }
    }

    /// About 20 MiB of mixed records, with a 5 MiB segment (longer than a
    /// chunk) two thirds of the way in.
    fn data() -> Vec<u8> {
        let mut data = Vec::new();
        for i in 0..150_000u64 {
            match i % 1000 {
                7 => data.extend_from_slice(b"{\"torn\":\n"),
                8 => data.extend_from_slice(b"  \r\n\n"),
                9 => data.push(0x1e),
                _ => {}
            }
            if i == 100_000 {
                data.extend_from_slice(
                    format!("{{\"pad\":\"{}\"}}\n", "y".repeat(5 << 20)).as_bytes(),
                );
            }
            data.extend_from_slice(
                format!("{{\"i\":{i},\"ts\":{},\"pad\":\"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\"}}\r\n", 1_700_000_000 + i).as_bytes(),
            );
        }
        data.extend_from_slice(b"{\"last\":true}");
        data
    }

    fn serial(file: &Blob, from: Resume, size: u64) -> Seen {
        let mut sink = Collect::default();
        let _ = read_serial(file, "", from, size, &mut sink).unwrap();
        sink.0
    }

    fn parallel(file: &Blob, from: Resume, size: u64, threads: usize) -> Seen {
        let mut sink = Collect::default();
        match read_parallel(file, "", from, size, threads, &mut sink).unwrap() {
            Ended::Oversize(resume) => {
                let _ = read_serial(file, "", resume, size, &mut sink).unwrap();
            }
            Ended::Done => {}
            Ended::Stopped => panic!("nothing stopped it"),
        }
        sink.0
    }

    #[test]
    fn parallel_reading_gives_exactly_the_serial_records_and_resume_points() {
        let bytes = data();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        let file = Blob::Local(file);
        let size = bytes.len() as u64;
        let want = serial(&file, Resume::default(), size);
        assert!(want.len() > 150_000);
        for threads in [2, 3] {
            let got = parallel(&file, Resume::default(), size, threads);
            assert!(got == want, "{threads} threads");
        }
        // From a resume point in the middle.
        let middle = want[want.len() / 3].4;
        let rest = serial(&file, middle, size);
        assert!(parallel(&file, middle, size, 2) == rest);
        assert_eq!(rest.len(), want.len() - want.len() / 3 - 1);
    }

    #[test]
    fn a_sink_stops_parallel_reading_and_the_workers_end() {
        let bytes = data();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        let file = Blob::Local(file);
        let mut sink = Collect(Vec::new(), Some(10));
        let ended = read_parallel(
            &file,
            "",
            Resume::default(),
            bytes.len() as u64,
            2,
            &mut sink,
        )
        .unwrap();
        assert!(matches!(ended, Ended::Stopped));
        assert_eq!(sink.0.len(), 10);
    }
}
