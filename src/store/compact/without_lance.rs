//! The compact-jsonl store in a build without Lance (cargo feature
//! `compact-jsonl` off): a leaf is recognised by its manifest and its
//! fingerprint read from `_versions/`, but nothing that needs to open the
//! dataset can be done, and saying so is the answer.

use std::ops::ControlFlow;
use std::path::Path;

use super::{CompactJsonlStore, ImportMode, ImportReport};
use crate::error::{Error, ErrorCode, Result};
use crate::records::read::{RecordSink, Resume, Wanted};
use crate::store::LeafScan;
use crate::store::manifest::Manifest;
use crate::warehouse::Dir;

impl CompactJsonlStore {
    /// Without Lance the schema marker cannot be read, so a directory
    /// without a leaf manifest is never taken for a compact-jsonl leaf (as
    /// with Lance, a `_versions/` that cannot be confirmed is a plain
    /// directory).
    pub(super) fn holds_compact_dataset(&self, _dir: &Path) -> Result<bool> {
        Ok(false)
    }

    /// Refused: counting a dataset needs Lance.
    pub fn dataset_stats(&self, dir: &Path) -> Result<LeafScan> {
        Err(not_built(dir, "counting the dataset"))
    }

    /// Refused: publishing a manifest counts the dataset, which needs Lance.
    pub fn publish_manifest(&self, dir: &Path) -> Result<Manifest> {
        Err(not_built(dir, "publishing the manifest"))
    }

    /// Refused: reading the rows needs Lance.
    pub(super) fn read_rows(
        &self,
        dir: &Dir,
        _version: Option<u64>,
        _from: Resume,
        _wanted: &Wanted,
        _sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        Err(not_built(dir.path(), "reading the records"))
    }

    /// Refused: writing a dataset needs Lance.
    pub fn import_path(
        &self,
        _source: &Path,
        dest: &Path,
        _mode: ImportMode,
    ) -> Result<ImportReport> {
        Err(not_built(dest, "importing records"))
    }
}

fn not_built(dir: &Path, what: &str) -> Error {
    Error::at(
        ErrorCode::LanceNotBuilt,
        dir,
        format!("{what} needs Lance, and this build was made without the compact-jsonl feature"),
    )
}
