//! Reading a metadata file whole, under a size cap: a manifest, a pointer,
//! an index manifest or the count cache is never read past its cap, even
//! when the file grows while it is read, and never from anything but a
//! regular file.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::Path;

use super::{Blob, Dir, Stat};

/// The most bytes read from a `chronicle.manifest`.
pub const MANIFEST_CAP: u64 = 1 << 20;
/// The most bytes read from a storyline `CURRENT` pointer.
pub const POINTER_CAP: u64 = 4 << 10;
/// The most bytes read from a sidecar `indexes.json`.
pub const INDEX_MANIFEST_CAP: u64 = 16 << 20;
/// The most bytes read from the persisted count cache.
pub const COUNT_CACHE_CAP: u64 = 512 << 20;

/// Why a size-capped read gave nothing.
#[derive(Debug)]
pub enum CappedError {
    /// The file is larger than the cap; nothing was kept.
    TooLarge {
        cap: u64,
    },
    /// Not a regular file (a FIFO, a device, a directory, a symlink).
    NotRegular,
    Io(io::Error),
}

impl std::fmt::Display for CappedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CappedError::TooLarge { cap } => write!(f, "larger than the {cap}-byte limit"),
            CappedError::NotRegular => f.write_str("not a regular file"),
            CappedError::Io(e) => e.fmt(f),
        }
    }
}

impl CappedError {
    /// This failure as a coded error about the metadata file `path` (`what`
    /// it is, for the message): past the cap it is
    /// `PCHRONICLE_METADATA_TOO_LARGE`; an object store that could not be
    /// reached is its own failure, never the file's; anything else is for
    /// `other` to say.
    pub fn into_error(
        self,
        path: &Path,
        what: &str,
        other: impl FnOnce(CappedError) -> crate::error::Error,
    ) -> crate::error::Error {
        match self {
            CappedError::TooLarge { cap } => crate::error::Error::at(
                crate::error::ErrorCode::MetadataTooLarge,
                path,
                format!("larger than the {cap}-byte limit for {what}"),
            ),
            CappedError::Io(e) if crate::error::is_remote_failure(&e) => {
                crate::error::Error::io(path, &e)
            }
            other_error => other(other_error),
        }
    }
}

impl Dir {
    /// The whole content of the regular file `name`, at most `cap` bytes,
    /// with the file's stat; `Ok(None)` when there is no such entry.
    pub fn read_capped(
        &self,
        name: impl AsRef<OsStr>,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, Stat)>, CappedError> {
        #[cfg(feature = "remote")]
        if let super::Backend::Remote(remote) = &self.backend {
            super::check_name(name.as_ref()).map_err(CappedError::Io)?;
            self.check_search().map_err(CappedError::Io)?;
            return remote.read_capped(name.as_ref(), cap);
        }
        let (file, stat) = match self.open_file(name) {
            Ok(opened) => opened,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if super::is_not_regular(&e) => return Err(CappedError::NotRegular),
            Err(e) => return Err(CappedError::Io(e)),
        };
        read_all_capped(file, stat.size, cap).map(|bytes| Some((bytes, stat)))
    }
}

/// Reads all of `file` (whose size was `size` when opened), refusing more
/// than `cap` bytes even if it grows while being read.
pub fn read_all_capped(file: Blob, size: u64, cap: u64) -> Result<Vec<u8>, CappedError> {
    if size > cap {
        return Err(CappedError::TooLarge { cap });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.reader_at(0)
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(CappedError::Io)?;
    if bytes.len() as u64 > cap {
        return Err(CappedError::TooLarge { cap });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    use rustix::fs::{FileType, Mode};

    use crate::warehouse::temp_root as root;

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let (tmp, root) = root();
        let fifo = tmp.path().join("chronicle.manifest");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(matches!(
            root.read_capped("chronicle.manifest", 10),
            Err(CappedError::NotRegular)
        ));
        symlink("/dev/zero", tmp.path().join("zero")).unwrap();
        assert!(root.read_capped("zero", 10).is_err());
    }

    #[test]
    fn capped_reads_refuse_big_files() {
        let (tmp, root) = root();
        std::fs::write(tmp.path().join("big"), vec![b'x'; 100]).unwrap();
        assert!(matches!(
            root.read_capped("big", 99),
            Err(CappedError::TooLarge { cap: 99 })
        ));
        assert_eq!(root.read_capped("big", 100).unwrap().unwrap().0.len(), 100);
        assert!(root.read_capped("absent", 100).unwrap().is_none());
    }
}
