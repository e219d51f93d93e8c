//! `--as-of TIME`: a path read as it was at a time.
//!
//! Every source of the path's Snapshot is cut at the time the way its
//! layout allows, and marked with how (`cut` in `.sources`):
//!
//! - a leaf that keeps its past is pinned to the revision that was its
//!   newest then (`version`: a compact-jsonl leaf's newest Lance version
//!   committed at or before the time, by Lance's own timestamps;
//!   `generation`: a storyline leaf's newest generation whose directory
//!   was last changed at or before it, which is a judgement from file
//!   times and says so with a warning); a leaf with no revision by then
//!   is left out;
//! - a record file is `timestamp`: only its records stamped at or before
//!   the time are read (its counts are those records': the reader of the
//!   Snapshot counts them, see `extract::sources`).

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::Catalog;
use super::model::{NodeKind, Snapshot, Source, SourceKind, Warning};
use super::versions::Past;
use crate::error::{Error, ErrorCode, Result};
use crate::records::timestamp::{Micros, format_rfc3339};

/// How a record file is cut at a time.
pub const CUT_BY_TIMESTAMP: &str = "timestamp";

impl Catalog {
    /// The Snapshot of `rel` as it was at `at` (see the module). With
    /// `reading`, record files are not counted for it (as
    /// [`Catalog::open_for_reading`]).
    pub fn open_as_of(&self, rel: &Path, at: Micros, reading: bool) -> Result<Snapshot> {
        if self.past(rel)?.is_some() {
            return Err(Error::at(
                ErrorCode::PathInvalid,
                rel,
                "--as-of reads a path of the present at a time; a version of a leaf is already cut",
            ));
        }
        let mut snapshot = if reading {
            self.open_for_reading(rel)?
        } else {
            self.open(rel)?
        };
        let sources = std::mem::take(&mut snapshot.sources);
        for source in sources {
            if source.kind == SourceKind::File {
                snapshot.sources.push(Source {
                    cut: Some(CUT_BY_TIMESTAMP),
                    ..source
                });
                continue;
            }
            let file = source.file.clone();
            match self.leaf_as_of(rel, source, at, &mut snapshot.warnings) {
                Ok(Some(cut)) => snapshot.sources.push(cut),
                Ok(None) => {}
                // The opened path is the leaf: its past is the answer. A
                // read out of time, cancelled or cut off from its store
                // fails the whole answer, as it does now.
                Err(e) if snapshot.kind == NodeKind::Dataset || fails_whole(&e) => {
                    return Err(e);
                }
                Err(e) => snapshot.warnings.push(Warning {
                    code: e.code,
                    path: file,
                    message: format!("its past cannot be read, so it is left out: {}", e.message),
                }),
            }
        }
        Ok(snapshot)
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
        // The leaf's path as every other reader of its past names it (no
        // `./`), so its revisions' counts are kept under one key.
        let mut leaf: PathBuf = rel
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        if source.file != "." {
            leaf.push(&source.file);
        }
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
                    "{} leaves record no time at which a generation became current: \
                     {} {} is the newest whose directory was last changed by then",
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

/// Whether `e` fails a whole answer rather than one leaf of it: the
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
