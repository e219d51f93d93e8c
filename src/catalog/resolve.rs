//! Path resolution: from a path relative to the root to an open directory
//! (and a file name in it), one component at a time.
//!
//! Every component is stat'ed relative to the directory before it and
//! never followed when it is a symlink; `..`, absolute paths, the state
//! directory, other filesystems and the interior of a leaf are refused.
//! Directories resolved through recently are kept open (a bounded LRU of
//! handles), so resolving below them again costs an `fstatat`, not an open.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;

use super::{Catalog, STATE_DIR};
use crate::error::{Error, ErrorCode, Result};
use crate::warehouse::{self, Dir, Stat};

/// A path inside the warehouse, resolved without following symlinks.
pub(super) struct Target {
    pub(super) meta: Stat,
    /// A directory target: the directory itself, open. A file: the open
    /// directory holding it.
    pub(super) dir: Dir,
    /// A file target's name in `dir`.
    pub(super) name: Option<OsString>,
}

impl Catalog {
    /// Resolves `rel` below the root, one open directory at a time and
    /// never through a symlink, refusing `..`, absolute paths,
    /// `.pchronicle/`, other filesystems and the interior of a leaf.
    pub(super) fn resolve(&self, rel: &Path) -> Result<Target> {
        let names = warehouse::components(rel).map_err(|_| {
            Error::at(
                ErrorCode::PathInvalid,
                rel,
                "the path must stay inside the warehouse",
            )
        })?;
        let not_found = |message: &str| Error::at(ErrorCode::PathNotFound, rel, message);
        // The root's stat is taken afresh so that the caches see it current.
        let mut dir = self
            .root_dir
            .refreshed()
            .map_err(|e| Error::io(&self.root, &e))?;
        for (i, name) in names.iter().enumerate() {
            if self
                .dir_node(&dir)
                .map_err(|e| Error::io(rel, &e))?
                .leaf
                .is_some()
            {
                return Err(not_found(
                    "the path is inside a dataset leaf, whose interior is not listed",
                ));
            }
            if *name == STATE_DIR {
                return Err(not_found("pchronicle's own state directory is hidden"));
            }
            let meta = dir.stat_at(name).map_err(|e| Error::io(rel, &e))?;
            if meta.is_symlink() {
                return Err(not_found("the path is a symlink, and symlinks are ignored"));
            }
            let last = i + 1 == names.len();
            if meta.is_dir() {
                dir = self
                    .enter(&dir, name, &meta)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::EXDEV) => not_found(
                            "the path is on another filesystem mounted inside the warehouse",
                        ),
                        Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                            not_found("the path changed into a symlink or a file")
                        }
                        _ => Error::io(rel, &e),
                    })?;
            } else if !last {
                return Err(not_found("a component of the path is not a directory"));
            } else if meta.is_file() {
                return Ok(Target {
                    meta,
                    dir,
                    name: Some(name.to_os_string()),
                });
            } else {
                return Err(not_found("not a regular file or directory"));
            }
        }
        Ok(Target {
            meta: *dir.stat(),
            dir,
            name: None,
        })
    }

    /// The subdirectory `name` of `dir`, just seen as `meta`: from the
    /// handles kept while it is the same directory, else opened (and kept).
    fn enter(&self, dir: &Dir, name: &OsStr, meta: &Stat) -> io::Result<Dir> {
        let key = dir.path().join(name);
        let known = self
            .handles
            .lock()
            .get(&key)
            .and_then(|d| d.try_clone().ok());
        let entered = dir.open_dir_seen(name, meta, known.as_ref())?;
        let reused = known.is_some_and(|k| k.stat().same_file(entered.stat()));
        if !reused {
            if let Ok(kept) = entered.try_clone() {
                self.handles.lock().put(key, kept);
            }
        }
        Ok(entered)
    }
}
