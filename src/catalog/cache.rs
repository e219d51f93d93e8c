//! The process refresh cache: answers for an unchanged warehouse come from
//! memory after a `stat` of each entry, never from re-reading manifests,
//! re-opening stores or re-counting record files.
//!
//! Every entry is stored with the stat identity ([`FileId`]) of the files
//! its value was derived from, taken *before* the value was computed, and is
//! reused only while a fresh `lstat` gives the same identities. The cache is
//! an optimisation on top of the on-disk truth (manifests, files); dropping
//! it changes no answer.
//!
//! Timestamp granularity makes a stat identity ambiguous for a file changed
//! within the same clock tick as the stat (the "racy" case git knows): a
//! second write in that tick can leave size, mtime and ctime unchanged. So
//! an identity whose mtime or ctime is younger than [`RACY_WINDOW_NS`] is
//! never cached; such entries are recomputed until they settle.

use std::hash::Hash;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use crate::warehouse::{Dir, Stat};

/// How recent a change must be for its stat identity to be untrusted.
pub const RACY_WINDOW_NS: i64 = 1_000_000_000;

/// The stat identity of a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub mode: u32,
}

impl FileId {
    pub fn of(meta: &Stat) -> FileId {
        FileId {
            dev: meta.dev,
            ino: meta.ino,
            size: meta.size,
            mtime_ns: meta.mtime_ns(),
            ctime_ns: meta.ctime_ns(),
            mode: meta.mode,
        }
    }

    /// The identity of the entry `name` of `dir` without following a
    /// symlink, `None` if absent.
    pub fn probe(dir: &Dir, name: &str) -> io::Result<Option<FileId>> {
        Ok(dir.probe(name)?.map(|stat| FileId::of(&stat)))
    }

    /// Whether this identity may hide a change made in the same tick.
    pub fn is_racy(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(i64::MAX);
        now.saturating_sub(self.mtime_ns.max(self.ctime_ns)) < RACY_WINDOW_NS
    }
}

/// Stat identities of a directory and of some of its entries, by name
/// (absent ones as `None`).
#[derive(Debug, Clone)]
pub struct Stamps {
    pub dir: FileId,
    pub entries: Vec<(&'static str, Option<FileId>)>,
}

impl Stamps {
    /// Whether `dir` and every stamped entry still have their identities.
    pub fn hold(&self, dir: &Dir) -> bool {
        FileId::of(dir.stat()) == self.dir
            && self
                .entries
                .iter()
                .all(|(name, id)| FileId::probe(dir, name).ok().as_ref() == Some(id))
    }

    /// Whether the directory `name` of `parent`, just seen as `seen`, and
    /// its stamped entries still have their identities, checked without
    /// opening it (see [`Dir::probe_below`]).
    pub fn hold_below(&self, parent: &Dir, name: &str, seen: &Stat) -> bool {
        FileId::of(seen) == self.dir
            && self.entries.iter().all(|(entry, id)| {
                parent
                    .probe_below(&format!("{name}/{entry}"))
                    .ok()
                    .map(|stat| stat.map(|s| FileId::of(&s)))
                    .as_ref()
                    == Some(id)
            })
    }

    /// Whether any identity is too recent to be trusted.
    pub fn racy(&self) -> bool {
        self.dir.is_racy()
            || self
                .entries
                .iter()
                .any(|(_, id)| id.is_some_and(|id| id.is_racy()))
    }
}

/// An LRU map whose entries are valid only while their stamp matches.
pub struct StampedLru<K: Hash + Eq, S, V> {
    /// Unbounded as a map (no table for the full capacity up front);
    /// `capacity` is enforced on insert.
    inner: Mutex<LruCache<K, (S, V)>>,
    capacity: usize,
    hits: HitCounter,
}

/// How often a cache answered from memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HitCount {
    pub hits: u64,
    pub misses: u64,
}

/// Counts a cache's answers, from any thread.
#[derive(Debug, Default)]
pub struct HitCounter {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl HitCounter {
    /// Notes one lookup; passes `found` through.
    pub fn note<T>(&self, found: Option<T>) -> Option<T> {
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub fn count(&self) -> HitCount {
        HitCount {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

impl<K: Hash + Eq + Clone, S: Clone, V: Clone> StampedLru<K, S, V> {
    pub fn new(capacity: usize) -> Self {
        StampedLru {
            inner: Mutex::new(LruCache::unbounded()),
            capacity: capacity.max(1),
            hits: HitCounter::default(),
        }
    }

    /// The cached value if `valid` accepts its stamp. The check runs
    /// outside the lock (it may stat files); an entry it rejects is dropped.
    pub fn get(&self, key: &K, valid: impl FnOnce(&S) -> bool) -> Option<V> {
        let cached = self.inner.lock().get(key).cloned();
        let found = match cached {
            Some((stamp, value)) if valid(&stamp) => Some(value),
            Some(_) => {
                self.inner.lock().pop(key);
                None
            }
            None => None,
        };
        self.hits.note(found)
    }

    /// As [`get`](StampedLru::get), for a caller that falls back to `get`
    /// when this misses: a miss is neither counted nor drops the entry.
    pub fn peek_valid(&self, key: &K, valid: impl FnOnce(&S) -> bool) -> Option<V> {
        let cached = self.inner.lock().get(key).cloned();
        let found = cached.and_then(|(stamp, value)| valid(&stamp).then_some(value));
        if found.is_some() {
            self.hits.note(Some(()));
        }
        found
    }

    /// Lookups answered from memory and lookups that were not.
    pub fn hit_count(&self) -> HitCount {
        self.hits.count()
    }

    pub fn put(&self, key: K, stamp: S, value: V) {
        let mut inner = self.inner.lock();
        inner.put(key, (stamp, value));
        while inner.len() > self.capacity {
            inner.pop_lru();
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&self) {
        self.inner.lock().clear();
    }

    /// Drops every entry whose key `dropped` accepts.
    pub fn forget_where(&self, dropped: impl Fn(&K) -> bool) {
        pop_where(&mut self.inner.lock(), dropped);
    }
}

/// Drops every entry of `cache` whose key `dropped` accepts.
pub fn pop_where<K: Hash + Eq + Clone, V>(
    cache: &mut LruCache<K, V>,
    dropped: impl Fn(&K) -> bool,
) {
    let keys: Vec<K> = cache
        .iter()
        .filter(|(key, _)| dropped(key))
        .map(|(key, _)| key.clone())
        .collect();
    for key in keys {
        cache.pop(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_entries_are_dropped() {
        let cache: StampedLru<u32, u32, &str> = StampedLru::new(2);
        cache.put(1, 10, "a");
        assert_eq!(cache.get(&1, |s| *s == 10), Some("a"));
        assert_eq!(cache.get(&1, |s| *s == 11), None);
        assert!(cache.is_empty());
    }

    #[test]
    fn capacity_bounds_entries() {
        let cache: StampedLru<u32, (), u32> = StampedLru::new(2);
        for i in 0..5 {
            cache.put(i, (), i);
        }
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&4, |_| true), Some(4));
        assert_eq!(cache.get(&0, |_| true), None);
    }

    #[test]
    fn fresh_changes_are_racy_old_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let opened = Dir::open_root(dir.path()).unwrap();
        let id = FileId::probe(&opened, "f").unwrap().unwrap();
        assert!(id.is_racy());
        let old = FileId {
            mtime_ns: id.mtime_ns - 10 * RACY_WINDOW_NS,
            ctime_ns: id.ctime_ns - 10 * RACY_WINDOW_NS,
            ..id
        };
        assert!(!old.is_racy());
        assert_eq!(FileId::probe(&opened, "missing").unwrap(), None);
    }
}
