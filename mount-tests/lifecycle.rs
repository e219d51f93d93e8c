//! Mounting and unmounting: backgrounding, signals, dead mounts, and the
//! coded refusals that leave nothing mounted.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::time::Duration;

use pchronicle::fs::mountpoint::{self, MountState};

use crate::harness::{
    Mounted, empty_mount_point, errno_of, fuse_usable, open_mount_point, run, wait_with_timeout,
};
use crate::support::{Warehouse, jsonl};

fn small_warehouse() -> Warehouse {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(3, 1_790_000_000));
    wh.storyline("team/planner", 5);
    wh
}

fn is_empty_dir(path: &Path) -> bool {
    fs::read_dir(path)
        .map(|mut d| d.next().is_none())
        .unwrap_or(false)
}

/// The daemon's pid, as a background mount names it.
fn daemon_pid(said: &str) -> u32 {
    said.split("daemon pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("names the daemon's pid: {said}"))
}

fn os<'a>(items: &'a [&'a dyn AsRef<OsStr>]) -> Vec<&'a OsStr> {
    items.iter().map(|i| AsRef::<OsStr>::as_ref(*i)).collect()
}

#[test]
fn background_mount_answers_when_the_command_returns_and_umount_empties_it() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (_dir, mnt) = empty_mount_point();
    let out = run(&os(&[&"mount", &wh.path(), &mnt]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("pchronicle umount"),
        "tells what to type next: {said}"
    );
    // No waiting: the mount answers as soon as the command has returned.
    let stats = fs::read_to_string(mnt.join(".stats")).unwrap();
    assert!(stats.contains("\"record_count\": 8"), "{stats}");
    let out = run(&os(&[&"umount", &mnt]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mountpoint::state(&mnt), MountState::NotMounted);
    assert!(is_empty_dir(&mnt), "the mount point is empty again");
    // Unmounting again is a coded refusal.
    let out = run(&os(&[&"umount", &mnt]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_NOT_MOUNTED"));
}

#[test]
fn sigint_and_sigterm_unmount_cleanly_and_exit_zero() {
    let wh = small_warehouse();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let Some(mut m) = Mounted::start(wh.path(), &[]) else {
            return;
        };
        assert!(m.at(".stats").is_file());
        let status = m.signal(signal);
        assert!(status.success(), "signal {signal}: {status}");
        assert_eq!(
            mountpoint::state(&m.mnt),
            MountState::NotMounted,
            "signal {signal}"
        );
        assert!(is_empty_dir(&m.mnt));
    }
}

#[test]
fn a_busy_mount_still_stops_on_sigterm() {
    let wh = small_warehouse();
    let Some(mut m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    // A process sitting in the mount keeps it busy.
    let mut sitter = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(m.at("runs"))
        .spawn()
        .unwrap();
    let status = m.signal(libc::SIGTERM);
    assert!(status.success(), "{status}");
    assert_eq!(mountpoint::state(&m.mnt), MountState::NotMounted);
    let _ = sitter.kill();
    let _ = sitter.wait();
}

#[test]
fn after_sigkill_umount_clears_the_dead_mount() {
    let wh = small_warehouse();
    let Some(mut m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let status = m.signal(libc::SIGKILL);
    assert!(!status.success());
    assert_eq!(mountpoint::state(&m.mnt), MountState::Dead);
    assert_eq!(errno_of(fs::read_dir(&m.mnt)), libc::ENOTCONN);
    let out = run(&os(&[&"umount", &m.mnt]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mountpoint::state(&m.mnt), MountState::NotMounted);
    assert!(is_empty_dir(&m.mnt));
}

#[test]
fn mounting_onto_a_dead_mount_recovers_it() {
    let wh = small_warehouse();
    let Some(mut m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    m.signal(libc::SIGKILL);
    assert_eq!(mountpoint::state(&m.mnt), MountState::Dead);
    let dir = tempfile::tempdir().unwrap();
    let again = Mounted::start_at(wh.path(), &m.mnt, &[], dir);
    assert!(
        fs::read_to_string(again.at(".stats"))
            .unwrap()
            .contains("\"record_count\": 8")
    );
    drop(again);
    assert_eq!(mountpoint::state(&m.mnt), MountState::NotMounted);
}

/// Runs `pchronicle mount` expecting a coded refusal; checks nothing is
/// left mounted at `mnt`.
fn refused(args: &[&dyn AsRef<OsStr>], mnt: &Path, code: &str) {
    let out = run(&os(args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("error[{code}]")),
        "expected {code}: {stderr}"
    );
    assert!(stderr.contains("fix:"), "{stderr}");
    assert_ne!(
        mountpoint::state(mnt),
        MountState::Live,
        "nothing is mounted after {code}"
    );
}

#[test]
fn bad_warehouses_and_mount_points_are_refused_with_codes() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (dir, mnt) = empty_mount_point();
    let missing = dir.path().join("missing");
    let file = wh.abs("runs/a.jsonl");
    refused(
        &[&"mount", &missing, &mnt],
        &mnt,
        "PCHRONICLE_PATH_NOT_FOUND",
    );
    refused(&[&"mount", &file, &mnt], &mnt, "PCHRONICLE_PATH_INVALID");
    refused(
        &[&"mount", &wh.path(), &missing],
        &missing,
        "PCHRONICLE_MOUNT_POINT_MISSING",
    );
    refused(
        &[&"mount", &wh.path(), &file],
        &file,
        "PCHRONICLE_MOUNT_POINT_MISSING",
    );
    let inside = wh.abs("mnt-inside");
    fs::create_dir(&inside).unwrap();
    refused(
        &[&"mount", &wh.path(), &inside],
        &inside,
        "PCHRONICLE_MOUNT_POINT_INSIDE_WAREHOUSE",
    );
    fs::remove_dir(&inside).unwrap();
    let full = dir.path().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("keep.txt"), "mine").unwrap();
    refused(
        &[&"mount", &wh.path(), &full],
        &full,
        "PCHRONICLE_MOUNT_POINT_NOT_EMPTY",
    );
    assert_eq!(fs::read_to_string(full.join("keep.txt")).unwrap(), "mine");
    refused(
        &[&"mount", &wh.path(), &mnt, &"-o", &"rw"],
        &mnt,
        "PCHRONICLE_MOUNT_OPTION_INVALID",
    );
    refused(
        &[&"mount", &wh.path(), &mnt, &"-o", &"ro,bogus"],
        &mnt,
        "PCHRONICLE_MOUNT_OPTION_INVALID",
    );
    refused(&[&"umount", &mnt], &mnt, "PCHRONICLE_NOT_MOUNTED");
    assert!(is_empty_dir(&mnt));

    // A live mount is not mounted over.
    let m = Mounted::start_at(wh.path(), &mnt, &[], tempfile::tempdir().unwrap());
    let out = run(&os(&[&"mount", &wh.path(), &m.mnt]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_MOUNT_POINT_IN_USE"));
    assert_eq!(mountpoint::state(&m.mnt), MountState::Live);
}

#[test]
fn foreground_daemon_exits_when_unmounted_from_outside() {
    let wh = small_warehouse();
    let Some(mut m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let out = run(&os(&[&"umount", &m.mnt]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = m.disown().unwrap();
    let status = wait_with_timeout(&mut child, Duration::from_secs(10)).expect("the daemon exits");
    assert!(status.success(), "{status}");
}

#[test]
fn an_unreadable_warehouse_is_refused_with_a_code() {
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;
    // Root reads everything, so the refusal is shown as another user.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: needs root to run the binary as nobody");
        return;
    }
    let as_nobody = |args: &[&OsStr]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(crate::harness::bin())
            .args(args)
            .output()
            .expect("setpriv runs")
    };
    if !as_nobody(&[OsStr::new("--version")]).status.success() {
        eprintln!(
            "skipping: nobody cannot run {}",
            crate::harness::bin().display()
        );
        return;
    }
    let wh = small_warehouse();
    fs::set_permissions(wh.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let (_dir, mnt) = open_mount_point();
    let out = as_nobody(&[OsStr::new("mount"), wh.path().as_os_str(), mnt.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[PCHRONICLE_IO]"), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert_eq!(mountpoint::state(&mnt), MountState::NotMounted);
}

/// The daemon keeps record-file counts in `.pchronicle/cache/counts` (not
/// with `--no-cache`), and refuses to mount over a cache a newer build
/// wrote, leaving it as it is.
#[test]
fn the_count_cache_persists_across_mounts_and_can_be_disabled() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    crate::support::settle();
    let cache = wh.path().join(".pchronicle/cache/counts");
    let serve_once = |extra: &[&str]| {
        let mut m = Mounted::start(wh.path(), extra).unwrap();
        let stats = fs::read_to_string(m.at(".stats")).unwrap();
        assert!(stats.contains("\"record_count\": 8"), "{stats}");
        assert!(m.signal(libc::SIGTERM).success());
    };
    serve_once(&["--no-cache"]);
    assert!(!cache.exists(), "--no-cache writes no cache");
    serve_once(&[]);
    let bytes = fs::read(&cache).expect("the cache is written by the time the daemon exits");
    assert!(bytes.starts_with(b"PCHRCNTS"));

    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&(pchronicle::catalog::counts::SCHEMA + 1).to_le_bytes());
    fs::write(&cache, &newer).unwrap();
    let (_dir, mnt) = empty_mount_point();
    refused(
        &[&"mount", &wh.path(), &mnt],
        &mnt,
        "PCHRONICLE_COUNT_CACHE_NEWER",
    );
    assert_eq!(fs::read(&cache).unwrap(), newer, "left untouched");
    let elsewhere = tempfile::tempdir().unwrap();
    let other = elsewhere.path().join("counts");
    serve_once(&["--cache-file", other.to_str().unwrap()]);
    assert!(other.is_file());
    assert_eq!(fs::read(&cache).unwrap(), newer);
}

/// The background daemon runs with the arguments the mount command was
/// given, as they were (relative paths and every flag), not a rebuilt
/// list; it leaves the starting directory once it serves.
#[test]
fn the_background_daemon_gets_the_arguments_as_given() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (dir, mnt) = empty_mount_point();
    // Both temporary directories are siblings: name the warehouse
    // relative to the mount point's parent.
    assert_eq!(wh.path().parent(), dir.path().parent());
    let relative = format!("../{}", wh.path().file_name().unwrap().to_str().unwrap());
    let args = [
        "mount",
        &relative,
        "mnt",
        "--attr-ttl",
        "0",
        "--max-files",
        "77",
        "--log",
        "daemon.log",
        "-o",
        "noexec",
    ];
    let out = std::process::Command::new(crate::harness::bin())
        .args(args)
        .current_dir(mnt.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let pid = daemon_pid(&said);
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let given: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .skip(1)
        .collect();
    assert_eq!(given, args.map(str::as_bytes).to_vec());
    let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    assert_eq!(cwd, Path::new("/"));
    assert!(
        mnt.parent().unwrap().join("daemon.log").is_file(),
        "the log is where it was named"
    );
    let stats = fs::read_to_string(mnt.join(".stats")).unwrap();
    assert!(stats.contains("\"record_count\": 8"), "{stats}");
    assert!(run(&os(&[&"umount", &mnt])).status.success());
}

/// The readiness variable is the daemon's alone: a stray one is refused
/// with a code and nothing is mounted.
#[test]
fn a_stray_readiness_variable_is_refused() {
    let wh = small_warehouse();
    let (_dir, mnt) = empty_mount_point();
    for value in ["1", "banana", "987"] {
        let out = std::process::Command::new(crate::harness::bin())
            .args([OsStr::new("mount"), wh.path().as_os_str(), mnt.as_os_str()])
            .env(pchronicle::fs::daemon::READY_FD_VAR, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("PCHRONICLE_MOUNT_FAILED"), "{value}: {err}");
        assert!(err.contains("PCHRONICLE_READY_FD"), "{value}: {err}");
        assert_eq!(mountpoint::state(&mnt), MountState::NotMounted);
    }
}

/// Descriptors the mounting command inherited (a lock, a service manager's
/// socket) do not live on in the root daemon; only its own remain.
#[test]
fn the_daemon_keeps_no_descriptor_its_starter_inherited() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (dir, mnt) = empty_mount_point();
    let marker = dir.path().join("inherited-marker");
    fs::write(&marker, "x").unwrap();
    // The shell opens the marker on descriptor 7 (not close-on-exec) and
    // runs the mount command with it.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg("exec 7<\"$1\"; shift; exec \"$@\"")
        .arg("bash")
        .arg(&marker)
        .arg(crate::harness::bin())
        .args([OsStr::new("mount"), wh.path().as_os_str(), mnt.as_os_str()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let pid = daemon_pid(&said);
    let held: Vec<_> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .collect();
    assert!(
        !held.contains(&marker),
        "the daemon holds the inherited descriptor: {held:?}"
    );
    assert!(run(&os(&[&"umount", &mnt])).status.success());
}
