//! Mount points: is something of ours mounted here, is it alive, and how
//! to take it away.
//!
//! A pchronicle mount is recognised in `/proc/self/mountinfo` by its
//! source name ([`FS_NAME`]) on a `fuse` filesystem type, so `umount` never
//! touches someone else's mount. A mount whose daemon died (killed with
//! SIGKILL, crashed) stays in the mount table and answers every call with
//! `ENOTCONN`; it is *dead*, and is detached lazily, which the kernel
//! allows even while shells still sit in it.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

use nix::errno::Errno;
use nix::mount::MntFlags;
use nix::sys::statfs::{FUSE_SUPER_MAGIC, FsType};

use crate::error::{Error, ErrorCode, Result};

/// The source name every pchronicle mount carries.
pub const FS_NAME: &str = "pchronicle";

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

impl MountEntry {
    pub fn is_pchronicle(&self) -> bool {
        self.source == FS_NAME && (self.fs_type == "fuse" || self.fs_type.starts_with("fuse."))
    }
}

/// What is mounted at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountState {
    /// Nothing of ours.
    NotMounted,
    /// A pchronicle mount whose daemon answers.
    Live,
    /// A pchronicle mount whose daemon is gone.
    Dead,
}

/// Parses `/proc/self/mountinfo` text (see proc(5)).
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        // Fields: id parent major:minor root mount_point options
        // [optional fields...] - fs_type source super_options
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < dash + 3 {
            continue;
        }
        out.push(MountEntry {
            mount_point: PathBuf::from(unescape(fields[4])),
            fs_type: unescape(fields[dash + 1]),
            source: unescape(fields[dash + 2]),
        });
    }
    out
}

/// Undoes the octal escapes (`\040` for a space) of mountinfo fields.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = (bytes[i + 1] - b'0') as u32 * 64
                + (bytes[i + 2] - b'0') as u32 * 8
                + (bytes[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(value) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The absolute form of `path` without touching the path itself (a dead
/// mount point cannot be stat'ed): its parent canonicalised, its name kept.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io(path, &e))?
            .join(path)
    };
    let name = path.file_name().map(|n| n.to_os_string());
    match (path.parent(), name) {
        (Some(parent), Some(name)) => {
            let parent = fs::canonicalize(parent).map_err(|e| Error::io(parent, &e))?;
            Ok(parent.join(name))
        }
        // `/` itself, or a path ending in `..`: nothing to keep apart.
        _ => fs::canonicalize(&path).map_err(|e| Error::io(&path, &e)),
    }
}

/// The pchronicle mount at exactly `abs`, if any (the last one, when
/// mounts are stacked).
pub fn pchronicle_mount_at(abs: &Path) -> Option<MountEntry> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mountinfo(&text)
        .into_iter()
        .rfind(|m| m.mount_point == abs)
        .filter(MountEntry::is_pchronicle)
}

/// Whether a pchronicle mount at `abs` is alive.
pub fn state(abs: &Path) -> MountState {
    if pchronicle_mount_at(abs).is_none() {
        return MountState::NotMounted;
    }
    match statfs_magic(abs) {
        Ok(_) => MountState::Live,
        Err(e) => {
            log::debug!("{}: {e}", abs.display());
            MountState::Dead
        }
    }
}

/// Whether `abs` is now served by a FUSE filesystem that answers.
pub fn answers(abs: &Path) -> bool {
    statfs_magic(abs).is_ok_and(|magic| magic == FUSE_SUPER_MAGIC)
}

/// Waits (checking every 20 ms) until `abs` [`answers`]; false when it
/// did not within `limit`.
pub fn wait_answering(abs: &Path, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while !answers(abs) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// Whether the open `fd` is on a FUSE filesystem.
pub fn is_fuse(fd: impl std::os::fd::AsFd) -> io::Result<bool> {
    Ok(nix::sys::statfs::fstatfs(fd)?.filesystem_type() == FUSE_SUPER_MAGIC)
}

/// The filesystem type of `abs`, by `statfs(2)`. Unlike `stat`, which the
/// kernel may answer from cached attributes, `statfs` on a FUSE mount is
/// always a round trip to the daemon, so it fails (`ENOTCONN`) on a dead
/// mount at once.
fn statfs_magic(abs: &Path) -> io::Result<FsType> {
    Ok(nix::sys::statfs::statfs(abs)?.filesystem_type())
}

/// Unmounts the pchronicle mount at `path`. A dead mount, or any mount
/// when `lazy` is set, is detached lazily. Refuses paths that hold no
/// pchronicle mount.
///
/// Like mounting, it never follows the path's last name: a symlink there
/// is refused (`PCHRONICLE_MOUNT_POINT_SYMLINK`), whatever it points to.
pub fn unmount(path: &Path, lazy: bool) -> Result<()> {
    let abs = absolute(path)?;
    refuse_symlink(path, &abs)?;
    let lazy = match state(&abs) {
        MountState::NotMounted => {
            return Err(Error::at(
                ErrorCode::NotMounted,
                path,
                "no pchronicle mount is at this path",
            ));
        }
        MountState::Dead => true,
        MountState::Live => lazy,
    };
    detach(&abs, lazy).map_err(|e| {
        Error::at(
            ErrorCode::UnmountFailed,
            path,
            format!("the kernel refused to unmount: {e}"),
        )
    })
}

/// Refuses `abs` (given as `path`) when its last name is a symlink. A
/// name that cannot be stat'ed (gone, or a dead mount answering
/// `ENOTCONN`) is left to the caller's own checks.
fn refuse_symlink(path: &Path, abs: &Path) -> Result<()> {
    let is_symlink = Pinned::of(abs)
        .and_then(|pinned| pinned.stat())
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink);
    if is_symlink {
        return Err(Error::at(
            ErrorCode::MountPointSymlink,
            path,
            "the mount point is a symlink, which is never followed",
        ));
    }
    Ok(())
}

/// `umount2(2)` on `abs`, falling back to the setuid `fusermount3 -u`
/// helper when this user may not unmount directly.
///
/// Root unmounts through the mount point's directory opened without
/// following any symlink, and never follows its last name: a user who can
/// rename a directory on the way cannot make it unmount something else.
pub fn detach(abs: &Path, lazy: bool) -> io::Result<()> {
    let mut flags = MntFlags::UMOUNT_NOFOLLOW;
    if lazy {
        flags |= MntFlags::MNT_DETACH;
    }
    let pinned = Pinned::of(abs)?;
    let err = match nix::mount::umount2(&pinned.path(), flags) {
        Ok(()) => return Ok(()),
        Err(Errno::EPERM) => io::Error::from(Errno::EPERM),
        Err(other) => return Err(other.into()),
    };
    let mut last = err;
    for helper in ["fusermount3", "fusermount"] {
        let mut command = Command::new(helper);
        command.arg("-u").arg("-q");
        if lazy {
            command.arg("-z");
        }
        match command.arg(abs).status() {
            Ok(status) if status.success() => return Ok(()),
            Ok(status) => last = io::Error::other(format!("{helper} -u exited with {status}")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// An absolute path pinned against renames: the directory holding it,
/// opened without following any symlink on the way, and its last name.
/// [`Pinned::path`] names it through that open directory.
pub struct Pinned {
    parent: OwnedFd,
    name: OsString,
}

impl Pinned {
    /// Pins `abs`, an absolute path whose directory has no symlinks (as
    /// [`absolute`] makes it); `ELOOP` when one appeared since.
    pub fn of(abs: &Path) -> io::Result<Pinned> {
        let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
            return Err(io::Error::from(Errno::EINVAL));
        };
        Ok(Pinned {
            parent: open_dir_no_symlinks(parent)?,
            name: name.to_os_string(),
        })
    }

    /// The path through the open directory (`/proc/self/fd/N/NAME`): the
    /// kernel goes straight to that directory, whatever its path is now.
    pub fn path(&self) -> PathBuf {
        Path::new("/proc/self/fd")
            .join(self.parent.as_raw_fd().to_string())
            .join(&self.name)
    }

    /// The pinned name itself, opened as a directory with `flags` (say
    /// `O_PATH` or `O_RDONLY`), never through a symlink.
    pub fn open(&self, flags: OFlags) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.parent,
            &self.name,
            flags | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// Whatever the pinned name is now, a symlink included, opened
    /// `O_PATH` without following it: what it is is then asked of the
    /// descriptor, never of the path again.
    pub fn open_entry(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.parent,
            &self.name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// The pinned name's `lstat`: a symlink is described, not followed.
    pub fn stat(&self) -> io::Result<rustix::fs::Stat> {
        Ok(rustix::fs::statat(
            &self.parent,
            &self.name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?)
    }
}

/// The absolute directory `path` opened `O_PATH`, refusing any symlink on
/// the way (`openat2`, or one `openat` per component where it is missing).
fn open_dir_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => {}
        opened => return Ok(opened?),
    }
    let mut dir = rustix::fs::open("/", flags, Mode::empty())?;
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(name) => {
                dir = rustix::fs::openat(&dir, name, flags | OFlags::NOFOLLOW, Mode::empty())?;
            }
            _ => return Err(io::Error::from(Errno::EINVAL)),
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_and_unescaped() {
        let text = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - fuse pchronicle rw,user_id=0\n\
                    37 35 0:5 / /proc rw - proc proc rw\n\
                    38 35 0:6 / /x rw shared:2 master:3 - fuse.pchronicle pchronicle ro\n\
                    garbage\n";
        let entries = parse_mountinfo(text);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].mount_point, Path::new("/mnt/a b"));
        assert!(entries[0].is_pchronicle());
        assert!(!entries[1].is_pchronicle());
        assert_eq!(entries[2].fs_type, "fuse.pchronicle");
        assert!(entries[2].is_pchronicle());
    }

    #[test]
    fn unescape_leaves_plain_backslashes() {
        assert_eq!(unescape("a\\b"), "a\\b");
        assert_eq!(unescape("a\\134b"), "a\\b");
        assert_eq!(unescape("x\\011"), "x\t");
    }

    #[test]
    fn a_pinned_path_goes_through_the_open_directory_and_refuses_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let real = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir(real.join("a")).unwrap();
        fs::create_dir(real.join("a/mnt")).unwrap();
        let pinned = Pinned::of(&real.join("a/mnt")).unwrap();
        // Renamed away and replaced by a symlink: the pin still leads to
        // the directory it opened, and its last name is never followed.
        fs::rename(real.join("a"), real.join("b")).unwrap();
        std::os::unix::fs::symlink("/etc", real.join("a")).unwrap();
        let kind = |pinned: &Pinned| {
            let entry = pinned.open_entry().unwrap();
            FileType::from_raw_mode(rustix::fs::fstat(&entry).unwrap().st_mode)
        };
        assert!(pinned.open(OFlags::PATH).is_ok());
        assert_eq!(kind(&pinned), FileType::Directory);
        assert_eq!(fs::canonicalize(pinned.path()).unwrap(), real.join("b/mnt"));
        // A symlink on the way is refused when pinning.
        assert!(Pinned::of(&real.join("a/passwd")).is_err());
        fs::remove_dir(real.join("b/mnt")).unwrap();
        std::os::unix::fs::symlink("/etc", real.join("b/mnt")).unwrap();
        assert!(
            pinned.open(OFlags::PATH).is_err(),
            "the last name is not followed"
        );
        assert_eq!(kind(&pinned), FileType::Symlink);
        assert_eq!(
            FileType::from_raw_mode(pinned.stat().unwrap().st_mode),
            FileType::Symlink
        );
    }

    #[test]
    fn unmounting_through_a_symlink_is_refused_with_its_code() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("mnt")).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("mnt"), &link).unwrap();
        let err = unmount(&link, false).unwrap_err();
        assert_eq!(err.code, ErrorCode::MountPointSymlink);
        // Dangling: the same.
        fs::remove_dir(tmp.path().join("mnt")).unwrap();
        assert_eq!(
            unmount(&link, true).unwrap_err().code,
            ErrorCode::MountPointSymlink
        );
    }

    #[test]
    fn unmounting_a_plain_directory_is_refused_with_a_code() {
        let dir = std::env::temp_dir();
        let err = unmount(&dir, false).unwrap_err();
        assert_eq!(err.code, ErrorCode::NotMounted);
    }
}
