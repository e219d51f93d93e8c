//! Kernel passthrough: the kernel reads a warehouse file itself.
//!
//! On kernels that offer it (Linux 6.9 and later, `FUSE_PASSTHROUGH`) and
//! for a daemon allowed to register files with the kernel (it needs
//! `CAP_SYS_ADMIN`), an open warehouse file is handed to the kernel as the
//! "backing file" of the handle: reads, `mmap` and splices then go straight
//! to it and its own page cache, and no read request reaches the daemon.
//! The file handed over is a descriptor the daemon opened and checked
//! (below the root, never through a symlink, a regular file, as the
//! requester): the first opener's, shared by every handle that opened the
//! same file, so passthrough serves exactly the bytes a daemon read would.
//!
//! The kernel holds one backing file per inode: while one handle of an
//! inode reads through backing file A, another handle of it may not use B.
//! Each registration is therefore shared by every handle of its inode that
//! opened the same file underneath, kept until the last of them is
//! released. A file replaced underneath gets a new inode number at its
//! next lookup (`WarehouseFs::node_ino`), so its handles never meet the
//! old file's; an open that raced with that is answered `ESTALE` (the
//! kernel looks the name up again). Where the kernel refuses registration
//! outright (no capability), passthrough is given up for the mount and
//! files are served as before; any other refusal (a file on a filesystem
//! stacked too deep) is answered by the daemon for that handle only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use fuser::BackingId;
use nix::errno::Errno;
use parking_lot::Mutex;

use crate::error::ErrorCode;

/// How one open warehouse file is read.
pub enum Route {
    /// By the kernel, through this registration.
    Kernel(Arc<BackingId>),
    /// By the daemon, bypassing the page cache (in a passthrough mount,
    /// where the inode may also have passthrough handles).
    DaemonDirect,
    /// By the daemon, through the page cache (passthrough is off).
    Daemon,
    /// Not at all: the inode reads through another file; the open is
    /// answered `ESTALE` and the kernel looks the name up again.
    Stale,
}

/// A file registered with the kernel for one inode.
struct Registered {
    /// The file underneath, as (device, inode).
    file: (u64, u64),
    id: Weak<BackingId>,
}

/// The mount's passthrough registrations.
#[derive(Default)]
pub struct Passthrough {
    /// The kernel agreed to passthrough at `init`, and it was not given up.
    on: AtomicBool,
    /// A registration succeeded once: later refusals are per file.
    worked: AtomicBool,
    by_inode: Mutex<HashMap<u64, Registered>>,
    /// The registration each open handle reads through, until `release`.
    held: Mutex<HashMap<u64, (u64, Arc<BackingId>)>>,
}

impl Passthrough {
    /// Passthrough is used from now on (the kernel agreed at `init`).
    pub fn enable(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// How handle `fh` of inode `ino`, holding the file `file` underneath,
    /// is read; `register` hands the descriptor to the kernel.
    pub fn route(
        &self,
        ino: u64,
        fh: u64,
        file: (u64, u64),
        register: impl FnOnce() -> Option<std::io::Result<BackingId>>,
    ) -> Route {
        if !self.is_on() {
            return Route::Daemon;
        }
        let mut by_inode = self.by_inode.lock();
        let live = by_inode
            .get(&ino)
            .and_then(|r| Some((r.file, r.id.upgrade()?)));
        let id = match live {
            Some((same, id)) if same == file => id,
            // The inode reads through another file until its handles go
            // (its name was given a new number when that file was
            // replaced; this open raced with it): look the name up again.
            Some(_) => return Route::Stale,
            None => match register() {
                Some(Ok(id)) => {
                    self.worked.store(true, Ordering::Relaxed);
                    let id = Arc::new(id);
                    by_inode.insert(
                        ino,
                        Registered {
                            file,
                            id: Arc::downgrade(&id),
                        },
                    );
                    id
                }
                Some(Err(e)) => return self.refused(&e),
                None => return Route::DaemonDirect,
            },
        };
        drop(by_inode);
        self.held.lock().insert(fh, (ino, Arc::clone(&id)));
        Route::Kernel(id)
    }

    /// The kernel refused a registration: for the whole mount when it
    /// never accepted one and refuses the call itself, else for this file.
    fn refused(&self, e: &std::io::Error) -> Route {
        let errno = Errno::from_raw(e.raw_os_error().unwrap_or(0));
        // EOPNOTSUPP is about the file (one its filesystem cannot back).
        let whole_mount = matches!(errno, Errno::EPERM | Errno::ENOTTY | Errno::ENOSYS);
        if whole_mount && !self.worked.load(Ordering::Relaxed) {
            if self.on.swap(false, Ordering::Relaxed) {
                log::warn!(
                    "warning[{}]: the kernel refused passthrough ({e}); the daemon reads every file itself",
                    ErrorCode::PassthroughRefused.as_str()
                );
            }
            return Route::Daemon;
        }
        log::debug!("passthrough refused for one file ({e}); the daemon reads it");
        Route::DaemonDirect
    }

    /// Handle `fh` was released: its registration goes with its last handle.
    pub fn release(&self, fh: u64) {
        let Some((ino, id)) = self.held.lock().remove(&fh) else {
            return;
        };
        let mut by_inode = self.by_inode.lock();
        // Dropped under the lock, so no open of this inode sees the
        // registration alive while the kernel closes it.
        drop(id);
        if by_inode.get(&ino).is_some_and(|r| r.id.strong_count() == 0) {
            by_inode.remove(&ino);
        }
    }
}
