//! Building an index over a cohort: a streaming pass that hashes the
//! file, cuts it into records with their byte ranges, and collects each
//! record's key. The cutting is the records module's own segment splitter
//! ([`crate::records::for_each_segment`]), so an index's rows are exactly
//! the records counting sees. A cohort large enough to count on several
//! threads is built the same way: byte ranges cut at separators are
//! collected on their own threads while one more hashes the whole file,
//! and the ranges are merged in file order ([`collect_parallel`]).
//!
//! Row ids are record ordinals (every non-blank segment between separators,
//! failed ones included), so a row's locator is its place in the file.
//! Each record is validated and its top-level key fields found without
//! building a JSON value ([`collect`]): by counting's vector walk where
//! the CPU has it, else by the byte scanner; what a key field holds is
//! read as `serde_json` would (a repeated key: its last occurrence), and
//! differential tests hold both paths to `serde_json` and to each other.
//!
//! Records that are not JSON objects, lack a key field or hold `null` there
//! are not indexed (counted as `unkeyed`); a key field holding an array,
//! an object, a fraction or a number beyond `i64`, or changing type between
//! records, refuses the build.

mod collect;

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::format::{IndexContent, KeyType, encode_index};
use crate::error::{Error, ErrorCode, Result};
use crate::records::{RangeReader, RecordFormat, for_each_segment_sized};
use crate::warehouse::Blob;
use crate::warehouse::{self, Dir, Replace};
use collect::Collector;

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
    warehouse::hex(&digest[..8])
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
    check_key_names(&names).map_err(|why| {
        Error::new(
            ErrorCode::LookupKeyMismatch,
            format!("key spec {text:?} {why}"),
        )
    })?;
    Ok(names)
}

/// Why key field names cannot make a key (an empty or repeated name).
pub fn check_key_names(names: &[String]) -> std::result::Result<(), String> {
    if names.iter().any(String::is_empty) {
        return Err("has an empty field name".into());
    }
    match names
        .iter()
        .enumerate()
        .find(|(i, n)| names[..*i].contains(n))
    {
        Some((_, name)) => Err(format!("names {name:?} twice")),
        None => Ok(()),
    }
}

/// A reader that hashes and measures what passes through it: the index
/// records the digest and size of exactly the bytes it cut into records.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    len: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.hasher.update(&out[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// Reads the whole cohort on this thread: its records, its digest and its
/// length. A record that refuses the build is the error.
fn collect_serial<'a>(
    file: impl Read,
    size: u64,
    key: &'a [String],
    cohort: &'a Path,
) -> Result<(Collector<'a>, [u8; 32], u64)> {
    let mut collector = Collector::new(key, cohort, 0);
    let mut input = Hashing {
        inner: file,
        hasher: Sha256::new(),
        len: 0,
    };
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if let Err(e) = for_each_segment_sized(&mut input, size, &mut collector) {
        return Err(collector
            .refusal
            .take()
            .unwrap_or_else(|| Error::io(cohort, &e)));
    }
    Ok((collector, input.hasher.finalize().into(), input.len))
}

/// Reads a large cohort on several threads: one hashes it from start to
/// end while the others collect the records of byte ranges cut at
/// separators, merged in file order. `None` when a record refused the
/// build or a key field's type differs between ranges: the serial pass
/// then finds the first such record and says which.
fn collect_parallel<'a>(
    file: &Blob,
    size: u64,
    threads: usize,
    key: &'a [String],
    cohort: &'a Path,
) -> io::Result<Option<(Collector<'a>, [u8; 32], u64)>> {
    let cuts = crate::records::cut_points(file, size, threads)?;
    std::thread::scope(|scope| {
        let hashing = scope.spawn(|| {
            let mut input = Hashing {
                inner: RangeReader {
                    file,
                    pos: 0,
                    end: size,
                },
                hasher: Sha256::new(),
                len: 0,
            };
            // A MiB per read: the hash keeps pace with the collecting
            // threads at one syscall per MiB, not per 8 KiB.
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, io::Error>((input.hasher.finalize().into(), input.len))
        });
        let ranges: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let (start, end) = (w[0], w[1]);
                scope.spawn(move || {
                    let mut collector = Collector::new(key, cohort, start);
                    let range = RangeReader {
                        file,
                        pos: start,
                        end,
                    };
                    let len = usize::try_from(end - start).unwrap_or(usize::MAX);
                    let done = for_each_segment_sized(range, len, &mut collector);
                    (collector, done)
                })
            })
            .collect();
        let panicked = || io::Error::other("an index-building thread panicked");
        let mut merged: Option<Collector<'a>> = None;
        let mut serial = false;
        for range in ranges {
            let (collector, done) = range.join().map_err(|_| panicked())?;
            if let Err(e) = done {
                if collector.refusal.is_none() {
                    return Err(e);
                }
                serial = true;
            }
            match &mut merged {
                _ if serial => {}
                None => merged = Some(collector),
                Some(merged) => serial = !merged.absorb(collector),
            }
        }
        let (digest, len) = hashing.join().map_err(|_| panicked())??;
        Ok(merged.filter(|_| !serial).map(|m| (m, digest, len)))
    })
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
    let file = File::open(cohort).map_err(|e| Error::io(cohort, &e))?;
    let before = file.metadata().map_err(|e| Error::io(cohort, &e))?;
    let threads = crate::records::threads_for(before.len());
    let parallel = if threads > 1 {
        let blob = Blob::Local(file.try_clone().map_err(|e| Error::io(cohort, &e))?);
        collect_parallel(&blob, before.len(), threads, key, cohort)
            .map_err(|e| Error::io(cohort, &e))?
    } else {
        None
    };
    let (collector, digest, pos) = match parallel {
        Some(done) => done,
        None => collect_serial(&file, before.len(), key, cohort)?,
    };
    let after = std::fs::metadata(cohort).map_err(|e| Error::io(cohort, &e))?;
    let mtime_ns = warehouse::mtime_ns(&before);
    if after.len() != before.len() || warehouse::mtime_ns(&after) != mtime_ns || pos != before.len()
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
    let entries = collector.keyed.into_entries();
    let content = IndexContent {
        cohort_sha256: digest,
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
    let how = Replace::published();
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

#[cfg(test)]
mod tests;
