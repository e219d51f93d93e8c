//! Writing into a warehouse: creating a directory, replacing a file,
//! removing one, all relative to an open directory.
//!
//! A replacement is a temp file created beside the target with `O_EXCL`
//! (under a name no other writer uses, see [`temp_name`]), written, then
//! `renameat` over the target in the same open directory: a reader sees
//! the old content or the new, never a mix. A target that is not a
//! regular file, or whose identity moved since the caller read it, is
//! never replaced.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use super::viewer::Access;
use super::{Dir, check_name, not_regular};

/// A temp file left by a crashed writer is removed by the next write of
/// the same target once it is this old (a live writer never takes so long
/// between creating and renaming it).
const STALE_TEMP_SECS: i64 = 60;

/// How [`Dir::replace`] treats the file it replaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct Replace {
    /// fsync the content and the directory (a manifest); hints skip both.
    pub durable: bool,
    /// Mode of the new file.
    pub mode: u32,
    /// Give the new file the replaced file's owner and mode instead (a
    /// manifest someone else owns stays theirs).
    pub keep_owner: bool,
    /// Remove temp files of this name that a crash left (lists the
    /// directory: for files written rarely, in small directories).
    pub sweep_temps: bool,
    /// Replace only while the current file is this one (`dev`, `ino`);
    /// `Some(None)`: only while there is no file of that name.
    pub expect: Option<Option<(u64, u64)>>,
}

impl Replace {
    /// How a file others read beside the data (a manifest, an index) is
    /// replaced: durably, mode 0644, keeping the replaced file's owner,
    /// sweeping a crash's temp files, whatever file is there now.
    pub fn published() -> Replace {
        Replace {
            durable: true,
            mode: 0o644,
            keep_owner: true,
            sweep_temps: true,
            expect: None,
        }
    }

    /// How a private hint of pchronicle's own (a writer's state, a
    /// memoised digest) is replaced: mode 0600, no fsync (losing it costs
    /// only work), no sweep.
    pub fn hint() -> Replace {
        Replace {
            durable: false,
            mode: 0o600,
            keep_owner: false,
            sweep_temps: false,
            expect: None,
        }
    }
}

impl Dir {
    /// Creates the subdirectory `name` (mode `mode`) unless it exists, and
    /// opens it; a symlink or a file there is refused.
    pub fn create_dir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<Dir> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        match rustix::fs::mkdirat(self.fd()?, name, Mode::from_raw_mode(mode as _)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        self.open_dir(name)
    }

    /// Replaces the regular file `name` with `bytes`: a reader sees the old
    /// content or the new, never a mix. The new file keeps the replaced
    /// file's owner and mode. Refused (nothing written) when `name` is not
    /// a regular file, or when `how.expect` says which file the caller
    /// read and another is there now.
    pub fn replace(&self, name: impl AsRef<OsStr>, bytes: &[u8], how: Replace) -> io::Result<()> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        let current = self.probe(name)?;
        if let Some(current) = &current {
            if !current.is_file() {
                return Err(not_regular());
            }
        }
        if let Some(expected) = how.expect {
            if current.map(|c| (c.dev, c.ino)) != expected {
                return Err(io::Error::other(
                    "the file changed since it was read; not replaced",
                ));
            }
        }
        if how.sweep_temps {
            self.remove_stale_temps(name);
        }
        let temp = temp_name(name);
        let fd = rustix::fs::openat(
            self.fd()?,
            temp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(how.mode as _),
        )?;
        let mut file = File::from(fd);
        let result = (|| {
            if let Some(current) = current.as_ref().filter(|_| how.keep_owner) {
                // Root keeps the owner of the file it replaces (not of a
                // hard link to someone else's file); another user cannot
                // give a file away and keeps its own. Set-id and sticky
                // bits are never carried over.
                if rustix::process::geteuid().is_root() && current.nlink == 1 {
                    rustix::fs::fchown(
                        &file,
                        Some(rustix::fs::Uid::from_raw(current.uid)),
                        Some(rustix::fs::Gid::from_raw(current.gid)),
                    )?;
                }
                rustix::fs::fchmod(
                    &file,
                    Mode::from_raw_mode((current.permissions() & 0o777) as _),
                )?;
            }
            file.write_all(bytes)?;
            if how.durable {
                file.sync_all()?;
            }
            // The last moment to notice a swap of the target.
            if let Some(expected) = how.expect {
                let now = self.probe(name)?.map(|c| (c.dev, c.ino));
                if now != expected {
                    return Err(io::Error::other(
                        "the file changed while it was being replaced; not replaced",
                    ));
                }
            }
            rustix::fs::renameat(self.fd()?, temp.as_os_str(), self.fd()?, name)?;
            if how.durable {
                rustix::fs::fsync(self.fd()?)?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(self.fd()?, temp.as_os_str(), AtFlags::empty());
        }
        result
    }

    /// Creates the regular file `name` holding `bytes` unless something
    /// of that name exists (never through a symlink); true when created.
    pub fn create_new(&self, name: impl AsRef<OsStr>, bytes: &[u8], mode: u32) -> io::Result<bool> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        let fd = match rustix::fs::openat(
            self.fd()?,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode as _),
        ) {
            Ok(fd) => fd,
            Err(Errno::EXIST) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        File::from(fd).write_all(bytes)?;
        Ok(true)
    }

    /// Opens the regular file `name` for appending, created with `mode`
    /// when absent (never through a symlink; anything but a regular file is
    /// refused). When it has grown past `rotate_at` bytes it is renamed to
    /// `name.1` first (replacing an older one), and a new one is started.
    pub fn open_append(
        &self,
        name: impl AsRef<OsStr>,
        mode: u32,
        rotate_at: u64,
    ) -> io::Result<File> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        let open = || -> io::Result<File> {
            let fd = rustix::fs::openat(
                self.fd()?,
                name,
                OFlags::WRONLY
                    | OFlags::APPEND
                    | OFlags::CREATE
                    | OFlags::NOFOLLOW
                    | OFlags::NONBLOCK
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode as _),
            )?;
            let stat = rustix::fs::fstat(&fd)?;
            if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                != rustix::fs::FileType::RegularFile
            {
                return Err(not_regular());
            }
            Ok(File::from(fd))
        };
        let file = open()?;
        if file.metadata()?.len() <= rotate_at {
            return Ok(file);
        }
        let mut older = name.to_os_string();
        older.push(".1");
        rustix::fs::renameat(self.fd()?, name, self.fd()?, &older)?;
        open()
    }

    /// Removes the regular file `name`; absent is fine.
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> io::Result<bool> {
        let name = name.as_ref();
        check_name(name)?;
        self.check(&self.stat, Access::Write)?;
        match rustix::fs::unlinkat(self.fd()?, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes temp files of `name` that a crashed writer left behind.
    fn remove_stale_temps(&self, name: &OsStr) {
        let mut prefix = b".".to_vec();
        prefix.extend_from_slice(name.as_bytes());
        prefix.extend_from_slice(b".tmp.");
        let Ok(super::Entries { entries, .. }) = self.entries_up_to(1 << 16) else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        for entry in entries
            .iter()
            .filter(|e| e.is_file && e.name.starts_with(&prefix))
        {
            let name = OsStr::from_bytes(&entry.name);
            if let Ok(stat) = self.stat_at(name) {
                if let (true, Ok(fd)) =
                    (now.saturating_sub(stat.mtime) >= STALE_TEMP_SECS, self.fd())
                {
                    let _ = rustix::fs::unlinkat(fd, name, AtFlags::empty());
                }
            }
        }
    }
}

/// A name no other writer uses: pid, a process-wide counter and the time,
/// hidden with a leading dot and marked `.tmp.` so a later write can clean
/// it up.
pub(crate) fn temp_name(target: &OsStr) -> std::ffi::OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut name = std::ffi::OsString::from(".");
    name.push(target);
    name.push(format!(".tmp.{}.{n}.{nanos}", std::process::id()));
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    use crate::warehouse::temp_root as root;

    #[test]
    fn replace_keeps_mode_refuses_swaps_and_cleans_stale_temps() {
        let (tmp, root) = root();
        let path = tmp.path().join("m");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        let stale = tmp.path().join(".m.tmp.1.2.3");
        std::fs::write(&stale, "junk").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let seen = root.stat_at("m").unwrap();
        let how = Replace {
            durable: true,
            mode: 0o600,
            keep_owner: true,
            sweep_temps: true,
            expect: Some(Some((seen.dev, seen.ino))),
        };
        root.replace("m", b"new", how).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(root.stat_at("m").unwrap().permissions(), 0o640);
        assert!(!stale.exists());
        // The file moved since `seen`: not replaced.
        assert!(root.replace("m", b"newer", how).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // A symlink in the target's place is never written through.
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        symlink(&victim, tmp.path().join("s")).unwrap();
        assert!(root.replace("s", b"x", Replace::default()).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
    }
}
