//! The kernel's side of `pchronicle refresh`: what the daemon forgot, told
//! to the kernel from one thread of its own, in the order asked.

use std::ffi::OsStr;
use std::sync::Arc;

use fuser::INodeNo;

use super::filesystem::Forget;

/// The kernel's side of refreshes, sent from one thread of its own, in
/// the order asked: no serving thread ever waits for it. (Invalidating a
/// name waits for its directory's lock, which a lookup there holds while
/// it waits for a serving thread: a serving thread that waited too could
/// stall the mount.) Each refresh gets a ticket; the client asks whether
/// its ticket is done.
#[derive(Default)]
pub struct Invalidations {
    queue: parking_lot::Mutex<Option<std::sync::mpsc::Sender<(u64, Forget)>>>,
    issued: std::sync::atomic::AtomicU64,
    done: Arc<std::sync::atomic::AtomicU64>,
}

impl Invalidations {
    /// Queues `forget` for the kernel (reached through `kernel`, once the
    /// session exists; before, there is nothing to invalidate); its ticket.
    pub fn submit(&self, forget: Forget, kernel: impl FnOnce() -> Option<fuser::Notifier>) -> u64 {
        use std::sync::atomic::Ordering;
        let mut queue = self.queue.lock();
        // Numbered under the lock, so tickets reach the thread in order.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        if queue.is_none() {
            match kernel() {
                Some(kernel) => *queue = self.start(kernel),
                None => {
                    self.done.fetch_max(ticket, Ordering::SeqCst);
                    return ticket;
                }
            }
        }
        let sent = queue
            .as_ref()
            .is_some_and(|q| q.send((ticket, forget)).is_ok());
        if !sent {
            // No thread to send to: said done, the daemon's caches are.
            log::warn!("the kernel's caches were not invalidated: no invalidation thread");
            self.done.fetch_max(ticket, Ordering::SeqCst);
        }
        ticket
    }

    /// Whether every refresh up to `ticket` reached the kernel.
    pub fn is_done(&self, ticket: u64) -> bool {
        self.done.load(std::sync::atomic::Ordering::SeqCst) >= ticket
    }

    fn start(&self, kernel: fuser::Notifier) -> Option<std::sync::mpsc::Sender<(u64, Forget)>> {
        let (queue, jobs) = std::sync::mpsc::channel::<(u64, Forget)>();
        let done = Arc::clone(&self.done);
        let spawned = std::thread::Builder::new()
            .name("invalidations".into())
            .spawn(move || {
                for (ticket, forget) in jobs {
                    // An ENOENT (the kernel does not hold it) is no failure.
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
                    done.fetch_max(ticket, std::sync::atomic::Ordering::SeqCst);
                }
            });
        match spawned {
            Ok(_) => Some(queue),
            Err(e) => {
                log::warn!("no invalidation thread: {e}");
                None
            }
        }
    }
}
