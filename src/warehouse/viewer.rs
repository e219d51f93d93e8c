//! Another user's view of the warehouse: with `--allow-other`, a reader
//! of the mount is not the daemon's user, and sees only what the kernel
//! would let that user see natively. Every operation of a viewed [`Dir`]
//! is checked against the permission bits for that user before it runs.

use std::io;

use rustix::io::Errno;

use super::{Dir, Stat};

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
pub(super) enum Access {
    Read = 4,
    Write = 2,
    Search = 1,
}

impl Viewer {
    /// Gives the calling thread this viewer's credentials (groups, then
    /// gid, then uid, real, effective and saved alike, so the thread
    /// cannot take the daemon's back). Linux keeps credentials per thread
    /// and these are the raw calls, which change this thread only. Needs
    /// the privilege to change them (a daemon running as root).
    pub fn become_on_this_thread(&self) -> io::Result<()> {
        use rustix::process::{Gid, Uid};
        use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
        let groups: Vec<Gid> = self.groups.iter().map(|g| Gid::from_raw(*g)).collect();
        let gid = Gid::from_raw(self.gid);
        let uid = Uid::from_raw(self.uid);
        set_thread_groups(&groups)?;
        set_thread_res_gid(gid, gid, gid)?;
        set_thread_res_uid(uid, uid, uid)?;
        Ok(())
    }

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
    io::Error::from(Errno::ACCESS)
}

impl Dir {
    /// This directory as `viewer` sees it (`None`: as pchronicle's own
    /// user). The viewer must be able to read it, as opening it would
    /// need.
    pub fn viewed_by(mut self, viewer: Option<std::sync::Arc<Viewer>>) -> io::Result<Dir> {
        self.viewer = viewer;
        self.check(&self.stat, Access::Read)?;
        Ok(self)
    }

    pub(super) fn check(&self, stat: &Stat, access: Access) -> io::Result<()> {
        match &self.viewer {
            Some(viewer) if !viewer.may(stat, access) => Err(denied()),
            _ => Ok(()),
        }
    }

    /// Whether this directory is seen as another user (a [`Viewer`]).
    pub fn is_viewed(&self) -> bool {
        self.viewer.is_some()
    }

    /// The user this directory is seen as, if another.
    pub fn viewer(&self) -> Option<&Viewer> {
        self.viewer.as_deref()
    }

    /// Whether this directory's viewer may read the file `stat` (always,
    /// without a viewer), as `EACCES`.
    pub fn check_readable(&self, stat: &Stat) -> io::Result<()> {
        self.check_search()?;
        self.check(stat, Access::Read)
    }

    /// The viewer may reach this directory's entries.
    pub(super) fn check_search(&self) -> io::Result<()> {
        self.check(&self.stat, Access::Search)
    }
}
