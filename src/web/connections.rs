//! The server's connections: bounded in number, and never able to keep a
//! token holder out.
//!
//! Every connection is accepted at once (accepting never waits) and starts
//! *anonymous*: it may fetch the pages' shell and scripts and be told it
//! needs the token, nothing that reads the warehouse. Anonymous
//! connections are few ([`ANONYMOUS`] in all, [`PER_ADDRESS`] from one
//! client address): when a new one would pass a bound, the oldest
//! anonymous connection of that address (or, past the total, of the
//! address holding the most) is closed for it. The first request that
//! brings the token (or any API request, on a server without one) makes
//! its connection *trusted*: it takes one of [`TRUSTED`] places that
//! anonymous clients never hold, so nothing they open, send or refuse to
//! read can take a place a token holder needs.
//!
//! A trusted connection is *busy* from the moment a request's head has
//! been read until its answer has been written out to the socket (the
//! socket's own writes are watched, not only the body handed to hyper);
//! otherwise it is *idle*. When every trusted place is taken, the one idle
//! the longest is closed for the newcomer; only when every trusted
//! connection is busy does the newcomer's request wait. Every write that
//! makes no progress for [`WRITE_TIMEOUT`] ends its connection: a client
//! that stops reading holds its place no longer than that.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Trusted connections open at once.
pub const TRUSTED: usize = 256;
/// Anonymous connections open at once, from every address together.
pub const ANONYMOUS: usize = 128;
/// Anonymous connections open at once from one client address.
pub const PER_ADDRESS: usize = 32;
/// Longest a write to a client may make no progress.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The open connections.
pub struct Connections {
    trusted: Arc<Semaphore>,
    open: Mutex<Open>,
    bounds: Bounds,
}

/// The three bounds (the constants above, smaller in tests).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub trusted: usize,
    pub anonymous: usize,
    pub per_address: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            trusted: TRUSTED,
            anonymous: ANONYMOUS,
            per_address: PER_ADDRESS,
        }
    }
}

#[derive(Default)]
struct Open {
    next: u64,
    slots: HashMap<u64, Arc<Slot>>,
}

/// One connection, as [`Connections`] sees it.
pub struct Slot {
    id: u64,
    peer: IpAddr,
    /// Requests whose answers are being made or handed to hyper.
    busy: AtomicUsize,
    /// A write to the socket is waiting for the client to read.
    writing: AtomicBool,
    /// When it last became idle (its opening, or its last answer's end).
    idle_since: Mutex<Instant>,
    /// Its trusted place, once it has one.
    place: Mutex<Option<OwnedSemaphorePermit>>,
    /// Set (and `close` told) when it is to close to make room.
    closing: AtomicBool,
    close: Notify,
}

/// A connection's hold on [`Connections`]: dropping it forgets the
/// connection and frees its place.
pub struct Held {
    pub slot: Arc<Slot>,
    connections: Arc<Connections>,
}

impl Connections {
    pub fn new(bounds: Bounds) -> Arc<Connections> {
        Arc::new(Connections {
            trusted: Arc::new(Semaphore::new(bounds.trusted.max(1))),
            open: Mutex::new(Open::default()),
            bounds,
        })
    }

    /// Takes in a new connection from `peer`, as anonymous, closing the
    /// anonymous connection it displaces (if any). Never waits.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Held {
        let mut open = self.open.lock();
        let anonymous = |slot: &Arc<Slot>| !slot.is_trusted() && !slot.is_closing();
        let of_peer = open
            .slots
            .values()
            .filter(|s| anonymous(s) && s.peer == peer)
            .count();
        let all = open.slots.values().filter(|s| anonymous(s)).count();
        let displaced = if of_peer >= self.bounds.per_address.max(1) {
            Some(peer)
        } else if all >= self.bounds.anonymous.max(1) {
            // The address holding the most anonymous connections gives
            // one up.
            let mut counts: HashMap<IpAddr, usize> = HashMap::new();
            for slot in open.slots.values().filter(|s| anonymous(s)) {
                *counts.entry(slot.peer).or_default() += 1;
            }
            counts.into_iter().max_by_key(|(_, n)| *n).map(|(ip, _)| ip)
        } else {
            None
        };
        if let Some(ip) = displaced {
            let oldest = open
                .slots
                .values()
                .filter(|s| anonymous(s) && s.peer == ip)
                .min_by_key(|s| s.id);
            if let Some(slot) = oldest {
                slot.tell_to_close();
            }
        }
        let id = open.next;
        open.next += 1;
        let slot = Arc::new(Slot {
            id,
            peer,
            busy: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            place: Mutex::new(None),
            closing: AtomicBool::new(false),
            close: Notify::new(),
        });
        open.slots.insert(id, Arc::clone(&slot));
        Held {
            slot,
            connections: Arc::clone(self),
        }
    }

    /// Gives `slot` a trusted place (at once when it has one): a free
    /// place, else the place of the trusted connection idle the longest
    /// (told to close), else the first place a busy one leaves.
    pub async fn trust(&self, slot: &Slot) {
        if slot.is_trusted() {
            return;
        }
        let permit = loop {
            if let Ok(permit) = Arc::clone(&self.trusted).try_acquire_owned() {
                break permit;
            }
            if let Some(idle) = self.longest_idle() {
                idle.tell_to_close();
            }
            // A place that frees itself, or another look for an idle one
            // (a busy connection becomes idle without leaving).
            tokio::select! {
                permit = Arc::clone(&self.trusted).acquire_owned() => {
                    break permit.expect("the semaphore is never closed");
                }
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        };
        *slot.place.lock() = Some(permit);
    }

    /// The trusted connection idle the longest, if any.
    fn longest_idle(&self) -> Option<Arc<Slot>> {
        let open = self.open.lock();
        open.slots
            .values()
            .filter(|s| s.is_trusted() && s.is_idle() && !s.is_closing())
            .min_by_key(|s| *s.idle_since.lock())
            .map(Arc::clone)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.slot.place.lock().take();
        self.connections.open.lock().slots.remove(&self.slot.id);
    }
}

impl Slot {
    /// Whether nothing of the connection is being answered or written.
    pub fn is_idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0 && !self.writing.load(Ordering::SeqCst)
    }

    pub fn is_trusted(&self) -> bool {
        self.place.lock().is_some()
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    fn tell_to_close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.close.notify_one();
    }

    /// Keeps a connection told to close that became busy meanwhile: it
    /// may be chosen again.
    pub fn keep(&self) {
        self.closing.store(false, Ordering::SeqCst);
    }

    /// Resolves when the connection is to close to make room.
    pub async fn closing(&self) {
        self.close.notified().await;
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
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body that keeps its connection busy until hyper has taken
/// all of it (what hyper still has to write is watched by [`Watched`]).
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

/// A connection's socket whose writes are watched: while one waits for the
/// client to read, the connection is busy; one that waits longer than
/// [`WRITE_TIMEOUT`] fails (`TimedOut`), which ends the connection.
pub struct Watched<S> {
    inner: S,
    slot: Arc<Slot>,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
}

impl<S> Watched<S> {
    pub fn new(inner: S, slot: Arc<Slot>) -> Watched<S> {
        Watched::with_timeout(inner, slot, WRITE_TIMEOUT)
    }

    fn with_timeout(inner: S, slot: Arc<Slot>, timeout: Duration) -> Watched<S> {
        Watched {
            inner,
            slot,
            stalled: None,
            timeout,
        }
    }

    /// What a write's poll says, with the stall watched.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => {
                self.slot.writing.store(true, Ordering::SeqCst);
                let timeout = self.timeout;
                let stall = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if stall.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {} s", timeout.as_secs_f64()),
                    )));
                }
                Poll::Pending
            }
            done => {
                self.stalled = None;
                self.slot.writing.store(false, Ordering::SeqCst);
                done
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const OTHER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn bounds() -> Bounds {
        Bounds {
            trusted: 2,
            anonymous: 3,
            per_address: 2,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn anonymous_connections_displace_their_own_address_first_and_never_a_trusted_one() {
        let connections = Connections::new(bounds());
        let trusted = connections.admit(LOCAL);
        connections.trust(&trusted.slot).await;
        let a = connections.admit(LOCAL);
        let b = connections.admit(LOCAL);
        assert!(!a.slot.is_closing() && !b.slot.is_closing());
        // A third from the same address: its oldest anonymous one goes.
        let c = connections.admit(LOCAL);
        assert!(a.slot.is_closing());
        assert!(!b.slot.is_closing() && !c.slot.is_closing());
        assert!(!trusted.slot.is_closing());
        drop(a);
        // Another address, within both bounds: nobody goes.
        let d = connections.admit(OTHER);
        assert!(!b.slot.is_closing() && !c.slot.is_closing() && !d.slot.is_closing());
        // Its second is within its own bound but at the total (3): the
        // address holding the most gives its oldest up.
        let e = connections.admit(OTHER);
        assert!(b.slot.is_closing());
        assert!(!c.slot.is_closing() && !d.slot.is_closing() && !e.slot.is_closing());
        assert!(!trusted.slot.is_closing());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_house_of_trusted_closes_the_longest_idle_and_never_a_busy_one() {
        let connections = Connections::new(bounds());
        let first = connections.admit(LOCAL);
        let second = connections.admit(LOCAL);
        connections.trust(&first.slot).await;
        connections.trust(&second.slot).await;
        let busy = second.slot.busy();
        let third = connections.admit(OTHER);
        let trusting = tokio::spawn({
            let connections = Arc::clone(&connections);
            let slot = Arc::clone(&third.slot);
            async move { connections.trust(&slot).await }
        });
        first.slot.closing().await;
        assert!(!second.slot.is_closing(), "a busy one is never chosen");
        drop(first);
        trusting.await.unwrap();
        assert!(third.slot.is_trusted());
        // A connection whose answer is still being written is busy too.
        drop(busy);
        second.slot.writing.store(true, Ordering::SeqCst);
        assert!(!second.slot.is_idle());
        second.slot.writing.store(false, Ordering::SeqCst);
        assert!(second.slot.is_idle());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_write_the_client_never_reads_times_out() {
        let connections = Connections::new(bounds());
        let held = connections.admit(LOCAL);
        // A pipe whose far end reads nothing: writes fill it, then wait.
        let (near, _far) = tokio::io::duplex(64);
        let mut watched =
            Watched::with_timeout(near, Arc::clone(&held.slot), Duration::from_millis(200));
        let started = Instant::now();
        let mut written = 0usize;
        let error = loop {
            match tokio::io::AsyncWriteExt::write(&mut watched, &[0u8; 32]).await {
                Ok(n) => written += n,
                Err(e) => break e,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(written, 64);
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(!held.slot.is_idle(), "the stalled write kept it busy");
    }
}
