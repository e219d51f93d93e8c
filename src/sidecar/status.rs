//! Whether each index of a record file still describes it, decided without
//! hashing: what a directory's `.stats` reports, and what a command that
//! changed a record file reports as invalidated.
//!
//! [`index_states`] is the one question the catalog asks: the indexes of a
//! directory (every record file a sidecar file there belongs to) or of one
//! record file in it, each with its state. It finds them through the
//! discovery manifest, or the index files' names when there is none.
//!
//! The states follow the lookup's staleness outcomes. When the size is
//! equal and the mtime moved, only a hash can tell; a digest this process
//! already memoised answers, otherwise the state is `unverified` (the next
//! lookup hashes once; `pchronicle index verify` decides at once).

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::format::{IndexReader, KeyType};
use super::manifest::{self, ManifestEntry};
use super::{cohort_of, lookup, rebuild_command};
use crate::error::Result;
use crate::warehouse::{Dir, Names, Stat};

/// What an index is worth against its record file as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Size and mtime are the indexed ones (or the bytes are known equal).
    Fresh,
    /// The size differs, or the bytes are known to differ.
    Stale,
    /// Same size, moved mtime, not hashed yet.
    Unverified,
    /// The manifest names an index file that is gone.
    Missing,
    /// The index file cannot be read as an index of this key.
    Corrupt,
    /// The record file the index was built over is gone.
    Orphaned,
}

impl Freshness {
    /// The name `.stats` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::Unverified => "unverified",
            Freshness::Missing => "missing",
            Freshness::Corrupt => "corrupt",
            Freshness::Orphaned => "orphaned",
        }
    }
}

impl Serialize for Freshness {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One index of a record file and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexed {
    /// The index file, beside the record file.
    pub index: PathBuf,
    pub key: Vec<String>,
    pub types: Vec<KeyType>,
    pub rows: u64,
    pub state: Freshness,
}

/// Which record files of a directory [`index_states`] answers for.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// Every record file, present or not, that a sidecar file (an index
    /// file or a discovery manifest) among `names` belongs to; `names` is
    /// the directory's listing, sorted.
    Directory { names: &'a Names },
    /// The record file `name` alone, whether or not a sidecar file names
    /// it; `siblings` is the directory's sorted listing when the caller
    /// has it (else the directory is listed if need be).
    File {
        name: &'a str,
        siblings: Option<&'a Names>,
    },
}

/// The indexes of one record file, or why they cannot be told.
#[derive(Debug)]
pub struct CohortIndexes {
    /// The record file's name in the directory (it may be gone: its
    /// indexes are then `orphaned`).
    pub cohort: String,
    /// Each index with its state; an error when the record file's
    /// discovery manifest is malformed.
    pub indexes: Result<Vec<Indexed>>,
}

/// The index states of the directory `dir`, or of one record file in it:
/// one answer per record file, in name order.
pub fn index_states(dir: &Dir, scope: Scope<'_>) -> Vec<CohortIndexes> {
    let answer = |cohort: &str, siblings| CohortIndexes {
        cohort: cohort.to_string(),
        indexes: of_cohort(dir, cohort, siblings),
    };
    match scope {
        Scope::File { name, siblings } => vec![answer(name, siblings)],
        Scope::Directory { names } => names
            .iter()
            .filter_map(|name| cohort_of(name))
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .map(|cohort| answer(cohort, Some(names)))
            .collect(),
    }
}

/// Every index of `cohort` with its state: the manifest's entries and the
/// index files found beside the record file by name (among `siblings` when
/// the caller already listed the directory). A malformed manifest is an
/// error, as everywhere.
pub fn of_cohort(dir: &Dir, cohort: &str, siblings: Option<&Names>) -> Result<Vec<Indexed>> {
    let cohort_meta = dir.stat_at(cohort).ok().filter(|m| m.is_file());
    let manifest = manifest::read_in(dir, cohort)?;
    let entries: Vec<ManifestEntry> = manifest::union(dir, cohort, manifest, siblings)?
        .into_iter()
        .map(|listed| listed.unwrap_or_else(corrupt_entry))
        .collect();
    let cohort_path = dir.path().join(cohort);
    Ok(entries
        .into_iter()
        .map(|entry| {
            let state = freshness(
                dir,
                &cohort_path,
                cohort_meta.as_ref(),
                &entry.file,
                &entry.key,
            );
            Indexed {
                index: dir.path().join(&entry.file),
                key: entry.key,
                types: entry.types,
                rows: entry.rows,
                state,
            }
        })
        .collect())
}

/// An index file found by name that could not be read.
fn corrupt_entry(file: String) -> ManifestEntry {
    ManifestEntry {
        file,
        key: Vec::new(),
        types: Vec::new(),
        rows: 0,
        keys: 0,
        unkeyed: 0,
        failed: 0,
    }
}

fn freshness(
    dir: &Dir,
    cohort_path: &Path,
    cohort: Option<&Stat>,
    index: &str,
    key: &[String],
) -> Freshness {
    let (file, stat) = match dir.open_file(index) {
        Ok(opened) => opened,
        Err(e) if e.kind() == ErrorKind::NotFound => return Freshness::Missing,
        Err(_) => return Freshness::Corrupt,
    };
    let Ok(reader) = IndexReader::open(&file, stat.size) else {
        return Freshness::Corrupt;
    };
    let header = &reader.header;
    if header.key.iter().map(|(n, _)| n).ne(key.iter()) {
        return Freshness::Corrupt;
    }
    let Some(cohort) = cohort else {
        return Freshness::Orphaned;
    };
    if cohort.len() != header.cohort_size {
        return Freshness::Stale;
    }
    let mtime_ns = cohort.mtime_ns();
    if mtime_ns == header.cohort_mtime_ns {
        return Freshness::Fresh;
    }
    match lookup::memoised_digest(cohort_path, cohort.len(), mtime_ns) {
        Some(digest) if digest == header.cohort_sha256 => Freshness::Fresh,
        Some(_) => Freshness::Stale,
        None => Freshness::Unverified,
    }
}

/// A sidecar a change to its record file made stale, and how to rebuild it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidatedSidecar {
    /// The record file that changed.
    pub file: PathBuf,
    /// The index file that no longer describes it.
    pub index: PathBuf,
    pub key: Vec<String>,
    /// The exact command that rebuilds it.
    pub rebuild: String,
}

/// The indexes of `changed` that its new content leaves stale or
/// unverified. Nothing is rebuilt.
pub fn invalidated(changed: &Path) -> Result<Vec<InvalidatedSidecar>> {
    let (dir, name) = manifest::open_parent(changed)?;
    Ok(of_cohort(&dir, &name, None)?
        .into_iter()
        .filter(|i| matches!(i.state, Freshness::Stale | Freshness::Unverified))
        .map(|i| InvalidatedSidecar {
            file: changed.to_path_buf(),
            rebuild: rebuild_command(changed, &i.key),
            index: i.index,
            key: i.key,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_answers_for_every_record_file_its_sidecars_name() {
        let tmp = tempfile::tempdir().unwrap();
        let key = vec!["id".to_string()];
        for name in ["a.jsonl", "gone.jsonl"] {
            let path = tmp.path().join(name);
            std::fs::write(&path, "{\"id\":1}\n").unwrap();
            crate::sidecar::build_index(&path, &key).unwrap();
        }
        std::fs::remove_file(tmp.path().join("gone.jsonl")).unwrap();
        std::fs::write(tmp.path().join("c.jsonl"), "{}\n").unwrap();
        std::fs::write(tmp.path().join("c.jsonl.indexes.json"), "not json").unwrap();
        std::fs::write(tmp.path().join("plain.jsonl"), "{}\n").unwrap();
        let dir = Dir::open_root(tmp.path()).unwrap();
        let names = Names::sorted(
            std::fs::read_dir(tmp.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect(),
        );

        let answers = index_states(&dir, Scope::Directory { names: &names });
        let cohorts: Vec<&str> = answers.iter().map(|a| a.cohort.as_str()).collect();
        assert_eq!(cohorts, ["a.jsonl", "c.jsonl", "gone.jsonl"]);
        let state = |i: usize| answers[i].indexes.as_ref().unwrap()[0].state;
        assert_eq!(state(0), Freshness::Fresh);
        assert!(answers[1].indexes.is_err());
        assert_eq!(state(2), Freshness::Orphaned);

        let scope = Scope::File {
            name: "plain.jsonl",
            siblings: None,
        };
        let alone = index_states(&dir, scope);
        assert_eq!(alone.len(), 1);
        assert!(alone[0].indexes.as_ref().unwrap().is_empty());
    }
}
