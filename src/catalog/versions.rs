//! A leaf as it was at one of its versions: the Snapshot `--version`
//! reads, from what the leaf's store keeps of its history.

use std::collections::BTreeMap;
use std::path::Path;

use super::model::{Counts, Source, SourceKind};
use super::{Catalog, NodeKind, Snapshot, StatsOrigin};
use crate::error::{Error, ErrorCode, Result};

impl Catalog {
    /// The Snapshot of the leaf `rel` as it was at `version` (a version
    /// number, or a name its store resolves, such as a tag): one source
    /// `.` pinned to that revision, counted from it, marked as cut by
    /// version.
    pub fn open_version(&self, rel: &Path, version: &str) -> Result<Snapshot> {
        let kind = self.kind_of(rel)?;
        if kind != NodeKind::Dataset {
            return Err(Error::at(
                ErrorCode::PathInvalid,
                rel,
                format!(
                    "--version names a version of one dataset leaf; this is a {}",
                    if kind == NodeKind::File {
                        "file"
                    } else {
                        "directory"
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
        let scan = store.at_version(&dir, version)?.ok_or_else(|| {
            Error::at(
                ErrorCode::VersionNotFound,
                rel,
                format!(
                    "{} leaves keep no versions to read; --version applies to compact-jsonl leaves",
                    preview.format
                ),
            )
        })?;
        Ok(Snapshot {
            kind: NodeKind::Dataset,
            sources: vec![Source {
                file: ".".into(),
                kind: SourceKind::Dataset,
                format: preview.format.clone(),
                counts: Counts::from(scan.stats),
                fingerprint: Some(scan.fingerprint),
                trusted: true,
                stats_origin: StatsOrigin::Scan,
                size: None,
                path_attrs: BTreeMap::new(),
                cut: Some("version"),
            }],
            truncated: false,
            warnings: Vec::new(),
            indexes: Vec::new(),
        })
    }
}
