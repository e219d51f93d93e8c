//! The one control request a running mount answers: `refresh`, an
//! `ioctl` on a directory of the mount that makes the daemon forget what
//! it and the kernel cached of one name in that directory (or of the
//! directory itself), and of everything below it.
//!
//! An ioctl reaches exactly the daemon serving that directory, carries
//! the caller's credentials from the kernel, and needs no socket or file
//! of its own; the mount is read-only, so nothing else could carry it.
//! [`refresh`] is the client: it walks to the path inside the mount and
//! asks there.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::ioctl::{Updater, ioctl, opcode};

use super::mountpoint::{self, MountState};
use crate::error::{Error, ErrorCode, Result};

/// Bytes of a refresh request: a name in the directory the request is
/// made on, NUL-padded; all zero for the directory itself.
pub const NAME_BYTES: usize = 256;

/// The request's payload.
pub type Request = [u8; NAME_BYTES];

/// The ioctl number of a refresh: the request goes to the daemon, which
/// answers at once (the daemon's caches dropped) with a ticket, a `u64`
/// in the first bytes, for the kernel's side that follows.
pub const REFRESH: rustix::ioctl::Opcode = opcode::read_write::<Request>(b'p', 1);

/// The ioctl number asking whether a refresh's ticket is done (the kernel
/// told to forget): a `u64` ticket in, a `u64` 1 or 0 back.
pub const REFRESH_DONE: rustix::ioctl::Opcode = opcode::read_write::<u64>(b'p', 2);

/// How long the client waits for the kernel's side of a refresh.
const KERNEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The name a refresh request carries: `None` for the directory itself;
/// `EINVAL` for bytes that cannot name an entry.
pub fn decode(request: &[u8]) -> std::result::Result<Option<&str>, nix::errno::Errno> {
    if request.len() != NAME_BYTES {
        return Err(nix::errno::Errno::EINVAL);
    }
    let len = request.iter().position(|b| *b == 0).unwrap_or(NAME_BYTES);
    if request[len..].iter().any(|b| *b != 0) {
        return Err(nix::errno::Errno::EINVAL);
    }
    match std::str::from_utf8(&request[..len]) {
        Ok("") => Ok(None),
        Ok(name) => Ok(Some(name)),
        Err(_) => Err(nix::errno::Errno::EINVAL),
    }
}

/// The request naming `name` (`None`: the directory itself).
fn encode(name: Option<&OsStr>) -> Option<Request> {
    let mut request = [0; NAME_BYTES];
    let bytes = name.map(OsStr::as_bytes).unwrap_or_default();
    // One byte stays zero: the name ends before it.
    if bytes.len() >= NAME_BYTES || bytes.contains(&0) {
        return None;
    }
    request[..bytes.len()].copy_from_slice(bytes);
    Some(request)
}

/// What a refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// The path is in the mount (now).
    Shown,
    /// The path is not in the mount: whatever the mount showed of it is
    /// forgotten (a mistyped path lands here too).
    Absent,
}

/// Makes the live pchronicle mount at `mount_point` forget what it cached
/// of `rel` (a path inside it; empty for the whole mount) at once.
///
/// Walks to `rel`'s directory without following symlinks and asks there
/// for its last name. A name on the way the kernel remembers wrongly (it
/// was made or removed underneath since) cannot be walked through: the
/// refresh is asked for that name instead, which covers everything below
/// it.
pub fn refresh(mount_point: &Path, rel: &Path) -> Result<Refreshed> {
    let abs = mountpoint::absolute(mount_point)?;
    match mountpoint::state(&abs) {
        MountState::Live => {}
        MountState::NotMounted => {
            return Err(Error::at(
                ErrorCode::NotMounted,
                mount_point,
                "no pchronicle mount is at this path",
            ));
        }
        MountState::Dead => {
            return Err(Error::at(
                ErrorCode::NotMounted,
                mount_point,
                "the mount's daemon is gone; `pchronicle umount` clears it",
            ));
        }
    }
    let mut names = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => {
                return Err(Error::at(
                    ErrorCode::PathInvalid,
                    rel,
                    "name a path inside the mount, relative to its root, without `..`",
                ));
            }
        }
    }
    let root = open_mount_root(&abs, mount_point)?;
    let open = |at: &OwnedFd, name: &OsStr| {
        rustix::fs::openat(
            at,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let asked = match names.split_last() {
        None => ask(&root, None, rel),
        Some((last, through)) => {
            let mut dir = None;
            let mut stopped = None;
            for name in through {
                match open(dir.as_ref().unwrap_or(&root), name) {
                    Ok(sub) => dir = Some(sub),
                    Err(Errno::NOENT | Errno::NOTDIR | Errno::STALE) => {
                        stopped = Some(*name);
                        break;
                    }
                    Err(e) => return Err(Error::io(abs.join(rel), &e.into())),
                }
            }
            ask(
                dir.as_ref().unwrap_or(&root),
                Some(stopped.unwrap_or(last)),
                rel,
            )
        }
    };
    asked?;
    if names.is_empty() {
        return Ok(Refreshed::Shown);
    }
    // Whether the path is there now, as the mount shows it after the
    // refresh (it never shows symlinks).
    match rustix::fs::statat(&root, rel, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(Refreshed::Shown),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(Refreshed::Absent),
        Err(e) => Err(Error::io(abs.join(rel), &e.into())),
    }
}

/// The root of the mount at `abs`, opened without following a symlink,
/// and checked to be a FUSE filesystem.
fn open_mount_root(abs: &Path, mount_point: &Path) -> Result<OwnedFd> {
    let failed = |why: String| Error::at(ErrorCode::RefreshFailed, mount_point, why);
    let root = mountpoint::Pinned::of(abs)
        .and_then(|pinned| pinned.open(OFlags::RDONLY))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => failed(format!(
                "the mount refused this user ({e}); only root and the user the daemon runs as may refresh"
            )),
            _ => Error::io(mount_point, &e),
        })?;
    let fuse = mountpoint::is_fuse(&root).map_err(|e| Error::io(mount_point, &e))?;
    if !fuse {
        return Err(failed("not a FUSE filesystem any more".into()));
    }
    Ok(root)
}

/// Sends one refresh request on the open directory `dir`, then waits
/// until the kernel was told to forget (asking every 2 ms, at most
/// [`KERNEL_WAIT`]).
fn ask(dir: &OwnedFd, name: Option<&OsStr>, rel: &Path) -> Result<()> {
    let failed = |why: String| Error::at(ErrorCode::RefreshFailed, rel, why);
    let refused = |e: Errno| match e {
        Errno::PERM | Errno::ACCESS => {
            failed("only root and the user the daemon runs as may refresh".into())
        }
        Errno::NOTTY | Errno::NOSYS => failed(format!(
            "the mount did not take the request ({e}); a daemon older than this pchronicle?"
        )),
        e => failed(format!("the mount refused the request: {e}")),
    };
    let mut request =
        encode(name).ok_or_else(|| failed("a name is longer than 255 bytes".into()))?;
    // SAFETY: REFRESH is read-write over exactly a `Request`, the buffer
    // handed over; the daemon writes back at most that many bytes.
    unsafe { ioctl(dir, Updater::<REFRESH, Request>::new(&mut request)) }.map_err(refused)?;
    let ticket = u64::from_ne_bytes(request[..8].try_into().expect("8 bytes"));
    let deadline = std::time::Instant::now() + KERNEL_WAIT;
    loop {
        let mut answer = ticket;
        // SAFETY: REFRESH_DONE is read-write over exactly a `u64`.
        unsafe { ioctl(dir, Updater::<REFRESH_DONE, u64>::new(&mut answer)) }.map_err(refused)?;
        if answer == 1 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(failed(
                "the daemon dropped its caches, but the kernel's are still being cleared (a busy directory holds them up); they follow shortly"
                    .into(),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let request = encode(Some(OsStr::new("runs"))).unwrap();
        assert_eq!(decode(&request), Ok(Some("runs")));
        assert_eq!(decode(&encode(None).unwrap()), Ok(None));
        let longest = "x".repeat(NAME_BYTES - 1);
        assert_eq!(
            decode(&encode(Some(OsStr::new(&longest))).unwrap()),
            Ok(Some(longest.as_str()))
        );
        assert!(encode(Some(OsStr::new(&"x".repeat(NAME_BYTES)))).is_none());
        assert!(encode(Some(OsStr::from_bytes(b"a\0b"))).is_none());
        // Bytes after the end, short or non-UTF-8 payloads.
        let mut trailing = [0u8; NAME_BYTES];
        trailing[0] = b'a';
        trailing[5] = b'b';
        assert!(decode(&trailing).is_err());
        assert!(decode(&[0u8; 10]).is_err());
        let mut latin = [0u8; NAME_BYTES];
        latin[0] = 0xff;
        assert!(decode(&latin).is_err());
    }

    #[test]
    fn the_request_number_says_write_and_size() {
        let number = REFRESH as u64;
        assert_eq!(number >> 30, 3, "written to the daemon and read back");
        assert_eq!((number >> 16) & 0x3fff, NAME_BYTES as u64);
        assert_eq!((number >> 8) & 0xff, u64::from(b'p'));
    }
}
