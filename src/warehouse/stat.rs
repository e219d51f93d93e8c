//! [`Stat`]: `fstatat`'s answer as plain data, never of a symlink's
//! target, widened to one set of types on every architecture.

use std::io;
use std::os::fd::AsFd;

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

    /// Whether two stats are of the same file.
    pub fn same_file(&self, other: &Stat) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}
