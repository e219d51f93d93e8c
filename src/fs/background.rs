//! Going to the background: the mounting command starts the daemon and
//! returns only once its mount answers.
//!
//! The daemon is this program run again with the command's own arguments
//! (`args_os`), in a new session; forking is not an option once threads
//! have started. What makes the new process the daemon is one variable in
//! its environment, [`READY_FD_VAR`] = `FD:INODE`, naming the write end of
//! a pipe: the daemon checks that the descriptor is that pipe, serves in
//! the foreground and writes `ready WAREHOUSE MOUNTPOINT` (the paths as it
//! resolved them) once the kernel has accepted the mount, or fails with an
//! error on standard error. The command compares the paths with its own,
//! checks from outside that the mount point is a FUSE filesystem that
//! answers, and only then exits 0. Every failure stops the daemon cleanly
//! and leaves nothing mounted; only the readiness pipe and the standard
//! descriptors cross into the daemon.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::daemon::{MountConfig, Mounted};
use super::mountpoint::{self, MountState};
use crate::error::{Error, ErrorCode, Result};
use crate::warehouse::{self, Dir};

/// The line a background daemon writes once its mount is up.
const READY: &str = "ready";

/// Set by a mounting process in the environment of the daemon it starts:
/// the number of the descriptor the daemon reports readiness on. Its
/// presence is what makes a `pchronicle mount` the background daemon.
pub const READY_FD_VAR: &str = "PCHRONICLE_READY_FD";

/// What a background daemon writes once its mount is up: the word and the
/// warehouse and mount point as it resolved them.
pub(super) fn ready_line(mounted: &Mounted) -> String {
    format!(
        "{READY} {} {}",
        mounted.warehouse.display(),
        mounted.mount_point.display()
    )
}

/// The pipe a background daemon reports readiness on (see
/// [`READY_FD_VAR`]).
pub(super) struct ReadyPipe(OwnedFd);

impl ReadyPipe {
    /// The pipe this process was started with as a background daemon, if
    /// it was.
    pub(super) fn from_env() -> Result<Option<ReadyPipe>> {
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
    pub(super) fn report(self, mounted: &Mounted, log: DaemonLog) -> Result<()> {
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| Error::io("/dev/null", &e))?;
        let mut rotated_in = None;
        let (log, syslog): (OwnedFd, bool) = match log {
            DaemonLog::File {
                file,
                rotated_in: dir,
            } => {
                rotated_in = dir;
                (file.into(), false)
            }
            DaemonLog::Syslog(socket) => (socket.into(), true),
            DaemonLog::Discard => (
                null.try_clone()
                    .map_err(|e| Error::io("/dev/null", &e))?
                    .into(),
                false,
            ),
        };
        let mut pipe = std::fs::File::from(self.0);
        writeln!(pipe, "{}", ready_line(mounted))
            .map_err(|e| Error::new(ErrorCode::MountFailed, format!("reporting readiness: {e}")))?;
        drop(pipe);
        let redirected = nix::unistd::dup2_stdin(null.as_fd())
            .and_then(|()| nix::unistd::dup2_stdout(null.as_fd()))
            .and_then(|()| nix::unistd::dup2_stderr(log.as_fd()))
            .and_then(|()| nix::unistd::chdir("/"));
        if syslog && redirected.is_ok() {
            crate::logging::use_syslog_format();
        }
        if let (Some(dir), Ok(())) = (rotated_in, &redirected) {
            spawn_log_rotation(dir);
        }
        redirected.map_err(|e| {
            Error::new(
                ErrorCode::MountFailed,
                format!("detaching from the terminal: {e}"),
            )
        })
    }
}

/// Where a background daemon's log goes.
#[derive(Debug)]
pub(super) enum DaemonLog {
    /// Appended to a file; rotated while the daemon runs when it is the
    /// state directory's `daemon.log` (the directory is kept open).
    File {
        file: std::fs::File,
        rotated_in: Option<Dir>,
    },
    /// The system log (journald or a syslog daemon), a datagram a line.
    Syslog(std::os::unix::net::UnixDatagram),
    /// Nowhere.
    Discard,
}

/// The variable that names the system log's socket instead of
/// [`SYSLOG_SOCKET`].
pub const SYSLOG_SOCKET_VAR: &str = "PCHRONICLE_SYSLOG_SOCKET";

/// Where journald and syslog daemons listen.
const SYSLOG_SOCKET: &str = "/dev/log";

/// The state subdirectory of the daemon's log file, and its name.
const LOG_DIR: &str = "log";
const LOG_NAME: &str = "daemon.log";

/// A log file past this size is renamed `daemon.log.1` (when a daemon
/// starts, and checked every [`LOG_ROTATE_CHECK`] while it runs), so two
/// generations are kept at most.
const LOG_ROTATE_BYTES: u64 = 8 << 20;

/// How often a running daemon checks the size of its `daemon.log`.
const LOG_ROTATE_CHECK: Duration = Duration::from_secs(10);

/// Starts a new `daemon.log` in `dir` whenever standard error (the log)
/// grew past [`LOG_ROTATE_BYTES`]: the old one becomes `daemon.log.1`.
fn spawn_log_rotation(dir: Dir) {
    let spawned = std::thread::Builder::new()
        .name("log-rotation".into())
        .spawn(move || {
            // A failed rotation (a full disk, a state directory made
            // unsafe) is tried again at every check: the log must not grow
            // for good. Said once per run of failures.
            let mut failing = false;
            loop {
                std::thread::sleep(LOG_ROTATE_CHECK);
                let stderr = std::io::stderr();
                match rotate_if_grown(&dir, stderr.as_fd(), LOG_ROTATE_BYTES, |new| {
                    nix::unistd::dup2_stderr(new)
                }) {
                    Ok(false) => {}
                    Ok(true) => {
                        failing = false;
                        log::info!("started a new {LOG_NAME}; the last one is {LOG_NAME}.1")
                    }
                    Err(e) if !failing => {
                        failing = true;
                        log::warn!(
                            "could not start a new {LOG_NAME}: {e}; trying again every {} s",
                            LOG_ROTATE_CHECK.as_secs()
                        );
                    }
                    Err(_) => {}
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("{LOG_NAME} is not rotated while the daemon runs: {e}");
    }
}

/// When the log open as `log` has grown past `limit` bytes: renames
/// `daemon.log` in `dir` to `daemon.log.1`, opens a new one and hands it
/// to `point` (which makes `log` write there); true when it did.
fn rotate_if_grown(
    dir: &Dir,
    log: BorrowedFd<'_>,
    limit: u64,
    point: impl FnOnce(BorrowedFd<'_>) -> nix::Result<()>,
) -> std::io::Result<bool> {
    if nix::sys::stat::fstat(log)?.st_size as u64 <= limit {
        return Ok(false);
    }
    let file = dir.open_append(LOG_NAME, 0o600, limit)?;
    point(file.as_fd())?;
    Ok(true)
}

/// The background daemon's log: the file `--log` names (one that cannot be
/// opened fails the mount); else the system log when one listens; else
/// `daemon.log` in the warehouse's state directory `log` (see
/// [`warehouse::state_dir`]); else nothing, with a warning.
pub(super) fn daemon_log(log_file: Option<&Path>, root: &Dir) -> Result<DaemonLog> {
    if let Some(path) = log_file {
        // Never through a symlink, never blocking on a FIFO, private when
        // created, only a regular file; never rotated (the operator's).
        return Dir::open_parent_of(path)
            .and_then(|(dir, name)| dir.open_append(name, 0o600, u64::MAX))
            .map(|file| DaemonLog::File {
                file,
                rotated_in: None,
            })
            .map_err(|e| Error::io(path, &e));
    }
    let socket = std::env::var_os(SYSLOG_SOCKET_VAR).unwrap_or_else(|| SYSLOG_SOCKET.into());
    let listening =
        std::os::unix::net::UnixDatagram::unbound().and_then(|s| s.connect(&socket).map(|()| s));
    match listening {
        // A system log that stalls drops lines rather than holding up the
        // requests that log them.
        Ok(socket) if socket.set_nonblocking(true).is_ok() => {
            return Ok(DaemonLog::Syslog(socket));
        }
        Ok(_) => {}
        Err(e) => log::debug!("no system log at {}: {e}", Path::new(&socket).display()),
    }
    let file = warehouse::state_dir(root, warehouse::STATE_DIR, LOG_DIR).and_then(|state| {
        let file = state.dir.open_append(LOG_NAME, 0o600, LOG_ROTATE_BYTES)?;
        log::info!("logging to {}", state.dir.path().join(LOG_NAME).display());
        Ok((file, state.dir))
    });
    Ok(match file {
        Ok((file, dir)) => DaemonLog::File {
            file,
            rotated_in: Some(dir),
        },
        Err(e) => {
            log::warn!("the daemon's log is discarded: no system log, and no log file ({e})");
            DaemonLog::Discard
        }
    })
}

/// Starts the background daemon and waits until its mount answers.
pub(super) fn spawn_daemon(config: &MountConfig, mut mounted: Mounted) -> Result<Mounted> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("finding this program: {e}")))?;
    let (ready, ready_writer) = std::io::pipe()
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("creating a pipe: {e}")))?;
    let ready_fd = ready_writer.as_raw_fd();
    let pipe_inode = nix::sys::stat::fstat(&ready_writer)
        .map_err(|e| Error::new(ErrorCode::MountFailed, format!("creating a pipe: {e}")))?
        .st_ino;
    let mut command = Command::new(exe);
    let mut args = std::env::args_os();
    // The same name too: called as `mount.fuse.pchronicle`, the daemon
    // must read its arguments as the mount helper's again.
    if let Some(name) = args.next() {
        command.arg0(name);
    }
    command
        .args(args)
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
    if !mountpoint::wait_answering(&mounted.mount_point, Duration::from_secs(10)) {
        stop(&mut child, &mounted.mount_point);
        return Err(Error::at(
            ErrorCode::MountFailed,
            &config.mount_point,
            "the mount did not answer within 10 s; it was removed",
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_log_is_renamed_and_a_new_one_taken_in_its_place() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_root(tmp.path()).unwrap();
        let mut log: OwnedFd = dir.open_append(LOG_NAME, 0o600, u64::MAX).unwrap().into();
        let write = |fd: &OwnedFd, text: &str| {
            std::fs::File::from(fd.try_clone().unwrap())
                .write_all(text.as_bytes())
                .unwrap()
        };
        write(&log, "0123456789");
        let rotate = |log: &mut OwnedFd, limit: u64| {
            let taken = std::cell::Cell::new(None);
            let rotated = rotate_if_grown(&dir, log.as_fd(), limit, |new| {
                taken.set(Some(new.try_clone_to_owned().unwrap()));
                Ok(())
            })
            .unwrap();
            if let Some(new) = taken.take() {
                *log = new;
            }
            rotated
        };
        assert!(!rotate(&mut log, 10), "not past the limit");
        write(&log, "x");
        assert!(rotate(&mut log, 10));
        write(&log, "new");
        let read = |name: &str| std::fs::read_to_string(tmp.path().join(name)).unwrap();
        assert_eq!(read("daemon.log.1"), "0123456789x");
        assert_eq!(read("daemon.log"), "new");
    }
}
