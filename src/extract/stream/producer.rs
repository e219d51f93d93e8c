//! The producer's side of a stream: the plan's output gathered into
//! pieces, each sent when it reaches the end of a reader's request
//! ([`Demand`](super::window::Demand)) or [`PIECE`] bytes, wherever that
//! falls in a record.

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

use parking_lot::Mutex;

use super::window::Filling;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode};
use crate::extract::{Output, Plan, Position};
use crate::records::read::Span;

/// Most output bytes in one piece handed from a producer to readers. A
/// smaller piece costs a hand-over (a thread woken) more often: with the
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

/// Runs `plan` from `from`, filling `filling` (which starts at its output
/// offset) and sending what it fills in pieces until the output ends,
/// fails, or its reader goes.
pub fn produce(
    plan: &Plan,
    catalog: &Catalog,
    from: Position,
    sender: &SyncSender<Piece>,
    spares: Receiver<Vec<u8>>,
    filling: Arc<Mutex<Filling>>,
) {
    // Before the first piece is taken, so it comes from the heap.
    let _heap = crate::heap::Streaming::begin();
    let mut out = ChannelOutput::new(sender, spares, filling);
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
    // What follows the last whole record and is still here is dropped:
    // after a failure, the part of the record it cut that no piece took
    // (a piece ends where a request ends, inside a record or not).
    let (piece, end) = {
        let mut filling = out.filling.lock();
        let whole = filling.last.map_or(0, |(end, _)| end);
        filling.buf.truncate(whole);
        filling.take(Vec::new())
    };
    if !piece.is_empty() && out.send(piece, end).is_err() {
        return;
    }
    let _ = out.sender.send(last);
}

/// Gathers output into pieces for the channel.
pub(super) struct ChannelOutput<'s> {
    sender: &'s SyncSender<Piece>,
    /// Buffers the reader is done with.
    spares: Receiver<Vec<u8>>,
    filling: Arc<Mutex<Filling>>,
    hung_up: bool,
}

impl<'s> ChannelOutput<'s> {
    pub(super) fn new(
        sender: &'s SyncSender<Piece>,
        spares: Receiver<Vec<u8>>,
        filling: Arc<Mutex<Filling>>,
    ) -> ChannelOutput<'s> {
        ChannelOutput {
            sender,
            spares,
            filling,
            hung_up: false,
        }
    }

    /// A buffer for the next piece: one the reader is done with, or a new
    /// one (a small piece was moved to a buffer of its size).
    fn fresh(&self) -> Vec<u8> {
        match self.spares.try_recv() {
            Ok(mut spare) if spare.capacity() >= PIECE => {
                spare.clear();
                spare
            }
            _ => Vec::with_capacity(PIECE),
        }
    }

    /// Takes the piece being filled and sends it.
    fn seal(&mut self) -> io::Result<()> {
        let next = self.fresh();
        let (piece, last) = self.filling.lock().take(next);
        if piece.is_empty() {
            // The reader took it meanwhile.
            return Ok(());
        }
        self.send(piece, last)
    }

    fn send(&mut self, piece: Vec<u8>, last: Option<(usize, Position)>) -> io::Result<()> {
        if self.sender.send(Piece::Bytes(piece, last)).is_err() {
            self.hung_up = true;
            return Err(gone());
        }
        Ok(())
    }
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away")
}

/// Makes room in a buffer the reader took away.
fn ready(filling: &mut Filling) {
    if filling.buf.capacity() == 0 {
        filling.buf.reserve(PIECE);
    }
}

impl Write for ChannelOutput<'_> {
    /// Takes what fits before the piece must go (a record that does not
    /// fit goes on in the next piece), so memory stays bounded however
    /// large one write is.
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.hung_up {
            return Err(gone());
        }
        loop {
            let mut filling = self.filling.lock();
            let room = filling.limit().saturating_sub(filling.buf.len());
            if room > 0 {
                ready(&mut filling);
                let taken = bytes.len().min(room);
                filling.buf.extend_from_slice(&bytes[..taken]);
                drop(filling);
                if taken == room {
                    // The bytes are taken either way; a reader that went
                    // is told at the next write.
                    let _ = self.seal();
                }
                return Ok(taken);
            }
            // The reader asked for less meanwhile: what it asks for is in.
            drop(filling);
            self.seal()?;
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output for ChannelOutput<'_> {
    /// The lines that end before the piece must go are copied in one
    /// loop, under one lock, with no bookkeeping per record; the one that
    /// reaches the end of the piece goes through `write` and
    /// `record_end`.
    fn span_lines(&mut self, span: &Span<'_>, index: usize) -> io::Result<ControlFlow<()>> {
        let mut i = 0;
        while i < span.len() {
            if self.hung_up {
                return Ok(ControlFlow::Break(()));
            }
            {
                let mut filling = self.filling.lock();
                ready(&mut filling);
                let limit = filling.limit();
                let first = i;
                while i < span.len() && filling.buf.len() + span.bytes(i).len() + 1 < limit {
                    filling.buf.extend_from_slice(span.bytes(i));
                    filling.buf.push(b'\n');
                    i += 1;
                }
                if i > first {
                    let end = filling.buf.len();
                    filling.last = Some((end, Position::after(index, span, i - 1)));
                }
            }
            if i < span.len() {
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
        let mut filling = self.filling.lock();
        if filling.buf.is_empty() {
            // The record ended exactly where a piece went.
            return Ok(ControlFlow::Continue(()));
        }
        filling.last = Some((filling.buf.len(), after));
        let full = filling.buf.len() >= filling.limit();
        drop(filling);
        if full && self.seal().is_err() {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::stream::window::{Demand, LEAST_PIECE};
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
        let filling = Filling::new(0, Demand::new(step, step));
        let mut out = ChannelOutput::new(&sender, spares, Arc::new(Mutex::new(filling)));
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
        out.seal().unwrap();
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
        for (i, (bytes, last)) in sent.iter().enumerate() {
            assert!(bytes.len() <= PIECE);
            // Each piece but the last ends where a request ends, and only
            // the first (the request waited on) is smaller than the least.
            if i + 1 < sent.len() {
                let end = (base + bytes.len()) as u64;
                assert_eq!(end % step.min(PIECE as u64), 0, "requests of {step}");
                if i > 0 {
                    assert!(bytes.len() >= LEAST_PIECE, "requests of {step}");
                }
            }
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

    #[test]
    fn a_write_that_fills_a_piece_for_a_reader_gone_takes_its_bytes_and_the_next_fails() {
        let (sender, receiver) = sync_channel(1);
        drop(receiver);
        let (_spare, spares) = sync_channel(2);
        let filling = Filling::new(0, Demand::new(4, 4));
        let mut out = ChannelOutput::new(&sender, spares, Arc::new(Mutex::new(filling)));
        assert_eq!(out.write(b"abcdef").unwrap(), 4);
        assert!(out.hung_up);
        let next = out.write(b"ef").unwrap_err();
        assert_eq!(next.kind(), io::ErrorKind::BrokenPipe);
        assert!(out.record_end(Position::default()).unwrap().is_break());
    }
}
