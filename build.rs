//! Names the commit the binary is built from, for `pchronicle --version`:
//! `PCHRONICLE_COMMIT` is the short hash of `HEAD`, or `unknown` outside a
//! git checkout (a source tarball). Uncommitted changes are not marked:
//! watching the work tree would rerun this script, and rebuild the crate,
//! on every command.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        // Reading only: never refresh (write) the index.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=PCHRONICLE_COMMIT={commit}");
    // A new commit or a checkout changes one of these (a path that does
    // not exist would rerun this script every time).
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
