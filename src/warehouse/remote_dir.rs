//! The remote side of [`Dir`]: a prefix of a bucket, answering from its
//! listing (see [`crate::remote`]). Nothing remote is a symlink, a FIFO
//! or a device, and nothing is written.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::read::CappedError;
use super::{Backend, Dir, Names, Stat};
use crate::remote::{self, Bucket, Listing, Location, RemoteFile, join_key};

/// A directory of a remote warehouse: a bucket and a key prefix.
#[derive(Debug, Clone)]
pub(super) struct RemoteDir {
    bucket: Arc<Bucket>,
    /// No leading or trailing `/`; empty for the bucket's root.
    prefix: String,
}

/// A name as a key component: UTF-8 (every S3 key is).
fn utf8(name: &OsStr) -> io::Result<&str> {
    name.to_str()
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}

impl RemoteDir {
    /// Opens the remote warehouse root `path` (`s3://bucket/prefix`). A
    /// prefix holding nothing is not there: object storage has no empty
    /// directories.
    pub(super) fn open_root(path: &Path) -> io::Result<Dir> {
        let text = path
            .to_str()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let location = Location::parse(text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.message))?;
        let dir = RemoteDir {
            bucket: remote::bucket(&location.bucket)?,
            prefix: location.prefix.clone(),
        };
        let listing = dir.bucket.listing(&dir.prefix)?;
        if listing.is_empty() && !dir.shown_by_parent()? {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no object has the prefix {}", location.url()),
            ));
        }
        let stat = dir.bucket.dir_stat(&dir.prefix, &listing);
        Ok(Dir {
            backend: Backend::Remote(dir),
            path: PathBuf::from(location.url()),
            stat,
            viewer: None,
        })
    }

    /// Whether the parent's listing shows this prefix as a directory,
    /// which it does when every key below it was skipped (see
    /// [`crate::remote`]: keys that cannot be paths).
    fn shown_by_parent(&self) -> io::Result<bool> {
        let Some((parent, name)) = self.prefix.rsplit_once('/').or(match self.prefix.as_str() {
            "" => None,
            prefix => Some(("", prefix)),
        }) else {
            return Ok(false);
        };
        Ok(self.bucket.listing(parent)?.dirs.contains(name))
    }

    fn listing(&self) -> io::Result<Arc<Listing>> {
        self.bucket.listing(&self.prefix)
    }

    pub(super) fn restat(&self) -> io::Result<Stat> {
        let listing = self.listing()?;
        Ok(self.bucket.dir_stat(&self.prefix, &listing))
    }

    /// The stat of the entry `name`. A name that is both a prefix and an
    /// object (which object storage allows) is the directory.
    pub(super) fn stat_at(&self, name: &OsStr) -> io::Result<Stat> {
        let name = utf8(name)?;
        let listing = self.listing()?;
        let key = join_key(&self.prefix, name);
        if listing.dirs.contains(name) {
            let child = self.bucket.listing(&key)?;
            return Ok(self.bucket.dir_stat(&key, &child));
        }
        match listing.files.get(name) {
            Some(info) => Ok(self.bucket.file_stat(&key, info)),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    /// Whether `name` is a subdirectory, from this directory's listing
    /// alone (the child is not listed).
    pub(super) fn check_dir(&self, name: &OsStr) -> io::Result<()> {
        let name = utf8(name)?;
        let listing = self.listing()?;
        if listing.dirs.contains(name) {
            Ok(())
        } else if listing.files.contains_key(name) {
            Err(io::Error::from_raw_os_error(libc::ENOTDIR))
        } else {
            Err(io::ErrorKind::NotFound.into())
        }
    }

    pub(super) fn open_dir(&self, name: &OsStr) -> io::Result<RemoteDir> {
        self.check_dir(name)?;
        Ok(RemoteDir {
            bucket: Arc::clone(&self.bucket),
            prefix: join_key(&self.prefix, utf8(name)?),
        })
    }

    /// The stat of `rel` (several components) below this directory.
    pub(super) fn probe_below(&self, rel: &str) -> io::Result<Option<Stat>> {
        let mut names: Vec<&str> = rel
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let Some(last) = names.pop() else {
            return self.restat().map(Some);
        };
        let mut dir = self.clone();
        for name in names {
            match dir.open_dir(OsStr::new(name)) {
                Ok(child) => dir = child,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        match dir.stat_at(OsStr::new(last)) {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the file `name` in the version listed now.
    pub(super) fn open_file(&self, name: &OsStr) -> io::Result<(RemoteFile, Stat)> {
        let name = utf8(name)?;
        let listing = self.listing()?;
        if listing.dirs.contains(name) {
            return Err(super::not_regular());
        }
        let info = listing.files.get(name).ok_or(io::ErrorKind::NotFound)?;
        let key = join_key(&self.prefix, name);
        let stat = self.bucket.file_stat(&key, info);
        Ok((RemoteFile::new(Arc::clone(&self.bucket), key, info), stat))
    }

    /// The names of the directory, each with whether it is a directory,
    /// in name order, and whether the listing stopped at its bound.
    pub(super) fn entries(&self) -> io::Result<(Vec<(String, bool)>, bool)> {
        let listing = self.listing()?;
        let mut entries: Vec<(String, bool)> = listing
            .dirs
            .iter()
            .map(|d| (d.clone(), true))
            .chain(
                listing
                    .files
                    .keys()
                    .filter(|f| !listing.dirs.contains(*f))
                    .map(|f| (f.clone(), false)),
            )
            .collect();
        entries.sort();
        Ok((entries, listing.truncated))
    }

    /// The whole file `name`, at most `cap` bytes (see
    /// [`Dir::read_capped`]).
    pub(super) fn read_capped(
        &self,
        name: &OsStr,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, Stat)>, CappedError> {
        let name = utf8(name).map_err(CappedError::Io)?;
        let listing = self.listing().map_err(CappedError::Io)?;
        if listing.dirs.contains(name) {
            return Err(CappedError::NotRegular);
        }
        let Some(info) = listing.files.get(name) else {
            return Ok(None);
        };
        let key = join_key(&self.prefix, name);
        match self.bucket.read_small(&key, info, cap) {
            Ok(Some(bytes)) => Ok(Some((bytes.to_vec(), self.bucket.file_stat(&key, info)))),
            Ok(None) => Err(CappedError::TooLarge { cap }),
            // Deleted since it was listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CappedError::Io(e)),
        }
    }

    /// Asks at once, within the fan-out bound, for what classifying the
    /// subdirectories among `names` asks of each: its listing, then the
    /// `markers` in it (a file is read, a directory listed). Stops at the
    /// first failure: what was not asked ahead is asked by the reader that
    /// needs it, which then meets the failure itself.
    pub(super) fn prefetch(&self, names: &Names, markers: &[&str]) {
        let Ok(listing) = self.listing() else { return };
        let children: Vec<String> = names
            .iter()
            .filter(|n| listing.dirs.contains(*n))
            .map(|n| join_key(&self.prefix, n))
            .collect();
        if self.bucket.prefetch_listings(children.clone()).is_err() {
            return;
        }
        let (mut small, mut dirs) = (Vec::new(), Vec::new());
        for child in &children {
            let Ok(inside) = self.bucket.listing(child) else {
                return;
            };
            for marker in markers {
                if inside.dirs.contains(*marker) {
                    dirs.push(join_key(child, marker));
                } else if let Some(info) = inside.files.get(*marker) {
                    small.push((join_key(child, marker), info.clone()));
                }
            }
        }
        if self.bucket.prefetch_listings(dirs).is_ok() {
            self.bucket.prefetch_small(small);
        }
    }

    /// Forgets what was listed at and below this directory.
    pub(super) fn forget(&self) {
        self.bucket.forget_below(&self.prefix);
    }

    /// The bucket and prefix, as a location.
    pub(super) fn location(&self) -> Location {
        Location {
            bucket: self.bucket.name.clone(),
            prefix: self.prefix.clone(),
        }
    }

    pub(super) fn bucket(&self) -> &Arc<Bucket> {
        &self.bucket
    }
}

impl Dir {
    /// Lists the subdirectories `names` of a remote directory at once,
    /// before they are classified one by one (nothing for a local one).
    pub fn prefetch_children(&self, names: &Names, markers: &[&str]) {
        if let Backend::Remote(remote) = &self.backend {
            remote.prefetch(names, markers);
        }
    }

    /// Holds what is listed from now on for one walk of the tree below a
    /// remote directory (see [`remote::hold_listings`]); nothing for a
    /// local one.
    pub fn hold_listings(&self) -> Option<remote::WalkHold> {
        self.is_remote().then(remote::hold_listings)
    }

    /// Forgets what a remote directory listed at and below it.
    pub fn forget_remote(&self) {
        if let Backend::Remote(remote) = &self.backend {
            remote.forget();
        }
    }

    /// The bucket and prefix of a remote directory.
    pub fn remote_location(&self) -> Option<Location> {
        match &self.backend {
            Backend::Remote(remote) => Some(remote.location()),
            _ => None,
        }
    }

    /// The bucket a remote directory is read from.
    pub fn remote_bucket(&self) -> Option<&Arc<Bucket>> {
        match &self.backend {
            Backend::Remote(remote) => Some(remote.bucket()),
            _ => None,
        }
    }
}
