//! Warnings logged within a budget a minute.
//!
//! Whoever writes below a warehouse, or into its bucket, decides how many
//! warnings pchronicle meets: ten thousand keys that cannot be paths are
//! ten thousand skipped keys per listing, every listing TTL. A warning
//! such input can trigger is therefore never logged directly but through a
//! [`LogBudget`]: at most so many lines a minute, the rest counted, and the
//! count logged once with the first warning admitted after the minute, so
//! a hostile tree cannot fill the disk the log is on.
//!
//! [`WAREHOUSE`] is the budget of every warning a warehouse or a store can
//! trigger (the catalog, the stores, the remote client, the shard writer);
//! the FUSE adapter keeps one of its own for failed requests, so that the
//! two never starve each other. [`warn_limited!`] is how both are used:
//! the line is formatted only when it is admitted.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::ErrorCode;

/// Warehouse warnings logged a minute at most (see [`WAREHOUSE`]).
pub const WARNINGS_LOGGED_PER_MINUTE: u32 = 60;

/// The budget of every warning a warehouse or a store can trigger.
pub static WAREHOUSE: LogBudget = LogBudget::new(
    WARNINGS_LOGGED_PER_MINUTE,
    None,
    "warnings about the warehouse",
);

/// The length of a budget's window.
const WINDOW: Duration = Duration::from_secs(60);

/// How many lines may still be logged this minute, and how many were not.
#[derive(Debug)]
pub struct LogBudget {
    per_minute: u32,
    /// The code the line saying how many were not logged carries.
    code: Option<ErrorCode>,
    /// What was not logged, plural (`failed requests`).
    what: &'static str,
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// When the window began; `None` before the first line.
    started: Option<Instant>,
    logged: u32,
    dropped: u64,
}

/// What [`LogBudget::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Whether this line may be logged.
    pub admitted: bool,
    /// Lines not logged in the window that just ended, to be said now
    /// (once; 0 when there is nothing to say).
    pub unlogged: u64,
}

impl LogBudget {
    pub const fn new(per_minute: u32, code: Option<ErrorCode>, what: &'static str) -> LogBudget {
        LogBudget {
            per_minute,
            code,
            what,
            window: Mutex::new(Window {
                started: None,
                logged: 0,
                dropped: 0,
            }),
        }
    }

    /// Whether one more line may be logged now.
    pub fn admit(&self) -> Admission {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Admission {
        let mut window = self.window.lock();
        let mut unlogged = 0;
        let expired = window
            .started
            .is_none_or(|started| now.saturating_duration_since(started) >= WINDOW);
        if expired {
            unlogged = window.dropped;
            *window = Window {
                started: Some(now),
                logged: 0,
                dropped: 0,
            };
        }
        if window.logged < self.per_minute {
            window.logged += 1;
            Admission {
                admitted: true,
                unlogged,
            }
        } else {
            window.dropped += 1;
            Admission {
                admitted: false,
                unlogged,
            }
        }
    }

    /// The line saying that `unlogged` lines were left out.
    pub fn unlogged_line(&self, unlogged: u64) -> String {
        let what = self.what;
        match self.code {
            Some(code) => {
                format!("error[{code}]: {unlogged} more {what} were not logged in the last minute")
            }
            None => format!("{unlogged} more {what} were not logged in the last minute"),
        }
    }
}

/// `log::warn!` through a [`LogBudget`] (`budget: B, …`; without one,
/// [`WAREHOUSE`]), logged from the caller's module (its target): the
/// arguments are formatted only when the line is admitted. Evaluates to
/// whether it was.
macro_rules! warn_limited {
    (budget: $budget:expr, $($arg:tt)+) => {{
        let budget: &$crate::logbudget::LogBudget = &$budget;
        let admission = budget.admit();
        if admission.unlogged > 0 {
            log::warn!("{}", budget.unlogged_line(admission.unlogged));
        }
        if admission.admitted {
            log::warn!($($arg)+);
        }
        admission.admitted
    }};
    ($($arg:tt)+) => {
        $crate::logbudget::warn_limited!(budget: $crate::logbudget::WAREHOUSE, $($arg)+)
    };
}
pub(crate) use warn_limited;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_admits_its_lines_a_minute_and_counts_the_rest_once() {
        let budget = LogBudget::new(3, Some(ErrorCode::RequestFailed), "failed requests");
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let admitted: Vec<bool> = (0..5).map(|_| budget.admit_at(at(1)).admitted).collect();
        assert_eq!(admitted, [true, true, true, false, false]);
        // Still the first minute (it began with the first line).
        assert_eq!(
            budget.admit_at(at(60)),
            Admission {
                admitted: false,
                unlogged: 0
            }
        );
        // The next minute: the three left out are said once.
        assert_eq!(
            budget.admit_at(at(61)),
            Admission {
                admitted: true,
                unlogged: 3
            }
        );
        assert_eq!(
            budget.admit_at(at(62)),
            Admission {
                admitted: true,
                unlogged: 0
            }
        );
        assert_eq!(
            budget.unlogged_line(3),
            "error[PCHRONICLE_REQUEST_FAILED]: 3 more failed requests were not logged in the last minute"
        );
    }

    #[test]
    fn warn_limited_logs_only_what_its_budget_admits() {
        let budget = LogBudget::new(2, None, "warnings");
        let admitted = (0..10_000)
            .filter(|i| warn_limited!(budget: budget, "skipped key {i}"))
            .count();
        assert_eq!(admitted, 2);
        assert_eq!(
            budget.unlogged_line(9_998),
            "9998 more warnings were not logged in the last minute"
        );
    }

    #[test]
    fn the_warehouse_budget_bounds_ten_thousand_warnings_to_a_minutes_lines() {
        let admitted = (0..10_000)
            .filter(|_| warn_limited!("skipped {} key(s)", 1))
            .count();
        // Other tests share the budget, and its minute may turn over once
        // during the loop.
        assert!(
            admitted <= 2 * WARNINGS_LOGGED_PER_MINUTE as usize,
            "{admitted} lines"
        );
    }
}
