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

pub mod cache;
pub mod classify;
pub mod counts;
pub mod hive;
pub mod manifest;
pub mod model;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cache::{FileId, HitCount, StampedLru, Stamps};
use classify::{DirNode, classify_dir};
use counts::{CacheFile, CountCache, Loaded, NewFiles, RenameIndex};
pub use model::{
    Counts, DatasetPreview, Entry, IndexInfo, Listing, NodeKind, Snapshot, Source, SourceKind,
    Stats, StatsBuilder, StatsOrigin, Timestamp, Warning,
};

use crate::error::{Error, ErrorCode, Result};
use crate::records::{RecordFormat, RecordStats, count_open};
use crate::sidecar;
use crate::store::{RecordCounter, Stores};
use crate::warehouse::{self, Dir, Stat, Viewer};

/// Open directory handles a catalog keeps for resolving paths.
const HANDLES_KEPT: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(64) {
    Some(n) => n,
    None => unreachable!(),
};

/// The directory where pchronicle keeps its own state inside a warehouse.
/// Hidden from every listing and never a source.
pub use crate::warehouse::STATE_DIR;

/// Bounds and switches of a catalog.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Children considered per directory before the answer is truncated.
    pub max_entries: usize,
    /// Sources collected per `open` before the answer is truncated.
    pub max_files: usize,
    /// Rewrite missing or stale leaf manifests (`ensure_manifest`).
    pub repair: bool,
    /// Directory listings kept in the refresh cache.
    pub dir_cache_entries: usize,
    /// Directory classifications and leaf previews kept.
    pub node_cache_entries: usize,
    /// Record-file counts kept (in memory and in the persisted cache).
    pub file_cache_entries: usize,
    /// Where record-file counts persist across restarts.
    pub count_cache: CountCachePlace,
    /// Longest one directory walk (`open`, `stats`) may take; a walk past
    /// it fails with `PCHRONICLE_REQUEST_FAILED`. `None`: no limit.
    pub walk_budget: Option<std::time::Duration>,
}

/// Where a catalog persists its record-file counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountCachePlace {
    /// Nowhere: counts are kept in memory only.
    Memory,
    /// The warehouse's state directory when it is safe to write, else this
    /// user's cache directory (see [`crate::warehouse::state_dir`]).
    Default,
    /// This file (named from outside).
    File(PathBuf),
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            max_entries: 100_000,
            max_files: 100_000,
            repair: true,
            dir_cache_entries: 4_096,
            node_cache_entries: 65_536,
            file_cache_entries: 262_144,
            count_cache: CountCachePlace::Memory,
            walk_budget: None,
        }
    }
}

/// The names of one directory's subdirectories and regular files, sorted,
/// as of one stat identity.
#[derive(Debug)]
struct DirScan {
    children: Vec<String>,
    truncated: bool,
    non_utf8: Vec<String>,
}

/// A path inside the warehouse, resolved without following symlinks.
struct Target {
    meta: Stat,
    /// A directory target: the directory itself, open. A file: the open
    /// directory holding it.
    dir: Dir,
    /// A file target's name in `dir`.
    name: Option<OsString>,
}

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
    /// Record files whose counts were taken over across a rename.
    pub renames: u64,
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
    /// How loading the persisted count cache went.
    count_cache_loaded: Loaded,
    files_read: AtomicU64,
}

impl Catalog {
    /// A catalog over `root` with the default stores.
    pub fn new(root: &Path, options: CatalogOptions) -> Result<Catalog> {
        Catalog::with_stores(root, options, Stores::default())
    }

    /// A catalog over `root` with the given stores. The root itself may be
    /// reached through a symlink; nothing below it is.
    pub fn with_stores(root: &Path, options: CatalogOptions, stores: Stores) -> Result<Catalog> {
        let root_dir = Dir::open_root(root).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) => Error::at(
                ErrorCode::PathInvalid,
                root,
                "a warehouse root must be a directory",
            ),
            _ => Error::io(root, &e),
        })?;
        let root = root_dir.path().to_path_buf();
        let cache_file = match &options.count_cache {
            CountCachePlace::Memory => None,
            CountCachePlace::File(path) => Some(CacheFile::at(path)?),
            CountCachePlace::Default => match CacheFile::default_for(&root_dir) {
                Ok((file, elsewhere)) => {
                    if let Some(why) = elsewhere {
                        log::warn!(
                            "warning[{}]: {why}; the count cache is kept in {}",
                            ErrorCode::StateDirUnsafe,
                            file.path().display()
                        );
                    }
                    Some(file)
                }
                Err(e) => {
                    log::warn!("{}; counts are kept in memory only", e.render());
                    None
                }
            },
        };
        let (files, count_cache_loaded) = CountCache::open(options.file_cache_entries, cache_file)?;
        Ok(Catalog {
            dirs: StampedLru::new(options.dir_cache_entries),
            nodes: StampedLru::new(options.node_cache_entries),
            handles: parking_lot::Mutex::new(lru::LruCache::new(HANDLES_KEPT)),
            files: Arc::new(files),
            count_cache_loaded,
            files_read: AtomicU64::new(0),
            root,
            root_dir,
            options,
            stores,
        })
    }

    /// A catalog for one path named from outside (a command line): rooted
    /// at the path itself, or at its parent when it is a file, together
    /// with the path to ask it for. The named path is resolved once, so it
    /// may be a symlink; nothing below it is followed. A path inside a leaf
    /// is refused like `resolve` refuses one, even though the leaf lies
    /// above the root.
    pub fn for_path(path: &Path, options: CatalogOptions) -> Result<(Catalog, PathBuf)> {
        let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(path, &e))?;
        let stores = Stores::default();
        if let Some(leaf) = classify::enclosing_leaf(&canonical, &stores) {
            return Err(Error::at(
                ErrorCode::PathNotFound,
                path,
                format!(
                    "the path is inside the dataset leaf {}, whose interior is not listed",
                    leaf.display()
                ),
            ));
        }
        if canonical.is_dir() {
            return Ok((
                Catalog::with_stores(&canonical, options, stores)?,
                PathBuf::from("."),
            ));
        }
        match (canonical.parent(), canonical.file_name()) {
            (Some(parent), Some(name)) => Ok((
                Catalog::with_stores(parent, options, stores)?,
                PathBuf::from(name),
            )),
            _ => Err(Error::at(
                ErrorCode::PathInvalid,
                path,
                "not a file or directory",
            )),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
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
            count_cache_loaded: self.count_cache_loaded.clone(),
            files_read: AtomicU64::new(0),
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
            renames: self.files.renames(),
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

    /// Writes the persisted count cache if it changed; true when written.
    pub fn save_counts(&self) -> Result<bool> {
        self.files.save()
    }

    /// Drops every cached answer (the next call re-reads the warehouse).
    pub fn clear_cache(&self) {
        self.dirs.clear();
        self.nodes.clear();
        self.files.clear();
    }

    /// What `rel` (relative to the root) is.
    pub fn kind_of(&self, rel: &Path) -> Result<NodeKind> {
        self.node(rel).map(|node| node.kind)
    }

    /// What `rel` is, with its own stat: one path's worth of what a
    /// listing of its parent says about it.
    pub fn node(&self, rel: &Path) -> Result<Node> {
        let target = self.resolve(rel)?;
        let kind = if target.name.is_none() {
            match self.dir_node(&target.dir).leaf {
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
        let target = self.resolve(rel)?;
        if let Some(name) = &target.name {
            let listing = Listing {
                kind: NodeKind::File,
                entries: vec![file_entry(".", name, &target.meta)],
                truncated: false,
                warnings: Vec::new(),
            };
            return Ok((listing, vec![target.meta]));
        }
        let dir = &target.dir;
        let node = self.dir_node(dir);
        let mut warnings = node_warnings(&node, "");
        if let Some(preview) = &node.leaf {
            let listing = Listing {
                kind: NodeKind::Dataset,
                entries: vec![Entry::Dataset {
                    name: ".".into(),
                    preview: preview.clone(),
                }],
                truncated: false,
                warnings,
            };
            return Ok((listing, vec![target.meta]));
        }
        let scan = self.dir_scan(dir)?;
        scan_warnings(&scan, "", self.options.max_entries, &mut warnings);
        let mut entries = Vec::with_capacity(scan.children.len());
        let mut metas = Vec::with_capacity(scan.children.len());
        for name in &scan.children {
            // A child that vanished, turned into a symlink or lies on
            // another filesystem since the scan is simply not listed.
            let Ok(meta) = dir.stat_at(name) else {
                continue;
            };
            if meta.is_dir() {
                let child = match self.child_node(dir, name, &meta) {
                    Ok(child) => child,
                    // A directory that cannot be entered (no permission,
                    // another filesystem) is listed, like `ls` does, but
                    // not classified.
                    Err(e) if unenterable(&e) => {
                        warnings.push(Warning {
                            code: ErrorCode::Io,
                            path: name.clone(),
                            message: e.to_string(),
                        });
                        entries.push(Entry::Directory { name: name.clone() });
                        metas.push(meta);
                        continue;
                    }
                    // Vanished or swapped for a symlink since the stat.
                    Err(_) => continue,
                };
                warnings.extend(node_warnings(&child, name));
                entries.push(match &child.leaf {
                    Some(preview) => Entry::Dataset {
                        name: name.clone(),
                        preview: preview.clone(),
                    },
                    None => Entry::Directory { name: name.clone() },
                });
            } else if meta.is_file() {
                entries.push(file_entry(name, OsStr::new(name), &meta));
            } else {
                continue;
            }
            metas.push(meta);
        }
        let listing = Listing {
            kind: NodeKind::Directory,
            entries,
            truncated: scan.truncated,
            warnings,
        };
        Ok((listing, metas))
    }

    /// The Snapshot of `rel`.
    pub fn open(&self, rel: &Path) -> Result<Snapshot> {
        self.gather(rel, &mut None)
    }

    /// `open(rel)` rolled up. A directory's sources are totalled as the walk
    /// meets them instead of being collected first.
    pub fn stats(&self, rel: &Path) -> Result<Stats> {
        let mut rollup = Some(StatsBuilder::new(NodeKind::Directory));
        let snapshot = self.gather(rel, &mut rollup)?;
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

    /// The Snapshot of `rel`; when walking a directory with `rollup`, every
    /// source whose counts are final goes into `rollup` instead of the
    /// Snapshot (which then holds only the others).
    fn gather(&self, rel: &Path, rollup: &mut Option<StatsBuilder>) -> Result<Snapshot> {
        let target = self.resolve(rel)?;
        if let Some(file_name) = &target.name {
            let name = file_name.to_str().unwrap_or("");
            let mut snapshot = Snapshot {
                kind: NodeKind::File,
                sources: Vec::new(),
                truncated: false,
                warnings: Vec::new(),
                indexes: Vec::new(),
            };
            if let Some(format) = RecordFormat::from_name(name) {
                let source = self.file_source(
                    ".",
                    &target.dir,
                    name,
                    &target.meta,
                    format,
                    BTreeMap::new(),
                    &mut None,
                );
                snapshot.warnings.extend(source.1);
                snapshot.sources.push(source.0);
                // The names beside the file come from the cached listing of
                // its directory (valid while the directory is unchanged).
                let siblings = self.dir_scan(&target.dir).ok();
                let names = siblings.as_ref().map(|scan| scan.children.as_slice());
                let scope = sidecar::Scope::File {
                    name,
                    siblings: names,
                };
                for cohort in sidecar::index_states(&target.dir, scope) {
                    match cohort.indexes {
                        Ok(found) => snapshot.indexes.extend(index_infos(".", "", found)),
                        Err(e) => snapshot.warnings.push(Warning {
                            code: e.code,
                            path: ".".to_string(),
                            message: e.message,
                        }),
                    }
                }
            }
            return Ok(snapshot);
        }
        let node = self.dir_node(&target.dir);
        if let Some(preview) = &node.leaf {
            return Ok(Snapshot {
                kind: NodeKind::Dataset,
                sources: vec![leaf_source(".", preview, BTreeMap::new())],
                truncated: false,
                warnings: node_warnings(&node, ""),
                indexes: Vec::new(),
            });
        }
        let mut walk = Walk {
            sources: Vec::new(),
            warnings: node_warnings(&node, ""),
            truncated: false,
            indexes: Vec::new(),
            new_files: NewFiles::default(),
            renames: None,
            count: 0,
            rollup: rollup.take(),
            deadline: self
                .options
                .walk_budget
                .map(|budget| (std::time::Instant::now() + budget, budget)),
            checks: 0,
        };
        let walk_root = Arc::new(target.dir);
        let walked = self.walk(&walk_root, &mut walk);
        *rollup = walk.rollup.take();
        walked?;
        self.recount_ambiguous(&walk_root, &mut walk);
        debug_assert!(walk.sources.is_sorted_by(|a, b| a.file <= b.file));
        walk.indexes.sort_by(|a, b| a.index.cmp(&b.index));
        Ok(Snapshot {
            kind: NodeKind::Directory,
            sources: walk.sources,
            truncated: walk.truncated,
            warnings: walk.warnings,
            indexes: walk.indexes,
        })
    }

    /// Collects the virtual dataset below `root_abs` in `_file_` order, so a
    /// `max_files` bound keeps the first sources by path. Children are
    /// visited sorted by the key their paths sort under (a plain directory
    /// by `name/`, since every path below it starts so; a leaf or file by
    /// its name), descending into a directory where it falls in that order.
    /// An explicit stack keeps deep trees from overflowing a thread's stack.
    fn walk(&self, root: &Arc<Dir>, walk: &mut Walk) -> Result<()> {
        let root_items = self.walk_items(root, "", &BTreeMap::new(), walk)?;
        let mut stack = vec![(String::new(), root_items.into_iter())];
        while let Some((dir_rel, items)) = stack.last_mut() {
            let Some(item) = items.next() else {
                stack.pop();
                continue;
            };
            walk.check_deadline()?;
            if !matches!(item, WalkItem::Dir { .. }) && walk.count >= self.options.max_files {
                walk.truncated = true;
                let message = format!("stopped at max_files = {}", self.options.max_files);
                walk.warn(ErrorCode::BoundReached, &dir_rel.clone(), message);
                return Ok(());
            }
            match item {
                WalkItem::Leaf(source) => walk.add(source, false),
                WalkItem::File {
                    dir,
                    name,
                    rel,
                    meta,
                    format,
                    attrs,
                } => {
                    let (source, warnings, counted) = self.file_source(
                        &rel,
                        &dir,
                        &name,
                        &meta,
                        format,
                        attrs,
                        &mut walk.renames,
                    );
                    let adopted = counted == Counted::Adopted;
                    if counted != Counted::Cached {
                        walk.new_files
                            .note(FileId::of(&meta), walk.sources.len(), adopted);
                    }
                    walk.add(source, adopted);
                    walk.warnings.extend(warnings);
                }
                WalkItem::Dir {
                    parent,
                    name,
                    rel,
                    meta,
                    attrs,
                } => {
                    // An unreadable subdirectory is reported, not fatal. It
                    // is opened again only now (one open directory per
                    // level, however wide the tree) and must still be the
                    // directory that was classified.
                    let opened = parent.open_dir(&name).and_then(|dir| {
                        if dir.stat().same_file(&meta) {
                            Ok(dir)
                        } else {
                            Err(io::Error::other("replaced while the walk ran"))
                        }
                    });
                    let children = opened
                        .map_err(|e| Error::io(&parent.path().join(&name), &e))
                        .and_then(|dir| self.walk_items(&Arc::new(dir), &rel, &attrs, walk));
                    match children {
                        Ok(children) => stack.push((rel, children.into_iter())),
                        Err(e) => walk.warn(e.code, &rel, e.message),
                    }
                }
            }
        }
        Ok(())
    }

    /// The children of one directory of a walk, classified and sorted.
    fn walk_items(
        &self,
        dir: &Arc<Dir>,
        rel: &str,
        attrs: &BTreeMap<String, String>,
        walk: &mut Walk,
    ) -> Result<Vec<WalkItem>> {
        let scan = self.dir_scan(dir)?;
        scan_warnings(&scan, rel, self.options.max_entries, &mut walk.warnings);
        walk.truncated |= scan.truncated;
        self.walk_indexes(dir, rel, &scan.children, walk);
        let mut keyed = Vec::with_capacity(scan.children.len());
        for name in &scan.children {
            walk.check_deadline()?;
            let child_rel = join_rel(rel, name);
            let Ok(child_meta) = dir.stat_at(name) else {
                continue;
            };
            if child_meta.is_dir() {
                // Another filesystem mounted below the warehouse, or a
                // directory swapped away since the stat, is not entered.
                let node = match self.child_node(dir, name, &child_meta) {
                    Ok(node) => node,
                    Err(e) if unenterable(&e) => {
                        walk.warn(ErrorCode::Io, &child_rel, e.to_string());
                        continue;
                    }
                    Err(_) => continue,
                };
                walk.warnings.extend(node_warnings(&node, &child_rel));
                if let Some(preview) = &node.leaf {
                    keyed.push((
                        name.clone(),
                        WalkItem::Leaf(leaf_source(&child_rel, preview, attrs.clone())),
                    ));
                } else {
                    let mut child_attrs = attrs.clone();
                    hive::merge_segment(&mut child_attrs, name);
                    let item = WalkItem::Dir {
                        parent: Arc::clone(dir),
                        name: name.clone(),
                        rel: child_rel,
                        meta: child_meta,
                        attrs: child_attrs,
                    };
                    keyed.push((format!("{name}/"), item));
                }
            } else if let Some(format) =
                RecordFormat::from_name(name).filter(|_| child_meta.is_file())
            {
                let item = WalkItem::File {
                    dir: Arc::clone(dir),
                    name: name.clone(),
                    rel: child_rel,
                    meta: child_meta,
                    format,
                    attrs: attrs.clone(),
                };
                keyed.push((name.clone(), item));
            }
        }
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(keyed.into_iter().map(|(_, item)| item).collect())
    }

    /// The sidecar indexes in one directory of a walk: every record file
    /// (present or not) that an index file or discovery manifest there
    /// names, with the state of each of its indexes.
    fn walk_indexes(&self, dir: &Dir, rel: &str, children: &[String], walk: &mut Walk) {
        let scope = sidecar::Scope::Directory { names: children };
        for cohort in sidecar::index_states(dir, scope) {
            let cohort_rel = join_rel(rel, &cohort.cohort);
            match cohort.indexes {
                Ok(found) => walk.indexes.extend(index_infos(&cohort_rel, rel, found)),
                Err(e) => walk.warn(e.code, &cohort_rel, e.message),
            }
        }
    }

    /// A record file as a source, counted through the cache.
    #[allow(clippy::too_many_arguments)]
    fn file_source(
        &self,
        rel: &str,
        dir: &Dir,
        name: &str,
        meta: &Stat,
        format: RecordFormat,
        path_attrs: BTreeMap<String, String>,
        renames: &mut Option<RenameIndex>,
    ) -> (Source, Vec<Warning>, Counted) {
        let id = FileId::of(meta);
        // A viewer who could not read the file natively gets no count,
        // cached or not.
        let counted = dir
            .check_readable(meta)
            .and_then(|()| self.count_identified(dir, name, meta, format, Some(renames)));
        let (counts, trusted, origin, warnings, counted) = match counted {
            Ok((stats, counted)) => (
                Counts::from(stats),
                true,
                StatsOrigin::Scan,
                Vec::new(),
                counted,
            ),
            Err(e) => (
                Counts::default(),
                false,
                StatsOrigin::Unavailable,
                vec![Warning {
                    code: ErrorCode::RecordFileUnreadable,
                    path: display_rel(rel),
                    message: e.to_string(),
                }],
                Counted::Read,
            ),
        };
        let source = Source {
            file: rel.to_string(),
            kind: SourceKind::File,
            format: format.as_str().to_string(),
            counts,
            fingerprint: Some(format!("file:{}:{}", id.size, id.mtime_ns)),
            trusted,
            stats_origin: origin,
            size: Some(id.size),
            path_attrs,
        };
        (source, warnings, counted)
    }

    /// Re-reads the record files of a walk whose counts were taken over
    /// from a renamed file's entry when another new file of the walk has
    /// the same identity: such a match is ambiguous.
    fn recount_ambiguous(&self, walk_root: &Dir, walk: &mut Walk) {
        for index in walk.new_files.ambiguous() {
            let source = &mut walk.sources[index];
            let Some(format) = RecordFormat::from_name(&source.file) else {
                continue;
            };
            let rel = Path::new(&source.file);
            let (parent, name) = match (rel.parent(), rel.file_name().and_then(|n| n.to_str())) {
                (Some(parent), Some(name)) => (parent, name),
                _ => continue,
            };
            let counted = walk_root.resolve_dir(parent).and_then(|dir| {
                if let Some(key) = self.cache_key(&dir, name) {
                    self.files.forget(&key);
                }
                let meta = dir.stat_at(name)?;
                self.read_counts(&dir, name, &meta, format)
            });
            match counted {
                Ok(stats) => source.counts = Counts::from(stats),
                Err(e) => {
                    source.counts = Counts::default();
                    source.trusted = false;
                    source.stats_origin = StatsOrigin::Unavailable;
                    let path = display_rel(&source.file);
                    walk.warn(ErrorCode::RecordFileUnreadable, &path, e.to_string());
                }
            }
        }
    }

    /// Counts the record file `name` of `dir`, whose identity the caller
    /// just read: from the cache by path, else (given a rename index slot,
    /// filled on first need) taken over from a renamed file's entry, else
    /// by reading it.
    fn count_identified(
        &self,
        dir: &Dir,
        name: &str,
        meta: &Stat,
        format: RecordFormat,
        renames: Option<&mut Option<RenameIndex>>,
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
    fn read_counts(
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

    /// A record file's key in the count cache: its path below the root.
    fn cache_key(&self, dir: &Dir, name: &str) -> Option<String> {
        let rel = dir.path().strip_prefix(&self.root).ok()?.to_str()?;
        Some(join_rel(rel, name))
    }

    /// The classification of a directory, from the cache while the
    /// directory and its manifest and marker files keep their identity.
    fn dir_node(&self, dir: &Dir) -> Arc<DirNode> {
        let key = dir.path().to_path_buf();
        if let Some(node) = self.nodes.get(&key, |stamps| stamps.hold(dir)) {
            return node;
        }
        // Stamps are taken before classifying, so a change made while
        // classifying invalidates the entry rather than hiding behind it.
        let stamps = self.node_stamps(dir);
        let node = Arc::new(classify_dir(dir, &self.stores, self.options.repair, self));
        if !stamps.racy() {
            self.nodes.put(key, stamps, Arc::clone(&node));
        }
        node
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

    /// The sorted, bounded names of a directory.
    fn dir_scan(&self, dir: &Dir) -> Result<Arc<DirScan>> {
        let key = dir.path().to_path_buf();
        let id = FileId::of(dir.stat());
        if let Some(scan) = self.dirs.get(&key, |cached| *cached == id) {
            return Ok(scan);
        }
        let mut scan = DirScan {
            children: Vec::new(),
            truncated: false,
            non_utf8: Vec::new(),
        };
        // The type from getdents costs no stat; symlinks, sockets, fifos
        // and devices are never part of a warehouse and are not returned.
        // No more names are read than the bound can use.
        let (entries, more) = dir
            .entries_up_to(self.options.max_entries.saturating_add(1))
            .map_err(|e| Error::io(dir.path(), &e))?;
        scan.truncated = more;
        for entry in entries {
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
            if scan.children.len() == self.options.max_entries {
                scan.truncated = true;
                break;
            }
            scan.children.push(name);
        }
        scan.children.sort();
        let scan = Arc::new(scan);
        if !id.is_racy() {
            self.dirs.put(key, id, Arc::clone(&scan));
        }
        Ok(scan)
    }

    /// Resolves `rel` below the root, one open directory at a time and
    /// never through a symlink, refusing `..`, absolute paths,
    /// `.pchronicle/`, other filesystems and the interior of a leaf.
    fn resolve(&self, rel: &Path) -> Result<Target> {
        let names = warehouse::components(rel).map_err(|_| {
            Error::at(
                ErrorCode::PathInvalid,
                rel,
                "the path must stay inside the warehouse",
            )
        })?;
        let not_found = |message: &str| Error::at(ErrorCode::PathNotFound, rel, message);
        // The root's stat is taken afresh so that the caches see it current.
        let mut dir = self
            .root_dir
            .refreshed()
            .map_err(|e| Error::io(&self.root, &e))?;
        for (i, name) in names.iter().enumerate() {
            if self.dir_node(&dir).leaf.is_some() {
                return Err(not_found(
                    "the path is inside a dataset leaf, whose interior is not listed",
                ));
            }
            if *name == STATE_DIR {
                return Err(not_found("pchronicle's own state directory is hidden"));
            }
            let meta = dir.stat_at(name).map_err(|e| Error::io(rel, &e))?;
            if meta.is_symlink() {
                return Err(not_found("the path is a symlink, and symlinks are ignored"));
            }
            let last = i + 1 == names.len();
            if meta.is_dir() {
                dir = self
                    .enter(&dir, name, &meta)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::EXDEV) => not_found(
                            "the path is on another filesystem mounted inside the warehouse",
                        ),
                        Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                            not_found("the path changed into a symlink or a file")
                        }
                        _ => Error::io(rel, &e),
                    })?;
            } else if !last {
                return Err(not_found("a component of the path is not a directory"));
            } else if meta.is_file() {
                return Ok(Target {
                    meta,
                    dir,
                    name: Some(name.to_os_string()),
                });
            } else {
                return Err(not_found("not a regular file or directory"));
            }
        }
        Ok(Target {
            meta: *dir.stat(),
            dir,
            name: None,
        })
    }

    /// The subdirectory `name` of `dir`, just seen as `meta`: from the
    /// handles kept while it is the same directory, else opened (and kept).
    fn enter(&self, dir: &Dir, name: &OsStr, meta: &Stat) -> io::Result<Dir> {
        let key = dir.path().join(name);
        let known = self
            .handles
            .lock()
            .get(&key)
            .and_then(|d| d.try_clone().ok());
        let entered = dir.open_dir_seen(name, meta, known.as_ref())?;
        let reused = known.is_some_and(|k| k.stat().same_file(entered.stat()));
        if !reused {
            if let Ok(kept) = entered.try_clone() {
                self.handles.lock().put(key, kept);
            }
        }
        Ok(entered)
    }

    /// The classification of the subdirectory `name` of `dir`, just seen
    /// as `meta`: from the cache, checked without opening the directory,
    /// or by opening and classifying it.
    fn child_node(&self, dir: &Dir, name: &str, meta: &Stat) -> io::Result<Arc<DirNode>> {
        if !dir.is_viewed() {
            let key = dir.path().join(name);
            if let Some(node) = self
                .nodes
                .peek_valid(&key, |stamps| stamps.hold_below(dir, name, meta))
            {
                return Ok(node);
            }
        }
        let child = dir.open_dir(name)?;
        Ok(self.dir_node(&child))
    }

    /// Opens the regular file `rel` for reading: resolved once, opened in
    /// the directory the resolution ended in, and only if it is still the
    /// file that was resolved (else `ESTALE`). What the mount serves when a
    /// reader opens a file.
    pub fn open_file(&self, rel: &Path) -> Result<(std::fs::File, Stat)> {
        let target = self.resolve(rel)?;
        let Some(name) = &target.name else {
            return Err(Error::io(rel, &io::Error::from_raw_os_error(libc::EISDIR)));
        };
        target
            .dir
            .open_file_as(name, &target.meta)
            .map_err(|e| Error::io(rel, &e))
    }
}

impl Drop for Catalog {
    /// Keeps what was counted for the next process.
    fn drop(&mut self) {
        if let Err(e) = self.files.save() {
            log::warn!("{}", e.render());
        }
    }
}

// The FUSE adapter serves requests from several threads through one
// catalog; this fails to compile if the catalog stops being shareable.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Catalog>();
};

impl RecordCounter for Catalog {
    fn count(&self, dir: &Dir, name: &str, format: RecordFormat) -> io::Result<RecordStats> {
        let meta = dir.stat_at(name)?;
        dir.check_readable(&meta)?;
        self.count_identified(dir, name, &meta, format, None)
            .map(|(stats, _)| stats)
    }
}

/// A child met by a walk: a source, or a directory still to enter. Record
/// files are counted only when the walk reaches them, so nothing past a
/// `max_files` bound is read.
enum WalkItem {
    Leaf(Source),
    File {
        dir: Arc<Dir>,
        name: String,
        rel: String,
        meta: Stat,
        format: RecordFormat,
        attrs: BTreeMap<String, String>,
    },
    /// A directory, opened again from `parent` when the walk enters it.
    Dir {
        parent: Arc<Dir>,
        name: String,
        rel: String,
        meta: Stat,
        attrs: BTreeMap<String, String>,
    },
}

/// What a directory walk collects.
struct Walk {
    sources: Vec<Source>,
    warnings: Vec<Warning>,
    truncated: bool,
    indexes: Vec<IndexInfo>,
    /// Record files met under a path the count cache did not know.
    new_files: NewFiles,
    /// The count cache by identity, taken at the first such file.
    renames: Option<RenameIndex>,
    /// Sources met (collected or rolled up).
    count: usize,
    /// Where sources go when only their totals are wanted.
    rollup: Option<StatsBuilder>,
    /// When the walk must give up, and the budget that set it.
    deadline: Option<(std::time::Instant, std::time::Duration)>,
    /// Deadline checks made so far.
    checks: u32,
}

/// Where a record file's counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// The count cache, by path.
    Cached,
    /// A renamed file's entry, taken over.
    Adopted,
    /// The file itself.
    Read,
}

impl Walk {
    /// Takes one source: into the totals when rolling up and its counts
    /// are final, else into `sources` (an adopted count may still be
    /// re-read; see `recount_ambiguous`).
    fn add(&mut self, source: Source, adopted: bool) {
        self.count += 1;
        match &mut self.rollup {
            Some(totals) if !adopted => totals.add(&source),
            _ => self.sources.push(source),
        }
    }

    /// Fails once the walk is past its time budget. Checked before each
    /// child is classified and each source is taken, so a walk stops at
    /// the first boundary after the budget (one big file is still read to
    /// its end).
    fn check_deadline(&mut self) -> Result<()> {
        // The clock is read every 64th check: on some virtual machines a
        // clock read is a system call, and a walk makes two checks a file.
        self.checks = self.checks.wrapping_add(1);
        if self.checks % 64 != 0 {
            return Ok(());
        }
        match self.deadline {
            Some((deadline, budget)) if std::time::Instant::now() > deadline => Err(Error::new(
                ErrorCode::RequestFailed,
                format!(
                    "the walk took longer than its budget of {} s and was stopped",
                    budget.as_secs_f64()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn warn(&mut self, code: ErrorCode, rel: &str, message: String) {
        self.warnings.push(Warning {
            code,
            path: display_rel(rel),
            message,
        });
    }
}

fn leaf_source(
    rel: &str,
    preview: &DatasetPreview,
    path_attrs: BTreeMap<String, String>,
) -> Source {
    Source {
        file: display_rel(rel),
        kind: SourceKind::Dataset,
        format: preview.format.clone(),
        counts: preview.counts,
        fingerprint: preview.fingerprint.clone(),
        trusted: preview.trusted,
        stats_origin: preview.stats_origin,
        size: None,
        path_attrs,
    }
}

/// Indexes of the record file `file` as the Snapshot reports them, their
/// paths joined onto `dir` (both relative to the opened path).
fn index_infos(file: &str, dir: &str, found: Vec<sidecar::status::Indexed>) -> Vec<IndexInfo> {
    found
        .into_iter()
        .map(|i| IndexInfo {
            file: file.to_string(),
            index: join_rel(
                dir,
                &i.index
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            key: i.key,
            types: i.types,
            rows: i.rows,
            state: i.state,
        })
        .collect()
}

fn file_entry(name: &str, file_name: &OsStr, meta: &Stat) -> Entry {
    let file_name = file_name.to_str().unwrap_or(name);
    Entry::File {
        name: name.to_string(),
        size: meta.len(),
        format: RecordFormat::from_name(file_name),
    }
}

/// A node's warnings with paths made relative to the listed/opened path.
fn node_warnings(node: &DirNode, rel: &str) -> Vec<Warning> {
    node.warnings
        .iter()
        .map(|w| Warning {
            code: w.code,
            path: match &w.subpath {
                Some(sub) => display_rel(&join_rel(rel, sub)),
                None => display_rel(rel),
            },
            message: w.message.clone(),
        })
        .collect()
}

fn scan_warnings(scan: &DirScan, rel: &str, max_entries: usize, warnings: &mut Vec<Warning>) {
    for name in &scan.non_utf8 {
        warnings.push(Warning {
            code: ErrorCode::NameNotUtf8,
            path: display_rel(rel),
            message: format!("skipped an entry whose name is not UTF-8: {name:?}"),
        });
    }
    if scan.truncated {
        warnings.push(Warning {
            code: ErrorCode::BoundReached,
            path: display_rel(rel),
            message: format!("stopped at max_entries = {max_entries}"),
        });
    }
}

/// Whether opening a directory failed for a reason worth reporting (it
/// cannot be entered), rather than a race with a writer.
fn unenterable(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EACCES) | Some(libc::EXDEV))
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
