//! Point lookups through an index, and the three staleness outcomes.
//!
//! Before serving, the index's snapshot of its cohort is compared with the
//! cohort as it is now:
//!
//! - the size differs: `PCHRONICLE_INDEX_STALE` at once (the digest covers
//!   the whole file, so a different length cannot match it);
//! - size and mtime are equal: served without hashing;
//! - the size is equal and the mtime moved (a copy or restore that kept
//!   the bytes but not the timestamp): the cohort is hashed once and the
//!   lookup refused only if the bytes differ. The digest is memoised per
//!   (path, size, mtime), in the process and in the state directory
//!   ([`persisted`]), so such a cohort is hashed once, not once per lookup
//!   or per command. [`verify`] always hashes and never reads the memo.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::build::index_path;
use super::format::{Corrupt, IndexReader, KeyType, KeyValue, encode_key};
use super::rebuild_command;
use crate::error::{Error, ErrorCode, Result};
use crate::warehouse::{self, Blob};

/// A cohort's path, size, mtime and ETag (a remote object's, see
/// [`check_fresh`]).
type MemoKey = (PathBuf, u64, i64, Option<String>);

fn memo() -> &'static Mutex<HashMap<MemoKey, [u8; 32]>> {
    static MEMO: OnceLock<Mutex<HashMap<MemoKey, [u8; 32]>>> = OnceLock::new();
    MEMO.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The digest this process memoised for `cohort` at this size and mtime,
/// if it hashed it (never hashes).
pub fn memoised_digest(cohort: &Path, size: u64, mtime_ns: i64) -> Option<[u8; 32]> {
    memo()
        .lock()
        .get(&(cohort.to_path_buf(), size, mtime_ns, None))
        .copied()
}

thread_local! {
    /// How many whole cohorts this thread hashed (per thread, so tests
    /// running side by side do not count each other's).
    static HASHES: Cell<u64> = const { Cell::new(0) };
}

/// How many times the calling thread hashed a whole cohort (for tests).
pub fn cohort_hashes() -> u64 {
    HASHES.with(Cell::get)
}

/// Forgets every digest this process memoised (the one on disk stays):
/// what a new process starts with.
pub fn forget_process_memo() {
    memo().lock().clear();
}

/// The SHA-256 of the open file `file` (of `path`) from its start.
fn hash_file(file: &Blob, path: &Path) -> Result<[u8; 32]> {
    HASHES.with(|n| n.set(n.get() + 1));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut reader = file.reader_at(0);
    loop {
        let n = reader.read(&mut buf).map_err(|e| Error::io(path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

fn corrupt(index: &Path, fault: Corrupt) -> Error {
    Error::at(ErrorCode::IndexCorrupt, index, fault.0)
}

fn stale(cohort: &Path, key: &[String], why: &str) -> Error {
    Error::at(
        ErrorCode::IndexStale,
        cohort,
        format!(
            "the index over {} is stale: {why}; rebuild it with `{}`",
            key.join(","),
            rebuild_command(cohort, key)
        ),
    )
}

/// A record file named from outside and its index over `key`, open
/// through their directory (local, or a prefix of a bucket): neither is
/// reached through a symlink.
struct Opened {
    index_path: PathBuf,
    index: Blob,
    index_len: u64,
    cohort: Blob,
    cohort_stat: warehouse::Stat,
}

fn open_index(cohort: &Path, key: &[String]) -> Result<Opened> {
    let index_path = index_path(cohort, key);
    let (dir, name) = super::manifest::open_parent(cohort)?;
    let index_name = index_path
        .file_name()
        .expect("an index path ends in the index's name");
    let (index, stat) = dir.open_file(index_name).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => missing(cohort, key),
        _ => Error::io(&index_path, &e),
    })?;
    let (data, cohort_stat) = dir.open_file(&name).map_err(|e| Error::io(cohort, &e))?;
    Ok(Opened {
        index_path,
        index,
        index_len: stat.size,
        cohort: data,
        cohort_stat,
    })
}

/// No index over exactly `key`: a key mismatch when an index over the same
/// fields in another order, or over more fields, exists (the full key in
/// the index's order is required); else the index is missing.
fn missing(cohort: &Path, key: &[String]) -> Error {
    let known = super::manifest::list(cohort).unwrap_or_default();
    let near = known
        .iter()
        .find(|e| e.key.len() >= key.len() && key.iter().all(|k| e.key.contains(k)));
    match near {
        Some(entry) => Error::at(
            ErrorCode::LookupKeyMismatch,
            cohort,
            format!(
                "the index is over {} and a lookup takes its full key in that order, not {}",
                entry.key.join(","),
                key.join(",")
            ),
        ),
        None => Error::at(
            ErrorCode::IndexMissing,
            cohort,
            format!(
                "no index over {}; build it with `{}`",
                key.join(","),
                rebuild_command(cohort, key)
            ),
        ),
    }
}

/// Checks that an index describes `cohort` as it is now (the three
/// outcomes above). With `always_hash`, the cohort is hashed whatever its
/// mtime says and the memo is neither read nor written.
fn check_fresh(
    cohort: &Path,
    key: &[String],
    opened: &Opened,
    reader: &IndexReader<'_, Blob>,
    always_hash: bool,
) -> Result<()> {
    // The checks and the hash read the one open file, so the digest is of
    // the file that was checked; it is memoised only if that file's size
    // and mtime held while it was hashed.
    let (file, meta) = (&opened.cohort, &opened.cohort_stat);
    let h = &reader.header;
    if meta.size != h.cohort_size {
        return Err(stale(
            cohort,
            key,
            &format!(
                "the file is {} bytes, the index was built over {}",
                meta.size, h.cohort_size
            ),
        ));
    }
    let mtime_ns = meta.mtime_ns();
    // A remote object's mtime is when it was uploaded (whole seconds), set
    // by the server, never the mtime it was indexed at: it is not taken
    // as proof that the bytes are the same. Its version is its
    // last-modified time and ETag together, and the digest memo holds by
    // both (an object without an ETag is hashed every time).
    let etag = file.etag().map(str::to_string);
    let remote = file.local().is_none();
    if !always_hash && !remote && mtime_ns == h.cohort_mtime_ns {
        return Ok(());
    }
    let digest = if always_hash || (remote && etag.is_none()) {
        hash_file(file, cohort)?
    } else {
        let memo_key = (cohort.to_path_buf(), meta.size, mtime_ns, etag.clone());
        let known = memo().lock().get(&memo_key).copied();
        let known = known.or_else(|| persisted::get(cohort, meta.size, mtime_ns, etag.as_deref()));
        match known {
            Some(digest) => digest,
            None => {
                let digest = hash_file(file, cohort)?;
                let after = file.stat().map_err(|e| Error::io(cohort, &e))?;
                if after.size == meta.size && after.mtime_ns() == mtime_ns {
                    persisted::put(cohort, meta.size, mtime_ns, etag.as_deref(), &digest);
                    memo().lock().insert(memo_key, digest);
                }
                digest
            }
        }
    };
    if digest != h.cohort_sha256 {
        return Err(stale(
            cohort,
            key,
            "its content differs from what was indexed",
        ));
    }
    Ok(())
}

/// The digest memo on disk: one small file per record file, under
/// `.pchronicle/digests/` of the nearest directory above it holding a
/// `.pchronicle/` when that is this user's and no one else's, else in
/// this user's cache directory. A record written there only
/// answers for the same canonical path, size and mtime. Failing to read
/// or write it only costs a hash.
pub mod persisted {
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Serialize};
    use sha2::{Digest, Sha256};

    use crate::warehouse::{self, Dir, Replace};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Memo {
        path: PathBuf,
        size: u64,
        mtime_ns: i64,
        /// A remote object's ETag.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        etag: Option<String>,
        sha256: String,
    }

    /// The memo's directory and the entry name for `cohort`. A lookup
    /// never creates a `.pchronicle/` beside a record file: without one
    /// above it, the memo goes to the user's cache directory.
    fn place(cohort: &Path) -> Option<(Dir, String, PathBuf)> {
        #[cfg(feature = "remote")]
        if crate::remote::is_remote(cohort) {
            // Nothing is written remotely: the user's cache, keyed by the
            // bucket and prefix.
            let (parent, _) = Dir::open_parent_of(cohort).ok()?;
            let state = warehouse::user_state_dir(&parent, "digests").ok()?;
            return Some((state, entry_name(cohort), cohort.to_path_buf()));
        }
        let cohort = std::fs::canonicalize(cohort).ok()?;
        let parent = cohort.parent()?;
        let warehouse = parent.ancestors().find(|d| {
            std::fs::symlink_metadata(d.join(warehouse::STATE_DIR)).is_ok_and(|m| m.is_dir())
        });
        let state = match warehouse {
            Some(root) => {
                let root = Dir::open_root(root).ok()?;
                warehouse::state_dir(&root, warehouse::STATE_DIR, "digests")
                    .ok()?
                    .dir
            }
            None => warehouse::user_state_dir(&Dir::open_root(parent).ok()?, "digests").ok()?,
        };
        Some((state, entry_name(&cohort), cohort))
    }

    fn entry_name(cohort: &Path) -> String {
        let digest = Sha256::digest(cohort.as_os_str().as_encoded_bytes());
        format!("{}.json", warehouse::hex(&digest[..16]))
    }

    /// The digest recorded for `cohort` at this size, mtime and ETag.
    pub fn get(cohort: &Path, size: u64, mtime_ns: i64, etag: Option<&str>) -> Option<[u8; 32]> {
        let (dir, name, path) = place(cohort)?;
        let (bytes, _) = dir.read_capped(&name, 4 << 10).ok()??;
        let memo: Memo = serde_json::from_slice(&bytes).ok()?;
        if memo.path != path
            || memo.size != size
            || memo.mtime_ns != mtime_ns
            || memo.etag.as_deref() != etag
        {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(memo.sha256.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(out)
    }

    /// Records `digest` for `cohort` at this size, mtime and ETag.
    pub fn put(cohort: &Path, size: u64, mtime_ns: i64, etag: Option<&str>, digest: &[u8; 32]) {
        let Some((dir, name, path)) = place(cohort) else {
            return;
        };
        let memo = Memo {
            path,
            size,
            mtime_ns,
            etag: etag.map(str::to_string),
            sha256: warehouse::hex(digest),
        };
        let bytes = serde_json::to_vec(&memo).expect("a memo always serialises");
        if let Err(e) = dir.replace(&name, &bytes, Replace::hint()) {
            log::debug!("{}: digest memo not kept: {e}", dir.path().display());
        }
    }
}

/// Parses the textual values of a lookup into typed key values.
fn parse_values(key: &[(String, KeyType)], values: &[String]) -> Result<Vec<KeyValue>> {
    if values.len() != key.len() {
        return Err(Error::new(
            ErrorCode::LookupKeyMismatch,
            format!(
                "the index key has {} fields, {} values were given (the full key is required)",
                key.len(),
                values.len()
            ),
        ));
    }
    key.iter()
        .zip(values)
        .map(|((name, kind), text)| {
            let mismatch = |what: &str| {
                Error::new(
                    ErrorCode::LookupKeyMismatch,
                    format!("field {name:?} is {what}, and {text:?} is not one"),
                )
            };
            Ok(match kind {
                KeyType::String => KeyValue::String(text.clone()),
                KeyType::Integer => {
                    KeyValue::Integer(text.parse().map_err(|_| mismatch("an integer"))?)
                }
                KeyType::Boolean => match text.as_str() {
                    "true" => KeyValue::Boolean(true),
                    "false" => KeyValue::Boolean(false),
                    _ => return Err(mismatch("a boolean")),
                },
            })
        })
        .collect()
}

/// The records of `cohort` whose key fields `key` equal `values`, in file
/// order, read through the index: the header, one bucket, and one locator
/// and one record per match.
pub fn lookup(cohort: &Path, key: &[String], values: &[String]) -> Result<Vec<Vec<u8>>> {
    let opened = open_index(cohort, key)?;
    let index = &opened.index_path;
    let reader =
        IndexReader::open(&opened.index, opened.index_len).map_err(|f| corrupt(index, f))?;
    let names: Vec<&String> = reader.header.key.iter().map(|(n, _)| n).collect();
    if names
        .iter()
        .map(|n| n.as_str())
        .ne(key.iter().map(String::as_str))
    {
        return Err(Error::at(
            ErrorCode::LookupKeyMismatch,
            index,
            format!("the index is over {names:?}, not {key:?}"),
        ));
    }
    check_fresh(cohort, key, &opened, &reader, false)?;
    let values = parse_values(&reader.header.key, values)?;
    let rows = reader
        .rows(&encode_key(&values))
        .map_err(|f| corrupt(index, f))?;
    let mut out = Vec::with_capacity(rows.len().min(1 << 10));
    // Distinct records never add up to more than the file: more is an
    // index whose rows overlap, refused before it is read many times over.
    let mut total = 0u64;
    for row in rows {
        let locator = reader.locator(row).map_err(|f| corrupt(index, f))?;
        total += u64::from(locator.len);
        if total > opened.cohort_stat.size {
            return Err(corrupt(
                index,
                Corrupt("the rows found lie over one another".into()),
            ));
        }
        let mut record = vec![0u8; locator.len as usize];
        opened
            .cohort
            .read_exact_at(&mut record, locator.offset)
            .map_err(|e| Error::io(cohort, &e))?;
        out.push(record);
    }
    Ok(out)
}

/// Checks an index against its cohort by hashing the cohort, always.
pub fn verify(cohort: &Path, key: &[String]) -> Result<()> {
    let opened = open_index(cohort, key)?;
    let reader = IndexReader::open(&opened.index, opened.index_len)
        .map_err(|f| corrupt(&opened.index_path, f))?;
    check_fresh(cohort, key, &opened, &reader, true)
}
