//! The latest Lance version of a dataset, read from the names in its
//! `_versions/` directory without opening the dataset.
//!
//! Lance names each committed version's manifest in one of two schemes:
//! `{N}.manifest` (the first scheme) or `{u64::MAX - N:020}.manifest` (the
//! second, zero-padded to 20 digits so a lexical listing yields the newest
//! first). A 20-digit name is the second scheme. Detached versions
//! (`d{N}.manifest`) and anything else (temporary files) are not committed
//! versions and are skipped. The `lance_surface_guards` tests pin this
//! against the Lance version the crate is built with.

use std::fs;
use std::path::Path;

use crate::error::{Error, ErrorCode, Result};

/// Lance's directory of version manifests inside a dataset.
pub const VERSIONS_DIR: &str = "_versions";

const MANIFEST_SUFFIX: &str = ".manifest";
const SECOND_SCHEME_DIGITS: usize = 20;

/// The committed version a manifest file name stands for.
pub fn version_of(file_name: &str) -> Option<u64> {
    let digits = file_name.strip_suffix(MANIFEST_SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    if digits.len() == SECOND_SCHEME_DIGITS {
        Some(u64::MAX - number)
    } else {
        Some(number)
    }
}

/// The newest committed version of the dataset at `dir`.
pub fn latest_version(dir: &Path) -> Result<u64> {
    let versions = dir.join(VERSIONS_DIR);
    let entries = fs::read_dir(&versions).map_err(|e| Error::io(&versions, &e))?;
    let mut latest = None;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&versions, &e))?;
        if let Some(version) = entry.file_name().to_str().and_then(version_of) {
            latest = latest.max(Some(version));
        }
    }
    latest.ok_or_else(|| Error::at(ErrorCode::Lance, &versions, "no committed version manifest"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_naming_schemes() {
        assert_eq!(version_of("1.manifest"), Some(1));
        assert_eq!(version_of("42.manifest"), Some(42));
        assert_eq!(
            version_of(&format!("{:020}.manifest", u64::MAX - 7)),
            Some(7)
        );
        assert_eq!(version_of("d5.manifest"), None);
        assert_eq!(version_of(".tmp-1.manifest"), None);
        assert_eq!(version_of("3.txn"), None);
        assert_eq!(version_of(".manifest"), None);
    }
}
