//! The producer's side of a stream: the plan's output gathered into
//! pieces, each sent at the end of the record that reaches the end of a
//! reader's request ([`Demand`]) or nearly [`PIECE`] bytes.

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

use super::window::Demand;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode};
use crate::extract::{Output, Plan, Position};
use crate::records::read::Span;

/// Most output bytes in one piece handed from a producer to readers
/// (only a record larger than a piece fills one). A smaller piece costs a hand-over (a thread woken) more often: with the
/// mount's requests of 1 MiB, pieces of 128 KiB woke the reading thread
/// eight times a request, and a `.records` of short records took about
/// 40 % longer.
pub const PIECE: usize = 1 << 20;

/// What a producer sends.
pub enum Piece {
    /// Output bytes; when a whole record ends within them, where the last
    /// one ends (a length of these bytes) and the position that resumes
    /// there.
    Bytes(Vec<u8>, Option<(usize, Position)>),
    /// The output ended here.
    End,
    Failed(Error),
}

/// Runs `plan` from `from` (output offset `at`), sending its output in
/// pieces until it ends, fails, or its reader goes.
pub fn produce(
    plan: &Plan,
    catalog: &Catalog,
    from: Position,
    sender: &SyncSender<Piece>,
    spares: Receiver<Vec<u8>>,
    at: u64,
    demand: Arc<Demand>,
) {
    // Before the first piece is taken, so it comes from the heap.
    let _heap = crate::heap::Streaming::begin();
    let mut out = ChannelOutput::new(sender, spares, at, demand);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        plan.run(catalog, from, &mut out)
    }));
    if out.hung_up {
        return;
    }
    let last = match run {
        Ok(Ok(ControlFlow::Break(()))) => return,
        Ok(Ok(ControlFlow::Continue(()))) => Piece::End,
        Ok(Err(e)) => Piece::Failed(e),
        Err(_) => Piece::Failed(Error::new(
            ErrorCode::RequestFailed,
            "reading the records failed (a bug); see the daemon's log",
        )),
    };
    // What follows the last whole record is dropped: after a failure, the
    // part of the record it cut.
    out.buf.truncate(out.last.map_or(0, |(end, _)| end));
    if !out.buf.is_empty() && out.send().is_err() {
        return;
    }
    let _ = out.sender.send(last);
}

/// Gathers output into pieces for the channel.
struct ChannelOutput<'s> {
    sender: &'s SyncSender<Piece>,
    /// Buffers the reader is done with.
    spares: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    /// The output offset where `buf` starts.
    sent: u64,
    /// Where its reader's requests end.
    demand: Arc<Demand>,
    /// Where the last whole record in `buf` ends, if one does, and the
    /// position that resumes there.
    last: Option<(usize, Position)>,
    hung_up: bool,
}

impl<'s> ChannelOutput<'s> {
    fn new(
        sender: &'s SyncSender<Piece>,
        spares: Receiver<Vec<u8>>,
        at: u64,
        demand: Arc<Demand>,
    ) -> ChannelOutput<'s> {
        ChannelOutput {
            sender,
            spares,
            buf: Vec::with_capacity(PIECE),
            sent: at,
            demand,
            last: None,
            hung_up: false,
        }
    }

    /// The length `buf` may reach at a record end before it goes: the
    /// next end of a reader's request, or nearly a piece (a record that
    /// ends there ends the piece).
    fn limit(&self) -> usize {
        let boundary = self.demand.boundary_after(self.sent);
        let to_boundary = usize::try_from(boundary.saturating_sub(self.sent)).unwrap_or(usize::MAX);
        to_boundary.min(PIECE - (PIECE >> 3))
    }

    /// Sends what is buffered.
    fn send(&mut self) -> io::Result<()> {
        let next = match self.spares.try_recv() {
            Ok(mut spare) => {
                spare.clear();
                spare
            }
            Err(_) => Vec::with_capacity(PIECE),
        };
        let piece = std::mem::replace(&mut self.buf, next);
        self.sent += piece.len() as u64;
        let last = self.last.take();
        if self.sender.send(Piece::Bytes(piece, last)).is_err() {
            self.hung_up = true;
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the reader went away",
            ));
        }
        Ok(())
    }
}

impl Write for ChannelOutput<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        // A record larger than a piece goes out in pieces as it is
        // written, so memory stays bounded however large one write is.
        let room = PIECE.saturating_sub(self.buf.len()).max(1);
        let taken = bytes.len().min(room);
        self.buf.extend_from_slice(&bytes[..taken]);
        if self.buf.len() >= PIECE {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output for ChannelOutput<'_> {
    /// The lines that end before the piece must go are copied in one
    /// loop, with no bookkeeping per record; the one that ends the piece
    /// goes through `record_end`, and one that would not fit a piece
    /// through `write`.
    fn span_lines(&mut self, span: &Span<'_>, index: usize) -> io::Result<ControlFlow<()>> {
        let mut i = 0;
        while i < span.len() {
            if self.hung_up {
                return Ok(ControlFlow::Break(()));
            }
            let limit = self.limit();
            let first = i;
            while i < span.len() && self.buf.len() + span.bytes(i).len() + 1 < limit {
                self.buf.extend_from_slice(span.bytes(i));
                self.buf.push(b'\n');
                i += 1;
            }
            if i > first {
                self.last = Some((self.buf.len(), Position::after(index, span, i - 1)));
            }
            if i < span.len() {
                // The line that ends the piece, or does not fit one.
                self.write_all(span.bytes(i))?;
                self.write_all(b"\n")?;
                if self.record_end(Position::after(index, span, i))?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
                i += 1;
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    fn record_end(&mut self, after: Position) -> io::Result<ControlFlow<()>> {
        if self.hung_up {
            return Ok(ControlFlow::Break(()));
        }
        if self.buf.is_empty() {
            // The record ended exactly where a full piece went.
            return Ok(ControlFlow::Continue(()));
        }
        self.last = Some((self.buf.len(), after));
        if self.buf.len() >= self.limit() && self.send().is_err() {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::read::Resume;
    use std::sync::mpsc::sync_channel;

    /// Every piece `out` sent, after it is dropped.
    fn pieces(receiver: &Receiver<Piece>) -> Vec<(Vec<u8>, Option<(usize, Position)>)> {
        receiver
            .try_iter()
            .map(|piece| match piece {
                Piece::Bytes(bytes, last) => (bytes, last),
                _ => panic!("only bytes are sent"),
            })
            .collect()
    }

    /// Records of 0 to 40 000 bytes (some larger than a piece), given as
    /// one span or record by record, with a reader asking for `step`
    /// bytes at a time.
    fn run(step: u64, whole: bool) -> Vec<(Vec<u8>, Option<(usize, Position)>)> {
        let sizes =
            (0..400u64).map(|i| (i * 7919) % 40_000 + (i % 3) * 700_000 * (i % 50 == 0) as u64);
        let mut text = Vec::new();
        let mut bounds = vec![0i64];
        for (i, size) in sizes.enumerate() {
            text.extend((0..size).map(|j| b'a' + ((i as u64 + j) % 26) as u8));
            bounds.push(text.len() as i64);
        }
        let first = Resume {
            part: 1,
            offset: 0,
            line: 0,
        };
        let span = Span::new(&text, &bounds, first);
        let (sender, receiver) = sync_channel(1 << 12);
        let (_spare, spares) = sync_channel(2);
        let mut out = ChannelOutput::new(&sender, spares, 0, Arc::new(Demand::new(step, step)));
        if whole {
            assert!(out.span_lines(&span, 3).unwrap().is_continue());
        } else {
            for i in 0..span.len() {
                out.write_all(span.bytes(i)).unwrap();
                out.write_all(b"\n").unwrap();
                assert!(
                    out.record_end(Position::after(3, &span, i))
                        .unwrap()
                        .is_continue()
                );
            }
        }
        out.send().unwrap();
        drop(out);
        let sent = pieces(&receiver);
        // The output is every record and its line break, in order.
        let joined: Vec<u8> = sent.iter().flat_map(|(bytes, _)| bytes.clone()).collect();
        let mut want = Vec::new();
        for i in 0..span.len() {
            want.extend_from_slice(span.bytes(i));
            want.push(b'\n');
        }
        assert_eq!(joined, want);
        // Each position resumes after the record ending where it says.
        let ends: Vec<usize> = (1..bounds.len()).map(|i| bounds[i] as usize + i).collect();
        let mut base = 0;
        for (bytes, last) in &sent {
            assert!(bytes.len() <= PIECE);
            if let Some((end, after)) = last {
                let record = ends
                    .iter()
                    .position(|e| *e == base + end)
                    .expect("a record end");
                assert_eq!(after.within, span.next(record));
            }
            base += bytes.len();
        }
        sent
    }

    #[test]
    fn a_span_goes_out_as_the_same_pieces_as_its_records_one_by_one() {
        for step in [1, 4096, 1 << 20, 1 << 30] {
            let whole = run(step, true);
            let each = run(step, false);
            let cuts = |sent: &[(Vec<u8>, Option<(usize, Position)>)]| {
                sent.iter()
                    .map(|(b, l)| (b.len(), l.map(|l| l.0)))
                    .collect::<Vec<_>>()
            };
            assert_eq!(cuts(&whole), cuts(&each), "requests of {step}");
        }
    }
}
