//! Listing a directory: names and types straight from `getdents` (a type
//! it leaves unknown is asked of `fstatat`), without a stat per entry.
//! Only directories and regular files are entries of a warehouse; a
//! listing can be bounded, so a directory of millions of names costs no
//! more than the bound.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::FileType;

use super::viewer::Access;
use super::{Backend, Dir};

/// One entry of a directory listing, typed from `getdents` (no stat):
/// always a directory or a regular file.
#[derive(Debug)]
pub struct DirEntry {
    /// The raw name; not necessarily UTF-8.
    pub name: Vec<u8>,
    pub is_dir: bool,
    pub is_file: bool,
}

/// What a bounded listing found (see [`Dir::entries_up_to`]).
#[derive(Debug)]
pub struct Entries {
    pub entries: Vec<DirEntry>,
    /// More entries were there than the limit asked for.
    pub more: bool,
    /// A remote directory's listing stopped at the object store's own
    /// bound (see [`crate::remote`]): names past it were never seen.
    pub cut_by_store: bool,
}

impl Dir {
    /// The entries of this directory (without `.` and `..`), typed from
    /// `getdents`: symlinks, FIFOs, sockets and devices are neither
    /// directories nor files.
    pub fn entries(&self) -> io::Result<Vec<DirEntry>> {
        self.entries_up_to(usize::MAX).map(|found| found.entries)
    }

    /// At most `limit` directory and regular-file entries of this
    /// directory (other types are skipped), and whether more were left:
    /// a directory of millions of names costs no more than `limit`.
    pub fn entries_up_to(&self, limit: usize) -> io::Result<Entries> {
        let mut entries = Vec::new();
        let mut more = false;
        let cut_by_store = self.each_entry(|name, kind| {
            let (is_dir, is_file) = (kind == FileType::Directory, kind == FileType::RegularFile);
            if !is_dir && !is_file {
                return true;
            }
            if entries.len() == limit {
                more = true;
                return false;
            }
            entries.push(DirEntry {
                name: name.to_vec(),
                is_dir,
                is_file,
            });
            true
        })?;
        Ok(Entries {
            entries,
            more,
            cut_by_store,
        })
    }

    /// The name of the first entry that is not a regular file (nor, when
    /// `dirs` allows them, a directory), if there is one.
    pub fn first_unplain(&self, dirs: bool) -> io::Result<Option<Vec<u8>>> {
        let mut found = None;
        self.each_entry(|name, kind| {
            let plain = kind == FileType::RegularFile || (dirs && kind == FileType::Directory);
            if !plain {
                found = Some(name.to_vec());
            }
            plain
        })?;
        Ok(found)
    }

    /// Hands each entry's name and type to `visit` (a type `getdents`
    /// leaves unknown is asked of `fstatat`) until `visit` says stop.
    /// Says whether the directory held more than could be visited (a
    /// remote listing stops at [`crate::remote::LISTED_MAX`] names).
    fn each_entry(&self, mut visit: impl FnMut(&[u8], FileType) -> bool) -> io::Result<bool> {
        // Listing a directory needs read permission (reaching it needed
        // only search).
        self.check(&self.stat, Access::Read)?;
        #[cfg(feature = "remote")]
        if let Backend::Remote(remote) = &self.backend {
            let (entries, truncated) = remote.entries()?;
            for (name, is_dir) in entries {
                let kind = if is_dir {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                if !visit(name.as_bytes(), kind) {
                    break;
                }
            }
            return Ok(truncated);
        }
        let mut reader = rustix::fs::Dir::read_from(self.fd()?)?;
        while let Some(entry) = reader.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                match self.stat_at(OsStr::from_bytes(name)) {
                    Ok(stat) => kind = stat.file_type(),
                    Err(_) => continue,
                }
            }
            if !visit(name, kind) {
                break;
            }
        }
        Ok(false)
    }
}
