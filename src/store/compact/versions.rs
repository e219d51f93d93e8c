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

use std::path::Path;

use crate::error::{Error, ErrorCode, Result};
use crate::warehouse::{Dir, Stat};

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

/// The newest committed version of the dataset at `dir` (a path named
/// from outside).
pub fn latest_version(dir: &Path) -> Result<u64> {
    let opened = Dir::open_root(dir).map_err(|e| Error::io(dir, &e))?;
    latest_version_in(&opened)
}

/// The newest committed version of the dataset `dir`; `_versions` must be
/// a real directory of it, never a symlink.
pub fn latest_version_in(dir: &Dir) -> Result<u64> {
    committed_in(dir)?.last().copied().ok_or_else(|| {
        Error::at(
            ErrorCode::Lance,
            dir.path().join(VERSIONS_DIR),
            "no committed version manifest",
        )
    })
}

/// Every committed version the dataset `dir` keeps, oldest first: the
/// regular files of `_versions/` named as a version's manifest.
pub fn committed_in(dir: &Dir) -> Result<Vec<u64>> {
    let path = dir.path().join(VERSIONS_DIR);
    let entries = dir
        .open_dir(VERSIONS_DIR)
        .and_then(|versions| versions.entries())
        .map_err(|e| Error::io(&path, &e))?;
    let mut kept: Vec<u64> = entries
        .iter()
        .filter(|entry| entry.is_file)
        .filter_map(|entry| std::str::from_utf8(&entry.name).ok().and_then(version_of))
        .collect();
    kept.sort_unstable();
    kept.dedup();
    Ok(kept)
}

/// The stat of `version`'s manifest (either naming scheme), when it is a
/// regular file of `_versions/`; `None` when there is none.
pub fn manifest_meta(dir: &Dir, version: u64) -> Result<Option<Stat>> {
    let path = dir.path().join(VERSIONS_DIR);
    let versions = dir
        .open_dir(VERSIONS_DIR)
        .map_err(|e| Error::io(&path, &e))?;
    let names = [
        format!("{version}{MANIFEST_SUFFIX}"),
        format!("{:020}{MANIFEST_SUFFIX}", u64::MAX - version),
    ];
    for name in names {
        match versions.stat_at(&name) {
            Ok(meta) if meta.is_file() => return Ok(Some(meta)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path.join(&name), &e)),
        }
    }
    Ok(None)
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
