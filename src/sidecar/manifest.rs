//! `FILE.indexes.json`: the discovery manifest of a record file's indexes.
//!
//! An index file's name is a hash of its key, so it cannot be found
//! without knowing the key. Every `index build` therefore upserts one
//! manifest beside the record file listing each index's ordered key, types
//! and counts. Where a directory can be listed, the index files found by
//! name are added to the manifest's entries (the union: an index built by
//! another tool, or whose entry was lost, still counts). A malformed
//! manifest is an error (`PCHRONICLE_INDEX_MANIFEST_INVALID`), never a
//! silent fallback, and a build refuses to replace it; one naming an index
//! file that is gone is `PCHRONICLE_INDEX_MANIFEST_STALE`, repaired by
//! building or dropping that index.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::build::{BuildReport, index_path};
use super::format::{IndexReader, KeyType};
use super::{MANIFEST_SUFFIX, command, manifest_path, rebuild_command};
use crate::error::{Error, ErrorCode, Result};
use crate::warehouse::{self, CappedError, Dir, Names, Replace};

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

/// The directory holding the record file `cohort` (named from outside),
/// and the record file's name in it.
pub(crate) fn open_parent(cohort: &Path) -> Result<(Dir, String)> {
    Dir::open_parent_of(cohort).map_err(|e| Error::io(cohort, &e))
}

/// The manifest of `cohort`, `None` when there is none.
pub fn read(cohort: &Path) -> Result<Option<IndexManifest>> {
    let (dir, name) = open_parent(cohort)?;
    read_in(&dir, &name)
}

/// The manifest of the record file `cohort` of `dir`, `None` when there is
/// none. Every index file it names must be a plain name beside the record
/// file: a manifest naming `../x` or `/x` is invalid, never followed.
pub fn read_in(dir: &Dir, cohort: &str) -> Result<Option<IndexManifest>> {
    let name = format!("{cohort}{MANIFEST_SUFFIX}");
    let path = dir.path().join(&name);
    let bytes = match dir.read_capped(&name, warehouse::INDEX_MANIFEST_CAP) {
        Ok(Some((bytes, _))) => bytes,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(e.into_error(&path, "an index manifest", |e| match e {
                CappedError::Io(e) => Error::io(&path, &e),
                _ => Error::at(
                    ErrorCode::NotRegularFile,
                    &path,
                    "the index manifest is not a regular file",
                ),
            }));
        }
    };
    let invalid = |message: String| Error::at(ErrorCode::IndexManifestInvalid, &path, message);
    let manifest: IndexManifest = serde_json::from_slice(&bytes)
        .map_err(|e| invalid(format!("not a valid index manifest: {e}")))?;
    if manifest.schema != SCHEMA {
        return Err(invalid(format!(
            "schema {} (this build reads {SCHEMA})",
            manifest.schema
        )));
    }
    if let Some(entry) = manifest
        .indexes
        .iter()
        .find(|e| !warehouse::is_plain_name(e.file.as_bytes()))
    {
        return Err(invalid(format!(
            "index file {:?} is not a name beside the record file",
            entry.file
        )));
    }
    Ok(Some(manifest))
}

fn write(cohort: &Path, manifest: &IndexManifest) -> Result<()> {
    let path = manifest_path(cohort);
    let (dir, name) = open_parent(cohort)?;
    let name = format!("{name}{MANIFEST_SUFFIX}");
    if manifest.indexes.is_empty() {
        return dir
            .remove_file(&name)
            .map(drop)
            .map_err(|e| Error::io(&path, &e));
    }
    let mut bytes = serde_json::to_vec_pretty(manifest).expect("a manifest always serialises");
    bytes.push(b'\n');
    let how = Replace::published();
    dir.replace(&name, &bytes, how)
        .map_err(|e| Error::io(&path, &e))
}

/// Adds or replaces the entry with the same key. A malformed manifest is
/// refused, never replaced: it may name indexes this entry would drop.
pub fn upsert(cohort: &Path, entry: ManifestEntry) -> Result<()> {
    let mut manifest = read(cohort)?.unwrap_or(IndexManifest {
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

/// Every index of `cohort`: the manifest's entries (each named file must
/// exist) and the index files found beside it by name, sorted by key.
pub fn list(cohort: &Path) -> Result<Vec<ManifestEntry>> {
    let (dir, name) = open_parent(cohort)?;
    let manifest = read_in(&dir, &name)?;
    if let Some(manifest) = &manifest {
        for entry in &manifest.indexes {
            if !dir.stat_at(&entry.file).is_ok_and(|s| s.is_file()) {
                return Err(Error::at(
                    ErrorCode::IndexManifestStale,
                    manifest_path(cohort),
                    format!(
                        "the manifest names {} which is gone; run `{}` or `{}`",
                        entry.file,
                        rebuild_command(cohort, &entry.key),
                        command("drop", cohort, &entry.key)
                    ),
                ));
            }
        }
    }
    union(&dir, &name, manifest, None)?
        .into_iter()
        .map(|found| {
            found.map_err(|name| {
                Error::at(
                    ErrorCode::IndexCorrupt,
                    sibling(cohort, &name),
                    "not a readable index of this file",
                )
            })
        })
        .collect()
}

/// The manifest's entries and the index files found beside `cohort` by
/// name that it does not name (their headers read, the named ones' not),
/// sorted by key (the unreadable ones, by file name, last). `siblings`, the
/// directory's names sorted, spares listing it when the caller has them.
pub fn union(
    dir: &Dir,
    cohort: &str,
    manifest: Option<IndexManifest>,
    siblings: Option<&Names>,
) -> Result<Vec<std::result::Result<ManifestEntry, String>>> {
    let named: Vec<ManifestEntry> = manifest.map(|m| m.indexes).unwrap_or_default();
    let skip: Vec<&str> = named.iter().map(|e| e.file.as_str()).collect();
    let found = listed(dir, cohort, siblings, &skip)?;
    let mut out: Vec<_> = named.into_iter().map(Ok).chain(found).collect();
    sort_entries(&mut out);
    Ok(out)
}

fn sort_entries(entries: &mut [std::result::Result<ManifestEntry, String>]) {
    entries.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.key.cmp(&b.key),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(a), Err(b)) => a.cmp(b),
    });
}

/// The index files beside `cohort` found by name (`FILE.<16 hex>.idx`
/// whose header names the key that hashes to it), but those in `skip`,
/// sorted by key; the name of each one that cannot be read as such.
/// `siblings`, the directory's names sorted, spares listing it when the
/// caller has them.
pub fn listed(
    dir: &Dir,
    cohort: &str,
    siblings: Option<&Names>,
    skip: &[&str],
) -> Result<Vec<std::result::Result<ManifestEntry, String>>> {
    let prefix = format!("{cohort}.");
    let listing;
    let names = match siblings {
        Some(names) => names,
        None => {
            listing = list_dir(dir)?;
            &listing
        }
    };
    let mut out = Vec::new();
    for name in names.starting_with(&prefix) {
        let Some(hash) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".idx"))
        else {
            continue;
        };
        if hash.len() != 16 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) || skip.contains(&name)
        {
            continue;
        }
        let cohort_path = dir.path().join(cohort);
        match read_entry(dir, name) {
            Some(entry) if index_path(&cohort_path, &entry.key) == dir.path().join(name) => {
                out.push(Ok(entry))
            }
            _ => out.push(Err(name.to_string())),
        }
    }
    sort_entries(&mut out);
    Ok(out)
}

/// An index file's header as a manifest entry (counts the header does not
/// hold are 0).
fn read_entry(dir: &Dir, name: &str) -> Option<ManifestEntry> {
    let (file, stat) = dir.open_file(name).ok()?;
    let reader = IndexReader::open(&file, stat.size).ok()?;
    Some(ManifestEntry {
        file: name.to_string(),
        key: reader.header.key.iter().map(|(n, _)| n.clone()).collect(),
        types: reader.header.key.iter().map(|(_, t)| *t).collect(),
        rows: reader.header.row_count,
        keys: 0,
        unkeyed: 0,
        failed: 0,
    })
}

fn list_dir(dir: &Dir) -> Result<Names> {
    let entries = dir.entries().map_err(|e| Error::io(dir.path(), &e))?;
    let names: Vec<String> = entries
        .into_iter()
        .map(|entry| String::from_utf8_lossy(&entry.name).into_owned())
        .collect();
    Ok(Names::sorted(names))
}

fn sibling(cohort: &Path, name: &str) -> PathBuf {
    cohort.with_file_name(name)
}
