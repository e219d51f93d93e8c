//! `FILE.indexes.json`: the discovery manifest of a record file's indexes.
//!
//! An index file's name is a hash of its key, so it cannot be found
//! without knowing the key. Every `index build` therefore upserts one
//! manifest beside the record file listing each index's ordered key, types
//! and counts, and `index list` answers with one read of it. When it is
//! absent, the directory is listed instead. A malformed manifest is an
//! error (`PCHRONICLE_INDEX_MANIFEST_INVALID`), never a silent fallback; one
//! naming an index file that is gone is `PCHRONICLE_INDEX_MANIFEST_STALE`,
//! repaired by building or dropping that index.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::build::{BuildReport, index_path};
use super::format::{IndexReader, KeyType};
use super::manifest_path;
use crate::atomic::write_atomic;
use crate::error::{Error, ErrorCode, Result};

pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexManifest {
    pub schema: u32,
    pub indexes: Vec<ManifestEntry>,
}

/// One index as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// The index file's name, beside the record file.
    pub file: String,
    pub key: Vec<String>,
    pub types: Vec<KeyType>,
    pub rows: u64,
    pub keys: u64,
    pub unkeyed: u64,
    pub failed: u64,
}

impl ManifestEntry {
    pub fn from_report(report: &BuildReport) -> ManifestEntry {
        ManifestEntry {
            file: file_name(&report.index),
            key: report.key.clone(),
            types: report.types.clone(),
            rows: report.rows,
            keys: report.keys,
            unkeyed: report.unkeyed,
            failed: report.failed,
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The manifest of `cohort`, `None` when there is none.
pub fn read(cohort: &Path) -> Result<Option<IndexManifest>> {
    let path = manifest_path(cohort);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, &e)),
    };
    let manifest: IndexManifest = serde_json::from_slice(&bytes).map_err(|e| {
        Error::at(
            ErrorCode::IndexManifestInvalid,
            &path,
            format!("not a valid index manifest: {e}"),
        )
    })?;
    if manifest.schema != SCHEMA {
        return Err(Error::at(
            ErrorCode::IndexManifestInvalid,
            &path,
            format!("schema {} (this build reads {SCHEMA})", manifest.schema),
        ));
    }
    Ok(Some(manifest))
}

fn write(cohort: &Path, manifest: &IndexManifest) -> Result<()> {
    let path = manifest_path(cohort);
    if manifest.indexes.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&path, &e)),
            _ => Ok(()),
        };
    }
    let mut bytes = serde_json::to_vec_pretty(manifest).expect("a manifest always serialises");
    bytes.push(b'\n');
    write_atomic(&path, &bytes).map_err(|e| Error::io(&path, &e))
}

/// Adds or replaces the entry with the same key. A malformed manifest is
/// replaced by one holding this entry (building is the repair).
pub fn upsert(cohort: &Path, entry: ManifestEntry) -> Result<()> {
    let mut manifest = read(cohort).ok().flatten().unwrap_or(IndexManifest {
        schema: SCHEMA,
        indexes: Vec::new(),
    });
    manifest.indexes.retain(|e| e.key != entry.key);
    manifest.indexes.push(entry);
    manifest.indexes.sort_by(|a, b| a.key.cmp(&b.key));
    write(cohort, &manifest)
}

/// Removes the entry for `key`; true when there was one.
pub fn remove(cohort: &Path, key: &[String]) -> Result<bool> {
    let Some(mut manifest) = read(cohort)? else {
        return Ok(false);
    };
    let before = manifest.indexes.len();
    manifest.indexes.retain(|e| e.key != key);
    let removed = manifest.indexes.len() != before;
    if removed {
        write(cohort, &manifest)?;
    }
    Ok(removed)
}

/// Every index of `cohort`: from the manifest with one read when it
/// exists (each named file must exist), else from the directory listing.
pub fn list(cohort: &Path) -> Result<Vec<ManifestEntry>> {
    if let Some(manifest) = read(cohort)? {
        for entry in &manifest.indexes {
            let path = sibling(cohort, &entry.file);
            if !path.is_file() {
                return Err(Error::at(
                    ErrorCode::IndexManifestStale,
                    manifest_path(cohort),
                    format!(
                        "the manifest names {} which is gone; run `pchronicle index build {} --key {}` or `pchronicle index drop {} --key {}`",
                        entry.file,
                        cohort.display(),
                        entry.key.join(","),
                        cohort.display(),
                        entry.key.join(",")
                    ),
                ));
            }
        }
        return Ok(manifest.indexes);
    }
    let dir = cohort
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let prefix = format!("{}.", file_name(cohort));
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, &e))? {
        let entry = entry.map_err(|e| Error::io(dir, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(hash) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".idx"))
        else {
            continue;
        };
        if hash.len() != 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let path = entry.path();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, &e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, &e))?.len();
        let reader = IndexReader::open(&file, len)
            .map_err(|f| Error::at(ErrorCode::IndexCorrupt, &path, f.0))?;
        let key: Vec<String> = reader.header.key.iter().map(|(n, _)| n.clone()).collect();
        if index_path(cohort, &key) != path {
            continue;
        }
        out.push(ManifestEntry {
            file: name,
            types: reader.header.key.iter().map(|(_, t)| *t).collect(),
            key,
            rows: reader.header.row_count,
            keys: 0,
            unkeyed: 0,
            failed: 0,
        });
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

fn sibling(cohort: &Path, name: &str) -> PathBuf {
    cohort.with_file_name(name)
}
