//! [`Stat`]: `fstatat`'s answer as plain data, never of a symlink's
//! target, widened to one set of types on every architecture.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use rustix::fs::FileType;

/// `stat(2)` of one file or directory, never of a symlink's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blksize: u64,
    pub blocks: u64,
    pub atime: i64,
    pub atime_nsec: i64,
    pub mtime: i64,
    pub mtime_nsec: i64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

impl From<rustix::fs::Stat> for Stat {
    // The kernel's field widths differ between architectures; every value
    // fits the widened types (sizes and counts are never negative).
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from(s: rustix::fs::Stat) -> Stat {
        Stat {
            dev: s.st_dev as u64,
            ino: s.st_ino as u64,
            mode: s.st_mode as u32,
            nlink: s.st_nlink as u64,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            size: u64::try_from(s.st_size).unwrap_or(0),
            blksize: u64::try_from(s.st_blksize).unwrap_or(0),
            blocks: u64::try_from(s.st_blocks).unwrap_or(0),
            atime: s.st_atime as i64,
            atime_nsec: s.st_atime_nsec as i64,
            mtime: s.st_mtime as i64,
            mtime_nsec: s.st_mtime_nsec as i64,
            ctime: s.st_ctime as i64,
            ctime_nsec: s.st_ctime_nsec as i64,
        }
    }
}

impl Stat {
    /// The stat of an open file.
    pub fn of(fd: impl AsFd) -> io::Result<Stat> {
        Ok(rustix::fs::fstat(fd)?.into())
    }

    pub(super) fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode as _)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    pub fn len(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The permission bits (and set-id and sticky bits).
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// The modification time in nanoseconds since the epoch (see
    /// [`nanos`]).
    pub fn mtime_ns(&self) -> i64 {
        nanos(self.mtime, self.mtime_nsec)
    }

    /// The status-change time in nanoseconds since the epoch (see
    /// [`nanos`]).
    pub fn ctime_ns(&self) -> i64 {
        nanos(self.ctime, self.ctime_nsec)
    }

    /// Whether only this process's effective user may change the file:
    /// it owns it, and neither its group nor others may write it.
    pub fn is_private(&self) -> bool {
        self.uid == rustix::process::geteuid().as_raw() && self.mode & 0o022 == 0
    }

    /// Whether two stats are of the same file.
    pub fn same_file(&self, other: &Stat) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// The modification time of a file met through `std::fs` (a path named
/// from outside), in nanoseconds since the epoch, counted exactly as
/// [`Stat::mtime_ns`] counts it so the two compare.
pub fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    nanos(meta.mtime(), meta.mtime_nsec())
}

/// The status-change time of a file met through `std::fs`, counted as
/// [`Stat::ctime_ns`] counts it.
pub fn ctime_ns(meta: &std::fs::Metadata) -> i64 {
    nanos(meta.ctime(), meta.ctime_nsec())
}

/// Seconds and nanoseconds as one count of nanoseconds: the form every
/// recorded file time takes (an index's snapshot of its cohort, a cached
/// count's file identity). It saturates, so a time outside ±292 years of
/// 1970 pins to the end of the range instead of wrapping into another time.
fn nanos(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_times_count_nanoseconds_alike_and_saturate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "x").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let stat = Stat::of(&file).unwrap();
        assert_eq!(stat.mtime_ns(), mtime_ns(&file.metadata().unwrap()));
        assert_eq!(nanos(1, 5), 1_000_000_005);
        assert_eq!(nanos(-1, 500), -999_999_500);
        assert_eq!(nanos(i64::MAX / 2, 0), i64::MAX);
        assert_eq!(nanos(i64::MIN / 2, 0), i64::MIN);
    }
}
