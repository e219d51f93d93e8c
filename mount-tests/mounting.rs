//! Where a mount lands and what it lets run: a mount point replaced by a
//! symlink (root mounting at a path a user controls) is refused, never
//! followed, by `mount` and `umount` alike, as root and as a user; and a
//! mount runs no program from the warehouse unless `-o exec` asks for it.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use pchronicle::fs::mountpoint::{self, MountState};

use crate::harness::{
    Mounted, bin, empty_mount_point, fuse_usable, mount_options, mounts_under, wait_with_timeout,
};
use crate::hostile::{as_user, test_user};
use crate::support::{Warehouse, jsonl};

const SYMLINK_REFUSED: &str = "error[PCHRONICLE_MOUNT_POINT_SYMLINK]";

fn small_warehouse() -> Warehouse {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(3, 1_790_000_000));
    wh
}

/// Detaches, when dropped, whatever pchronicle mount a failing test left
/// below a directory.
struct ClearsMounts(PathBuf);

impl Drop for ClearsMounts {
    fn drop(&mut self) {
        for at in mounts_under(&self.0) {
            if mountpoint::pchronicle_mount_at(&at).is_some() {
                let _ = mountpoint::detach(&at, true);
            }
        }
    }
}

/// Runs `pchronicle ARGS` to its end: its exit code (`None` when it was
/// still running after 20 s, as a foreground mount that was not refused
/// would be, and was killed) and what it said on standard error.
fn run_to_end(args: &[&OsStr]) -> (Option<i32>, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pchronicle binary runs");
    let status = wait_with_timeout(&mut child, Duration::from_secs(20));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    (status.and_then(|s| s.code()), said)
}

#[test]
fn a_symlink_at_the_mount_point_is_refused_and_nothing_is_mounted_anywhere() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (dir, target) = empty_mount_point();
    let _clear = ClearsMounts(dir.path().to_path_buf());
    // What a user who owns the directory holding the mount point can do:
    // replace it with a link to an empty directory of her choice.
    let link = dir.path().join("wh");
    symlink(&target, &link).unwrap();
    let mount = [OsStr::new("mount"), wh.path().as_os_str(), link.as_os_str()];
    for extra in [&[][..], &[OsStr::new("--foreground")]] {
        let (code, said) = run_to_end(&[&mount[..], extra].concat());
        assert_eq!(code, Some(1), "{extra:?}: {said}");
        assert!(said.contains(SYMLINK_REFUSED), "{said}");
        assert!(said.contains("fix:"), "{said}");
        assert_eq!(mounts_under(dir.path()), Vec::<PathBuf>::new(), "{said}");
    }
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0);
}

#[test]
fn umount_through_a_symlink_is_refused_and_the_mount_behind_it_stays() {
    if !fuse_usable() {
        return;
    }
    let wh = small_warehouse();
    let (dir, target) = empty_mount_point();
    let link = dir.path().join("wh");
    symlink(&target, &link).unwrap();
    let (code, said) = run_to_end(&[OsStr::new("umount"), link.as_os_str()]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(SYMLINK_REFUSED), "{said}");
    let m = Mounted::start_at(wh.path(), &target, &[], tempfile::tempdir().unwrap());
    for lazy in [&[][..], &[OsStr::new("--lazy")]] {
        let umount = [OsStr::new("umount"), link.as_os_str()];
        let (code, said) = run_to_end(&[&umount[..], lazy].concat());
        assert_eq!(code, Some(1), "{said}");
        assert!(said.contains(SYMLINK_REFUSED), "{said}");
        assert_eq!(mountpoint::state(&m.mnt), MountState::Live);
    }
}

#[test]
fn a_symlink_at_a_users_mount_point_is_refused_too() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root to act as a second user");
        return;
    }
    if !fuse_usable() {
        return;
    }
    let device = fs::metadata("/dev/fuse").unwrap();
    if device.permissions().mode() & 0o006 != 0o006 {
        eprintln!("skipping: /dev/fuse is closed to users here");
        return;
    }
    let (uid, gid) = test_user();
    let wh = small_warehouse();
    fs::set_permissions(wh.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (dir, target) = empty_mount_point();
    let _clear = ClearsMounts(dir.path().to_path_buf());
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // The user's own directory: fusermount3 would mount there for her.
    std::os::unix::fs::chown(&target, Some(uid), Some(gid)).unwrap();
    let link = dir.path().join("wh");
    symlink(&target, &link).unwrap();
    let out = as_user(
        uid,
        gid,
        bin(),
        &[OsStr::new("mount"), wh.path().as_os_str(), link.as_os_str()],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(SYMLINK_REFUSED), "{said}");
    assert_eq!(mounts_under(dir.path()), Vec::<PathBuf>::new(), "{said}");
}

#[test]
fn mounts_are_noexec_unless_exec_is_asked_for() {
    let wh = small_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let options = mount_options(&m.mnt).expect("in the mount table");
    for wanted in ["ro", "nosuid", "nodev", "noexec"] {
        assert!(options.iter().any(|o| o == wanted), "{wanted}: {options:?}");
    }
    drop(m);
    let m = Mounted::start(wh.path(), &["-o", "exec"]).unwrap();
    let options = mount_options(&m.mnt).expect("in the mount table");
    assert!(!options.iter().any(|o| o == "noexec"), "{options:?}");
    for wanted in ["ro", "nosuid", "nodev"] {
        assert!(options.iter().any(|o| o == wanted), "{wanted}: {options:?}");
    }
}

/// A warehouse with an executable script at its top level.
fn warehouse_with_a_program() -> Warehouse {
    let wh = small_warehouse();
    wh.file("tool", "#!/bin/sh\necho ran\n");
    fs::set_permissions(wh.abs("tool"), fs::Permissions::from_mode(0o755)).unwrap();
    wh
}

#[test]
fn a_writers_program_does_not_run_from_a_default_mount() {
    let wh = warehouse_with_a_program();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let tool = m.at("tool");
    // Executable by its mode: what refuses is the mount.
    let mode = fs::metadata(&tool).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0o111, "{mode:o}");
    let err = Command::new(&tool)
        .output()
        .expect_err("a program on a noexec mount does not start");
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    drop(m);

    let m = Mounted::start(wh.path(), &["-o", "exec"]).unwrap();
    let out = Command::new(m.at("tool")).output().expect("it runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
}
