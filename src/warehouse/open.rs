//! Resolving names and opening what they name: nothing below the root is
//! followed when it is a symlink, nothing but directories and regular
//! files is opened, and a walk never leaves the root's filesystem.
//!
//! A path of several components is resolved with `openat2` in one call
//! where the kernel has it, else one `openat(O_NOFOLLOW)` per component;
//! either way the path string is resolved once. A regular file is checked
//! with `fstatat` before it is opened (so no driver's open runs on a FIFO
//! or a device) and with `fstat` after (so a swap in between is caught).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Mode, ResolveFlags};
use rustix::io::Errno;

use super::viewer::Access;
use super::{Backend, Blob, Dir, Stat, check_name, components, dir_flags, not_regular, read_flags};

/// Whether `openat2` is missing from this kernel (learned once).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

impl Dir {
    /// The stat of the entry `name`, a symlink as itself.
    pub fn stat_at(&self, name: impl AsRef<OsStr>) -> io::Result<Stat> {
        let name = name.as_ref();
        check_name(name)?;
        self.check_search()?;
        match &self.backend {
            Backend::Local(fd) => {
                Ok(rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)?.into())
            }
            #[cfg(feature = "remote")]
            Backend::Remote(remote) => remote.stat_at(name),
        }
    }

    /// The stat of `name`, `None` when there is no such entry.
    pub fn probe(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Stat>> {
        match self.stat_at(name) {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the subdirectory `name`: not a symlink, on this directory's
    /// filesystem.
    pub fn open_dir(&self, name: impl AsRef<OsStr>) -> io::Result<Dir> {
        let name = name.as_ref();
        check_name(name)?;
        self.check_search()?;
        match &self.backend {
            Backend::Local(fd) => {
                let fd = rustix::fs::openat(fd, name, dir_flags(), Mode::empty())?;
                self.adopt_dir(Backend::Local(fd.into()), self.path.join(name))
            }
            #[cfg(feature = "remote")]
            Backend::Remote(remote) => {
                let child = remote.open_dir(name)?;
                self.adopt_dir(Backend::Remote(child), self.path.join(name))
            }
        }
    }

    /// Whether [`open_dir`](Dir::open_dir) of `name` would succeed, with
    /// the same errors. A local directory is opened and closed; a remote
    /// one answers from this directory's listing, without the request
    /// that listing the child for its own stat would cost.
    pub fn check_dir(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name.as_ref();
        match &self.backend {
            Backend::Local(_) => self.open_dir(name).map(drop),
            #[cfg(feature = "remote")]
            Backend::Remote(remote) => {
                check_name(name)?;
                remote.check_dir(name)
            }
        }
    }

    /// The subdirectory `name`, just seen (with `fstatat`) as `seen`:
    /// `known`, a handle opened earlier, when it is that very directory —
    /// an open handle pins its inode, so the same device and inode mean
    /// the same directory — else opened afresh. Checked as
    /// [`open_dir`](Dir::open_dir) checks.
    pub fn open_dir_seen(
        &self,
        name: impl AsRef<OsStr>,
        seen: &Stat,
        known: Option<&Dir>,
    ) -> io::Result<Dir> {
        let name = name.as_ref();
        match known {
            Some(known) if known.stat.same_file(seen) && seen.is_dir() => {
                check_name(name)?;
                self.check_search()?;
                self.check(seen, Access::Read)?;
                Ok(Dir {
                    backend: known.backend.clone(),
                    path: self.path.join(name),
                    stat: *seen,
                    viewer: self.viewer.clone(),
                })
            }
            _ => self.open_dir(name),
        }
    }

    /// The stat of the entry `rel` (several components) below this
    /// directory, `None` when absent. Symlinks on the way ARE followed:
    /// only for checking that a cached answer still holds (a followed link
    /// shows another identity, and the caller then resolves properly),
    /// never for anything that is read or shown.
    pub fn probe_below(&self, rel: &str) -> io::Result<Option<Stat>> {
        if self.viewer.is_some() || rel.starts_with('/') || rel.split('/').any(|c| c == "..") {
            return Err(io::Error::from(Errno::INVAL));
        }
        #[cfg(feature = "remote")]
        if let Backend::Remote(remote) = &self.backend {
            return remote.probe_below(rel);
        }
        match rustix::fs::statat(self.fd()?, rel, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat.into())),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the directory `rel` below this one (`.` is this one again).
    /// `..`, absolute paths, symlinks and other filesystems are refused.
    pub fn resolve_dir(&self, rel: &Path) -> io::Result<Dir> {
        let names = components(rel)?;
        if names.is_empty() {
            return self.try_clone();
        }
        // A viewer's search permission is checked on every directory on
        // the way, so only the component walk can serve one.
        if names.len() > 1
            && self.viewer.is_none()
            && !self.is_remote()
            && !NO_OPENAT2.load(Ordering::Relaxed)
        {
            let resolve = ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV;
            match rustix::fs::openat2(self.fd()?, rel, dir_flags(), Mode::empty(), resolve) {
                Ok(fd) => return self.adopt_dir(Backend::Local(fd.into()), self.path.join(rel)),
                // Missing, or refused by a seccomp filter: walk instead.
                Err(Errno::NOSYS | Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // ELOOP is what RESOLVE_NO_SYMLINKS answers for a symlink
                // anywhere on the way; the caller sees the same error the
                // component walk gives for a symlinked directory.
                Err(e) => return Err(e.into()),
            }
        }
        let mut dir = self.open_dir(names[0])?;
        for name in &names[1..] {
            dir = dir.open_dir(name)?;
        }
        Ok(dir)
    }

    fn adopt_dir(&self, backend: Backend, path: PathBuf) -> io::Result<Dir> {
        let stat = match &backend {
            Backend::Local(fd) => Stat::of(fd)?,
            #[cfg(feature = "remote")]
            Backend::Remote(remote) => remote.restat()?,
        };
        if stat.dev != self.stat.dev {
            return Err(io::Error::from(Errno::XDEV));
        }
        // Every directory is opened for reading (to list it, or to resolve
        // below it), which the kernel allows only with read permission: a
        // viewer is held to the same, so its walk matches its own.
        self.check(&stat, Access::Read)?;
        Ok(Dir {
            backend,
            path,
            stat,
            viewer: self.viewer.clone(),
        })
    }

    /// Opens the regular file `name` for reading: never a symlink, a FIFO
    /// or a device. The entry is checked with `fstatat` before the open
    /// (so no driver's open runs) and with `fstat` after it (so a swap in
    /// between is caught).
    pub fn open_file(&self, name: impl AsRef<OsStr>) -> io::Result<(Blob, Stat)> {
        let name = name.as_ref();
        let seen = self.stat_at(name)?;
        self.open_regular(name, &seen, false)
    }

    /// Opens `name`, which the caller just saw (with `fstatat`) as the
    /// regular file `seen`, whatever file it is by the time it is opened,
    /// as long as that is a regular file too: for readers that take the
    /// file's own stat (counting) rather than serve a file they showed.
    pub fn open_seen(&self, name: impl AsRef<OsStr>, seen: &Stat) -> io::Result<(Blob, Stat)> {
        self.open_regular(name.as_ref(), seen, false)
    }

    /// Opens `name`, which the caller just saw as the regular file
    /// `expected`, and only if it still is that file (same device and
    /// inode): a reader is served the file it was shown, or `ESTALE`.
    pub fn open_file_as(
        &self,
        name: impl AsRef<OsStr>,
        expected: &Stat,
    ) -> io::Result<(Blob, Stat)> {
        self.open_regular(name.as_ref(), expected, true)
    }

    /// Opens `name`, seen as `expected` (which must be a regular file):
    /// the file opened must be regular, and with `same` the very file seen.
    fn open_regular(&self, name: &OsStr, expected: &Stat, same: bool) -> io::Result<(Blob, Stat)> {
        check_name(name)?;
        self.check_search()?;
        if !expected.is_file() {
            return Err(not_regular());
        }
        #[cfg(feature = "remote")]
        if let Backend::Remote(remote) = &self.backend {
            let (object, stat) = remote.open_file(name)?;
            if same && !stat.same_file(expected) {
                return Err(io::Error::from(Errno::STALE));
            }
            self.check(&stat, Access::Read)?;
            return Ok((Blob::Remote(Box::new(object)), stat));
        }
        let fd = rustix::fs::openat(self.fd()?, name, read_flags(), Mode::empty()).map_err(
            |e| match e {
                // O_NOFOLLOW on a symlink.
                Errno::LOOP => not_regular(),
                e => e.into(),
            },
        )?;
        let stat = Stat::of(&fd)?;
        if !stat.is_file() {
            return Err(not_regular());
        }
        if same && !stat.same_file(expected) {
            return Err(io::Error::from(Errno::STALE));
        }
        self.check(&stat, Access::Read)?;
        Ok((Blob::Local(File::from(fd)), stat))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    use crate::warehouse::temp_root as root;

    #[test]
    fn symlinks_below_the_root_are_never_followed() {
        let (tmp, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::create_dir(tmp.path().join("a")).unwrap();
        symlink(outside.path(), tmp.path().join("a/link")).unwrap();
        symlink(outside.path().join("secret"), tmp.path().join("a/file")).unwrap();
        assert!(root.resolve_dir(Path::new("a/link")).is_err());
        assert!(root.resolve_dir(Path::new("a/link/.")).is_err());
        let a = root.resolve_dir(Path::new("a")).unwrap();
        assert!(a.open_dir("link").is_err());
        assert!(a.open_file("file").is_err());
        assert!(a.read_capped("file", 10).is_err());
        assert!(a.stat_at("file").unwrap().is_symlink());
        assert!(root.resolve_dir(Path::new("../x")).is_err());
        assert!(root.resolve_dir(Path::new("/etc")).is_err());
    }
}
