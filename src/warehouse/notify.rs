//! Change notification on local directories (inotify), for callers that
//! keep an answer for as long as nothing below it changes (see
//! `catalog::watch`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::inotify::WatchFlags;

use super::{Backend, Dir};

/// Filesystems whose every change, whoever makes it, the kernel reports to
/// a watch: local disk filesystems and memory ones. Network filesystems
/// (changes made by another host go unreported), FUSE and object stores
/// are not among them.
const NOTIFYING: &[u64] = &[
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x0102_1994, // tmpfs
    0x2FC1_2FC1, // zfs
    0xF2F5_2010, // f2fs
    0xCA45_1A4E, // bcachefs
    0x794C_7630, // overlayfs
];

impl Dir {
    /// Whether every change below this directory is reported to a watch
    /// (see [`NOTIFYING`]); never for a remote directory.
    pub fn notifies_changes(&self) -> bool {
        match &self.backend {
            Backend::Local(fd) => {
                rustix::fs::fstatfs(fd).is_ok_and(|fs| NOTIFYING.contains(&(fs.f_type as u64)))
            }
            #[cfg(feature = "remote")]
            Backend::Remote(_) => false,
        }
    }

    /// Adds a watch on this open directory to `inotify`: the directory
    /// itself, reached through its descriptor, never what its path names
    /// by now. Gives the watch descriptor.
    pub fn add_watch(&self, inotify: BorrowedFd<'_>, flags: WatchFlags) -> io::Result<i32> {
        let fd = self.fd()?;
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        Ok(rustix::fs::inotify::add_watch(
            inotify,
            path,
            flags | WatchFlags::ONLYDIR,
        )?)
    }
}
