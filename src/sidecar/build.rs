//! Building an index over a cohort: one streaming pass that hashes the
//! file, cuts it into records with their byte ranges, and collects each
//! record's key.
//!
//! Row ids are record ordinals (every non-blank segment between separators,
//! failed ones included), so a row's locator is its place in the file.
//! Records that are not JSON objects, lack a key field or hold `null` there
//! are not indexed (counted as `unkeyed`); a key field holding an array,
//! an object, a fraction or a number beyond `i64`, or changing type between
//! records, refuses the build.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::format::{IndexContent, KeyType, KeyValue, Locator, encode_index, encode_key};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordFormat;
use crate::warehouse::{Dir, Replace};

/// What `index build` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildReport {
    pub index: PathBuf,
    pub key: Vec<String>,
    pub types: Vec<KeyType>,
    /// Records in the cohort (row ids `0..rows`).
    pub rows: u64,
    /// Distinct keys indexed.
    pub keys: u64,
    /// Records with the full key, indexed.
    pub indexed: u64,
    /// Records not indexed: not an object, or a key field missing or null.
    pub unkeyed: u64,
    /// Records that are not valid JSON (not indexed either).
    pub failed: u64,
    pub cohort_bytes: u64,
}

/// A short hex digest of an ordered key spec: the index file's tag.
pub fn key_hash(key: &[String]) -> String {
    let digest = Sha256::digest(key.join("\0").as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `FILE.<keyhash>.idx`.
pub fn index_path(cohort: &Path, key: &[String]) -> PathBuf {
    let mut name = cohort.as_os_str().to_os_string();
    name.push(format!(".{}.idx", key_hash(key)));
    PathBuf::from(name)
}

/// Parses `a,b` into key field names (no empty or repeated names).
pub fn parse_key_spec(text: &str) -> Result<Vec<String>> {
    let names: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    if names.iter().any(String::is_empty) {
        return Err(Error::new(
            ErrorCode::LookupKeyMismatch,
            format!("key spec {text:?} has an empty field name"),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(Error::new(
                ErrorCode::LookupKeyMismatch,
                format!("key spec {text:?} names {name:?} twice"),
            ));
        }
    }
    Ok(names)
}

/// The key value of one JSON field, or why it cannot be one.
fn key_value(value: &serde_json::Value) -> std::result::Result<Option<KeyValue>, &'static str> {
    use serde_json::Value;
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(KeyValue::String(s.clone()))),
        Value::Bool(b) => Ok(Some(KeyValue::Boolean(*b))),
        Value::Number(n) => n
            .as_i64()
            .map(|n| Some(KeyValue::Integer(n)))
            .ok_or("a number that is not an integer in the i64 range"),
        Value::Array(_) => Err("an array"),
        Value::Object(_) => Err("an object"),
    }
}

struct Collector<'a> {
    key: &'a [String],
    types: Vec<Option<KeyType>>,
    entries: HashMap<Vec<u8>, Vec<u64>>,
    locators: Vec<Locator>,
    indexed: u64,
    unkeyed: u64,
    failed: u64,
    cohort: &'a Path,
}

impl Collector<'_> {
    fn record(&mut self, segment: &[u8], offset: u64) -> Result<()> {
        let lead = segment.len() - segment.trim_ascii_start().len();
        let trimmed = segment.trim_ascii();
        if trimmed.is_empty() {
            return Ok(());
        }
        let row = self.locators.len() as u64;
        let len = u32::try_from(trimmed.len()).map_err(|_| {
            Error::at(
                ErrorCode::IndexCohortUnsupported,
                self.cohort,
                format!("record {} is larger than 4 GiB", row + 1),
            )
        })?;
        self.locators.push(Locator {
            offset: offset + lead as u64,
            len,
        });
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(trimmed) else {
            self.failed += 1;
            return Ok(());
        };
        let Some(object) = value.as_object() else {
            self.unkeyed += 1;
            return Ok(());
        };
        let mut values = Vec::with_capacity(self.key.len());
        for (i, name) in self.key.iter().enumerate() {
            let field = object.get(name).unwrap_or(&serde_json::Value::Null);
            let value = key_value(field).map_err(|why| {
                Error::at(
                    ErrorCode::IndexKeyUnkeyable,
                    self.cohort,
                    format!("record {} holds {why} in key field {name:?}", row + 1),
                )
            })?;
            let Some(value) = value else {
                self.unkeyed += 1;
                return Ok(());
            };
            match self.types[i] {
                None => self.types[i] = Some(value.key_type()),
                Some(kind) if kind != value.key_type() => {
                    return Err(Error::at(
                        ErrorCode::IndexKeyUnkeyable,
                        self.cohort,
                        format!(
                            "key field {name:?} is {kind:?} in earlier records but {:?} in record {}",
                            value.key_type(),
                            row + 1
                        ),
                    ));
                }
                Some(_) => {}
            }
            values.push(value);
        }
        self.indexed += 1;
        self.entries
            .entry(encode_key(&values))
            .or_default()
            .push(row);
        Ok(())
    }
}

/// Builds the index of `cohort` over `key` and writes it atomically next to
/// the cohort. The discovery manifest is the caller's (see
/// [`super::manifest`]).
pub fn build(cohort: &Path, key: &[String]) -> Result<BuildReport> {
    if !matches!(
        cohort
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(RecordFormat::from_name),
        Some(RecordFormat::Jsonl | RecordFormat::Ndjson | RecordFormat::Jsonseq)
    ) {
        return Err(Error::at(
            ErrorCode::IndexCohortUnsupported,
            cohort,
            "only .jsonl, .ndjson and .jsonseq record files can be indexed",
        ));
    }
    let mut file = File::open(cohort).map_err(|e| Error::io(cohort, &e))?;
    let before = file.metadata().map_err(|e| Error::io(cohort, &e))?;
    let mut collector = Collector {
        key,
        types: vec![None; key.len()],
        entries: HashMap::new(),
        locators: Vec::new(),
        indexed: 0,
        unkeyed: 0,
        failed: 0,
        cohort,
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut carry: Vec<u8> = Vec::new();
    let mut carry_start = 0u64;
    let mut pos = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(cohort, &e))?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        hasher.update(chunk);
        let mut start = 0;
        for end in memchr::memchr2_iter(b'\n', 0x1e, chunk) {
            if carry.is_empty() {
                collector.record(&chunk[start..end], pos + start as u64)?;
            } else {
                carry.extend_from_slice(&chunk[start..end]);
                collector.record(&carry, carry_start)?;
                carry.clear();
            }
            start = end + 1;
        }
        if start < n {
            if carry.is_empty() {
                carry_start = pos + start as u64;
            }
            carry.extend_from_slice(&chunk[start..]);
        }
        pos += n as u64;
    }
    if !carry.is_empty() {
        collector.record(&carry, carry_start)?;
    }
    let after = std::fs::metadata(cohort).map_err(|e| Error::io(cohort, &e))?;
    let mtime_ns = before.mtime() * 1_000_000_000 + before.mtime_nsec();
    if after.len() != before.len()
        || after.mtime() * 1_000_000_000 + after.mtime_nsec() != mtime_ns
        || pos != before.len()
    {
        return Err(Error::at(
            ErrorCode::Io,
            cohort,
            "the record file changed while it was being indexed; build again",
        ));
    }
    let types: Vec<KeyType> = collector
        .types
        .iter()
        .map(|t| t.unwrap_or(KeyType::String))
        .collect();
    let mut entries: Vec<(Vec<u8>, Vec<u64>)> = collector.entries.into_iter().collect();
    entries.sort();
    let content = IndexContent {
        cohort_sha256: hasher.finalize().into(),
        key: key.iter().cloned().zip(types.iter().copied()).collect(),
        cohort_size: before.len(),
        cohort_mtime_ns: mtime_ns,
        entries,
        locators: collector.locators,
    };
    let index = index_path(cohort, key);
    // Beside the record file, never through a symlink or over a special
    // file planted under the index's name.
    let (dir, name) = Dir::open_parent_of(&index).map_err(|e| Error::io(&index, &e))?;
    let how = Replace {
        durable: true,
        mode: 0o644,
        keep_owner: true,
        sweep_temps: true,
        expect: None,
    };
    dir.replace(&name, &encode_index(&content), how)
        .map_err(|e| Error::io(&index, &e))?;
    Ok(BuildReport {
        index,
        key: key.to_vec(),
        types,
        rows: content.locators.len() as u64,
        keys: content.entries.len() as u64,
        indexed: collector.indexed,
        unkeyed: collector.unkeyed,
        failed: collector.failed,
        cohort_bytes: before.len(),
    })
}
