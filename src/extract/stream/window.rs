//! What a stream's producer and reader share: where the reader's requests
//! end (the producer cuts pieces there), the piece being filled, and the
//! pieces received, read back without a copy when a request is one piece.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use super::producer::PIECE;
use crate::extract::Position;

/// Fewest bytes in a piece cut where a reader would ask next.
pub const LEAST_PIECE: usize = 64 << 10;

/// Where a reader's requests end, as the producer cuts pieces by them: the
/// end of the last request, and its size. A piece goes out when it
/// reaches the next end a reader reading on in requests of that size would
/// ask for, so a reader reading on answers each request from one piece,
/// with no copy.
pub struct Demand {
    end: u64,
    step: u64,
}

impl Demand {
    pub fn new(end: u64, step: u64) -> Demand {
        Demand {
            end,
            step: step.max(1),
        }
    }

    pub fn set(&mut self, end: u64, step: u64) {
        self.end = end;
        self.step = step.max(1);
    }

    /// The first request end past `sent`: the last request's, or one of
    /// those after it.
    pub fn boundary_after(&self, sent: u64) -> u64 {
        if sent < self.end {
            return self.end;
        }
        let steps = (sent - self.end) / self.step + 1;
        self.end.saturating_add(steps.saturating_mul(self.step))
    }
}

/// The piece a producer is filling, shared with its reader under one lock.
/// The reader says there where its requests end, and takes the piece
/// itself when every byte it asks for is in it: a producer that went on
/// reading without writing (a long run of invalid records, a leaf of
/// failed rows) would hold those bytes back until it writes again.
pub struct Filling {
    pub buf: Vec<u8>,
    /// The output offset where `buf` starts.
    pub at: u64,
    /// Where the last whole record in `buf` ends, if one does, and the
    /// position that resumes there.
    pub last: Option<(usize, Position)>,
    pub demand: Demand,
}

impl Filling {
    pub fn new(at: u64, demand: Demand) -> Filling {
        Filling {
            buf: Vec::new(),
            at,
            last: None,
            demand,
        }
    }

    /// The length `buf` goes out at, wherever that falls in a record: the
    /// end of the request the reader waits on, if it is not yet in; else
    /// the first end a reader reading on would ask for that leaves at
    /// least [`LEAST_PIECE`] bytes (a reader of small requests has its
    /// bytes in a few pieces, not one each); at most a [`PIECE`].
    pub fn limit(&self) -> usize {
        let end = if self.at < self.demand.end {
            self.demand.end
        } else {
            let least = self.at.saturating_add(LEAST_PIECE as u64 - 1);
            self.demand.boundary_after(least)
        };
        let to_end = usize::try_from(end.saturating_sub(self.at)).unwrap_or(usize::MAX);
        to_end.clamp(1, PIECE)
    }

    /// Takes what is buffered as a piece, with its last record end,
    /// leaving `next` to fill. A piece far smaller than its buffer is
    /// moved to one of its size: a window may hold many small ones.
    pub fn take(&mut self, next: Vec<u8>) -> (Vec<u8>, Option<(usize, Position)>) {
        let mut piece = std::mem::replace(&mut self.buf, next);
        if piece.len() <= piece.capacity() / 8 {
            piece.shrink_to_fit();
        }
        self.at += piece.len() as u64;
        (piece, self.last.take())
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
        let mut demand = Demand::new(1 << 20, 1 << 20);
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
    fn a_small_piece_is_moved_to_a_buffer_of_its_size_and_a_large_one_is_not() {
        let mut filling = Filling::new(10, Demand::new(11, 1));
        filling.buf = Vec::with_capacity(PIECE);
        filling.buf.extend_from_slice(b"abc");
        let (piece, _) = filling.take(Vec::with_capacity(PIECE));
        assert_eq!((piece.as_slice(), filling.at), (&b"abc"[..], 13));
        assert!(piece.capacity() < PIECE / 8);
        filling.buf.resize(PIECE / 2, b'x');
        let (piece, _) = filling.take(Vec::new());
        assert_eq!(piece.capacity(), PIECE);
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
