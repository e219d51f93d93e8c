//! The refresh cache at work: how a catalog reuses what it learnt of a
//! directory or a record file while the stat identities it was learnt
//! from hold (see [`super::cache`] for the rules).
//!
//! Three things are cached: a directory's sorted names ([`DirScan`],
//! valid while the directory's identity holds), a directory's
//! classification (valid while the directory and its manifest and marker
//! files keep theirs), and a record file's counts (in the count cache,
//! [`super::counts`], by path, or taken over across a rename). Nothing
//! racy is stored.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::cache::{FileId, Stamps};
use super::classify::{DirNode, classify_dir};
use super::counts::{Background, RenameIndex};
use super::{Catalog, STATE_DIR, StatsOrigin, join_rel};
use crate::error::{Error, FailureWatch, RemoteFailure, Result};
use crate::records::{CountingLater, RecordFormat, RecordStats, count_open};
use crate::store::RecordCounter;
use crate::store::manifest;
use crate::warehouse::{Dir, Names, Stat};

/// The names of one directory's subdirectories and regular files, sorted,
/// as of one stat identity.
#[derive(Debug)]
pub(super) struct DirScan {
    pub(super) children: Names,
    /// Stopped at `max_entries`.
    pub(super) truncated: bool,
    /// An object store's listing stopped at its own bound.
    pub(super) cut_by_store: bool,
    pub(super) non_utf8: Vec<String>,
}

/// Where a record file's counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// The count cache, by path.
    Cached,
    /// A renamed file's entry, taken over.
    Adopted,
    /// The file itself.
    Read,
    /// Handed to the background counter, which has not finished it: no
    /// counts yet.
    Later,
}

impl Catalog {
    /// The classification of a directory, from the cache while the
    /// directory and its manifest and marker files keep their identity.
    /// A remote directory classified while its store failed is neither
    /// kept nor given: a manifest or marker that could not be read would
    /// make a leaf look like a plain directory, or its counts come from
    /// another place, for as long as the entry held.
    pub(super) fn dir_node(&self, dir: &Dir) -> io::Result<Arc<DirNode>> {
        // Watched before it is read (see `watch`).
        self.watch(dir);
        let key = dir.path().to_path_buf();
        if let Some(node) = self.nodes.get(&key, |stamps| stamps.hold(dir)) {
            return Ok(node);
        }
        let watch = FailureWatch::start(dir.is_remote());
        // Stamps are taken before classifying, so a change made while
        // classifying invalidates the entry rather than hiding behind it.
        let stamps = self.node_stamps(dir);
        let node = Arc::new(classify_dir(dir, &self.stores, self.options.repair, self));
        if watch.failed() {
            return Err(RemoteFailure::Unavailable(format!(
                "{}: the object store failed while the directory was classified",
                dir.path().display()
            ))
            .into_io());
        }
        // A leaf still being counted is classified again at its next use,
        // when its counts may be known.
        let counting = node
            .leaf
            .as_ref()
            .is_some_and(|leaf| leaf.stats_origin == StatsOrigin::Counting);
        if !stamps.racy() && !counting {
            self.nodes.put(key, stamps, Arc::clone(&node));
        }
        Ok(node)
    }

    /// The identities a directory's classification depends on: the
    /// directory itself (its mtime moves when an entry appears, vanishes or
    /// is renamed into place) and each manifest or marker that exists
    /// (caught when rewritten in place).
    fn node_stamps(&self, dir: &Dir) -> Stamps {
        let mut stamps = Stamps {
            dir: FileId::of(dir.stat()),
            entries: Vec::new(),
        };
        let names = std::iter::once(manifest::MANIFEST_FILE)
            .chain(self.stores.iter().flat_map(|s| s.markers().iter().copied()));
        for name in names {
            if let Ok(Some(marker)) = FileId::probe(dir, name) {
                if !stamps.entries.iter().any(|(n, _)| *n == name) {
                    stamps.entries.push((name, Some(marker)));
                }
            }
        }
        stamps
    }

    /// Asks a remote directory, at once, for what classifying its
    /// children one by one will ask of each (their listings, manifests
    /// and markers); a local directory has nothing to ask ahead.
    pub(super) fn prefetch(&self, dir: &Dir, children: &Names) {
        let markers: Vec<&str> = std::iter::once(manifest::MANIFEST_FILE)
            .chain(
                self.stores
                    .iter()
                    .flat_map(|s| s.classify_reads().iter().copied()),
            )
            .collect();
        dir.prefetch_children(children, &markers);
    }

    /// The sorted, bounded names of a directory.
    pub(super) fn dir_scan(&self, dir: &Dir) -> Result<Arc<DirScan>> {
        let key = dir.path().to_path_buf();
        let id = FileId::of(dir.stat());
        if let Some(scan) = self.dirs.get(&key, |cached| *cached == id) {
            return Ok(scan);
        }
        let mut scan = DirScan {
            children: Names::default(),
            truncated: false,
            cut_by_store: false,
            non_utf8: Vec::new(),
        };
        // The type from getdents costs no stat; symlinks, sockets, fifos
        // and devices are never part of a warehouse and are not returned.
        // No more names are read than the bound can use.
        let found = dir
            .entries_up_to(self.options.max_entries.saturating_add(1))
            .map_err(|e| Error::io(dir.path(), &e))?;
        scan.truncated = found.more;
        scan.cut_by_store = found.cut_by_store;
        let (mut children, mut bytes) = (Vec::new(), 0);
        for entry in found.entries {
            let name = match String::from_utf8(entry.name) {
                Ok(name) => name,
                Err(raw) => {
                    scan.non_utf8
                        .push(String::from_utf8_lossy(raw.as_bytes()).into_owned());
                    continue;
                }
            };
            if name == STATE_DIR {
                continue;
            }
            if children.len() == self.options.max_entries || !Names::fits(bytes, &name) {
                scan.truncated = true;
                break;
            }
            bytes += name.len();
            children.push(name);
        }
        scan.children = Names::sorted(children);
        let scan = Arc::new(scan);
        if !id.is_racy() {
            self.dirs.put(key, id, Arc::clone(&scan));
        }
        Ok(scan)
    }

    /// The classification of the subdirectory `name` of `dir`, just seen
    /// as `meta`: from the cache, checked without opening the directory,
    /// or by opening and classifying it.
    pub(super) fn child_node(
        &self,
        dir: &Dir,
        name: &str,
        meta: &Stat,
    ) -> io::Result<Arc<DirNode>> {
        let key = dir.path().join(name);
        // A directory not watched yet is opened, to be watched before its
        // classification is checked.
        if !dir.is_viewed() && self.watched(&key) {
            if let Some(node) = self
                .nodes
                .peek_valid(&key, |stamps| stamps.hold_below(dir, name, meta))
            {
                return Ok(node);
            }
        }
        let child = dir.open_dir(name)?;
        self.dir_node(&child)
    }

    /// Counts the record file `name` of `dir`, whose identity the caller
    /// just read: from the cache by path, else (given a rename index slot,
    /// filled on first need) taken over from a renamed file's entry, else
    /// (when `later` allows and the catalog counts in the background, for
    /// a file large enough) by the background counter, else by reading it.
    pub(super) fn count_identified(
        &self,
        dir: &Dir,
        name: &str,
        meta: &Stat,
        format: RecordFormat,
        renames: Option<&mut Option<RenameIndex>>,
        later: bool,
    ) -> io::Result<(RecordStats, Counted)> {
        let id = FileId::of(meta);
        if let Some(key) = self.cache_key(dir, name) {
            if let Some(stats) = self.files.get(&key, id) {
                return Ok((stats, Counted::Cached));
            }
            // A viewer never takes counts over across a rename: it could
            // fake a renamed file to learn the counts of one it cannot read.
            if let Some(slot) = renames.filter(|_| !self.root_dir.is_viewed()) {
                let index = slot.get_or_insert_with(|| self.files.rename_index());
                let live = |other: &str| self.probe_rel(other);
                if let Some(stats) = self.files.adopt_rename(index, &key, id, live) {
                    return Ok((stats, Counted::Adopted));
                }
            }
            let background = self
                .background
                .as_ref()
                .filter(|b| later && id.size >= b.threshold());
            if let Some(background) = background {
                let open = || dir.open_seen(name, meta).map(|(blob, _)| blob);
                return match background.request(&key, id, format, open) {
                    Background::Counted(stats) => Ok((stats, Counted::Read)),
                    Background::Counting { .. } => Ok((RecordStats::default(), Counted::Later)),
                    Background::Failed(why) => Err(io::Error::other(why)),
                };
            }
        }
        self.read_counts(dir, name, meta, format)
            .map(|stats| (stats, Counted::Read))
    }

    /// The identity of the entry at `rel` below the root, if it exists.
    fn probe_rel(&self, rel: &str) -> Option<FileId> {
        let rel = Path::new(rel);
        let name = rel.file_name()?.to_str()?;
        let dir = self.root_dir.resolve_dir(rel.parent()?).ok()?;
        FileId::probe(&dir, name).ok().flatten()
    }

    /// Reads the counts of the record file `name` of `dir`, just seen as
    /// `meta`, and caches them when the file opened is still that one.
    pub(super) fn read_counts(
        &self,
        dir: &Dir,
        name: &str,
        meta: &Stat,
        format: RecordFormat,
    ) -> io::Result<RecordStats> {
        let (file, stat) = dir.open_seen(name, meta)?;
        let stats = count_open(file, format)?;
        self.files_read.fetch_add(1, Ordering::Relaxed);
        let id = FileId::of(meta);
        if FileId::of(&stat) == id {
            if let Some(key) = self.cache_key(dir, name) {
                self.files.put(&key, id, stats);
            }
        }
        Ok(stats)
    }

    /// Takes the counts `stats` another process made of the record file
    /// `rel` (a worker, see `distributed/`), as if counted here, when the
    /// file is still the one they were made of: its size and modification
    /// time as that process saw them. False when it is not (nothing kept).
    pub fn adopt_counts(&self, rel: &Path, size: u64, mtime_ns: i64, stats: RecordStats) -> bool {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name().and_then(|n| n.to_str()))
        else {
            return false;
        };
        let Ok(dir) = self.root_dir.resolve_dir(parent) else {
            return false;
        };
        let Ok(meta) = dir.stat_at(name) else {
            return false;
        };
        let id = FileId::of(&meta);
        if id.size != size || id.mtime_ns != mtime_ns {
            return false;
        }
        match self.cache_key(&dir, name) {
            Some(key) => {
                self.files.put(&key, id, stats);
                true
            }
            None => false,
        }
    }

    /// A record file's key in the count cache: its path below the root.
    pub(super) fn cache_key(&self, dir: &Dir, name: &str) -> Option<String> {
        let rel = dir.path().strip_prefix(&self.root).ok()?.to_str()?;
        Some(join_rel(rel, name))
    }
}

impl RecordCounter for Catalog {
    fn count(&self, dir: &Dir, name: &str, format: RecordFormat) -> io::Result<RecordStats> {
        let meta = dir.stat_at(name)?;
        dir.check_readable(&meta)?;
        // A daemon's leaf is not counted while someone waits either: a
        // file left to the background makes the leaf's counts unknown
        // for now (see `classify`).
        match self.count_identified(dir, name, &meta, format, None, true)? {
            (_, Counted::Later) => Err(io::Error::other(CountingLater)),
            (stats, _) => Ok(stats),
        }
    }
}
