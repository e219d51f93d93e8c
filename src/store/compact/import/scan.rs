//! Finding the record files of a source, for `import` and `sync` alike.
//!
//! A source is a record file or a directory walked recursively. The rules
//! both commands share:
//! - a SOURCE named through a symlink is read where the link points (the
//!   file, or the directory's tree); symlinks *inside* a tree are skipped,
//!   never followed;
//! - the destination leaf is never read as a source. It is recognised by
//!   identity (device and inode), not by name, so a DEST reached through a
//!   symlinked parent or a `..` is skipped as surely as one named plainly;
//!   a SOURCE that lies inside DEST is refused;
//! - pchronicle's own state directories are skipped.
//!
//! What the walk leaves out that a caller may have to answer for (a
//! directory it cannot list, a record-file name that is a symlink) comes
//! back in [`Scan::skipped`]: `import` turns an unreadable directory into
//! an error, `sync` into a warning.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::SourceFile;
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordFormat;

/// The record files of a source, and what the walk left out.
pub(in crate::store::compact) struct Scan {
    /// Sorted by relative path.
    pub(in crate::store::compact) files: Vec<SourceFile>,
    pub(in crate::store::compact) skipped: Vec<Skipped>,
}

/// An entry the walk left out.
pub(in crate::store::compact) struct Skipped {
    /// Relative to the source, as a `_file_` would be.
    pub(in crate::store::compact) rel: String,
    pub(in crate::store::compact) path: PathBuf,
    pub(in crate::store::compact) why: SkipReason,
}

/// Why an entry was left out.
pub(in crate::store::compact) enum SkipReason {
    /// A directory that could not be listed (permissions, mostly).
    Unreadable(io::Error),
    /// A symlink with a record file's name: not followed.
    Symlink,
}

/// A directory's identity.
type DirId = (u64, u64);

fn id_of(meta: &fs::Metadata) -> DirId {
    (meta.dev(), meta.ino())
}

/// Scans `source` for record files, leaving `dest` out; a directory
/// without record files gives none.
pub(in crate::store::compact) fn scan_sources(source: &Path, dest: &Path) -> Result<Scan> {
    let meta = fs::metadata(source).map_err(|e| Error::io(source, &e))?;
    let dest_id = fs::metadata(dest).ok().map(|m| id_of(&m));
    if let Some(dest_id) = dest_id {
        refuse_inside(source, dest, dest_id)?;
    }
    if meta.is_file() {
        let name = source
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let format = RecordFormat::from_name(name).ok_or_else(|| {
            Error::at(
                ErrorCode::ImportSource,
                source,
                "not a record file (.jsonl, .ndjson, .jsonseq or .json)",
            )
        })?;
        // A symlink is read where it points: the file itself is what sync
        // stats and reads, under the name SOURCE gives it.
        let path = fs::canonicalize(source).map_err(|e| Error::io(source, &e))?;
        return Ok(Scan {
            files: vec![SourceFile::whole(path, name.to_string(), format)],
            skipped: Vec::new(),
        });
    }
    let mut scan = Scan {
        files: Vec::new(),
        skipped: Vec::new(),
    };
    let mut stack = vec![(source.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        if let Some(dest_id) = dest_id {
            if fs::metadata(&dir).is_ok_and(|m| id_of(&m) == dest_id) {
                continue;
            }
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            // The source itself must be listable; a directory below it
            // that is not is left out and said so.
            Err(e) if !rel.is_empty() => {
                scan.skipped.push(Skipped {
                    rel,
                    path: dir,
                    why: SkipReason::Unreadable(e),
                });
                continue;
            }
            Err(e) => return Err(Error::io(&dir, &e)),
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    scan.skipped.push(Skipped {
                        rel: rel.clone(),
                        path: dir.clone(),
                        why: SkipReason::Unreadable(e),
                    });
                    break;
                }
            };
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if kind.is_dir() && name != crate::warehouse::STATE_DIR {
                stack.push((entry.path(), child_rel));
            } else if let Some(format) = RecordFormat::from_name(&name) {
                if kind.is_file() {
                    scan.files
                        .push(SourceFile::whole(entry.path(), child_rel, format));
                } else if kind.is_symlink() {
                    scan.skipped.push(Skipped {
                        rel: child_rel,
                        path: entry.path(),
                        why: SkipReason::Symlink,
                    });
                }
            }
        }
    }
    scan.files.sort_by(|a, b| a.rel.cmp(&b.rel));
    scan.skipped.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(scan)
}

/// Refuses a `source` that is `dest` or lies inside it, by the identity
/// of each directory on the source's real path.
fn refuse_inside(source: &Path, dest: &Path, dest_id: DirId) -> Result<()> {
    let real = fs::canonicalize(source).map_err(|e| Error::io(source, &e))?;
    for dir in real.ancestors() {
        if fs::metadata(dir).is_ok_and(|m| id_of(&m) == dest_id) {
            return Err(Error::at(
                ErrorCode::ImportSource,
                source,
                format!(
                    "the source lies inside the destination leaf {}; a leaf is \
                     never read as its own source",
                    dest.display()
                ),
            ));
        }
    }
    Ok(())
}
