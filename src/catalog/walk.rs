//! The directory walk behind [`Catalog::open`] and [`Catalog::stats`].
//!
//! A walk visits every leaf and record file below the opened directory in
//! `_file_` order, so a `max_files` bound keeps the first sources by path,
//! and never enters a leaf. Record files are counted through the count
//! cache only when the walk reaches them; with a rollup, a source whose
//! counts are final goes straight into the totals instead of a list. The
//! sidecar indexes of each directory are reported beside the sources. A
//! walk may carry a time budget; past it, the walk fails.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::cache::FileId;
use super::counts::{NewFiles, RenameIndex};
use super::hive;
use super::model::{
    Counts, DatasetPreview, IndexInfo, NodeKind, Snapshot, Source, SourceKind, StatsBuilder,
    StatsOrigin, Warning,
};
use super::refresh::Counted;
use super::{Catalog, display_rel, join_rel, node_warnings, scan_warnings, unenterable};
use crate::error::{Error, ErrorCode, Result, is_remote_failure};
use crate::records::RecordFormat;
use crate::sidecar;
use crate::warehouse::{Dir, Names, Stat};

impl Catalog {
    /// The Snapshot of `rel`; when walking a directory with `rollup`, every
    /// source whose counts are final goes into `rollup` instead of the
    /// Snapshot (which then holds only the others).
    pub(super) fn gather(
        &self,
        rel: &Path,
        rollup: &mut Option<StatsBuilder>,
        counting: Counting,
    ) -> Result<Snapshot> {
        self.whole(rel, || self.gather_now(rel, rollup, counting))
    }

    fn gather_now(
        &self,
        rel: &Path,
        rollup: &mut Option<StatsBuilder>,
        counting: Counting,
    ) -> Result<Snapshot> {
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
                    counting,
                );
                snapshot.warnings.extend(source.1);
                snapshot.sources.push(source.0);
                // The names beside the file come from the cached listing of
                // its directory (valid while the directory is unchanged).
                let siblings = self.dir_scan(&target.dir).ok();
                let names = siblings.as_ref().map(|scan| &scan.children);
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
        let node = self.dir_node(&target.dir).map_err(|e| Error::io(rel, &e))?;
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
            counting,
            failures: crate::error::FailureWatch::start(target.dir.is_remote()),
        };
        let walk_root = Arc::new(target.dir);
        // A remote tree's listings hold for the whole walk, however long.
        let _hold = walk_root.hold_listings();
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
                        walk.counting,
                    );
                    let adopted = counted == Counted::Adopted;
                    if !matches!(counted, Counted::Cached | Counted::Later) {
                        walk.new_files
                            .note(FileId::of(&meta), walk.sources.len(), adopted);
                    }
                    // A count stopped by the budget of the work this walk
                    // is part of (it failed, so it warns) must not pass for
                    // an unreadable file: the walk stops instead.
                    if !warnings.is_empty() {
                        crate::work::check_current().map_err(|e| {
                            Error::new(ErrorCode::AnswerLate, format!("{rel}: {e}"))
                        })?;
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
                        .map_err(|e| Error::io(parent.path().join(&name), &e))
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
        walk.truncated |= scan.truncated || scan.cut_by_store;
        self.prefetch(dir, &scan.children);
        self.walk_indexes(dir, rel, &scan.children, walk);
        let mut keyed = Vec::with_capacity(scan.children.len());
        for name in scan.children.iter() {
            walk.check_deadline()?;
            let child_rel = join_rel(rel, name);
            // As in a listing: a child the object store could not say
            // anything of fails the walk, a vanished one is passed over.
            let child_meta = match dir.stat_at(name) {
                Ok(meta) => meta,
                Err(e) if is_remote_failure(&e) => return Err(Error::io(&child_rel, &e)),
                Err(_) => continue,
            };
            if child_meta.is_dir() {
                // Another filesystem mounted below the warehouse, or a
                // directory swapped away since the stat, is not entered.
                let node = match self.child_node(dir, name, &child_meta) {
                    Ok(node) => node,
                    Err(e) if is_remote_failure(&e) => return Err(Error::io(&child_rel, &e)),
                    Err(e) if unenterable(&e) => {
                        walk.warn(ErrorCode::Io, &child_rel, e.to_string());
                        continue;
                    }
                    Err(_) => continue,
                };
                walk.warnings.extend(node_warnings(&node, &child_rel));
                if let Some(preview) = &node.leaf {
                    keyed.push((
                        name.to_string(),
                        WalkItem::Leaf(leaf_source(&child_rel, preview, attrs.clone())),
                    ));
                } else {
                    let mut child_attrs = attrs.clone();
                    hive::merge_segment(&mut child_attrs, name);
                    let item = WalkItem::Dir {
                        parent: Arc::clone(dir),
                        name: name.to_string(),
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
                    name: name.to_string(),
                    rel: child_rel,
                    meta: child_meta,
                    format,
                    attrs: attrs.clone(),
                };
                keyed.push((name.to_string(), item));
            }
        }
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(keyed.into_iter().map(|(_, item)| item).collect())
    }

    /// The sidecar indexes in one directory of a walk: every record file
    /// (present or not) that an index file or discovery manifest there
    /// names, with the state of each of its indexes.
    fn walk_indexes(&self, dir: &Dir, rel: &str, children: &Names, walk: &mut Walk) {
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
        counting: Counting,
    ) -> (Source, Vec<Warning>, Counted) {
        let id = FileId::of(meta);
        let (counts, trusted, origin, warnings, counted) = if counting == Counting::CachedOnly {
            // A reader about to read the file anyway: only what the cache
            // holds (for a viewer, only when it may read the file).
            let cached = self
                .cache_key(dir, name)
                .and_then(|key| self.files.get(&key, id))
                .filter(|_| dir.check_readable(meta).is_ok());
            match cached {
                Some(stats) => (
                    Counts::from(stats),
                    true,
                    StatsOrigin::Scan,
                    Vec::new(),
                    Counted::Cached,
                ),
                None => (
                    Counts::default(),
                    false,
                    StatsOrigin::Uncounted,
                    Vec::new(),
                    Counted::Cached,
                ),
            }
        } else {
            // A viewer who could not read the file natively gets no
            // count, cached or not.
            let counted = dir
                .check_readable(meta)
                .and_then(|()| self.count_identified(dir, name, meta, format, Some(renames), true));
            match counted {
                Ok((_, Counted::Later)) => (
                    Counts::default(),
                    false,
                    StatsOrigin::Counting,
                    Vec::new(),
                    Counted::Later,
                ),
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
            }
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
            cut: None,
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
}

/// Whether a gather reads record files to count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counting {
    /// Every record file is counted (from the count cache when it knows
    /// the file, else by reading it).
    Read,
    /// Only counts the count cache already holds are used; no record file
    /// is read. For readers about to read the records anyway.
    CachedOnly,
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
    /// Whether record files are read to count them.
    counting: Counting,
    /// Where sources go when only their totals are wanted.
    rollup: Option<StatsBuilder>,
    /// When the walk must give up, and the budget that set it.
    deadline: Option<(std::time::Instant, std::time::Duration)>,
    /// Deadline checks made so far.
    checks: u32,
    /// Whether the store of a remote tree failed since the walk began.
    failures: crate::error::FailureWatch,
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

    /// Fails once the walk is past its time budget, or its object store
    /// failed. Checked before each child is classified and each source is
    /// taken, so a walk stops at the first boundary after (one big file is
    /// still read to its end).
    fn check_deadline(&mut self) -> Result<()> {
        // The clock is read every 64th check: on some virtual machines a
        // clock read is a system call, and a walk makes two checks a file.
        // A remote walk stops at the first failure of its store: its answer
        // would be refused at the end anyway (`Catalog::whole`).
        if self.failures.failed() {
            return Err(Error::new(
                ErrorCode::RemoteUnavailable,
                "the object store failed during the walk, which was stopped",
            ));
        }
        self.checks = self.checks.wrapping_add(1);
        if !self.checks.is_multiple_of(64) {
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
        cut: None,
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
