//! Directories: opening one, and reading its entries from a snapshot taken
//! at offset 0, so offsets stay valid however the directory changes while
//! it is read; `readdirplus` hands the kernel one reference per entry. A
//! read names the handle `opendir` gave, or none when the kernel opens
//! directories itself (see `unopened.rs`).

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use fuser::{FileAttr, INodeNo};
use nix::errno::Errno;
use parking_lot::Mutex;

use super::unopened::stricter;
use super::{DirEntry, DirectoryReplier, Listed, Opened, WarehouseFs};
use crate::catalog::cache::{FileId, RACY_WINDOW_NS};
use crate::catalog::{Node, NodeKind};
use crate::catalog::{TAGS, VERSIONS};
use crate::fs::FsError;
use crate::fs::attributes::{NO_TTL, node_attr, shown_file, synthetic_attr};
use crate::fs::handles::{DirItem, Handle};
use crate::fs::inodes::{Synthetic, Target};
use crate::fs::views::Caller;

impl WarehouseFs {
    /// Opens the directory `ino`. The kernel may cache its entries; they
    /// are kept from the last `opendir` (`keep_cache`) only while the
    /// directory's kind and stat identity are those its cached listing was
    /// built from (names appear, vanish or are renamed only by changing the
    /// directory's mtime), never within the racy window, and for at most
    /// the TTL: then the kernel reads the entries again with their
    /// attributes (`readdirplus`), which renews every entry it holds in one
    /// request instead of one `lookup` per name (`ls -l` of a polled
    /// directory).
    pub fn opendir(&self, caller: &Caller, ino: u64) -> Result<Opened, FsError> {
        let node = match self.target(ino)?.0 {
            Target::Path(rel) => self.dir_node(&rel)?,
            Target::Synthetic { .. } => return Err(Errno::ENOTDIR.into()),
        };
        let (kind, id) = (node.kind, FileId::of(&node.meta));
        let keep_cache = {
            let mut listed = self.listed.lock();
            let keep = listed.get(&ino).is_some_and(|last| {
                // With a zero TTL nothing a new listing brings would be
                // kept, so the names alone are kept while unchanged.
                let ttl = self.options.attr_ttl;
                (last.kind, last.id) == (kind, id)
                    && (ttl.is_zero() || last.at.elapsed() < ttl)
                    && !id.is_racy()
            });
            if !keep {
                let at = Instant::now();
                listed.insert(ino, Listed { kind, id, at });
            }
            keep
        };
        Ok(Opened {
            fh: self
                .handles
                .add(ino, caller.uid, Handle::Dir(Mutex::new(None)))?,
            keep_cache,
            direct_io: false,
            file: None,
        })
    }

    /// The entries of the directory `ino` from `offset` on, until the
    /// replier is full, read through the handle `fh` or without one. No
    /// references are handed out (plain `readdir`).
    ///
    /// Returns what the read tells of the copy the kernel keeps of the
    /// listing when it reads without a handle (see [`KernelCopy`]).
    pub fn readdir(
        &self,
        ino: u64,
        fh: Option<u64>,
        offset: u64,
        replier: &mut dyn DirectoryReplier,
    ) -> Result<KernelCopy, FsError> {
        self.fill(ino, fh, offset, replier, false)
    }

    /// As [`readdir`](WarehouseFs::readdir), with attributes: each entry
    /// but `.` and `..` hands the kernel a reference, counted once the
    /// replier took it.
    pub fn readdirplus(
        &self,
        ino: u64,
        fh: Option<u64>,
        offset: u64,
        replier: &mut dyn DirectoryReplier,
    ) -> Result<KernelCopy, FsError> {
        self.fill(ino, fh, offset, replier, true)
    }

    fn fill(
        &self,
        ino: u64,
        fh: Option<u64>,
        offset: u64,
        replier: &mut dyn DirectoryReplier,
        hands_over: bool,
    ) -> Result<KernelCopy, FsError> {
        let items = match fh {
            Some(fh) => self.dir_snapshot(ino, fh, offset)?,
            None => self.unopened_snapshot(ino, offset)?,
        };
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, item) in items.iter().enumerate().skip(from) {
            let held = hands_over && item.name != "." && item.name != "..";
            // The very number the item describes (a name given a new
            // number since keeps its old one here, with the old
            // attributes), held from the claim until it is counted, so no
            // forget or sweep drops it in between; one swept since (a big
            // listing numbers more than the table keeps unclaimed) is
            // numbered again by name.
            let child = if !held || self.inodes.claim_number(item.ino) {
                item.ino
            } else {
                match self.inodes.claim(ino, &item.name) {
                    Some(child) => child,
                    None => continue,
                }
            };
            let attr = FileAttr {
                ino: INodeNo(child),
                ..item.attr
            };
            let full = replier.add(DirEntry {
                ino: child,
                offset: i as u64 + 1,
                name: &item.name,
                attr: &attr,
                ttl: item.ttl,
            });
            match (held, full) {
                (true, true) => self.inodes.release(child),
                (true, false) => {
                    self.inodes.remember(child);
                    self.show(child, item.file);
                }
                _ => {}
            }
            if full {
                break;
            }
        }
        if fh.is_some() {
            return Ok(KernelCopy::Unchanged);
        }
        if offset == 0 {
            return Ok(KernelCopy::Begun);
        }
        if from < items.len() {
            return Ok(KernelCopy::Unchanged);
        }
        // The kernel's copy is complete once a read finds nothing more
        // (it fills its cache as replies come, in the reader's own
        // context): only then can a drop be sure to find all of it. Any
        // reader's end says so (the kernel adds to its copy whichever
        // reader's entries come next), so each says how long it may be
        // kept; the earliest drop pending wins.
        let then = self.unopened.done(ino, &items);
        let now = self.kept_copy(ino);
        // The stricter of what was judged when the entries were listed
        // (a directory changed within the racy window then) and now.
        let kept = match then {
            Some(then) => stricter(then, now),
            None => now,
        };
        Ok(KernelCopy::Complete(kept))
    }

    /// How long the kernel may keep its complete copy of the listing of
    /// `ino`: as `kernel_keeps` says of the directory now; no time at all
    /// when it is gone or no longer a directory.
    fn kept_copy(&self, ino: u64) -> Option<Duration> {
        let ttl = self.options.attr_ttl;
        if !ttl.is_zero() {
            // No `stat` needed (see `kernel_keeps`).
            return Some(ttl);
        }
        if self.is_remote() {
            // Never kept (see `kernel_keeps`): no store round trip on a
            // serving thread to learn it.
            return Some(Duration::ZERO);
        }
        let now = match self.target(ino) {
            Ok((Target::Path(rel), _)) => self.dir_node(&rel).ok().map(|node| (rel, node)),
            _ => None,
        };
        match now {
            Some((rel, node)) => self.kernel_keeps(&rel, node.kind, FileId::of(&node.meta)),
            None => Some(Duration::ZERO),
        }
    }

    /// The snapshot a read without a handle at `offset` is served from:
    /// the directory's held one, else (offset 0, or none held) the
    /// directory as of now, held from then on (from offset 0 in place of
    /// any other; else unless another reader began one meanwhile).
    fn unopened_snapshot(&self, ino: u64, offset: u64) -> Result<Arc<Vec<DirItem>>, FsError> {
        if offset != 0
            && let Some(items) = self.unopened.get(ino)
        {
            return Ok(items);
        }
        let (target, parent) = self.target(ino)?;
        let Target::Path(rel) = target else {
            return Err(Errno::ENOTDIR.into());
        };
        let node = self.dir_node(&rel)?;
        // Judged before listing: a listing that outlasts the racy window
        // was still begun within it.
        let keeps = self.kernel_keeps(&rel, node.kind, FileId::of(&node.meta));
        let items = self.shared_snapshot(ino, parent, &rel, &node)?;
        self.unopened
            .hold(ino, Arc::clone(&items), keeps, offset == 0);
        Ok(items)
    }

    /// How long the kernel may keep a listing it caches itself, beyond
    /// what the directory's mtime tells it: the TTL; with a zero TTL (the
    /// kernel then asks for the mtime at every read from the start),
    /// nothing for a leaf or a leaf's past, which change without it (they
    /// show the leaf's own mtime), nor for a remote directory (whose mtime
    /// is that of its newest object: a new prefix or a removed object
    /// leaves it), and the racy window for a directory changed within it;
    /// else as long as the mtime is unchanged.
    fn kernel_keeps(&self, rel: &Path, kind: NodeKind, id: FileId) -> Option<Duration> {
        let ttl = self.options.attr_ttl;
        let past = rel
            .components()
            .any(|c| c.as_os_str() == VERSIONS || c.as_os_str() == TAGS);
        if !ttl.is_zero() {
            Some(ttl)
        } else if kind == NodeKind::Dataset || past || self.is_remote() {
            Some(Duration::ZERO)
        } else if id.is_racy() {
            Some(Duration::from_nanos(RACY_WINDOW_NS as u64))
        } else {
            None
        }
    }

    /// The entries of a directory node: `.`, `..`, the synthetic files,
    /// then `list` (for a dataset leaf, the names of its past).
    fn dir_items(&self, ino: u64, parent: u64, rel: &Path) -> Result<Vec<DirItem>, FsError> {
        let own = self.dir_node(rel)?;
        let own_attr = node_attr(ino, &own);
        let ttl = self.options.attr_ttl;
        let mut items = vec![
            DirItem {
                ino,
                name: ".".into(),
                attr: own_attr,
                ttl,
                file: None,
            },
            DirItem {
                ino: parent,
                name: "..".into(),
                attr: FileAttr {
                    ino: INodeNo(parent),
                    ..own_attr
                },
                ttl,
                file: None,
            },
        ];
        for which in Synthetic::ALL {
            if !which.belongs_in(own.kind) {
                continue;
            }
            let child = self.child_ino(ino, which.name())?;
            // A listing must not pay for rolling up the whole subtree: the
            // version the number holds, trusted for what is left of the TTL
            // since it was last checked, else length 0 and no TTL (the real
            // length is computed on `stat`).
            let version = self.version(child).filter(|_| self.keeps_any_synthetics());
            let (attr, ttl) = match version {
                Some(version) => (
                    version.attr(child, &own.meta),
                    version.fresh_for(self.options.attr_ttl),
                ),
                None => (
                    synthetic_attr(child, 0, &own.meta, SystemTime::now()),
                    NO_TTL,
                ),
            };
            items.push(DirItem {
                ino: child,
                name: which.name().into(),
                attr,
                ttl,
                file: None,
            });
        }
        if own.kind == NodeKind::Dataset {
            // A leaf's past (`.versions`, `.tags`); a leaf whose past
            // cannot be read lists without it.
            for (name, node) in self.catalog().past_names(rel).unwrap_or_default() {
                let child = self.node_ino(ino, name, &node)?;
                items.push(DirItem {
                    ino: child,
                    name: name.to_string(),
                    attr: node_attr(child, &node),
                    ttl,
                    file: None,
                });
            }
            return Ok(items);
        }
        let (listing, metas) = self.catalog().list_with_meta(rel)?;
        items.reserve(listing.entries.len());
        for (entry, meta) in listing.entries.iter().zip(&metas) {
            let name = entry.name();
            // A real file named like a synthetic one is shadowed by it.
            if Synthetic::from_name(name).is_some() {
                continue;
            }
            let node = Node {
                kind: entry.kind(),
                meta: *meta,
            };
            let child = self.node_ino(ino, name, &node)?;
            items.push(DirItem {
                ino: child,
                name: name.to_string(),
                attr: node_attr(child, &node),
                ttl,
                file: shown_file(&node),
            });
        }
        Ok(items)
    }

    /// The directory snapshot a read at `offset` is served from: taken
    /// afresh at offset 0, else the one the handle holds.
    fn dir_snapshot(&self, ino: u64, fh: u64, offset: u64) -> Result<Arc<Vec<DirItem>>, FsError> {
        let handle = self.handles.get(fh)?;
        let Handle::Dir(slot) = &*handle else {
            return Err(Errno::EBADF.into());
        };
        let mut slot = slot.lock();
        match &*slot {
            Some(items) if offset != 0 => Ok(Arc::clone(items)),
            _ => {
                let (target, parent) = self.target(ino)?;
                let Target::Path(rel) = target else {
                    return Err(Errno::ENOTDIR.into());
                };
                let node = self.dir_node(&rel)?;
                let items = self.shared_snapshot(ino, parent, &rel, &node)?;
                *slot = Some(Arc::clone(&items));
                Ok(items)
            }
        }
    }

    /// The entries of the directory `ino` as of now: the snapshot another
    /// handle took when it was taken within the TTL and the directory's
    /// kind and stat identity are still those it was taken from (what the
    /// kernel itself would keep for as long), else a new one.
    fn shared_snapshot(
        &self,
        ino: u64,
        parent: u64,
        rel: &Path,
        node: &Node,
    ) -> Result<Arc<Vec<DirItem>>, FsError> {
        let (kind, id) = (node.kind, FileId::of(&node.meta));
        let ttl = self.options.attr_ttl;
        let reused = self.snapshots.lock().get(&ino).and_then(|shared| {
            let fresh = (shared.kind, shared.id) == (kind, id)
                && shared.at.elapsed() < ttl
                && !id.is_racy();
            shared.items.upgrade().filter(|_| fresh)
        });
        if let Some(items) = reused {
            return Ok(items);
        }
        let at = Instant::now();
        let items = Arc::new(self.dir_items(ino, parent, rel)?);
        let shared = Shared {
            kind,
            id,
            at,
            items: Arc::downgrade(&items),
        };
        self.snapshots.lock().insert(ino, shared);
        Ok(items)
    }
}

/// What a directory read without a handle tells of the copy the kernel
/// keeps of the listing (it caches the entries itself, see `unopened.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCopy {
    /// Nothing: a read through a handle (`opendir` said what the kernel
    /// keeps), or one in the middle of a listing.
    Unchanged,
    /// A read from offset 0: the kernel begins a new copy (it reads from a
    /// complete one, else, unless another reader completes one
    /// meanwhile). A drop pending waits until the new copy may be
    /// complete: one landing while it fills would leave it never complete.
    Begun,
    /// A read found the end: the kernel's copy is complete. Past the time
    /// given it must be told to drop it, so what the directory's mtime
    /// does not tell it (a leaf's past, a change within the racy window)
    /// shows within the TTL, and an `ls -l` after the TTL renews every
    /// entry's attributes in one `readdirplus` instead of one `lookup` per
    /// name. `None`: as long as the mtime is unchanged.
    Complete(Option<Duration>),
}

/// A directory snapshot handles share (see `shared_snapshot`); held only
/// by the handles reading it.
pub(super) struct Shared {
    kind: NodeKind,
    id: FileId,
    at: Instant,
    items: Weak<Vec<DirItem>>,
}
