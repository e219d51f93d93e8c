//! Planning a sync: how each source file changed since the state a leaf
//! keeps, and the digests of what is taken.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Change, FileChange, SYNC_STATE_SCHEMA, SyncState, Taken};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordFormat;
use crate::store::compact::import::SourceFile;
use crate::warehouse::hex;

/// What a sync will do.
pub(super) struct Plan {
    pub(super) take: Vec<SourceFile>,
    /// The state after the sync, but for the `lines` of what is taken.
    pub(super) next: SyncState,
    pub(super) changes: Vec<FileChange>,
    /// `_file_` values whose rows go.
    pub(super) deleted: Vec<String>,
    pub(super) unchanged: u64,
    pub(super) torn: u64,
    pub(super) bytes: u64,
    /// The digests still to finish: each file's hasher, fed the bytes
    /// before `from`, and the bytes `from..end` still to feed it.
    pub(super) digests: Vec<Pending>,
}

/// A file's digest to finish.
pub(super) struct Pending {
    pub(super) rel: String,
    pub(super) path: std::path::PathBuf,
    pub(super) hasher: Sha256,
    pub(super) from: u64,
    pub(super) end: u64,
}

/// Compares the source files with `state`.
pub(super) fn plan(files: Vec<SourceFile>, state: &SyncState) -> Result<Plan> {
    let mut plan = Plan {
        take: Vec::new(),
        next: SyncState {
            schema: SYNC_STATE_SCHEMA,
            files: BTreeMap::new(),
        },
        changes: Vec::new(),
        deleted: Vec::new(),
        unchanged: 0,
        torn: 0,
        bytes: 0,
        digests: Vec::new(),
    };
    let present: std::collections::HashSet<String> = files.iter().map(|f| f.rel.clone()).collect();
    for (rel, _) in state
        .files
        .iter()
        .filter(|(rel, _)| !present.contains(*rel))
    {
        continue_gone(&mut plan, rel, true);
    }
    for mut file in files {
        let before = state.files.get(&file.rel);
        let meta = match fs::symlink_metadata(&file.path) {
            Ok(meta) if meta.is_file() => Some(meta),
            // Gone (or swapped for something else) since the scan.
            Ok(_) => continue_gone(&mut plan, &file.rel, before.is_some()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                continue_gone(&mut plan, &file.rel, before.is_some())
            }
            Err(e) => return Err(Error::io(&file.path, &e)),
        };
        let Some(meta) = meta else { continue };
        if let Some(before) = before.filter(|b| same_file(b, &meta)) {
            plan.unchanged += 1;
            plan.torn += u64::from(before.taken < before.size);
            plan.next.files.insert(file.rel.clone(), before.clone());
            continue;
        }
        let end = match file.format {
            RecordFormat::Json => meta.len(),
            _ => last_record_end(&file.path, meta.len())?,
        };
        plan.torn += u64::from(end < meta.len());
        // The bytes taken before still hash the same: the file only grew.
        let prefix = match before {
            Some(b) if b.taken <= end && file.format != RecordFormat::Json => {
                let hasher = hash_prefix(&file.path, b.taken)?;
                (hex(&hasher.clone().finalize()) == b.sha256).then_some((b, hasher))
            }
            _ => None,
        };
        let (change, from, first_line) = match (before, &prefix) {
            (_, Some((b, _))) => (Change::Grown, b.taken, b.lines),
            (Some(_), None) => (Change::Replaced, 0, 0),
            (None, _) => (Change::New, 0, 0),
        };
        let lines = prefix.as_ref().map_or(0, |(b, _)| b.lines);
        plan.digests.push(Pending {
            rel: file.rel.clone(),
            path: file.path.clone(),
            hasher: prefix.map_or_else(Sha256::new, |(_, hasher)| hasher),
            from,
            end,
        });
        plan.next.files.insert(
            file.rel.clone(),
            Taken {
                taken: end,
                sha256: String::new(),
                lines,
                size: meta.len(),
                mtime_ns: crate::warehouse::mtime_ns(&meta),
                ctime_ns: crate::warehouse::ctime_ns(&meta),
                ino: meta.ino(),
                dev: meta.dev(),
            },
        );
        if change == Change::Replaced {
            plan.deleted.push(file.rel.clone());
        }
        if end == from && change != Change::Replaced {
            // Nothing new to take (touched, or only a torn tail added).
            plan.unchanged += 1;
            continue;
        }
        plan.changes.push(FileChange {
            file: file.rel.clone(),
            change,
            from,
            to: end,
        });
        plan.bytes += end - from;
        file.start = from;
        file.end = Some(end);
        file.first_line = first_line;
        plan.take.push(file);
    }
    plan.changes.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(plan)
}

/// Notes the file `rel` as gone (its rows deleted) when the leaf took
/// some of it; gives no metadata to go on with.
fn continue_gone(plan: &mut Plan, rel: &str, taken: bool) -> Option<fs::Metadata> {
    if taken {
        plan.deleted.push(rel.to_string());
        plan.changes.push(FileChange {
            file: rel.to_string(),
            change: Change::Gone,
            from: 0,
            to: 0,
        });
    }
    None
}

/// Whether `meta` is the file `taken` was seen as (a write moves its size
/// or ctime, which no writer can set back).
fn same_file(taken: &Taken, meta: &fs::Metadata) -> bool {
    taken.size == meta.len()
        && taken.mtime_ns == crate::warehouse::mtime_ns(meta)
        && taken.ctime_ns == crate::warehouse::ctime_ns(meta)
        && taken.ino == meta.ino()
        && taken.dev == meta.dev()
}

/// Where the last complete record of a record file ends: after its last
/// newline or record separator (0 when there is none).
fn last_record_end(path: &Path, size: u64) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path).map_err(|e| Error::io(path, &e))?;
    let mut end = size;
    let mut buffer = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buffer.len() as u64);
        let chunk = &mut buffer[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(chunk))
            .map_err(|e| Error::io(path, &e))?;
        // A record ends at a newline, or at the record separator of a
        // packed shard (`\x1e` before and after each record).
        if let Some(at) = chunk.iter().rposition(|&b| b == b'\n' || b == 0x1E) {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// A hasher fed the first `upto` bytes of `path`.
fn hash_prefix(path: &Path, upto: u64) -> Result<Sha256> {
    let mut hasher = Sha256::new();
    feed(&mut hasher, path, 0, upto)?;
    Ok(hasher)
}

/// Feeds `hasher` the bytes `from..end` of `path`.
fn feed(hasher: &mut Sha256, path: &Path, from: u64, end: u64) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path).map_err(|e| Error::io(path, &e))?;
    file.seek(SeekFrom::Start(from))
        .map_err(|e| Error::io(path, &e))?;
    let mut reader = file.take(end.saturating_sub(from));
    let mut buffer = vec![0u8; 1 << 20];
    let mut done = from;
    loop {
        let n = reader.read(&mut buffer).map_err(|e| Error::io(path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        done += n as u64;
    }
    if done != end {
        return Err(Error::at(
            ErrorCode::ImportSource,
            path,
            "the file shrank while it was read; sync again",
        ));
    }
    Ok(())
}

/// Finishes every pending digest into `state` (on a thread of its own
/// while the rows are written).
pub(super) fn finish_digests(pending: Vec<Pending>, state: &mut SyncState) -> Result<()> {
    for mut p in pending {
        feed(&mut p.hasher, &p.path, p.from, p.end)?;
        if let Some(taken) = state.files.get_mut(&p.rel) {
            taken.sha256 = hex(&p.hasher.finalize());
        }
    }
    Ok(())
}
