//! A leaf's past: the revisions its store keeps, read as they were.
//!
//! Below a dataset leaf whose store keeps history, two names read it:
//! `LEAF/.versions/` lists one dataset per revision the leaf keeps (a
//! Lance version's number, a storyline generation's name), each exactly
//! what the leaf showed when that revision was newest; `LEAF/.tags/` lists
//! one per name the leaf gives a revision (Lance's tags), the same dataset
//! as the revision it names. Both are directories whose Snapshot is each of
//! their datasets, as a directory's is each of its leaves. They are not in
//! the leaf's own listing (a leaf lists as itself), and never one of its
//! sources.
//!
//! `--version` reads the same Snapshots ([`Catalog::open_version`]). A
//! revision never changes, so its counts are kept in the count cache (as
//! `LEAF/.versions/NAME`, checked against the identity of what stands for
//! it: a version's manifest, a generation's directory) and counted once
//! while kept, across restarts when the cache persists.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache::FileId;
use super::model::{Counts, Fingerprint, Source, SourceKind};
use super::{
    Catalog, DatasetPreview, Entry, Listing, Node, NodeKind, Snapshot, StatsOrigin, Warning,
};
use crate::error::{Error, ErrorCode, Result};
use crate::store::{LeafScan, LeafStore};
use crate::warehouse::{self, Dir, Stat};

/// The directory of a leaf's revisions.
pub const VERSIONS: &str = ".versions";
/// The directory of a leaf's named revisions.
pub const TAGS: &str = ".tags";
/// Revisions listed at most (the newest); a leaf keeping more lists as
/// truncated.
pub const REVISIONS_LISTED: usize = 4_096;

/// Which part of a leaf's past a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// `LEAF/.versions`.
    Versions,
    /// `LEAF/.tags`.
    Tags,
    /// `LEAF/.versions/NAME`.
    Version(String),
    /// `LEAF/.tags/NAME`.
    Tag(String),
}

/// A path into a leaf's past, resolved to the leaf.
pub(super) struct Past {
    /// The leaf's path, relative to the root.
    leaf: PathBuf,
    dir: Dir,
    store: Arc<dyn LeafStore>,
    part: Part,
}

impl Catalog {
    /// Where `rel` reads a leaf's past: `None` for any other path
    /// (resolved as usual, which refuses a name inside a leaf).
    pub(super) fn past(&self, rel: &Path) -> Result<Option<Past>> {
        // A catalog frozen at a time is itself a view of the past.
        if self.frozen_at().is_some() {
            return Ok(None);
        }
        let Ok(names) = warehouse::components(rel) else {
            return Ok(None);
        };
        let text = |name: &OsStr| name.to_str().map(str::to_string);
        let n = names.len();
        let (cut, part) = match names.as_slice() {
            [.., last] if *last == OsStr::new(VERSIONS) => (n - 1, Part::Versions),
            [.., last] if *last == OsStr::new(TAGS) => (n - 1, Part::Tags),
            [.., dir, name] if *dir == OsStr::new(VERSIONS) => match text(name) {
                Some(name) => (n - 2, Part::Version(name)),
                None => return Err(no_revision(rel)),
            },
            [.., dir, name] if *dir == OsStr::new(TAGS) => match text(name) {
                Some(name) => (n - 2, Part::Tag(name)),
                None => return Err(no_revision(rel)),
            },
            _ => return Ok(None),
        };
        let leaf: PathBuf = names[..cut].iter().collect();
        // Only a leaf as it is now has a past; a revision has none.
        if self.past(&leaf)?.is_some() {
            return Ok(None);
        }
        let Ok(target) = self.resolve(&leaf) else {
            return Ok(None);
        };
        if target.name.is_some() {
            return Ok(None);
        }
        let node = self
            .dir_node(&target.dir)
            .map_err(|e| Error::io(&leaf, &e))?;
        let Some(store) = node
            .leaf
            .as_ref()
            .and_then(|preview| self.stores.by_format(&preview.format))
        else {
            return Ok(None);
        };
        let shown = match part {
            Part::Versions | Part::Version(_) => store.keeps_history(),
            Part::Tags | Part::Tag(_) => store.names_revisions(),
        };
        Ok(shown.then(|| Past {
            leaf,
            dir: target.dir,
            store: Arc::clone(store),
            part,
        }))
    }

    /// The names of the past a node shows inside it: `.versions` (and
    /// `.tags`) for a leaf, as it is now, whose store keeps history.
    pub fn past_names(&self, rel: &Path) -> Result<Vec<(&'static str, Node)>> {
        let mut names = Vec::new();
        for name in [VERSIONS, TAGS] {
            if let Some(past) = self.past(&rel.join(name))? {
                names.push((name, past.node()?));
            }
        }
        Ok(names)
    }

    /// The Snapshot of the leaf `rel` as it was at `version` (a revision's
    /// name, or a name its store resolves, such as a tag): one source `.`
    /// pinned to that revision, counted from it, marked as cut by version.
    pub fn open_version(&self, rel: &Path, version: &str) -> Result<Snapshot> {
        let kind = self.kind_of(rel)?;
        if kind != NodeKind::Dataset || self.past(rel)?.is_some() {
            return Err(Error::at(
                ErrorCode::PathInvalid,
                rel,
                format!(
                    "--version names a version of one dataset leaf; this is a {}",
                    match kind {
                        NodeKind::File => "file",
                        NodeKind::Dataset => "version of a leaf already",
                        NodeKind::Directory => "directory",
                    }
                ),
            ));
        }
        let dir = self.open_leaf(rel)?;
        let node = self.dir_node(&dir).map_err(|e| Error::io(rel, &e))?;
        let Some(preview) = &node.leaf else {
            return Err(Error::at(
                ErrorCode::PathNotFound,
                rel,
                "the directory is not a dataset leaf (any more)",
            ));
        };
        let store = self.stores().by_format(&preview.format).ok_or_else(|| {
            Error::at(
                ErrorCode::FormatUnsupported,
                rel,
                format!("this build cannot read {} leaves", preview.format),
            )
        })?;
        let past = Past {
            leaf: rel.to_path_buf(),
            dir,
            store: Arc::clone(store),
            part: Part::Version(version.to_string()),
        };
        let source = self.revision_source(&past, version, ".", &preview.format)?;
        Ok(dataset_snapshot(source))
    }

    /// [`Catalog::node`] of a path into a leaf's past.
    pub(super) fn past_node(&self, past: &Past) -> Result<Node> {
        past.node()
    }

    /// [`Catalog::list_with_meta`] of a path into a leaf's past.
    pub(super) fn past_listing(&self, past: &Past) -> Result<(Listing, Vec<Stat>)> {
        let format = past.store.format().to_string();
        match &past.part {
            Part::Versions | Part::Tags => {
                let (names, truncated, warnings) = past.listed()?;
                let mut entries = Vec::with_capacity(names.len());
                let mut metas = Vec::with_capacity(names.len());
                for (name, revision) in names {
                    let Some(meta) = past.store.revision_meta(&past.dir, &revision)? else {
                        continue;
                    };
                    // Counted now when this catalog counts as it lists
                    // (the command line); the mount shows it uncounted
                    // until something reads it.
                    let kept = match self.kept_revision(past, &revision, &meta) {
                        Some(scan) => Some((Counts::from(scan.stats), scan.fingerprint)),
                        None if self.background.is_none() => self
                            .revision_source(past, &revision, &name, &format)
                            .ok()
                            .and_then(|source| {
                                Some((source.counts, source.fingerprint?.into_string()))
                            }),
                        None => None,
                    };
                    let preview = match kept {
                        Some((counts, fingerprint)) => DatasetPreview {
                            format: format.clone(),
                            counts,
                            fingerprint: Some(fingerprint),
                            trusted: true,
                            stats_origin: StatsOrigin::Scan,
                        },
                        None => DatasetPreview {
                            format: format.clone(),
                            counts: Counts::default(),
                            fingerprint: None,
                            trusted: false,
                            stats_origin: StatsOrigin::Uncounted,
                        },
                    };
                    entries.push(Entry::Dataset {
                        name,
                        preview: Box::new(preview),
                    });
                    metas.push(past.revision_node(&meta).meta);
                }
                let listing = Listing {
                    kind: NodeKind::Directory,
                    entries,
                    truncated,
                    warnings,
                };
                Ok((listing, metas))
            }
            Part::Version(_) | Part::Tag(_) => {
                let node = past.node()?;
                let source = self.open_past(past)?.sources.remove(0);
                let listing = Listing {
                    kind: NodeKind::Dataset,
                    entries: vec![Entry::Dataset {
                        name: ".".into(),
                        preview: Box::new(DatasetPreview {
                            format: source.format.into_owned(),
                            counts: source.counts,
                            fingerprint: source.fingerprint.map(Fingerprint::into_string),
                            trusted: source.trusted,
                            stats_origin: source.stats_origin,
                        }),
                    }],
                    truncated: false,
                    warnings: Vec::new(),
                };
                Ok((listing, vec![node.meta]))
            }
        }
    }

    /// [`Catalog::open`] of a path into a leaf's past: a revision is one
    /// source `.`; `.versions` and `.tags` have one source per revision
    /// listed (a revision gone meanwhile is a warning).
    pub(super) fn open_past(&self, past: &Past) -> Result<Snapshot> {
        let format = past.store.format();
        match &past.part {
            Part::Version(name) => {
                past.revision(name)?;
                Ok(dataset_snapshot(
                    self.revision_source(past, name, ".", format)?,
                ))
            }
            Part::Tag(name) => {
                let revision = past.revision_of_tag(name)?;
                Ok(dataset_snapshot(
                    self.revision_source(past, &revision, ".", format)?,
                ))
            }
            Part::Versions | Part::Tags => {
                let (names, truncated, mut warnings) = past.listed()?;
                let mut sources = Vec::with_capacity(names.len());
                for (name, revision) in names {
                    match self.revision_source(past, &revision, &name, format) {
                        Ok(source) => sources.push(source),
                        Err(e) => warnings.push(Warning {
                            code: e.code,
                            path: name,
                            message: e.message,
                        }),
                    }
                }
                sources.sort_by(|a, b| a.file.cmp(&b.file));
                Ok(Snapshot {
                    kind: NodeKind::Directory,
                    sources,
                    truncated,
                    warnings,
                    indexes: Vec::new(),
                })
            }
        }
    }

    /// The leaf a path into its past reads, open: what a reader of a
    /// revision's records reads from (at the fingerprint its Snapshot
    /// names).
    pub(super) fn past_leaf(&self, past: Past) -> Result<Dir> {
        match past.part {
            Part::Version(_) | Part::Tag(_) => Ok(past.dir),
            Part::Versions | Part::Tags => Err(Error::at(
                ErrorCode::PathNotFound,
                &past.leaf,
                "the directory of a leaf's versions is not a leaf",
            )),
        }
    }

    /// The source `file` standing for the revision `name` of `past`'s
    /// leaf, with its counts (kept, or counted now and kept).
    pub(super) fn revision_source(
        &self,
        past: &Past,
        name: &str,
        file: &str,
        format: &str,
    ) -> Result<Source> {
        let meta = past.store.revision_meta(&past.dir, name)?;
        let kept = meta
            .as_ref()
            .and_then(|meta| self.kept_revision(past, name, meta));
        let scan = match kept {
            Some(scan) => scan,
            None => {
                let scan = past
                    .store
                    .at_version(&past.dir, name, self)?
                    .ok_or_else(|| {
                        Error::at(
                            ErrorCode::VersionNotFound,
                            &past.leaf,
                            format!("{format} leaves keep no versions to read"),
                        )
                    })?;
                if let (Some(meta), Some(key)) = (&meta, self.revision_key(past, name)) {
                    self.files.put(&key, FileId::of(meta), scan.stats);
                }
                scan
            }
        };
        Ok(Source {
            file: file.to_string(),
            kind: SourceKind::Dataset,
            format: format.to_string().into(),
            counts: Counts::from(scan.stats),
            fingerprint: Some(Fingerprint::Revision(scan.fingerprint)),
            trusted: true,
            stats_origin: StatsOrigin::Scan,
            size: None,
            path_attrs: BTreeMap::new(),
            cut: Some(past.store.revision_cut()),
        })
    }

    /// The counts of the revision `name` kept in the count cache, while
    /// what stands for it (`meta`) is the same file or directory.
    fn kept_revision(&self, past: &Past, name: &str, meta: &Stat) -> Option<LeafScan> {
        let fingerprint = past.store.revision_fingerprint(name)?;
        let stats = self
            .files
            .get(&self.revision_key(past, name)?, FileId::of(meta))?;
        Some(LeafScan { fingerprint, stats })
    }

    /// A revision's key in the count cache: `LEAF/.versions/NAME`, a path
    /// no record file has (a record file's name has its format's
    /// extension, and a leaf's interior is never counted as files).
    fn revision_key(&self, past: &Past, name: &str) -> Option<String> {
        let leaf = past.leaf.to_str()?;
        Some(super::join_rel(&super::join_rel(leaf, VERSIONS), name))
    }
}

impl Past {
    /// The revision `name` of the leaf `leaf` (opened as `dir`).
    pub(super) fn version(leaf: PathBuf, dir: Dir, store: Arc<dyn LeafStore>, name: &str) -> Past {
        Past {
            leaf,
            dir,
            store,
            part: Part::Version(name.to_string()),
        }
    }

    /// What the path is: `.versions` and `.tags` a read-only directory
    /// with the leaf's owner and permissions; a revision a dataset, its
    /// times those of what stands for it.
    fn node(&self) -> Result<Node> {
        match &self.part {
            Part::Versions | Part::Tags => {
                let mut meta = *self.dir.stat();
                meta.mode &= !0o222;
                Ok(Node {
                    kind: NodeKind::Directory,
                    meta,
                })
            }
            Part::Version(name) => Ok(self.revision_node(&self.revision(name)?)),
            Part::Tag(name) => {
                let revision = self.revision_of_tag(name)?;
                Ok(self.revision_node(&self.revision(&revision)?))
            }
        }
    }

    fn revision_node(&self, revision: &Stat) -> Node {
        let mut meta = *self.dir.stat();
        (meta.mtime, meta.mtime_nsec) = (revision.mtime, revision.mtime_nsec);
        (meta.ctime, meta.ctime_nsec) = (revision.ctime, revision.ctime_nsec);
        Node {
            kind: NodeKind::Dataset,
            meta,
        }
    }

    /// The stat of what stands for the revision `name`, or not found.
    fn revision(&self, name: &str) -> Result<Stat> {
        self.store
            .revision_meta(&self.dir, name)?
            .ok_or_else(|| self.not_kept(name))
    }

    /// The revision the tag `name` names.
    fn revision_of_tag(&self, name: &str) -> Result<String> {
        self.store
            .revision_names(&self.dir)?
            .into_iter()
            .find(|(tag, _)| tag == name)
            .map(|(_, revision)| revision)
            .ok_or_else(|| {
                Error::at(
                    ErrorCode::TagNotFound,
                    self.leaf.join(TAGS).join(name),
                    format!("the leaf has no tag {name:?}"),
                )
            })
    }

    fn not_kept(&self, name: &str) -> Error {
        Error::at(
            ErrorCode::VersionNotFound,
            self.leaf.join(VERSIONS).join(name),
            format!("the leaf keeps no version {name:?} (never made, or cleaned up)"),
        )
    }

    /// What `.versions` or `.tags` lists: `(name, revision)` pairs, at
    /// most [`REVISIONS_LISTED`] (the newest), whether that cut them, and
    /// a warning saying so.
    fn listed(&self) -> Result<(Vec<(String, String)>, bool, Vec<Warning>)> {
        let mut names: Vec<(String, String)> = match self.part {
            Part::Tags => self.store.revision_names(&self.dir)?,
            _ => self
                .store
                .history(&self.dir)?
                .unwrap_or_default()
                .into_iter()
                .map(|name| (name.clone(), name))
                .collect(),
        };
        let truncated = names.len() > REVISIONS_LISTED;
        let mut warnings = Vec::new();
        if truncated {
            warnings.push(Warning {
                code: ErrorCode::BoundReached,
                path: ".".into(),
                message: format!(
                    "the leaf keeps {} of these; the newest {REVISIONS_LISTED} are listed",
                    names.len()
                ),
            });
            names.drain(..names.len() - REVISIONS_LISTED);
        }
        Ok((names, truncated, warnings))
    }
}

fn dataset_snapshot(source: Source) -> Snapshot {
    Snapshot {
        kind: NodeKind::Dataset,
        sources: vec![source],
        truncated: false,
        warnings: Vec::new(),
        indexes: Vec::new(),
    }
}

fn no_revision(rel: &Path) -> Error {
    Error::at(
        ErrorCode::PathNotFound,
        rel,
        "a leaf's versions and tags have UTF-8 names",
    )
}
