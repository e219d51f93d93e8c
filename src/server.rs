//! What the servers (`serve`, `worker`) share: the address they listen
//! on, and the signals they stop at.

use std::net::{SocketAddr, TcpListener};

use crate::error::{Error, ErrorCode, Result};

/// A listener on `listen` (non-blocking, for a tokio runtime), and the
/// address it got (port 0 picks one).
pub(crate) fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| {
            Error::new(
                ErrorCode::ServeListen,
                format!("cannot listen on {listen}: {e}"),
            )
        })?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::new(ErrorCode::ServeListen, e.to_string()))?;
    Ok((listener, local))
}

/// Resolves at the first SIGINT or SIGTERM after the call (the handlers
/// are installed by the call itself, not at the first poll). Called
/// within a tokio runtime.
pub(crate) fn stop() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
