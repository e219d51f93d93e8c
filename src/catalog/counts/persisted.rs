//! The persisted copy of the count cache: where it lives, its bytes, and
//! what is done with a file found in its place.
//!
//! It is a disposable cache whose truth is the files:
//!
//! - an older schema is rebuilt (ignored, then overwritten);
//! - a newer schema is left untouched and refused with
//!   `PCHRONICLE_COUNT_CACHE_NEWER` (upgrade, or use another cache file);
//! - a damaged or empty cache (the magic is there, the checksum or a
//!   length disagrees) is rebuilt with a warning;
//! - a file that is not a pchronicle count cache at all (another magic, a
//!   symlink, a FIFO) is never overwritten: `PCHRONICLE_COUNT_CACHE_FOREIGN`.
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

use std::io::Read;
use std::path::PathBuf;

use super::{Entries, Entry, Inner, Loaded};
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
        let state = warehouse::state_dir(root, warehouse::STATE_DIR, DEFAULT_DIR)
            .map_err(|e| Error::io(root.path().join(warehouse::STATE_DIR), &e))?;
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

/// The file's bytes for `entries`.
pub(super) fn encode(entries: &Entries) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + entries.len() * 96);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SCHEMA.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    // Least recently used first, so loading in order rebuilds the recency.
    for (path, e) in entries.oldest_first() {
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&e.size.to_le_bytes());
        out.extend_from_slice(&e.mtime_ns.to_le_bytes());
        let stats = e.stats();
        out.extend_from_slice(&stats.record_count.to_le_bytes());
        out.extend_from_slice(&stats.failed_count.to_le_bytes());
        let flags =
            u8::from(stats.min_timestamp.is_some()) | u8::from(stats.max_timestamp.is_some()) << 1;
        out.push(flags);
        out.extend_from_slice(&stats.min_timestamp.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&stats.max_timestamp.unwrap_or(0).to_le_bytes());
    }
    let sum = crc32fast::hash(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Replaces the file with `bytes`, unless what is there now is not ours.
pub(super) fn write(file: &CacheFile, bytes: &[u8]) -> Result<()> {
    // A large file rewritten often: a crash's temp files are swept.
    let how = Replace {
        sweep_temps: true,
        ..Replace::hint()
    };
    check_ours(file).and_then(|()| {
        file.dir
            .replace(&file.name, bytes, how)
            .map_err(|e| Error::io(file.path(), &e))
    })
}

fn foreign(path: &std::path::Path, why: &str) -> Error {
    Error::at(
        ErrorCode::CountCacheForeign,
        path,
        format!("{why}; pchronicle never overwrites a file it did not write"),
    )
}

/// Refuses to replace anything at the cache's path but a pchronicle count
/// cache of this schema or an older one (a file starting with the magic)
/// or an empty file. A newer build may have written the file since this
/// cache was loaded: its cache is left as it is.
fn check_ours(file: &CacheFile) -> Result<()> {
    let path = file.path();
    let (opened, stat) = match file.dir.open_file(&file.name) {
        Ok(opened) => opened,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if crate::warehouse::is_not_regular(&e) => {
            return Err(foreign(&path, "the path is not a regular file"));
        }
        Err(e) => return Err(Error::io(&path, &e)),
    };
    let mut head = Vec::with_capacity(MAGIC.len() + 4);
    opened
        .reader_at(0)
        .take(MAGIC.len() as u64 + 4)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(&path, &e))?;
    if stat.size > 0 && !head.starts_with(MAGIC) {
        return Err(foreign(&path, "the file is not a pchronicle count cache"));
    }
    match head
        .get(MAGIC.len()..)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
    {
        Some(schema) if u32::from_le_bytes(schema) > SCHEMA => {
            Err(newer(&path, u32::from_le_bytes(schema)))
        }
        _ => Ok(()),
    }
}

fn newer(path: &std::path::Path, schema: u32) -> Error {
    Error::at(
        ErrorCode::CountCacheNewer,
        path,
        format!("the count cache has schema {schema}; this build reads {SCHEMA}"),
    )
}

/// Reads the persisted cache into `entries`. A newer schema and a file that
/// is not a count cache are errors; damage is rebuilt.
pub(super) fn load(file: &CacheFile, inner: &mut Inner) -> Result<Loaded> {
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
        return Err(newer(&path, schema));
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

/// Hands each entry of a cache file to `each`, in order, which says
/// whether its path was new; the entry count, or `None` when the bytes are
/// damaged (after some entries may have been handed over), a path given
/// twice among them.
fn decode(bytes: &[u8], each: &mut dyn FnMut(&str, Entry) -> bool) -> Option<usize> {
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
        let stats = RecordStats {
            record_count,
            failed_count,
            min_timestamp: (flags & 1 != 0).then_some(min),
            max_timestamp: (flags & 2 != 0).then_some(max),
        };
        let entry = Entry::new(size, mtime_ns, None, stats);
        if !each(path, entry) {
            return None;
        }
    }
    (at == body.len()).then_some(count as usize)
}

#[cfg(test)]
mod tests {
    use super::super::CountCache;
    use super::super::tests::{id, stats};
    use super::*;
    use crate::catalog::cache::FileId;

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
            assert_eq!(
                decode(&bytes[..cut], &mut |_, _| true),
                None,
                "cut at {cut}"
            );
        }
        for i in 12..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(decode(&damaged, &mut |_, _| true).is_none(), "flip at {i}");
        }
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
    fn a_newer_schema_written_after_loading_is_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("counts");
        let (cache, loaded) = CountCache::open(8, Some(CacheFile::at(&file).unwrap())).unwrap();
        assert_eq!(loaded, Loaded::Absent);
        cache.put("x.jsonl", id(10, 1_000), stats(3));
        // A newer build writes its cache meanwhile.
        let mut newer = MAGIC.to_vec();
        newer.extend_from_slice(&(SCHEMA + 1).to_le_bytes());
        newer.extend_from_slice(b"whatever a later schema holds");
        std::fs::write(&file, &newer).unwrap();
        let refused = cache.save().unwrap_err();
        assert_eq!(refused.code, ErrorCode::CountCacheNewer);
        assert_eq!(std::fs::read(&file).unwrap(), newer);
        // This schema's own file, or a file too short to name one, is
        // replaced as before.
        for (records, ours) in [(4, MAGIC.to_vec()), (5, Vec::new())] {
            std::fs::write(&file, &ours).unwrap();
            cache.put("x.jsonl", id(10, 1_000), stats(records));
            assert!(cache.save().unwrap());
            assert_ne!(std::fs::read(&file).unwrap(), ours);
        }
    }
}
