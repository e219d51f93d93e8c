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
