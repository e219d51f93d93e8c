//! Reads spread over other machines: `pchronicle worker`, and the
//! coordinator's side of `query`, `cat`, `stats` and `serve` with
//! `--workers`, on datafusion-distributed (its plans cut into stages that
//! run on workers, over Arrow Flight on gRPC).
//!
//! What travels to a worker is a plan: paths, filters and the sources of
//! its task, never records (`codec.rs`). A worker opens the warehouse
//! roots it serves itself and refuses any other path (`roots.rs`). The
//! coordinator checks every worker before it plans (`coordinator.rs`),
//! and a `cat` keeps its bytes and order whoever reads which part
//! (`cat.rs`). See docs/distributed.md.

pub mod cat;
mod codec;
pub mod coordinator;
mod roots;
pub mod stats;
pub mod worker;

use datafusion::common::DataFusionError;

pub use coordinator::{Workers, configure, configured};
pub use roots::Roots;

use crate::error::{Error, ErrorCode};

/// The codes a worker's failure is told by.
const WORKER_CODES: [ErrorCode; 6] = [
    ErrorCode::WorkerRoot,
    ErrorCode::WorkerVersion,
    ErrorCode::WorkerToken,
    ErrorCode::WorkerRefused,
    ErrorCode::WorkerUnavailable,
    ErrorCode::WorkerLost,
];

/// The coded error a failure of a spread read (`cat`, `stats`) is: the
/// code its innermost error carries (a worker's, or one a source's read
/// raised wherever it ran), `PCHRONICLE_WORKER_LOST` when the connection
/// to a worker failed, else `otherwise`.
pub fn error_of(error: &DataFusionError, otherwise: ErrorCode) -> Error {
    if let Some(error) = worker_error(error) {
        return error;
    }
    let root = crate::error::without_source_locations(&error.find_root().to_string());
    match carried_code(&root) {
        Some((code, message)) => Error::new(code, message),
        None => Error::new(otherwise, root),
    }
}

/// The code and message of a coded error carried as text
/// (`error[CODE]: message`).
fn carried_code(text: &str) -> Option<(ErrorCode, String)> {
    let at = text.find("error[PCHRONICLE_")?;
    let rest = &text[at + "error[".len()..];
    let (code, message) = rest.split_once("]: ")?;
    Some((ErrorCode::parse(code)?, message.trim().to_string()))
}

/// The error a query fails with when a worker is why: a worker's code it
/// carries, or `PCHRONICLE_WORKER_LOST` when the connection to a worker
/// failed (told by the kind of failure, never by text a record or the
/// SQL could hold).
pub fn worker_error(error: &DataFusionError) -> Option<Error> {
    let root = error.find_root();
    let text = root.to_string();
    if let Some((code, message)) = carried_code(&text).filter(|(c, _)| WORKER_CODES.contains(c)) {
        return Some(Error::new(code, message));
    }
    if let DataFusionError::External(e) = root {
        if let Some(status) = e.downcast_ref::<tonic::Status>() {
            if let Some((code, message)) =
                carried_code(status.message()).filter(|(c, _)| WORKER_CODES.contains(c))
            {
                return Some(Error::new(code, message));
            }
            let lost = matches!(
                status.code(),
                tonic::Code::Unavailable
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Aborted
            );
            return lost.then(|| lost_error(&status.to_string()));
        }
    }
    // The pool of connections says so when it cannot connect.
    let connecting = text.starts_with("Error connecting to Distributed DataFusion worker")
        || text.starts_with("Error waiting for Distributed DataFusion channel");
    connecting.then(|| lost_error(&text))
}

fn lost_error(cause: &str) -> Error {
    Error::new(
        ErrorCode::WorkerLost,
        format!(
            "a worker stopped answering while the read ran, so its part is missing and nothing is passed off as whole: {}",
            crate::error::without_source_locations(cause)
        ),
    )
}
