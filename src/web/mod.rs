//! `pchronicle serve`: the warehouse over HTTP, as a JSON API and as pages
//! for a browser.
//!
//! One process holds one open warehouse ([`Catalog`]) and its caches for
//! every request. Each API endpoint answers with the bytes of the CLI
//! command it names, made by the same call into the layers below
//! (`api.rs`); the pages (`assets/`) are drawn in the browser from those
//! answers. Work that reads the warehouse never runs on the server's own
//! threads: it runs on a thread of its own within a budget, at most
//! `max_requests` at once (`state.rs`). `guard.rs` checks every request's
//! token and `Host` and gives every answer its security headers.
//!
//! The server is hyper's HTTP/1.1 on a small tokio runtime, with axum
//! routing; connections are bounded in number and in how long a client
//! may take to send its request.

mod api;
mod assets;
mod connections;
mod cursor;
mod guard;
mod metrics;
mod params;
mod runs;
mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

use crate::catalog::{Catalog, CatalogOptions};
use crate::error::{Error, ErrorCode, Result};
pub use state::Limits;
use state::Served;

/// Time a client has to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What `pchronicle serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub warehouse: PathBuf,
    pub listen: SocketAddr,
    /// The token every request must bring; `None`: none (loopback only).
    pub token: Option<String>,
    pub limits: Limits,
    pub catalog: CatalogOptions,
}

/// A token of 128 random bits, as hex.
pub fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| Error::new(ErrorCode::Io, format!("reading /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Serves until SIGINT or SIGTERM.
pub fn serve(options: ServeOptions) -> Result<()> {
    if options.token.is_none() && !options.listen.ip().is_loopback() {
        return Err(Error::new(
            ErrorCode::ServeListen,
            format!(
                "{} is not a loopback address: serving it without a token would let anyone who reaches it read the warehouse",
                options.listen
            ),
        ));
    }
    let (catalog, base) = Catalog::for_path(&options.warehouse, options.catalog.clone())?;
    // The base must exist and be readable now, not at the first request.
    catalog.list(&base).map_err(|e| crate::error::Error {
        path: Some(options.warehouse.clone()),
        ..e
    })?;
    let (listener, local) = crate::server::bind(options.listen)?;
    let served = Arc::new(Served::new(
        catalog,
        base,
        options.token.clone(),
        local,
        options.limits,
        random_token()?,
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pchronicle-serve")
        .enable_all()
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("cannot start the runtime: {e}")))?;
    let served_until_stopped = runtime.block_on(run(&options, Arc::clone(&served), listener));
    // The connections go first; the catalog (which may hold a runtime of
    // its own, and saves its counts) is dropped here, outside any task.
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(served);
    served_until_stopped
}

async fn run(
    options: &ServeOptions,
    served: Arc<Served>,
    listener: std::net::TcpListener,
) -> Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| Error::new(ErrorCode::ServeListen, e.to_string()))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::new(ErrorCode::ServeListen, e.to_string()))?;
    let app = api::router(Arc::clone(&served));
    let url = match &options.token {
        // In the fragment: a browser never sends it to any server, and the
        // pages take it from there (see guard.rs).
        Some(token) => format!("http://{}/#token={token}", display_host(local)),
        None => format!("http://{}/", display_host(local)),
    };
    println!(
        "serving {} at {url}\nCtrl-C stops it",
        crate::terminal::escaped(&options.warehouse.display().to_string())
    );
    log::info!("serving {} on {local}", options.warehouse.display());
    let notifier = crate::fs::notify::Notifier::from_env(false);
    if let Some(n) = &notifier {
        n.ready(None, &format!("serving on {local}"));
    }
    let connections = connections::Connections::new(connections::Bounds::default());
    let mut stop = std::pin::pin!(crate::server::stop());
    loop {
        // Accepting never waits for a place: every connection is taken in
        // at once, as anonymous (see connections.rs).
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    log::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let held = connections.admit(peer.ip());
        tokio::spawn(serve_connection(
            stream,
            app.clone(),
            held,
            Arc::clone(&connections),
            Arc::clone(&served),
        ));
    }
    if let Some(n) = &notifier {
        n.stopping();
    }
    log::info!("stopped serving");
    Ok(())
}

/// Serves one connection until it ends, or until it is told to make room
/// while nothing of it is being answered or written (see
/// `connections.rs`): it is then dropped at once.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    held: connections::Held,
    connections: Arc<connections::Connections>,
    served: Arc<Served>,
) {
    let inner = TowerToHyperService::new(app);
    let slot = Arc::clone(&held.slot);
    let trusting = Arc::clone(&served);
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let busy = slot.busy();
            let trusts = guard::trusts(&trusting, &request);
            let connections = Arc::clone(&connections);
            let slot = Arc::clone(&slot);
            let inner = inner.clone();
            async move {
                if trusts {
                    connections.trust(&slot).await;
                }
                hyper::service::Service::call(&inner, request)
                    .await
                    .map(|response| response.map(|body| connections::Guarded::body(body, busy)))
            }
        });
    let io = connections::Watched::new(stream, Arc::clone(&held.slot));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(64 << 10)
        .serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    loop {
        tokio::select! {
            ended = &mut connection => {
                if let Err(e) = ended {
                    log::debug!("a connection ended: {e}");
                }
                return;
            }
            () = held.slot.closing() => {
                // An anonymous connection goes whatever it is doing; a
                // trusted one only while idle (a request that came in
                // since it was chosen keeps it).
                if !held.slot.is_trusted() || held.slot.is_idle() {
                    break;
                }
                held.slot.keep();
            }
        }
    }
    served.metrics.connection_closed_idle();
    log::debug!("closing a connection to make room for a new one");
}

/// `ip:port` as a URL's host (IPv6 in brackets).
fn display_host(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(v4) => v4.to_string(),
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
    }
}
