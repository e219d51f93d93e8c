//! The mount's lifecycle: the warehouse and mount point checked before
//! mounting, the daemon going to the background only once the mount
//! answers, and a clean unmount on SIGINT, SIGTERM or SIGHUP.
//!
//! Checking the mount point and making the mount itself are
//! [`super::mounting`]'s. Going to the background is
//! [`super::background`]'s: the daemon is this program run again with the
//! command's own arguments, so a mount flag reaches it without being
//! listed twice; it checks the mount point again itself, and mounts on
//! the directory its own check opened.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL};

pub use super::background::READY_FD_VAR;
use super::background::{DaemonLog, ReadyPipe, daemon_log, spawn_daemon};
use super::filesystem::{FsOptions, WarehouseFs};
use super::fuse::FuseAdapter;
use super::handles::HandleLimits;
use super::mounting::{MountPoint, fuse_descriptor, fuse_options, mount_device};
use super::mountpoint;
use super::notify::Notifier;
use crate::catalog::counts::CountSaver;
use crate::catalog::{Catalog, CatalogOptions};
use crate::error::{Error, ErrorCode, Result};

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
    /// The workers that make slow answers (renders, counts, `.records`,
    /// remote reads), and their budget.
    pub workers: super::WorkerOptions,
    /// Where a background daemon's log goes (discarded when `None`).
    pub log: Option<PathBuf>,
    /// Let the kernel read warehouse files itself where it offers
    /// passthrough.
    pub passthrough: bool,
    /// Log request counts, latencies, renders, cache hits and memory
    /// this often.
    pub log_metrics: Option<Duration>,
}

/// What a successful background mount reports.
#[derive(Debug, Clone)]
pub struct Mounted {
    pub warehouse: PathBuf,
    pub mount_point: PathBuf,
    /// The daemon's process id (this process in the foreground).
    pub pid: u32,
    /// Mounted by someone else (a `/dev/fd/N` mount point), who also
    /// unmounts it.
    pub owner_unmounts: bool,
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
    crate::heap::bound();
    let (options, acl) = fuse_options(&config.options, config.allow_other)?;
    let catalog = Catalog::new(&config.warehouse, config.catalog.clone())?;
    if !catalog.root_dir().is_remote() {
        std::fs::read_dir(catalog.root()).map_err(|e| Error::io(catalog.root(), &e))?;
    }
    if let Some(device) = fuse_descriptor(&config.mount_point)? {
        // Mounted already by whoever opened the descriptor, who also
        // supervises it: served here, never in the background.
        if acl != SessionACL::Owner {
            // Listings and attributes rely on the kernel checking
            // permissions (default_permissions), which only the mounter
            // chose and this process cannot see.
            return Err(Error::new(
                ErrorCode::MountOptionInvalid,
                "--allow-other and -o allow_other/allow_root cannot be honoured for a /dev/fd/N \
                 mount: whether its mount checks permissions is not known here; it serves \
                 its owner only",
            ));
        }
        let mounted = Mounted {
            warehouse: catalog.root().to_path_buf(),
            mount_point: config.mount_point.clone(),
            pid: std::process::id(),
            owner_unmounts: true,
        };
        let announce = match daemon_of {
            None => Announce::Call(ready),
            Some(pipe) => Announce::Pipe(pipe),
        };
        serve(
            config,
            catalog,
            &mounted,
            Kernel::Descriptor(device),
            acl,
            announce,
        )?;
        return Ok(mounted);
    }
    let local = !catalog.root_dir().is_remote();
    let mount_point = MountPoint::check(&config.mount_point, local.then(|| catalog.root()))?;
    let mounted = Mounted {
        warehouse: catalog.root().to_path_buf(),
        mount_point: mount_point.path().to_path_buf(),
        pid: std::process::id(),
        owner_unmounts: false,
    };
    let announce = match daemon_of {
        None if !config.foreground => {
            let mounted = spawn_daemon(config, mounted)?;
            // The daemon becomes the service's main process.
            if let Some(notifier) = Notifier::from_env(false) {
                notifier.ready(Some(mounted.pid), &serving(&mounted));
            }
            return Ok(mounted);
        }
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
    serve(
        config,
        catalog,
        &mounted,
        Kernel::Mount(options, mount_point),
        acl,
        announce,
    )?;
    Ok(mounted)
}

/// How the kernel reaches the filesystem served.
enum Kernel {
    /// Mounted here, on the checked mount point, with these options.
    Mount(Vec<MountOption>, MountPoint),
    /// An open `/dev/fuse` someone else already mounted (a mount point
    /// given as `/dev/fd/N`, as container runtimes pass it).
    Descriptor(OwnedFd),
}

/// How the signal thread takes the mount down.
enum Unmount {
    /// fuser mounted it (through fusermount3, not being root).
    Fuser(fuser::SessionUnmounter),
    /// This process mounted it.
    Detach,
    /// A `/dev/fd/N` mount: its owner's.
    LeftToOwner,
}

/// A mount this process made itself, detached (lazily) when serving it
/// fails before it ended with an unmount.
struct OwnMount {
    at: PathBuf,
    armed: bool,
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = mountpoint::detach(&self.at, true) {
                log::warn!("could not detach {}: {e}", self.at.display());
            }
        }
    }
}

/// The status line a service manager shows for a mount.
fn serving(mounted: &Mounted) -> String {
    // Quoted and escaped: a newline in a path must not add a line (a
    // notification's KEY=VALUE, a log line).
    format!(
        "serving {:?} at {:?}",
        mounted.warehouse, mounted.mount_point
    )
}

/// Sends `READY=1` once the mount at `mounted` answers a `statfs` (a
/// round trip to this process's serving threads), from a thread of its
/// own; gives up, logged, if it never does within the start limit.
fn notify_when_answering(notifier: Arc<Notifier>, mounted: &Mounted) {
    let mounted = mounted.clone();
    let spawned = std::thread::Builder::new()
        .name("notify-ready".into())
        .spawn(move || {
            if !mountpoint::wait_answering(&mounted.mount_point, READY_LIMIT) {
                log::warn!("the mount never answered; READY=1 not sent");
                return;
            }
            notifier.ready(None, &serving(&mounted));
        });
    if let Err(e) = spawned {
        log::warn!("no readiness notification: {e}");
    }
}

/// How long a foreground mount waits for its mount to answer before it
/// stops trying to tell the service manager it is ready.
const READY_LIMIT: Duration = Duration::from_secs(60);

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
    kernel: Kernel,
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
    fuse_config.acl = acl;
    fuse_config.n_threads = Some(config.threads.max(1));
    fuse_config.clone_fd = true;
    // A background daemon's log, opened before mounting: a `--log` that
    // cannot be opened fails the mount before anything is mounted.
    let log = match &announce {
        Announce::Pipe(_) => daemon_log(config.log.as_deref(), catalog.root_dir())?,
        Announce::Call(_) => DaemonLog::Discard,
    };
    let catalog = Arc::new(catalog);
    spawn_count_saver(Arc::downgrade(&catalog));
    // Held past the catalog: its last holder may be a worker still
    // dropping it (and writing the counts) when the session returns.
    let counts_at_exit = catalog.count_saver();
    let counts_after_run = counts_at_exit.clone();
    // Every `.records` reader is one thread: the daemon's memory stays
    // bounded by how many run, not by their read-ahead.
    crate::records::read::limit_threads(1);
    let fs_options = FsOptions {
        shared: acl == SessionACL::All,
        handle_limits: HandleLimits::for_daemon(config.fs.handle_limits.per_user),
        ..config.fs.clone()
    };
    let mut filesystem = FuseAdapter::new(
        WarehouseFs::new(catalog, fs_options),
        config.passthrough,
        config.workers,
    );
    let invalidations = filesystem.kernel();
    let observed = config
        .log_metrics
        .map(|every| (every, filesystem.observe()));
    let descriptor = matches!(kernel, Kernel::Descriptor(_));
    let refused = |e: std::io::Error| {
        Error::at(
            ErrorCode::MountFailed,
            mount_point,
            format!("the kernel refused the mount: {e}"),
        )
    };
    let (session, mut own_mount) = match kernel {
        Kernel::Mount(options, checked) => {
            match mount_device(&checked, &options, acl).map_err(refused)? {
                Some(device) => {
                    let own = OwnMount {
                        at: mount_point.to_path_buf(),
                        armed: true,
                    };
                    (
                        Session::from_fd(filesystem, device, acl, fuse_config),
                        Some(own),
                    )
                }
                None => {
                    let path = checked.path_if_unchanged()?;
                    fuse_config.mount_options = options;
                    (Session::new(filesystem, path, &fuse_config), None)
                }
            }
        }
        Kernel::Descriptor(device) => {
            (Session::from_fd(filesystem, device, acl, fuse_config), None)
        }
    };
    let mut session = session.map_err(refused)?;
    let _ = invalidations.set(session.notifier());
    log::info!("mounted at {}", mount_point.display());
    if let Some((every, (metrics, fs))) = observed {
        super::metrics::spawn_reporter(every, metrics, fs);
    }
    let started_by_parent = matches!(announce, Announce::Pipe(_));
    let notifier = Notifier::from_env(started_by_parent).map(Arc::new);
    match announce {
        Announce::Call(ready) => {
            match &notifier {
                // The handshake with the kernel is done: it answers.
                Some(notifier) if descriptor => notifier.ready(None, &serving(mounted)),
                Some(notifier) => notify_when_answering(Arc::clone(notifier), mounted),
                None => {}
            }
            ready(mounted)
        }
        // A failure here drops the session (or the own mount), which
        // unmounts.
        Announce::Pipe(pipe) => pipe.report(mounted, log)?,
    }
    log::info!(
        "pchronicle {} (pid {}) ready: {}",
        env!("CARGO_PKG_VERSION"),
        mounted.pid,
        serving(mounted)
    );

    // A descriptor's mount point is unknown here: the session ends when
    // whoever mounted it unmounts it.
    if !descriptor {
        spawn_exit_watchdog(
            mount_point.to_path_buf(),
            counts_at_exit.clone(),
            notifier.clone(),
        );
    }
    let mut unmount = match (descriptor, own_mount.is_some()) {
        (true, _) => Unmount::LeftToOwner,
        (false, true) => Unmount::Detach,
        (false, false) => Unmount::Fuser(session.unmount_callable()),
    };
    let target = mount_point.to_path_buf();
    let stopping = notifier.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `signals` is initialised and `signal` is writable.
            unsafe { libc::sigwait(&signals, &mut signal) };
            log::info!("signal {signal}: unmounting {}", target.display());
            if let Some(notifier) = &stopping {
                notifier.stopping();
            }
            let unmounted = match &mut unmount {
                // Not ours to unmount: leaving closes the device, and the
                // kernel answers ENOTCONN there until its owner unmounts.
                Unmount::LeftToOwner => leave(&counts_at_exit),
                Unmount::Detach => mountpoint::detach(&target, false),
                Unmount::Fuser(unmounter) => unmounter.unmount(),
            };
            if let Err(e) = unmounted {
                // Busy (a shell sits in it): detach it from the namespace
                // now. A detached mount lives on while used, so the daemon
                // leaves instead of waiting; users still inside get ENOTCONN.
                log::warn!("unmount failed ({e}); detaching lazily");
                match mountpoint::detach(&target, true) {
                    Ok(()) => leave(&counts_at_exit),
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

    let served = session.run();
    // A worker may still hold the filesystem (finishing a job it already
    // answered) when this thread returns and the process ends: the counts
    // are saved here, not left to the last holder's drop, and a write that
    // drop began is waited for.
    if let Err(e) = counts_after_run.save() {
        log::warn!("{}", e.render());
    }
    if let Some(notifier) = &notifier {
        notifier.stopping();
    }
    if let (Some(own), Ok(())) = (&mut own_mount, &served) {
        // Served until unmounted: the mount point may hold another mount
        // by now, which is not ours to take down.
        own.armed = false;
    }
    served.map_err(|e| {
        Error::at(
            ErrorCode::MountFailed,
            mount_point,
            format!("serving the mount failed: {e}"),
        )
    })?;
    log::info!("unmounted {}; exiting", mount_point.display());
    Ok(())
}

/// Leaves at once, without unwinding, keeping the counts first.
fn leave(counts: &CountSaver) -> ! {
    let _ = counts.save();
    std::process::exit(0)
}

/// How often the daemon writes the persisted count cache when it changed.
pub const COUNT_SAVE_INTERVAL: Duration = Duration::from_secs(2);

/// How long the daemon may take to leave once its mount is gone.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// Ends the process once the mount is gone and the session has not
/// returned within [`EXIT_GRACE`]: a request stuck in the filesystem (a
/// hung device below the warehouse) must not keep a daemon of an unmounted
/// filesystem alive. The counts are saved first.
fn spawn_exit_watchdog(mount_point: PathBuf, counts: CountSaver, notifier: Option<Arc<Notifier>>) {
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
            if let Some(notifier) = &notifier {
                notifier.stopping();
            }
            leave(&counts)
        });
    if let Err(e) = spawned {
        log::warn!("no exit watchdog: {e}");
    }
}

/// The failure of a periodic write worth a line in the log. A write
/// refused stays refused until someone acts (a newer build's cache, a
/// foreign file) and is tried again at every period: it is said once, and
/// again only after a write succeeded or failed otherwise. `said` is the
/// failure said last.
fn new_failure<'a>(said: &mut Option<ErrorCode>, saved: &'a Result<bool>) -> Option<&'a Error> {
    match saved {
        Err(e) if *said != Some(e.code) => {
            *said = Some(e.code);
            Some(e)
        }
        Err(_) => None,
        Ok(_) => {
            *said = None;
            None
        }
    }
}

/// Writes the catalog's persisted count cache every
/// [`COUNT_SAVE_INTERVAL`] while it changes; the last write happens when
/// the catalog is dropped at unmount. Ends with the catalog.
fn spawn_count_saver(catalog: Weak<Catalog>) {
    let spawned = std::thread::Builder::new()
        .name("count-cache".into())
        .spawn(move || {
            let mut said = None;
            loop {
                std::thread::sleep(COUNT_SAVE_INTERVAL);
                let Some(catalog) = catalog.upgrade() else {
                    return;
                };
                let saved = catalog.save_counts();
                if let Some(e) = new_failure(&mut said, &saved) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_is_said_once_until_a_write_succeeds_or_fails_otherwise() {
        let newer = || Err(Error::new(ErrorCode::CountCacheNewer, "newer"));
        let foreign = || Err(Error::new(ErrorCode::CountCacheForeign, "foreign"));
        let mut said = None;
        let said_each: Vec<bool> = [newer(), newer(), newer(), foreign(), foreign(), newer()]
            .iter()
            .map(|saved| new_failure(&mut said, saved).is_some())
            .collect();
        assert_eq!(said_each, [true, false, false, true, false, true]);
        assert!(new_failure(&mut said, &Ok(true)).is_none());
        assert!(
            new_failure(&mut said, &newer()).is_some(),
            "said again after a success"
        );
    }
}
