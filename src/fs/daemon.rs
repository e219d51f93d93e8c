//! The mount's lifecycle: checks before mounting, the daemon going to the
//! background only once the mount answers, and a clean unmount on
//! SIGINT, SIGTERM or SIGHUP.
//!
//! Backgrounding re-executes the program with its own arguments as they
//! were given (`args_os`), in a new session, rather than forking, since a
//! process that has started threads cannot fork safely. What makes the
//! child the daemon is one variable in its environment,
//! [`READY_FD_VAR`], naming the write end of a pipe: the child serves in
//! the foreground and writes `ready` there once the kernel has accepted
//! the mount, or fails with an error on standard error. The parent then
//! checks from outside that the mount point is a FUSE filesystem that
//! answers, and only then exits 0; any failure leaves nothing mounted.
//! So a mount flag reaches the daemon without being listed twice.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL};

use super::filesystem::{FsOptions, WarehouseFs};
use super::fuse::FuseAdapter;
use super::mountpoint::{self, FS_NAME, MountState};
use crate::catalog::{Catalog, CatalogOptions};
use crate::error::{Error, ErrorCode, Result};

/// The line a background daemon writes once its mount is up.
const READY: &str = "ready";

/// Set by a mounting process in the environment of the daemon it starts:
/// the number of the descriptor the daemon reports readiness on. Its
/// presence is what makes a `pchronicle mount` the background daemon.
pub const READY_FD_VAR: &str = "PCHRONICLE_READY_FD";

/// Everything `pchronicle mount` was asked for.
#[derive(Debug, Clone)]
pub struct MountConfig {
    pub warehouse: PathBuf,
    pub mount_point: PathBuf,
    pub catalog: CatalogOptions,
    pub fs: FsOptions,
    /// Stay attached to the terminal (and serve until unmounted).
    pub foreground: bool,
    /// Let other users read the mount (`allow_other`).
    pub allow_other: bool,
    /// `-o` options, comma-separated as given.
    pub options: Vec<String>,
    /// Request-serving threads.
    pub threads: usize,
    /// Where a background daemon's log goes (discarded when `None`).
    pub log: Option<PathBuf>,
}

/// What a successful background mount reports.
#[derive(Debug, Clone)]
pub struct Mounted {
    pub warehouse: PathBuf,
    pub mount_point: PathBuf,
    /// The daemon's process id (this process in the foreground).
    pub pid: u32,
}

/// Mounts the warehouse. In the foreground this calls `ready` once the
/// kernel has accepted the mount, then serves until the mount is unmounted
/// or a signal arrives; in the background it returns once the daemon's
/// mount answers (and `ready` is not called).
///
/// Going to the background re-executes this program with the arguments
/// it was started with, so only the `pchronicle mount` command may ask
/// for it.
pub fn mount(config: &MountConfig, ready: &dyn Fn(&Mounted)) -> Result<Mounted> {
    let daemon_of = ReadyPipe::from_env()?;
    bound_heap();
    let (options, acl) = fuse_options(config)?;
    let catalog = Catalog::new(&config.warehouse, config.catalog.clone())?;
    std::fs::read_dir(catalog.root()).map_err(|e| Error::io(catalog.root(), &e))?;
    let mount_point = check_mount_point(&config.mount_point, catalog.root())?;
    let mounted = Mounted {
        warehouse: catalog.root().to_path_buf(),
        mount_point: mount_point.clone(),
        pid: std::process::id(),
    };
    let announce = match daemon_of {
        None if !config.foreground => return spawn_daemon(config, mounted),
        None => Announce::Call(ready),
        // The starting process never passes `--foreground`: the variable
        // leaked into a foreground mount's environment.
        Some(_) if config.foreground => {
            return Err(Error::new(
                ErrorCode::MountFailed,
                format!("{READY_FD_VAR} is set for a --foreground mount; unset it"),
            ));
        }
        Some(pipe) => Announce::Pipe(pipe),
    };
    serve(config, catalog, &mounted, options, acl, announce)?;
    Ok(mounted)
}

/// The fuser mount options for a configuration: always read-only, with
/// the kernel checking permissions, and with no devices or set-id bits.
fn fuse_options(config: &MountConfig) -> Result<(Vec<MountOption>, SessionACL)> {
    let mut options = vec![
        MountOption::FSName(FS_NAME.into()),
        MountOption::Subtype(FS_NAME.into()),
        MountOption::RO,
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    let mut acl = if config.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let invalid = |option: &str, why: &str| {
        Error::new(ErrorCode::MountOptionInvalid, format!("-o {option}: {why}"))
    };
    for option in config.options.iter().flat_map(|o| o.split(',')) {
        let extra = match option.trim() {
            "" | "ro" | "default_permissions" | "nodev" | "nosuid" => None,
            "allow_other" => {
                acl = SessionACL::All;
                None
            }
            "allow_root" => {
                if acl == SessionACL::Owner {
                    acl = SessionACL::RootAndOwner;
                }
                None
            }
            "noexec" => Some(MountOption::NoExec),
            "exec" => Some(MountOption::Exec),
            "noatime" => Some(MountOption::NoAtime),
            "atime" => Some(MountOption::Atime),
            "rw" => return Err(invalid(option, "the mount is always read-only")),
            "dev" | "suid" => {
                return Err(invalid(
                    option,
                    "device files and set-id bits are never honoured",
                ));
            }
            other if other.starts_with("fsname=") || other.starts_with("subtype=") => {
                return Err(invalid(
                    option,
                    "the name is fixed so `pchronicle umount` can recognise the mount",
                ));
            }
            _ => {
                return Err(invalid(
                    option,
                    "unknown; supported: ro, allow_other, allow_root, default_permissions, nodev, nosuid, noexec, exec, noatime, atime",
                ));
            }
        };
        if let Some(extra) = extra {
            if !options.contains(&extra) {
                options.push(extra);
            }
        }
    }
    if options.contains(&MountOption::Exec) && options.contains(&MountOption::NoExec) {
        return Err(invalid("exec,noexec", "they contradict each other"));
    }
    if options.contains(&MountOption::Atime) && options.contains(&MountOption::NoAtime) {
        return Err(invalid("atime,noatime", "they contradict each other"));
    }
    Ok((options, acl))
}

/// Checks that `path` can take the mount: an empty directory outside the
/// warehouse with nothing live mounted on it. A dead pchronicle mount
/// there is cleared first.
fn check_mount_point(path: &Path, warehouse: &Path) -> Result<PathBuf> {
    let abs = mountpoint::absolute(path)
        .map_err(|e| Error::at(ErrorCode::MountPointMissing, path, e.message))?;
    match mountpoint::state(&abs) {
        MountState::Live => {
            return Err(Error::at(
                ErrorCode::MountPointInUse,
                path,
                "a pchronicle mount is already serving here",
            ));
        }
        MountState::Dead => {
            log::info!("clearing the dead mount at {}", abs.display());
            mountpoint::detach(&abs, true).map_err(|e| {
                Error::at(
                    ErrorCode::UnmountFailed,
                    path,
                    format!("a dead mount is in the way and could not be cleared: {e}"),
                )
            })?;
        }
        MountState::NotMounted => {}
    }
    let meta = std::fs::metadata(&abs)
        .map_err(|e| Error::at(ErrorCode::MountPointMissing, path, e.to_string()))?;
    if !meta.is_dir() {
        return Err(Error::at(
            ErrorCode::MountPointMissing,
            path,
            "the mount point is not a directory",
        ));
    }
    let canonical = std::fs::canonicalize(&abs).map_err(|e| Error::io(path, &e))?;
    if canonical.starts_with(warehouse) {
        return Err(Error::at(
            ErrorCode::MountPointInsideWarehouse,
            path,
            format!(
                "the mount point is inside the warehouse {}",
                warehouse.display()
            ),
        ));
    }
    let mut entries = std::fs::read_dir(&canonical).map_err(|e| Error::io(path, &e))?;
    if entries.next().is_some() {
        return Err(Error::at(
            ErrorCode::MountPointNotEmpty,
            path,
            "the mount point is not empty",
        ));
    }
    Ok(canonical)
}

/// What a background daemon writes once its mount is up: the word and the
/// warehouse and mount point as it resolved them.
fn ready_line(mounted: &Mounted) -> String {
    format!(
        "{READY} {} {}",
        mounted.warehouse.display(),
        mounted.mount_point.display()
    )
}

/// Whom a mount that is up is announced to.
enum Announce<'a> {
    /// The foreground caller of [`mount`].
    Call(&'a dyn Fn(&Mounted)),
    /// The process that started this one as its background daemon.
    Pipe(ReadyPipe),
}

/// Mounts and serves in this process until the mount goes away.
fn serve(
    config: &MountConfig,
    catalog: Catalog,
    mounted: &Mounted,
    options: Vec<MountOption>,
    acl: SessionACL,
    announce: Announce<'_>,
) -> Result<()> {
    let mount_point = mounted.mount_point.as_path();
    // Block the stop signals before any thread starts, so every thread
    // (fuser's, Lance's runtime) inherits the mask and only the waiter
    // below receives them.
    let signals = stop_signals();
    // SAFETY: `signals` is an initialised set; blocking signals in this
    // thread has no memory-safety preconditions.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };

    let mut fuse_config = Config::default();
    fuse_config.mount_options = options;
    fuse_config.acl = acl;
    fuse_config.n_threads = Some(config.threads.max(1));
    fuse_config.clone_fd = true;
    let catalog = Arc::new(catalog);
    spawn_count_saver(Arc::downgrade(&catalog));
    let catalog_at_exit = Arc::downgrade(&catalog);
    let filesystem = FuseAdapter::new(WarehouseFs::new(catalog, config.fs.clone()));
    let mut session = Session::new(filesystem, mount_point, &fuse_config).map_err(|e| {
        Error::at(
            ErrorCode::MountFailed,
            mount_point,
            format!("the kernel refused the mount: {e}"),
        )
    })?;
    log::info!("mounted at {}", mount_point.display());
    match announce {
        Announce::Call(ready) => ready(mounted),
        // A failure here drops the session, which unmounts.
        Announce::Pipe(pipe) => pipe.report(mounted, config.log.as_deref())?,
    }

    spawn_exit_watchdog(mount_point.to_path_buf(), Weak::clone(&catalog_at_exit));
    let mut unmounter = session.unmount_callable();
    let target = mount_point.to_path_buf();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `signals` is initialised and `signal` is writable.
            unsafe { libc::sigwait(&signals, &mut signal) };
            log::info!("signal {signal}: unmounting {}", target.display());
            if let Err(e) = unmounter.unmount() {
                // Busy (a shell sits in it): detach it from the namespace
                // now. A detached mount lives on while used, so the daemon
                // leaves instead of waiting; users still inside get ENOTCONN.
                log::warn!("unmount failed ({e}); detaching lazily");
                match mountpoint::detach(&target, true) {
                    Ok(()) => {
                        // Leaving without unwinding: keep the counts first.
                        if let Some(catalog) = catalog_at_exit.upgrade() {
                            let _ = catalog.save_counts();
                        }
                        std::process::exit(0)
                    }
                    Err(e) => log::error!("could not detach {}: {e}", target.display()),
                }
            }
        })
        .map_err(|e| {
            Error::new(
                ErrorCode::MountFailed,
                format!("starting the signal thread: {e}"),
            )
        })?;

    session.run().map_err(|e| {
        Error::at(
            ErrorCode::MountFailed,
            mount_point,
            format!("serving the mount failed: {e}"),
        )
    })?;
    log::info!("unmounted {}", mount_point.display());
    Ok(())
}

/// Keeps the daemon's resident memory near what it holds: all threads
/// allocate from one arena (instead of one per thread, each keeping its
/// own freed memory; the requests are short and I/O bound), and freed
/// memory past 128 KiB at the top of the heap goes back to the system.
fn bound_heap() {
    // SAFETY: mallopt only tunes the allocator; called before the request
    // threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}

/// How often the daemon writes the persisted count cache when it changed.
pub const COUNT_SAVE_INTERVAL: Duration = Duration::from_secs(2);

/// How long the daemon may take to leave once its mount is gone.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// Ends the process once the mount is gone and the session has not
/// returned within [`EXIT_GRACE`]: a request stuck in the filesystem (a
/// hung device below the warehouse) must not keep a daemon of an unmounted
/// filesystem alive. The counts are saved first.
fn spawn_exit_watchdog(mount_point: PathBuf, catalog: Weak<Catalog>) {
    let spawned = std::thread::Builder::new()
        .name("exit-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                // An unreadable mount table says nothing: keep waiting.
                let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
                    continue;
                };
                let mounted = mountpoint::parse_mountinfo(&table)
                    .iter()
                    .any(|m| m.mount_point == mount_point && m.is_pchronicle());
                if !mounted {
                    break;
                }
            }
            std::thread::sleep(EXIT_GRACE);
            log::warn!(
                "{} is unmounted but the daemon is still busy; leaving now",
                mount_point.display()
            );
            if let Some(catalog) = catalog.upgrade() {
                let _ = catalog.save_counts();
            }
            std::process::exit(0)
        });
    if let Err(e) = spawned {
        log::warn!("no exit watchdog: {e}");
    }
}

/// Writes the catalog's persisted count cache every
/// [`COUNT_SAVE_INTERVAL`] while it changes; the last write happens when
/// the catalog is dropped at unmount. Ends with the catalog.
fn spawn_count_saver(catalog: Weak<Catalog>) {
    let spawned = std::thread::Builder::new()
        .name("count-cache".into())
        .spawn(move || {
            loop {
                std::thread::sleep(COUNT_SAVE_INTERVAL);
                let Some(catalog) = catalog.upgrade() else {
                    return;
                };
                if let Err(e) = catalog.save_counts() {
                    log::warn!("{}", e.render());
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("no periodic count-cache writes: {e}");
    }
}

/// The signals that stop the daemon. Signal masks and `sigwait` stay raw
/// `libc`: `nix` has them only behind its `signal` feature, which nothing
/// else in the dependency graph enables, and turning it on would rebuild
/// `nix`'s dependents (all of Lance among them).
fn stop_signals() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset only adds to it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(set.as_mut_ptr(), signal);
        }
        set.assume_init()
    }
}

/// The pipe a background daemon reports readiness on (see
/// [`READY_FD_VAR`]).
struct ReadyPipe(OwnedFd);

impl ReadyPipe {
    /// The pipe this process was started with as a background daemon, if
    /// it was.
    fn from_env() -> Result<Option<ReadyPipe>> {
        let Some(value) = std::env::var_os(READY_FD_VAR) else {
            return Ok(None);
        };
        let refused = || {
            Error::new(
                ErrorCode::MountFailed,
                format!(
                    "{READY_FD_VAR}={} names no pipe; pchronicle sets it only for the daemon it starts, so unset it",
                    value.to_string_lossy()
                ),
            )
        };
        // `FD:INODE`: the descriptor, and the inode of the pipe it must be.
        let (fd, inode): (RawFd, u64) = value
            .to_str()
            .and_then(|v| v.split_once(':'))
            .and_then(|(fd, inode)| Some((fd.parse().ok()?, inode.parse().ok()?)))
            .filter(|(fd, _)| *fd > 2)
            .ok_or_else(refused)?;
        // SAFETY: F_GETFD only asks whether `fd` is open; it is defined
        // for any number.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(refused());
        }
        // SAFETY: `fd` is open (checked just above); borrowed only for the
        // checks below.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let stat = nix::sys::stat::fstat(borrowed).map_err(|_| refused())?;
        let access = nix::fcntl::fcntl(borrowed, nix::fcntl::FcntlArg::F_GETFL)
            .map(|flags| flags & libc::O_ACCMODE)
            .map_err(|_| refused())?;
        if stat.st_mode & libc::S_IFMT != libc::S_IFIFO
            || stat.st_ino != inode
            || access != libc::O_WRONLY
        {
            return Err(refused());
        }
        // Nothing this process starts (fusermount, for one) may hold the
        // write end: the starting process waits for it to close.
        nix::fcntl::fcntl(
            borrowed,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|_| refused())?;
        // SAFETY: the starting process handed this descriptor (the pipe
        // checked above) to this process alone, to be written once and
        // closed; nothing else here owns it.
        Ok(Some(ReadyPipe(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Tells the starting process the mount is up, then points standard
    /// input and output at /dev/null and standard error at the log, and
    /// leaves the starting directory (so the daemon pins no directory).
    /// A log that cannot be opened fails the mount before it is reported.
    fn report(self, mounted: &Mounted, log_file: Option<&Path>) -> Result<()> {
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| Error::io("/dev/null", &e))?;
        let log = match log_file {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Error::io(path, &e))?,
            None => null.try_clone().map_err(|e| Error::io("/dev/null", &e))?,
        };
        let mut pipe = std::fs::File::from(self.0);
        writeln!(pipe, "{}", ready_line(mounted))
            .map_err(|e| Error::new(ErrorCode::MountFailed, format!("reporting readiness: {e}")))?;
        drop(pipe);
        let redirected = nix::unistd::dup2_stdin(null.as_fd())
            .and_then(|()| nix::unistd::dup2_stdout(null.as_fd()))
            .and_then(|()| nix::unistd::dup2_stderr(log.as_fd()))
            .and_then(|()| nix::unistd::chdir("/"));
        redirected.map_err(|e| {
            Error::new(
                ErrorCode::MountFailed,
                format!("detaching from the terminal: {e}"),
            )
        })
    }
}

/// Starts the background daemon and waits until its mount answers.
fn spawn_daemon(config: &MountConfig, mut mounted: Mounted) -> Result<Mounted> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("finding this program: {e}")))?;
    let (ready, ready_writer) = std::io::pipe()
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("creating a pipe: {e}")))?;
    let ready_fd = ready_writer.as_raw_fd();
    let pipe_inode = nix::sys::stat::fstat(&ready_writer)
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("creating a pipe: {e}")))?
        .st_ino;
    let mut command = Command::new(exe);
    command
        .args(std::env::args_os().skip(1))
        .env(READY_FD_VAR, format!("{ready_fd}:{pipe_inode}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            // Leave the terminal's session, so a closed terminal or
            // Ctrl-C there does not reach the daemon.
            nix::unistd::setsid()?;
            // No descriptor this process inherited (a lock, a socket of a
            // service manager) lives on in the daemon: every one from 3 up
            // closes at exec (best effort: kernels before 5.11 refuse the
            // flag, and then only what was already close-on-exec closes)...
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            // ...but the pipe's write end, held open by the parent until the
            // spawn returns: it alone crosses the exec.
            let writer = BorrowedFd::borrow_raw(ready_fd);
            nix::fcntl::fcntl(
                writer,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )?;
            Ok(())
        });
    }
    let spawned = command.spawn();
    // The daemon holds the only write end now: the read below ends with
    // its report or its exit.
    drop(ready_writer);
    let mut child = spawned
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("starting the daemon: {e}")))?;
    // Its standard error is drained all along (a daemon that logs much
    // before it is ready must not block on a full pipe); what it said
    // first is kept for the error message.
    let said = drain(child.stderr.take());
    let line = match ready_within(ready, READY_WAIT) {
        Some(line) => line,
        None => {
            stop(&mut child, &mounted.mount_point);
            return Err(Error::at(
                ErrorCode::MountFailed,
                &config.mount_point,
                format!(
                    "the daemon did not report within {} s; it was stopped",
                    READY_WAIT.as_secs()
                ),
            ));
        }
    };
    // The daemon names what it mounted, as it resolved the arguments: the
    // same paths as here, or it is not the mount this command checked.
    let expected = ready_line(&mounted);
    if line.starts_with(READY) && line != expected {
        stop(&mut child, &mounted.mount_point);
        return Err(Error::at(
            ErrorCode::MountFailed,
            &config.mount_point,
            format!(
                "a path changed while mounting: the daemon resolved \"{line}\", this command \"{expected}\"; the daemon was stopped"
            ),
        ));
    }
    if line != expected {
        let status = child.wait().ok();
        // A daemon killed after mounting leaves a dead mount: clear it.
        clear_dead_mount(&mounted.mount_point);
        let said = said.join().unwrap_or_default();
        return Err(Error::at(
            ErrorCode::MountFailed,
            &config.mount_point,
            format!(
                "the daemon stopped before the mount answered ({}): {}",
                status.map_or("no status".into(), |s| s.to_string()),
                said.trim()
            ),
        ));
    }
    // The child serves from now on; check from outside that it answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !mountpoint::answers(&mounted.mount_point) {
        if std::time::Instant::now() > deadline {
            stop(&mut child, &mounted.mount_point);
            return Err(Error::at(
                ErrorCode::MountFailed,
                &config.mount_point,
                "the mount did not answer within 10 s; it was removed",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    mounted.pid = child.id();
    Ok(mounted)
}

/// How long a starting daemon may take to report its mount (it loads the
/// count cache and mounts before it does).
const READY_WAIT: Duration = Duration::from_secs(60);

/// How long a daemon being stopped may take to unmount and leave before it
/// is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The daemon's report line (without its newline), or `None` when none came
/// within `wait`. A daemon that exits without reporting gives an empty line.
fn ready_within(ready: std::io::PipeReader, wait: Duration) -> Option<String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("ready".into())
        .spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(ready).read_line(&mut line);
            let _ = sender.send(line);
        });
    if reader.is_err() {
        return None;
    }
    let line = receiver.recv_timeout(wait).ok()?;
    Some(line.trim_end_matches('\n').to_string())
}

/// Reads a starting daemon's standard error to its end, keeping the first
/// 64 KiB for an error message.
fn drain(stderr: Option<std::process::ChildStderr>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut pipe) = stderr {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let room = (64usize << 10).saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

/// Stops a daemon this command started: SIGTERM (it unmounts and leaves),
/// SIGKILL after [`STOP_GRACE`], then clears a dead mount it left.
fn stop(child: &mut std::process::Child, mount_point: &Path) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = std::time::Instant::now() + STOP_GRACE;
    while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
        let _ = child.wait();
    }
    clear_dead_mount(mount_point);
}

/// Detaches a dead pchronicle mount at `mount_point`, if one is there;
/// nothing else mounted there is touched.
fn clear_dead_mount(mount_point: &Path) {
    if mountpoint::state(mount_point) == MountState::Dead {
        if let Err(e) = mountpoint::detach(mount_point, true) {
            log::warn!(
                "could not clear the dead mount at {}: {e}",
                mount_point.display()
            );
        }
    }
}
