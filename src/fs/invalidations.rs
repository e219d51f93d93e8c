//! The kernel's side of `pchronicle refresh` (what the daemon forgot) and
//! of the directory listings the kernel caches itself (dropped when due),
//! told to the kernel from one thread of its own.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use fuser::INodeNo;
use parking_lot::Mutex;

use super::filesystem::Forget;

/// The kernel's side of refreshes, and the listings the kernel caches to
/// be dropped once due, sent from one thread of its own, in the order
/// asked: no serving thread ever waits for it. (Invalidating a name waits
/// for its directory's lock, which a lookup there holds while it waits for
/// a serving thread; invalidating a listing waits for its cached pages,
/// which a reader holds while it copies entries out to a buffer that may
/// be mapped from this very mount: a serving thread that waited too could
/// stall the mount.) Each refresh gets a ticket; the client asks whether
/// its ticket is done.
#[derive(Default)]
pub struct Invalidations {
    queue: Mutex<Option<Sender<Job>>>,
    issued: AtomicU64,
    done: Arc<AtomicU64>,
}

/// What the invalidation thread is asked to do.
enum Job {
    /// A refresh's forgets, with its ticket.
    Refresh(u64, Forget),
    /// The kernel's cached listing of a directory, which it may keep for
    /// the time given, goes at this instant, or earlier if an earlier drop
    /// of it is pending.
    Listing(u64, Instant, Duration),
    /// The kernel began a new copy of a directory's listing at this
    /// instant.
    Begun(u64, Instant),
}

/// Whether a job reached the thread.
enum Sent {
    Yes,
    /// No session yet: the kernel holds nothing to forget.
    NoSession,
    /// The thread could not be started, or is gone.
    NoThread,
}

impl Invalidations {
    /// Queues `forget` for the kernel (reached through `kernel`, once the
    /// session exists; before, there is nothing to invalidate); its ticket.
    pub fn submit(&self, forget: Forget, kernel: impl FnOnce() -> Option<fuser::Notifier>) -> u64 {
        let mut queue = self.queue.lock();
        // Numbered under the lock, so tickets reach the thread in order.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        match self.send(&mut queue, Job::Refresh(ticket, forget), kernel) {
            Sent::Yes => {}
            Sent::NoSession => {
                self.done.fetch_max(ticket, Ordering::SeqCst);
            }
            Sent::NoThread => {
                // Said done: the daemon's caches are.
                log::warn!("the kernel's caches were not invalidated: no invalidation thread");
                self.done.fetch_max(ticket, Ordering::SeqCst);
            }
        }
        ticket
    }

    /// Has the kernel's cached listing of the directory `ino` dropped
    /// `after` from now, or with a drop of it already pending if that
    /// comes first (a copy the kernel completed since then is only
    /// dropped early, and read again).
    pub fn drop_listing(
        &self,
        ino: u64,
        after: Duration,
        kernel: impl FnOnce() -> Option<fuser::Notifier>,
    ) {
        // Past what a clock can name, never.
        let Some(at) = Instant::now().checked_add(after) else {
            return;
        };
        let job = Job::Listing(ino, at, after);
        if let Sent::NoThread = self.send(&mut self.queue.lock(), job, kernel) {
            log::debug!("the listing of inode {ino} stays cached: no invalidation thread");
        }
    }

    /// The kernel begins a new copy of the listing of `ino` (a read from
    /// offset 0 reached the daemon): a drop pending for it waits until the
    /// copy may be complete, the time it was given from now, so it does
    /// not land while the copy fills (which would leave that copy never
    /// complete, so not cached at all). It is not given up: another reader
    /// may have completed a copy meanwhile, which must still be dropped.
    pub fn listing_begun(&self, ino: u64) {
        // No thread yet: no drop pending.
        if let Some(queue) = self.queue.lock().as_ref() {
            let _ = queue.send(Job::Begun(ino, Instant::now()));
        }
    }

    /// Whether every refresh up to `ticket` reached the kernel.
    pub fn is_done(&self, ticket: u64) -> bool {
        self.done.load(Ordering::SeqCst) >= ticket
    }

    fn send(
        &self,
        queue: &mut Option<Sender<Job>>,
        job: Job,
        kernel: impl FnOnce() -> Option<fuser::Notifier>,
    ) -> Sent {
        if queue.is_none() {
            let Some(kernel) = kernel() else {
                return Sent::NoSession;
            };
            *queue = self.start(kernel);
        }
        match queue.as_ref().map(|q| q.send(job)) {
            Some(Ok(())) => Sent::Yes,
            _ => Sent::NoThread,
        }
    }

    fn start(&self, kernel: fuser::Notifier) -> Option<Sender<Job>> {
        let (queue, jobs) = std::sync::mpsc::channel::<Job>();
        let done = Arc::clone(&self.done);
        let spawned = std::thread::Builder::new()
            .name("invalidations".into())
            .spawn(move || serve(&kernel, &jobs, &done));
        match spawned {
            Ok(_) => Some(queue),
            Err(e) => {
                log::warn!("no invalidation thread: {e}");
                None
            }
        }
    }
}

/// The invalidation thread: jobs in the order they come, and each
/// listing's drop when it is due. An ENOENT (the kernel does not hold
/// what is named) is no failure.
fn serve(kernel: &fuser::Notifier, jobs: &Receiver<Job>, done: &AtomicU64) {
    let mut drops = Drops::default();
    loop {
        let job = match drops.next() {
            Some(at) => match jobs.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            },
        };
        match job {
            Some(Job::Refresh(ticket, forget)) => {
                for (parent, name) in &forget.entries {
                    if let Err(e) = kernel.inval_entry(INodeNo(*parent), OsStr::new(name)) {
                        log::debug!("invalidating {name:?} in inode {parent}: {e}");
                    }
                }
                for ino in &forget.inodes {
                    if let Err(e) = kernel.inval_inode(INodeNo(*ino), 0, 0) {
                        log::debug!("invalidating inode {ino}: {e}");
                    }
                }
                done.fetch_max(ticket, Ordering::SeqCst);
            }
            Some(Job::Listing(ino, at, kept)) => drops.ask(ino, at, kept),
            Some(Job::Begun(ino, at)) => drops.begun(ino, at),
            None => {}
        }
        for ino in drops.take_due(Instant::now()) {
            // Its pages go, so the next read from the start lists again.
            if let Err(e) = kernel.inval_inode(INodeNo(ino), 0, 0) {
                log::debug!("dropping the listing of inode {ino}: {e}");
            }
        }
    }
}

/// The drops of the kernel's cached listings pending: one a directory,
/// the earliest asked for (so a later copy never postpones one), with the
/// time its copy may be kept.
#[derive(Default)]
struct Drops {
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    pending: HashMap<u64, (Instant, Duration)>,
}

impl Drops {
    fn ask(&mut self, ino: u64, at: Instant, kept: Duration) {
        if self
            .pending
            .get(&ino)
            .is_none_or(|&(earlier, _)| at < earlier)
        {
            self.set(ino, at, kept);
        }
    }

    /// A new copy of `ino` began at `at`: its pending drop waits until the
    /// copy may be complete.
    fn begun(&mut self, ino: u64, at: Instant) {
        let Some(&(due, kept)) = self.pending.get(&ino) else {
            return;
        };
        if let Some(later) = at.checked_add(kept).filter(|&later| later > due) {
            self.set(ino, later, kept);
        }
    }

    fn set(&mut self, ino: u64, at: Instant, kept: Duration) {
        self.pending.insert(ino, (at, kept));
        self.due.push(Reverse((at, ino)));
        // Entries of drops moved stay until their time; a long TTL could
        // pile them up.
        if self.due.len() > 2 * self.pending.len() + 64 {
            self.due = self
                .pending
                .iter()
                .map(|(&ino, &(at, _))| Reverse((at, ino)))
                .collect();
        }
    }

    /// When the next drop may be due.
    fn next(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// The directories whose drop is due at `now`, each once.
    fn take_due(&mut self, now: Instant) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, ino))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            if self
                .pending
                .get(&ino)
                .is_some_and(|&(pending, _)| pending == at)
            {
                self.pending.remove(&ino);
                due.push(ino);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_earliest_drop_asked_for_wins_and_is_sent_once() {
        let mut drops = Drops::default();
        let now = Instant::now();
        drops.ask(1, now + S(2), S(2));
        drops.ask(1, now + S(5), S(5));
        drops.ask(1, now + S(1), S(1));
        drops.ask(2, now + S(3), S(3));
        assert_eq!(drops.next(), Some(now + S(1)));
        assert_eq!(drops.take_due(now), Vec::<u64>::new());
        assert_eq!(drops.take_due(now + S(2)), [1], "once, at the earliest");
        assert_eq!(drops.take_due(now + S(9)), [2]);
        assert_eq!(drops.next(), None);
    }

    #[test]
    fn a_new_copy_puts_off_a_pending_drop_and_never_loses_it() {
        let mut drops = Drops::default();
        let now = Instant::now();
        drops.ask(1, now + S(1), S(1));
        drops.begun(1, now + S(3) / 4);
        drops.begun(2, now);
        assert_eq!(drops.take_due(now + S(1)), Vec::<u64>::new(), "put off");
        assert_eq!(drops.take_due(now + S(2)), [1], "still sent");
        drops.ask(3, now + S(5), S(2));
        drops.begun(3, now);
        assert_eq!(drops.take_due(now + S(4)), Vec::<u64>::new());
        assert_eq!(drops.take_due(now + S(5)), [3], "not brought forward");
    }

    #[test]
    fn drops_put_off_do_not_pile_up() {
        let mut drops = Drops::default();
        let now = Instant::now();
        drops.ask(7, now + S(1), S(1));
        for i in 0..10_000 {
            drops.begun(7, now + Duration::from_millis(i));
        }
        assert!(drops.due.len() <= 64 + 2, "{}", drops.due.len());
        assert_eq!(drops.take_due(now + S(30)), [7]);
    }
}
