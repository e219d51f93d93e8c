//! `--as-of TIME`: a path read as it was at a time, and a catalog frozen
//! at one (`mount --as-of`).
//!
//! Every source of the path's Snapshot is cut at the time the way its
//! layout allows, and marked with how (`cut` in `.sources`):
//!
//! - a leaf that keeps its past is pinned to the revision that was its
//!   newest then (`version`: a compact-jsonl leaf's newest Lance version
//!   committed at or before the time, by Lance's own timestamps;
//!   `generation`: the storyline generation current then, see the store);
//!   a leaf with no revision by then is left out;
//! - a record file is `timestamp`: only its records stamped at or before
//!   the time are read, and it is counted so (once per file identity and
//!   time, kept in the count cache); a file with none is left out.
//!
//! A catalog frozen at a time answers `open`, `stats` and `list` so, and
//! shows no leaf's past (`.versions`) of its own.

use std::io;
use std::ops::ControlFlow;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::Catalog;
use super::cache::FileId;
use super::model::{
    Counts, DatasetPreview, Entry, Fingerprint, Listing, Snapshot, Source, SourceKind, StatsOrigin,
    Warning,
};
use super::versions::Past;
use super::walk::Counting;
use crate::error::{Error, ErrorCode, Result};
use crate::records::read::{self, Record, RecordSink, Resume};
use crate::records::timestamp::{Micros, format_rfc3339};
use crate::records::{RecordFormat, RecordStats};
use crate::warehouse::Stat;

/// How a record file is cut at a time.
pub const CUT_BY_TIMESTAMP: &str = "timestamp";

/// Where a record file's counts as of a time are kept in the count cache:
/// `FILE/.as-of/MICROS`, a path no file has (a file has no children).
const AS_OF_KEY: &str = ".as-of";

impl Catalog {
    /// The time this catalog is frozen at (`mount --as-of`), if it is.
    pub fn frozen_at(&self) -> Option<Micros> {
        self.options.as_of
    }

    /// The Snapshot of `rel` as it was at `at` (see the module). With
    /// `reading`, record files are not read to count them (as
    /// [`Catalog::open_for_reading`]): the reader cuts them as it reads.
    pub fn open_as_of(&self, rel: &Path, at: Micros, reading: bool) -> Result<Snapshot> {
        if self.past(rel)?.is_some() {
            return Err(Error::at(
                ErrorCode::PathInvalid,
                rel,
                "--as-of reads a path of the present at a time; a version of a leaf is already cut",
            ));
        }
        let counting = if reading {
            Counting::CachedOnly
        } else {
            Counting::Read
        };
        let mut snapshot = Arc::unwrap_or_clone(self.open_kept(rel, counting)?);
        let sources = std::mem::take(&mut snapshot.sources);
        for source in sources {
            let file = source.file.clone();
            let cut = match source.kind {
                SourceKind::File if reading => Ok(Some(Source {
                    cut: Some(CUT_BY_TIMESTAMP),
                    ..source
                })),
                SourceKind::File => self.file_as_of(rel, source, at),
                SourceKind::Dataset => self.leaf_as_of(rel, source, at, &mut snapshot.warnings),
            };
            match cut {
                Ok(Some(cut)) => snapshot.sources.push(cut),
                Ok(None) => {}
                // The opened path is the source: its past is the answer. A
                // read out of time, cancelled or cut off from its store
                // fails the whole answer, as it does now.
                Err(e) if file == "." || fails_whole(&e) => return Err(e),
                Err(e) => snapshot.warnings.push(Warning {
                    code: e.code,
                    path: file,
                    message: format!("its past cannot be read, so it is left out: {}", e.message),
                }),
            }
        }
        Ok(snapshot)
    }

    /// A frozen catalog's listing of `rel`: the present one with each
    /// leaf at its revision then (one with none left out).
    pub(super) fn list_as_of(
        &self,
        rel: &Path,
        (listing, metas): (Listing, Vec<Stat>),
        at: Micros,
    ) -> Result<(Listing, Vec<Stat>)> {
        let Listing {
            kind,
            entries,
            truncated,
            mut warnings,
        } = listing;
        let mut kept = Vec::with_capacity(entries.len());
        let mut kept_metas = Vec::with_capacity(metas.len());
        for (entry, meta) in entries.into_iter().zip(metas) {
            let Entry::Dataset { name, preview } = entry else {
                kept.push(entry);
                kept_metas.push(meta);
                continue;
            };
            let source = Source {
                file: name.clone(),
                kind: SourceKind::Dataset,
                format: preview.format.into(),
                counts: preview.counts,
                fingerprint: preview.fingerprint.map(Fingerprint::Revision),
                trusted: preview.trusted,
                stats_origin: preview.stats_origin,
                size: None,
                path_attrs: Default::default(),
                cut: None,
            };
            match self.leaf_as_of(rel, source, at, &mut warnings) {
                Ok(Some(cut)) => {
                    let preview = DatasetPreview {
                        format: cut.format.into_owned(),
                        counts: cut.counts,
                        fingerprint: cut.fingerprint.map(Fingerprint::into_string),
                        trusted: cut.trusted,
                        stats_origin: cut.stats_origin,
                    };
                    kept.push(Entry::Dataset {
                        name,
                        preview: Box::new(preview),
                    });
                    kept_metas.push(meta);
                }
                Ok(None) => {}
                Err(e) if name == "." || fails_whole(&e) => return Err(e),
                Err(e) => warnings.push(Warning {
                    code: e.code,
                    path: name,
                    message: format!("its past cannot be read, so it is left out: {}", e.message),
                }),
            }
        }
        let listing = Listing {
            kind,
            entries: kept,
            truncated,
            warnings,
        };
        Ok((listing, kept_metas))
    }

    /// The record file `source` of `rel`'s Snapshot as of `at`: counted
    /// over its records stamped by then; `None` when it has none.
    fn file_as_of(&self, rel: &Path, source: Source, at: Micros) -> Result<Option<Source>> {
        let path = below(rel, &source.file);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let format = RecordFormat::from_name(&source.file)
            .or_else(|| RecordFormat::from_name(name))
            .ok_or_else(|| {
                Error::at(ErrorCode::RecordFileUnreadable, &path, "not a record file")
            })?;
        let (blob, meta) = self.open_file(&path)?;
        let key = path
            .to_str()
            .map(|p| super::join_rel(&super::join_rel(p, AS_OF_KEY), &at.to_string()));
        let known = key
            .as_ref()
            .and_then(|key| self.files.get(key, FileId::of(&meta)));
        let stats = match known {
            Some(stats) => stats,
            None => {
                let mut tally = CutTally {
                    at,
                    stats: RecordStats::default(),
                };
                let _ = read::read_file(
                    &blob,
                    format,
                    "",
                    Resume::default(),
                    source.size,
                    &mut tally,
                )
                .map_err(|e| Error::reading(ErrorCode::RecordFileUnreadable, &path, &e))?;
                if let Some(key) = &key {
                    self.files.put(key, FileId::of(&meta), tally.stats);
                }
                tally.stats
            }
        };
        if stats.record_count == 0 {
            return Ok(None);
        }
        Ok(Some(Source {
            counts: Counts::from(stats),
            trusted: true,
            stats_origin: StatsOrigin::Scan,
            cut: Some(CUT_BY_TIMESTAMP),
            ..source
        }))
    }

    /// The leaf `source` of `rel`'s Snapshot pinned to its revision at
    /// `at`; `None` when it had none by then (an error when the leaf is
    /// `rel` itself).
    fn leaf_as_of(
        &self,
        rel: &Path,
        source: Source,
        at: Micros,
        warnings: &mut Vec<Warning>,
    ) -> Result<Option<Source>> {
        let Some(store) = self.stores().by_format(&source.format).map(Arc::clone) else {
            // Its past cannot be read: counting it as it is now would
            // count what `cat --as-of` does not write.
            if source.file == "." {
                return Err(Error::at(
                    ErrorCode::FormatUnsupported,
                    rel,
                    format!("this build cannot read {} leaves", source.format),
                ));
            }
            warnings.retain(|w| !(w.code == ErrorCode::FormatUnsupported && w.path == source.file));
            warnings.push(Warning {
                code: ErrorCode::FormatUnsupported,
                path: source.file.clone(),
                message: format!(
                    "this build cannot read {} leaves, nor their past: it is left out",
                    source.format
                ),
            });
            return Ok(None);
        };
        let leaf = below(rel, &source.file);
        let dir = self.open_leaf(&leaf)?;
        let Some(then) = store.revision_at(&dir, at)? else {
            if source.file == "." {
                return Err(Error::at(
                    ErrorCode::VersionNotFound,
                    &leaf,
                    format!(
                        "the leaf has no version made at or before {}",
                        format_rfc3339(at)
                    ),
                ));
            }
            return Ok(None);
        };
        if !then.exact {
            warnings.push(Warning {
                code: ErrorCode::AsOfApproximate,
                path: source.file.clone(),
                message: format!(
                    "{} leaves record no time at which a generation became current before \
                     the last move of CURRENT: {} {} is the newest whose directory was last \
                     changed by then",
                    source.format,
                    store.revision_cut(),
                    then.name
                ),
            });
        }
        let past = Past::version(leaf, dir, store, &then.name);
        let cut = self.revision_source(&past, &then.name, &source.file, &source.format)?;
        Ok(Some(Source {
            path_attrs: source.path_attrs,
            ..cut
        }))
    }
}

/// The path of the source `file` of `rel`'s Snapshot, as every other
/// reader names it (no `./`), so what is kept of it is kept under one key.
fn below(rel: &Path, file: &str) -> PathBuf {
    let mut path: PathBuf = rel
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if file != "." {
        path.push(file);
    }
    path
}

/// Counts the records of a record file stamped at or before `at` (a
/// record without a time cannot be placed, and is not counted).
struct CutTally {
    at: Micros,
    stats: RecordStats,
}

impl RecordSink for CutTally {
    fn record(&mut self, record: Record<'_>, _next: Resume) -> io::Result<ControlFlow<()>> {
        let Some(ts) = record.timestamp.filter(|ts| *ts <= self.at) else {
            return Ok(ControlFlow::Continue(()));
        };
        let stats = &mut self.stats;
        stats.record_count += 1;
        stats.failed_count += u64::from(record.failed);
        stats.min_timestamp = Some(stats.min_timestamp.map_or(ts, |m| m.min(ts)));
        stats.max_timestamp = Some(stats.max_timestamp.map_or(ts, |m| m.max(ts)));
        Ok(ControlFlow::Continue(()))
    }
}

/// Whether `e` fails a whole answer rather than one source of it: the
/// answer ran out of time or was cancelled, the warehouse's store cannot
/// be reached, the daemon is busy.
fn fails_whole(e: &Error) -> bool {
    matches!(
        e.code,
        ErrorCode::RequestFailed
            | ErrorCode::AnswerLate
            | ErrorCode::Busy
            | ErrorCode::BeingCounted
            | ErrorCode::RemoteUnavailable
    )
}
