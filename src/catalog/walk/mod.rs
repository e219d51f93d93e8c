//! The directory walk behind [`Catalog::open`] and [`Catalog::stats`].
//!
//! A walk visits every leaf and record file below the opened directory in
//! `_file_` order, so a `max_files` bound keeps the first sources by path,
//! and never enters a leaf. Record files are counted through the count
//! cache only when the walk reaches them; with a rollup, a source whose
//! counts are final goes straight into the totals instead of a list. The
//! sidecar indexes of each directory are reported beside the sources. A
//! walk may carry a time budget; past it, the walk fails.

mod sources;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::cache::FileId;
use super::counts::{NewFiles, RenameIndex};
use super::hive;
use super::model::{IndexInfo, NodeKind, Snapshot, Source, StatsBuilder, Warning};
use super::refresh::Counted;
use super::{Catalog, display_rel, join_rel, node_warnings, scan_warnings, unenterable};
use crate::error::{Error, ErrorCode, Result, is_remote_failure};
use crate::records::RecordFormat;
use crate::sidecar;
use crate::warehouse::{Dir, Names, Stat};
use sources::{index_infos, leaf_source};

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
                let counted = self.file_counts(
                    ".",
                    &target.dir,
                    name,
                    &target.meta,
                    &mut None,
                    counting,
                    format,
                );
                let (source, warnings, _) =
                    counted.into_source(".".to_string(), &target.meta, format, BTreeMap::new());
                snapshot.warnings.extend(warnings);
                snapshot.sources.push(source);
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
                sources: vec![leaf_source(".".to_string(), preview, BTreeMap::new())],
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
                WalkItem::Leaf { source, .. } => walk.add(source, false),
                WalkItem::File {
                    dir,
                    rel,
                    name_at,
                    meta,
                    format,
                    attrs,
                } => {
                    let counted = self.file_counts(
                        &rel,
                        &dir,
                        &rel[name_at..],
                        &meta,
                        &mut walk.renames,
                        walk.counting,
                        format,
                    );
                    let (source, warnings, counted) =
                        counted.into_source(rel, &meta, format, attrs);
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
                            let file = &source.file;
                            Error::new(ErrorCode::AnswerLate, format!("{file}: {e}"))
                        })?;
                    }
                    walk.add(source, adopted);
                    walk.warnings.extend(warnings);
                }
                WalkItem::Dir {
                    parent,
                    rel,
                    name_at,
                    meta,
                    attrs,
                } => {
                    let name = &rel[name_at..];
                    // An unreadable subdirectory is reported, not fatal. It
                    // is opened again only now (one open directory per
                    // level, however wide the tree) and must still be the
                    // directory that was classified.
                    let opened = parent.open_dir(name).and_then(|dir| {
                        if dir.stat().same_file(&meta) {
                            Ok(dir)
                        } else {
                            Err(io::Error::other("replaced while the walk ran"))
                        }
                    });
                    let children = opened
                        .map_err(|e| Error::io(parent.path().join(name), &e))
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
        let mut items = Vec::with_capacity(scan.children.len());
        for name in scan.children.iter() {
            walk.check_deadline()?;
            let rel = join_rel(rel, name);
            let name_at = rel.len() - name.len();
            // As in a listing: a child the object store could not say
            // anything of fails the walk, a vanished one is passed over.
            let child_meta = match dir.stat_at(name) {
                Ok(meta) => meta,
                Err(e) if is_remote_failure(&e) => return Err(Error::io(&rel, &e)),
                Err(_) => continue,
            };
            if child_meta.is_dir() {
                // Another filesystem mounted below the warehouse, or a
                // directory swapped away since the stat, is not entered.
                let node = match self.child_node(dir, name, &child_meta) {
                    Ok(node) => node,
                    Err(e) if is_remote_failure(&e) => return Err(Error::io(&rel, &e)),
                    Err(e) if unenterable(&e) => {
                        walk.warn(ErrorCode::Io, &rel, e.to_string());
                        continue;
                    }
                    Err(_) => continue,
                };
                walk.warnings.extend(node_warnings(&node, &rel));
                if let Some(preview) = &node.leaf {
                    let source = leaf_source(rel, preview, attrs.clone());
                    items.push(WalkItem::Leaf { source, name_at });
                } else {
                    let mut child_attrs = attrs.clone();
                    hive::merge_segment(&mut child_attrs, name);
                    items.push(WalkItem::Dir {
                        parent: Arc::clone(dir),
                        rel,
                        name_at,
                        meta: child_meta,
                        attrs: child_attrs,
                    });
                }
            } else if let Some(format) =
                RecordFormat::from_name(name).filter(|_| child_meta.is_file())
            {
                items.push(WalkItem::File {
                    dir: Arc::clone(dir),
                    rel,
                    name_at,
                    meta: child_meta,
                    format,
                    attrs: attrs.clone(),
                });
            }
        }
        // The names come sorted: only a plain directory (sorting as
        // `name/`) can be out of place.
        let order = |a: &WalkItem, b: &WalkItem| path_order(a.order_key(), b.order_key());
        if !items.is_sorted_by(|a, b| order(a, b).is_le()) {
            items.sort_by(order);
        }
        Ok(items)
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
/// `max_files` bound is read. Each holds its path from the opened one
/// (`rel`) and where its name starts in it, so a child takes one string.
enum WalkItem {
    Leaf {
        source: Source,
        name_at: usize,
    },
    File {
        dir: Arc<Dir>,
        rel: String,
        name_at: usize,
        meta: Stat,
        format: RecordFormat,
        attrs: BTreeMap<String, String>,
    },
    /// A directory, opened again from `parent` when the walk enters it.
    Dir {
        parent: Arc<Dir>,
        rel: String,
        name_at: usize,
        meta: Stat,
        attrs: BTreeMap<String, String>,
    },
}

impl WalkItem {
    /// The child's name, and whether paths below it follow it (a plain
    /// directory: they sort as `name/`).
    fn order_key(&self) -> (&str, bool) {
        match self {
            WalkItem::Leaf { source, name_at } => (&source.file[*name_at..], false),
            WalkItem::File { rel, name_at, .. } => (&rel[*name_at..], false),
            WalkItem::Dir { rel, name_at, .. } => (&rel[*name_at..], true),
        }
    }
}

/// The order of two children by the key their paths sort under: a plain
/// directory's name followed by `/`, any other child's name.
fn path_order(a: (&str, bool), b: (&str, bool)) -> std::cmp::Ordering {
    fn key(name: &[u8], dir: bool) -> impl Iterator<Item = u8> + '_ {
        name.iter().copied().chain(dir.then_some(b'/'))
    }
    // Names differ before either ends, mostly: compared as slices.
    let (x, y) = (a.0.as_bytes(), b.0.as_bytes());
    let common = x.len().min(y.len());
    x[..common]
        .cmp(&y[..common])
        .then_with(|| key(&x[common..], a.1).cmp(key(&y[common..], b.1)))
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
