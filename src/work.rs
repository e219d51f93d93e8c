//! Budgets and cancellation for work done on someone's behalf.
//!
//! A [`Work`] is a cancel flag and, optionally, a deadline. Whoever starts
//! a piece of work on behalf of a request (a render of `.stats`, a count,
//! a `.records` producer) runs it [`within`] a `Work`; every read of a
//! warehouse file ([`crate::warehouse::Blob::read_at`]) then [`charge`]s
//! its bytes to the thread's current `Work`, which looks at the flag on
//! every read and at the clock at least every [`CHECK_EVERY`] bytes. So a
//! budget covers the work *inside* one file too: counting a 60 GB file of
//! zeros, or skipping invalid bytes in a `.records` stream, stops within
//! 64 MiB of the deadline or of a cancel, wherever it is.
//!
//! The current `Work` is per thread. A piece of work that spreads over
//! threads of its own (counting one file in ranges) hands it on with
//! [`current`] and [`within`].

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes read between two looks at the clock.
pub const CHECK_EVERY: u64 = 64 << 20;

/// One piece of work's budget: stopped when cancelled or past its
/// deadline.
#[derive(Debug)]
pub struct Work {
    cancelled: AtomicBool,
    deadline: Option<Instant>,
    /// What the work is, for the error that stops it.
    what: &'static str,
}

impl Work {
    /// Work with no deadline, stopped only by [`Work::cancel`].
    pub fn cancellable(what: &'static str) -> Arc<Work> {
        Arc::new(Work {
            cancelled: AtomicBool::new(false),
            deadline: None,
            what,
        })
    }

    /// Work that must end within `budget` from now.
    pub fn within_budget(what: &'static str, budget: Duration) -> Arc<Work> {
        Arc::new(Work {
            cancelled: AtomicBool::new(false),
            deadline: Instant::now().checked_add(budget),
            what,
        })
    }

    /// Work that must end by `deadline`.
    pub fn until(what: &'static str, deadline: Instant) -> Arc<Work> {
        Arc::new(Work {
            cancelled: AtomicBool::new(false),
            deadline: Some(deadline),
            what,
        })
    }

    /// Stops the work at its next read.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Whether the work is past its deadline.
    pub fn is_late(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// `Ok` while the work may go on; else the error that stops it.
    pub fn check(&self) -> io::Result<()> {
        if self.is_cancelled() {
            return Err(stopped(format!("{} was cancelled", self.what)));
        }
        if self.is_late() {
            return Err(stopped(format!("{} ran past its time budget", self.what)));
        }
        Ok(())
    }
}

/// The error a stopped piece of work fails with.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(String);

fn stopped(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, Stopped(message))
}

/// Whether `err` is a piece of work stopped by its budget or a cancel
/// (not a failure of the file it was reading).
pub fn is_stopped(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|inner| inner.is::<Stopped>())
}

struct Current {
    work: Arc<Work>,
    /// Bytes charged since the clock was last read.
    unchecked: u64,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Runs `f` as part of `work`: every file read `f` makes on this thread is
/// charged to it. The work that was current before comes back after.
pub fn within<R>(work: &Arc<Work>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Current>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|c| {
        c.borrow_mut().replace(Current {
            work: Arc::clone(work),
            unchecked: 0,
        })
    });
    let _restore = Restore(previous);
    f()
}

/// The work this thread does now, to hand on to a thread it starts.
pub fn current() -> Option<Arc<Work>> {
    CURRENT.with(|c| c.borrow().as_ref().map(|c| Arc::clone(&c.work)))
}

/// The error that stops the current work now, if it is cancelled or past
/// its deadline (reads the clock): for loops over many small pieces that
/// each read too little to be stopped by [`charge`].
pub fn check_current() -> io::Result<()> {
    CURRENT.with(|c| match c.borrow().as_ref() {
        Some(current) => current.work.check(),
        None => Ok(()),
    })
}

/// Runs `f` within `work` when there is one, else as it is.
pub fn within_opt<R>(work: Option<&Arc<Work>>, f: impl FnOnce() -> R) -> R {
    match work {
        Some(work) => within(work, f),
        None => f(),
    }
}

/// Charges `bytes` about to be read to the current work: an error once it
/// is cancelled (looked at on every call) or past its deadline (looked at
/// every [`CHECK_EVERY`] bytes). Free when no work is current.
pub fn charge(bytes: usize) -> io::Result<()> {
    CURRENT.with(|c| {
        let mut current = c.borrow_mut();
        let Some(current) = current.as_mut() else {
            return Ok(());
        };
        if current.work.is_cancelled() {
            return current.work.check();
        }
        current.unchecked = current.unchecked.saturating_add(bytes as u64);
        if current.unchecked >= CHECK_EVERY {
            current.unchecked = 0;
            return current.work.check();
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_outside_any_work_are_free() {
        assert!(charge(usize::MAX).is_ok());
    }

    #[test]
    fn a_cancel_stops_the_next_read() {
        let work = Work::cancellable("a test");
        within(&work, || {
            assert!(charge(10).is_ok());
            work.cancel();
            let err = charge(10).unwrap_err();
            assert!(is_stopped(&err), "{err}");
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        });
        assert!(charge(10).is_ok(), "the work ends with `within`");
    }

    #[test]
    fn a_deadline_is_looked_at_every_64_mib() {
        let work = Work::within_budget("a test", Duration::ZERO);
        within(&work, || {
            assert!(charge(1 << 20).is_ok(), "the clock is not read yet");
            let mut stopped_after = 1 << 20;
            while charge(1 << 20).is_ok() {
                stopped_after += 1 << 20;
            }
            assert!(stopped_after < CHECK_EVERY as usize + (1 << 20));
        });
    }

    #[test]
    fn nested_work_restores_the_outer_one() {
        let outer = Work::cancellable("outer");
        let inner = Work::cancellable("inner");
        within(&outer, || {
            within(&inner, || inner.cancel());
            assert!(charge(1).is_ok(), "the outer work is current again");
            assert!(current().is_some_and(|w| Arc::ptr_eq(&w, &outer)));
        });
        assert!(current().is_none());
    }
}
