//! The reader's side of a stream: where its requests end (the producer
//! cuts pieces there) and the pieces received, read back without a copy
//! when a request is one piece.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;

/// Where a reader's requests end, as the producer cuts pieces by them: the
/// end of the last request, and its size. A piece goes out at the first
/// record end that reaches the next end a reader reading on in requests of
/// that size would ask for, so a request never waits on bytes held back in
/// a piece being filled while the producer reads on without writing (a
/// long run of invalid records, a leaf of failed rows), whether the request
/// came before the producer reached its end or after.
pub struct Demand {
    end: AtomicU64,
    step: AtomicU64,
}

impl Demand {
    pub fn new(end: u64, step: u64) -> Demand {
        Demand {
            end: AtomicU64::new(end),
            step: AtomicU64::new(step.max(1)),
        }
    }

    pub fn set(&self, end: u64, step: u64) {
        self.step.store(step.max(1), Ordering::Relaxed);
        self.end.store(end, Ordering::Relaxed);
    }

    /// The first request end past `sent`: the last request's, or one of
    /// those after it.
    pub fn boundary_after(&self, sent: u64) -> u64 {
        let end = self.end.load(Ordering::Relaxed);
        let step = self.step.load(Ordering::Relaxed).max(1);
        if sent < end {
            return end;
        }
        let steps = (sent - end) / step + 1;
        end.saturating_add(steps.saturating_mul(step))
    }
}

/// Bytes of a stream handed to a reader: a range of one piece, shared
/// with the window (no copy), or a copy across pieces.
pub enum Chunk {
    Piece(Arc<Vec<u8>>, Range<usize>),
    Copied(Vec<u8>),
}

impl Chunk {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Chunk::Piece(piece, range) => &piece[range.clone()],
            Chunk::Copied(bytes) => bytes,
        }
    }
}

/// Output bytes as the pieces they came in, so each byte is copied at
/// most once on its way to a reader, and not at all when a request is
/// one piece.
#[derive(Default)]
pub struct Window {
    pieces: VecDeque<Arc<Vec<u8>>>,
    pub len: usize,
}

impl Window {
    pub fn push(&mut self, piece: Vec<u8>) {
        self.len += piece.len();
        self.pieces.push_back(Arc::new(piece));
    }

    /// Drops the front pieces that lie wholly within the first `n` bytes,
    /// handing their buffers back to the producer (those no reply holds
    /// any more).
    pub fn drop_front(&mut self, mut n: usize, spare: &SyncSender<Vec<u8>>) {
        while let Some(first) = self.pieces.front() {
            if first.len() > n {
                return;
            }
            n -= first.len();
            self.len -= first.len();
            let piece = self.pieces.pop_front().expect("looked at just above");
            if let Ok(piece) = Arc::try_unwrap(piece) {
                let _ = spare.try_send(piece);
            }
        }
    }

    /// Bytes `from..to` of the window.
    pub fn chunk(&self, from: usize, to: usize) -> Chunk {
        let mut base = 0;
        for piece in &self.pieces {
            let end = base + piece.len();
            if from >= base && to <= end {
                return Chunk::Piece(Arc::clone(piece), from - base..to - base);
            }
            if end > from {
                break;
            }
            base = end;
        }
        let mut out = Vec::with_capacity(to.saturating_sub(from));
        let mut base = 0;
        for piece in &self.pieces {
            if base >= to {
                break;
            }
            let lo = from.clamp(base, base + piece.len()) - base;
            let hi = to.clamp(base, base + piece.len()) - base;
            out.extend_from_slice(&piece[lo..hi]);
            base += piece.len();
        }
        Chunk::Copied(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_cut_where_the_readers_requests_end() {
        let demand = Demand::new(1 << 20, 1 << 20);
        assert_eq!(demand.boundary_after(0), 1 << 20);
        assert_eq!(demand.boundary_after((1 << 20) - 1), 1 << 20);
        // Past the last request's end: the end of the next one, and of
        // the one after.
        assert_eq!(demand.boundary_after(1 << 20), 2 << 20);
        assert_eq!(demand.boundary_after((2 << 20) + 5), 3 << 20);
        // A reader of single bytes: a piece at every record end.
        demand.set(10, 1);
        assert_eq!(demand.boundary_after(10), 11);
        assert_eq!(demand.boundary_after(400), 401);
        // No overflow at the far end.
        demand.set(u64::MAX - 1, u64::MAX);
        assert_eq!(demand.boundary_after(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_request_within_one_piece_shares_it_and_one_across_pieces_is_copied() {
        let mut window = Window::default();
        window.push(b"abcd".to_vec());
        window.push(b"efgh".to_vec());
        window.push(b"ij".to_vec());
        let read = |from, to| {
            let chunk = window.chunk(from, to);
            let shared = matches!(chunk, Chunk::Piece(..));
            (
                String::from_utf8(chunk.as_slice().to_vec()).unwrap(),
                shared,
            )
        };
        assert_eq!(read(0, 4), ("abcd".into(), true));
        assert_eq!(read(4, 8), ("efgh".into(), true));
        assert_eq!(read(5, 7), ("fg".into(), true));
        assert_eq!(read(8, 10), ("ij".into(), true));
        assert_eq!(read(3, 5), ("de".into(), false));
        assert_eq!(read(2, 10), ("cdefghij".into(), false));
        assert_eq!(read(4, 4), ("".into(), true));
        // A piece a reply still holds is not handed back; the others are.
        let held = window.chunk(0, 4);
        let (spare, spares) = std::sync::mpsc::sync_channel(2);
        window.drop_front(8, &spare);
        assert_eq!(window.len, 2);
        assert_eq!(spares.try_recv().unwrap(), b"efgh");
        assert!(spares.try_recv().is_err());
        assert_eq!(held.as_slice(), b"abcd");
    }
}
