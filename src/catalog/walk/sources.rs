//! What a walk makes of the files it meets: a record file's counts
//! through the count cache, a leaf's preview, the indexes beside them, as
//! sources of the Snapshot.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use super::{Counting, Walk};
use crate::catalog::Catalog;
use crate::catalog::cache::FileId;
use crate::catalog::counts::RenameIndex;
use crate::catalog::display_rel;
use crate::catalog::join_rel;
use crate::catalog::model::{
    Counts, DatasetPreview, Fingerprint, IndexInfo, Source, SourceKind, StatsOrigin, Warning,
};
use crate::catalog::refresh::Counted;
use crate::error::ErrorCode;
use crate::records::RecordFormat;
use crate::sidecar;
use crate::warehouse::{Dir, Stat};

impl Catalog {
    /// The counts of the record file `name` of `dir` (at `rel` from the
    /// opened path), as `counting` allows.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn file_counts(
        &self,
        rel: &str,
        dir: &Dir,
        name: &str,
        meta: &Stat,
        renames: &mut Option<RenameIndex>,
        counting: Counting,
        format: RecordFormat,
    ) -> FileCounts {
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
        FileCounts {
            counts,
            trusted,
            origin,
            warnings,
            counted,
        }
    }

    /// Re-reads the record files of a walk whose counts were taken over
    /// from a renamed file's entry when another new file of the walk has
    /// the same identity: such a match is ambiguous.
    pub(super) fn recount_ambiguous(&self, walk_root: &Dir, walk: &mut Walk) {
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

/// A record file's counts as a walk found them, before it is a source.
pub(super) struct FileCounts {
    counts: Counts,
    trusted: bool,
    origin: StatsOrigin,
    warnings: Vec<Warning>,
    counted: Counted,
}

impl FileCounts {
    /// The record file at `file` (from the opened path), seen as `meta`,
    /// as a source.
    pub(super) fn into_source(
        self,
        file: String,
        meta: &Stat,
        format: RecordFormat,
        path_attrs: BTreeMap<String, String>,
    ) -> (Source, Vec<Warning>, Counted) {
        let id = FileId::of(meta);
        let source = Source {
            file,
            kind: SourceKind::File,
            format: Cow::Borrowed(format.as_str()),
            counts: self.counts,
            fingerprint: Some(Fingerprint::File {
                size: id.size,
                mtime_ns: id.mtime_ns,
            }),
            trusted: self.trusted,
            stats_origin: self.origin,
            size: Some(id.size),
            path_attrs,
            cut: None,
        };
        (source, self.warnings, self.counted)
    }
}

pub(super) fn leaf_source(
    file: String,
    preview: &DatasetPreview,
    path_attrs: BTreeMap<String, String>,
) -> Source {
    Source {
        file,
        kind: SourceKind::Dataset,
        format: preview.format.clone().into(),
        counts: preview.counts,
        fingerprint: preview.fingerprint.clone().map(Fingerprint::Revision),
        trusted: preview.trusted,
        stats_origin: preview.stats_origin,
        size: None,
        path_attrs,
        cut: None,
    }
}

/// Indexes of the record file `file` as the Snapshot reports them, their
/// paths joined onto `dir` (both relative to the opened path).
pub(super) fn index_infos(
    file: &str,
    dir: &str,
    found: Vec<sidecar::status::Indexed>,
) -> Vec<IndexInfo> {
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
