//! The kernel protocol: a thin `fuser::Filesystem` over [`WarehouseFs`].
//!
//! Each operation decodes the request, makes one call into the
//! filesystem and replies ([`serve!`]); a failure is turned into its errno
//! and logged with its stable code, and a panic in a handler (a bug; no
//! input should cause one) is caught, logged and answered `EIO` instead of
//! ending the thread ([`super::requests`]).
//!
//! Serving threads only serve: an operation whose answer may take long (a
//! render, a count, `.records`, a remote warehouse) is handed with its
//! reply to the workers ([`super::workers`]), which answer it within its
//! budget, and the serving thread reads the next request at once. What
//! is slow is decided per request, from what its inode or handle is.
//!
//! Write-type operations are not implemented one by one: the mount is
//! read-only (`MS_RDONLY`), so the kernel answers `EROFS` to every write,
//! create, link, rename, setattr and xattr change itself and never asks
//! the daemon (the `every_write_type_call_is_refused_with_erofs` mount
//! test proves it).

use std::ffi::OsStr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyXattr, Request,
};

use super::FsError;
use super::control;
use super::filesystem::{Forget, KernelCopy, Opened, WarehouseFs, XattrData};
use super::invalidations::Invalidations;
use super::metrics::{Metrics, Op};
use super::passthrough::Route;
use super::replies::{DirectoryReply, Plain, Plus, caller, handle, open_flags};
use super::requests::Core;
pub use super::requests::FAILURES_LOGGED_PER_MINUTE;
use super::workers::{LateHook, Workers};

/// Answers one request here, on the serving thread: `$call` (with
/// `$core` the shared [`Core`]) is the one call into the filesystem,
/// `$ok` replies its success; a failure is replied with its errno.
macro_rules! answer {
    ($adapter:expr, $op:expr, $ino:expr, $reply:ident, |$core:ident| $call:expr, |$value:pat_param| $ok:expr) => {{
        let op: Op = $op;
        let ino: u64 = $ino;
        let started = Instant::now();
        let $core = &$adapter.core;
        let answer = $core.call(op, ino, || $call);
        $core.counted(op, started, matches!(answer, Some(Ok(_))));
        match answer {
            Some(Ok($value)) => super::requests::guarded(op.name(), || $ok),
            Some(Err(errno)) => $reply.error(errno),
            // A panic: the reply goes unsent (EIO).
            None => drop($reply),
        }
    }};
}

/// Answers one request like [`answer!`], but when `$slow` on a worker,
/// within the request's budget (so `$call` and `$ok` may only use what
/// they own), and the serving thread goes on at once.
macro_rules! serve {
    ($adapter:expr, $slow:expr, $op:expr, $ino:expr, $reply:ident, |$core:ident| $call:expr, |$value:pat_param| $ok:expr) => {{
        if $slow {
            let op: Op = $op;
            let ino: u64 = $ino;
            let started = Instant::now();
            let $core = Arc::clone(&$adapter.core);
            $adapter
                .workers
                .submit(op.name(), ino, $reply, move |slot| {
                    // Every file read of the answer stops at its deadline.
                    let work = crate::work::Work::until("the answer", slot.deadline());
                    let answer = crate::work::within(&work, || $core.call(op, ino, || $call));
                    $core.counted(op, started, matches!(answer, Some(Ok(_))));
                    // None: the watchdog answered it already.
                    if let (Some(answer), Some($reply)) = (answer, slot.take()) {
                        match answer {
                            Ok($value) => super::requests::guarded(op.name(), || $ok),
                            Err(errno) => $reply.error(errno),
                        }
                    }
                });
        } else {
            answer!($adapter, $op, $ino, $reply, |$core| $call, |$value| $ok)
        }
    }};
}

/// How the workers making slow answers are sized.
#[derive(Debug, Clone, Copy)]
pub struct WorkerOptions {
    /// Worker threads.
    pub threads: usize,
    /// Requests waiting for a worker, at most; past it, `EAGAIN`.
    pub queue: usize,
    /// Longest a request waits for its answer; past it, `EIO`.
    pub budget: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            threads: 8,
            queue: 256,
            budget: Duration::from_secs(60),
        }
    }
}

/// The protocol adapter the FUSE session serves.
pub struct FuseAdapter {
    core: Arc<Core>,
    /// Ask the kernel to read warehouse files itself where it can.
    wants_passthrough: bool,
    /// The kernel opens directories itself (see `opendir`).
    dirs_unopened: bool,
    /// The session's way to tell the kernel what to forget, once the
    /// session exists (see [`FuseAdapter::kernel`]).
    kernel: Arc<OnceLock<fuser::Notifier>>,
    invalidations: Invalidations,
    workers: Workers,
}

impl FuseAdapter {
    pub fn new(fs: WarehouseFs, wants_passthrough: bool, workers: WorkerOptions) -> FuseAdapter {
        let core = Arc::new(Core::new(fs));
        // Weak: the watchdog must not keep the filesystem (whose catalog
        // writes the counts when dropped) alive past the session.
        let hook_core = Arc::downgrade(&core);
        let late: LateHook = Arc::new(move |what| {
            if let Some(core) = hook_core.upgrade() {
                core.late(what);
            }
        });
        FuseAdapter {
            core,
            wants_passthrough,
            dirs_unopened: false,
            kernel: Arc::default(),
            invalidations: Invalidations::default(),
            workers: Workers::new(workers.threads, workers.queue, workers.budget, late),
        }
    }

    /// Counts every request from now on; returns the counts and the
    /// filesystem for a reporter (which must not keep the filesystem
    /// alive past the session: its catalog writes the counts when dropped).
    pub fn observe(&mut self) -> (Arc<Metrics>, std::sync::Weak<WarehouseFs>) {
        let metrics = Arc::clone(self.core.metrics.get_or_init(Arc::default));
        (metrics, Arc::downgrade(&self.core.fs))
    }

    /// Where the session's notifier is put once the session is made:
    /// `refresh` sends its invalidations through it.
    pub fn kernel(&self) -> Arc<OnceLock<fuser::Notifier>> {
        Arc::clone(&self.kernel)
    }

    fn fs(&self) -> &WarehouseFs {
        &self.core.fs
    }

    /// Replies to a directory read, and has the kernel's copy of the
    /// listing dropped in time when the read completed one that may be
    /// kept only so long (a drop pending waits while a new copy fills).
    fn listed<R: DirectoryReply>(&self, ino: u64, copy: KernelCopy, reply: R) {
        match copy {
            KernelCopy::Begun => self.invalidations.listing_begun(ino),
            KernelCopy::Complete(Some(kept_for)) => {
                self.invalidations
                    .drop_listing(ino, kept_for, || self.kernel.get().cloned())
            }
            KernelCopy::Complete(None) | KernelCopy::Unchanged => {}
        }
        reply.ok();
    }

    /// Hands the kernel's side of a refresh to the invalidation thread;
    /// the ticket [`control::REFRESH_DONE`] asks about.
    fn invalidate(&self, forget: Forget) -> u64 {
        self.invalidations
            .submit(forget, || self.kernel.get().cloned())
    }
}

impl Core {
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
        // The kernel then opens directories itself, once `opendir` is
        // answered ENOSYS, and caches their entries.
        self.dirs_unopened = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        let _ = config
            .set_max_readahead(1 << 20)
            .or_else(|max| config.set_max_readahead(max));
        // Depth 2: warehouse files on a stacked filesystem (overlayfs, as
        // in containers) can back a passthrough handle too.
        if self.wants_passthrough
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(2).is_ok()
        {
            self.core.passthrough.enable();
        }
        log::info!(
            "serving {} (kernel passthrough {})",
            self.fs().catalog().root().display(),
            if self.core.passthrough.is_on() {
                "on"
            } else {
                "off"
            }
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (caller, name) = (caller(req), name.to_os_string());
        serve!(
            self,
            self.fs().slow_lookup(&name),
            Op::Lookup,
            parent.0,
            reply,
            |core| core.fs.lookup(&caller, parent.0, &name),
            |e| reply.entry_with_ttls(&e.attr_ttl, &e.entry_ttl, &e.attr, Generation(0))
        )
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let (caller, fh) = (caller(req), fh.map(|fh| fh.0));
        serve!(
            self,
            self.fs().slow_inode(ino.0),
            Op::Getattr,
            ino.0,
            reply,
            |core| core.fs.getattr(&caller, ino.0, fh),
            |(attr, ttl)| reply.attr(&ttl, &attr)
        )
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let writes = flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        let caller = caller(req);
        serve!(
            self,
            self.fs().slow_inode(ino.0),
            Op::Open,
            ino.0,
            reply,
            |core| core.fs.open(&caller, ino.0, writes),
            |opened| core.opened(ino.0, opened, reply)
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
        serve!(
            self,
            self.fs().slow_handle(fh.0),
            Op::Read,
            ino.0,
            reply,
            |core| core.fs.read(fh.0, offset, size),
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
        self.core.passthrough.release(fh.0);
        self.fs().release(fh.0);
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

    /// Where the kernel can open directories itself, ENOSYS: it sends no
    /// `opendir` or `releasedir` again, reads without a handle, and keeps
    /// a directory's entries until its mtime changes or it is told to
    /// drop them (`readdir`). A directory polled ten times a second then
    /// costs the daemon a listing a TTL, not twenty requests a second.
    /// (An `opendir` sent before the kernel took the answer in is
    /// answered the same, so a few may be counted.)
    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.dirs_unopened {
            self.core.counted(Op::Opendir, Instant::now(), true);
            return reply.error(Errno::ENOSYS);
        }
        let caller = caller(req);
        serve!(
            self,
            self.fs().is_remote(),
            Op::Opendir,
            ino.0,
            reply,
            |core| core.fs.opendir(&caller, ino.0),
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
            |core| core
                .fs
                .readdir(ino.0, handle(fh), offset, &mut Plain(&mut reply)),
            |copy| self.listed(ino.0, copy, reply)
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
            |core| core
                .fs
                .readdirplus(ino.0, handle(fh), offset, &mut Plus(&mut reply)),
            |copy| self.listed(ino.0, copy, reply)
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
        self.fs().release(fh.0);
        reply.ok();
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs().forget(ino.0, nlookup);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        answer!(
            self,
            Op::Statfs,
            ino.0,
            reply,
            |core| core.fs.statfs(),
            |s| reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_available,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.fragment_size,
            )
        )
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let (caller, name) = (caller(req), name.to_os_string());
        serve!(
            self,
            self.fs().slow_xattrs(ino.0, Some(&name)),
            Op::Getxattr,
            ino.0,
            reply,
            |core| core.fs.getxattr(&caller, ino.0, &name, size),
            |data| reply_xattr(reply, data)
        )
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let caller = caller(req);
        serve!(
            self,
            self.fs().slow_xattrs(ino.0, None),
            Op::Listxattr,
            ino.0,
            reply,
            |core| core.fs.listxattr(&caller, ino.0, size),
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
            |core| core.fs.access(ino.0, writes),
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
                |_core| asked.map_err(|_| FsError::from(nix::errno::Errno::EINVAL)),
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
            |core| control::decode(in_data)
                .map_err(FsError::from)
                .and_then(|name| core.fs.refresh(&caller(req), ino.0, name)),
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
