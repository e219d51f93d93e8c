//! Mounting for tests: a guard that runs `pchronicle mount --foreground`
//! into a temporary directory, waits until the mount answers, and always
//! takes it down again.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use pchronicle::fs::mountpoint;

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_pchronicle"))
}

/// Whether mounting must work here, or may be skipped with a note.
fn fuse_required() -> bool {
    std::env::var("PCHRONICLE_REQUIRE_FUSE").is_ok_and(|v| v == "1")
}

/// True when FUSE can be used; false (with a note) when it cannot and is
/// not required; a failure when it cannot and is required.
pub fn fuse_usable() -> bool {
    let device = Path::new("/dev/fuse");
    match OpenOptions::new().read(true).write(true).open(device) {
        Ok(_) => true,
        Err(e) if fuse_required() => panic!(
            "mounting is required (PCHRONICLE_REQUIRE_FUSE=1) but impossible: {}: {e}",
            device.display()
        ),
        Err(e) => {
            eprintln!(
                "skipping: FUSE is not usable here ({}: {e}); set PCHRONICLE_REQUIRE_FUSE=1 to fail instead",
                device.display()
            );
            false
        }
    }
}

/// A new empty directory to mount onto, inside a temporary directory that
/// is removed when the returned guard drops.
pub fn empty_mount_point() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    (dir, mnt)
}

/// [`empty_mount_point`] in a directory every user may enter, for a
/// mount other users read (`--allow-other`) or make.
pub fn open_mount_point() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (dir, mnt) = empty_mount_point();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, mnt)
}

/// Runs the binary with `args` and returns what it printed.
pub fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("the pchronicle binary runs")
}

/// A live foreground mount of a warehouse, unmounted on drop.
pub struct Mounted {
    pub mnt: PathBuf,
    child: Option<Child>,
    log: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Mounted {
    /// Mounts `warehouse` with `extra` options; `None` when FUSE is not
    /// usable here and not required.
    pub fn start(warehouse: &Path, extra: &[&str]) -> Option<Mounted> {
        if !fuse_usable() {
            return None;
        }
        let (dir, mnt) = empty_mount_point();
        Some(Mounted::start_at(warehouse, &mnt, extra, dir))
    }

    /// Mounts like [`Mounted::start`], with the daemon logging at `filter`
    /// (`RUST_LOG` syntax) into a file [`Mounted::log`] reads back.
    pub fn start_logging(warehouse: &Path, extra: &[&str], filter: &str) -> Option<Mounted> {
        if !fuse_usable() {
            return None;
        }
        let (dir, mnt) = empty_mount_point();
        let log = dir.path().join("daemon.log");
        Some(Mounted::spawn(
            warehouse,
            &mnt,
            extra,
            dir,
            Some((filter, log)),
            &[],
        ))
    }

    /// Mounts like [`Mounted::start`], the daemon given `env` (a remote
    /// warehouse's endpoint and credentials).
    pub fn start_with_env(
        warehouse: &Path,
        extra: &[&str],
        env: &[(&'static str, String)],
    ) -> Option<Mounted> {
        if !fuse_usable() {
            return None;
        }
        let (dir, mnt) = empty_mount_point();
        Some(Mounted::spawn(warehouse, &mnt, extra, dir, None, env))
    }

    /// Mounts onto an existing directory `mnt`.
    pub fn start_at(
        warehouse: &Path,
        mnt: &Path,
        extra: &[&str],
        dir: tempfile::TempDir,
    ) -> Mounted {
        Mounted::spawn(warehouse, mnt, extra, dir, None, &[])
    }

    fn spawn(
        warehouse: &Path,
        mnt: &Path,
        extra: &[&str],
        dir: tempfile::TempDir,
        logging: Option<(&str, PathBuf)>,
        env: &[(&'static str, String)],
    ) -> Mounted {
        let mut command = Command::new(bin());
        command.envs(env.iter().map(|(k, v)| (k, v)));
        command
            .arg("mount")
            .arg(warehouse)
            .arg(mnt)
            .arg("--foreground")
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let log = logging.map(|(filter, path)| {
            let file = std::fs::File::create(&path).expect("a log file");
            command.env("RUST_LOG", filter).stderr(file);
            path
        });
        let child = command.spawn().expect("the daemon starts");
        let mut mounted = Mounted {
            mnt: mnt.to_path_buf(),
            child: Some(child),
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !mountpoint::answers(&mounted.mnt) {
            if let Some(status) = mounted.child.as_mut().unwrap().try_wait().unwrap() {
                mounted.child = None;
                panic!("the daemon exited before the mount answered: {status}");
            }
            assert!(Instant::now() < deadline, "the mount did not come up");
            std::thread::sleep(Duration::from_millis(10));
        }
        mounted
    }

    /// What the daemon logged so far (mounted with `start_logging`).
    pub fn log(&self) -> String {
        let path = self.log.as_ref().expect("mounted with start_logging");
        std::fs::read_to_string(path).expect("the daemon's log")
    }

    /// `rel` inside the mount (`""` is the mount point).
    pub fn at(&self, rel: &str) -> PathBuf {
        if rel.is_empty() || rel == "." {
            self.mnt.clone()
        } else {
            self.mnt.join(rel)
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("the daemon runs").id() as i32
    }

    /// Sends `signal` to the daemon and waits (at most 10 s) for it to exit.
    pub fn signal(&mut self, signal: i32) -> ExitStatus {
        let pid = self.pid();
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(pid, signal) };
        let mut child = self.child.take().expect("the daemon runs");
        wait_with_timeout(&mut child, Duration::from_secs(10))
            .expect("the daemon exits after a signal")
    }

    /// Forgets the daemon without stopping it (it was stopped otherwise).
    pub fn disown(&mut self) -> Option<Child> {
        self.child.take()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            if wait_with_timeout(&mut child, Duration::from_secs(5)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if mountpoint::pchronicle_mount_at(&self.mnt).is_some() {
            let _ = mountpoint::detach(&self.mnt, true);
        }
    }
}

pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().ok()? {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `check` until it holds, for at most `limit`; returns how long it
/// took, or `None` if it never held.
pub fn within(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if check() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The options of the mount at `mnt` (the per-mount field of
/// `/proc/self/mountinfo`: `ro`, `nosuid`, `noexec`, ...); `None` when
/// nothing is mounted there.
pub fn mount_options(mnt: &Path) -> Option<Vec<String>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let escaped = mnt.to_str().unwrap().replace(' ', "\\040");
    let line = table
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(escaped.as_str()))?;
    Some(
        line.split(' ')
            .nth(5)?
            .split(',')
            .map(String::from)
            .collect(),
    )
}

/// Every mount, of any type, at `dir` or below it.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountpoint::parse_mountinfo(&table)
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|at| at.starts_with(dir))
        .collect()
}

/// `getxattr(2)` of `name` on `path`, as text; `Err(errno)` on failure.
pub fn getxattr(path: &Path, name: &str) -> Result<String, i32> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if len < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    buf.truncate(len as usize);
    Ok(String::from_utf8(buf).unwrap())
}

/// The raw errno of an I/O result that must have failed.
pub fn errno_of<T: std::fmt::Debug>(result: std::io::Result<T>) -> i32 {
    result
        .expect_err("the call should have failed")
        .raw_os_error()
        .expect("an OS error")
}

/// A read-only mapping of a whole file, opened through whatever path is
/// given (through the mount, the open decides whether cached pages stay).
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
    _file: std::fs::File,
}

impl Mapping {
    pub fn of(path: &Path) -> Mapping {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: mapping an open descriptor read-only; the mapping is
        // unmapped in Drop before the file is closed.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        Mapping {
            ptr,
            len,
            _file: file,
        }
    }

    /// The mapped bytes, copied out.
    pub fn bytes(&self) -> Vec<u8> {
        // SAFETY: the mapping covers `len` readable bytes while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len).to_vec() }
    }

    /// How many of the file's pages are in the page cache (`mincore(2)`).
    pub fn resident_pages(&self) -> usize {
        let mut vec = vec![0u8; self.len.div_ceil(4096)];
        // SAFETY: the mapping is valid and `vec` has one byte per page.
        assert_eq!(
            unsafe { libc::mincore(self.ptr, self.len, vec.as_mut_ptr()) },
            0
        );
        vec.iter().filter(|b| *b & 1 == 1).count()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `of`, exactly once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The metrics lines of a daemon's log (`--log-metrics`), as JSON.
pub fn metrics_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|line| line.split_once(" metrics ").map(|(_, json)| json))
        .map(|json| serde_json::from_str(json).expect("a metrics line is JSON"))
        .collect()
}
