//! Directories read without a handle. A kernel that offers it
//! (`FUSE_NO_OPENDIR_SUPPORT`) opens directories itself once the daemon
//! answers one `opendir` with `ENOSYS`: no `opendir` or `releasedir` is
//! sent again, every read names handle 0, and the kernel keeps the entries
//! it was given until the directory's mtime changes or it is told to drop
//! them (see `kernel_keeps` in `directory.rs`). Polling an unchanged
//! directory then costs the daemon nothing between those drops.
//!
//! Offsets stay positions (below 2^31, as 32-bit programs need), so a read
//! without a handle continues the directory's snapshot held here: the one
//! the last read from offset 0 took, until a read reaches its end. At most
//! [`HELD_SNAPSHOTS`] directories' snapshots are held, the least recently
//! read dropped first; a read finding none continues at its position in
//! the directory as it is now.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;

use crate::fs::handles::DirItem;

/// Directories whose snapshots are held for readers without a handle.
pub const HELD_SNAPSHOTS: usize = 64;

/// A directory's snapshot being read without a handle.
pub(super) struct Held {
    pub items: Arc<Vec<DirItem>>,
    /// Taken by a read from offset 0, which began the kernel's copy: how
    /// long the kernel may keep that copy, once it is complete (`Some`,
    /// of what `kernel_keeps` said).
    pub began_copy: Option<Option<Duration>>,
}

/// The snapshots being read without a handle, by directory.
pub(super) struct Unopened {
    held: Mutex<LruCache<u64, Held>>,
}

impl Unopened {
    pub fn new() -> Unopened {
        Unopened {
            held: Mutex::new(LruCache::new(
                NonZeroUsize::new(HELD_SNAPSHOTS).expect("not zero"),
            )),
        }
    }

    /// The snapshot of the directory `ino`, if held.
    pub fn get(&self, ino: u64) -> Option<Arc<Vec<DirItem>>> {
        self.held
            .lock()
            .get(&ino)
            .map(|held| Arc::clone(&held.items))
    }

    /// Holds `held` as the snapshot of `ino` until read to the end (or
    /// pushed out by newer ones).
    pub fn hold(&self, ino: u64, held: Held) {
        self.held.lock().put(ino, held);
    }

    /// A read reached the end of the snapshot of `ino`: it goes. Returns
    /// how long the kernel may keep the copy it completed, when one was
    /// begun with it and may be kept only so long.
    pub fn done(&self, ino: u64) -> Option<Duration> {
        self.held.lock().pop(&ino)?.began_copy.flatten()
    }

    /// Drops the snapshot of `ino`, if held.
    pub fn forget(&self, ino: u64) {
        self.held.lock().pop(&ino);
    }

    /// Drops the snapshots of the directories `keep` refuses.
    pub fn retain(&self, keep: impl Fn(u64) -> bool) {
        let mut held = self.held.lock();
        let gone: Vec<u64> = held
            .iter()
            .map(|(ino, _)| *ino)
            .filter(|ino| !keep(*ino))
            .collect();
        for ino in gone {
            held.pop(&ino);
        }
    }

    /// How many snapshots are held.
    pub fn len(&self) -> usize {
        self.held.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(began_copy: Option<Option<Duration>>) -> Held {
        Held {
            items: Arc::new(Vec::new()),
            began_copy,
        }
    }

    #[test]
    fn the_least_recently_read_snapshot_goes_first() {
        let unopened = Unopened::new();
        for ino in 1..=HELD_SNAPSHOTS as u64 {
            unopened.hold(ino, held(None));
        }
        assert!(unopened.get(1).is_some(), "read again: the newest");
        unopened.hold(1000, held(None));
        assert!(unopened.get(1).is_some());
        assert!(unopened.get(2).is_none(), "the least recently read went");
        unopened.retain(|ino| ino > 500);
        assert_eq!(unopened.len(), 1);
    }

    #[test]
    fn the_end_of_a_copy_begun_from_the_start_says_how_long_it_may_be_kept() {
        let unopened = Unopened::new();
        let ttl = Duration::from_secs(1);
        unopened.hold(1, held(Some(Some(ttl))));
        unopened.hold(2, held(Some(None)));
        unopened.hold(3, held(None));
        assert_eq!(unopened.done(1), Some(ttl));
        assert_eq!(unopened.done(1), None, "gone");
        assert_eq!(unopened.done(2), None, "kept while the mtime is");
        assert_eq!(unopened.done(3), None, "begun elsewhere");
        assert_eq!(unopened.len(), 0);
    }
}
