//! Open file and directory handles.
//!
//! A handle is what `open`/`opendir` hand the kernel and every later
//! `read`/`readdir` names: a synthetic file's bytes as rendered at open
//! (so one reader sees one consistent render however it seeks), a
//! leaf's records stream (one Snapshot of the leaf, however it seeks), a
//! warehouse file opened as the requester, or a directory's entries as of
//! its last read from offset 0 (so offsets stay valid however the
//! directory changes meanwhile). Handles live until `release`.
//!
//! Handles are bounded per user ([`HandleLimits`]): a user who opens
//! files until refused gets `EMFILE` from this bound, long before the
//! daemon runs out of descriptors, so other users (and the daemon's own
//! walks, Lance and its object-store connections) keep working. Handles
//! holding a descriptor are bounded together too, below the daemon's own
//! limit less a reserve, with `ENFILE`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fuser::FileAttr;
use nix::errno::Errno;
use parking_lot::Mutex;

use crate::error::{Error, ErrorCode};
use crate::fs::FsError;
use crate::warehouse::Blob;

/// One entry of a directory handle's snapshot.
pub struct DirItem {
    pub ino: u64,
    pub name: String,
    pub attr: FileAttr,
    pub ttl: Duration,
    /// The file underneath a regular-file entry (device, inode).
    pub file: Option<(u64, u64)>,
}

/// What an open handle holds.
pub enum Handle {
    /// A synthetic file, rendered at `open`.
    Bytes(Arc<[u8]>),
    /// A warehouse file, read with `pread`.
    File(Blob),
    /// A leaf's `.records`, produced as it is read.
    Records(crate::extract::stream::RecordsStream),
    /// A directory: its entries as of the last read from offset 0.
    Dir(Mutex<Option<Arc<Vec<DirItem>>>>),
}

/// How many handles may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleLimits {
    /// Handles of one user (of any kind).
    pub per_user: usize,
    /// Handles holding a descriptor, of all users together.
    pub descriptors: usize,
}

impl Default for HandleLimits {
    fn default() -> Self {
        HandleLimits {
            per_user: 4096,
            descriptors: usize::MAX,
        }
    }
}

/// Descriptors the daemon keeps for itself whatever its users hold: its
/// walks, the count cache, Lance's files and object-store connections.
/// At least this many, or an eighth of its limit when that is more.
const RESERVED_DESCRIPTORS: u64 = 1024;

impl HandleLimits {
    /// The limits of a daemon: its soft descriptor limit raised to the
    /// hard one first, handles holding descriptors bounded below it by a
    /// reserve, and `per_user` handles of each user (at most half of the
    /// rest, so two users can never shut out a third).
    pub fn for_daemon(per_user: usize) -> HandleLimits {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if limit.current != limit.maximum {
            let raised = rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => limit = raised,
                Err(e) => log::warn!("the descriptor limit could not be raised: {e}"),
            }
        }
        let soft = limit.current.unwrap_or(u64::MAX);
        let reserve = (soft / 8).max(RESERVED_DESCRIPTORS);
        let descriptors = usize::try_from(soft.saturating_sub(reserve)).unwrap_or(usize::MAX);
        HandleLimits {
            per_user: per_user.min((descriptors / 2).max(1)),
            descriptors,
        }
    }
}

/// The handles open on a mount, by number, each with the inode it was
/// opened on and the user who opened it.
pub struct Handles {
    open: Mutex<Open>,
    next: AtomicU64,
    limits: HandleLimits,
}

#[derive(Default)]
struct Open {
    by_number: HashMap<u64, Kept>,
    per_user: HashMap<u32, usize>,
    descriptors: usize,
}

struct Kept {
    ino: u64,
    uid: u32,
    handle: Arc<Handle>,
}

impl Handle {
    /// Whether the handle holds one of the daemon's descriptors.
    fn holds_descriptor(&self) -> bool {
        matches!(self, Handle::File(file) if file.local().is_some())
    }
}

impl Default for Handles {
    fn default() -> Handles {
        Handles::new(HandleLimits::default())
    }
}

impl Handles {
    pub fn new(limits: HandleLimits) -> Handles {
        Handles {
            open: Mutex::new(Open::default()),
            next: AtomicU64::new(1),
            limits,
        }
    }

    /// Keeps `handle`, opened on inode `ino` by user `uid`, and returns
    /// its number (never 0, never reused); refused past the limits.
    pub fn add(&self, ino: u64, uid: u32, handle: Handle) -> Result<u64, FsError> {
        let mut open = self.open.lock();
        let mine = open.per_user.get(&uid).copied().unwrap_or(0);
        if mine >= self.limits.per_user {
            return Err(Error::new(
                ErrorCode::HandleLimit,
                format!(
                    "user {uid} holds {mine} open files and directories of the mount, the most one user may (--max-handles-per-user)"
                ),
            )
            .into());
        }
        let descriptor = handle.holds_descriptor();
        if descriptor && open.descriptors >= self.limits.descriptors {
            let mut refused = Error::new(
                ErrorCode::HandleLimit,
                format!(
                    "{} open files hold descriptors, the most the daemon keeps short of its own limit",
                    open.descriptors
                ),
            );
            refused.os_error = Some(libc::ENFILE);
            return Err(refused.into());
        }
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        *open.per_user.entry(uid).or_default() += 1;
        open.descriptors += usize::from(descriptor);
        let handle = Arc::new(handle);
        open.by_number.insert(fh, Kept { ino, uid, handle });
        Ok(fh)
    }

    /// The handle numbered `fh`; `EBADF` once released or never opened.
    pub fn get(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        let open = self.open.lock();
        open.by_number
            .get(&fh)
            .map(|kept| Arc::clone(&kept.handle))
            .ok_or(Errno::EBADF)
    }

    /// Some handle open on inode `ino` (`fstat` of a file replaced since,
    /// which the kernel asks without naming the handle).
    pub fn any_of(&self, ino: u64) -> Option<Arc<Handle>> {
        let open = self.open.lock();
        let found = open.by_number.values().find(|kept| kept.ino == ino);
        found.map(|kept| Arc::clone(&kept.handle))
    }

    /// Drops a handle; a read already holding it finishes first.
    pub fn remove(&self, fh: u64) {
        let mut open = self.open.lock();
        let Some(kept) = open.by_number.remove(&fh) else {
            return;
        };
        if let Some(mine) = open.per_user.get_mut(&kept.uid) {
            *mine -= 1;
            if *mine == 0 {
                open.per_user.remove(&kept.uid);
            }
        }
        open.descriptors -= usize::from(kept.handle.holds_descriptor());
        drop(open);
        // The handle itself (a file, a stream) is closed outside the lock.
        drop(kept);
    }

    /// How many handles are open.
    pub fn len(&self) -> usize {
        self.open.lock().by_number.len()
    }

    /// How many handles user `uid` holds.
    pub fn of_user(&self, uid: u32) -> usize {
        self.open.lock().per_user.get(&uid).copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads up to `size` bytes at `offset`, retrying short reads until EOF.
pub fn pread(file: &Blob, offset: u64, size: u32) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; size as usize];
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes() -> Handle {
        Handle::Bytes(Arc::from(&b"x"[..]))
    }

    #[test]
    fn one_user_at_the_bound_leaves_others_their_handles() {
        let handles = Handles::new(HandleLimits {
            per_user: 3,
            descriptors: usize::MAX,
        });
        let mine: Vec<u64> = (0..3)
            .map(|_| handles.add(1, 1000, bytes()).unwrap())
            .collect();
        let refused = handles.add(1, 1000, bytes()).unwrap_err();
        assert_eq!(refused.raw_errno(), libc::EMFILE);
        assert_eq!(refused.code(), Some(ErrorCode::HandleLimit));
        assert!(handles.add(1, 1001, bytes()).is_ok(), "another user");
        assert!(handles.add(1, 0, bytes()).is_ok(), "root");
        handles.remove(mine[0]);
        assert!(
            handles.add(1, 1000, bytes()).is_ok(),
            "one closed, one more"
        );
        assert_eq!(handles.of_user(1000), 3);
    }

    #[test]
    fn descriptors_are_bounded_across_users() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = || Handle::File(Blob::Local(std::fs::File::open(&path).unwrap()));
        let handles = Handles::new(HandleLimits {
            per_user: 100,
            descriptors: 2,
        });
        handles.add(1, 1, file()).unwrap();
        handles.add(1, 2, file()).unwrap();
        assert_eq!(
            handles.add(1, 3, file()).unwrap_err().raw_errno(),
            libc::ENFILE
        );
        assert!(handles.add(1, 3, bytes()).is_ok(), "no descriptor held");
    }
}
