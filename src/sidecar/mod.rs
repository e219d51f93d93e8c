//! Sidecar point-lookup indexes beside record files.
//!
//! [`format`] is the index file itself (layout v3). This module also holds
//! the one predicate the shard writer and the index builder agree on: a record file is *covered* by a sidecar index when its
//! discovery manifest `FILE.indexes.json` exists. Building an index always
//! writes that manifest, and a covered record file is sealed: no writer
//! appends to it again, since that would make its indexes stale.

pub mod build;
pub mod format;
pub mod lookup;
pub mod manifest;

use std::path::{Path, PathBuf};

/// The suffix of a record file's sidecar discovery manifest.
pub const MANIFEST_SUFFIX: &str = ".indexes.json";

/// `FILE.indexes.json` for a record file.
pub fn manifest_path(record_file: &Path) -> PathBuf {
    let mut name = record_file.as_os_str().to_os_string();
    name.push(MANIFEST_SUFFIX);
    PathBuf::from(name)
}

/// Whether a sidecar index covers `record_file` (one `lstat`). An
/// unreadable answer counts as covered: when in doubt, a writer seals.
pub fn covers(record_file: &Path) -> bool {
    match std::fs::symlink_metadata(manifest_path(record_file)) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_beside_the_file_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let shard = dir.path().join("s.0a1b2c3d.jsonl");
        std::fs::write(&shard, "{}\n").unwrap();
        assert!(!covers(&shard));
        std::fs::write(dir.path().join("s.0a1b2c3d.jsonl.indexes.json"), "{}").unwrap();
        assert!(covers(&shard));
        assert_eq!(
            manifest_path(&shard),
            dir.path().join("s.0a1b2c3d.jsonl.indexes.json")
        );
    }
}
