//! Directories read without a handle. A kernel that offers it
//! (`FUSE_NO_OPENDIR_SUPPORT`) opens directories itself once the daemon
//! answers one `opendir` with `ENOSYS`: no `opendir` or `releasedir` is
//! sent again, every read names handle 0, and the kernel keeps the entries
//! it was given until the directory's mtime changes or it is told to drop
//! them (see `kernel_keeps` in `directory.rs`). Polling an unchanged
//! directory then costs the daemon nothing between those drops.
//!
//! A read still continues the snapshot it started from, whatever changed
//! since: each entry's offset carries the snapshot's generation in its
//! high half and the entry's position in the low half, and the snapshots
//! being read are held here until read to the end. At most
//! [`HELD_SNAPSHOTS`] are held (the least recently read goes first: a
//! reader that stopped halfway holds nothing for long); a read naming a
//! generation no longer held is served from the directory as it is now, at
//! the same position.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use crate::fs::handles::DirItem;

/// Snapshots held for readers without a handle, at most.
pub const HELD_SNAPSHOTS: usize = 64;

/// The low bits of an offset: an entry's position in its snapshot.
const POSITION_BITS: u32 = 32;

/// Generations wrap below this, so every offset stays below 2^63 (the
/// kernel's file positions are signed).
const GENERATIONS: u32 = 1 << 31;

/// Where a read without a handle starts: the snapshot and the position.
pub(super) struct Start {
    pub generation: u32,
    pub position: usize,
}

impl Start {
    /// The start a kernel's `offset` names (0: a new snapshot, generation 0).
    pub fn of(offset: u64) -> Start {
        Start {
            generation: (offset >> POSITION_BITS) as u32,
            position: (offset & ((1 << POSITION_BITS) - 1)) as usize,
        }
    }
}

/// What every entry of generation `generation` adds to its position.
pub(super) fn cookie(generation: u32) -> u64 {
    u64::from(generation) << POSITION_BITS
}

/// The snapshots being read without a handle, by directory and generation.
pub(super) struct Unopened {
    held: Mutex<LruCache<(u64, u32), Arc<Vec<DirItem>>>>,
    next: AtomicU32,
}

impl Unopened {
    pub fn new() -> Unopened {
        Unopened {
            held: Mutex::new(LruCache::new(
                NonZeroUsize::new(HELD_SNAPSHOTS).expect("not zero"),
            )),
            next: AtomicU32::new(1),
        }
    }

    /// A generation for a new snapshot (never 0, which names none).
    pub fn generation(&self) -> u32 {
        loop {
            let generation = self.next.fetch_add(1, Ordering::Relaxed) % GENERATIONS;
            if generation != 0 {
                return generation;
            }
        }
    }

    /// The snapshot `generation` of the directory `ino`, if still held.
    pub fn get(&self, ino: u64, generation: u32) -> Option<Arc<Vec<DirItem>>> {
        self.held.lock().get(&(ino, generation)).cloned()
    }

    /// Holds `items` as the snapshot `generation` of `ino` until read to
    /// the end (or pushed out by newer ones).
    pub fn hold(&self, ino: u64, generation: u32, items: Arc<Vec<DirItem>>) {
        self.held.lock().put((ino, generation), items);
    }

    /// The snapshot was read to the end: it goes.
    pub fn done(&self, ino: u64, generation: u32) {
        self.held.lock().pop(&(ino, generation));
    }

    /// Drops the snapshots of directories `keep` says no longer are.
    pub fn retain(&self, keep: impl Fn(u64) -> bool) {
        let mut held = self.held.lock();
        let gone: Vec<(u64, u32)> = held
            .iter()
            .map(|(key, _)| *key)
            .filter(|(ino, _)| !keep(*ino))
            .collect();
        for key in gone {
            held.pop(&key);
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

    #[test]
    fn an_offset_names_its_generation_and_position() {
        let start = Start::of(cookie(7) | 42);
        assert_eq!((start.generation, start.position), (7, 42));
        let start = Start::of(0);
        assert_eq!((start.generation, start.position), (0, 0));
        assert!(cookie(GENERATIONS - 1) | u64::from(u32::MAX) < 1 << 63);
    }

    #[test]
    fn generations_skip_zero_when_they_wrap() {
        let unopened = Unopened::new();
        unopened.next.store(GENERATIONS - 1, Ordering::Relaxed);
        assert_eq!(unopened.generation(), GENERATIONS - 1);
        assert_eq!(unopened.generation(), 1);
    }

    #[test]
    fn the_least_recently_read_snapshot_goes_first() {
        let unopened = Unopened::new();
        for generation in 1..=HELD_SNAPSHOTS as u32 {
            unopened.hold(5, generation, Arc::new(Vec::new()));
        }
        assert!(unopened.get(5, 1).is_some(), "read again: the newest");
        unopened.hold(6, 1, Arc::new(Vec::new()));
        assert!(unopened.get(5, 1).is_some());
        assert!(unopened.get(5, 2).is_none(), "the least recently read went");
        unopened.retain(|ino| ino != 5);
        assert_eq!(unopened.len(), 1);
        unopened.done(6, 1);
        assert_eq!(unopened.len(), 0);
    }
}
