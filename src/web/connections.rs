//! The server's connections: bounded in number, and never held by clients
//! that send nothing.
//!
//! A connection is *busy* from the moment its request's head has been read
//! until its answer's body has been sent; otherwise it is *idle* (waiting
//! for a first request, for the rest of a slow head, or kept alive between
//! requests). When every place is taken, the connection idle the longest
//! is closed to make room: a client that trickles its head, or opens
//! connections and sends nothing, cannot keep others out. No answer is
//! cut off to admit a new one: a connection is only chosen while none of
//! its answers is being made, and is shut down gracefully (what is still
//! being written is finished); only when every connection is busy does a
//! new one wait, in the kernel's backlog.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use parking_lot::Mutex;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a connection must have been idle before it may be closed to
/// make room (and how often a full house looks again for one).
const GRACE: Duration = Duration::from_millis(500);

/// The open connections.
pub struct Connections {
    places: Arc<Semaphore>,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next: u64,
    slots: HashMap<u64, Arc<Slot>>,
}

/// One connection, as [`Connections`] sees it.
pub struct Slot {
    /// Requests of this connection whose answers are being made or sent.
    busy: AtomicUsize,
    /// When it last became idle (its opening, or its last answer's end).
    idle_since: Mutex<Instant>,
    /// Told when the connection is to close to make room.
    close: Notify,
    /// It is closing (its answer, if any, finishing): not chosen again.
    closing: std::sync::atomic::AtomicBool,
    /// It has sent an answer (whose last bytes may still be on their way
    /// out when it is chosen).
    answered: std::sync::atomic::AtomicBool,
}

/// A place held by one connection; leaving it frees the place.
pub struct Place {
    id: u64,
    pub slot: Arc<Slot>,
    connections: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
}

impl Connections {
    pub fn new(limit: usize) -> Arc<Connections> {
        Arc::new(Connections {
            places: Arc::new(Semaphore::new(limit.max(1))),
            open: Mutex::new(Open::default()),
        })
    }

    /// A place for a new connection: a free one, else the place of the
    /// connection idle the longest (told to close; looked for again at
    /// every [`GRACE`] while none frees), else the first place a busy
    /// connection leaves.
    pub async fn admit(self: &Arc<Self>) -> Place {
        let permit = loop {
            if let Ok(permit) = Arc::clone(&self.places).try_acquire_owned() {
                break permit;
            }
            if let Some(idle) = self.longest_idle() {
                idle.close.notify_one();
            }
            // A place that frees itself, or another look for an idle one.
            tokio::select! {
                permit = Arc::clone(&self.places).acquire_owned() => {
                    break permit.expect("the semaphore is never closed");
                }
                _ = tokio::time::sleep(GRACE) => {}
            }
        };
        let slot = Arc::new(Slot {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            close: Notify::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
            answered: std::sync::atomic::AtomicBool::new(false),
        });
        let mut open = self.open.lock();
        let id = open.next;
        open.next += 1;
        open.slots.insert(id, Arc::clone(&slot));
        Place {
            id,
            slot,
            connections: Arc::clone(self),
            _permit: permit,
        }
    }

    /// The connection idle the longest, if one has been idle for at least
    /// [`GRACE`] (an answer just sent may still be on its way out).
    fn longest_idle(&self) -> Option<Arc<Slot>> {
        let open = self.open.lock();
        open.slots
            .values()
            .filter(|s| s.is_idle() && !s.closing.load(Ordering::SeqCst))
            .map(|s| (*s.idle_since.lock(), s))
            .filter(|(since, _)| since.elapsed() >= GRACE)
            .min_by_key(|(since, _)| *since)
            .map(|(_, s)| Arc::clone(s))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.connections.open.lock().slots.remove(&self.id);
    }
}

impl Slot {
    /// Whether no request of the connection is being answered.
    pub fn is_idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }

    /// Resolves when the connection is to close to make room.
    pub async fn closing(&self) {
        self.close.notified().await;
    }

    /// Whether it has sent an answer.
    pub fn has_answered(&self) -> bool {
        self.answered.load(Ordering::SeqCst)
    }

    /// Marks the connection as closing: it is not chosen again.
    pub fn mark_closing(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Marks a request as being answered until the guard (moved into its
    /// answer's body) is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(self))
    }
}

/// A request being answered (see [`Slot::busy`]).
pub struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock() = Instant::now();
        self.0.answered.store(true, Ordering::SeqCst);
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body that keeps its connection busy until it is sent (or
/// dropped).
pub struct Guarded {
    body: Body,
    _busy: Busy,
}

impl Guarded {
    pub fn body(body: Body, busy: Busy) -> Body {
        Body::new(Guarded { body, _busy: busy })
    }
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_house_closes_the_longest_idle_and_never_a_busy_one() {
        let connections = Connections::new(2);
        let first = connections.admit().await;
        let second = connections.admit().await;
        let busy = second.slot.busy();
        // Nothing has been idle long enough yet.
        assert!(connections.longest_idle().is_none());
        std::thread::sleep(GRACE);
        // Full: the first (idle) is told to close; it leaves its place.
        let admitting = tokio::spawn({
            let connections = Arc::clone(&connections);
            async move { connections.admit().await }
        });
        first.slot.closing().await;
        drop(first);
        let third = admitting.await.unwrap();
        // Full again, and the only idle one is the newest; the busy one
        // is never chosen.
        std::thread::sleep(GRACE);
        assert!(Arc::ptr_eq(
            &connections.longest_idle().unwrap(),
            &third.slot
        ));
        drop(third);
        assert!(connections.longest_idle().is_none());
        drop(busy);
        std::thread::sleep(GRACE);
        assert!(connections.longest_idle().is_some());
    }
}
