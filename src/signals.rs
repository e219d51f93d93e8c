//! The signals a server stops at.

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
