//! Mounted the way system mounts are: `mount -t fuse.pchronicle`, an fstab
//! line through `mount --fstab FILE -a`, fuse3's `mount.fuse3`, and taken
//! down with `umount`. These need root (mount(8) runs its helpers only for
//! root, or for fstab lines marked `user`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use pchronicle::fs::mountpoint::{self, MountState};

use crate::harness::{bin, empty_mount_point, fuse_usable, within};
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

/// Checks the mount at `mnt` is ours, read-only, answers, and reads the
/// warehouse; then `umount` takes it down and its daemon leaves.
fn serves_then_umounts(mnt: &PathBuf) {
    assert_eq!(mountpoint::state(mnt), MountState::Live);
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = table
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()))
        .expect("in the mount table");
    let options = line.split(' ').nth(5).unwrap();
    for wanted in ["ro", "nosuid", "nodev"] {
        assert!(options.split(',').any(|o| o == wanted), "{wanted}: {line}");
    }
    let stats = fs::read_to_string(mnt.join(".stats")).unwrap();
    assert!(stats.contains("\"record_count\": 8"), "{stats}");
    let daemon = daemon_of(mnt).expect("a daemon serves the mount");
    ok(&command("umount", &[mnt]), "umount");
    assert_eq!(mountpoint::state(mnt), MountState::NotMounted);
    let gone = within(Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{daemon}")).exists()
    });
    assert!(gone.is_some(), "the daemon {daemon} left after umount");
}

#[test]
fn mount_t_and_an_fstab_line_mount_and_umount_takes_them_down() {
    if !system_mounts_usable() {
        return;
    }
    let _helper = Helper::install();
    let wh = small_warehouse();
    let (dir, mnt) = empty_mount_point();

    // What an operator types; mount(8) adds `rw`, which is dropped with a
    // warning (the mount is read-only).
    let out = command(
        "mount",
        &[
            &"-t",
            &"fuse.pchronicle",
            &wh.path(),
            &mnt,
            &"-o",
            &"attr_ttl=2s",
        ],
    );
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
    let out = command(
        "mount",
        &[
            &"-t",
            &"fuse.pchronicle",
            &wh.path(),
            &mnt,
            &"-o",
            &"frobnicate",
        ],
    );
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
