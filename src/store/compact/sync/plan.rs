//! Planning a sync: how each source file changed since the state a leaf
//! keeps. A file is trusted unchanged by its stat identity; one whose
//! identity moved is read, but only once its last change is older than a
//! timestamp tick (the plan waits for that), so that no identity a sync
//! records can hide a later change. A file to take leaves here with a
//! hasher fed the bytes taken before, which the row reader feeds the rest
//! (so a digest is always of the bytes the rows were made from). A file
//! that cannot be read is a warning, and keeps what the leaf took of it.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Change, FileChange, SYNC_STATE_SCHEMA, SyncState, SyncWarning, Taken};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordFormat;
use crate::store::compact::import::{Scan, SkipReason, SourceFile};
use crate::warehouse::hex;

/// What a sync will do.
pub(super) struct Plan {
    /// The files to read, each with its hasher (fed the bytes taken
    /// before) to be fed the bytes its rows are made from.
    pub(super) take: Vec<SourceFile>,
    /// The state after the sync, but for the `lines` and digests of what
    /// is taken.
    pub(super) next: SyncState,
    pub(super) changes: Vec<FileChange>,
    /// `_file_` values whose rows go.
    pub(super) deleted: Vec<String>,
    pub(super) unchanged: u64,
    pub(super) torn: u64,
    pub(super) bytes: u64,
    pub(super) warnings: Vec<SyncWarning>,
}

/// How long after a change a file's stat identity cannot be trusted when
/// its times are whole seconds: a second write within the filesystem's
/// timestamp tick can leave size, mtime and ctime as they were (git's
/// "racily clean" case). Two seconds covers FAT's mtime, the coarsest in
/// use (ext4 with small inodes, many NFS and SMB servers tick in seconds).
const COARSE_WINDOW_NS: i64 = 2_000_000_000;
/// The same for times with a fraction of a second: the kernel stamps them
/// from a clock that moves once per scheduler tick, 1 to 10 ms.
const FINE_WINDOW_NS: i64 = 20_000_000;

/// Compares the scanned source files with `state`. With `settle`, files to
/// be read are read only once their last change is a timestamp tick old
/// (waiting up to two seconds for it), so the state this plan makes holds
/// no identity a later same-tick write could keep; a dry run need not.
pub(super) fn plan(scan: Scan, state: &SyncState, settle: bool) -> Result<Plan> {
    let mut plan = Plan {
        take: Vec::new(),
        next: SyncState {
            schema: SYNC_STATE_SCHEMA,
            taken_at_ns: 0,
            files: BTreeMap::new(),
        },
        changes: Vec::new(),
        deleted: Vec::new(),
        unchanged: 0,
        torn: 0,
        bytes: 0,
        warnings: Vec::new(),
    };
    let Scan { files, skipped } = scan;
    let mut unlisted: Vec<&str> = Vec::new();
    let mut symlinks: HashSet<&str> = HashSet::new();
    for entry in &skipped {
        match &entry.why {
            SkipReason::Unreadable(e) => {
                unlisted.push(&entry.rel);
                plan.warnings.push(SyncWarning {
                    file: entry.rel.clone(),
                    code: ErrorCode::Io,
                    message: format!(
                        "the directory cannot be listed ({e}); the rows of its files \
                         are kept as the last sync took them"
                    ),
                });
            }
            SkipReason::Symlink => {
                symlinks.insert(&entry.rel);
            }
        }
    }
    let present: HashSet<&str> = files.iter().map(|f| f.rel.as_str()).collect();
    for (rel, before) in &state.files {
        if present.contains(rel.as_str()) {
            continue;
        }
        let in_unlisted = unlisted
            .iter()
            .any(|dir| rel.strip_prefix(dir).is_some_and(|r| r.starts_with('/')));
        if in_unlisted {
            // Not gone: out of sight. Its rows stay until it can be read.
            plan.next.files.insert(rel.clone(), before.clone());
        } else {
            gone(&mut plan, rel, symlinks.contains(rel.as_str()));
        }
    }
    let mut to_read = Vec::new();
    for file in files {
        let before = state.files.get(&file.rel);
        if let Some(meta) = look(&mut plan, &file, before, state.taken_at_ns) {
            to_read.push((file, meta));
        }
    }
    let settled = to_read
        .iter()
        .map(|(_, meta)| {
            let (mtime, ctime) = times(meta);
            mtime.max(ctime).saturating_add(window(mtime, ctime))
        })
        .max();
    if let Some(settled) = settled.filter(|_| settle) {
        let wait = settled.saturating_sub(now_ns()).clamp(0, COARSE_WINDOW_NS);
        std::thread::sleep(std::time::Duration::from_nanos(wait as u64));
    }
    // Before any file is read: no identity recorded is younger than a
    // tick at this moment, unless its times lie in the future.
    plan.next.taken_at_ns = now_ns();
    for (file, meta) in to_read {
        let before = state.files.get(&file.rel);
        read_file(&mut plan, file, &meta, before)?;
    }
    plan.changes.sort_by(|a, b| a.file.cmp(&b.file));
    plan.warnings.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(plan)
}

/// Looks at one present file without reading it: unchanged (trusted by
/// its identity), gone or swapped for something else since the scan, or
/// unreadable are planned here; a file to read gives its stat.
fn look(
    plan: &mut Plan,
    file: &SourceFile,
    before: Option<&Taken>,
    state_taken_at_ns: i64,
) -> Option<fs::Metadata> {
    let meta = match fs::symlink_metadata(&file.path) {
        Ok(meta) if meta.is_file() => meta,
        Ok(meta) => {
            if before.is_some() {
                gone(plan, &file.rel, meta.is_symlink());
            }
            return None;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if before.is_some() {
                gone(plan, &file.rel, false);
            }
            return None;
        }
        Err(e) => {
            unreadable(plan, &file.rel, before, &e);
            return None;
        }
    };
    let trusted = before.filter(|b| same_file(b, &meta) && !racy(b, state_taken_at_ns));
    if let Some(before) = trusted {
        plan.unchanged += 1;
        plan.torn += u64::from(before.taken < before.size);
        plan.next.files.insert(file.rel.clone(), before.clone());
        return None;
    }
    Some(meta)
}

/// Plans a file whose identity moved (or was never seen): new, grown,
/// replaced, only touched, gone since, or unreadable. `meta` is its stat
/// from before the plan waited, which is the identity recorded: a write
/// after it moves it, or lands before the read and is read.
fn read_file(
    plan: &mut Plan,
    mut file: SourceFile,
    meta: &fs::Metadata,
    before: Option<&Taken>,
) -> Result<()> {
    let mut opened = match File::open(&file.path) {
        Ok(opened) => opened,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if before.is_some() {
                gone(plan, &file.rel, false);
            }
            return Ok(());
        }
        Err(e) => {
            unreadable(plan, &file.rel, before, &e);
            return Ok(());
        }
    };
    let end = match file.format {
        RecordFormat::Json => meta.len(),
        _ => last_record_end(&mut opened, &file.path, meta.len())?,
    };
    plan.torn += u64::from(end < meta.len());
    // The bytes taken before still hash the same: the file only grew (a
    // JSON document is one record: it is the same, or it is replaced).
    let prefix = match before {
        Some(b) if b.taken <= end && (file.format != RecordFormat::Json || b.taken == end) => {
            let hasher = hash_prefix(&mut opened, &file.path, b.taken)?;
            (hex(&hasher.clone().finalize()) == b.sha256).then_some((b, hasher))
        }
        _ => None,
    };
    let (change, from, first_line) = match (before, &prefix) {
        (_, Some((b, _))) => (Change::Grown, b.taken, b.lines),
        (Some(_), None) => (Change::Replaced, 0, 0),
        (None, _) => (Change::New, 0, 0),
    };
    let hasher = prefix.map_or_else(Sha256::new, |(_, hasher)| hasher);
    let mut taken = Taken {
        taken: end,
        sha256: String::new(),
        lines: first_line,
        size: meta.len(),
        mtime_ns: crate::warehouse::mtime_ns(meta),
        ctime_ns: crate::warehouse::ctime_ns(meta),
        ino: meta.ino(),
        dev: meta.dev(),
    };
    if change == Change::Replaced {
        plan.deleted.push(file.rel.clone());
    }
    if end == from && change != Change::Replaced {
        // Nothing new to take (touched, re-read while racy, or only a
        // torn tail added): the digest is of the bytes already taken.
        taken.sha256 = hex(&hasher.finalize());
        plan.unchanged += 1;
        plan.next.files.insert(file.rel.clone(), taken);
        return Ok(());
    }
    plan.next.files.insert(file.rel.clone(), taken);
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
    file.digest = Some(hasher);
    plan.take.push(file);
    Ok(())
}

/// Notes the file `rel`, which the leaf took, as gone: its rows are
/// deleted. A file that became a symlink is gone too (symlinks inside a
/// source are not followed), and said so.
fn gone(plan: &mut Plan, rel: &str, now_symlink: bool) {
    plan.deleted.push(rel.to_string());
    plan.changes.push(FileChange {
        file: rel.to_string(),
        change: Change::Gone,
        from: 0,
        to: 0,
    });
    if now_symlink {
        plan.warnings.push(SyncWarning {
            file: rel.to_string(),
            code: ErrorCode::PathNotFound,
            message: "the file is now a symlink, which sync does not follow; its rows were deleted"
                .to_string(),
        });
    }
}

/// Notes a file that cannot be read: the rows the leaf took of it stay as
/// they are (it is not gone, only out of reach), and a new one waits.
fn unreadable(plan: &mut Plan, rel: &str, before: Option<&Taken>, error: &io::Error) {
    let kept = match before {
        Some(before) => {
            plan.next.files.insert(rel.to_string(), before.clone());
            "the rows taken of it before are kept as they are"
        }
        None => "it is taken once it can be read",
    };
    plan.warnings.push(SyncWarning {
        file: rel.to_string(),
        code: ErrorCode::RecordFileUnreadable,
        message: format!("the file cannot be read ({error}); {kept}"),
    });
}

/// Whether `taken`'s identity was read too soon after a change to rule out
/// a second change within the same timestamp tick: `state_taken_at_ns` is
/// when the sync that recorded it started reading. A settled plan never
/// records such an identity but for times in the future (a clock set
/// back, a file server's clock ahead). A state from before the time was
/// kept (0) is trusted as it was then: hashing its files at every sync
/// would cost more than the case it guards against.
fn racy(taken: &Taken, state_taken_at_ns: i64) -> bool {
    let last = taken.mtime_ns.max(taken.ctime_ns);
    state_taken_at_ns != 0
        && state_taken_at_ns.saturating_sub(last) < window(taken.mtime_ns, taken.ctime_ns)
}

/// The racy window of an identity with these times.
fn window(mtime_ns: i64, ctime_ns: i64) -> i64 {
    const SECOND: i64 = 1_000_000_000;
    if mtime_ns.rem_euclid(SECOND) == 0 && ctime_ns.rem_euclid(SECOND) == 0 {
        COARSE_WINDOW_NS
    } else {
        FINE_WINDOW_NS
    }
}

/// `meta`'s modification and change times, in ns.
fn times(meta: &fs::Metadata) -> (i64, i64) {
    (
        crate::warehouse::mtime_ns(meta),
        crate::warehouse::ctime_ns(meta),
    )
}

/// The wall clock, in ns since the epoch.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Whether `meta` is the file `taken` was seen as (a write moves its size
/// or ctime, which no writer can set back, unless it falls in the same
/// timestamp tick: see [`racy`]).
fn same_file(taken: &Taken, meta: &fs::Metadata) -> bool {
    taken.size == meta.len()
        && taken.mtime_ns == crate::warehouse::mtime_ns(meta)
        && taken.ctime_ns == crate::warehouse::ctime_ns(meta)
        && taken.ino == meta.ino()
        && taken.dev == meta.dev()
}

/// Where the last complete record of a record file ends: after its last
/// newline or record separator (0 when there is none).
fn last_record_end(file: &mut File, path: &Path, size: u64) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
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

/// A hasher fed the first `upto` bytes of `file`.
fn hash_prefix(file: &mut File, path: &Path, upto: u64) -> Result<Sha256> {
    use std::io::{Seek, SeekFrom};
    let mut hasher = Sha256::new();
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(path, &e))?;
    let mut reader = file.take(upto);
    let mut buffer = vec![0u8; 1 << 20];
    let mut done = 0;
    loop {
        let n = reader.read(&mut buffer).map_err(|e| Error::io(path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        done += n as u64;
    }
    if done != upto {
        return Err(Error::at(
            ErrorCode::ImportSource,
            path,
            "the file shrank while it was read; sync again",
        ));
    }
    Ok(hasher)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(mtime_ns: i64, ctime_ns: i64) -> Taken {
        Taken {
            taken: 0,
            sha256: String::new(),
            lines: 0,
            size: 0,
            mtime_ns,
            ctime_ns,
            ino: 1,
            dev: 1,
        }
    }

    #[test]
    fn an_identity_is_racy_within_its_window_before_the_read() {
        let read = 100 * COARSE_WINDOW_NS;
        // Whole seconds: a coarse filesystem.
        let second = 1_000_000_000;
        assert!(racy(&seen(read - second, read - second), read));
        assert!(racy(&seen(read + second, 0), read), "changed after");
        assert!(!racy(&seen(read - 2 * second, read - 2 * second), read));
        // With fractions: a tick of the kernel's clock.
        assert!(racy(&seen(read - 1, read - 7), read));
        assert!(!racy(
            &seen(read - FINE_WINDOW_NS, read - 7 - FINE_WINDOW_NS),
            read
        ));
        assert!(
            !racy(&seen(read - 1, read - 1), 0),
            "a state from before the time was kept is trusted"
        );
    }
}
