//! The RFC-0015 core: classification, `list`, `open`, and the refresh
//! cache, over one warehouse directory.
//!
//! [`Catalog::list`] is one level, like `ls`: each child is a directory, a
//! dataset (a leaf, with its preview) or a file; a leaf lists as itself
//! alone and its interior is never shown; nothing is rolled up.
//! [`Catalog::open`] freezes a path as a [`Snapshot`]: a leaf is one source
//! `.`, a record file is one source, a directory is the virtual dataset of
//! every leaf and record file below it that is not inside a leaf, with
//! `_file_` relative to the opened path and hive-style attributes from the
//! directories in between. [`Stats`] is a Snapshot rolled up.
//!
//! Symlinks are ignored everywhere, `.pchronicle/` (pchronicle's own state)
//! is hidden, and traversal is bounded by `max_entries` per directory and
//! `max_files` per open; a bound that is hit marks the answer `truncated`.
//!
//! This module knows nothing of FUSE or the CLI: both call these methods
//! and serialise what they return.
//!
//! Layout: this file holds [`Catalog`] and its public methods;
//! `roots.rs` opens a catalog for a path named from outside,
//! `resolve.rs` turns a path into open directories, `refresh.rs` reuses or
//! refills the refresh cache (listings, classifications, counts), and
//! `walk/` is the directory walk behind `open` and `stats` (`sources.rs`
//! there: what it makes of the files it meets),
//! `versions.rs` reads a leaf's past (`LEAF/.versions/N`, `--version`),
//! `options.rs` holds the bounds and switches. They share
//! [`classify`] (what a directory is), [`counts`] (the count cache),
//! [`cache`] (stamps and LRUs), [`model`] (the answers) and [`hive`].

mod as_of;
pub mod cache;
pub mod classify;
pub mod counts;
pub mod hive;
mod kept;
mod listing;
pub mod model;
mod options;
mod refresh;
mod resolve;
mod roots;
mod versions;
mod walk;
pub mod watch;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use as_of::CUT_BY_TIMESTAMP;
use cache::{FileId, HitCount, StampedLru, Stamps};
use classify::DirNode;
use counts::{BackgroundCounts, CacheFile, CountCache, CountSaver, Loaded};
pub use kept::ChangeMark;
use listing::{node_warnings, scan_warnings, unenterable};
pub use model::{
    Counts, DatasetPreview, Entry, Fingerprint, IndexInfo, Listing, NodeKind, Snapshot, Source,
    SourceKind, Stats, StatsBuilder, StatsOrigin, Timestamp, Warning, pretty_json,
};
pub use options::{CatalogOptions, CountCachePlace};
use refresh::DirScan;
pub use versions::{REVISIONS_LISTED, TAGS, VERSIONS};
pub use walk::Counting;
use watch::{Answer, Question, QuietAnswers, Watcher};

use crate::error::{Error, ErrorCode, Result};
use crate::logbudget::warn_limited;
use crate::store::Stores;
use crate::warehouse::{Blob, Dir, Stat, Viewer};

/// Open directory handles a catalog keeps for resolving paths.
const HANDLES_KEPT: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(64) {
    Some(n) => n,
    None => unreachable!(),
};

/// Hidden from every listing and never a source.
pub use crate::warehouse::STATE_DIR;

/// One path as the catalog sees it: its kind and its own stat (never a
/// symlink's target).
#[derive(Debug, Clone)]
pub struct Node {
    pub kind: NodeKind,
    pub meta: Stat,
}

/// Hit counts of the three refresh caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheHits {
    /// Directory listings (names of a directory).
    pub dirs: HitCount,
    /// Directory classifications and leaf previews.
    pub nodes: HitCount,
    /// Record-file counts.
    pub files: HitCount,
    /// Record files actually read to count them.
    pub files_read: u64,
    /// Files opened to be read through (`open_file`: a record file's
    /// records, a file the mount serves).
    pub files_opened: u64,
    /// Record files whose counts were taken over across a rename.
    pub renames: u64,
    /// Answers given again because nothing below them changed.
    pub kept: HitCount,
}

/// One warehouse: its root, its stores and its refresh cache.
pub struct Catalog {
    root: PathBuf,
    /// The root, open: every path below it is resolved from here.
    root_dir: Dir,
    options: CatalogOptions,
    stores: Stores,
    dirs: StampedLru<PathBuf, FileId, Arc<DirScan>>,
    nodes: StampedLru<PathBuf, Stamps, Arc<DirNode>>,
    /// Directories recently resolved through, kept open so that resolving
    /// below them again costs an `fstatat`, not an open (see
    /// [`Dir::open_dir_seen`]).
    handles: parking_lot::Mutex<lru::LruCache<PathBuf, Dir>>,
    /// Shared by the views of one warehouse (see [`Catalog::viewed_by`]):
    /// a count is a fact of a file's bytes, whoever asks.
    files: Arc<CountCache>,
    /// Counts large record files without anyone waiting; shared by the
    /// views like `files`.
    background: Option<Arc<BackgroundCounts>>,
    /// Writes `files` and `background`, one writer at a time; shared by
    /// the views like them.
    saver: CountSaver,
    /// How loading the persisted count cache went.
    count_cache_loaded: Loaded,
    files_read: AtomicU64,
    files_opened: AtomicU64,
    /// Answers kept while nothing below them changes, when watching.
    quiet: Option<QuietAnswers>,
    /// The subdirectories a store reads to classify a leaf: watched with
    /// the directory holding them.
    classify_subdirs: Vec<&'static str>,
}

impl Catalog {
    /// A catalog over `root` with the default stores.
    pub fn new(root: &Path, options: CatalogOptions) -> Result<Catalog> {
        Catalog::with_stores(root, options, Stores::default())
    }

    /// A catalog over `root` with the given stores. The root itself may be
    /// reached through a symlink; nothing below it is.
    pub fn with_stores(root: &Path, options: CatalogOptions, stores: Stores) -> Result<Catalog> {
        // A location that cannot name a remote warehouse says why with
        // its own code.
        #[cfg(feature = "remote")]
        if crate::remote::is_remote(root) {
            crate::remote::Location::parse_path(root)?;
        }
        let root_dir = Dir::open_root(root).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) => Error::at(
                ErrorCode::PathInvalid,
                root,
                "a warehouse root must be a directory",
            ),
            _ => Error::io(root, &e),
        })?;
        let root = root_dir.path().to_path_buf();
        // Nothing is ever written to a remote warehouse.
        let mut options = options;
        options.repair &= !root_dir.is_remote();
        let cache_file = match &options.count_cache {
            CountCachePlace::Memory => None,
            CountCachePlace::File(path) => Some(CacheFile::at(path)?),
            CountCachePlace::Default => match CacheFile::default_for(&root_dir) {
                Ok((file, elsewhere)) => {
                    if let Some(why) = elsewhere {
                        warn_limited!(
                            "warning[{}]: {why}; the count cache is kept in {}",
                            ErrorCode::StateDirUnsafe,
                            file.path().display()
                        );
                    }
                    Some(file)
                }
                Err(e) => {
                    warn_limited!("{}; counts are kept in memory only", e.render());
                    None
                }
            },
        };
        let progress_file = cache_file.as_ref().and_then(counts::progress_beside);
        let (files, count_cache_loaded) = CountCache::open(options.file_cache_entries, cache_file)?;
        let files = Arc::new(files);
        let background = options
            .background_count_bytes
            .map(|threshold| BackgroundCounts::new(threshold, &files, progress_file));
        let saver = CountSaver::new(&files, background.as_ref());
        let quiet = options
            .watch
            .then(|| Watcher::new(&root_dir))
            .flatten()
            .map(QuietAnswers::new);
        let classify_subdirs = classify_subdirs(&stores);
        Ok(Catalog {
            quiet,
            classify_subdirs,
            dirs: StampedLru::new(options.dir_cache_entries),
            nodes: StampedLru::new(options.node_cache_entries),
            handles: parking_lot::Mutex::new(lru::LruCache::new(HANDLES_KEPT)),
            files,
            background,
            saver,
            count_cache_loaded,
            files_read: AtomicU64::new(0),
            files_opened: AtomicU64::new(0),
            root,
            root_dir,
            options,
            stores,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The warehouse root, open.
    pub fn root_dir(&self) -> &Dir {
        &self.root_dir
    }

    /// This warehouse as `viewer` sees it: a catalog whose every read is
    /// checked as that user (see [`crate::warehouse::Viewer`]), with
    /// listings and classifications of its own and the record-file counts
    /// of this one. Its answers equal those of `pchronicle` run by that
    /// user on the warehouse.
    pub fn viewed_by(&self, viewer: Viewer) -> Result<Catalog> {
        let root_dir = self
            .root_dir
            .reopen()
            .and_then(|dir| dir.viewed_by(Some(Arc::new(viewer))))
            .map_err(|e| Error::io(&self.root, &e))?;
        Ok(Catalog {
            root: self.root.clone(),
            root_dir,
            options: self.options.clone(),
            stores: self.stores.clone(),
            dirs: StampedLru::new(self.options.dir_cache_entries),
            nodes: StampedLru::new(self.options.node_cache_entries),
            handles: parking_lot::Mutex::new(lru::LruCache::new(HANDLES_KEPT)),
            files: Arc::clone(&self.files),
            background: self.background.clone(),
            saver: self.saver.clone(),
            count_cache_loaded: self.count_cache_loaded.clone(),
            files_read: AtomicU64::new(0),
            files_opened: AtomicU64::new(0),
            quiet: self
                .quiet
                .as_ref()
                .map(|q| QuietAnswers::new(Arc::clone(q.watcher()))),
            classify_subdirs: self.classify_subdirs.clone(),
        })
    }

    pub fn options(&self) -> &CatalogOptions {
        &self.options
    }

    /// How often each refresh cache answered from memory.
    pub fn cache_hits(&self) -> CacheHits {
        CacheHits {
            dirs: self.dirs.hit_count(),
            nodes: self.nodes.hit_count(),
            files: self.files.hit_count(),
            files_read: self.files_read.load(Ordering::Relaxed),
            files_opened: self.files_opened.load(Ordering::Relaxed),
            renames: self.files.renames(),
            kept: self
                .quiet
                .as_ref()
                .map(|q| q.hit_count())
                .unwrap_or_default(),
        }
    }

    /// Where record-file counts persist, if they do.
    pub fn count_cache_file(&self) -> Option<PathBuf> {
        self.files.file()
    }

    /// How loading the persisted count cache went.
    pub fn count_cache_loaded(&self) -> &Loaded {
        &self.count_cache_loaded
    }

    /// Writes the persisted count cache if it changed; true when written
    /// (see [`CountSaver::save`]).
    pub fn save_counts(&self) -> Result<bool> {
        self.saver.save()
    }

    /// What writes the persisted counts, for a caller that must write them
    /// after the catalog is gone.
    pub fn count_saver(&self) -> CountSaver {
        self.saver.clone()
    }

    /// Drops every cached answer (the next call re-reads the warehouse).
    pub fn clear_cache(&self) {
        self.forget_kept();
        self.dirs.clear();
        self.nodes.clear();
        self.files.clear();
    }

    /// Drops the cached listings, classifications and kept directory
    /// handles at or below `rel` and the listing of the directory holding
    /// it: the next call reads them again. Record-file counts stay: each is
    /// checked against its file's identity, ctime included, which no
    /// writer can set back.
    pub fn forget_below(&self, rel: &Path) {
        let scope = self.root.join(rel);
        let holder = (scope != self.root)
            .then(|| scope.parent().map(Path::to_path_buf))
            .flatten();
        let dropped = |key: &PathBuf| key.starts_with(&scope) || holder.as_ref() == Some(key);
        self.forget_kept();
        self.dirs.forget_where(dropped);
        self.nodes.forget_where(dropped);
        cache::pop_where(&mut self.handles.lock(), dropped);
    }

    /// What `rel` (relative to the root) is.
    pub fn kind_of(&self, rel: &Path) -> Result<NodeKind> {
        self.node(rel).map(|node| node.kind)
    }

    /// What `rel` is, with its own stat: one path's worth of what a
    /// listing of its parent says about it.
    pub fn node(&self, rel: &Path) -> Result<Node> {
        if let Some(past) = self.past(rel)? {
            return self.past_node(&past);
        }
        let target = self.resolve(rel)?;
        let kind = if target.name.is_none() {
            match self
                .dir_node(&target.dir)
                .map_err(|e| Error::io(rel, &e))?
                .leaf
            {
                Some(_) => NodeKind::Dataset,
                None => NodeKind::Directory,
            }
        } else {
            NodeKind::File
        };
        Ok(Node {
            kind,
            meta: target.meta,
        })
    }

    /// One level of `rel`, like `ls`.
    pub fn list(&self, rel: &Path) -> Result<Listing> {
        self.list_with_meta(rel).map(|(listing, _)| listing)
    }

    /// `list(rel)` together with each entry's own stat, in entry order,
    /// for callers that show attributes beside names (the mount's
    /// `readdirplus`). The stats are the ones the listing was classified
    /// from, so names, kinds and attributes always agree.
    pub fn list_with_meta(&self, rel: &Path) -> Result<(Listing, Vec<Stat>)> {
        if let Some(past) = self.past(rel)? {
            return self.past_listing(&past);
        }
        let present = self.list_present(rel)?;
        match self.frozen_at() {
            Some(at) => self.list_as_of(rel, present, at),
            None => Ok(present),
        }
    }

    /// [`Catalog::list_with_meta`] of a path of the present, as it is now.
    fn list_present(&self, rel: &Path) -> Result<(Listing, Vec<Stat>)> {
        let kept = self.kept_or_made(
            rel,
            Question::List,
            || self.whole(rel, || self.list_now(rel)).map(Arc::new),
            |listing| {
                // A leaf still being counted or unreadable changes with no
                // report (as its classification is not cached either).
                let settled = listing.0.entries.iter().all(|e| match e {
                    Entry::Dataset { preview, .. } => !matches!(
                        preview.stats_origin,
                        StatsOrigin::Counting | StatsOrigin::Unavailable
                    ),
                    _ => true,
                });
                (listing.0.kind == NodeKind::Directory && settled)
                    .then(|| Answer::List(listing.clone()))
            },
            |answer| match answer {
                Answer::List(listing) => Some(listing),
                _ => None,
            },
        )?;
        Ok(Arc::unwrap_or_clone(kept))
    }

    /// Gives `answer()` only if no object store failed while it was built:
    /// a failure may show in it only as a warning (a file whose count is
    /// missing, a subdirectory not walked), or have been met by another
    /// reader of the same listing, and an answer missing part of the tree
    /// must not pass for the whole of it.
    fn whole<T>(&self, rel: &Path, answer: impl FnOnce() -> Result<T>) -> Result<T> {
        let watch = crate::error::FailureWatch::start(self.root_dir.is_remote());
        let answer = answer()?;
        if watch.failed() {
            return Err(Error::at(
                ErrorCode::RemoteUnavailable,
                rel,
                "the object store failed while the answer was built",
            ));
        }
        Ok(answer)
    }

    /// The Snapshot of `rel`.
    pub fn open(&self, rel: &Path) -> Result<Snapshot> {
        self.open_shared(rel).map(Arc::unwrap_or_clone)
    }

    /// [`Catalog::open`], shared with the answers this catalog keeps
    /// instead of copied from them.
    pub fn open_shared(&self, rel: &Path) -> Result<Arc<Snapshot>> {
        if let Some(at) = self.frozen_at() {
            return self.open_as_of(rel, at, false).map(Arc::new);
        }
        if let Some(past) = self.past(rel)? {
            return self.open_past(&past).map(Arc::new);
        }
        self.open_kept(rel, Counting::Read)
    }

    /// The Snapshot of `rel` for a reader of its records: record files
    /// not in the count cache are not read to count them (their counts are
    /// `Uncounted`), so reading starts at once however large they are.
    pub fn open_for_reading(&self, rel: &Path) -> Result<Snapshot> {
        if let Some(at) = self.frozen_at() {
            return self.open_as_of(rel, at, true);
        }
        if let Some(past) = self.past(rel)? {
            return self.open_past(&past);
        }
        self.open_kept(rel, Counting::CachedOnly)
            .map(Arc::unwrap_or_clone)
    }

    /// The stores this catalog reads leaves with.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The dataset leaf at `rel`, opened (as this catalog's viewer, never
    /// through a symlink); `ENOTDIR` for a file, `PCHRONICLE_PATH_NOT_FOUND`
    /// for a directory that is not a leaf.
    pub fn open_leaf(&self, rel: &Path) -> Result<Dir> {
        if let Some(past) = self.past(rel)? {
            return self.past_leaf(past);
        }
        let target = self.resolve(rel)?;
        if target.name.is_some() {
            return Err(Error::io(rel, &io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
        if self
            .dir_node(&target.dir)
            .map_err(|e| Error::io(rel, &e))?
            .leaf
            .is_none()
        {
            return Err(Error::at(
                ErrorCode::PathNotFound,
                rel,
                "the directory is not a dataset leaf (any more)",
            ));
        }
        Ok(target.dir)
    }

    /// `open(rel)` rolled up. A directory's sources are totalled as the walk
    /// meets them instead of being collected first.
    pub fn stats(&self, rel: &Path) -> Result<Stats> {
        if let Some(at) = self.frozen_at() {
            return self.open_as_of(rel, at, false).map(|s| s.stats());
        }
        if let Some(past) = self.past(rel)? {
            return self.open_past(&past).map(|snapshot| snapshot.stats());
        }
        let kept = self.kept_or_made(
            rel,
            Question::Stats,
            || self.stats_now(rel).map(Arc::new),
            |stats| {
                let settled = stats.counting_sources == 0 && stats.unreadable_sources == 0;
                (stats.kind == NodeKind::Directory && settled).then(|| Answer::Stats(stats.clone()))
            },
            |answer| match answer {
                Answer::Stats(stats) => Some(stats),
                _ => None,
            },
        )?;
        Ok(Arc::unwrap_or_clone(kept))
    }

    fn stats_now(&self, rel: &Path) -> Result<Stats> {
        let mut rollup = Some(StatsBuilder::new(NodeKind::Directory));
        let snapshot = self.gather(rel, &mut rollup, Counting::Read)?;
        Ok(match rollup {
            Some(mut totals) if snapshot.kind == NodeKind::Directory => {
                for source in &snapshot.sources {
                    totals.add(source);
                }
                totals.finish(snapshot.truncated, snapshot.warnings, snapshot.indexes)
            }
            _ => snapshot.stats(),
        })
    }

    /// Opens the regular file `rel` for reading: resolved once, opened in
    /// the directory the resolution ended in, and only if it is still the
    /// file that was resolved (else `ESTALE`). What the mount serves when a
    /// reader opens a file.
    pub fn open_file(&self, rel: &Path) -> Result<(Blob, Stat)> {
        let target = self.resolve(rel)?;
        let Some(name) = &target.name else {
            return Err(Error::io(rel, &io::Error::from_raw_os_error(libc::EISDIR)));
        };
        self.files_opened.fetch_add(1, Ordering::Relaxed);
        target
            .dir
            .open_file_as(name, &target.meta)
            .map_err(|e| Error::io(rel, &e))
    }
}

impl Drop for Catalog {
    /// Keeps what was counted for the next process.
    fn drop(&mut self) {
        if let Err(e) = self.save_counts() {
            warn_limited!("{}", e.render());
        }
    }
}

// The FUSE adapter serves requests from several threads through one
// catalog; this fails to compile if the catalog stops being shareable.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Catalog>();
};

/// The entries directly inside a leaf that some store reads to classify
/// it, whichever may be a directory.
fn classify_subdirs(stores: &Stores) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = stores
        .iter()
        .flat_map(|s| s.classify_reads().iter().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn join_rel(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

fn display_rel(rel: &str) -> String {
    if rel.is_empty() {
        ".".into()
    } else {
        rel.to_string()
    }
}
