//! The kernel protocol: a thin `fuser::Filesystem` over [`WarehouseFs`].
//!
//! Each operation decodes the request, makes one call into the
//! filesystem and replies; [`answer!`] turns a failure into its errno and
//! logs it with its stable code. A panic in a handler (a bug; no input
//! should cause one) is caught, logged and answered `EIO` instead of
//! ending the serving thread.
//!
//! Write-type operations are not implemented one by one: the mount is
//! read-only (`MS_RDONLY`), so the kernel answers `EROFS` to every write,
//! create, link, rename, setattr and xattr change itself and never asks
//! the daemon (the `every_write_type_call_is_refused_with_erofs` mount
//! test proves it).

use std::ffi::OsStr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyXattr, Request,
};

use super::FsError;
use super::control;
use super::filesystem::{DirEntry, DirectoryReplier, Forget, Opened, WarehouseFs, XattrData};
use super::metrics::{Metrics, Op};
use super::passthrough::{Passthrough, Route};
use super::views::Caller;
use crate::error::ErrorCode;
use crate::logbudget::{LogBudget, warn_limited};

/// Runs one request's handler: `$call` is the one call into the
/// filesystem; its success is replied with `$ok`, its failure with its
/// errno, logged with the operation, the inode and the error's code.
/// Counted with its latency when the mount logs metrics.
macro_rules! answer {
    ($adapter:expr, $op:expr, $ino:expr, $reply:ident, $call:expr, |$value:pat_param| $ok:expr) => {{
        let op: Op = $op;
        let started = $adapter.metrics.as_ref().map(|_| Instant::now());
        // A panic counts as a failure.
        let mut failed = true;
        guarded(op.name(), || {
            let result = $call;
            match result {
                Ok($value) => {
                    failed = false;
                    $ok
                }
                Err(error) => {
                    $adapter.failed(op.name(), $ino, &error);
                    $reply.error(Errno::from_i32(error.raw_errno()))
                }
            }
        });
        if let (Some(metrics), Some(started)) = (&$adapter.metrics, started) {
            metrics.record(op, started.elapsed(), failed);
        }
    }};
}

/// The protocol adapter the FUSE session serves.
pub struct FuseAdapter {
    fs: Arc<WarehouseFs>,
    /// Ask the kernel to read warehouse files itself where it can.
    wants_passthrough: bool,
    passthrough: Passthrough,
    failures_logged: LogBudget,
    /// The session's way to tell the kernel what to forget, once the
    /// session exists (see [`FuseAdapter::kernel`]).
    kernel: Arc<OnceLock<fuser::Notifier>>,
    invalidations: Invalidations,
    /// Request counts and latencies, when the mount logs metrics.
    metrics: Option<Arc<Metrics>>,
}

impl FuseAdapter {
    pub fn new(fs: WarehouseFs, wants_passthrough: bool) -> FuseAdapter {
        FuseAdapter {
            fs: Arc::new(fs),
            wants_passthrough,
            passthrough: Passthrough::default(),
            failures_logged: LogBudget::new(
                FAILURES_LOGGED_PER_MINUTE,
                Some(ErrorCode::RequestFailed),
                "failed requests",
            ),
            kernel: Arc::default(),
            invalidations: Invalidations::default(),
            metrics: None,
        }
    }

    /// Counts every request from now on; returns the counts and the
    /// filesystem for a reporter (which must not keep the filesystem
    /// alive past the session: its catalog writes the counts when dropped).
    pub fn observe(&mut self) -> (Arc<Metrics>, std::sync::Weak<WarehouseFs>) {
        let metrics = Arc::clone(self.metrics.get_or_insert_with(Arc::default));
        (metrics, Arc::downgrade(&self.fs))
    }

    /// Where the session's notifier is put once the session is made:
    /// `refresh` sends its invalidations through it.
    pub fn kernel(&self) -> Arc<OnceLock<fuser::Notifier>> {
        Arc::clone(&self.kernel)
    }

    /// Hands the kernel's side of a refresh to the invalidation thread;
    /// the ticket [`control::REFRESH_DONE`] asks about.
    fn invalidate(&self, forget: Forget) -> u64 {
        self.invalidations
            .submit(forget, || self.kernel.get().cloned())
    }

    /// Replies to a successful open: a warehouse file through kernel
    /// passthrough where the mount uses it, else read by the daemon.
    fn opened(&self, ino: u64, opened: Opened, reply: ReplyOpen) {
        let fh = FileHandle(opened.fh);
        let flags = open_flags(opened);
        let Some(file) = opened.file else {
            return reply.opened(fh, flags);
        };
        let register = || self.fs.with_file(opened.fh, |f| reply.open_backing(f));
        match self.passthrough.route(ino, opened.fh, file, register) {
            Route::Kernel(id) => reply.opened_passthrough(fh, FopenFlags::empty(), &id),
            Route::DaemonDirect => reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO),
            Route::Daemon => reply.opened(fh, flags),
            Route::Stale => {
                self.fs.detach(ino);
                self.fs.release(opened.fh);
                reply.error(Errno::ESTALE)
            }
        }
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn open_flags(opened: Opened) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    if opened.keep_cache {
        flags |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if opened.direct_io {
        flags |= FopenFlags::FOPEN_DIRECT_IO;
    }
    flags
}

impl FuseAdapter {
    /// Logs a failed request once, with the operation, the path it was
    /// about and the error's code and cause: expected answers (a name that
    /// is not there) at debug, everything else as a warning, within
    /// [`FAILURES_LOGGED_PER_MINUTE`].
    fn failed(&self, op: &str, ino: u64, error: &FsError) {
        let about = || self.fs.describe(ino);
        if error.is_expected() {
            if log::log_enabled!(log::Level::Debug) {
                log::debug!("{op} of {}: {error}", about());
            }
            return;
        }
        let line = || match error.code() {
            Some(_) => format!("{op} of {}: {error}", about()),
            None => format!(
                "error[{}]: {op} of {}: {error}",
                ErrorCode::RequestFailed,
                about()
            ),
        };
        warn_limited!(
            budget: self.failures_logged,
            "{}",
            capped(line(), FAILURE_LINE_BYTES)
        );
    }
}

/// The longest failure line logged: a path and a message may each be
/// 4 KiB and more, escaped, and 60 of them a minute must stay small.
const FAILURE_LINE_BYTES: usize = 1024;

/// `line` cut to at most `max` bytes (at a character boundary), saying how
/// much was left out.
fn capped(line: String, max: usize) -> String {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &line[..end], line.len() - end)
}

/// The kernel's side of refreshes, sent from one thread of its own, in
/// the order asked: no serving thread ever waits for it. (Invalidating a
/// name waits for its directory's lock, which a lookup there holds while
/// it waits for a serving thread: a serving thread that waited too could
/// stall the mount.) Each refresh gets a ticket; the client asks whether
/// its ticket is done.
#[derive(Default)]
struct Invalidations {
    queue: parking_lot::Mutex<Option<std::sync::mpsc::Sender<(u64, Forget)>>>,
    issued: std::sync::atomic::AtomicU64,
    done: Arc<std::sync::atomic::AtomicU64>,
}

impl Invalidations {
    /// Queues `forget` for the kernel (reached through `kernel`, once the
    /// session exists; before, there is nothing to invalidate); its ticket.
    fn submit(&self, forget: Forget, kernel: impl FnOnce() -> Option<fuser::Notifier>) -> u64 {
        use std::sync::atomic::Ordering;
        let mut queue = self.queue.lock();
        // Numbered under the lock, so tickets reach the thread in order.
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        if queue.is_none() {
            match kernel() {
                Some(kernel) => *queue = self.start(kernel),
                None => {
                    self.done.fetch_max(ticket, Ordering::SeqCst);
                    return ticket;
                }
            }
        }
        let sent = queue
            .as_ref()
            .is_some_and(|q| q.send((ticket, forget)).is_ok());
        if !sent {
            // No thread to send to: said done, the daemon's caches are.
            log::warn!("the kernel's caches were not invalidated: no invalidation thread");
            self.done.fetch_max(ticket, Ordering::SeqCst);
        }
        ticket
    }

    /// Whether every refresh up to `ticket` reached the kernel.
    fn is_done(&self, ticket: u64) -> bool {
        self.done.load(std::sync::atomic::Ordering::SeqCst) >= ticket
    }

    fn start(&self, kernel: fuser::Notifier) -> Option<std::sync::mpsc::Sender<(u64, Forget)>> {
        let (queue, jobs) = std::sync::mpsc::channel::<(u64, Forget)>();
        let done = Arc::clone(&self.done);
        let spawned = std::thread::Builder::new()
            .name("invalidations".into())
            .spawn(move || {
                for (ticket, forget) in jobs {
                    // An ENOENT (the kernel does not hold it) is no failure.
                    for (parent, name) in &forget.entries {
                        if let Err(e) = kernel.inval_entry(INodeNo(*parent), OsStr::new(name)) {
                            log::debug!("invalidating {name:?} in inode {parent}: {e}");
                        }
                    }
                    for ino in &forget.inodes {
                        if let Err(e) = kernel.inval_inode(INodeNo(*ino), 0, 0) {
                            log::debug!("invalidating inode {ino}: {e}");
                        }
                    }
                    done.fetch_max(ticket, std::sync::atomic::Ordering::SeqCst);
                }
            });
        match spawned {
            Ok(_) => Some(queue),
            Err(e) => {
                log::warn!("no invalidation thread: {e}");
                None
            }
        }
    }
}

/// Failed requests logged a minute at most: a hostile tree can make every
/// request fail, and must not fill the disk the log is on. The rest are
/// counted, and the count is logged with the next failure after the
/// minute (see [`LogBudget`]).
pub const FAILURES_LOGGED_PER_MINUTE: u32 = 60;

/// Runs one request's handler, answering `EIO` if it panics: the reply the
/// handler owned is dropped unsent, which the kernel receives as `EIO`.
fn guarded(op: &'static str, handler: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log::error!(
            "error[{}]: {op} panicked and was answered with EIO: {}",
            ErrorCode::RequestFailed,
            what.escape_debug()
        );
    }
}

struct Plain<'a>(&'a mut ReplyDirectory);

impl DirectoryReplier for Plain<'_> {
    fn add(&mut self, entry: DirEntry<'_>) -> bool {
        self.0.add(
            INodeNo(entry.ino),
            entry.offset,
            entry.attr.kind,
            entry.name,
        )
    }
}

struct Plus<'a>(&'a mut ReplyDirectoryPlus);

impl DirectoryReplier for Plus<'_> {
    fn add(&mut self, entry: DirEntry<'_>) -> bool {
        self.0.add(
            INodeNo(entry.ino),
            entry.offset,
            entry.name,
            &entry.ttl,
            entry.attr,
            Generation(0),
        )
    }
}

impl Filesystem for FuseAdapter {
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
        // Depth 2: warehouse files on a stacked filesystem (overlayfs, as
        // in containers) can back a passthrough handle too.
        if self.wants_passthrough
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(2).is_ok()
        {
            self.passthrough.enable();
        }
        log::info!(
            "serving {} (kernel passthrough {})",
            self.fs.catalog().root().display(),
            if self.passthrough.is_on() {
                "on"
            } else {
                "off"
            }
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        answer!(
            self,
            Op::Lookup,
            parent.0,
            reply,
            self.fs.lookup(&caller(req), parent.0, name),
            |e| reply.entry_with_ttls(&e.attr_ttl, &e.entry_ttl, &e.attr, Generation(0))
        )
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let fh = fh.map(|fh| fh.0);
        answer!(
            self,
            Op::Getattr,
            ino.0,
            reply,
            self.fs.getattr(&caller(req), ino.0, fh),
            |(attr, ttl)| reply.attr(&ttl, &attr)
        )
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writes = flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        answer!(
            self,
            Op::Open,
            ino.0,
            reply,
            self.fs.open(&caller(req), ino.0, writes),
            |opened| self.opened(ino.0, opened, reply)
        )
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        answer!(
            self,
            Op::Read,
            ino.0,
            reply,
            self.fs.read(fh.0, offset, size),
            |data| reply.data(data.as_slice())
        )
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
        self.passthrough.release(fh.0);
        self.fs.release(fh.0);
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
        // Nothing is ever written back: ENOSYS tells the kernel to stop
        // sending a flush on every close.
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        answer!(
            self,
            Op::Opendir,
            ino.0,
            reply,
            self.fs.opendir(ino.0),
            |opened| {
                let flags = open_flags(opened) | FopenFlags::FOPEN_CACHE_DIR;
                reply.opened(FileHandle(opened.fh), flags)
            }
        )
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        answer!(
            self,
            Op::Readdir,
            ino.0,
            reply,
            self.fs.readdir(ino.0, fh.0, offset, &mut Plain(&mut reply)),
            |()| reply.ok()
        )
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        answer!(
            self,
            Op::Readdirplus,
            ino.0,
            reply,
            self.fs
                .readdirplus(ino.0, fh.0, offset, &mut Plus(&mut reply)),
            |()| reply.ok()
        )
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.release(fh.0);
        reply.ok();
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        answer!(self, Op::Statfs, ino.0, reply, self.fs.statfs(), |s| reply
            .statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_available,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.fragment_size,
            ))
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        answer!(
            self,
            Op::Getxattr,
            ino.0,
            reply,
            self.fs.getxattr(&caller(req), ino.0, name, size),
            |data| reply_xattr(reply, data)
        )
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        answer!(
            self,
            Op::Listxattr,
            ino.0,
            reply,
            self.fs.listxattr(&caller(req), ino.0, size),
            |data| reply_xattr(reply, data)
        )
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let writes = mask.contains(AccessFlags::W_OK);
        answer!(
            self,
            Op::Access,
            ino.0,
            reply,
            self.fs.access(ino.0, writes),
            |()| reply.ok()
        )
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let cmd = u64::from(cmd);
        if cmd == control::REFRESH_DONE as u64 {
            let asked = <[u8; 8]>::try_from(in_data).map(u64::from_ne_bytes);
            answer!(
                self,
                Op::Refresh,
                ino.0,
                reply,
                asked.map_err(|_| FsError::from(nix::errno::Errno::EINVAL)),
                |ticket| {
                    let done = u64::from(self.invalidations.is_done(ticket));
                    reply.ioctl(0, &done.to_ne_bytes())
                }
            );
            return;
        }
        if cmd != control::REFRESH as u64 {
            // No device controls here; `isatty` and friends ask, and are
            // told so.
            return reply.error(Errno::ENOTTY);
        }
        answer!(
            self,
            Op::Refresh,
            ino.0,
            reply,
            control::decode(in_data)
                .map_err(FsError::from)
                .and_then(|name| self.fs.refresh(&caller(req), ino.0, name)),
            |forget| {
                let ticket = self.invalidate(forget);
                reply.ioctl(0, &ticket.to_ne_bytes())
            }
        )
    }
}

fn reply_xattr(reply: ReplyXattr, data: XattrData) {
    match data {
        XattrData::Size(size) => reply.size(size),
        XattrData::Data(bytes) => reply.data(&bytes),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_failure_lines_are_cut_at_a_character_boundary() {
        assert_eq!(super::capped("short".into(), 10), "short");
        let line = "é".repeat(600);
        let cut = super::capped(line.clone(), 1023);
        assert!(cut.starts_with(&"é".repeat(511)), "{cut}");
        assert!(cut.ends_with("… (178 more bytes)"), "{cut}");
    }
}
