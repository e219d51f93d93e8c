//! Serving threads only serve: slow answers are made by workers.
//!
//! The kernel's requests are read by a few serving threads (`--threads`).
//! An answer that may take long (a render of `.stats` or `.sources`, the
//! count behind an xattr, a read of `.records`, anything of a remote
//! warehouse) is not made on a serving thread: the request, with its
//! reply, goes to a worker of the pool here, and the serving thread goes
//! back to the kernel at once. So lookups, listings, opens and reads of
//! warehouse files are answered however many slow answers are under way.
//!
//! The pool is bounded: [`Workers::new`]'s threads, and at most its queue
//! of requests waiting for one; a request past that is answered `EAGAIN`
//! at once. Every request has a budget: when its answer is not ready by
//! then, the watchdog answers `EIO` in its place. Either is logged with
//! its code by the caller's `late` hook. The worker carries on: what it
//! renders or counts is kept for the next reader (the render cache, the
//! count cache), and its own answer is dropped. A reply is sent once,
//! by whichever of the two comes first.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fuser::{Errno, ReplyAttr, ReplyData, ReplyEntry, ReplyOpen, ReplyXattr};
use parking_lot::{Condvar, Mutex};

/// How often the watchdog looks for answers past their budget.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// A reply that can be failed: every kind a worker answers.
pub trait Failable: Send + 'static {
    fn fail(self, errno: Errno);
}

macro_rules! failable {
    ($($reply:ty),*) => {$(
        impl Failable for $reply {
            fn fail(self, errno: Errno) {
                self.error(errno)
            }
        }
    )*};
}
failable!(ReplyEntry, ReplyAttr, ReplyOpen, ReplyData, ReplyXattr);

/// One request's reply, sent by its worker or by the watchdog, whichever
/// takes it first.
pub struct Slot<R> {
    reply: Mutex<Option<R>>,
    deadline: Instant,
}

impl<R: Failable> Slot<R> {
    /// When the watchdog answers for the worker.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The reply, if nobody sent it yet.
    pub fn take(&self) -> Option<R> {
        self.reply.lock().take()
    }
}

/// What the watchdog sees of a slot.
trait Watched: Send + Sync {
    /// Fails the reply when past its deadline and still unsent; true when
    /// it did.
    fn expire(&self, now: Instant) -> bool;
    fn is_sent(&self) -> bool;
}

impl<R: Failable> Watched for Slot<R> {
    fn expire(&self, now: Instant) -> bool {
        if now < self.deadline {
            return false;
        }
        match self.take() {
            Some(reply) => {
                reply.fail(Errno::EIO);
                true
            }
            None => false,
        }
    }

    fn is_sent(&self) -> bool {
        self.reply.lock().is_none()
    }
}

type Job = Box<dyn FnOnce() + Send>;

type WatchedSlot = (Weak<dyn Watched>, &'static str, u64);

/// Called with what a late or refused request was, for the log.
pub type LateHook = Arc<dyn Fn(Late) + Send + Sync>;

/// Why a request was answered without its worker's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Late {
    /// Every worker was busy and the queue full: `EAGAIN`.
    Refused { op: &'static str, ino: u64 },
    /// Not ready within the budget: `EIO`.
    Expired {
        op: &'static str,
        ino: u64,
        budget: Duration,
    },
}

struct Shared {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    capacity: usize,
    /// The slots of requests not answered yet, with their operation and
    /// inode for the log.
    watched: Mutex<Vec<WatchedSlot>>,
    stopping: std::sync::atomic::AtomicBool,
}

/// The pool of workers that make slow answers, with its watchdog.
pub struct Workers {
    shared: Arc<Shared>,
    budget: Duration,
    late: LateHook,
}

impl Workers {
    /// `threads` workers, at most `queue` requests waiting, each answered
    /// within `budget` (or failed then); `late` hears of every request
    /// refused or expired.
    pub fn new(threads: usize, queue: usize, budget: Duration, late: LateHook) -> Workers {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            capacity: queue.max(1),
            watched: Mutex::new(Vec::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        for i in 0..threads.max(1) {
            let shared = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("pchronicle-worker-{i}"))
                .spawn(move || work(&shared));
            if let Err(e) = spawned {
                log::warn!("worker {i} not started: {e}");
            }
        }
        let watched = Arc::downgrade(&shared);
        let hook = Arc::clone(&late);
        let spawned = std::thread::Builder::new()
            .name("pchronicle-watchdog".into())
            .spawn(move || watch(&watched, budget, &hook));
        if let Err(e) = spawned {
            log::warn!("no watchdog for late answers: {e}");
        }
        Workers {
            shared,
            budget,
            late,
        }
    }

    /// The budget of every request.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Hands `reply` and the `job` making its answer to a worker. The job
    /// gets the slot to answer through; a reply the watchdog took is
    /// already sent (`EIO`). A full queue answers `EAGAIN` at once.
    pub fn submit<R: Failable>(
        &self,
        op: &'static str,
        ino: u64,
        reply: R,
        job: impl FnOnce(&Slot<R>) + Send + 'static,
    ) {
        let slot = Arc::new(Slot {
            reply: Mutex::new(Some(reply)),
            deadline: Instant::now() + self.budget,
        });
        let mut queue = self.shared.queue.lock();
        if queue.len() >= self.shared.capacity {
            drop(queue);
            if let Some(reply) = slot.take() {
                reply.fail(Errno::EAGAIN);
            }
            (self.late)(Late::Refused { op, ino });
            return;
        }
        let watched: Arc<dyn Watched> = slot.clone();
        self.shared
            .watched
            .lock()
            .push((Arc::downgrade(&watched), op, ino));
        queue.push_back(Box::new(move || job(&slot)));
        drop(queue);
        self.shared.ready.notify_one();
    }

    /// Requests waiting for a worker.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().len()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shared
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.ready.notify_all();
    }
}

fn work(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.queue.lock();
            loop {
                if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                if let Some(job) = queue.pop_front() {
                    break job;
                }
                shared.ready.wait(&mut queue);
            }
        };
        // A panic is the job's to catch (it answers EIO); one that gets
        // through must not end the worker.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

fn watch(shared: &Weak<Shared>, budget: Duration, late: &LateHook) {
    loop {
        std::thread::sleep(WATCH_EVERY);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        let mut expired = Vec::new();
        shared.watched.lock().retain(|(slot, op, ino)| {
            let Some(slot) = slot.upgrade() else {
                return false;
            };
            if slot.expire(now) {
                expired.push(Late::Expired {
                    op,
                    ino: *ino,
                    budget,
                });
                return false;
            }
            !slot.is_sent()
        });
        for what in expired {
            late(what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A reply that notes how it was answered.
    struct Noted(Arc<Mutex<Vec<Result<u32, Errno>>>>);

    impl Failable for Noted {
        fn fail(self, errno: Errno) {
            self.0.lock().push(Err(errno));
        }
    }

    fn pool(threads: usize, queue: usize, budget: Duration) -> (Workers, Arc<AtomicUsize>) {
        let lates = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&lates);
        let hook: LateHook = Arc::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        (Workers::new(threads, queue, budget, hook), lates)
    }

    fn wait_for(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_late_answer_is_failed_once_and_the_worker_goes_on() {
        let (workers, lates) = pool(1, 4, Duration::from_millis(100));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let finished = Arc::new(AtomicUsize::new(0));
        let done = Arc::clone(&finished);
        workers.submit("read", 1, Noted(Arc::clone(&answers)), move |slot| {
            std::thread::sleep(Duration::from_millis(400));
            if let Some(Noted(answers)) = slot.take() {
                answers.lock().push(Ok(1));
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
        wait_for(|| finished.load(Ordering::SeqCst) == 1);
        assert_eq!(*answers.lock(), vec![Err(Errno::EIO)]);
        assert_eq!(lates.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_full_queue_refuses_at_once() {
        let (workers, lates) = pool(1, 1, Duration::from_secs(10));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock();
        for i in 0..3 {
            let gate = Arc::clone(&gate);
            workers.submit("getxattr", 2, Noted(Arc::clone(&answers)), move |slot| {
                drop(gate.lock());
                if let Some(Noted(answers)) = slot.take() {
                    answers.lock().push(Ok(2));
                }
            });
            if i == 0 {
                // The first is running (and blocked) before the others come.
                wait_for(|| workers.queued() == 0);
            }
        }
        // One running (blocked), one queued, one refused.
        wait_for(|| answers.lock().len() == 1);
        assert_eq!(*answers.lock(), vec![Err(Errno::EAGAIN)]);
        drop(held);
        wait_for(|| answers.lock().len() == 3);
        assert_eq!(lates.load(Ordering::SeqCst), 1);
    }
}
