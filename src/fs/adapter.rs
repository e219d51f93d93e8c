//! The FUSE adapter: translates kernel requests into catalog calls and
//! catalog answers into attributes, directory entries and bytes.
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
//! cached for the attribute TTL; synthetic files have a zero TTL and are
//! served with direct I/O, so every `stat` and every `open` asks the
//! daemon. Daemon side: a rendered synthetic file is reused for at most the
//! attribute TTL (so `ls -l` followed by `cat` renders once), and the
//! catalog's own refresh cache answers unchanged directories and files
//! from memory after a stat. A regular file keeps its page cache across
//! opens only while its identity (size, mtime, ctime, inode) is unchanged.
//!
//! Every request that would write answers `EROFS`.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen,
    ReplyStatfs, ReplyXattr, Request,
};
use lru::LruCache;
use parking_lot::Mutex;

use super::inodes::{InodeTable, Synthetic, Target};
use crate::catalog::cache::FileId;
use crate::catalog::{Catalog, Entry, Node, NodeKind};
use crate::error::{Error, ErrorCode};
use crate::records::RecordFormat;
use crate::warehouse::{Stat, Viewer};

/// The extended-attribute namespace pchronicle answers in.
const XATTR_PREFIX: &str = "user.pchronicle.";

const NO_TTL: Duration = Duration::ZERO;

/// How the mount presents the catalog.
#[derive(Debug, Clone)]
pub struct FsOptions {
    /// How long the kernel may cache names and attributes of warehouse
    /// paths, and how long a rendered synthetic file is reused.
    pub attr_ttl: Duration,
    /// Rendered synthetic files kept for reuse within the TTL: at most this
    /// many, holding at most `render_cache_bytes` together (a larger one is
    /// not kept).
    pub render_cache_entries: usize,
    pub render_cache_bytes: usize,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            attr_ttl: Duration::from_secs(1),
            render_cache_entries: 256,
            render_cache_bytes: 4 << 20,
        }
    }
}

/// One entry of a directory handle's snapshot.
struct DirItem {
    ino: u64,
    name: String,
    attr: FileAttr,
    ttl: Duration,
    /// The file underneath a regular-file entry (device, inode).
    file: Option<(u64, u64)>,
}

/// What an open file handle holds.
enum Handle {
    /// A synthetic file, rendered at `open`.
    Bytes(Arc<[u8]>),
    /// A warehouse file, read with `pread`.
    File(File),
    /// A directory: the entries as of the last read from offset 0, so
    /// offsets stay valid however the directory changes meanwhile.
    Dir(Mutex<Option<Arc<Vec<DirItem>>>>),
}

/// Synthetic files rendered recently, reused for at most the attribute TTL
/// and bounded in count and bytes.
struct RenderMemo {
    /// By inode and view id.
    entries: LruCache<(u64, u64), (Instant, Arc<[u8]>)>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl RenderMemo {
    fn new(max_entries: usize, max_bytes: usize) -> RenderMemo {
        RenderMemo {
            entries: LruCache::unbounded(),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    fn get(&mut self, ino: (u64, u64), ttl: Duration) -> Option<Arc<[u8]>> {
        match self.entries.get(&ino) {
            Some((at, bytes)) if at.elapsed() < ttl => Some(Arc::clone(bytes)),
            _ => None,
        }
    }

    fn put(&mut self, ino: (u64, u64), bytes: Arc<[u8]>, ttl: Duration) {
        if bytes.len() > self.max_bytes || self.max_entries == 0 {
            return;
        }
        if let Some((_, old)) = self.entries.pop(&ino) {
            self.bytes -= old.len();
        }
        // Expired entries go first (least recently used first), then
        // live ones while over budget.
        while let Some((_, (at, old))) = self.entries.peek_lru() {
            let (expired, len) = (at.elapsed() >= ttl, old.len());
            let over =
                self.bytes + bytes.len() > self.max_bytes || self.entries.len() >= self.max_entries;
            if !over && !expired {
                break;
            }
            self.bytes -= len;
            self.entries.pop_lru();
        }
        self.bytes += bytes.len();
        self.entries.put(ino, (Instant::now(), bytes));
    }
}

/// A render at least this slow walked a big tree: the memory it freed is
/// handed back to the system (see [`give_back_freed_memory`]).
const BIG_RENDER: Duration = Duration::from_millis(20);

/// Returns the heap memory freed by a big walk to the system. The
/// allocator keeps freed memory per thread arena for reuse, so without
/// this a daemon's resident size stays at the peak of its largest render.
fn give_back_freed_memory() {
    // SAFETY: malloc_trim only releases free heap pages; it has no
    // preconditions and is thread-safe.
    unsafe { libc::malloc_trim(0) };
}

/// Whose eyes a request is answered with: the daemon's own catalog, or a
/// catalog of the requesting user's (see [`WarehouseFs::view`]).
#[derive(Clone)]
struct View {
    /// 0 for the daemon's own view; otherwise unique for the life of the
    /// mount, so renders of different viewers are never mixed up.
    id: u64,
    catalog: Arc<Catalog>,
}

/// Where readers of one synthetic file meet: the one holding `last`
/// renders, the ones waiting for it take what it finished with.
#[derive(Default)]
struct RenderGate {
    last: Mutex<Option<(Instant, Result<Arc<[u8]>, Errno>)>>,
}

/// Per-user catalogs kept at once.
const VIEWERS_KEPT: usize = 64;

/// The warehouse as a FUSE filesystem.
pub struct WarehouseFs {
    catalog: Arc<Catalog>,
    /// Catalogs of other users than the daemon's (`--allow-other`), by
    /// credentials.
    viewers: Mutex<LruCache<Viewer, View>>,
    /// The daemon's effective uid, whose requests use its own view.
    own_uid: u32,
    next_viewer: AtomicU64,
    inodes: InodeTable,
    options: FsOptions,
    handles: Mutex<std::collections::HashMap<u64, Arc<Handle>>>,
    next_handle: AtomicU64,
    rendered: Mutex<RenderMemo>,
    /// One gate per synthetic file and view being rendered: readers of the
    /// same `.stats` at once wait for one walk and share its result.
    rendering: Mutex<std::collections::HashMap<(u64, u64), Arc<RenderGate>>>,
    /// Per file inode the kernel holds: the file underneath it was last
    /// shown as (device, inode). An open serves that file or `ESTALE` (the
    /// kernel then looks the name up again and retries).
    shown: Mutex<std::collections::HashMap<u64, (u64, u64)>>,
    /// Per directory inode: what its listing was last built from (its kind
    /// and its own stat identity), so an unchanged directory's entries can
    /// stay in the kernel's cache across `opendir`s.
    listed: Mutex<std::collections::HashMap<u64, (NodeKind, FileId)>>,
}

impl WarehouseFs {
    pub fn new(catalog: Arc<Catalog>, options: FsOptions) -> WarehouseFs {
        let rendered = RenderMemo::new(options.render_cache_entries, options.render_cache_bytes);
        WarehouseFs {
            catalog,
            viewers: Mutex::new(LruCache::unbounded()),
            own_uid: rustix::process::geteuid().as_raw(),
            next_viewer: AtomicU64::new(1),
            inodes: InodeTable::new(),
            options,
            handles: Mutex::new(std::collections::HashMap::new()),
            next_handle: AtomicU64::new(1),
            rendered: Mutex::new(rendered),
            rendering: Mutex::new(std::collections::HashMap::new()),
            shown: Mutex::new(std::collections::HashMap::new()),
            listed: Mutex::new(std::collections::HashMap::new()),
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The view a request is answered with. The kernel checks each
    /// request against the attributes the mount shows
    /// (`default_permissions`), but `.stats`, `.sources` and the counts in
    /// xattrs roll up a whole subtree: for a user other than the daemon's
    /// (or root) they are rendered by a catalog that sees exactly what
    /// that user could read natively.
    fn view(&self, req: &Request) -> Result<View, Errno> {
        let uid = req.uid();
        if uid == 0 || uid == self.own_uid {
            return Ok(View {
                id: 0,
                catalog: Arc::clone(&self.catalog),
            });
        }
        let viewer = Viewer {
            uid,
            gid: req.gid(),
            groups: supplementary_groups(req.pid()),
        };
        if let Some(view) = self.viewers.lock().get(&viewer) {
            return Ok(view.clone());
        }
        let catalog = self
            .catalog
            .viewed_by(viewer.clone())
            .map_err(|e| errno(&e))?;
        let view = View {
            id: self.next_viewer.fetch_add(1, Ordering::Relaxed),
            catalog: Arc::new(catalog),
        };
        let mut viewers = self.viewers.lock();
        viewers.put(viewer, view.clone());
        while viewers.len() > VIEWERS_KEPT {
            viewers.pop_lru();
        }
        Ok(view)
    }

    fn target(&self, ino: INodeNo) -> Result<(Target, u64), Errno> {
        self.inodes.get(ino.0).ok_or(Errno::ENOENT)
    }

    fn node(&self, rel: &Path) -> Result<Node, Errno> {
        self.catalog.node(rel).map_err(|e| errno(&e))
    }

    /// A directory-like node (directory or dataset) at `rel`, or ENOTDIR.
    fn dir_node(&self, rel: &Path) -> Result<Node, Errno> {
        let node = self.node(rel)?;
        match node.kind {
            NodeKind::File => Err(Errno::ENOTDIR),
            _ => Ok(node),
        }
    }

    /// A synthetic file's bytes: reused when rendered within the TTL. One
    /// walk renders both of a directory's synthetic files (an `ls -l`
    /// stats both, a poller reads one), and both are kept for the TTL.
    fn synthetic_bytes(
        &self,
        view: &View,
        ino: u64,
        which: Synthetic,
        rel: &Path,
    ) -> Result<Arc<[u8]>, Errno> {
        let ttl = self.options.attr_ttl;
        if let Some(bytes) = self.rendered.lock().get((ino, view.id), ttl) {
            return Ok(bytes);
        }
        let key = (ino, view.id);
        let asked = Instant::now();
        let gate = Arc::clone(self.rendering.lock().entry(key).or_default());
        let rendered = {
            let mut last = gate.last.lock();
            match &*last {
                // Rendered by the reader this one waited for: share it.
                Some((at, result)) if *at >= asked => result.clone(),
                _ => {
                    let result = self.render(view, ino, which, rel);
                    *last = Some((Instant::now(), result.clone()));
                    result
                }
            }
        };
        let mut gates = self.rendering.lock();
        // The map's reference and this one: nobody else waits at the gate.
        if Arc::strong_count(&gate) == 2 {
            gates.remove(&key);
        }
        rendered
    }

    /// Renders a synthetic file (and keeps its sibling, rendered by the
    /// same walk, for the TTL).
    fn render(
        &self,
        view: &View,
        ino: u64,
        which: Synthetic,
        rel: &Path,
    ) -> Result<Arc<[u8]>, Errno> {
        let ttl = self.options.attr_ttl;
        let catalog = &view.catalog;
        let failed = |e: crate::error::Error| {
            log::warn!("rendering {}: {}", rel.display(), e.render());
            errno(&e)
        };
        let started = std::time::Instant::now();
        let (mine, other) = if ttl.is_zero() {
            let text = match which {
                Synthetic::Stats => catalog.stats(rel).map(|s| s.to_json()),
                Synthetic::Sources => catalog.open(rel).map(|s| s.sources_jsonl()),
            };
            (text.map_err(failed)?, None)
        } else {
            let snapshot = catalog.open(rel).map_err(failed)?;
            let (stats, sources) = (snapshot.stats().to_json(), snapshot.sources_jsonl());
            match which {
                Synthetic::Stats => (stats, Some((Synthetic::Sources, sources))),
                Synthetic::Sources => (sources, Some((Synthetic::Stats, stats))),
            }
        };
        let bytes: Arc<[u8]> = Arc::from(mine.into_bytes());
        if let Some((other, text)) = other {
            let mut memo = self.rendered.lock();
            memo.put((ino, view.id), Arc::clone(&bytes), ttl);
            if let Some(sibling) = self.sibling(ino, other) {
                memo.put((sibling, view.id), Arc::from(text.into_bytes()), ttl);
            }
        }
        if started.elapsed() >= BIG_RENDER {
            give_back_freed_memory();
        }
        Ok(bytes)
    }

    /// The inode of the other synthetic file of the directory `ino`'s
    /// synthetic file belongs to.
    fn sibling(&self, ino: u64, other: Synthetic) -> Option<u64> {
        match self.inodes.get(ino)? {
            (Target::Synthetic { of, .. }, _) => self.inodes.existing_child(of, other.name()),
            _ => None,
        }
    }

    /// Attributes and TTL of any inode, from the warehouse as it is now.
    fn attributes(
        &self,
        req: &Request,
        ino: u64,
        target: &Target,
    ) -> Result<(FileAttr, Duration), Errno> {
        match target {
            Target::Path(rel) => {
                let node = self.node(rel)?;
                self.show(ino, shown_file(&node));
                Ok((node_attr(ino, &node), self.options.attr_ttl))
            }
            Target::Synthetic { rel, which, .. } => {
                let owner = self.dir_node(rel)?;
                let bytes = self.synthetic_bytes(&self.view(req)?, ino, *which, rel)?;
                Ok((synthetic_attr(ino, bytes.len() as u64, &owner.meta), NO_TTL))
            }
        }
    }

    fn add_handle(&self, handle: Handle) -> FileHandle {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, Arc::new(handle));
        FileHandle(fh)
    }

    fn handle(&self, fh: FileHandle) -> Result<Arc<Handle>, Errno> {
        self.handles.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    /// The entries of a directory node: `.`, `..`, the synthetic files,
    /// then `list` (nothing more for a dataset leaf).
    fn dir_items(&self, ino: u64, parent: u64, rel: &Path) -> Result<Vec<DirItem>, Errno> {
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
            let child = self.child_ino(ino, which.name())?;
            // The real length is computed on `stat` (the TTL is zero, so
            // the kernel never keeps this one); a listing must not pay for
            // rolling up the whole subtree.
            items.push(DirItem {
                ino: child,
                name: which.name().into(),
                attr: synthetic_attr(child, 0, &own.meta),
                ttl: NO_TTL,
                file: None,
            });
        }
        if own.kind == NodeKind::Dataset {
            return Ok(items);
        }
        let (listing, metas) = self.catalog.list_with_meta(rel).map_err(|e| errno(&e))?;
        items.reserve(listing.entries.len());
        for (entry, meta) in listing.entries.iter().zip(&metas) {
            let name = entry.name();
            // A real file named like a synthetic one is shadowed by it.
            if Synthetic::from_name(name).is_some() {
                continue;
            }
            let child = self.child_ino(ino, name)?;
            let node = Node {
                kind: entry.kind(),
                meta: meta.clone(),
            };
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

    /// Notes which file underneath the kernel was last shown as `ino`.
    fn show(&self, ino: u64, file: Option<(u64, u64)>) {
        if let Some(file) = file {
            self.shown.lock().insert(ino, file);
        }
    }

    fn child_ino(&self, parent: u64, name: &str) -> Result<u64, Errno> {
        self.inodes.child(parent, name).ok_or(Errno::ENOENT)
    }

    /// The directory snapshot a read at `offset` is served from.
    fn dir_snapshot(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Arc<Vec<DirItem>>, Errno> {
        let handle = self.handle(fh)?;
        let Handle::Dir(slot) = &*handle else {
            return Err(Errno::EBADF);
        };
        let mut slot = slot.lock();
        if offset == 0 || slot.is_none() {
            let (target, parent) = self.target(ino)?;
            let Target::Path(rel) = target else {
                return Err(Errno::ENOTDIR);
            };
            *slot = Some(Arc::new(self.dir_items(ino.0, parent, &rel)?));
        }
        Ok(Arc::clone(slot.as_ref().expect("filled just above")))
    }

    /// The extended attributes of a node, by full name.
    fn xattrs(&self, view: &View, target: &Target) -> Result<Vec<(String, String)>, Errno> {
        let rel = match target {
            Target::Synthetic { .. } => {
                return Ok(vec![xattr("kind", "synthetic")]);
            }
            Target::Path(rel) => rel,
        };
        let node = self.node(rel)?;
        let mut out = vec![xattr("kind", kind_name(node.kind))];
        match node.kind {
            NodeKind::Directory => {}
            NodeKind::Dataset => {
                let listing = view.catalog.list(rel).map_err(|e| errno(&e))?;
                if let Some(Entry::Dataset { preview, .. }) = listing.entries.first() {
                    out.push(xattr("format", &preview.format));
                    if let Some(n) = preview.counts.record_count {
                        out.push(xattr("record_count", &n.to_string()));
                    }
                }
            }
            NodeKind::File => {
                let name = rel.file_name().and_then(OsStr::to_str).unwrap_or("");
                if RecordFormat::from_name(name).is_some() {
                    let snapshot = view.catalog.open(rel).map_err(|e| errno(&e))?;
                    if let Some(source) = snapshot.sources.first() {
                        out.push(xattr("format", &source.format));
                        if let Some(n) = source.counts.record_count {
                            out.push(xattr("record_count", &n.to_string()));
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

fn xattr(name: &str, value: &str) -> (String, String) {
    (format!("{XATTR_PREFIX}{name}"), value.to_string())
}

fn kind_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Directory => "directory",
        NodeKind::Dataset => "dataset",
        NodeKind::File => "file",
    }
}

/// The errno a catalog error is answered with.
fn errno(error: &Error) -> Errno {
    if let Some(raw) = error.os_error {
        return Errno::from_i32(raw);
    }
    match error.code {
        ErrorCode::PathNotFound | ErrorCode::PathInvalid | ErrorCode::NameNotUtf8 => Errno::ENOENT,
        _ => Errno::EIO,
    }
}

fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = nanos.clamp(0, 999_999_999) as u32;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::new(secs.unsigned_abs(), 0) + Duration::new(0, nanos)
    }
}

/// The file underneath a regular-file node, as (device, inode).
fn shown_file(node: &Node) -> Option<(u64, u64)> {
    (node.kind == NodeKind::File).then_some((node.meta.dev, node.meta.ino))
}

/// A warehouse path's attributes: its own stat, with a dataset leaf shown
/// as a read-only directory (`0555`) since its interior is not listed.
fn node_attr(ino: u64, node: &Node) -> FileAttr {
    let meta = &node.meta;
    let is_dir = meta.is_dir();
    let mtime = system_time(meta.mtime, meta.mtime_nsec);
    FileAttr {
        ino: INodeNo(ino),
        size: meta.size,
        blocks: meta.blocks,
        atime: system_time(meta.atime, meta.atime_nsec),
        mtime,
        ctime: system_time(meta.ctime, meta.ctime_nsec),
        crtime: mtime,
        kind: if is_dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        // A leaf is shown with its real permissions, masked read-only
        // (its interior is not listed, so nothing could be written).
        perm: match node.kind {
            NodeKind::Dataset => (meta.permissions() & !0o222) as u16,
            _ => meta.permissions() as u16,
        },
        // 1 for directories says "subdirectory count unknown", so `find`
        // never skips a directory on the strength of a link count.
        nlink: if is_dir {
            1
        } else {
            u32::try_from(meta.nlink).unwrap_or(u32::MAX)
        },
        uid: meta.uid,
        gid: meta.gid,
        rdev: 0,
        blksize: u32::try_from(meta.blksize).unwrap_or(4096),
        flags: 0,
    }
}

/// A synthetic file's attributes: read-only, owned like the node it
/// describes, modified "now" (it is computed on every open).
fn synthetic_attr(ino: u64, len: u64, owner: &Stat) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: len,
        blocks: len.div_ceil(512),
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind: FileType::RegularFile,
        perm: 0o444,
        nlink: 1,
        uid: owner.uid,
        gid: owner.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The supplementary groups of process `pid` (from `/proc`), sorted; none
/// when they cannot be read (the process is gone): the viewer then has
/// only its primary group, which can only hide more.
fn supplementary_groups(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    let mut groups: Vec<u32> = status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|list| {
            list.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// Runs one request's handler. A panic (a bug; no input should cause one)
/// is caught and logged with its code instead of ending the serving
/// thread; the reply the handler owned is dropped unsent, which answers
/// the kernel `EIO`.
fn guarded(op: &'static str, handler: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log::error!(
            "error[{}]: {op} panicked and was answered with EIO: {what}",
            ErrorCode::RequestFailed
        );
    }
}

/// Reads up to `size` bytes at `offset`, retrying short reads until EOF.
fn pread(file: &File, offset: u64, size: u32) -> std::io::Result<Vec<u8>> {
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

impl Filesystem for WarehouseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each is asked for alone: a kernel without one still mounts.
        for wanted in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_DIO,
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
        ] {
            if config.add_capabilities(wanted).is_err() {
                log::debug!("the kernel does not offer {wanted:?}");
            }
        }
        let _ = config
            .set_max_readahead(1 << 20)
            .or_else(|max| config.set_max_readahead(max));
        log::info!("serving {}", self.catalog.root().display());
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guarded("lookup", || {
            let result = (|| {
                let name = name.to_str().ok_or(Errno::ENOENT)?;
                let (target, _) = self.target(parent)?;
                let Target::Path(parent_rel) = target else {
                    return Err(Errno::ENOTDIR);
                };
                if let Some(which) = Synthetic::from_name(name) {
                    let owner = self.dir_node(&parent_rel)?;
                    let ino = self.child_ino(parent.0, name)?;
                    let bytes = self.synthetic_bytes(&self.view(req)?, ino, which, &parent_rel)?;
                    return Ok((
                        synthetic_attr(ino, bytes.len() as u64, &owner.meta),
                        NO_TTL,
                        self.options.attr_ttl,
                    ));
                }
                // The catalog refuses names inside a leaf, the hidden state
                // directory, symlinks and special files.
                let rel: PathBuf = if parent_rel.as_os_str().is_empty() {
                    PathBuf::from(name)
                } else {
                    parent_rel.join(name)
                };
                let node = self.node(&rel)?;
                let ino = self.child_ino(parent.0, name)?;
                self.show(ino, shown_file(&node));
                Ok((
                    node_attr(ino, &node),
                    self.options.attr_ttl,
                    self.options.attr_ttl,
                ))
            })();
            // The number is held from here until the kernel has it, so no
            // forget or sweep drops it in between.
            let claimed = name
                .to_str()
                .and_then(|name| self.inodes.claim(parent.0, name));
            match (result, claimed) {
                // A synthetic file exists as long as its directory does, so its
                // name may be cached; its attributes (its length) never are.
                (Ok((mut attr, attr_ttl, entry_ttl)), Some(ino)) => {
                    attr.ino = INodeNo(ino);
                    reply.entry_with_ttls(&attr_ttl, &entry_ttl, &attr, Generation(0));
                    self.inodes.remember(ino);
                }
                (Ok(_), None) => reply.error(Errno::ENOENT),
                (Err(e), claimed) => {
                    if let Some(ino) = claimed {
                        self.inodes.release(ino);
                    }
                    reply.error(e)
                }
            }
        })
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        guarded("getattr", || {
            // An open synthetic file reports the length of what it holds.
            if let Some(handle) = fh.and_then(|fh| self.handle(fh).ok()) {
                if let Handle::Bytes(bytes) = &*handle {
                    if let Ok((Target::Synthetic { rel, .. }, _)) = self.target(ino) {
                        if let Ok(owner) = self.dir_node(&rel) {
                            return reply.attr(
                                &NO_TTL,
                                &synthetic_attr(ino.0, bytes.len() as u64, &owner.meta),
                            );
                        }
                    }
                }
            }
            match self
                .target(ino)
                .and_then(|(target, _)| self.attributes(req, ino.0, &target))
            {
                Ok((attr, ttl)) => reply.attr(&ttl, &attr),
                Err(e) => reply.error(e),
            }
        })
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        guarded("open", || {
            if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return reply.error(Errno::EROFS);
            }
            let result = (|| match self.target(ino)?.0 {
                Target::Synthetic { rel, which, .. } => {
                    self.dir_node(&rel)?;
                    let bytes = self.synthetic_bytes(&self.view(req)?, ino.0, which, &rel)?;
                    Ok((Handle::Bytes(bytes), FopenFlags::FOPEN_DIRECT_IO))
                }
                Target::Path(rel) => {
                    // Resolved once below the open root, never through a
                    // symlink; a file swapped after the resolution is ESTALE.
                    // Opened as the requester: the kernel checked the mode it
                    // was last shown, the view checks the file actually opened.
                    let (file, stat) = self
                        .view(req)?
                        .catalog
                        .open_file(&rel)
                        .map_err(|e| errno(&e))?;
                    let shown = self.shown.lock().get(&ino.0).copied();
                    if shown.is_some_and(|shown| shown != (stat.dev, stat.ino)) {
                        return Err(Errno::ESTALE);
                    }
                    let id = FileId::of(&stat);
                    let flags = if self.inodes.reopened_unchanged(ino.0, id) {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::empty()
                    };
                    Ok((Handle::File(file), flags))
                }
            })();
            match result {
                Ok((handle, flags)) => reply.opened(self.add_handle(handle), flags),
                Err(e) => reply.error(e),
            }
        })
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guarded("read", || {
            let handle = match self.handle(fh) {
                Ok(handle) => handle,
                Err(e) => return reply.error(e),
            };
            match &*handle {
                Handle::Bytes(bytes) => {
                    let start = (offset as usize).min(bytes.len());
                    let end = start.saturating_add(size as usize).min(bytes.len());
                    reply.data(&bytes[start..end]);
                }
                Handle::File(file) => match pread(file, offset, size) {
                    Ok(data) => reply.data(&data),
                    Err(e) => reply.error(Errno::from(e)),
                },
                Handle::Dir(_) => reply.error(Errno::EISDIR),
            }
        })
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.handles.lock().remove(&fh.0);
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    /// The kernel may cache a directory's entries (`FOPEN_CACHE_DIR`); they
    /// are kept from the last `opendir` (`FOPEN_KEEP_CACHE`) only while the
    /// directory's kind and stat identity are those its cached listing was
    /// built from (names appear, vanish or are renamed only by changing the
    /// directory's mtime), and never within the racy window.
    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guarded("opendir", || {
            let result = self.target(ino).and_then(|(target, _)| match target {
                Target::Path(rel) => self.dir_node(&rel),
                Target::Synthetic { .. } => Err(Errno::ENOTDIR),
            });
            match result {
                Ok(node) => {
                    let seen = (node.kind, FileId::of(&node.meta));
                    let unchanged = self.listed.lock().insert(ino.0, seen) == Some(seen);
                    let mut flags = FopenFlags::FOPEN_CACHE_DIR;
                    if unchanged && !seen.1.is_racy() {
                        flags |= FopenFlags::FOPEN_KEEP_CACHE;
                    }
                    reply.opened(self.add_handle(Handle::Dir(Mutex::new(None))), flags)
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded("readdir", || {
            let items = match self.dir_snapshot(ino, fh, offset) {
                Ok(items) => items,
                Err(e) => return reply.error(e),
            };
            for (i, item) in items.iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(item.ino), i as u64 + 1, item.attr.kind, &item.name) {
                    break;
                }
            }
            reply.ok();
        })
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        guarded("readdirplus", || {
            let items = match self.dir_snapshot(ino, fh, offset) {
                Ok(items) => items,
                Err(e) => return reply.error(e),
            };
            for (i, item) in items.iter().enumerate().skip(offset as usize) {
                // Each entry but `.` and `..` hands the kernel a reference,
                // held from the claim until it is counted.
                let held = item.name != "." && item.name != "..";
                let claimed = if held {
                    self.inodes.claim(ino.0, &item.name)
                } else {
                    Some(item.ino)
                };
                let Some(child) = claimed else {
                    continue;
                };
                let attr = FileAttr {
                    ino: INodeNo(child),
                    ..item.attr
                };
                let full = reply.add(
                    INodeNo(child),
                    i as u64 + 1,
                    &item.name,
                    &item.ttl,
                    &attr,
                    Generation(0),
                );
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
            reply.ok();
        })
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.handles.lock().remove(&fh.0);
        reply.ok();
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if self.inodes.forget(ino.0, nlookup) {
            self.listed.lock().remove(&ino.0);
            self.shown.lock().remove(&ino.0);
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded("statfs", || match statvfs(self.catalog.root()) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(Errno::from(e)),
        })
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guarded("getxattr", || {
            let Some(name) = name.to_str().filter(|n| n.starts_with("user.")) else {
                // Other namespaces (security., system., trusted.) are not kept
                // here. Saying so, rather than "no such attribute", lets `ls -l`
                // stop asking for ACLs and labels after the first file.
                return reply.error(Errno::EOPNOTSUPP);
            };
            let result = self
                .target(ino)
                .and_then(|(target, _)| self.xattrs(&self.view(req)?, &target));
            match result {
                Ok(attrs) => match attrs.iter().find(|(n, _)| n == name) {
                    Some((_, value)) => reply_sized(reply, size, value.as_bytes()),
                    None => reply.error(Errno::NO_XATTR),
                },
                Err(e) => reply.error(e),
            }
        })
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guarded("listxattr", || {
            match self
                .target(ino)
                .and_then(|(target, _)| self.xattrs(&self.view(req)?, &target))
            {
                Ok(attrs) => {
                    let mut names = Vec::new();
                    for (name, _) in &attrs {
                        names.extend_from_slice(name.as_bytes());
                        names.push(0);
                    }
                    reply_sized(reply, size, &names);
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        guarded("access", || {
            if mask.contains(AccessFlags::W_OK) {
                return reply.error(Errno::EROFS);
            }
            match self.target(ino) {
                Ok(_) => reply.ok(),
                Err(e) => reply.error(e),
            }
        })
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // No device controls here; `isatty` and friends ask, and are told so.
        reply.error(Errno::ENOTTY);
    }

    // Nothing that would change the warehouse is implemented: the mount is
    // read-only (`MS_RDONLY`), so the kernel answers `EROFS` to every
    // write, create, link, rename, setattr and xattr change itself and never
    // asks the daemon (the `every_write_type_call_is_refused_with_erofs` mount test proves it).
}

/// Answers an xattr request: the length when asked for it (`size` 0), the
/// bytes when they fit, `ERANGE` otherwise.
fn reply_sized(reply: ReplyXattr, size: u32, bytes: &[u8]) {
    if size == 0 {
        reply.size(bytes.len() as u32);
    } else if bytes.len() <= size as usize {
        reply.data(bytes);
    } else {
        reply.error(Errno::ERANGE);
    }
}

/// `statvfs(2)` of the warehouse root, which the mount reports as its own.
fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut out = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `out` is a valid buffer for
    // one `statvfs`, which the call fills on success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), out.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the call succeeded, so the buffer is initialised.
    Ok(unsafe { out.assume_init() })
}
