//! Where pchronicle keeps its own state (the count cache) for one
//! warehouse: inside the warehouse when that is safe, else in this user's
//! cache directory.
//!
//! The state directory's name, [`STATE_DIR`], is defined here, below every
//! module that honours it: the catalog hides it from every listing and
//! never counts it as a source, an import never descends into it, and the
//! shard writer keeps its writers' state below it.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use super::Dir;

/// The directory where pchronicle keeps its own state inside a warehouse.
/// Hidden from every listing and never a source.
pub const STATE_DIR: &str = ".pchronicle";

/// What git is told about a state directory: ignore all of it (this file
/// included), so `git add` of a warehouse never stages pchronicle's state.
pub const STATE_GITIGNORE: &[u8] = b"# pchronicle's own state: never committed\n*\n";

/// Opens (creating it if need be) the warehouse's state directory
/// [`STATE_DIR`] in `root`, with a `.gitignore` that keeps git out of it.
pub fn open_state(root: &Dir) -> io::Result<Dir> {
    let dir = root.create_dir(STATE_DIR, 0o755)?;
    ignore_by_git(&dir);
    Ok(dir)
}

/// Puts the `.gitignore` of a state directory in place unless one is
/// there (a directory pchronicle may not write keeps what it has).
fn ignore_by_git(dir: &Dir) {
    if let Err(e) = dir.create_new(".gitignore", STATE_GITIGNORE, 0o644) {
        log::debug!("{}: no .gitignore: {e}", dir.path().display());
    }
}

/// Where pchronicle keeps its own state (count cache) for one warehouse.
#[derive(Debug)]
pub struct StateDir {
    pub dir: Dir,
    /// Why the warehouse's own state directory was not used, when it was
    /// not.
    pub elsewhere: Option<String>,
}

/// The state directory `sub` of the warehouse `root`: `ROOT/.pchronicle/sub`
/// when both directories are real directories owned by this process's
/// effective user and writable by no one else (created so when absent);
/// otherwise a per-warehouse directory in this user's cache directory
/// (`/var/cache/pchronicle/<id>` for root, `$XDG_CACHE_HOME/pchronicle/<id>`
/// or `~/.cache/pchronicle/<id>` for others), `<id>` derived from the
/// root's device and inode.
pub fn state_dir(root: &Dir, state: &str, sub: &str) -> io::Result<StateDir> {
    // Nothing is written to a remote warehouse: its state is this user's,
    // kept under a name derived from its bucket and prefix.
    if root.is_remote() {
        return Ok(StateDir {
            dir: user_state_dir(root, sub)?,
            elsewhere: None,
        });
    }
    let owned = |parent: &Dir, name: &str| -> Result<Dir, String> {
        let dir = parent
            .create_dir(name, 0o755)
            .map_err(|e| format!("{} cannot be used: {e}", parent.path().join(name).display()))?;
        let stat = dir.stat();
        let euid = rustix::process::geteuid().as_raw();
        if stat.uid != euid {
            return Err(format!(
                "{} belongs to uid {}, not to uid {euid} that runs pchronicle",
                dir.path().display(),
                stat.uid
            ));
        }
        if stat.mode & 0o022 != 0 {
            return Err(format!(
                "{} is writable by group or others (mode {:o})",
                dir.path().display(),
                stat.permissions()
            ));
        }
        Ok(dir)
    };
    let why = match owned(root, state).and_then(|dir| {
        if state == STATE_DIR {
            ignore_by_git(&dir);
        }
        owned(&dir, sub)
    }) {
        Ok(dir) => {
            return Ok(StateDir {
                dir,
                elsewhere: None,
            });
        }
        Err(why) => why,
    };
    Ok(StateDir {
        dir: user_state_dir(root, sub)?,
        elsewhere: Some(why),
    })
}

/// The state directory `sub` for the warehouse (or directory) `root` in
/// this user's cache directory: `<cache>/<id>/sub`, `<id>` derived from
/// the root's device and inode; created mode 0700 when absent.
pub fn user_state_dir(root: &Dir, sub: &str) -> io::Result<Dir> {
    let base = user_cache_dir()?;
    let id = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("{}:{}", root.stat.dev, root.stat.ino));
        super::hex(&digest[..8])
    };
    let path = base.join(id).join(sub);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)?;
    Dir::open_root(&path)
}

/// This user's cache directory for pchronicle.
fn user_cache_dir() -> io::Result<PathBuf> {
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from("/var/cache/pchronicle"));
    }
    let from_env = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    from_env("XDG_CACHE_HOME")
        .or_else(|| from_env("HOME").map(|home| home.join(".cache")))
        .map(|base| base.join("pchronicle"))
        .ok_or_else(|| io::Error::other("neither XDG_CACHE_HOME nor HOME is set"))
}
