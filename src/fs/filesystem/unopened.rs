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
//! read dropped first, and none for longer than [`HELD_IDLE`] after its
//! last read; a read finding none continues at its position in the
//! directory as it is now.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;

use crate::fs::handles::DirItem;

/// Directories whose snapshots are held for readers without a handle.
pub const HELD_SNAPSHOTS: usize = 64;

/// How long a snapshot is held after its last read: a reader that stopped
/// halfway (no `releasedir` says so) holds nothing for longer.
pub const HELD_IDLE: Duration = Duration::from_secs(60);

/// A directory's snapshot, when it was last read, and how long the
/// kernel could keep a copy of it, judged when it was taken.
struct Held {
    items: Arc<Vec<DirItem>>,
    read: Instant,
    keeps: Option<Duration>,
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

    /// The snapshot of the directory `ino`, if held (and not idle for
    /// [`HELD_IDLE`]).
    pub fn get(&self, ino: u64) -> Option<Arc<Vec<DirItem>>> {
        let mut held = self.held.lock();
        let now = Instant::now();
        let snapshot = held.get_mut(&ino)?;
        if now.duration_since(snapshot.read) >= HELD_IDLE {
            held.pop(&ino);
            return None;
        }
        snapshot.read = now;
        Some(Arc::clone(&snapshot.items))
    }

    /// Holds `items` as the snapshot of `ino` until read to the end:
    /// always when `fresh` (a read from offset 0 begins a new one), else
    /// only when none is held (another reader's stays). Snapshots idle for
    /// [`HELD_IDLE`] go.
    pub fn hold(&self, ino: u64, items: Arc<Vec<DirItem>>, keeps: Option<Duration>, fresh: bool) {
        let mut held = self.held.lock();
        let now = Instant::now();
        while held
            .peek_lru()
            .is_some_and(|(_, lru)| now.duration_since(lru.read) >= HELD_IDLE)
        {
            held.pop_lru();
        }
        if fresh || !held.contains(&ino) {
            // A reader of the snapshot replaced may end in this one: the
            // stricter of the two judgements stands.
            let keeps = match held.peek(&ino) {
                Some(old) => stricter(old.keeps, keeps),
                None => keeps,
            };
            let snapshot = Held {
                items,
                read: now,
                keeps,
            };
            held.put(ino, snapshot);
        }
    }

    /// A read reached the end of `items`: they go, if they are what is
    /// held for `ino` (another reader may have begun a snapshot since).
    /// Returns how long a copy could be kept, as judged when they were
    /// taken (`None` when they were not held).
    pub fn done(&self, ino: u64, items: &Arc<Vec<DirItem>>) -> Option<Option<Duration>> {
        let mut held = self.held.lock();
        if held
            .peek(&ino)
            .is_some_and(|snapshot| Arc::ptr_eq(&snapshot.items, items))
        {
            return held.pop(&ino).map(|snapshot| snapshot.keeps);
        }
        None
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

/// The shorter of two times a copy may be kept (`None`: while the
/// directory's mtime is unchanged, the longest).
pub(super) fn stricter(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Arc<Vec<DirItem>> {
        Arc::new(Vec::new())
    }

    #[test]
    fn the_least_recently_read_snapshot_goes_first() {
        let unopened = Unopened::new();
        for ino in 1..=HELD_SNAPSHOTS as u64 {
            unopened.hold(ino, items(), None, true);
        }
        assert!(unopened.get(1).is_some(), "read again: the newest");
        unopened.hold(1000, items(), None, true);
        assert!(unopened.get(1).is_some());
        assert!(unopened.get(2).is_none(), "the least recently read went");
        unopened.retain(|ino| ino > 500);
        assert_eq!(unopened.len(), 1);
    }

    #[test]
    fn a_reader_ends_only_its_own_snapshot_and_keeps_anothers() {
        let unopened = Unopened::new();
        let (first, second) = (items(), items());
        let second_keeps = Some(Duration::from_secs(1));
        unopened.hold(1, Arc::clone(&first), second_keeps, true);
        unopened.hold(1, Arc::clone(&second), None, true);
        unopened.hold(1, items(), None, false);
        assert!(Arc::ptr_eq(&unopened.get(1).unwrap(), &second), "kept");
        assert_eq!(unopened.done(1, &first), None);
        assert_eq!(unopened.len(), 1, "not the first reader's any more");
        assert_eq!(
            unopened.done(1, &second),
            Some(second_keeps),
            "the stricter judgement of the two stands"
        );
        assert_eq!(unopened.len(), 0);
    }

    #[test]
    fn a_snapshot_left_unread_goes() {
        let unopened = Unopened::new();
        let Some(long_ago) = Instant::now().checked_sub(HELD_IDLE) else {
            return; // a clock younger than that cannot say
        };
        for ino in [1, 2] {
            unopened.hold(ino, items(), None, true);
        }
        unopened.held.lock().get_mut(&1).unwrap().read = long_ago;
        assert!(unopened.get(1).is_none(), "when read again");
        unopened.held.lock().get_mut(&2).unwrap().read = long_ago;
        unopened.hold(3, items(), None, true);
        assert_eq!(unopened.len(), 1, "when another is held");
        assert!(unopened.get(3).is_some());
    }
}
