//! Names the commit the binary is built from, for `pchronicle --version`:
//! `PCHRONICLE_COMMIT` is the short hash, with `-modified` when the work
//! tree had uncommitted changes, or `unknown` outside a git checkout (a
//! source tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            let modified = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|changes| !changes.is_empty());
            if modified {
                format!("{hash}-modified")
            } else {
                hash
            }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=PCHRONICLE_COMMIT={commit}");
    // A new commit or checkout changes one of these.
    for path in [
        ".git/HEAD",
        ".git/index",
        ".git/refs/heads",
        ".git/packed-refs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
