//! Record-file counts: the in-process cache, and its persisted copy
//! (`persisted.rs`) that lets a restarted daemon answer without re-reading
//! every record file.
//!
//! Entries are keyed by the record file's path relative to the warehouse
//! root. An entry counted in this process is reused while the file's full
//! stat identity ([`FileId`]: device, inode, size, mtime, ctime) holds; one
//! loaded from disk carries only `(size, mtime_ns)` and is reused when both
//! match, after which the full identity is recorded. Identities younger
//! than the racy window are never stored (see [`super::cache`]).
//!
//! A file whose path is new, whose identity matches exactly one entry
//! whose path has vanished, is a rename: it takes over that entry without
//! being read. When several new paths (within one walk) or several vanished
//! entries share an identity the match is ambiguous and the file is read.
//!
//! A daemon counts large files in the background (`background.rs`), so no
//! answer waits for one.

mod background;
mod entries;
mod persisted;
mod progress;
mod saver;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use entries::{Entries, SlotRef};

use super::cache::{FileId, HitCount, HitCounter};
use crate::error::Result;
use crate::logbudget::warn_limited;
use crate::records::RecordStats;

pub use background::{Background, BackgroundCounts};
pub use persisted::{CacheFile, DEFAULT_DIR, DEFAULT_NAME, SCHEMA};
pub use progress::beside as progress_beside;
pub use saver::CountSaver;

/// `(size, mtime_ns)`: what identifies a file across restarts and renames.
type Identity = (u64, i64);

/// One file's counts at one identity, in 80 bytes: the fields of
/// [`Exact`] and [`RecordStats`] laid flat, what is known of them in flags
/// rather than in `Option`s (whose tags and padding took 24 bytes more).
/// A first mount holds one for every record file of the warehouse.
#[derive(Debug, Clone)]
struct Entry {
    size: u64,
    mtime_ns: i64,
    /// The rest of the full identity, once this process has checked the
    /// file (`checked`).
    dev: u64,
    ino: u64,
    ctime_ns: i64,
    record_count: u64,
    failed_count: u64,
    min_timestamp: i64,
    max_timestamp: i64,
    mode: u32,
    checked: bool,
    has_min: bool,
    has_max: bool,
}

/// What a [`FileId`] holds beyond size and mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    dev: u64,
    ino: u64,
    ctime_ns: i64,
    mode: u32,
}

impl Exact {
    fn of(id: FileId) -> Exact {
        Exact {
            dev: id.dev,
            ino: id.ino,
            ctime_ns: id.ctime_ns,
            mode: id.mode,
        }
    }
}

impl Entry {
    fn new(size: u64, mtime_ns: i64, exact: Option<Exact>, stats: RecordStats) -> Entry {
        let mut entry = Entry {
            size,
            mtime_ns,
            dev: 0,
            ino: 0,
            ctime_ns: 0,
            record_count: stats.record_count,
            failed_count: stats.failed_count,
            min_timestamp: stats.min_timestamp.unwrap_or(0),
            max_timestamp: stats.max_timestamp.unwrap_or(0),
            mode: 0,
            checked: false,
            has_min: stats.min_timestamp.is_some(),
            has_max: stats.max_timestamp.is_some(),
        };
        if let Some(exact) = exact {
            entry.check(exact);
        }
        entry
    }

    fn identity(&self) -> Identity {
        (self.size, self.mtime_ns)
    }

    fn stats(&self) -> RecordStats {
        RecordStats {
            record_count: self.record_count,
            failed_count: self.failed_count,
            min_timestamp: self.has_min.then_some(self.min_timestamp),
            max_timestamp: self.has_max.then_some(self.max_timestamp),
        }
    }

    fn exact(&self) -> Option<Exact> {
        self.checked.then_some(Exact {
            dev: self.dev,
            ino: self.ino,
            ctime_ns: self.ctime_ns,
            mode: self.mode,
        })
    }

    /// Records the rest of the full identity.
    fn check(&mut self, exact: Exact) {
        self.dev = exact.dev;
        self.ino = exact.ino;
        self.ctime_ns = exact.ctime_ns;
        self.mode = exact.mode;
        self.checked = true;
    }

    /// Whether the entry describes a file with identity `id`; an entry
    /// from disk is upgraded to the full identity on its first match.
    fn holds(&mut self, id: FileId) -> bool {
        if self.identity() != (id.size, id.mtime_ns) {
            return false;
        }
        match self.exact() {
            Some(exact) => exact == Exact::of(id),
            None => {
                self.check(Exact::of(id));
                true
            }
        }
    }
}

/// How loading the persisted cache went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded {
    /// No persisted cache (or none asked for).
    Absent,
    /// This many entries were loaded.
    Entries(usize),
    /// An older schema: ignored, rebuilt on the next save.
    Older(u32),
    /// Not a count cache, or damaged: ignored with a warning, rebuilt.
    Unusable(String),
}

/// The record-file count cache of one catalog.
pub struct CountCache {
    inner: Mutex<Inner>,
    file: Option<CacheFile>,
    /// Held through a whole save, so a save that finds nothing new to
    /// write waits for one under way: the save at exit must not return
    /// (and the process end) while a periodic save is still writing.
    saving: Mutex<()>,
    hits: HitCounter,
    renames: AtomicU64,
}

struct Inner {
    /// Grown as entries come (so nothing is allocated for the full
    /// capacity up front); `capacity` is enforced on insert.
    entries: Entries,
    capacity: usize,
    /// Entries changed since the last save.
    dirty: bool,
}

impl Inner {
    fn new(capacity: NonZeroUsize) -> Inner {
        Inner {
            entries: Entries::default(),
            capacity: capacity.get(),
            dirty: false,
        }
    }

    /// Adds or replaces the entry of `path` (evicting the least recently
    /// used one when full). False when `path` was already there.
    fn insert(&mut self, path: &str, entry: Entry) -> bool {
        let added = self.entries.push(path, entry);
        while self.entries.len() > self.capacity {
            self.entries.pop_lru();
        }
        self.dirty = true;
        added
    }

    fn remove(&mut self, path: &str) -> Option<Entry> {
        let entry = self.entries.pop(path)?;
        self.dirty = true;
        Some(entry)
    }
}

/// The cache's entries by `(size, mtime_ns)`, taken when a walk first
/// meets a file the cache does not know, so renames can be matched without
/// the cache keeping a second map of every entry. One sorted array (one
/// allocation, whatever the number of entries): a first mount takes one
/// for each directory it counts, so it must be cheap to build and drop.
#[derive(Default)]
pub struct RenameIndex {
    /// Sorted by identity; an entry taken over by a rename is `None`.
    by_identity: Vec<(Identity, Option<SlotRef>)>,
}

impl RenameIndex {
    /// The entries of `identity` (taken ones included, as `None`).
    fn candidates(&mut self, identity: Identity) -> &mut [(Identity, Option<SlotRef>)] {
        let start = self.by_identity.partition_point(|(id, _)| *id < identity);
        let len = self.by_identity[start..].partition_point(|(id, _)| *id == identity);
        &mut self.by_identity[start..start + len]
    }
}

impl CountCache {
    /// A cache of at most `capacity` entries, persisted at `file` when
    /// given. A newer schema there is refused; anything else unusable is
    /// reported in [`Loaded`] and replaced on the next save.
    pub fn open(capacity: usize, file: Option<CacheFile>) -> Result<(CountCache, Loaded)> {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        let mut inner = Inner::new(capacity);
        let loaded = match &file {
            None => Loaded::Absent,
            Some(file) => persisted::load(file, &mut inner)?,
        };
        inner.dirty = false;
        if let (Loaded::Unusable(why), Some(file)) = (&loaded, &file) {
            warn_limited!(
                "ignoring the count cache {}: {why}; it will be rebuilt",
                file.path().display()
            );
        }
        let cache = CountCache {
            inner: Mutex::new(inner),
            file,
            saving: Mutex::new(()),
            hits: HitCounter::default(),
            renames: AtomicU64::new(0),
        };
        Ok((cache, loaded))
    }

    /// The counts of `rel` if an entry describes the file with identity
    /// `id`; a stale entry is dropped.
    pub fn get(&self, rel: &str, id: FileId) -> Option<RecordStats> {
        let mut inner = self.inner.lock();
        let found = match inner.entries.get_mut(rel).map(|e| (e.holds(id), e.stats())) {
            Some((true, stats)) => Some(stats),
            Some((false, _)) => {
                inner.remove(rel);
                None
            }
            None => None,
        };
        self.hits.note(found)
    }

    /// Records the counts of `rel` at identity `id` (never a racy one).
    pub fn put(&self, rel: &str, id: FileId, stats: RecordStats) {
        if id.is_racy() {
            return;
        }
        self.inner.lock().insert(
            rel,
            Entry::new(id.size, id.mtime_ns, Some(Exact::of(id)), stats),
        );
    }

    /// The entries by identity, for [`CountCache::adopt_rename`].
    pub fn rename_index(&self) -> RenameIndex {
        let inner = self.inner.lock();
        let mut by_identity: Vec<(Identity, Option<SlotRef>)> = inner
            .entries
            .refs()
            .map(|(at, entry)| (entry.identity(), Some(at)))
            .collect();
        drop(inner);
        by_identity.sort_unstable_by_key(|(id, _)| *id);
        RenameIndex { by_identity }
    }

    /// The counts of a file new under `rel` (no entry for its path) taken
    /// over from the one entry of the same `(size, mtime_ns)` whose path no
    /// longer holds a file of that identity (`live` answers that). `None`
    /// when there is no such entry or more than one.
    pub fn adopt_rename(
        &self,
        index: &mut RenameIndex,
        rel: &str,
        id: FileId,
        live: impl Fn(&str) -> Option<FileId>,
    ) -> Option<RecordStats> {
        if id.is_racy() {
            return None;
        }
        let identity = (id.size, id.mtime_ns);
        let candidates = index.candidates(identity);
        // The candidates' paths, copied so no file is looked at under the
        // lock; one that has left the cache since has none, and counts as
        // vanished (it makes the match ambiguous, never adopted).
        let paths: Vec<Option<String>> = {
            let inner = self.inner.lock();
            candidates
                .iter()
                .map(|(_, at)| {
                    at.and_then(|at| inner.entries.path_of(at))
                        .map(str::to_string)
                })
                .collect()
        };
        let taken = |(_, at): &(Identity, Option<SlotRef>)| at.is_none();
        let mut vanished = candidates
            .iter_mut()
            .zip(paths)
            .filter(|(candidate, _)| !taken(candidate))
            .filter(|(_, path)| match path {
                Some(path) => {
                    path != rel && live(path).is_none_or(|now| (now.size, now.mtime_ns) != identity)
                }
                None => true,
            });
        let (Some((candidate, from)), None) = (vanished.next(), vanished.next()) else {
            return None;
        };
        candidate.1 = None;
        let from = from?;
        let mut inner = self.inner.lock();
        let mut entry = inner.remove(&from).filter(|e| e.identity() == identity)?;
        entry.check(Exact::of(id));
        let stats = entry.stats();
        inner.insert(rel, entry);
        self.renames.fetch_add(1, Ordering::Relaxed);
        log::debug!("{from} -> {rel}: counts kept across the rename");
        Some(stats)
    }

    /// Drops the entry of `rel` (an adoption found ambiguous afterwards).
    pub fn forget(&self, rel: &str) {
        self.inner.lock().remove(rel);
    }

    pub fn hit_count(&self) -> HitCount {
        self.hits.count()
    }

    /// Files whose counts were taken over across a rename.
    pub fn renames(&self) -> u64 {
        self.renames.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&self) {
        let mut inner = self.inner.lock();
        inner.entries.clear();
        inner.dirty = true;
    }

    /// Where the cache persists, if it does.
    pub fn file(&self) -> Option<PathBuf> {
        self.file.as_ref().map(CacheFile::path)
    }

    /// Writes the persisted cache if anything changed since the last save;
    /// true when it wrote. A no-op without a file.
    pub fn save(&self) -> Result<bool> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        let _saving = self.saving.lock();
        let bytes = {
            let mut inner = self.inner.lock();
            if !inner.dirty {
                return Ok(false);
            }
            inner.dirty = false;
            persisted::encode(&inner.entries)
        };
        let written = persisted::write(file, &bytes);
        if written.is_err() {
            self.inner.lock().dirty = true;
        }
        written.map(|()| true)
    }
}

/// The checks a walk makes once it has met every file: an adoption is
/// ambiguous when another new file of the walk has the same identity.
/// A first walk meets every file as new, so they are noted in one vector
/// (not a map of lists: a block of heap for each file, all freed at the
/// walk's end, left its free space scattered) and grouped only when one
/// was adopted.
#[derive(Default)]
pub struct NewFiles {
    /// The new files of the walk (read or adopted): identity, source
    /// index, adopted.
    seen: Vec<(Identity, usize, bool)>,
}

impl NewFiles {
    /// Notes the walk's source `index`, new under its path, `adopted` or read.
    pub fn note(&mut self, id: FileId, index: usize, adopted: bool) {
        self.seen.push(((id.size, id.mtime_ns), index, adopted));
    }

    /// Sources whose adopted counts must be re-read: those sharing their
    /// identity with another new file, in order.
    pub fn ambiguous(&mut self) -> Vec<usize> {
        if !self.seen.iter().any(|(_, _, adopted)| *adopted) {
            return Vec::new();
        }
        self.seen.sort_unstable_by_key(|(identity, _, _)| *identity);
        let mut out: Vec<usize> = self
            .seen
            .chunk_by(|a, b| a.0 == b.0)
            .filter(|files| files.len() > 1)
            .flat_map(|files| files.iter().filter(|f| f.2).map(|f| f.1))
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn id(size: u64, mtime_ns: i64) -> FileId {
        FileId {
            dev: 1,
            ino: 2,
            size,
            mtime_ns,
            ctime_ns: mtime_ns,
            mode: 0o100644,
        }
    }

    pub(super) fn stats(n: u64) -> RecordStats {
        RecordStats {
            record_count: n,
            failed_count: 1,
            min_timestamp: Some(-5),
            max_timestamp: None,
        }
    }

    #[test]
    fn an_entry_keeps_what_is_known_of_its_counts() {
        assert_eq!(std::mem::size_of::<Entry>(), 80);
        let full = RecordStats {
            record_count: u64::MAX,
            failed_count: 3,
            min_timestamp: Some(i64::MIN),
            max_timestamp: Some(0),
        };
        for stats in [full, stats(7), RecordStats::default()] {
            let entry = Entry::new(1, -2, None, stats);
            assert_eq!(entry.stats(), stats);
            assert_eq!(entry.exact(), None);
        }
        let mut entry = Entry::new(1, 2, None, stats(1));
        let file = id(1, 2);
        assert!(entry.holds(file), "an entry from disk takes the identity");
        assert_eq!(entry.exact(), Some(Exact::of(file)));
        assert!(!entry.holds(FileId { ino: 9, ..file }));
        assert!(!entry.holds(id(1, 3)));
    }

    #[test]
    fn capacity_bounds_the_entries() {
        let (cache, _) = CountCache::open(2, None).unwrap();
        for i in 0..5 {
            cache.put(&format!("{i}.jsonl"), id(i, 1_000), stats(i));
        }
        assert_eq!(cache.len(), 2);
        assert!(!cache.save().unwrap(), "no file, nothing written");
    }

    #[test]
    fn an_adoption_is_ambiguous_when_another_new_file_shares_the_identity() {
        let mut new = NewFiles::default();
        new.note(id(5, 1), 0, true);
        new.note(id(6, 1), 1, true);
        new.note(id(5, 1), 2, false);
        new.note(id(7, 1), 3, false);
        new.note(id(5, 1), 4, true);
        assert_eq!(new.ambiguous(), vec![0, 4]);
        let mut read_only = NewFiles::default();
        read_only.note(id(5, 1), 0, false);
        read_only.note(id(5, 1), 1, false);
        assert_eq!(read_only.ambiguous(), Vec::<usize>::new());
    }
}
