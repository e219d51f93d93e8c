//! A root daemon over a tree others write, attacked through the mount:
//! special files where metadata should be, a directory swapped for a
//! symlink while it is read, and another user reading through
//! `--allow-other`. The core's side of each attack is in
//! `tests/catalog/hostile.rs`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{Mounted, bin, open_mount_point};
use crate::support::{Warehouse, jsonl};

/// Reads `path` on another thread; `None` when it takes longer than
/// `limit` (the reader is left behind: that is the failure).
fn read_within(path: PathBuf, limit: Duration) -> Option<std::io::Result<Vec<u8>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(fs::read(&path));
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn fifos_and_devices_where_metadata_belongs_never_hang_the_mount() {
    let wh = Warehouse::new();
    for i in 0..4 {
        let leaf = format!("leaf{i}");
        wh.storyline(&leaf, 2);
        wh.fifo(&format!("{leaf}/chronicle.manifest"));
    }
    wh.storyline("zero", 2);
    wh.symlink("/dev/zero", "zero/chronicle.manifest");
    wh.file("a.jsonl", jsonl(1, 0));
    wh.fifo("a.jsonl.indexes.json");
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", "0"]) else {
        return;
    };
    let limit = Duration::from_secs(20);
    for rel in [
        ".stats",
        "leaf0/.stats",
        "zero/.sources",
        "leaf3/.stats",
        ".sources",
    ] {
        let read = read_within(m.at(rel), limit)
            .unwrap_or_else(|| panic!("reading {rel} hung"))
            .unwrap_or_else(|e| panic!("reading {rel}: {e}"));
        assert!(!read.is_empty(), "{rel}");
    }
    let stats: serde_json::Value =
        serde_json::from_slice(&fs::read(m.at(".stats")).unwrap()).unwrap();
    assert_eq!(stats["record_count"], 4 * 2 + 2 + 1, "{stats}");
    // The mount still answers everything else: five leaves, a.jsonl and
    // the two synthetic files (the FIFO is not listed).
    assert_eq!(fs::read_dir(m.at("")).unwrap().count(), 5 + 1 + 2);
}

#[test]
fn a_directory_swapped_for_a_symlink_never_serves_outside_bytes() {
    let wh = Warehouse::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("f.jsonl"), "{\"secret\":1}\n".repeat(7)).unwrap();
    wh.file("d/a/f.jsonl", jsonl(3, 0));
    wh.symlink(outside.path().to_str().unwrap(), "d/b");
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", "0"]) else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = wh.swapper("d", &stop);
    let (mut served, mut rendered) = (0, 0);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        for rel in ["d/a/f.jsonl", "d/b/f.jsonl", "d/.sources", "d/.stats"] {
            if let Ok(bytes) = fs::read(m.at(rel)) {
                let text = String::from_utf8_lossy(&bytes);
                assert!(!text.contains("secret"), "{rel} served outside bytes");
                assert!(!text.contains("\"record_count\": 7"), "{rel}: {text}");
                if rel.ends_with(".jsonl") {
                    served += 1;
                } else {
                    rendered += 1;
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(
        swaps > 100 && served > 0 && rendered > 0,
        "{swaps} {served} {rendered}"
    );
}

const TEST_USER: &str = "pchronicle-test";

/// The uid and gid of the unprivileged test user, created when missing.
pub(crate) fn test_user() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id")
            .arg(flag)
            .arg(TEST_USER)
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse::<u32>()
            .ok()
    };
    if id("-u").is_none() {
        let status = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(TEST_USER)
            .status()
            .expect("useradd runs");
        assert!(
            status.success() || id("-u").is_some(),
            "useradd {TEST_USER}"
        );
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// Runs `program args` as the test user (no supplementary groups).
pub(crate) fn as_user(uid: u32, gid: u32, program: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(program)
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("setpriv runs")
}

fn stdout(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn another_user_sees_through_the_mount_what_it_could_read_natively() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root to act as a second user");
        return;
    }
    let (uid, gid) = test_user();
    let wh = Warehouse::new();
    wh.file("open/a.jsonl", jsonl(2, 1_700_000_000));
    wh.file("open/private.jsonl", jsonl(7, 1_700_000_000));
    wh.file("closed/b.jsonl", jsonl(5, 1_700_000_000));
    wh.storyline("leaf", 3);
    wh.storyline("sealed", 2);
    wh.storyline("closed/leaf", 4);
    for (rel, mode) in [
        ("", 0o755),
        ("closed", 0o700),
        ("open/private.jsonl", 0o600),
        ("sealed", 0o750),
    ] {
        fs::set_permissions(wh.abs(rel), fs::Permissions::from_mode(mode)).unwrap();
    }
    // Manifests made fresh first, so neither side repairs one.
    let repaired = Command::new(bin())
        .arg("stats")
        .arg(wh.path())
        .output()
        .unwrap();
    assert!(repaired.status.success());
    if !crate::harness::fuse_usable() {
        return;
    }
    let (dir, mnt) = open_mount_point();
    let m = Mounted::start_at(wh.path(), &mnt, &["--allow-other", "--attr-ttl", "0"], dir);

    let runs = as_user(uid, gid, bin(), &[std::ffi::OsStr::new("--version")]);
    assert!(
        runs.status.success(),
        "{TEST_USER} cannot run {} (is the build directory under a private one?)",
        bin().display()
    );
    let cat = Path::new("/bin/cat");
    let theirs = |path: &Path| stdout(as_user(uid, gid, cat, &[path.as_os_str()]), "cat");
    let native = |command: &str, flags: &[&str]| {
        let mut args = vec![std::ffi::OsStr::new(command), wh.path().as_os_str()];
        args.extend(flags.iter().map(std::ffi::OsStr::new));
        stdout(as_user(uid, gid, bin(), &args), command)
    };
    let sources = theirs(&m.at(".sources"));
    assert_eq!(sources, native("ls", &["--sources", "--json"]));
    assert!(sources.contains("open/a.jsonl") && sources.contains("leaf"));
    assert!(!sources.contains("closed/"), "{sources}");
    let stats = theirs(&m.at(".stats"));
    assert_eq!(stats, native("stats", &["--json"]));
    let parsed: serde_json::Value = serde_json::from_str(&stats).unwrap();
    // a.jsonl and the open leaf; private.jsonl is listed but unreadable.
    assert_eq!(parsed["record_count"], 2 + 3, "{stats}");
    // Root sees all of it through the same mount.
    let all: serde_json::Value =
        serde_json::from_slice(&fs::read(m.at(".stats")).unwrap()).unwrap();
    assert_eq!(all["record_count"], 2 + 7 + 5 + 3 + 2 + 4, "{all}");
    // The kernel keeps the user out of the closed directory, and a leaf
    // shows its own permissions, read-only.
    assert!(
        !as_user(
            uid,
            gid,
            Path::new("/bin/ls"),
            &[m.at("closed").as_os_str()]
        )
        .status
        .success()
    );
    assert_eq!(fs::metadata(m.at("sealed")).unwrap().mode() & 0o777, 0o550);
    assert_eq!(fs::metadata(m.at("leaf")).unwrap().mode() & 0o777, 0o555);
    // Only root and the daemon's own user may make the mount drop its
    // caches (each refresh costs the daemon walks).
    let refused = as_user(
        uid,
        gid,
        bin(),
        &["refresh".as_ref(), m.mnt.as_os_str(), "open".as_ref()],
    );
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("PCHRONICLE_REFRESH_FAILED"),
        "{err}"
    );
    let out = crate::harness::run(&["refresh".as_ref(), m.mnt.as_os_str(), "open".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_file_replaced_after_the_kernel_saw_it_is_served_whole_and_new() {
    let wh = Warehouse::new();
    wh.file("r.jsonl", "{\"old\":1}\n");
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", "60000"]) else {
        return;
    };
    // The kernel caches the old file's attributes (its size) for a minute.
    assert_eq!(fs::metadata(m.at("r.jsonl")).unwrap().len(), 10);
    let longer = "{\"new\":1}\n".repeat(50);
    fs::write(wh.abs("r.new"), &longer).unwrap();
    fs::rename(wh.abs("r.new"), wh.abs("r.jsonl")).unwrap();
    // The open finds another file than the one shown: it answers ESTALE,
    // the kernel looks the name up again, and the new file is read whole.
    assert_eq!(fs::read_to_string(m.at("r.jsonl")).unwrap(), longer);
    assert_eq!(fs::metadata(m.at("r.jsonl")).unwrap().len(), 500);
}

#[test]
fn a_user_mounts_through_fusermount3_and_unmounts_again() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root to act as a second user");
        return;
    }
    if !crate::harness::fuse_usable() {
        return;
    }
    // Users reach FUSE only where /dev/fuse is open to them (0666 on most
    // distributions); some machines keep it to root.
    let device = fs::metadata("/dev/fuse").unwrap();
    if device.mode() & 0o006 != 0o006 {
        eprintln!(
            "skipping: /dev/fuse is mode {:o}, so no user can mount here",
            device.mode() & 0o777
        );
        return;
    }
    let (uid, gid) = test_user();
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(2, 1_700_000_000));
    fs::set_permissions(wh.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (_dir, mnt) = open_mount_point();
    std::os::unix::fs::chown(&mnt, Some(uid), Some(gid)).unwrap();
    let run = |args: &[&std::ffi::OsStr]| as_user(uid, gid, bin(), args);
    let out = run(&[
        "mount".as_ref(),
        wh.path().as_os_str(),
        mnt.as_os_str(),
        "--no-cache".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not root: mounted by fusermount3, as the user's.
    let entry = pchronicle::fs::mountpoint::pchronicle_mount_at(&mnt).expect("mounted");
    assert!(entry.fs_type.starts_with("fuse"), "{entry:?}");
    let stats = as_user(
        uid,
        gid,
        Path::new("/bin/cat"),
        &[mnt.join(".stats").as_os_str()],
    );
    assert!(
        String::from_utf8_lossy(&stats.stdout).contains("\"record_count\": 2"),
        "{stats:?}"
    );
    let out = run(&["umount".as_ref(), mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(pchronicle::fs::mountpoint::pchronicle_mount_at(&mnt).is_none());
}
