//! The one way into a warehouse: every read and write below the root goes
//! through a [`Dir`], an open directory of the warehouse.
//!
//! The daemon usually runs as root over a tree that others write, so every
//! name, link and file type below the root is hostile. The rules, kept here
//! so that no other module has to get them right:
//! - Nothing below the root is ever followed when it is a symlink. A path
//!   of several components is resolved relative to an open directory with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV)`, or, where the kernel lacks `openat2`, one
//!   `openat(O_NOFOLLOW)` per component. A path string is never resolved
//!   twice, so swapping a directory for a symlink between a check and an
//!   open changes nothing: the open fails or finds the new directory's own
//!   entries, never a file elsewhere.
//! - Only regular files and directories are opened, always with
//!   `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC` and checked with
//!   `fstat` afterwards, so a FIFO or a device neither blocks nor is read.
//! - A walk stays on the root's filesystem: a directory on another device
//!   (a mount point below the root) is refused with `EXDEV`.
//! - Metadata files are read with a size cap ([`Dir::read_capped`]).
//! - Writes are a temp file created next to the target with `O_EXCL`, then
//!   `renameat` in the same open directory ([`Dir::replace`]); a target that
//!   is not a regular file, or whose identity moved since the caller read
//!   it, is never replaced.
//!
//! [`Stat`] is `fstatat`'s answer as plain data, so the catalog can stat a
//! child relative to a directory it holds open without building a path.
//! The methods of [`Dir`] (stat a name, open a directory or a file, list,
//! read capped, replace) are the whole surface a warehouse needs; a remote
//! backend answers the same questions. They are grouped by what they do:
//! [`open`] resolves names and opens directories and files, [`read`] reads
//! metadata files under a cap, [`list`] lists a directory, [`write`]
//! creates, replaces and removes, [`viewer`] checks every operation
//! against another user's permissions, and [`state`] finds where
//! pchronicle keeps its own state.
//!
//! Every system call goes through rustix, errors included (as
//! `rustix::io::Errno`): this module holds no `unsafe` code.

pub mod blob;
pub mod list;
pub mod names;
mod notify;
pub mod open;
pub mod read;
#[cfg(feature = "remote")]
mod remote_dir;
pub mod stat;
pub mod state;
pub mod viewer;
pub mod write;

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};

pub use blob::{Blob, BlobReader, OwnedBlobReader};
pub use list::{DirEntry, Entries};
pub use names::Names;
pub use read::{
    COUNT_CACHE_CAP, CappedError, INDEX_MANIFEST_CAP, MANIFEST_CAP, POINTER_CAP, read_all_capped,
};
pub use stat::{Stat, ctime_ns, mtime_ns};
pub use state::{STATE_DIR, STATE_GITIGNORE, StateDir, open_state, state_dir, user_state_dir};
pub use viewer::Viewer;
pub use write::Replace;
pub(crate) use write::temp_name;

/// An open directory of a warehouse, with the path it is shown as.
#[derive(Debug)]
pub struct Dir {
    /// What the directory is read through. Shared by the handles of one
    /// open directory: a clone costs no system call.
    backend: Backend,
    path: PathBuf,
    stat: Stat,
    /// When set, everything done through this directory (and the
    /// directories opened from it) is checked as this viewer.
    viewer: Option<std::sync::Arc<Viewer>>,
}

/// Where a directory's entries are read from.
#[derive(Debug, Clone)]
enum Backend {
    /// A local directory, open.
    Local(std::sync::Arc<OwnedFd>),
    /// A prefix of a bucket (see [`crate::remote`]).
    #[cfg(feature = "remote")]
    Remote(remote_dir::RemoteDir),
}

/// Flags of every open of a warehouse entry.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

fn dir_flags() -> OFlags {
    read_flags() | OFlags::DIRECTORY
}

/// Bytes as lowercase hex digits (names and records derived from
/// digests and random tokens).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `path` names a remote warehouse (`s3://…`), whether or not this
/// build can read one. A local directory called `s3:` is reached as
/// `./s3:/…`.
pub fn is_remote_path(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().starts_with(b"s3://")
}

/// A single path component that names an entry of a directory: not empty,
/// no `/`, not `.` or `..`, no NUL.
pub fn is_plain_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

fn check_name(name: &OsStr) -> io::Result<()> {
    if is_plain_name(name.as_bytes()) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a single path component"),
        ))
    }
}

/// Why an entry was refused for what it is (a symlink, a FIFO, a socket, a
/// device), carried through `io::Error` so that
/// [`Error::io`](crate::error::Error::io) gives it its own code,
/// `PCHRONICLE_NOT_REGULAR_FILE`, wherever it surfaces.
#[derive(Debug, thiserror::Error)]
#[error("not a regular file (only regular files and directories are read)")]
pub struct NotRegular;

fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, NotRegular)
}

/// True when `err` refused an entry for its type (see [`NotRegular`]).
pub fn is_not_regular(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|e| e.is::<NotRegular>())
}

impl Dir {
    /// Opens a warehouse root, named from outside (a command line, a mount
    /// table): the root itself may be reached through symlinks, nothing
    /// below it will be.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        #[cfg(feature = "remote")]
        if crate::remote::is_remote(path) {
            return remote_dir::RemoteDir::open_root(path);
        }
        let path = std::fs::canonicalize(path)?;
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        let stat = Stat::of(&fd)?;
        Ok(Dir {
            backend: Backend::Local(fd.into()),
            path,
            stat,
            viewer: None,
        })
    }

    /// Opens the directory holding `path` (a path named from outside), and
    /// gives the name of `path` in it.
    pub fn open_parent_of(path: &Path) -> io::Result<(Dir, String)> {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| is_plain_name(n.as_bytes()))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a UTF-8 file name"))?;
        Ok((Dir::open_root(parent)?, name.to_string()))
    }

    /// The path this directory is shown as (for messages, cache keys and
    /// Lance, which opens by path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's own stat, as of when it was opened.
    pub fn stat(&self) -> &Stat {
        &self.stat
    }

    /// The directory's stat now.
    pub fn restat(&self) -> io::Result<Stat> {
        match &self.backend {
            Backend::Local(fd) => Stat::of(fd),
            #[cfg(feature = "remote")]
            Backend::Remote(remote) => remote.restat(),
        }
    }

    /// This directory opened again, with its stat as of now.
    pub fn reopen(&self) -> io::Result<Dir> {
        let backend = match &self.backend {
            Backend::Local(fd) => {
                Backend::Local(rustix::fs::openat(fd, c".", dir_flags(), Mode::empty())?.into())
            }
            #[cfg(feature = "remote")]
            remote => remote.clone(),
        };
        let stat = match &backend {
            Backend::Local(fd) => Stat::of(fd)?,
            #[cfg(feature = "remote")]
            Backend::Remote(remote) => remote.restat()?,
        };
        Ok(Dir {
            backend,
            path: self.path.clone(),
            stat,
            viewer: self.viewer.clone(),
        })
    }

    /// Another handle on the same open directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            backend: self.backend.clone(),
            path: self.path.clone(),
            stat: self.stat,
            viewer: self.viewer.clone(),
        })
    }

    /// Another handle on the same open directory, with its stat as of now
    /// (one `fstat`).
    pub fn refreshed(&self) -> io::Result<Dir> {
        Ok(Dir {
            backend: self.backend.clone(),
            path: self.path.clone(),
            stat: self.restat()?,
            viewer: self.viewer.clone(),
        })
    }

    /// Whether the directory is a prefix of a bucket rather than a local
    /// directory.
    pub fn is_remote(&self) -> bool {
        !matches!(self.backend, Backend::Local(_))
    }

    /// The open local directory, for what only a descriptor can do: a
    /// remote directory answers that it is read only.
    fn fd(&self) -> io::Result<&OwnedFd> {
        match &self.backend {
            Backend::Local(fd) => Ok(fd),
            #[cfg(feature = "remote")]
            Backend::Remote(_) => Err(crate::error::RemoteFailure::ReadOnly.into_io()),
        }
    }
}

#[cfg(not(feature = "remote"))]
impl Dir {
    /// Nothing to do for a local directory (see the remote one).
    pub fn prefetch_children(&self, _names: &Names, _markers: &[&str]) {}

    /// Nothing to do for a local directory (see the remote one).
    pub fn forget_remote(&self) {}

    /// Nothing to hold for a local directory (see the remote one).
    pub fn hold_listings(&self) -> Option<()> {
        None
    }
}

/// The names of a relative path, refusing `..`, a root and prefixes.
pub fn components(rel: &Path) -> io::Result<Vec<&OsStr>> {
    let mut names = Vec::new();
    for component in rel.components() {
        match component {
            Component::CurDir => {}
            Component::Normal(name) => names.push(name),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the path must stay inside the warehouse",
                ));
            }
        }
    }
    Ok(names)
}

/// A warehouse root in a new temporary directory, for unit tests.
#[cfg(test)]
pub(crate) fn temp_root() -> (tempfile::TempDir, Dir) {
    let dir = tempfile::tempdir().unwrap();
    let root = Dir::open_root(dir.path()).unwrap();
    (dir, root)
}
