//! A plan's output read at any offset without holding it: what the
//! mount's `.records` serves.
//!
//! A [`RecordsStream`] runs the plan on a producer thread that hands its
//! output over in pieces through a two-piece channel, so a reader that
//! pauses pauses the producer, and memory stays at a few pieces however
//! long the output is. A read at the offset the producer has reached (the
//! common case: `cat`, `head`, `wc -l`, `grep`, `jq` and Python all read
//! front to back) takes the next bytes. A read further on skips ahead; a
//! read behind restarts a producer from the nearest checkpoint at or
//! before it. Checkpoints are taken as the output goes by: every
//! [`CHECKPOINT_EVERY`] bytes, the [`Position`] that resumes there.
//!
//! Producers are threads, so how many run at once is bounded
//! ([`Producers`]): starting one past the bound stops the least recently
//! used one of another stream, which restarts from its checkpoints when
//! it is read again. A producer whose stream is not read for [`IDLE`] is
//! stopped the same way, and one whose stream is closed stops at once:
//! each runs within a [`Work`] that is cancelled then, so it stops at its
//! next file read even while it reads on without sending anything (a long
//! run of invalid bytes that it skips), never later. It never runs ahead
//! of its reader by more than the two pieces of its channel.
//!
//! The bytes are the same on every restart because the plan reads a
//! snapshot: a record file up to the size it had when the plan was made,
//! a leaf at the revision its fingerprint names.

mod producer;
mod window;

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Plan, Position};
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode, Result};
use crate::work::{self, Work};
use producer::{Piece, produce};
pub use window::Chunk;
use window::{Demand, Filling, Window};

/// Output bytes between checkpoints.
pub const CHECKPOINT_EVERY: u64 = 4 << 20;
/// Checkpoints kept per stream; past it every other one is dropped and
/// the spacing doubles.
const MAX_CHECKPOINTS: usize = 4096;
/// Bytes already read kept for a read slightly behind (the kernel may
/// split or repeat a request).
const KEPT_BEHIND: usize = 1 << 20;
/// Longest one read waits for the producer; past it the read fails (the
/// producer keeps its place, so a retry goes on from there). A read far
/// ahead, or over a leaf whose records are all left out, must not hold a
/// serving thread for good.
pub const READ_BUDGET: Duration = Duration::from_secs(30);
/// A producer whose stream is not read for this long is stopped (and
/// resumes from its checkpoint when read again).
pub const IDLE: Duration = Duration::from_secs(3);

/// Producer threads running at once, across streams, and for one user's
/// streams: each holds a scan's read-ahead (tens of MB for a Lance leaf),
/// so one user keeping many streams alive (a read every few seconds each)
/// pauses their own producers past their share, not everyone's.
pub struct Producers {
    limit: usize,
    per_user: usize,
    /// Streams with a running producer and their owners, least recently
    /// used first.
    running: Mutex<VecDeque<(u32, Weak<Mutex<State>>)>>,
}

impl Producers {
    pub fn new(limit: usize, per_user: usize) -> Arc<Producers> {
        let producers = Arc::new(Producers {
            limit: limit.max(1),
            per_user: per_user.max(1),
            running: Mutex::new(VecDeque::new()),
        });
        let sweeping = Arc::downgrade(&producers);
        let spawned = std::thread::Builder::new()
            .name("pchronicle-idle-records".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(IDLE / 3);
                    match sweeping.upgrade() {
                        Some(producers) => producers.stop_idle(),
                        None => return,
                    }
                }
            });
        if let Err(e) = spawned {
            log::warn!("idle `.records` producers will not be stopped: {e}");
        }
        producers
    }

    /// Stops the producers of streams nobody read for [`IDLE`].
    fn stop_idle(&self) {
        let mut running = self.running.lock();
        running.retain(|(_, stream)| {
            let Some(stream) = stream.upgrade() else {
                return false;
            };
            // A stream being read right now is not idle.
            let Some(mut state) = stream.try_lock() else {
                return true;
            };
            if state.read_at.elapsed() < IDLE {
                return true;
            }
            state.pause();
            false
        });
    }

    /// Streams with a producer running: all of them, or `owner`'s.
    pub fn running(&self, owner: Option<u32>) -> usize {
        let running = self.running.lock();
        running
            .iter()
            .filter(|(uid, w)| w.strong_count() > 0 && owner.is_none_or(|owner| owner == *uid))
            .count()
    }

    /// Notes that `state` (locked by the caller), a stream of `owner`,
    /// starts or uses a producer, stopping the least recently used others
    /// of `owner` past their share; then, past the limit, those of whoever
    /// has the most running (`owner` first among equals), so users with
    /// fewer running are never paused by those with more.
    fn touch(&self, state: &Arc<Mutex<State>>, owner: u32) {
        let mut running = self.running.lock();
        let this = Arc::downgrade(state);
        running.retain(|(_, w)| w.strong_count() > 0 && !w.ptr_eq(&this));
        running.push_back((owner, this));
        let mine = running.iter().filter(|(uid, _)| *uid == owner).count();
        let over_share = mine.saturating_sub(self.per_user);
        pause_oldest(&mut running, over_share, Some(owner));
        while running.len() > self.limit {
            let busiest = busiest(&running, owner);
            if pause_oldest(&mut running, 1, Some(busiest)) == 0
                && pause_oldest(&mut running, 1, None) == 0
            {
                // Every other one is being read right now.
                return;
            }
        }
    }
}

/// The owner with the most streams in `running`; `owner` when it has as
/// many as anyone.
fn busiest(running: &VecDeque<(u32, Weak<Mutex<State>>)>, owner: u32) -> u32 {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for (uid, _) in running {
        match counts.iter_mut().find(|(u, _)| u == uid) {
            Some((_, n)) => *n += 1,
            None => counts.push((*uid, 1)),
        }
    }
    let most = counts.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let mut owners = counts
        .iter()
        .filter(|(_, n)| *n == most)
        .map(|(uid, _)| *uid);
    let first = owners.clone().next();
    if owners.any(|uid| uid == owner) {
        return owner;
    }
    first.unwrap_or(owner)
}

/// Pauses up to `n` of the least recently used producers in `running`
/// (of `owner`'s streams, or anyone's), never the last one (the caller's)
/// nor one being read right now; how many it stopped.
fn pause_oldest(
    running: &mut VecDeque<(u32, Weak<Mutex<State>>)>,
    n: usize,
    owner: Option<u32>,
) -> usize {
    let mut left = n;
    let mut i = 0;
    while left > 0 && i + 1 < running.len() {
        let (uid, stream) = &running[i];
        if owner.is_some_and(|owner| owner != *uid) {
            i += 1;
            continue;
        }
        let other = stream.upgrade();
        let stopped = match other.as_ref().map(|o| o.try_lock()) {
            Some(Some(mut other)) => {
                other.pause();
                true
            }
            // A stream being read right now keeps its producer.
            Some(None) => false,
            None => true,
        };
        if stopped {
            running.remove(i);
            left -= 1;
        } else {
            i += 1;
        }
    }
    n - left
}

/// A plan's output, readable at any offset.
pub struct RecordsStream {
    plan: Arc<Plan>,
    catalog: Arc<Catalog>,
    producers: Arc<Producers>,
    /// The user who opened it, whose share of producers it uses.
    owner: u32,
    state: Arc<Mutex<State>>,
}

struct State {
    producer: Option<Producer>,
    /// (output offset, position resuming there), ascending.
    checkpoints: Vec<(u64, Position)>,
    spacing: u64,
    /// The output's length, once a producer reached its end.
    end: Option<u64>,
    /// Where the last whole record received ends, and the position that
    /// resumes there: kept as a checkpoint when the producer is paused, so
    /// it resumes where it was.
    latest: Option<(u64, Position)>,
    /// When the stream was last read.
    read_at: Instant,
}

struct Producer {
    pieces: Receiver<Piece>,
    /// Pieces' buffers handed back once read, for the producer to fill
    /// again: a fresh buffer of a piece's size is fresh pages to
    /// fault in and zero, each time.
    spare: SyncSender<Vec<u8>>,
    /// Bytes received and not yet dropped, ending at `reached`.
    window: Window,
    /// The piece being filled, and where the reader's requests end.
    filling: Arc<Mutex<Filling>>,
    /// Output offset just past the last byte received.
    reached: u64,
    done: bool,
    /// The producer thread's work, cancelled when this goes.
    work: Arc<Work>,
}

impl Drop for Producer {
    /// Stops the producer thread at its next read, whatever it is doing.
    fn drop(&mut self) {
        self.work.cancel();
    }
}

impl RecordsStream {
    pub fn new(
        plan: Plan,
        catalog: Arc<Catalog>,
        producers: Arc<Producers>,
        owner: u32,
    ) -> RecordsStream {
        RecordsStream {
            plan: Arc::new(plan),
            catalog,
            producers,
            owner,
            state: Arc::new(Mutex::new(State {
                producer: None,
                checkpoints: vec![(0, Position::default())],
                spacing: CHECKPOINT_EVERY,
                end: None,
                latest: None,
                read_at: Instant::now(),
            })),
        }
    }

    /// Up to `size` bytes at `offset` (fewer only at the end).
    pub fn read(&self, offset: u64, size: usize) -> Result<Chunk> {
        let mut state = self.state.lock();
        state.read_at = Instant::now();
        if state.end.is_some_and(|end| offset >= end) {
            return Ok(Chunk::Copied(Vec::new()));
        }
        let usable = state.producer.as_ref().is_some_and(|p| {
            let start = p.reached - p.window.len as u64;
            offset >= start
        });
        let wanted_end = offset.saturating_add(size as u64);
        if !usable {
            let (at, position) = *state
                .checkpoints
                .iter()
                .rev()
                .find(|(at, _)| *at <= offset)
                .expect("the checkpoint at offset 0 is never dropped");
            let demand = Demand::new(wanted_end, size as u64);
            state.producer = Some(self.start(position, at, demand));
        }
        self.producers.touch(&self.state, self.owner);
        let deadline = Instant::now() + READ_BUDGET;
        loop {
            let producer = state.producer.as_mut().expect("started above");
            // The window holds output [reached - len, reached); the pieces
            // wholly more than KEPT_BEHIND before the offset are dropped.
            let start = producer.reached - producer.window.len as u64;
            let keep_from = offset.saturating_sub(KEPT_BEHIND as u64);
            if keep_from > start {
                let n = usize::try_from(keep_from - start).unwrap_or(usize::MAX);
                producer.window.drop_front(n, &producer.spare);
            }
            let start = producer.reached - producer.window.len as u64;
            if producer.reached >= wanted_end || producer.done {
                if offset < producer.reached {
                    let from = (offset - start) as usize;
                    let to = (wanted_end.min(producer.reached) - start) as usize;
                    return Ok(producer.window.chunk(from, to));
                }
                return Ok(Chunk::Copied(Vec::new()));
            }
            let waited = deadline.saturating_duration_since(Instant::now());
            let next = match producer.pieces.try_recv() {
                Ok(piece) => Ok(piece),
                Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => match producer.take_filled(wanted_end, size as u64) {
                    Some(piece) => Ok(piece),
                    None => producer.pieces.recv_timeout(waited),
                },
            };
            match next {
                Ok(Piece::Bytes(bytes, last)) => {
                    let from = producer.reached;
                    producer.reached += bytes.len() as u64;
                    producer.window.push(bytes);
                    if let Some((end, after)) = last {
                        let at = from + end as u64;
                        state.note_checkpoint(at, after);
                        state.latest = Some((at, after));
                    }
                }
                Ok(Piece::End) => {
                    producer.done = true;
                    let reached = producer.reached;
                    state.end = Some(reached);
                }
                Ok(Piece::Failed(e)) => {
                    state.producer = None;
                    return Err(e);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Error::new(
                        ErrorCode::RequestFailed,
                        format!(
                            "`.records` produced nothing for this read within {} s (a read far ahead, or records all left out); retry to go on",
                            READ_BUDGET.as_secs()
                        ),
                    ));
                }
                // The producer ended without saying so: it panicked.
                Err(RecvTimeoutError::Disconnected) => {
                    state.producer = None;
                    return Err(Error::new(
                        ErrorCode::RequestFailed,
                        "the reader of `.records` stopped unexpectedly",
                    ));
                }
            }
        }
    }

    /// Starts a producer writing the plan's output from `position`, which
    /// is output offset `at`.
    fn start(&self, position: Position, at: u64, demand: Demand) -> Producer {
        let filling = Arc::new(Mutex::new(Filling::new(at, demand)));
        let filled = Arc::clone(&filling);
        let (sender, pieces) = sync_channel(2);
        let (spare, spares) = sync_channel(2);
        let plan = Arc::clone(&self.plan);
        let catalog = Arc::clone(&self.catalog);
        let work = Work::cancellable("producing `.records`");
        let producing = Arc::clone(&work);
        let spawned = std::thread::Builder::new()
            .name("pchronicle-records".into())
            .spawn(move || {
                work::within(&producing, || {
                    produce(&plan, &catalog, position, &sender, spares, filled)
                })
            });
        let pieces = match spawned {
            Ok(_) => pieces,
            Err(e) => {
                let (failed, pieces) = sync_channel(1);
                let _ = failed.send(Piece::Failed(Error::io(
                    std::path::Path::new("."),
                    &io::Error::other(format!("cannot start a reader thread: {e}")),
                )));
                pieces
            }
        };
        Producer::new(pieces, spare, filling, at, work)
    }
}

impl Producer {
    /// The reader's end of a producer started at output offset `at`
    /// (where `filling` started): nothing received yet. Not `filling`'s
    /// start read now: the producer runs already, and may have sent
    /// pieces from it, each moving it on.
    fn new(
        pieces: Receiver<Piece>,
        spare: SyncSender<Vec<u8>>,
        filling: Arc<Mutex<Filling>>,
        at: u64,
        work: Arc<Work>,
    ) -> Producer {
        Producer {
            pieces,
            spare,
            window: Window::default(),
            filling,
            reached: at,
            done: false,
            work,
        }
    }

    /// Says where the request waited on ends, and takes the piece being
    /// filled when it is the next and holds every byte the request asks
    /// for: the producer may have gone on reading without writing, and
    /// would hold them back until it writes again. Otherwise the producer
    /// sends its piece as it reaches `end`.
    fn take_filled(&self, end: u64, step: u64) -> Option<Piece> {
        let mut filling = self.filling.lock();
        filling.demand.set(end, step);
        let filled = filling.at + filling.buf.len() as u64;
        if filling.at != self.reached || filled < end {
            return None;
        }
        let (bytes, last) = filling.take(Vec::new());
        Some(Piece::Bytes(bytes, last))
    }
}

impl State {
    /// Stops the producer, keeping where it was as a checkpoint.
    fn pause(&mut self) {
        self.producer = None;
        if let Some((at, position)) = self.latest.take() {
            if self.checkpoints.last().is_none_or(|last| last.0 < at) {
                self.checkpoints.push((at, position));
            }
        }
    }

    fn note_checkpoint(&mut self, at: u64, position: Position) {
        let last = self.checkpoints.last().map_or(0, |c| c.0);
        if at < last + self.spacing {
            return;
        }
        self.checkpoints.push((at, position));
        if self.checkpoints.len() > MAX_CHECKPOINTS {
            let mut i = 0;
            self.checkpoints.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.spacing *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::producer::ChannelOutput;
    use super::*;
    use crate::extract::Output;
    use std::io::Write;

    /// A producer's output and the reader's end of it, with no thread
    /// between: the test writes as the producer and reads as the reader.
    fn pair(demand: Demand) -> (SyncSender<Piece>, Receiver<Vec<u8>>, Producer) {
        let (sender, pieces) = sync_channel(4);
        let (spare, spares) = sync_channel(2);
        let filling = Arc::new(Mutex::new(Filling::new(0, demand)));
        let producer = Producer::new(pieces, spare, filling, 0, Work::cancellable("a test"));
        (sender, spares, producer)
    }

    /// A piece's bytes, and where its last whole record ends.
    fn bytes(piece: Option<Piece>) -> Option<(Vec<u8>, Option<usize>)> {
        match piece? {
            Piece::Bytes(bytes, last) => Some((bytes, last.map(|(end, _)| end))),
            _ => panic!("only bytes"),
        }
    }

    #[test]
    fn a_request_takes_its_bytes_from_the_piece_being_filled_or_has_it_cut_at_its_end() {
        let (sender, spares, mut producer) = pair(Demand::new(1 << 20, 1 << 20));
        let mut out = ChannelOutput::new(&sender, spares, Arc::clone(&producer.filling));
        // Two records written, then the producer goes quiet: a request for
        // bytes within them takes the piece as it is, with the end of the
        // last record that ended in it.
        out.write_all(b"{\"a\":1}\n").unwrap();
        assert!(out.record_end(Position::default()).unwrap().is_continue());
        out.write_all(b"{\"b\":2}\n").unwrap();
        assert!(producer.pieces.try_recv().is_err(), "nothing was sent");
        let taken = bytes(producer.take_filled(12, 12)).expect("the bytes are in");
        assert_eq!(taken, (b"{\"a\":1}\n{\"b\":2}\n".to_vec(), Some(8)));
        producer.reached += 16;
        // A request past what is written waits, and the producer sends its
        // piece cut at the request's end, within a record.
        assert!(producer.take_filled(20, 4).is_none());
        out.write_all(b"{\"c\":3}\n").unwrap();
        // While that piece is on its way, the one being filled is not the
        // next, and is not taken.
        assert!(producer.take_filled(21, 1).is_none());
        let sent = producer.pieces.try_recv().ok();
        assert_eq!(bytes(sent).unwrap(), (b"{\"c\"".to_vec(), None));
        producer.reached += 4;
        let rest = bytes(producer.take_filled(21, 1)).expect("the rest is in");
        assert_eq!(rest, (b":3}\n".to_vec(), None));
        producer.reached += 4;
        // A request that ends within what the piece being filled holds,
        // made while a piece is on its way: the producer sends what it
        // holds before it writes on.
        out.write_all(b"{\"e\":5}\n").unwrap();
        assert!(producer.take_filled(60, 36).is_none());
        out.write_all(&[b'x'; 30]).unwrap();
        assert!(producer.take_filled(61, 1).is_none());
        out.write_all(b"yy").unwrap();
        let first = bytes(producer.pieces.try_recv().ok()).unwrap();
        assert_eq!(first.0.len(), 36);
        let second = bytes(producer.pieces.try_recv().ok()).unwrap();
        assert_eq!(second.0, b"xx");
        assert!(producer.pieces.try_recv().is_err());
    }

    /// The producer thread starts before its reader's end is made, and may
    /// have sent pieces by then: the reader's end starts where the producer
    /// did, so those pieces are the next ones, not skipped.
    #[test]
    fn a_reader_made_after_its_producer_sent_starts_where_the_producer_did() {
        let (sender, pieces) = sync_channel(4);
        let (spare, spares) = sync_channel(2);
        let filling = Arc::new(Mutex::new(Filling::new(1000, Demand::new(1004, 4))));
        let mut out = ChannelOutput::new(&sender, spares, Arc::clone(&filling));
        out.write_all(b"{\"a\":1}\n").unwrap();
        assert_eq!(filling.lock().at, 1004, "a piece went out");
        let producer = Producer::new(pieces, spare, filling, 1000, Work::cancellable("a test"));
        assert_eq!(producer.reached, 1000);
        // The bytes still being filled follow the piece on its way.
        assert!(producer.take_filled(1008, 4).is_none());
        let sent = bytes(producer.pieces.try_recv().ok()).unwrap();
        assert_eq!(sent.0, b"{\"a\"");
    }
}
