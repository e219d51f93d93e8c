//! Names the commit the binary is built from, for `pchronicle --version`:
//! `PCHRONICLE_COMMIT` is the short hash of `HEAD`, or `unknown` outside a
//! git checkout (a source tarball). Uncommitted changes are not marked:
//! watching the work tree would rerun this script, and rebuild the crate,
//! on every command.

use std::path::PathBuf;
use std::process::Command;

/// What `git ARGS` prints, trimmed; `None` when git fails or is missing.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        // Reading only: never refresh (write) the index.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // Only this crate's own checkout names the commit: sources unpacked
    // inside some other repository (a home directory kept in git) do not.
    let top = git(&["rev-parse", "--show-toplevel"]).and_then(|t| std::fs::canonicalize(t).ok());
    let here = std::env::var_os("CARGO_MANIFEST_DIR").and_then(|d| std::fs::canonicalize(d).ok());
    let ours = top.is_some() && top == here;
    let commit = ours
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .flatten()
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PCHRONICLE_COMMIT={commit}");
    pack_relocations();
    // A new commit or a checkout changes one of these. Asked of git, so a
    // linked worktree (whose `.git` is a file) watches its own HEAD and
    // the shared branches. A path that does not exist would rerun this
    // script every time, so only existing ones are named.
    let common = git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from);
    let watched = [
        git(&["rev-parse", "--git-path", "HEAD"]).map(PathBuf::from),
        common.as_ref().map(|dir| dir.join("refs/heads")),
        common.as_ref().map(|dir| dir.join("packed-refs")),
    ];
    for path in watched.into_iter().flatten().filter(|_| ours) {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// A position-independent executable this size carries some 300,000
/// relative relocations: as plain entries (24 bytes each, 7 MiB) the
/// loader reads all of them at every start, which every short command
/// and the daemon's resident memory pay for. Packed (DT_RELR, a bitmap
/// per run of adjacent words) they take about 90 KiB, and the binary
/// stays position-independent. The loader must know the format: glibc
/// 2.36 or newer, where a binary packed so states the need by version.
/// So it is asked only when building for this machine's own Linux GNU
/// target and this machine's glibc is 2.36 or newer (GNU ld 2.38+ or lld
/// link it); elsewhere, or with `PCHRONICLE_PLAIN_RELOCATIONS=1`, the
/// plain table is built.
fn pack_relocations() {
    println!("cargo:rerun-if-env-changed=PCHRONICLE_PLAIN_RELOCATIONS");
    let target = std::env::var("TARGET").unwrap_or_default();
    let native = std::env::var("HOST").is_ok_and(|host| host == target);
    let plain = std::env::var_os("PCHRONICLE_PLAIN_RELOCATIONS").is_some_and(|v| v == "1");
    if native && target.ends_with("linux-gnu") && !plain && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc (`getconf GNU_LIBC_VERSION` prints
/// `glibc 2.36`) is at least `major.minor`; false when it cannot be told.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Some(out) = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()
        .filter(|out| out.status.success())
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text
        .trim()
        .strip_prefix("glibc ")
        .unwrap_or_default()
        .split('.')
        .map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(have_major), Some(have_minor)) => (have_major, have_minor) >= (major, minor),
        _ => false,
    }
}
