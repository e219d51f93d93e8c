//! Mounted the way system mounts are: `mount -t fuse.pchronicle`, an fstab
//! line through `mount --fstab FILE -a`, fuse3's `mount.fuse3`, taken
//! down with `umount`, and under a service manager's `NOTIFY_SOCKET`. The
//! mount(8) ones need root (it runs its helpers only for root, or for
//! fstab lines marked `user`).

use std::ffi::OsStr;
use std::fs;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pchronicle::fs::mountpoint::{self, MountState};

use crate::harness::{
    bin, empty_mount_point, fuse_usable, metrics_lines, wait_with_timeout, within,
};
use crate::support::{Warehouse, jsonl};

/// Where mount(8) looks for the helper of `fuse.pchronicle`.
const HELPER: &str = "/sbin/mount.fuse.pchronicle";

/// True when these tests can run: FUSE works and we are root. Without
/// root they are skipped, or fail under `PCHRONICLE_REQUIRE_FUSE=1`.
fn system_mounts_usable() -> bool {
    if !fuse_usable() {
        return false;
    }
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("PCHRONICLE_REQUIRE_FUSE").as_deref() != Ok("1"),
        "mount(8) tests need root (PCHRONICLE_REQUIRE_FUSE=1)"
    );
    eprintln!("skipping: mount(8) runs helpers only for root");
    false
}

/// `/sbin/mount.fuse.pchronicle` pointing at the binary under test while
/// held; removed again unless it was there before.
struct Helper {
    installed: bool,
}

impl Helper {
    fn install() -> Helper {
        let helper = Path::new(HELPER);
        match fs::read_link(helper) {
            Ok(target) if target == bin() => return Helper { installed: false },
            Ok(_) => fs::remove_file(helper).unwrap(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{HELPER} is there and not a link ({e}); not replacing it"),
        }
        std::os::unix::fs::symlink(bin(), helper).unwrap();
        Helper { installed: true }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if self.installed {
            let _ = fs::remove_file(HELPER);
        }
    }
}

fn small_warehouse() -> Warehouse {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(3, 1_790_000_000));
    wh.storyline("team/planner", 5);
    wh
}

fn command(program: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(program)
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pid of the daemon serving `mnt` (its command line names it).
fn daemon_of(mnt: &Path) -> Option<u32> {
    let wanted = mnt.as_os_str().as_encoded_bytes();
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = fs::read(entry.path().join("cmdline")).ok()?;
        let exe = fs::read_link(entry.path().join("exe")).ok()?;
        let serves = cmdline.split(|b| *b == 0).any(|arg| arg == wanted);
        (serves && exe == bin()).then_some(pid)
    })
}

/// Checks the mount at `mnt` is ours, read-only, without devices, set-id
/// bits or programs (mount(8) passes no `exec`: it is its default),
/// answers, and reads the warehouse; then `umount` takes it down and its
/// daemon leaves.
fn serves_then_umounts(mnt: &Path) {
    assert_eq!(mountpoint::state(mnt), MountState::Live);
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = table
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()))
        .expect("in the mount table");
    let options = line.split(' ').nth(5).unwrap();
    for wanted in ["ro", "nosuid", "nodev", "noexec"] {
        assert!(options.split(',').any(|o| o == wanted), "{wanted}: {line}");
    }
    // The type fstab names, so `umount -t fuse.pchronicle` finds it too.
    let (_, fs_type) = line.split_once(" - ").expect("a mountinfo line");
    assert!(fs_type.starts_with("fuse.pchronicle pchronicle "), "{line}");
    let stats = fs::read_to_string(mnt.join(".stats")).unwrap();
    assert!(stats.contains("\"record_count\": 8"), "{stats}");
    let daemon = daemon_of(mnt).expect("a daemon serves the mount");
    ok(&command("umount", &[&mnt]), "umount");
    assert_eq!(mountpoint::state(mnt), MountState::NotMounted);
    leaves(daemon);
}

/// The small warehouse with a leaf whose manifest says compact-jsonl over
/// bytes Lance cannot open: its `.stats` comes from the manifest, reading
/// its records fails.
fn broken_warehouse() -> Warehouse {
    let wh = small_warehouse();
    wh.compact("team/broken", 1, 3);
    wh
}

/// `pchronicle umount MNT`, then waits for the daemon that served it to
/// leave; its pid.
fn umount_and_wait(mnt: &Path) -> u32 {
    let daemon = daemon_of(mnt).expect("a daemon serves the mount");
    ok(
        &command(bin().to_str().unwrap(), &[&"umount", &mnt]),
        "umount",
    );
    leaves(daemon);
    daemon
}

/// Waits for the daemon `pid` to leave once its mount is gone.
fn leaves(pid: u32) {
    let gone = within(Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    assert!(gone.is_some(), "the daemon {pid} left after umount");
}

#[test]
fn mount_t_and_an_fstab_line_mount_and_umount_takes_them_down() {
    if !system_mounts_usable() {
        return;
    }
    let _helper = Helper::install();
    let wh = small_warehouse();
    let (dir, mnt) = empty_mount_point();

    let mount_t = |options: &str| {
        command(
            "mount",
            &[&"-t", &"fuse.pchronicle", &wh.path(), &mnt, &"-o", &options],
        )
    };

    // What an operator types; mount(8) adds `rw`, which is dropped with a
    // warning (the mount is read-only).
    let out = mount_t("attr_ttl=2s");
    ok(&out, "mount -t fuse.pchronicle");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("ignoring -o rw"), "{said}");
    assert!(out.stdout.is_empty(), "quiet as a helper");
    serves_then_umounts(&mnt);

    // An fstab line with what fstab and systemd add for themselves.
    let fstab = dir.path().join("fstab");
    let line = format!(
        "{} {} fuse.pchronicle defaults,nofail,_netdev,x-systemd.automount,noatime,attr_ttl=1500ms,render_timeout=30s 0 0\n",
        wh.path().display(),
        mnt.display()
    );
    fs::write(&fstab, line).unwrap();
    ok(
        &command("mount", &[&"--fstab", &fstab, &"-a"]),
        "mount --fstab -a",
    );
    serves_then_umounts(&mnt);

    // An option the mount does not know is refused with its code, and
    // nothing is left mounted.
    let out = mount_t("frobnicate");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("PCHRONICLE_MOUNT_OPTION_INVALID"), "{said}");
    assert_eq!(mountpoint::state(&mnt), MountState::NotMounted);
}

#[test]
fn fuse3s_mount_helper_runs_pchronicle_from_the_path() {
    if !system_mounts_usable() {
        return;
    }
    let wh = small_warehouse();
    let (_dir, mnt) = empty_mount_point();
    let mount_fuse3 = ["/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("fuse3's mount.fuse3 is installed");
    let path = format!(
        "{}:{}",
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(mount_fuse3)
        .arg(wh.path())
        .arg(&mnt)
        .args(["-t", "fuse.pchronicle", "-o", "nofail,attr_ttl=1s"])
        .env("PATH", path)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    ok(&out, "mount.fuse3");
    serves_then_umounts(&mnt);
}

/// The next notification on `socket`, as text.
fn notification(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 1024];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the limit");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `pchronicle mount --foreground` of `wh` at `mnt` under a service
/// manager's `NOTIFY_SOCKET`, with `SYSTEMD_EXEC_PID` as given (unset for
/// `None`).
fn foreground_mount(
    wh: &Warehouse,
    mnt: &Path,
    socket: &Path,
    exec_pid: Option<&str>,
) -> std::process::Child {
    let mut command = Command::new(bin());
    command
        .args([OsStr::new("mount"), OsStr::new("--foreground")])
        .arg(wh.path())
        .arg(mnt)
        .env("NOTIFY_SOCKET", socket)
        .env("RUST_LOG", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match exec_pid {
        Some(pid) => command.env("SYSTEMD_EXEC_PID", pid),
        None => command.env_remove("SYSTEMD_EXEC_PID"),
    };
    command.spawn().expect("the daemon starts")
}

/// Waits (at most 10 s) for a signalled foreground daemon to exit, and
/// checks it exited cleanly.
fn leaves_cleanly(child: &mut std::process::Child) {
    let status = wait_with_timeout(child, Duration::from_secs(10)).expect("it leaves");
    assert!(status.success(), "{status}");
}

#[test]
fn a_service_manager_hears_ready_once_the_mount_answers_and_stopping_at_the_end() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (dir, mnt) = empty_mount_point();
    let socket_path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();

    // In the foreground (Type=notify with --foreground): this process is
    // the service's main process.
    let mut child = foreground_mount(&wh, &mnt, &socket_path, None);
    let said = notification(&socket);
    // Read from the mount table, which no request to the daemon can
    // delay: a READY=1 sent before the mount was there fails here.
    assert!(mountpoint::pchronicle_mount_at(&mnt).is_some(), "{said}");
    assert!(said.lines().any(|l| l == "READY=1"), "{said}");
    assert!(!said.contains("MAINPID="), "{said}");
    assert!(said.contains("STATUS=serving "), "{said}");
    assert!(mountpoint::answers(&mnt));
    // SAFETY: kill(2) on the child's pid has no memory-safety concerns.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(notification(&socket), "STOPPING=1");
    leaves_cleanly(&mut child);

    // In the background, started the way systemd 248+ starts a unit's
    // process (naming it in SYSTEMD_EXEC_PID): the starting command names
    // the daemon as the main process, and the daemon says it is stopping.
    let out = Command::new("sh")
        .arg("-c")
        .arg("SYSTEMD_EXEC_PID=$$ exec \"$0\" mount \"$1\" \"$2\"")
        .arg(bin())
        .arg(wh.path())
        .arg(&mnt)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    ok(&out, "pchronicle mount");
    let said = notification(&socket);
    let daemon = daemon_of(&mnt).expect("a daemon serves the mount");
    assert!(
        said.starts_with(&format!("MAINPID={daemon}\nREADY=1\n")),
        "{said}"
    );
    assert!(mountpoint::answers(&mnt));
    ok(
        &command(bin().to_str().unwrap(), &[&"umount", &mnt]),
        "umount",
    );
    assert_eq!(notification(&socket), "STOPPING=1");

    // A socket inherited from another unit's process is left alone.
    let mut child = foreground_mount(&wh, &mnt, &socket_path, Some("1"));
    assert!(
        within(Duration::from_secs(20), || mountpoint::answers(&mnt)).is_some(),
        "the mount comes up"
    );
    // SAFETY: kill(2) on the child's pid has no memory-safety concerns.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    leaves_cleanly(&mut child);
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        socket.recv(&mut buf).is_err(),
        "nothing was sent: {:?}",
        String::from_utf8_lossy(&buf)
    );
}

#[test]
fn a_failed_request_is_logged_with_its_path_and_code_and_the_log_is_bounded() {
    if !fuse_usable() {
        return;
    }
    let wh = broken_warehouse();
    let (dir, mnt) = empty_mount_point();
    let log = dir.path().join("daemon.log");
    // No RUST_LOG: the daemon's own default filter.
    let out = Command::new(bin())
        .args([
            OsStr::new("mount"),
            OsStr::new("--quiet"),
            OsStr::new("--log"),
        ])
        .arg(&log)
        .arg(wh.path())
        .arg(&mnt)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    ok(&out, "pchronicle mount");
    assert!(out.stdout.is_empty(), "--quiet");
    let records = mnt.join("team/broken/.records");
    for _ in 0..100 {
        let err = fs::read(&records).expect_err("Lance cannot read the leaf");
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
    }
    // The daemon logs its exit after the mount is gone.
    umount_and_wait(&mnt);
    let text = fs::read_to_string(&log).unwrap();
    let failures: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(r#"of "team/broken/.records": error[PCHRONICLE_LANCE]"#))
        .collect();
    assert!(!failures.is_empty(), "{text}");
    assert!(
        failures.len() == pchronicle::fs::fuse::FAILURES_LOGGED_PER_MINUTE as usize,
        "one line per failure, up to the minute's budget: {} lines",
        failures.len()
    );
    for said in ["INFO", "ready: serving", "exiting"] {
        assert!(text.contains(said), "{said}: {text}");
    }
}

#[test]
fn a_background_daemon_logs_to_the_system_log_else_to_the_state_directory() {
    if !fuse_usable() {
        return;
    }
    let wh = broken_warehouse();
    let (dir, mnt) = empty_mount_point();
    let records = mnt.join("team/broken/.records");
    // Mounts in the background with the system log at `socket`, makes one
    // request fail, unmounts; the daemon's pid.
    let one_failure = |socket: &Path| -> u32 {
        let out = Command::new(bin())
            .args([OsStr::new("mount"), OsStr::new("--quiet")])
            .arg(wh.path())
            .arg(&mnt)
            .env("PCHRONICLE_SYSLOG_SOCKET", socket)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        ok(&out, "pchronicle mount");
        assert_eq!(
            fs::read(&records).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO))
        );
        umount_and_wait(&mnt)
    };
    let failure = r#"read of "team/broken/.records": error[PCHRONICLE_LANCE]"#;

    // A system log listens: a datagram a line, facility daemon.
    let socket = dir.path().join("syslog");
    let syslog = UnixDatagram::bind(&socket).unwrap();
    syslog.set_nonblocking(true).unwrap();
    let daemon = one_failure(&socket);
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = syslog.recv(&mut buf) {
        lines.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let warning = format!("<28>pchronicle[{daemon}]: WARN pchronicle::fs::fuse: {failure}");
    assert!(lines.iter().any(|l| l.starts_with(&warning)), "{lines:#?}");
    let exit = format!("<30>pchronicle[{daemon}]: INFO pchronicle::fs::daemon: unmounted");
    assert!(lines.iter().any(|l| l.starts_with(&exit)), "{lines:#?}");

    // None listens: the warehouse's state directory, readable by its owner
    // alone.
    let none = dir.path().join("no-syslog");
    one_failure(&none);
    let file = wh.path().join(".pchronicle/log/daemon.log");
    let text = fs::read_to_string(&file).unwrap();
    assert!(text.contains(failure), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// The descriptor number the daemon is handed the FUSE device as.
const DEVICE_FD: i32 = 3;

#[test]
fn a_dev_fd_mount_point_serves_a_device_the_caller_mounted() {
    if !system_mounts_usable() {
        return;
    }
    let wh = small_warehouse();
    let (_dir, mnt) = empty_mount_point();
    // What a container runtime does: open the device, mount it, and hand
    // the descriptor over.
    let device = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&device);
    let options = format!("fd={raw},rootmode=40000,user_id=0,group_id=0,default_permissions");
    let flags = nix::mount::MsFlags::MS_RDONLY
        | nix::mount::MsFlags::MS_NODEV
        | nix::mount::MsFlags::MS_NOSUID;
    nix::mount::mount(
        Some("pchronicle"),
        &mnt,
        Some("fuse.pchronicle"),
        flags,
        Some(options.as_str()),
    )
    .expect("the test mounts /dev/fuse itself");
    let mut command = Command::new(bin());
    command
        .arg("mount")
        .arg(wh.path())
        .arg(format!("/dev/fd/{DEVICE_FD}"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            // dup2 onto itself would keep close-on-exec set.
            let kept = if raw == DEVICE_FD {
                libc::fcntl(DEVICE_FD, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, DEVICE_FD)
            };
            if kept < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = command.spawn().expect("the daemon starts");
    // The daemon holds the only descriptor now: if it dies, the mount
    // answers ENOTCONN instead of hanging.
    drop(device);
    let stats = fs::read_to_string(mnt.join(".stats")).expect("the mount answers");
    assert!(stats.contains("\"record_count\": 8"), "{stats}");
    assert_eq!(
        fs::read_to_string(mnt.join("runs/a.jsonl")).unwrap(),
        jsonl(3, 1_790_000_000)
    );
    assert!(
        daemon.try_wait().unwrap().is_none(),
        "a /dev/fd mount is served in the foreground"
    );
    // Unmounted by its owner: the daemon's session ends and it leaves.
    nix::mount::umount2(&mnt, nix::mount::MntFlags::empty()).expect("umount");
    let status = wait_with_timeout(&mut daemon, Duration::from_secs(10))
        .expect("the daemon leaves once its device is unmounted");
    assert!(status.success(), "{status}");

    // Anything but an open FUSE device is refused, with nothing served.
    let out = command_with(&[&"mount", &wh.path(), &"/dev/fd/0", &"-f"], Stdio::null());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PCHRONICLE_MOUNT_FAILED") && err.contains("not /dev/fuse"),
        "{err}"
    );
    let out = command_with(&[&"mount", &wh.path(), &"/dev/fd/97", &"-f"], Stdio::null());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not open"));
}

/// The binary run with `args`, standard input from `stdin`.
fn command_with(args: &[&dyn AsRef<OsStr>], stdin: Stdio) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(stdin)
        .output()
        .expect("the binary runs")
}

/// The metrics lines in a daemon's log, parsed.
#[test]
fn log_metrics_writes_counts_latencies_renders_cache_hits_and_memory() {
    let wh = broken_warehouse();
    let Some(m) = crate::harness::Mounted::start_logging(
        wh.path(),
        &["--log-metrics", "300ms"],
        "warn,pchronicle=info",
    ) else {
        return;
    };
    for _ in 0..3 {
        let _ = fs::read_dir(m.at("runs")).unwrap().count();
        let _ = fs::read_to_string(m.at(".stats")).unwrap();
        let _ = fs::metadata(m.at("runs/a.jsonl")).unwrap();
    }
    let _ = fs::read(m.at("team/broken/.records")).expect_err("a failing read");
    let seen = within(Duration::from_secs(5), || {
        metrics_lines(&m.log())
            .iter()
            .any(|l| l["ops"]["lookup"]["count"].as_u64() > Some(0))
    });
    assert!(seen.is_some(), "{}", m.log());
    let lines = metrics_lines(&m.log());
    let busy = lines
        .iter()
        .find(|l| l["ops"]["lookup"]["count"].as_u64() > Some(0))
        .unwrap();
    let lookup = &busy["ops"]["lookup"];
    for field in ["count", "errors", "mean_us", "p50_us", "p99_us", "max_us"] {
        assert!(lookup[field].is_u64(), "{field}: {busy}");
    }
    assert!(lookup["p99_us"].as_u64() >= lookup["p50_us"].as_u64());
    let all: u64 = lines
        .iter()
        .filter_map(|l| l["ops"]["read"]["errors"].as_u64())
        .sum();
    assert!(all >= 1, "the failed .records read is counted: {lines:?}");
    let renders: u64 = lines
        .iter()
        .filter_map(|l| l["renders"]["count"].as_u64())
        .sum();
    assert!(renders >= 1, "{lines:?}");
    assert!(busy["rss_kib"].as_u64() > Some(1024), "{busy}");
    assert!(busy["inodes"].as_u64() > Some(1), "{busy}");
    for cache in ["dirs", "nodes", "files", "renders"] {
        assert!(busy["cache"][cache]["hits"].is_u64(), "{cache}: {busy}");
    }
    // Intervals go on being reported while nothing happens.
    std::thread::sleep(Duration::from_millis(700));
    let last = metrics_lines(&m.log()).pop().unwrap();
    assert!(last["interval_s"].as_f64().unwrap() >= 0.25, "{last}");
}
