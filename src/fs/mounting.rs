//! Making the mount: the options it always carries, the checks a mount
//! point must pass, and the `mount(2)` call.
//!
//! The mount point is a path whose last name someone else may control:
//! root mounting at `/home/alice/wh` cannot keep alice from replacing `wh`
//! with a symlink to a directory of her choice. So the directories above
//! it are resolved once ([`mountpoint::absolute`]) and opened without
//! following any symlink ([`Pinned`]), its own name is opened there
//! `O_PATH | O_NOFOLLOW`, and every check (a directory, not a symlink,
//! empty, outside the warehouse) asks that descriptor, never the path
//! again. As root the mount is made onto the same descriptor
//! (`/proc/self/fd/N`), so what was checked is what gets covered.
//!
//! A user who is not root mounts through the setuid `fusermount3`, which
//! takes a path: it is given the checked path once the name is seen to
//! still lead to the checked directory. `fusermount3` then looks the name
//! up once more, refuses a symlink there itself, and mounts only where
//! the user may write, `nosuid,nodev`; that second look is the window left.
//!
//! Whatever the mount shows was written by the warehouse's writers, so a
//! mount is `nosuid,nodev,noexec` unless `-o exec` asks for programs to
//! run from it: a mount over a directory in someone's `PATH` must not run
//! a writer's executable as that someone.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use fuser::{MountOption, SessionACL};
use rustix::fs::{FileType, Mode, OFlags};

use super::mountpoint::{self, FS_NAME, MountState, Pinned};
use crate::error::{Error, ErrorCode, Result};

/// A mount point that passed the checks: its path, and the directory it
/// named then, held open. The mount is made on the descriptor.
pub(super) struct MountPoint {
    /// Absolute: the directories above resolved, the last name kept.
    path: PathBuf,
    /// The directory holding it, pinned against renames.
    pinned: Pinned,
    /// The checked directory itself, opened `O_PATH`.
    dir: OwnedFd,
    /// Its device and inode, to recognise it under its name again.
    id: (u64, u64),
}

impl MountPoint {
    /// Checks that `path` can take the mount: an empty directory, not a
    /// symlink, outside the warehouse (`None` for one that has no local
    /// directory), with nothing live mounted on it. A dead pchronicle
    /// mount there is cleared first.
    pub(super) fn check(path: &Path, warehouse: Option<&Path>) -> Result<MountPoint> {
        let missing = |why: String| Error::at(ErrorCode::MountPointMissing, path, why);
        let abs = mountpoint::absolute(path).map_err(|e| missing(e.message))?;
        match mountpoint::state(&abs) {
            MountState::Live => {
                return Err(Error::at(
                    ErrorCode::MountPointInUse,
                    path,
                    "a pchronicle mount is already serving here",
                ));
            }
            MountState::Dead => {
                log::info!("clearing the dead mount at {}", abs.display());
                mountpoint::detach(&abs, true).map_err(|e| {
                    Error::at(
                        ErrorCode::UnmountFailed,
                        path,
                        format!("a dead mount is in the way and could not be cleared: {e}"),
                    )
                })?;
            }
            MountState::NotMounted => {}
        }
        let opened = Pinned::of(&abs).and_then(|pinned| Ok((pinned.open_entry()?, pinned)));
        let (dir, pinned) = match opened {
            Ok(opened) => opened,
            // A symlink appeared in a directory above since it was resolved.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(symlink(path, "a directory above it became a symlink"));
            }
            Err(e) => return Err(missing(e.to_string())),
        };
        let stat = rustix::fs::fstat(&dir).map_err(|e| failed(path, e))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {}
            FileType::Symlink => return Err(symlink(path, "the mount point is a symlink")),
            _ => return Err(missing("the mount point is not a directory".into())),
        }
        if let Some(warehouse) = warehouse {
            let root = rustix::fs::stat(warehouse).map_err(|e| failed(warehouse, e))?;
            let root = (root.st_dev, root.st_ino);
            if is_within(&dir, root).map_err(|e| Error::io(path, &e))? {
                return Err(Error::at(
                    ErrorCode::MountPointInsideWarehouse,
                    path,
                    format!(
                        "the mount point is inside the warehouse {}",
                        warehouse.display()
                    ),
                ));
            }
        }
        if !is_empty(&dir).map_err(|e| Error::io(path, &e))? {
            return Err(Error::at(
                ErrorCode::MountPointNotEmpty,
                path,
                "the mount point is not empty",
            ));
        }
        Ok(MountPoint {
            path: abs,
            pinned,
            dir,
            id: (stat.st_dev, stat.st_ino),
        })
    }

    /// The checked path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The checked path, for a mounter that takes a path (fusermount3):
    /// refused unless its name still leads to the checked directory, not
    /// through a symlink.
    pub(super) fn path_if_unchanged(&self) -> Result<&Path> {
        let now = self.pinned.stat().map_err(|e| Error::io(&self.path, &e))?;
        if FileType::from_raw_mode(now.st_mode) == FileType::Symlink {
            return Err(symlink(&self.path, "the mount point became a symlink"));
        }
        if (now.st_dev, now.st_ino) != self.id {
            return Err(Error::at(
                ErrorCode::MountFailed,
                &self.path,
                "the mount point was replaced after it was checked",
            ));
        }
        Ok(&self.path)
    }
}

/// A system call about `path` failed.
fn failed(path: &Path, e: rustix::io::Errno) -> Error {
    Error::io(path, &e.into())
}

/// A refusal of a symlink as the mount point.
fn symlink(path: &Path, why: &str) -> Error {
    Error::at(
        ErrorCode::MountPointSymlink,
        path,
        format!("{why}, which is never followed"),
    )
}

/// Whether the directory open as `dir` has any entry but `.` and `..`.
fn is_empty(dir: &OwnedFd) -> std::io::Result<bool> {
    // An `O_PATH` descriptor cannot be read: the same directory is
    // opened for reading through it.
    let readable = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut entries = rustix::fs::Dir::read_from(&readable)?;
    while let Some(entry) = entries.read() {
        if !matches!(entry?.file_name().to_bytes(), b"." | b"..") {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the directory open as `dir` is the directory `root` (device,
/// inode) or lies below it. Its parents are walked up through `..` from
/// the descriptor and each compared with `root`, so no path is resolved
/// again, and a `root` reached through a bind mount is recognised too.
fn is_within(dir: &OwnedFd, root: (u64, u64)) -> std::io::Result<bool> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut at = dir.try_clone()?;
    let mut here = rustix::fs::fstat(&at)?;
    loop {
        if (here.st_dev, here.st_ino) == root {
            return Ok(true);
        }
        // `..` of a mount's root leads on into the file system it is
        // mounted on; only this process's root directory is its own
        // parent.
        let parent = rustix::fs::openat(&at, "..", flags, Mode::empty())?;
        let above = rustix::fs::fstat(&parent)?;
        if (above.st_dev, above.st_ino) == (here.st_dev, here.st_ino) {
            return Ok(false);
        }
        (at, here) = (parent, above);
    }
}

/// Mounts a new `/dev/fuse` descriptor on the checked `mount_point`
/// itself, typed `fuse.pchronicle` (what `/etc/fstab`, `findmnt -t` and
/// `umount -t` name; fuser mounts plain `fuse`), always read-only, without
/// devices or set-id bits, without programs unless `options` hold
/// [`MountOption::Exec`], with the kernel checking permissions; `None`
/// when this process may not mount (not root), for fuser to mount through
/// fusermount3 at [`MountPoint::path_if_unchanged`].
///
/// The mount is made onto the descriptor the checks were made through, so
/// a user who can rename or replace the mount point cannot swap in
/// another place between the checks and the mount.
pub(super) fn mount_device(
    mount_point: &MountPoint,
    options: &[MountOption],
    acl: SessionACL,
) -> std::io::Result<Option<OwnedFd>> {
    use nix::mount::MsFlags;
    // Only root may mount(2); a user mounts through the setuid
    // fusermount3, which opens /dev/fuse itself.
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let target = &mount_point.dir;
    let root_mode = rustix::fs::fstat(target)?.st_mode & libc::S_IFMT;
    // Opened close-on-exec.
    let device: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?
        .into();
    let mut data = format!(
        "fd={},rootmode={root_mode:o},user_id={},group_id={},default_permissions",
        device.as_raw_fd(),
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw()
    );
    if acl != SessionACL::Owner {
        data.push_str(",allow_other");
    }
    let mut flags = MsFlags::MS_RDONLY | MsFlags::MS_NODEV | MsFlags::MS_NOSUID;
    if !options.contains(&MountOption::Exec) {
        flags |= MsFlags::MS_NOEXEC;
    }
    if options.contains(&MountOption::NoAtime) {
        flags |= MsFlags::MS_NOATIME;
    }
    let fs_type = format!("fuse.{FS_NAME}");
    let onto = Path::new("/proc/self/fd").join(target.as_raw_fd().to_string());
    match nix::mount::mount(
        Some(FS_NAME),
        &onto,
        Some(fs_type.as_str()),
        flags,
        Some(data.as_str()),
    ) {
        Ok(()) => Ok(Some(device)),
        Err(nix::errno::Errno::EPERM) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The `/dev/fuse` descriptor a mount point of the form `/dev/fd/N`
/// names, taken over by this process; `None` for any other mount point.
/// Refused unless `N` is open on the FUSE device.
pub(super) fn fuse_descriptor(mount_point: &Path) -> Result<Option<OwnedFd>> {
    let Some(number) = mount_point
        .to_str()
        .and_then(|p| p.strip_prefix("/dev/fd/"))
    else {
        return Ok(None);
    };
    let refused = |why: String| {
        Error::at(
            ErrorCode::MountFailed,
            mount_point,
            format!(
                "{why}; a /dev/fd/N mount point names an open /dev/fuse descriptor that is already mounted"
            ),
        )
    };
    let fd: RawFd = number
        .parse()
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| refused(format!("`{number}` is not a descriptor number")))?;
    // SAFETY: F_GETFD only asks whether the number is an open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(refused(format!("descriptor {fd} is not open")));
    }
    // SAFETY: `fd` was just found open, and nothing closes it while it is
    // borrowed for the `fstat`.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let stat = nix::sys::stat::fstat(borrowed).map_err(|e| refused(format!("fstat: {e}")))?;
    let is_char = stat.st_mode & libc::S_IFMT == libc::S_IFCHR;
    let rdev = stat.st_rdev;
    if !is_char || (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev)) != FUSE_DEVICE {
        return Err(refused(format!("descriptor {fd} is not /dev/fuse")));
    }
    // SAFETY: the descriptor is open and this process owns it from here:
    // nothing else in it refers to the number given on the command line.
    let device = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&device, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| refused(format!("descriptor {}: {e}", device.as_raw_fd())))?;
    Ok(Some(device))
}

/// The FUSE device's (major, minor) numbers (see devices.txt).
const FUSE_DEVICE: (u64, u64) = (10, 229);

/// The fuser mount options for `-o` options as given (each may hold
/// several, comma-separated) and `--allow-other`: always read-only, with
/// the kernel checking permissions, with no devices or set-id bits, and
/// `noexec` unless `exec` is asked for.
pub(super) fn fuse_options(
    given: &[String],
    allow_other: bool,
) -> Result<(Vec<MountOption>, SessionACL)> {
    let mut options = vec![
        MountOption::FSName(FS_NAME.into()),
        MountOption::Subtype(FS_NAME.into()),
        MountOption::RO,
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    let mut acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let invalid = |option: &str, why: &str| {
        Error::new(ErrorCode::MountOptionInvalid, format!("-o {option}: {why}"))
    };
    for option in given.iter().flat_map(|o| o.split(',')) {
        let extra = match option.trim() {
            "" | "ro" | "default_permissions" | "nodev" | "nosuid" => None,
            "allow_other" => {
                acl = SessionACL::All;
                None
            }
            "allow_root" => {
                if acl == SessionACL::Owner {
                    acl = SessionACL::RootAndOwner;
                }
                None
            }
            "noexec" => Some(MountOption::NoExec),
            "exec" => Some(MountOption::Exec),
            "noatime" => Some(MountOption::NoAtime),
            "atime" => Some(MountOption::Atime),
            "rw" => return Err(invalid(option, "the mount is always read-only")),
            "dev" | "suid" => {
                return Err(invalid(
                    option,
                    "device files and set-id bits are never honoured",
                ));
            }
            other if other.starts_with("fsname=") || other.starts_with("subtype=") => {
                return Err(invalid(
                    option,
                    "the name is fixed so `pchronicle umount` can recognise the mount",
                ));
            }
            _ => {
                return Err(invalid(
                    option,
                    "unknown; supported: ro, allow_other, allow_root, default_permissions, nodev, nosuid, noexec, exec, noatime, atime",
                ));
            }
        };
        if let Some(extra) = extra {
            if !options.contains(&extra) {
                options.push(extra);
            }
        }
    }
    if options.contains(&MountOption::Exec) && options.contains(&MountOption::NoExec) {
        return Err(invalid("exec,noexec", "they contradict each other"));
    }
    if options.contains(&MountOption::Atime) && options.contains(&MountOption::NoAtime) {
        return Err(invalid("atime,noatime", "they contradict each other"));
    }
    if !options.contains(&MountOption::Exec) && !options.contains(&MountOption::NoExec) {
        options.push(MountOption::NoExec);
    }
    Ok((options, acl))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    fn options(given: &[&str]) -> Result<Vec<MountOption>> {
        let given: Vec<String> = given.iter().map(|o| o.to_string()).collect();
        Ok(fuse_options(&given, false)?.0)
    }

    #[test]
    fn a_mount_is_noexec_unless_exec_is_asked_for() {
        let plain = options(&[]).unwrap();
        for wanted in [
            MountOption::RO,
            MountOption::NoDev,
            MountOption::NoSuid,
            MountOption::NoExec,
        ] {
            assert!(plain.contains(&wanted), "{wanted:?} in {plain:?}");
        }
        let exec = options(&["noatime,exec"]).unwrap();
        assert!(exec.contains(&MountOption::Exec), "{exec:?}");
        assert!(!exec.contains(&MountOption::NoExec), "{exec:?}");
        assert!(options(&["noexec"]).unwrap().contains(&MountOption::NoExec));
        for refused in [
            &["exec", "noexec"][..],
            &["exec,noexec"],
            &["suid"],
            &["rw"],
        ] {
            let err = options(refused).unwrap_err();
            assert_eq!(err.code, ErrorCode::MountOptionInvalid, "{refused:?}");
        }
    }

    /// A temporary directory, canonical (a temp dir may be reached through
    /// a symlink), holding an empty `target` directory.
    fn place() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir(root.join("target")).unwrap();
        (tmp, root)
    }

    #[test]
    fn a_symlink_as_mount_point_is_refused_not_followed() {
        let (_tmp, root) = place();
        symlink(root.join("target"), root.join("link")).unwrap();
        let err = MountPoint::check(&root.join("link"), None).err().unwrap();
        assert_eq!(err.code, ErrorCode::MountPointSymlink, "{err}");
        // A trailing slash, which would make a path lookup follow it, too.
        let err = MountPoint::check(Path::new(&format!("{}/link/", root.display())), None)
            .err()
            .unwrap();
        assert_eq!(err.code, ErrorCode::MountPointSymlink, "{err}");
        // The directory it points to is fine by itself.
        let checked = MountPoint::check(&root.join("target"), None).unwrap();
        assert_eq!(checked.path(), root.join("target"));
    }

    #[test]
    fn the_checks_hold_for_the_directory_opened_not_for_the_path_later() {
        let (_tmp, root) = place();
        let checked = MountPoint::check(&root.join("target"), None).unwrap();
        assert_eq!(checked.path_if_unchanged().unwrap(), root.join("target"));
        // Replaced by a symlink to another empty directory after the check:
        // a mounter by path is refused, and the descriptor still holds the
        // directory that was checked.
        fs::create_dir(root.join("elsewhere")).unwrap();
        fs::rename(root.join("target"), root.join("moved")).unwrap();
        symlink(root.join("elsewhere"), root.join("target")).unwrap();
        let err = checked.path_if_unchanged().unwrap_err();
        assert_eq!(err.code, ErrorCode::MountPointSymlink, "{err}");
        let held = rustix::fs::fstat(&checked.dir).unwrap();
        let moved = rustix::fs::stat(root.join("moved")).unwrap();
        assert_eq!((held.st_dev, held.st_ino), (moved.st_dev, moved.st_ino));
        // Replaced by another directory: refused too.
        fs::remove_file(root.join("target")).unwrap();
        fs::create_dir(root.join("target")).unwrap();
        let err = checked.path_if_unchanged().unwrap_err();
        assert_eq!(err.code, ErrorCode::MountFailed, "{err}");
    }

    #[test]
    fn a_mount_point_below_the_warehouse_is_refused_however_it_is_reached() {
        let (_tmp, root) = place();
        let warehouse = root.join("wh");
        fs::create_dir_all(warehouse.join("runs/mnt")).unwrap();
        let inside = |path: &Path| MountPoint::check(path, Some(&warehouse)).err().unwrap();
        let err = inside(&warehouse.join("runs/mnt"));
        assert_eq!(err.code, ErrorCode::MountPointInsideWarehouse, "{err}");
        // Through a symlink above the mount point, which is resolved.
        symlink(warehouse.join("runs"), root.join("alias")).unwrap();
        let err = inside(&root.join("alias/mnt"));
        assert_eq!(err.code, ErrorCode::MountPointInsideWarehouse, "{err}");
        // The empty warehouse itself.
        fs::remove_dir_all(warehouse.join("runs")).unwrap();
        let err = inside(&warehouse);
        assert_eq!(err.code, ErrorCode::MountPointInsideWarehouse, "{err}");
        assert!(MountPoint::check(&root.join("target"), Some(&warehouse)).is_ok());
    }

    #[test]
    fn a_mount_point_that_is_not_an_empty_directory_is_refused() {
        let (_tmp, root) = place();
        fs::write(root.join("target/.hidden"), "mine").unwrap();
        let err = MountPoint::check(&root.join("target"), None).err().unwrap();
        assert_eq!(err.code, ErrorCode::MountPointNotEmpty, "{err}");
        let err = MountPoint::check(&root.join("target/.hidden"), None)
            .err()
            .unwrap();
        assert_eq!(err.code, ErrorCode::MountPointMissing, "{err}");
        let err = MountPoint::check(&root.join("missing"), None)
            .err()
            .unwrap();
        assert_eq!(err.code, ErrorCode::MountPointMissing, "{err}");
    }
}
