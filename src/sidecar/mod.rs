//! Sidecar point-lookup indexes beside record files.
//!
//! [`format`] is the index file itself (layout v3); [`build`] writes one
//! over a record file (its rows grouped by key in `keyed`), [`lookup`] answers a point lookup through it,
//! [`manifest`] keeps the discovery manifest that names a record file's
//! indexes, and [`status`] tells whether each index still describes its
//! record file. The catalog asks one question of all this,
//! [`index_states`]: the indexes of a directory, or of one record file in
//! it, with their states.
//!
//! A record file with any index is *sealed*: no writer appends to it again,
//! since that would make its indexes stale. Building an index always writes
//! the discovery manifest `FILE.indexes.json`, so [`covers`] (one `lstat`
//! of it) answers for every index built here; the shard writer's rule also
//! lists the store for an index file whose manifest is gone
//! ([`crate::shards::rotation`]).

pub mod build;
pub mod format;
mod keyed;
pub mod lookup;
pub mod manifest;
pub mod status;

pub use status::{CohortIndexes, Scope, index_states};

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorCode, Result};

/// The suffix of a record file's sidecar discovery manifest.
pub const MANIFEST_SUFFIX: &str = ".indexes.json";

/// `FILE.indexes.json` for a record file.
pub fn manifest_path(record_file: &Path) -> PathBuf {
    let mut name = record_file.as_os_str().to_os_string();
    name.push(MANIFEST_SUFFIX);
    PathBuf::from(name)
}

/// The record file a sidecar file name belongs to: `FILE` from
/// `FILE.indexes.json` or `FILE.<16 hex>.idx`.
pub fn cohort_of(name: &str) -> Option<&str> {
    if let Some(cohort) = name.strip_suffix(MANIFEST_SUFFIX) {
        return Some(cohort).filter(|c| !c.is_empty());
    }
    let (cohort, hash) = name.strip_suffix(".idx")?.rsplit_once('.')?;
    let is_hash = hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    Some(cohort).filter(|c| is_hash && !c.is_empty())
}

/// Whether `record_file`'s discovery manifest exists (one `lstat`). An
/// unreadable answer counts as covered: when in doubt, a writer seals.
pub fn covers(record_file: &Path) -> bool {
    match std::fs::symlink_metadata(manifest_path(record_file)) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// The exact shell command that builds the index of `cohort` over `key`.
pub fn rebuild_command(cohort: &Path, key: &[String]) -> String {
    command("build", cohort, key)
}

/// `pchronicle index VERB FILE --key a,b`, quoted for a POSIX shell.
pub(crate) fn command(verb: &str, cohort: &Path, key: &[String]) -> String {
    format!(
        "pchronicle index {verb} {} --key {}",
        shell_quote(&cohort.to_string_lossy()),
        shell_quote(&key.join(","))
    )
}

/// `text` as one shell word: unchanged when it holds only characters no
/// shell treats specially, else in single quotes.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./,:=@+%".contains(&b));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Builds the index of `cohort` over `key` and records it in the
/// discovery manifest: what `pchronicle index build` does.
/// A malformed manifest refuses the build before any work: replacing it
/// would drop the entries of the other indexes it names.
pub fn build_index(cohort: &Path, key: &[String]) -> Result<build::BuildReport> {
    manifest::read(cohort)?;
    let report = build::build(cohort, key)?;
    manifest::upsert(cohort, manifest::ManifestEntry::from_report(&report))?;
    Ok(report)
}

/// Removes the index over `key` and its manifest entry (also an entry
/// whose index file is already gone).
pub fn drop_index(cohort: &Path, key: &[String]) -> Result<()> {
    let path = build::index_path(cohort, key);
    let removed_file = match std::fs::remove_file(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(Error::io(&path, &e)),
    };
    if !manifest::remove(cohort, key)? && !removed_file {
        return Err(Error::at(
            ErrorCode::IndexMissing,
            cohort,
            format!("no index over {} to drop", key.join(",")),
        ));
    }
    Ok(())
}

/// The key fields and values of a lookup. Either `fields` is one list of
/// field names `a,b` and `values` holds the values in that order (a
/// single value for a key of several fields is split on commas), or
/// `values` is empty and each of `fields` is one `NAME=VALUE` pair. A value
/// is taken as given, commas and `=` included, except in that one split.
pub fn parse_lookup_key(
    fields: &[String],
    values: &[String],
) -> Result<(Vec<String>, Vec<String>)> {
    if !values.is_empty() {
        let [spec] = fields else {
            return Err(Error::new(
                ErrorCode::LookupKeyMismatch,
                "with --value, give the key fields once, in order: --key a,b",
            ));
        };
        let names = build::parse_key_spec(spec)?;
        let values = match values {
            [one] if names.len() > 1 => one.split(',').map(str::to_string).collect(),
            _ => values.to_vec(),
        };
        return Ok((names, values));
    }
    let mut names = Vec::new();
    let mut out = Vec::new();
    for pair in fields {
        let Some((field, value)) = pair.split_once('=') else {
            return Err(Error::new(
                ErrorCode::LookupKeyMismatch,
                format!(
                    "{pair:?} has no value: give each field as --key NAME=VALUE, \
                     or the fields as --key a,b with --value x --value y"
                ),
            ));
        };
        names.push(field.trim().to_string());
        out.push(value.to_string());
    }
    build::check_key_names(&names)
        .map_err(|why| Error::new(ErrorCode::LookupKeyMismatch, format!("the key {why}")))?;
    Ok((names, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_keys_parse_in_both_forms() {
        let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let both = (v(&["a", "b"]), v(&["x", "1"]));
        assert_eq!(parse_lookup_key(&v(&["a,b"]), &v(&["x,1"])).unwrap(), both);
        assert_eq!(
            parse_lookup_key(&v(&["a,b"]), &v(&["x", "1"])).unwrap(),
            both
        );
        assert_eq!(parse_lookup_key(&v(&["a=x", "b=1"]), &[]).unwrap(), both);
        // Values keep their commas and `=`.
        assert_eq!(
            parse_lookup_key(&v(&["a=x,y=z", "b=1"]), &[]).unwrap(),
            (v(&["a", "b"]), v(&["x,y=z", "1"]))
        );
        assert_eq!(
            parse_lookup_key(&v(&["a"]), &v(&["x,y"])).unwrap(),
            (v(&["a"]), v(&["x,y"]))
        );
        assert_eq!(
            parse_lookup_key(&v(&["a,b"]), &v(&["x,y", "1"])).unwrap(),
            (v(&["a", "b"]), v(&["x,y", "1"]))
        );
        for (key, values) in [
            (v(&["a,b"]), v(&[])),
            (v(&["a,a"]), v(&["1,2"])),
            (v(&["a,,b"]), v(&["1,2,3"])),
            (v(&["a=1", "a=2"]), v(&[])),
            (v(&["=1"]), v(&[])),
            (v(&["a", "b"]), v(&["1", "2"])),
        ] {
            assert_eq!(
                parse_lookup_key(&key, &values).unwrap_err().code,
                ErrorCode::LookupKeyMismatch,
                "{key:?} {values:?}"
            );
        }
    }

    #[test]
    fn rebuild_commands_survive_a_shell() {
        let key = vec!["run id".to_string(), "n".into()];
        assert_eq!(
            rebuild_command(Path::new("d/it's.jsonl"), &key),
            "pchronicle index build 'd/it'\\''s.jsonl' --key 'run id,n'"
        );
        assert_eq!(
            rebuild_command(Path::new("/w/a-1.jsonl"), &key[1..]),
            "pchronicle index build /w/a-1.jsonl --key n"
        );
    }

    #[test]
    fn sidecar_names_lead_back_to_their_record_file() {
        assert_eq!(cohort_of("a.b.jsonl.indexes.json"), Some("a.b.jsonl"));
        assert_eq!(cohort_of("a.jsonl.0123456789abcdef.idx"), Some("a.jsonl"));
        for other in [
            ".indexes.json",
            "a.jsonl",
            "a.jsonl.0123.idx",
            "a.jsonl.0123456789abcdeg.idx",
            ".0123456789abcdef.idx",
        ] {
            assert_eq!(cohort_of(other), None, "{other}");
        }
    }

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
