//! Open file and directory handles.
//!
//! A handle is what `open`/`opendir` hand the kernel and every later
//! `read`/`readdir` names: a synthetic file's bytes as rendered at open
//! (so one reader sees one consistent render however it seeks), a
//! leaf's records stream (one Snapshot of the leaf, however it seeks), a
//! warehouse file opened as the requester, or a directory's entries as of
//! its last read from offset 0 (so offsets stay valid however the
//! directory changes meanwhile). Handles live until `release`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fuser::FileAttr;
use nix::errno::Errno;
use parking_lot::Mutex;

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

/// The handles open on a mount, by number, each with the inode it was
/// opened on.
pub struct Handles {
    open: Mutex<HashMap<u64, (u64, Arc<Handle>)>>,
    next: AtomicU64,
}

impl Default for Handles {
    fn default() -> Handles {
        Handles::new()
    }
}

impl Handles {
    pub fn new() -> Handles {
        Handles {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// Keeps `handle`, opened on inode `ino`, and returns its number
    /// (never 0, never reused).
    pub fn add(&self, ino: u64, handle: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.open.lock().insert(fh, (ino, Arc::new(handle)));
        fh
    }

    /// The handle numbered `fh`; `EBADF` once released or never opened.
    pub fn get(&self, fh: u64) -> Result<Arc<Handle>, Errno> {
        let open = self.open.lock();
        open.get(&fh)
            .map(|(_, h)| Arc::clone(h))
            .ok_or(Errno::EBADF)
    }

    /// Some handle open on inode `ino` (`fstat` of a file replaced since,
    /// which the kernel asks without naming the handle).
    pub fn any_of(&self, ino: u64) -> Option<Arc<Handle>> {
        let open = self.open.lock();
        let found = open.values().find(|(of, _)| *of == ino);
        found.map(|(_, h)| Arc::clone(h))
    }

    /// Drops a handle; a read already holding it finishes first.
    pub fn remove(&self, fh: u64) {
        self.open.lock().remove(&fh);
    }

    /// How many handles are open.
    pub fn len(&self) -> usize {
        self.open.lock().len()
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
