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
//! backend answers the same questions.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

/// The directory where pchronicle keeps its own state inside a warehouse.
pub const STATE_DIR: &str = ".pchronicle";

/// The most bytes read from a `chronicle.manifest`.
pub const MANIFEST_CAP: u64 = 1 << 20;
/// The most bytes read from a storyline `CURRENT` pointer.
pub const POINTER_CAP: u64 = 4 << 10;
/// The most bytes read from a sidecar `indexes.json`.
pub const INDEX_MANIFEST_CAP: u64 = 16 << 20;
/// The most bytes read from the persisted count cache.
pub const COUNT_CACHE_CAP: u64 = 512 << 20;

/// A temp file left by a crashed writer is removed by the next write of
/// the same target once it is this old (a live writer never takes so long
/// between creating and renaming it).
const STALE_TEMP_SECS: i64 = 60;

/// `stat(2)` of one file or directory, never of a symlink's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blksize: u64,
    pub blocks: u64,
    pub atime: i64,
    pub atime_nsec: i64,
    pub mtime: i64,
    pub mtime_nsec: i64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

impl From<rustix::fs::Stat> for Stat {
    // The kernel's field widths differ between architectures; every value
    // fits the widened types (sizes and counts are never negative).
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from(s: rustix::fs::Stat) -> Stat {
        Stat {
            dev: s.st_dev as u64,
            ino: s.st_ino as u64,
            mode: s.st_mode as u32,
            nlink: s.st_nlink as u64,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            size: u64::try_from(s.st_size).unwrap_or(0),
            blksize: u64::try_from(s.st_blksize).unwrap_or(0),
            blocks: u64::try_from(s.st_blocks).unwrap_or(0),
            atime: s.st_atime as i64,
            atime_nsec: s.st_atime_nsec as i64,
            mtime: s.st_mtime as i64,
            mtime_nsec: s.st_mtime_nsec as i64,
            ctime: s.st_ctime as i64,
            ctime_nsec: s.st_ctime_nsec as i64,
        }
    }
}

impl Stat {
    /// The stat of an open file.
    pub fn of(fd: impl AsFd) -> io::Result<Stat> {
        Ok(rustix::fs::fstat(fd)?.into())
    }

    fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode as _)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    pub fn len(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The permission bits (and set-id and sticky bits).
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// Whether two stats are of the same file.
    pub fn same_file(&self, other: &Stat) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// Why a size-capped read gave nothing.
#[derive(Debug)]
pub enum CappedError {
    /// The file is larger than the cap; nothing was kept.
    TooLarge {
        cap: u64,
    },
    /// Not a regular file (a FIFO, a device, a directory, a symlink).
    NotRegular,
    Io(io::Error),
}

impl std::fmt::Display for CappedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CappedError::TooLarge { cap } => write!(f, "larger than the {cap}-byte limit"),
            CappedError::NotRegular => f.write_str("not a regular file"),
            CappedError::Io(e) => e.fmt(f),
        }
    }
}

impl CappedError {
    /// This failure as a coded error about the metadata file `path` (`what`
    /// it is, for the message): past the cap it is
    /// `PCHRONICLE_METADATA_TOO_LARGE`; anything else is for `other` to say.
    pub fn into_error(
        self,
        path: &Path,
        what: &str,
        other: impl FnOnce(CappedError) -> crate::error::Error,
    ) -> crate::error::Error {
        match self {
            CappedError::TooLarge { cap } => crate::error::Error::at(
                crate::error::ErrorCode::MetadataTooLarge,
                path,
                format!("larger than the {cap}-byte limit for {what}"),
            ),
            other_error => other(other_error),
        }
    }
}

/// One entry of a directory listing, typed from `getdents` (no stat):
/// always a directory or a regular file.
#[derive(Debug)]
pub struct DirEntry {
    /// The raw name; not necessarily UTF-8.
    pub name: Vec<u8>,
    pub is_dir: bool,
    pub is_file: bool,
}

/// How [`Dir::replace`] treats the file it replaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct Replace {
    /// fsync the content and the directory (a manifest); hints skip both.
    pub durable: bool,
    /// Mode of the new file.
    pub mode: u32,
    /// Give the new file the replaced file's owner and mode instead (a
    /// manifest someone else owns stays theirs).
    pub keep_owner: bool,
    /// Remove temp files of this name that a crash left (lists the
    /// directory: for files written rarely, in small directories).
    pub sweep_temps: bool,
    /// Replace only while the current file is this one (`dev`, `ino`);
    /// `Some(None)`: only while there is no file of that name.
    pub expect: Option<Option<(u64, u64)>>,
}

/// Whose view a [`Dir`] gives: the credentials of a user other than the
/// one running pchronicle (a reader of a mount with `--allow-other`).
/// Every operation is checked against the permission bits as the kernel
/// would check them for that user (owner, then group, then others; search
/// on a directory to reach its entries, read to list it or read a file),
/// so a walk made for the viewer sees what the viewer could see natively.
/// ACLs and capabilities are not considered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Viewer {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, sorted.
    pub groups: Vec<u32>,
}

/// What an access needs.
#[derive(Debug, Clone, Copy)]
enum Access {
    Read = 4,
    Write = 2,
    Search = 1,
}

impl Viewer {
    /// Whether the viewer may access a file with this stat.
    fn may(&self, stat: &Stat, access: Access) -> bool {
        if self.uid == 0 {
            // Root reads and searches everything; it executes only what
            // someone may execute, which pchronicle never asks.
            return true;
        }
        let bits = if stat.uid == self.uid {
            stat.mode >> 6
        } else if stat.gid == self.gid || self.groups.binary_search(&stat.gid).is_ok() {
            stat.mode >> 3
        } else {
            stat.mode
        };
        bits & access as u32 != 0
    }
}

fn denied() -> io::Error {
    io::Error::from_raw_os_error(libc::EACCES)
}

/// An open directory of a warehouse, with the path it is shown as.
#[derive(Debug)]
pub struct Dir {
    /// Shared by the handles of one open directory: a clone costs no
    /// system call.
    fd: std::sync::Arc<OwnedFd>,
    path: PathBuf,
    stat: Stat,
    /// When set, everything done through this directory (and the
    /// directories opened from it) is checked as this viewer.
    viewer: Option<std::sync::Arc<Viewer>>,
}

/// Flags of every open of a warehouse entry.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

fn dir_flags() -> OFlags {
    read_flags() | OFlags::DIRECTORY
}

/// Whether `openat2` is missing from this kernel (learned once).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

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

fn not_regular() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (only regular files and directories are read)",
    )
}

impl Dir {
    /// Opens a warehouse root, named from outside (a command line, a mount
    /// table): the root itself may be reached through symlinks, nothing
    /// below it will be.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let path = std::fs::canonicalize(path)?;
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        let stat = Stat::of(&fd)?;
        Ok(Dir {
            fd: fd.into(),
            path,
            stat,
            viewer: None,
        })
    }

    /// This directory as `viewer` sees it (`None`: as pchronicle's own
    /// user). The viewer must be able to read it, as opening it would
    /// need.
    pub fn viewed_by(mut self, viewer: Option<std::sync::Arc<Viewer>>) -> io::Result<Dir> {
        self.viewer = viewer;
        self.check(&self.stat, Access::Read)?;
        Ok(self)
    }

    fn check(&self, stat: &Stat, access: Access) -> io::Result<()> {
        match &self.viewer {
            Some(viewer) if !viewer.may(stat, access) => Err(denied()),
            _ => Ok(()),
        }
    }

    /// Whether this directory is seen as another user (a [`Viewer`]).
    pub fn is_viewed(&self) -> bool {
        self.viewer.is_some()
    }

    /// Whether this directory's viewer may read the file `stat` (always,
    /// without a viewer), as `EACCES`.
    pub fn check_readable(&self, stat: &Stat) -> io::Result<()> {
        self.check_search()?;
        self.check(stat, Access::Read)
    }

    /// The viewer may reach this directory's entries.
    fn check_search(&self) -> io::Result<()> {
        self.check(&self.stat, Access::Search)
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
        Stat::of(&self.fd)
    }

    /// This directory opened again, with its stat as of now.
    pub fn reopen(&self) -> io::Result<Dir> {
        let fd = rustix::fs::openat(&self.fd, c".", dir_flags(), Mode::empty())?;
        let stat = Stat::of(&fd)?;
        Ok(Dir {
            fd: fd.into(),
            path: self.path.clone(),
            stat,
            viewer: self.viewer.clone(),
        })
    }

    /// Another handle on the same open directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: std::sync::Arc::clone(&self.fd),
            path: self.path.clone(),
            stat: self.stat,
            viewer: self.viewer.clone(),
        })
    }

    /// Another handle on the same open directory, with its stat as of now
    /// (one `fstat`).
    pub fn refreshed(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: std::sync::Arc::clone(&self.fd),
            path: self.path.clone(),
            stat: self.restat()?,
            viewer: self.viewer.clone(),
        })
    }

    /// The stat of the entry `name`, a symlink as itself.
    pub fn stat_at(&self, name: impl AsRef<OsStr>) -> io::Result<Stat> {
        let name = name.as_ref();
        check_name(name)?;
        self.check_search()?;
        Ok(rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)?.into())
    }

    /// The stat of `name`, `None` when there is no such entry.
    pub fn probe(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Stat>> {
        match self.stat_at(name) {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the subdirectory `name`: not a symlink, on this directory's
    /// filesystem.
    pub fn open_dir(&self, name: impl AsRef<OsStr>) -> io::Result<Dir> {
        let name = name.as_ref();
        check_name(name)?;
        self.check_search()?;
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())?;
        self.adopt_dir(fd, self.path.join(name))
    }

    /// The subdirectory `name`, just seen (with `fstatat`) as `seen`:
    /// `known`, a handle opened earlier, when it is that very directory —
    /// an open handle pins its inode, so the same device and inode mean
    /// the same directory — else opened afresh. Checked as
    /// [`open_dir`](Dir::open_dir) checks.
    pub fn open_dir_seen(
        &self,
        name: impl AsRef<OsStr>,
        seen: &Stat,
        known: Option<&Dir>,
    ) -> io::Result<Dir> {
        let name = name.as_ref();
        match known {
            Some(known) if known.stat.same_file(seen) && seen.is_dir() => {
                check_name(name)?;
                self.check_search()?;
                self.check(seen, Access::Read)?;
                Ok(Dir {
                    fd: std::sync::Arc::clone(&known.fd),
                    path: self.path.join(name),
                    stat: *seen,
                    viewer: self.viewer.clone(),
                })
            }
            _ => self.open_dir(name),
        }
    }

    /// The stat of the entry `rel` (several components) below this
    /// directory, `None` when absent. Symlinks on the way ARE followed:
    /// only for checking that a cached answer still holds (a followed link
    /// shows another identity, and the caller then resolves properly),
    /// never for anything that is read or shown.
    pub fn probe_below(&self, rel: &str) -> io::Result<Option<Stat>> {
        if self.viewer.is_some() || rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        match rustix::fs::statat(&*self.fd, rel, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat.into())),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the directory `rel` below this one (`.` is this one again).
    /// `..`, absolute paths, symlinks and other filesystems are refused.
    pub fn resolve_dir(&self, rel: &Path) -> io::Result<Dir> {
        let names = components(rel)?;
        if names.is_empty() {
            return self.try_clone();
        }
        // A viewer's search permission is checked on every directory on
        // the way, so only the component walk can serve one.
        if names.len() > 1 && self.viewer.is_none() && !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve = ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV;
            match rustix::fs::openat2(&self.fd, rel, dir_flags(), Mode::empty(), resolve) {
                Ok(fd) => return self.adopt_dir(fd, self.path.join(rel)),
                // Missing, or refused by a seccomp filter: walk instead.
                Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed)
                }
                // ELOOP is what RESOLVE_NO_SYMLINKS answers for a symlink
                // anywhere on the way; the caller sees the same error the
                // component walk gives for a symlinked directory.
                Err(e) => return Err(e.into()),
            }
        }
        let mut dir = self.open_dir(names[0])?;
        for name in &names[1..] {
            dir = dir.open_dir(name)?;
        }
        Ok(dir)
    }

    fn adopt_dir(&self, fd: OwnedFd, path: PathBuf) -> io::Result<Dir> {
        let stat = Stat::of(&fd)?;
        if stat.dev != self.stat.dev {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        // Every directory is opened for reading (to list it, or to resolve
        // below it), which the kernel allows only with read permission: a
        // viewer is held to the same, so its walk matches its own.
        self.check(&stat, Access::Read)?;
        Ok(Dir {
            fd: fd.into(),
            path,
            stat,
            viewer: self.viewer.clone(),
        })
    }

    /// Opens the regular file `name` for reading: never a symlink, a FIFO
    /// or a device. The entry is checked with `fstatat` before the open
    /// (so no driver's open runs) and with `fstat` after it (so a swap in
    /// between is caught).
    pub fn open_file(&self, name: impl AsRef<OsStr>) -> io::Result<(File, Stat)> {
        let name = name.as_ref();
        let seen = self.stat_at(name)?;
        self.open_regular(name, &seen, false)
    }

    /// Opens `name`, which the caller just saw (with `fstatat`) as the
    /// regular file `seen`, whatever file it is by the time it is opened,
    /// as long as that is a regular file too: for readers that take the
    /// file's own stat (counting) rather than serve a file they showed.
    pub fn open_seen(&self, name: impl AsRef<OsStr>, seen: &Stat) -> io::Result<(File, Stat)> {
        self.open_regular(name.as_ref(), seen, false)
    }

    /// Opens `name`, which the caller just saw as the regular file
    /// `expected`, and only if it still is that file (same device and
    /// inode): a reader is served the file it was shown, or `ESTALE`.
    pub fn open_file_as(
        &self,
        name: impl AsRef<OsStr>,
        expected: &Stat,
    ) -> io::Result<(File, Stat)> {
        self.open_regular(name.as_ref(), expected, true)
    }

    /// Opens `name`, seen as `expected` (which must be a regular file):
    /// the file opened must be regular, and with `same` the very file seen.
    fn open_regular(&self, name: &OsStr, expected: &Stat, same: bool) -> io::Result<(File, Stat)> {
        check_name(name)?;
        self.check_search()?;
        if !expected.is_file() {
            return Err(not_regular());
        }
        let fd =
            rustix::fs::openat(&self.fd, name, read_flags(), Mode::empty()).map_err(
                |e| match e {
                    // O_NOFOLLOW on a symlink.
                    rustix::io::Errno::LOOP => not_regular(),
                    e => e.into(),
                },
            )?;
        let stat = Stat::of(&fd)?;
        if !stat.is_file() {
            return Err(not_regular());
        }
        if same && !stat.same_file(expected) {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        self.check(&stat, Access::Read)?;
        Ok((File::from(fd), stat))
    }

    /// The whole content of the regular file `name`, at most `cap` bytes,
    /// with the file's stat; `Ok(None)` when there is no such entry.
    pub fn read_capped(
        &self,
        name: impl AsRef<OsStr>,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, Stat)>, CappedError> {
        let (file, stat) = match self.open_file(name) {
            Ok(opened) => opened,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                return Err(CappedError::NotRegular);
            }
            Err(e) => return Err(CappedError::Io(e)),
        };
        read_all_capped(file, stat.size, cap).map(|bytes| Some((bytes, stat)))
    }

    /// The entries of this directory (without `.` and `..`), typed from
    /// `getdents`: symlinks, FIFOs, sockets and devices are neither
    /// directories nor files.
    pub fn entries(&self) -> io::Result<Vec<DirEntry>> {
        self.entries_up_to(usize::MAX).map(|(entries, _)| entries)
    }

    /// At most `limit` directory and regular-file entries of this
    /// directory (other types are skipped), and whether more were left:
    /// a directory of millions of names costs no more than `limit`.
    pub fn entries_up_to(&self, limit: usize) -> io::Result<(Vec<DirEntry>, bool)> {
        let mut entries = Vec::new();
        let mut more = false;
        self.each_entry(|name, kind| {
            let (is_dir, is_file) = (kind == FileType::Directory, kind == FileType::RegularFile);
            if !is_dir && !is_file {
                return true;
            }
            if entries.len() == limit {
                more = true;
                return false;
            }
            entries.push(DirEntry {
                name: name.to_vec(),
                is_dir,
                is_file,
            });
            true
        })?;
        Ok((entries, more))
    }

    /// The name of the first entry that is not a regular file (nor, when
    /// `dirs` allows them, a directory), if there is one.
    pub fn first_unplain(&self, dirs: bool) -> io::Result<Option<Vec<u8>>> {
        let mut found = None;
        self.each_entry(|name, kind| {
            let plain = kind == FileType::RegularFile || (dirs && kind == FileType::Directory);
            if !plain {
                found = Some(name.to_vec());
            }
            plain
        })?;
        Ok(found)
    }

    /// Hands each entry's name and type to `visit` (a type `getdents`
    /// leaves unknown is asked of `fstatat`) until `visit` says stop.
    fn each_entry(&self, mut visit: impl FnMut(&[u8], FileType) -> bool) -> io::Result<()> {
        // Listing a directory needs read permission (reaching it needed
        // only search).
        self.check(&self.stat, Access::Read)?;
        let mut reader = rustix::fs::Dir::read_from(&self.fd)?;
        while let Some(entry) = reader.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                match self.stat_at(OsStr::from_bytes(name)) {
                    Ok(stat) => kind = stat.file_type(),
                    Err(_) => continue,
                }
            }
            if !visit(name, kind) {
                break;
            }
        }
        Ok(())
    }

    /// Creates the subdirectory `name` (mode `mode`) unless it exists, and
    /// opens it; a symlink or a file there is refused.
    pub fn create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<Dir> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode as _)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        self.open_dir(name)
    }

    /// Replaces the regular file `name` with `bytes`: a reader sees the old
    /// content or the new, never a mix. The new file keeps the replaced
    /// file's owner and mode. Refused (nothing written) when `name` is not
    /// a regular file, or when `how.expect` says which file the caller
    /// read and another is there now.
    pub fn replace(&self, name: impl AsRef<OsStr>, bytes: &[u8], how: Replace) -> io::Result<()> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        let current = self.probe(name)?;
        if let Some(current) = &current {
            if !current.is_file() {
                return Err(not_regular());
            }
        }
        if let Some(expected) = how.expect {
            if current.map(|c| (c.dev, c.ino)) != expected {
                return Err(io::Error::new(
                    io::ErrorKind::Other,
                    "the file changed since it was read; not replaced",
                ));
            }
        }
        if how.sweep_temps {
            self.remove_stale_temps(name);
        }
        let temp = temp_name(name);
        let fd = rustix::fs::openat(
            &self.fd,
            temp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(how.mode as _),
        )?;
        let mut file = File::from(fd);
        let result = (|| {
            if let Some(current) = current.as_ref().filter(|_| how.keep_owner) {
                // Root keeps the owner of the file it replaces (not of a
                // hard link to someone else's file); another user cannot
                // give a file away and keeps its own. Set-id and sticky
                // bits are never carried over.
                if rustix::process::geteuid().is_root() && current.nlink == 1 {
                    rustix::fs::fchown(
                        &file,
                        Some(rustix::fs::Uid::from_raw(current.uid)),
                        Some(rustix::fs::Gid::from_raw(current.gid)),
                    )?;
                }
                rustix::fs::fchmod(
                    &file,
                    Mode::from_raw_mode((current.permissions() & 0o777) as _),
                )?;
            }
            file.write_all(bytes)?;
            if how.durable {
                file.sync_all()?;
            }
            // The last moment to notice a swap of the target.
            if let Some(expected) = how.expect {
                let now = self.probe(name)?.map(|c| (c.dev, c.ino));
                if now != expected {
                    return Err(io::Error::new(
                        io::ErrorKind::Other,
                        "the file changed while it was being replaced; not replaced",
                    ));
                }
            }
            rustix::fs::renameat(&self.fd, temp.as_os_str(), &self.fd, name)?;
            if how.durable {
                rustix::fs::fsync(&self.fd)?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_os_str(), AtFlags::empty());
        }
        result
    }

    /// Removes the regular file `name`; absent is fine.
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> io::Result<bool> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes temp files of `name` that a crashed writer left behind.
    fn remove_stale_temps(&self, name: &OsStr) {
        let mut prefix = b".".to_vec();
        prefix.extend_from_slice(name.as_bytes());
        prefix.extend_from_slice(b".tmp.");
        let Ok((entries, _)) = self.entries_up_to(1 << 16) else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        for entry in entries
            .iter()
            .filter(|e| e.is_file && e.name.starts_with(&prefix))
        {
            let name = OsStr::from_bytes(&entry.name);
            if let Ok(stat) = self.stat_at(name) {
                if now.saturating_sub(stat.mtime) >= STALE_TEMP_SECS {
                    let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
                }
            }
        }
    }
}

/// Where pchronicle keeps its own state (count cache) for one warehouse.
#[derive(Debug)]
pub struct StateDir {
    pub dir: Dir,
    /// Why the warehouse's own state directory was not used, when it was
    /// not.
    pub elsewhere: Option<String>,
}

/// The state directory `sub` of the warehouse `root`: `ROOT/.pchronicle/sub`
/// when both directories are real directories owned by this process's
/// effective user and writable by no one else (created so when absent);
/// otherwise a per-warehouse directory in this user's cache directory
/// (`/var/cache/pchronicle/<id>` for root, `$XDG_CACHE_HOME/pchronicle/<id>`
/// or `~/.cache/pchronicle/<id>` for others), `<id>` derived from the
/// root's device and inode.
pub fn state_dir(root: &Dir, state: &str, sub: &str) -> io::Result<StateDir> {
    let owned = |parent: &Dir, name: &str| -> Result<Dir, String> {
        let dir = parent
            .create_dir(name, 0o755)
            .map_err(|e| format!("{} cannot be used: {e}", parent.path().join(name).display()))?;
        let stat = dir.stat();
        let euid = rustix::process::geteuid().as_raw();
        if stat.uid != euid {
            return Err(format!(
                "{} belongs to uid {}, not to uid {euid} that runs pchronicle",
                dir.path().display(),
                stat.uid
            ));
        }
        if stat.mode & 0o022 != 0 {
            return Err(format!(
                "{} is writable by group or others (mode {:o})",
                dir.path().display(),
                stat.permissions()
            ));
        }
        Ok(dir)
    };
    let why = match owned(root, state).and_then(|dir| owned(&dir, sub)) {
        Ok(dir) => {
            return Ok(StateDir {
                dir,
                elsewhere: None,
            });
        }
        Err(why) => why,
    };
    let base = user_cache_dir()?;
    let id = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("{}:{}", root.stat.dev, root.stat.ino));
        digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let path = base.join(id).join(sub);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)?;
    Ok(StateDir {
        dir: Dir::open_root(&path)?,
        elsewhere: Some(why),
    })
}

/// This user's cache directory for pchronicle.
fn user_cache_dir() -> io::Result<PathBuf> {
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from("/var/cache/pchronicle"));
    }
    let from_env = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    from_env("XDG_CACHE_HOME")
        .or_else(|| from_env("HOME").map(|home| home.join(".cache")))
        .map(|base| base.join("pchronicle"))
        .ok_or_else(|| io::Error::other("neither XDG_CACHE_HOME nor HOME is set"))
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
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

/// Reads all of `file` (whose size was `size` when opened), refusing more
/// than `cap` bytes even if it grows while being read.
pub fn read_all_capped(file: File, size: u64, cap: u64) -> Result<Vec<u8>, CappedError> {
    if size > cap {
        return Err(CappedError::TooLarge { cap });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(CappedError::Io)?;
    if bytes.len() as u64 > cap {
        return Err(CappedError::TooLarge { cap });
    }
    Ok(bytes)
}

/// A name no other writer uses: pid, a process-wide counter and the time,
/// hidden with a leading dot and marked `.tmp.` so a later write can clean
/// it up.
pub(crate) fn temp_name(target: &OsStr) -> std::ffi::OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut name = std::ffi::OsString::from(".");
    name.push(target);
    name.push(format!(".tmp.{}.{n}.{nanos}", std::process::id()));
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, Dir) {
        let dir = tempfile::tempdir().unwrap();
        let root = Dir::open_root(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn symlinks_below_the_root_are_never_followed() {
        let (tmp, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::create_dir(tmp.path().join("a")).unwrap();
        symlink(outside.path(), tmp.path().join("a/link")).unwrap();
        symlink(outside.path().join("secret"), tmp.path().join("a/file")).unwrap();
        assert!(root.resolve_dir(Path::new("a/link")).is_err());
        assert!(root.resolve_dir(Path::new("a/link/.")).is_err());
        let a = root.resolve_dir(Path::new("a")).unwrap();
        assert!(a.open_dir("link").is_err());
        assert!(a.open_file("file").is_err());
        assert!(a.read_capped("file", 10).is_err());
        assert!(a.stat_at("file").unwrap().is_symlink());
        assert!(root.resolve_dir(Path::new("../x")).is_err());
        assert!(root.resolve_dir(Path::new("/etc")).is_err());
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let (tmp, root) = root();
        let fifo = tmp.path().join("chronicle.manifest");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(matches!(
            root.read_capped("chronicle.manifest", 10),
            Err(CappedError::NotRegular)
        ));
        symlink("/dev/zero", tmp.path().join("zero")).unwrap();
        assert!(root.read_capped("zero", 10).is_err());
    }

    #[test]
    fn capped_reads_refuse_big_files() {
        let (tmp, root) = root();
        std::fs::write(tmp.path().join("big"), vec![b'x'; 100]).unwrap();
        assert!(matches!(
            root.read_capped("big", 99),
            Err(CappedError::TooLarge { cap: 99 })
        ));
        assert_eq!(root.read_capped("big", 100).unwrap().unwrap().0.len(), 100);
        assert!(root.read_capped("absent", 100).unwrap().is_none());
    }

    #[test]
    fn replace_keeps_mode_refuses_swaps_and_cleans_stale_temps() {
        let (tmp, root) = root();
        let path = tmp.path().join("m");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        let stale = tmp.path().join(".m.tmp.1.2.3");
        std::fs::write(&stale, "junk").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let seen = root.stat_at("m").unwrap();
        let how = Replace {
            durable: true,
            mode: 0o600,
            keep_owner: true,
            sweep_temps: true,
            expect: Some(Some((seen.dev, seen.ino))),
        };
        root.replace("m", b"new", how).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(root.stat_at("m").unwrap().permissions(), 0o640);
        assert!(!stale.exists());
        // The file moved since `seen`: not replaced.
        assert!(root.replace("m", b"newer", how).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // A symlink in the target's place is never written through.
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        symlink(&victim, tmp.path().join("s")).unwrap();
        assert!(root.replace("s", b"x", Replace::default()).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
    }
}
