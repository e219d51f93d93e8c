//! `.stats` and `.sources` served from the page cache while unchanged.
//!
//! A synthetic file's inode number stands for one content ("version"):
//! its bytes never change, so its attributes may be cached for the TTL and
//! its pages kept across opens (`FOPEN_KEEP_CACHE`, no direct I/O). When the
//! name is looked up again (its entry TTL ran out) the file is rendered
//! again: the same bytes keep the number (the version is "checked" now);
//! other bytes get a new number, as a file replaced by `rename` would, so
//! a reader still holding the old one reads the old version whole and
//! never a mix. Old numbers go when the kernel forgets them.
//!
//! Only where every reader sees the same bytes: not under `--allow-other`
//! (two users may see different rollups of one directory, and the page
//! cache is shared), and not with a zero TTL (every read renders).
//!
//! The versions held are bounded by the render cache's bytes and by
//! [`PER_RENDER_KEPT`] times its entries (a dashboard polls more files
//! than it renders at once; a larger file is rendered per open as before). A version pushed
//! out is "retired": its number answers `ESTALE` from then on (the kernel
//! looks the name up again and gets a new number), since its bytes, which
//! the kernel may still cache, are no longer known.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use fuser::FileAttr;
use lru::LruCache;
use nix::errno::Errno;
use parking_lot::Mutex;

use super::WarehouseFs;
use crate::fs::FsError;
use crate::fs::attributes::synthetic_attr;
use crate::fs::inodes::Synthetic;
use crate::fs::views::View;
use crate::warehouse::Stat;

/// One content of a synthetic file, held by one inode number.
#[derive(Clone)]
pub(super) struct Version {
    pub bytes: Arc<[u8]>,
    /// Its times: when this content was first rendered.
    made: SystemTime,
    /// When a render last found the content unchanged.
    checked: Instant,
    /// A refresh came since: the next use renders again before serving it.
    stale: bool,
}

impl Version {
    fn new(bytes: Arc<[u8]>) -> Version {
        Version {
            bytes,
            made: SystemTime::now(),
            checked: Instant::now(),
            stale: false,
        }
    }

    /// The attributes of inode `ino` holding this version, owned like
    /// `owner`.
    pub fn attr(&self, ino: u64, owner: &Stat) -> FileAttr {
        synthetic_attr(ino, self.bytes.len() as u64, owner, self.made)
    }

    /// A render just found this content unchanged: checked now, and no
    /// longer in doubt after a refresh.
    fn confirm(&mut self) -> Version {
        self.checked = Instant::now();
        self.stale = false;
        self.clone()
    }

    /// How much longer the kernel may trust this version without asking:
    /// the TTL from its last check.
    pub fn fresh_for(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.checked.elapsed())
    }
}

/// Versions held per render the render cache keeps.
pub(super) const PER_RENDER_KEPT: usize = 16;

/// The versions held, by inode number, and the numbers retired.
pub(super) struct Versions {
    inner: Mutex<Held>,
    max_entries: usize,
    max_bytes: usize,
}

struct Held {
    versions: LruCache<u64, Version>,
    bytes: usize,
    /// Numbers whose versions were pushed out, with their times.
    retired: HashMap<u64, SystemTime>,
}

/// What a synthetic file's number serves.
enum Found {
    Version(Version),
    /// Pushed out; its content was first rendered then.
    Retired(SystemTime),
    None,
}

impl Versions {
    pub fn new(max_entries: usize, max_bytes: usize) -> Versions {
        Versions {
            inner: Mutex::new(Held {
                versions: LruCache::unbounded(),
                bytes: 0,
                retired: HashMap::new(),
            }),
            max_entries,
            max_bytes,
        }
    }

    fn find(&self, ino: u64) -> Found {
        let mut held = self.inner.lock();
        if let Some(version) = held.versions.get(&ino) {
            return Found::Version(version.clone());
        }
        match held.retired.get(&ino) {
            Some(made) => Found::Retired(*made),
            None => Found::None,
        }
    }

    /// Whether a version of `len` bytes may be held at all.
    fn fits(&self, len: usize) -> bool {
        self.max_entries > 0 && len <= self.max_bytes
    }

    /// Holds `version` as `ino`'s; returns the versions pushed out.
    fn hold(&self, held: &mut Held, ino: u64, version: Version) -> Vec<(u64, Version)> {
        held.bytes += version.bytes.len();
        if let Some(old) = held.versions.put(ino, version) {
            held.bytes -= old.bytes.len();
        }
        let mut out = Vec::new();
        while held.versions.len() > self.max_entries || held.bytes > self.max_bytes {
            let Some((number, old)) = held.versions.pop_lru() else {
                break;
            };
            held.bytes -= old.bytes.len();
            out.push((number, old));
        }
        out
    }

    /// The kernel forgot `ino`.
    pub fn forget(&self, ino: u64) {
        let mut held = self.inner.lock();
        if let Some(old) = held.versions.pop(&ino) {
            held.bytes -= old.bytes.len();
        }
        held.retired.remove(&ino);
    }
}

impl WarehouseFs {
    /// Whether synthetic files are served from the page cache to `view`.
    pub(super) fn keeps_synthetics(&self, view: &View) -> bool {
        self.keeps_any_synthetics() && view.id == 0
    }

    /// Whether the mount serves synthetic files from the page cache at all.
    pub(super) fn keeps_any_synthetics(&self) -> bool {
        !self.options.shared && !self.options.attr_ttl.is_zero()
    }

    /// The version inode `ino` holds, if it holds one.
    pub(super) fn version(&self, ino: u64) -> Option<Version> {
        match self.versions.find(ino) {
            Found::Version(version) => Some(version),
            _ => None,
        }
    }

    /// When the content of the retired number `ino` was first rendered.
    pub(super) fn retired(&self, ino: u64) -> Option<SystemTime> {
        match self.versions.find(ino) {
            Found::Retired(made) => Some(made),
            _ => None,
        }
    }

    /// The version the synthetic file `ino` (`which` of `rel`) serves to
    /// `view`: the one it holds, or one made now for a number that never
    /// held one (handed out by a listing); `None` when it is rendered per
    /// open instead; `ESTALE` for a retired number.
    pub(super) fn served_version(
        &self,
        view: &View,
        ino: u64,
        which: Synthetic,
        rel: &std::path::Path,
    ) -> Result<Option<Version>, FsError> {
        if which == Synthetic::Records || !self.keeps_synthetics(view) {
            return Ok(None);
        }
        match self.versions.find(ino) {
            Found::Version(version) => {
                return self.checked(view, ino, which, rel, version).map(Some);
            }
            Found::Retired(_) => return Err(Errno::ESTALE.into()),
            Found::None => {}
        }
        let bytes = self.synthetic_bytes(view, ino, which, rel)?;
        if !self.versions.fits(bytes.len()) {
            return Ok(None);
        }
        let mut held = self.versions.inner.lock();
        if let Some(version) = held.versions.get(&ino) {
            return Ok(Some(version.clone()));
        }
        let version = Version::new(bytes);
        self.hold(&mut held, ino, version.clone());
        Ok(Some(version))
    }

    /// The inode holding `bytes`, freshly rendered, as the synthetic file
    /// `name` of the directory `parent`, now numbered `ino`: `ino` itself
    /// when it holds the same bytes (checked now) or none yet, else a new
    /// number for the new content. `None` when it is too large to hold.
    pub(super) fn current_version(
        &self,
        parent: u64,
        name: &str,
        ino: u64,
        bytes: Arc<[u8]>,
    ) -> Result<Option<(u64, Version)>, FsError> {
        if !self.versions.fits(bytes.len()) {
            return Ok(None);
        }
        let mut held = self.versions.inner.lock();
        let mut ino = ino;
        // Another lookup may have numbered the new content meanwhile: the
        // name's number is compared again until it holds these bytes or
        // nothing (never two contents under one number).
        loop {
            let retired = held.retired.contains_key(&ino);
            match held.versions.get_mut(&ino) {
                Some(version) if *version.bytes == *bytes => {
                    return Ok(Some((ino, version.confirm())));
                }
                None if !retired => break,
                _ => {
                    self.inodes.detach(ino);
                    ino = self.child_ino(parent, name)?;
                }
            }
        }
        let version = Version::new(bytes);
        self.hold(&mut held, ino, version.clone());
        Ok(Some((ino, version)))
    }

    /// Marks the versions the numbers `inos` hold as possibly out of date
    /// (a refresh): the next use of each renders again, keeping the number
    /// while the bytes are the same (see [`WarehouseFs::checked`]).
    pub(super) fn mark_stale(&self, inos: &[u64]) {
        let mut held = self.versions.inner.lock();
        for ino in inos {
            if let Some(version) = held.versions.peek_mut(ino) {
                version.stale = true;
            }
        }
    }

    /// `version`, held by `ino` (`which` of `rel`), checked again if a
    /// refresh marked it: itself when a render now gives the same bytes;
    /// when not, the number is retired and answers `ESTALE`, so the
    /// kernel looks the name up again and gets a number for the new
    /// content (a handle open on the old one keeps its bytes).
    pub(super) fn checked(
        &self,
        view: &View,
        ino: u64,
        which: Synthetic,
        rel: &std::path::Path,
        version: Version,
    ) -> Result<Version, FsError> {
        if !version.stale {
            return Ok(version);
        }
        let bytes = self.synthetic_bytes(view, ino, which, rel)?;
        let mut held = self.versions.inner.lock();
        match held.versions.get_mut(&ino) {
            Some(version) if *version.bytes == *bytes => Ok(version.confirm()),
            Some(_) => {
                if let Some(old) = held.versions.pop(&ino) {
                    held.bytes -= old.bytes.len();
                    self.retire(&mut held, ino, old);
                }
                Err(Errno::ESTALE.into())
            }
            None => Err(Errno::ESTALE.into()),
        }
    }

    /// Holds `version` as `ino`'s, retiring what is pushed out: a number
    /// the kernel still holds answers `ESTALE` from now on and its name
    /// gets a new one.
    fn hold(&self, held: &mut Held, ino: u64, version: Version) {
        for (out, old) in self.versions.hold(held, ino, version) {
            if self.inodes.get(out).is_some() {
                self.retire(held, out, old);
            }
        }
    }

    /// Retires `ino`, whose version `old` is no longer held: it answers
    /// `ESTALE` from now on, and its name gets a new number.
    fn retire(&self, held: &mut Held, ino: u64, old: Version) {
        held.retired.insert(ino, old.made);
        self.inodes.detach(ino);
    }
}
