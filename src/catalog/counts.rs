//! Record-file counts: the in-process cache, and its persisted copy that
//! lets a restarted daemon answer without re-reading every record file.
//!
//! Entries are keyed by the record file's path relative to the warehouse
//! root. An entry counted in this process is reused while the file's full
//! stat identity ([`FileId`]: device, inode, size, mtime, ctime) holds; one
//! loaded from disk carries only `(size, mtime_ns)` and is reused when both
//! match, after which the full identity is recorded. Identities younger
//! than the racy window are never stored (see [`super::cache`]).
//!
//! The persisted file is a disposable cache whose truth is the files:
//!
//! - an older schema is rebuilt (ignored, then overwritten);
//! - a newer schema is left untouched and refused with
//!   `PCHRONICLE_COUNT_CACHE_NEWER` (upgrade, or use another cache file);
//! - a damaged or empty cache (the magic is there, the checksum or a
//!   length disagrees) is rebuilt with a warning;
//! - a file that is not a pchronicle count cache at all (another magic, a
//!   symlink, a FIFO) is never overwritten: `PCHRONICLE_COUNT_CACHE_FOREIGN`.
//!
//! A file whose path is new, whose identity matches exactly one entry
//! whose path has vanished, is a rename: it takes over that entry without
//! being read. When several new paths (within one walk) or several vanished
//! entries share an identity the match is ambiguous and the file is read.
//!
//! Writes replace the file atomically (temp file + rename in the open state
//! directory, mode 0600), so concurrent daemons on one warehouse never
//! leave a torn cache; the last writer wins. Where the file lives is
//! decided by [`crate::warehouse::state_dir`].
//!
//! Layout (little-endian): magic `PCHRCNTS`, u32 schema, u64 entry count;
//! per entry u32 path length, the UTF-8 path, u64 size, i64 mtime_ns, u64
//! records, u64 failed, u8 flags (bit 0: min timestamp present, bit 1: max),
//! i64 min, i64 max (microseconds); then the u32 CRC-32 (IEEE) of all
//! bytes before. Schema 1 ended in a u64 FNV-1a 64 instead; like any older
//! schema it is ignored and rebuilt, never refused.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use super::cache::{FileId, HitCount, HitCounter};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordStats;
use crate::warehouse::{self, CappedError, Dir, Replace};

const MAGIC: &[u8; 8] = b"PCHRCNTS";

/// The schema this build writes and reads. Schema 2 replaced schema 1's
/// FNV-1a checksum with CRC-32.
pub const SCHEMA: u32 = 2;

/// The state subdirectory that holds the persisted cache by default.
pub const DEFAULT_DIR: &str = "cache";
/// The persisted cache's file name there.
pub const DEFAULT_NAME: &str = "counts";

/// Where a persisted count cache lives: a file of an open directory.
#[derive(Debug)]
pub struct CacheFile {
    pub dir: Dir,
    pub name: String,
}

impl CacheFile {
    /// The file at `path`, named from outside (`--cache-file`): its
    /// directory may be reached through symlinks; the file itself is never
    /// followed.
    pub fn at(path: &std::path::Path) -> Result<CacheFile> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| Error::io(parent, &e))?;
        }
        let (dir, name) = Dir::open_parent_of(path).map_err(|e| Error::io(path, &e))?;
        Ok(CacheFile { dir, name })
    }

    /// `ROOT/.pchronicle/cache/counts` when that state directory is safe
    /// to write, else this user's cache directory (with the reason).
    pub fn default_for(root: &Dir) -> Result<(CacheFile, Option<String>)> {
        let state = warehouse::state_dir(root, super::STATE_DIR, DEFAULT_DIR)
            .map_err(|e| Error::io(&root.path().join(super::STATE_DIR), &e))?;
        let file = CacheFile {
            dir: state.dir,
            name: DEFAULT_NAME.to_string(),
        };
        Ok((file, state.elsewhere))
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }
}

/// `(size, mtime_ns)`: what identifies a file across restarts and renames.
type Identity = (u64, i64);

#[derive(Debug, Clone)]
struct Entry {
    size: u64,
    mtime_ns: i64,
    /// The rest of the full identity once this process has checked the
    /// file.
    exact: Option<Exact>,
    stats: RecordStats,
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
    fn identity(&self) -> Identity {
        (self.size, self.mtime_ns)
    }

    /// Whether the entry describes a file with identity `id`; an entry
    /// from disk is upgraded to the full identity on its first match.
    fn holds(&mut self, id: FileId) -> bool {
        if self.identity() != (id.size, id.mtime_ns) {
            return false;
        }
        match self.exact {
            Some(exact) => exact == Exact::of(id),
            None => {
                self.exact = Some(Exact::of(id));
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
    hits: HitCounter,
    renames: AtomicU64,
}

struct Inner {
    /// Unbounded as a map (so no table for the full capacity is allocated
    /// up front); `capacity` is enforced on insert.
    entries: LruCache<Arc<str>, Entry>,
    capacity: usize,
    /// Entries changed since the last save.
    dirty: bool,
}

impl Inner {
    fn new(capacity: NonZeroUsize) -> Inner {
        Inner {
            entries: LruCache::unbounded(),
            capacity: capacity.get(),
            dirty: false,
        }
    }

    /// Adds or replaces the entry of `path` (evicting the least recently
    /// used one when full).
    fn insert(&mut self, path: &str, entry: Entry) {
        self.entries.push(Arc::from(path), entry);
        while self.entries.len() > self.capacity {
            self.entries.pop_lru();
        }
        self.dirty = true;
    }

    fn remove(&mut self, path: &str) -> Option<Entry> {
        let entry = self.entries.pop(path)?;
        self.dirty = true;
        Some(entry)
    }
}

/// The cache's entries by `(size, mtime_ns)`, taken when a walk first
/// meets a file the cache does not know, so renames can be matched without
/// the cache keeping a second map of every entry.
#[derive(Default)]
pub struct RenameIndex {
    by_identity: HashMap<Identity, Vec<Arc<str>>>,
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
            Some(file) => load(file, &mut inner)?,
        };
        inner.dirty = false;
        if let (Loaded::Unusable(why), Some(file)) = (&loaded, &file) {
            log::warn!(
                "ignoring the count cache {}: {why}; it will be rebuilt",
                file.path().display()
            );
        }
        let cache = CountCache {
            inner: Mutex::new(inner),
            file,
            hits: HitCounter::default(),
            renames: AtomicU64::new(0),
        };
        Ok((cache, loaded))
    }

    /// The counts of `rel` if an entry describes the file with identity
    /// `id`; a stale entry is dropped.
    pub fn get(&self, rel: &str, id: FileId) -> Option<RecordStats> {
        let mut inner = self.inner.lock();
        let found = match inner.entries.get_mut(rel).map(|e| (e.holds(id), e.stats)) {
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
            Entry {
                size: id.size,
                mtime_ns: id.mtime_ns,
                exact: Some(Exact::of(id)),
                stats,
            },
        );
    }

    /// The entries by identity, for [`CountCache::adopt_rename`].
    pub fn rename_index(&self) -> RenameIndex {
        let inner = self.inner.lock();
        let mut index = RenameIndex::default();
        for (path, entry) in inner.entries.iter() {
            index
                .by_identity
                .entry(entry.identity())
                .or_default()
                .push(Arc::clone(path));
        }
        index
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
        let candidates = index.by_identity.get_mut(&identity)?;
        let vanished: Vec<Arc<str>> = candidates
            .iter()
            .filter(|path| &***path != rel)
            .filter(|path| live(path).is_none_or(|now| (now.size, now.mtime_ns) != identity))
            .cloned()
            .collect();
        let [from] = vanished.as_slice() else {
            return None;
        };
        candidates.retain(|p| p != from);
        let mut inner = self.inner.lock();
        let mut entry = inner.remove(from).filter(|e| e.identity() == identity)?;
        entry.exact = Some(Exact::of(id));
        let stats = entry.stats;
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
        let bytes = {
            let mut inner = self.inner.lock();
            if !inner.dirty {
                return Ok(false);
            }
            inner.dirty = false;
            encode(&inner.entries)
        };
        let how = Replace {
            durable: false,
            mode: 0o600,
            keep_owner: false,
            sweep_temps: true,
            expect: None,
        };
        let written = check_ours(file).and_then(|()| {
            file.dir
                .replace(&file.name, &bytes, how)
                .map_err(|e| Error::io(&file.path(), &e))
        });
        if written.is_err() {
            self.inner.lock().dirty = true;
        }
        written.map(|()| true)
    }
}

/// The checks a walk makes once it has met every file: an adoption is
/// ambiguous when another new file of the walk has the same identity.
#[derive(Default)]
pub struct NewFiles {
    /// Identity -> new files of the walk (read or adopted).
    seen: HashMap<Identity, Vec<(usize, bool)>>,
}

impl NewFiles {
    /// Notes the walk's source `index`, new under its path, `adopted` or read.
    pub fn note(&mut self, id: FileId, index: usize, adopted: bool) {
        self.seen
            .entry((id.size, id.mtime_ns))
            .or_default()
            .push((index, adopted));
    }

    /// Sources whose adopted counts must be re-read: those sharing their
    /// identity with another new file.
    pub fn ambiguous(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .seen
            .values()
            .filter(|files| files.len() > 1)
            .flat_map(|files| files.iter().filter(|(_, a)| *a).map(|(i, _)| *i))
            .collect();
        out.sort_unstable();
        out
    }
}

fn encode(entries: &LruCache<Arc<str>, Entry>) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + entries.len() * 96);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SCHEMA.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    // Least recently used first, so loading in order rebuilds the recency.
    for (path, e) in entries.iter().rev() {
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&e.size.to_le_bytes());
        out.extend_from_slice(&e.mtime_ns.to_le_bytes());
        out.extend_from_slice(&e.stats.record_count.to_le_bytes());
        out.extend_from_slice(&e.stats.failed_count.to_le_bytes());
        let flags = u8::from(e.stats.min_timestamp.is_some())
            | u8::from(e.stats.max_timestamp.is_some()) << 1;
        out.push(flags);
        out.extend_from_slice(&e.stats.min_timestamp.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&e.stats.max_timestamp.unwrap_or(0).to_le_bytes());
    }
    let sum = crc32fast::hash(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn foreign(path: &std::path::Path, why: &str) -> Error {
    Error::at(
        ErrorCode::CountCacheForeign,
        path,
        format!("{why}; pchronicle never overwrites a file it did not write"),
    )
}

/// Refuses to replace anything at the cache's path but a pchronicle count
/// cache (a file starting with the magic) or an empty file.
fn check_ours(file: &CacheFile) -> Result<()> {
    let path = file.path();
    let (opened, stat) = match file.dir.open_file(&file.name) {
        Ok(opened) => opened,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(foreign(&path, "the path is not a regular file"));
        }
        Err(e) => return Err(Error::io(&path, &e)),
    };
    let mut head = Vec::with_capacity(MAGIC.len());
    opened
        .take(MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(&path, &e))?;
    if stat.size == 0 || head == MAGIC {
        Ok(())
    } else {
        Err(foreign(&path, "the file is not a pchronicle count cache"))
    }
}

/// Reads the persisted cache into `entries`. A newer schema and a file that
/// is not a count cache are errors; damage is rebuilt.
fn load(file: &CacheFile, inner: &mut Inner) -> Result<Loaded> {
    let path = file.path();
    let bytes = match file.dir.read_capped(&file.name, warehouse::COUNT_CACHE_CAP) {
        Ok(Some((bytes, _))) => bytes,
        Ok(None) => return Ok(Loaded::Absent),
        Err(CappedError::NotRegular) => {
            return Err(foreign(&path, "the path is not a regular file"));
        }
        Err(CappedError::TooLarge { cap }) => {
            return Err(Error::at(
                ErrorCode::MetadataTooLarge,
                &path,
                format!("larger than the {cap}-byte limit for a count cache"),
            ));
        }
        Err(CappedError::Io(e)) => return Ok(Loaded::Unusable(format!("unreadable: {e}"))),
    };
    if bytes.is_empty() {
        return Ok(Loaded::Unusable("empty".into()));
    }
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(foreign(&path, "the file is not a pchronicle count cache"));
    }
    if bytes.len() < 12 {
        return Ok(Loaded::Unusable("damaged (truncated header)".into()));
    }
    let schema = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if schema > SCHEMA {
        return Err(Error::at(
            ErrorCode::CountCacheNewer,
            &path,
            format!("the count cache has schema {schema}; this build reads {SCHEMA}"),
        ));
    }
    if schema < SCHEMA {
        return Ok(Loaded::Older(schema));
    }
    match decode(&bytes, &mut |path, entry| inner.insert(path, entry)) {
        Some(n) => Ok(Loaded::Entries(n)),
        None => {
            inner.entries.clear();
            Ok(Loaded::Unusable("damaged (checksum or length)".into()))
        }
    }
}

/// Hands each entry of a cache file to `each`, in order; the entry count,
/// or `None` when the bytes are damaged (after some entries may have been
/// handed over).
fn decode(bytes: &[u8], each: &mut dyn FnMut(&str, Entry)) -> Option<usize> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body) != u32::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut at: usize = 12;
    let mut take = |n: usize| -> Option<&[u8]> {
        let slice = body.get(at..at.checked_add(n)?)?;
        at += n;
        Some(slice)
    };
    let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let count = u64_at(take(8)?);
    let mut seen = HashSet::new();
    for _ in 0..count {
        let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let path = std::str::from_utf8(take(len)?).ok()?;
        let size = u64_at(take(8)?);
        let mtime_ns = u64_at(take(8)?) as i64;
        let record_count = u64_at(take(8)?);
        let failed_count = u64_at(take(8)?);
        let flags = take(1)?[0];
        let min = u64_at(take(8)?) as i64;
        let max = u64_at(take(8)?) as i64;
        if !seen.insert(path) {
            return None;
        }
        let stats = RecordStats {
            record_count,
            failed_count,
            min_timestamp: (flags & 1 != 0).then_some(min),
            max_timestamp: (flags & 2 != 0).then_some(max),
        };
        each(
            path,
            Entry {
                size,
                mtime_ns,
                exact: None,
                stats,
            },
        );
    }
    (at == body.len()).then_some(count as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(size: u64, mtime_ns: i64) -> FileId {
        FileId {
            dev: 1,
            ino: 2,
            size,
            mtime_ns,
            ctime_ns: mtime_ns,
            mode: 0o100644,
        }
    }

    fn stats(n: u64) -> RecordStats {
        RecordStats {
            record_count: n,
            failed_count: 1,
            min_timestamp: Some(-5),
            max_timestamp: None,
        }
    }

    #[test]
    fn a_saved_cache_loads_back_and_any_damage_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("counts");
        let place = || Some(CacheFile::at(&file).unwrap());
        let (cache, loaded) = CountCache::open(8, place()).unwrap();
        assert_eq!(loaded, Loaded::Absent);
        cache.put("a/x.jsonl", id(10, 1_000), stats(3));
        cache.put("y.jsonl", id(20, 2_000), stats(4));
        assert!(cache.save().unwrap());
        assert!(!cache.save().unwrap(), "nothing changed since");

        let (again, loaded) = CountCache::open(8, place()).unwrap();
        assert_eq!(loaded, Loaded::Entries(2));
        assert_eq!(again.get("a/x.jsonl", id(10, 1_000)), Some(stats(3)));
        // Across a restart only size and mtime identify the file.
        let moved_inode = FileId {
            ino: 99,
            ..id(20, 2_000)
        };
        assert_eq!(again.get("y.jsonl", moved_inode), Some(stats(4)));
        assert_eq!(again.get("y.jsonl", id(21, 2_000)), None);

        let bytes = std::fs::read(&file).unwrap();
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut], &mut |_, _| ()), None, "cut at {cut}");
        }
        for i in 12..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(decode(&damaged, &mut |_, _| ()).is_none(), "flip at {i}");
        }
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
    fn a_schema_1_cache_is_rebuilt_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("counts");
        // A schema-1 file of no entries; its checksum is never read, as
        // the schema is checked first.
        let mut old = MAGIC.to_vec();
        old.extend_from_slice(&1u32.to_le_bytes());
        old.extend_from_slice(&0u64.to_le_bytes());
        old.extend_from_slice(&[0xa5; 8]);
        std::fs::write(&file, &old).unwrap();
        let place = || Some(CacheFile::at(&file).unwrap());
        let (cache, loaded) = CountCache::open(8, place()).unwrap();
        assert_eq!(loaded, Loaded::Older(1));
        cache.put("x.jsonl", id(10, 1_000), stats(3));
        assert!(cache.save().unwrap(), "an older schema is overwritten");
        let (_, loaded) = CountCache::open(8, place()).unwrap();
        assert_eq!(loaded, Loaded::Entries(1));
    }

    #[test]
    fn an_adoption_is_ambiguous_when_another_new_file_shares_the_identity() {
        let mut new = NewFiles::default();
        new.note(id(5, 1), 0, true);
        new.note(id(6, 1), 1, true);
        new.note(id(5, 1), 2, false);
        assert_eq!(new.ambiguous(), vec![0]);
    }
}
