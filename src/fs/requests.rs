//! What every request's answer goes through, on a serving thread or a
//! worker alike: the filesystem, the failure log (with its budget), the
//! metrics, and the catch of a panic. [`Core`] is shared with the workers
//! that make slow answers ([`super::workers`]), so a request answered
//! there is logged and counted exactly as one answered at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::Errno;

use super::FsError;
use super::filesystem::WarehouseFs;
use super::metrics::{Metrics, Op};
use super::passthrough::Passthrough;
use super::workers::Late;
use crate::error::ErrorCode;
use crate::logbudget::LogBudget;

/// Where requests' failures are logged, whichever thread answered them:
/// the protocol layer's name, which operators filter on
/// (`RUST_LOG=pchronicle::fs::fuse=debug`, see docs/operations.md).
const LOG_TARGET: &str = "pchronicle::fs::fuse";

/// The state a request's answer needs, wherever it is made.
pub struct Core {
    pub fs: Arc<WarehouseFs>,
    pub passthrough: Passthrough,
    failures_logged: LogBudget,
    /// Request counts and latencies, when the mount logs metrics (set
    /// once, before the session serves).
    pub metrics: std::sync::OnceLock<Arc<Metrics>>,
}

impl Core {
    pub fn new(fs: WarehouseFs) -> Core {
        Core {
            fs: Arc::new(fs),
            passthrough: Passthrough::default(),
            failures_logged: LogBudget::new(
                FAILURES_LOGGED_PER_MINUTE,
                Some(ErrorCode::RequestFailed),
                "failed requests",
            ),
            metrics: std::sync::OnceLock::new(),
        }
    }

    /// Makes one request's answer: `call` is the one call into the
    /// filesystem. A failure is logged with the operation, the inode and
    /// the error's code, and given as its errno; a panic is caught and
    /// logged, and gives `None` (the reply is then dropped unsent, which
    /// the kernel receives as `EIO`).
    pub fn call<T>(
        &self,
        op: Op,
        ino: u64,
        call: impl FnOnce() -> Result<T, FsError>,
    ) -> Option<Result<T, Errno>> {
        let mut answer = None;
        guarded(op.name(), || {
            answer = Some(call().map_err(|error| {
                self.failed(op.name(), ino, &error);
                Errno::from_i32(error.raw_errno())
            }))
        });
        answer
    }

    /// Counts one request answered (successfully or not) with its latency
    /// from `started`, when the mount logs metrics.
    pub fn counted(&self, op: Op, started: Instant, ok: bool) {
        if let Some(metrics) = self.metrics.get() {
            metrics.record(op, started.elapsed(), !ok);
        }
    }

    /// Logs a request the workers answered without its answer.
    pub fn late(&self, what: Late) {
        let (code, op, ino, why) = match what {
            Late::Refused { op, ino } => (
                ErrorCode::Busy,
                op,
                ino,
                "every worker is busy and the queue is full; answered EAGAIN".to_string(),
            ),
            Late::Expired { op, ino, budget } => (
                ErrorCode::AnswerLate,
                op,
                ino,
                format!(
                    "not answered within {}; answered EIO (the work goes on, and what it finds is kept for the next reader)",
                    seconds(budget)
                ),
            ),
        };
        self.log_failure(format!(
            "error[{code}]: {op} of {}: {why}",
            self.fs.describe(ino)
        ));
    }

    /// Logs one failure line within the per-minute budget.
    fn log_failure(&self, line: String) {
        let admission = self.failures_logged.admit();
        if admission.unlogged > 0 {
            log::warn!(
                target: LOG_TARGET,
                "{}",
                self.failures_logged.unlogged_line(admission.unlogged)
            );
        }
        if admission.admitted {
            log::warn!(target: LOG_TARGET, "{}", capped(line, FAILURE_LINE_BYTES));
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

impl Core {
    /// Logs a failed request once, with the operation, the path it was
    /// about and the error's code and cause: expected answers (a name that
    /// is not there) at debug, everything else as a warning, within
    /// [`FAILURES_LOGGED_PER_MINUTE`].
    pub fn failed(&self, op: &str, ino: u64, error: &FsError) {
        let about = || self.fs.describe(ino);
        if error.is_expected() {
            if log::log_enabled!(target: LOG_TARGET, log::Level::Debug) {
                log::debug!(target: LOG_TARGET, "{op} of {}: {error}", about());
            }
            return;
        }
        let line = match error.code() {
            Some(_) => format!("{op} of {}: {error}", about()),
            None => format!(
                "error[{}]: {op} of {}: {error}",
                ErrorCode::RequestFailed,
                about()
            ),
        };
        self.log_failure(line);
    }
}

/// The longest failure line logged: a path and a message may each be
/// 4 KiB and more, escaped, and 60 of them a minute must stay small.
const FAILURE_LINE_BYTES: usize = 1024;

/// `line` cut to at most `max` bytes (at a character boundary), saying how
/// much was left out.
fn capped(line: String, max: usize) -> String {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &line[..end], line.len() - end)
}

/// Failed requests logged a minute at most: a hostile tree can make every
/// request fail, and must not fill the disk the log is on. The rest are
/// counted, and the count is logged with the next failure after the
/// minute.
pub const FAILURES_LOGGED_PER_MINUTE: u32 = 60;

/// Runs one request's handler, answering `EIO` if it panics: the reply the
/// handler owned is dropped unsent, which the kernel receives as `EIO`.
pub fn guarded(op: &'static str, handler: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log::error!(
            target: LOG_TARGET,
            "error[{}]: {op} panicked and was answered with EIO: {}",
            ErrorCode::RequestFailed,
            what.escape_debug()
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_failure_lines_are_cut_at_a_character_boundary() {
        assert_eq!(super::capped("short".into(), 10), "short");
        let line = "é".repeat(600);
        let cut = super::capped(line.clone(), 1023);
        assert!(cut.starts_with(&"é".repeat(511)), "{cut}");
        assert!(cut.ends_with("… (178 more bytes)"), "{cut}");
    }
}
