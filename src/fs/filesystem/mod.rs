//! The warehouse as a filesystem, without the kernel protocol.
//!
//! [`WarehouseFs`] answers every operation the mount serves (lookup,
//! getattr, open, read, opendir, readdir, readdirplus, release, forget,
//! statfs, xattrs, access) with a `Result<_, FsError>`; the protocol layer
//! ([`super::fuse`]) only decodes requests, makes one call here and
//! replies. So everything below can be driven, and is tested, without
//! `/dev/fuse`.
//!
//! Nothing here lists, classifies or counts. A directory node's entries are
//! `Catalog::list_with_meta` plus the two synthetic files; a dataset leaf
//! is a directory node holding only those two; a regular file is read
//! straight from the warehouse with `pread`. `.stats` and `.sources` are
//! `Catalog::stats(..).to_json()` and `Catalog::open(..).sources_jsonl()`,
//! the same calls and the same bytes as `pchronicle stats --json` and
//! `pchronicle ls --sources --json`.
//!
//! Caching, kernel side: names and attributes of warehouse paths are
//! cached for the attribute TTL; a synthetic file's number stands for one
//! content, cached like a file's (`versions`), except under `allow_other`
//! or a zero TTL, where it has a zero TTL and direct I/O and every `stat`
//! and `open` asks the daemon. Daemon side: a rendered synthetic file is
//! reused for at most the attribute TTL ([`super::render`]), and the
//! catalog's own refresh cache answers unchanged directories and files
//! from memory after a stat. A regular file read by the daemon keeps its
//! page cache across opens only while its identity (size, mtime, ctime,
//! inode) is unchanged; one read through kernel passthrough uses the
//! file's own page cache.
//!
//! Nothing that would change the warehouse is answered here: the mount is
//! read-only, so the kernel refuses every write itself.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use fuser::FileAttr;
use nix::errno::Errno;
use parking_lot::Mutex;

use super::attributes::{NO_TTL, node_attr, shown_file, synthetic_attr};
use super::handles::{Handle, HandleLimits, Handles, pread};
use super::inodes::{InodeTable, Synthetic, Target};
use super::render::{RenderCounts, Renders};
use super::views::{Caller, Views};
use super::{FsError, xattrs};

mod answers;
mod directory;
mod extras;
mod refresh;
mod synthetic;
mod unopened;
mod versions;

use crate::catalog::cache::FileId;
use crate::catalog::{Catalog, Node, NodeKind};
use crate::extract::stream::{Producers, RecordsStream};
use crate::extract::{Plan, Selection, Shape};
use crate::warehouse::Stat;

/// Times a lookup describes a name whose number is forgotten meanwhile.
const LOOKUP_TRIES: usize = 4;

/// `.records` streams producing at once; past it the least recently read
/// one pauses (and resumes from a checkpoint when read again).
const RECORDS_PRODUCERS: usize = 32;
/// `.records` streams of one user producing at once; past it that user's
/// least recently read one pauses, so one user's streams (each holding a
/// scan's read-ahead) cannot take every producer from the others.
const RECORDS_PRODUCERS_PER_USER: usize = 8;
pub use answers::{DirEntry, DirectoryReplier, Entry, FsStats, Opened, ReadData, XattrData};
pub use directory::KernelCopy;
pub use refresh::Forget;

/// How the mount presents the catalog.
#[derive(Debug, Clone)]
pub struct FsOptions {
    /// How long the kernel may cache names and attributes of warehouse
    /// paths, and how long a rendered synthetic file is reused.
    pub attr_ttl: Duration,
    /// How long the kernel may remember that a name does not exist (zero:
    /// every lookup of a missing name asks the daemon).
    pub negative_ttl: Duration,
    /// Rendered synthetic files kept for reuse within the TTL: at most this
    /// many, holding at most `render_cache_bytes` together (a larger one is
    /// not kept).
    pub render_cache_entries: usize,
    pub render_cache_bytes: usize,
    /// Other users may read the mount (`allow_other`): two readers may
    /// see different bytes in one synthetic file, which is then never
    /// served from the shared page cache.
    pub shared: bool,
    /// How many handles one user, and all of them holding descriptors,
    /// may have open.
    pub handle_limits: HandleLimits,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            attr_ttl: Duration::from_secs(1),
            negative_ttl: Duration::ZERO,
            render_cache_entries: 256,
            render_cache_bytes: 4 << 20,
            shared: false,
            handle_limits: HandleLimits::default(),
        }
    }
}

/// The warehouse as a filesystem.
pub struct WarehouseFs {
    views: Views,
    inodes: InodeTable,
    options: FsOptions,
    handles: Handles,
    renders: Renders,
    /// The inode table's sweep count when `listed` and `snapshots` were
    /// last pruned to its numbers.
    pruned_at: AtomicU64,
    /// The threads producing `.records` streams, bounded across handles.
    producers: Arc<Producers>,
    /// Per directory inode: what its listing was last built from (its kind
    /// and its own stat identity), so an unchanged directory's entries can
    /// stay in the kernel's cache across `opendir`s.
    listed: Mutex<HashMap<u64, Listed>>,
    /// Per directory inode: the entries last read from offset 0, shared
    /// by every handle that reads it again within the TTL while the
    /// directory is unchanged (one copy, however many handles hold it).
    snapshots: Mutex<HashMap<u64, directory::Shared>>,
    /// The snapshots being read without a handle.
    unopened: unopened::Unopened,
    /// Per synthetic file inode: the one content it holds (see `versions`).
    versions: versions::Versions,
    /// The names the kernel was told do not exist, most recent ones (see
    /// `refresh`).
    negatives: Mutex<lru::LruCache<(u64, Box<str>), ()>>,
    /// The root as last seen: what a remote mount shows of its root while
    /// the store cannot be reached (the mount stays; its contents fail).
    root_seen: Mutex<Option<Node>>,
}

/// Negative answers remembered for `refresh`.
const NEGATIVES_KEPT: usize = 4096;

/// What a directory's listing was last built from, and when.
#[derive(Clone, Copy)]
struct Listed {
    kind: NodeKind,
    id: FileId,
    at: Instant,
}

impl WarehouseFs {
    pub fn new(catalog: Arc<Catalog>, options: FsOptions) -> WarehouseFs {
        WarehouseFs {
            views: Views::new(catalog),
            inodes: InodeTable::new(),
            versions: versions::Versions::new(
                options
                    .render_cache_entries
                    .saturating_mul(versions::PER_RENDER_KEPT),
                options.render_cache_bytes,
            ),
            renders: Renders::new(
                options.attr_ttl,
                options.render_cache_entries,
                options.render_cache_bytes,
            ),
            handles: Handles::new(options.handle_limits),
            options,
            producers: Producers::new(RECORDS_PRODUCERS, RECORDS_PRODUCERS_PER_USER),
            pruned_at: AtomicU64::new(0),
            listed: Mutex::new(HashMap::new()),
            snapshots: Mutex::new(HashMap::new()),
            unopened: unopened::Unopened::new(),
            negatives: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(NEGATIVES_KEPT).expect("not zero"),
            )),
            root_seen: Mutex::new(None),
        }
    }

    /// The daemon's own catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.views.own().catalog
    }

    /// How many handles are open (released ones are gone).
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// How many directory snapshots are held for readers without a handle
    /// (each until read to the end).
    pub fn unopened_listings(&self) -> usize {
        self.unopened.len()
    }

    /// Renders of synthetic files so far (see [`RenderCounts`]).
    pub fn render_counts(&self) -> RenderCounts {
        self.renders.counts()
    }

    /// How many inode numbers the kernel may hold.
    pub fn known_inodes(&self) -> usize {
        self.inodes.len()
    }

    /// `name` in the directory `parent`, counted as one more reference the
    /// kernel holds once the entry is returned. A name that does not exist
    /// is a negative entry when the mount has a negative TTL.
    pub fn lookup(&self, caller: &Caller, parent: u64, name: &OsStr) -> Result<Entry, FsError> {
        // A name that is not UTF-8 never exists in the mount.
        let Some(name) = name.to_str() else {
            return self.absent(caller, parent, None, Errno::ENOENT.into());
        };
        // The number claimed is the one the entry describes. It is held
        // from here until it is counted, so no forget or sweep drops it in
        // between; one dropped before the claim is described again.
        for _ in 0..LOOKUP_TRIES {
            let entry = match self.entry_of(caller, parent, name) {
                Ok(entry) => entry,
                Err(error) => return self.absent(caller, parent, Some(name), error),
            };
            let ino = entry.attr.ino.0;
            if self.inodes.claim_number(ino) {
                self.inodes.remember(ino);
                return Ok(entry);
            }
        }
        Err(Errno::ENOENT.into())
    }

    /// A lookup of `name` in `parent` that failed with `error`: a
    /// negative entry for a name that does not exist, when the mount has a
    /// negative TTL and the caller sees the warehouse as the daemon does
    /// (the kernel shares a negative entry among all users: one user's
    /// answer must not hide a name from the others). The names answered
    /// so are noted, so a refresh can make the kernel forget them.
    fn absent(
        &self,
        caller: &Caller,
        parent: u64,
        name: Option<&str>,
        error: FsError,
    ) -> Result<Entry, FsError> {
        let ttl = self.options.negative_ttl;
        if error.raw_errno() != libc::ENOENT || ttl.is_zero() || !self.views.is_own(caller) {
            return Err(error);
        }
        if let Some(name) = name {
            self.negatives.lock().put((parent, Box::from(name)), ());
        }
        Ok(Entry::negative(ttl))
    }

    fn entry_of(&self, caller: &Caller, parent: u64, name: &str) -> Result<Entry, FsError> {
        let Target::Path(parent_rel) = self.target(parent)?.0 else {
            return Err(Errno::ENOTDIR.into());
        };
        let ttl = self.options.attr_ttl;
        if let Some(which) = Synthetic::from_name(name) {
            let owner = self.synthetic_owner(&parent_rel, which)?;
            let ino = self.child_ino(parent, name)?;
            if which == Synthetic::Records {
                return Ok(Entry {
                    attr: synthetic_attr(ino, 0, &owner.meta, SystemTime::now()),
                    attr_ttl: NO_TTL,
                    entry_ttl: ttl,
                });
            }
            let view = self.views.of(caller)?;
            let bytes = self.synthetic_bytes(&view, ino, which, &parent_rel)?;
            let current = if self.keeps_synthetics(&view) {
                self.current_version(parent, name, ino, Arc::clone(&bytes))?
            } else {
                None
            };
            if let Some((ino, version)) = current {
                return Ok(Entry {
                    attr: version.attr(ino, &owner.meta),
                    attr_ttl: ttl,
                    entry_ttl: ttl,
                });
            }
            // A synthetic file exists as long as its directory does, so
            // its name may be cached; its attributes (its length) never are.
            return Ok(Entry {
                attr: synthetic_attr(ino, bytes.len() as u64, &owner.meta, SystemTime::now()),
                attr_ttl: NO_TTL,
                entry_ttl: ttl,
            });
        }
        // The catalog refuses names inside a leaf, the hidden state
        // directory, symlinks and special files.
        let rel: PathBuf = if parent_rel.as_os_str().is_empty() {
            PathBuf::from(name)
        } else {
            parent_rel.join(name)
        };
        let node = self.node(&rel)?;
        let ino = self.node_ino(parent, name, &node)?;
        self.show(ino, shown_file(&node));
        Ok(Entry {
            attr: node_attr(ino, &node),
            attr_ttl: ttl,
            entry_ttl: ttl,
        })
    }

    /// Attributes and TTL of `ino`, from the warehouse as it is now; an
    /// open file (`fh`) is described as what that handle holds.
    pub fn getattr(
        &self,
        caller: &Caller,
        ino: u64,
        fh: Option<u64>,
    ) -> Result<(FileAttr, Duration), FsError> {
        let (target, _) = self.target(ino)?;
        let handle = fh.and_then(|fh| self.handles.get(fh).ok());
        match target {
            Target::Path(rel) => self.path_attr(ino, &rel, handle.as_deref()),
            Target::Synthetic { rel, which, .. } => {
                self.synthetic_file_attr(caller, ino, &rel, which, handle.as_deref())
            }
        }
    }

    /// A warehouse path's attributes. An open file is described as what
    /// it is, whatever its name now leads to: through the handle named,
    /// else, when the name leads to another file now, through any handle
    /// open on this number (`fstat`, which the kernel asks without naming
    /// the handle); with none, the number is stale (the kernel looks the
    /// name up again and finds the new file's number).
    fn path_attr(
        &self,
        ino: u64,
        rel: &Path,
        handle: Option<&Handle>,
    ) -> Result<(FileAttr, Duration), FsError> {
        let opened = |handle: &Handle| match handle {
            Handle::File(file) => Some(file.stat()),
            _ => None,
        };
        let described = |meta: std::io::Result<Stat>| -> Result<(FileAttr, Duration), FsError> {
            let node = Node {
                kind: NodeKind::File,
                meta: meta?,
            };
            Ok((node_attr(ino, &node), self.options.attr_ttl))
        };
        if let Some(meta) = handle.and_then(opened) {
            return described(meta);
        }
        let node = self.path_node(rel)?;
        if self.replaced(ino, &node) {
            return match self.handles.any_of(ino).as_deref().and_then(opened) {
                Some(meta) => described(meta),
                None => Err(Errno::ESTALE.into()),
            };
        }
        self.show(ino, shown_file(&node));
        Ok((node_attr(ino, &node), self.options.attr_ttl))
    }

    /// Opens `ino` for reading (`writes`: the open asked to write or
    /// truncate, which is `EROFS`). A synthetic file is rendered now and
    /// read from that render; a warehouse file is resolved once below the
    /// root, never through a symlink, and opened as the requester.
    pub fn open(&self, caller: &Caller, ino: u64, writes: bool) -> Result<Opened, FsError> {
        if writes {
            return Err(Errno::EROFS.into());
        }
        let (handle, keep_cache, direct_io, file) = match self.target(ino)?.0 {
            Target::Synthetic { rel, which, .. } => {
                let view = self.views.of(caller)?;
                let held = self.version(ino).filter(|_| self.keeps_synthetics(&view));
                if let Some(version) = held {
                    // A number holding a content serves it as it is, with
                    // no walk (its name is looked up again each TTL), once
                    // checked again after a refresh.
                    let version = self.checked(&view, ino, which, &rel, version)?;
                    return Ok(Opened {
                        fh: self
                            .handles
                            .add(ino, caller.uid, Handle::Bytes(version.bytes))?,
                        keep_cache: true,
                        direct_io: false,
                        file: None,
                    });
                }
                self.synthetic_owner(&rel, which)?;
                if which == Synthetic::Records {
                    let plan = Plan::new(&view.catalog, &rel, Selection::default(), Shape::Plain)?;
                    let stream = RecordsStream::new(
                        plan,
                        Arc::clone(&view.catalog),
                        Arc::clone(&self.producers),
                        caller.uid,
                    );
                    (Handle::Records(stream), false, true, None)
                } else if let Some(version) = self.served_version(&view, ino, which, &rel)? {
                    // This number's content, whatever the name holds now:
                    // its pages in the cache are exactly these bytes.
                    (Handle::Bytes(version.bytes), true, false, None)
                } else {
                    let bytes = self.synthetic_bytes(&view, ino, which, &rel)?;
                    (Handle::Bytes(bytes), false, true, None)
                }
            }
            Target::Path(rel) => {
                // The kernel checked the mode it was last shown; the view
                // checks the file actually opened. A file swapped after
                // the kernel saw it is ESTALE.
                let (file, stat) = self.views.of(caller)?.catalog.open_file(&rel)?;
                let shown = self.inodes.shown(ino);
                if shown.is_some_and(|shown| shown != (stat.dev, stat.ino)) {
                    return Err(Errno::ESTALE.into());
                }
                let unchanged = self.inodes.reopened_unchanged(ino, FileId::of(&stat));
                (
                    Handle::File(file),
                    unchanged,
                    false,
                    Some((stat.dev, stat.ino)),
                )
            }
        };
        Ok(Opened {
            fh: self.handles.add(ino, caller.uid, handle)?,
            keep_cache,
            direct_io,
            file,
        })
    }

    /// Calls `f` with the local warehouse file open as `fh`, if it is one.
    pub fn with_file<R>(&self, fh: u64, f: impl FnOnce(&std::fs::File) -> R) -> Option<R> {
        match &*self.handles.get(fh).ok()? {
            Handle::File(file) => file.local().map(f),
            _ => None,
        }
    }

    /// Up to `size` bytes at `offset` of the open file `fh`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<ReadData, FsError> {
        match &*self.handles.get(fh)? {
            Handle::Bytes(bytes) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                Ok(ReadData::Shared(Arc::clone(bytes), start..end))
            }
            Handle::File(file) => Ok(ReadData::Owned(pread(file, offset, size)?)),
            Handle::Records(stream) => Ok(ReadData::Records(stream.read(offset, size as usize)?)),
            Handle::Dir(_) => Err(Errno::EISDIR.into()),
        }
    }

    /// Closes a file or directory handle.
    pub fn release(&self, fh: u64) {
        self.handles.remove(fh);
    }

    /// The kernel gave back `nlookup` references to `ino`.
    pub fn forget(&self, ino: u64, nlookup: u64) {
        if self.inodes.forget(ino, nlookup) {
            self.listed.lock().remove(&ino);
            self.snapshots.lock().remove(&ino);
            self.unopened.forget(ino);
            self.versions.forget(ino);
        }
    }

    fn target(&self, ino: u64) -> Result<(Target, u64), FsError> {
        Ok(self.inodes.get(ino).ok_or(Errno::ENOENT)?)
    }

    fn node(&self, rel: &Path) -> Result<Node, FsError> {
        Ok(self.catalog().node(rel)?)
    }

    /// [`Self::node`] for attributes: a remote mount's root, when the store
    /// cannot be reached, is described as it was last seen.
    fn path_node(&self, rel: &Path) -> Result<Node, FsError> {
        // The root's path is empty (a path is the names below the root).
        let root = rel.as_os_str().is_empty() && self.is_remote();
        match self.node(rel) {
            Ok(node) => {
                if root {
                    *self.root_seen.lock() = Some(node.clone());
                }
                Ok(node)
            }
            Err(e) if root => self.root_seen.lock().clone().ok_or(e),
            Err(e) => Err(e),
        }
    }

    /// A directory-like node (directory or dataset) at `rel`, or ENOTDIR.
    fn dir_node(&self, rel: &Path) -> Result<Node, FsError> {
        let node = self.node(rel)?;
        match node.kind {
            NodeKind::File => Err(Errno::ENOTDIR.into()),
            _ => Ok(node),
        }
    }

    /// The node at `rel` that carries the synthetic file `which`, or
    /// `ENOENT` (`.records` only in dataset leaves).
    fn synthetic_owner(&self, rel: &Path, which: Synthetic) -> Result<Node, FsError> {
        let owner = self.dir_node(rel)?;
        if !which.belongs_in(owner.kind) {
            return Err(Errno::ENOENT.into());
        }
        Ok(owner)
    }

    fn child_ino(&self, parent: u64, name: &str) -> Result<u64, FsError> {
        let ino = self.inodes.child(parent, name).ok_or(Errno::ENOENT)?;
        self.prune_swept();
        Ok(ino)
    }

    /// After a sweep of the inode table, drops what is kept per number for
    /// the numbers it dropped (a forget drops them one by one; a sweep
    /// takes numbers the kernel never held, which a `getattr` or a retried
    /// lookup may still have described).
    fn prune_swept(&self) {
        let sweeps = self.inodes.sweeps();
        if self.pruned_at.swap(sweeps, Ordering::Relaxed) != sweeps {
            self.inodes.retain_held(&mut self.listed.lock());
            self.inodes.retain_held(&mut self.snapshots.lock());
            self.unopened.retain(|ino| self.inodes.get(ino).is_some());
        }
    }

    /// What `ino` stands for, for a log line: its warehouse path, quoted
    /// and escaped (a hostile name cannot start a line of its own), or its
    /// number once it is forgotten.
    pub fn describe(&self, ino: u64) -> String {
        match self.inodes.get(ino) {
            Some((Target::Path(rel), _)) if rel.as_os_str().is_empty() => "\".\"".into(),
            Some((Target::Path(rel), _)) => format!("{:?}", rel),
            Some((Target::Synthetic { rel, which, .. }, _)) => {
                format!("{:?}", rel.join(which.name()))
            }
            None => format!("inode {ino}"),
        }
    }

    /// How many numbers have the file they were last shown as noted.
    pub fn files_shown(&self) -> usize {
        self.inodes.files_shown()
    }

    /// The number of `name` in `parent`, which is `node`: a new one when
    /// the name now leads to another file than the one it was shown as,
    /// so handles open on the old number keep reading what they opened
    /// (as on a native filesystem, a replaced file is a new inode).
    fn node_ino(&self, parent: u64, name: &str, node: &Node) -> Result<u64, FsError> {
        let ino = self.child_ino(parent, name)?;
        if !self.replaced(ino, node) {
            return Ok(ino);
        }
        self.inodes.detach(ino);
        self.child_ino(parent, name)
    }

    /// Gives `ino`'s name a new number at its next lookup (`ino` serves
    /// another file than its name now leads to).
    pub fn detach(&self, ino: u64) {
        self.inodes.detach(ino);
    }

    /// Whether `ino` was shown another file than the one `node` is.
    fn replaced(&self, ino: u64, node: &Node) -> bool {
        let Some(file) = shown_file(node) else {
            return false;
        };
        self.inodes.shown(ino).is_some_and(|shown| shown != file)
    }

    /// Notes which file underneath the kernel was last shown as `ino`
    /// (an open serves that file or `ESTALE`: the kernel then looks the
    /// name up again and retries).
    fn show(&self, ino: u64, file: Option<(u64, u64)>) {
        if let Some(file) = file {
            self.inodes.show(ino, file);
        }
    }
}
