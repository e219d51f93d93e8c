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
//! Each record is validated and its top-level key fields found by the
//! counting scanner ([`RecordScanner::walk`]), without building a JSON
//! value; what a key field holds is read as `serde_json` would (a repeated
//! key: its last occurrence), which a differential test checks.
//!
//! Records that are not JSON objects, lack a key field or hold `null` there
//! are not indexed (counted as `unkeyed`); a key field holding an array,
//! an object, a fraction or a number beyond `i64`, or changing type between
//! records, refuses the build.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::format::{
    IndexContent, KeyType, Locator, encode_index, push_boolean, push_integer, push_string,
};
use super::keyed::KeyedRows;
use crate::error::{Error, ErrorCode, Result};
use crate::records::scan::{self, RecordScanner, Token};
use crate::records::{
    OversizeSegment, RangeReader, RecordFormat, SegmentVisitor, for_each_segment_sized,
};
use crate::warehouse::Blob;
use crate::warehouse::{self, Dir, Replace};

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

/// One key field's value as read from a record, borrowed from it where it
/// can be.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyPart<'t> {
    String(std::borrow::Cow<'t, str>),
    Integer(i64),
    Boolean(bool),
}

impl KeyPart<'_> {
    fn key_type(&self) -> KeyType {
        match self {
            KeyPart::String(_) => KeyType::String,
            KeyPart::Integer(_) => KeyType::Integer,
            KeyPart::Boolean(_) => KeyType::Boolean,
        }
    }

    /// Appends this field's canonical key bytes.
    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            KeyPart::String(s) => push_string(out, s),
            KeyPart::Integer(n) => push_integer(out, *n),
            KeyPart::Boolean(b) => push_boolean(out, *b),
        }
    }

    #[cfg(test)]
    fn into_owned(self) -> super::format::KeyValue {
        use super::format::KeyValue;
        match self {
            KeyPart::String(s) => KeyValue::String(s.into_owned()),
            KeyPart::Integer(n) => KeyValue::Integer(n),
            KeyPart::Boolean(b) => KeyValue::Boolean(b),
        }
    }
}

/// The key value of one top-level member's token in `text`, or why it
/// cannot be one: what `serde_json` would make of it (a string, a boolean,
/// an integer in the `i64` range; `null` is no value).
fn key_value(
    text: &[u8],
    token: Token,
    range: std::ops::Range<usize>,
) -> std::result::Result<Option<KeyPart<'_>>, &'static str> {
    const NOT_I64: &str = "a number that is not an integer in the i64 range";
    let bytes = &text[range];
    match token {
        Token::Null => Ok(None),
        Token::True => Ok(Some(KeyPart::Boolean(true))),
        Token::False => Ok(Some(KeyPart::Boolean(false))),
        Token::String { escaped } => scan::string_content(bytes, escaped)
            .map(|s| Some(KeyPart::String(s)))
            .ok_or("a string that cannot be decoded"),
        // A fraction, an exponent or `-0` is a float to serde_json.
        Token::Number
            if bytes.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) || bytes == b"-0" =>
        {
            Err(NOT_I64)
        }
        Token::Number => std::str::from_utf8(bytes)
            .ok()
            .and_then(|n| n.parse().ok())
            .map(|n| Some(KeyPart::Integer(n)))
            .ok_or(NOT_I64),
        Token::Array => Err("an array"),
        Token::Object => Err("an object"),
    }
}

/// Finds a record's key fields in one walk of the counting scanner.
#[derive(Default)]
struct KeyFinder {
    scanner: RecordScanner,
    /// Per key field, the token of its (last) occurrence in the record
    /// walked last.
    found: Vec<Option<(Token, std::ops::Range<usize>)>>,
}

impl KeyFinder {
    /// Validates `text` and finds each of `key`'s fields among its
    /// top-level members: `None` when it is not valid JSON, `Some(false)`
    /// when it is not an object.
    fn find(&mut self, key: &[impl AsRef<str>], text: &[u8]) -> Option<bool> {
        let found = &mut self.found;
        found.clear();
        found.resize(key.len(), None);
        self.scanner.walk(text, |member| {
            if let Some(i) = key.iter().position(|k| member.key_is(k.as_ref())) {
                found[i] = Some((member.token, member.value));
            }
        })
    }

    /// Key field `i` of the `text` just found, as [`key_value`] reads it
    /// (`Ok(None)`: missing or null).
    fn value<'t>(
        &self,
        i: usize,
        text: &'t [u8],
    ) -> std::result::Result<Option<KeyPart<'t>>, &'static str> {
        match self.found[i].clone() {
            Some((token, range)) => key_value(text, token, range),
            None => Ok(None),
        }
    }
}

struct Collector<'a> {
    key: &'a [String],
    finder: KeyFinder,
    /// The canonical bytes of the record's key, reused between records.
    key_bytes: Vec<u8>,
    types: Vec<Option<KeyType>>,
    keyed: KeyedRows,
    locators: Vec<Locator>,
    indexed: u64,
    unkeyed: u64,
    failed: u64,
    cohort: &'a Path,
    /// Where the next segment starts in the cohort.
    next_offset: u64,
    /// Why the build stopped, when a record refused it.
    refusal: Option<Error>,
}

impl SegmentVisitor for Collector<'_> {
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()> {
        // Segments are contiguous, one separator byte apart, so adding up
        // their lengths places each one.
        let offset = self.next_offset;
        self.next_offset += segment.len() as u64 + 1;
        self.record(segment, offset).map_err(|refusal| {
            self.refusal = Some(refusal);
            io::Error::other("the index build was refused")
        })
    }

    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()> {
        // A locator and a key need the whole record, however large.
        let mut whole = Vec::new();
        segment.read_whole(&mut whole)?;
        self.buffered(&whole)
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

impl<'a> Collector<'a> {
    /// A collector for the records of `cohort` from byte `start` on.
    fn new(key: &'a [String], cohort: &'a Path, start: u64) -> Self {
        Collector {
            key,
            finder: KeyFinder::default(),
            key_bytes: Vec::new(),
            types: vec![None; key.len()],
            keyed: KeyedRows::default(),
            locators: Vec::new(),
            indexed: 0,
            unkeyed: 0,
            failed: 0,
            cohort,
            next_offset: start,
            refusal: None,
        }
    }

    /// Appends what `later` collected over the byte range right after this
    /// one's, its row ids moved past this one's rows. False when a key
    /// field has one type here and another there (nothing is merged): the
    /// caller then builds serially, which names the record.
    fn absorb(&mut self, later: Collector<'a>) -> bool {
        let conflict = self
            .types
            .iter()
            .zip(&later.types)
            .any(|(a, b)| matches!((a, b), (Some(a), Some(b)) if a != b));
        if conflict {
            return false;
        }
        for (mine, theirs) in self.types.iter_mut().zip(&later.types) {
            if mine.is_none() {
                *mine = *theirs;
            }
        }
        let offset = self.locators.len() as u64;
        self.locators.extend(later.locators);
        self.keyed.append(later.keyed, offset);
        self.indexed += later.indexed;
        self.unkeyed += later.unkeyed;
        self.failed += later.failed;
        true
    }

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
        let key = self.key;
        match self.finder.find(key, trimmed) {
            None => {
                self.failed += 1;
                return Ok(());
            }
            Some(false) => {
                self.unkeyed += 1;
                return Ok(());
            }
            Some(true) => {}
        }
        self.key_bytes.clear();
        for (i, name) in key.iter().enumerate() {
            let value = self.finder.value(i, trimmed).map_err(|why| {
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
            value.encode_into(&mut self.key_bytes);
        }
        self.indexed += 1;
        self.keyed.push(&self.key_bytes, row);
        Ok(())
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
mod tests {
    use super::*;
    use crate::sidecar::format::KeyValue;

    /// What a record's key is by way of `serde_json::Value`: the
    /// reference the scanner-based reading must agree with.
    fn by_serde(text: &[u8], key: &[&str]) -> std::result::Result<Option<Vec<KeyValue>>, String> {
        use serde_json::Value;
        let Ok(value) = serde_json::from_slice::<Value>(text) else {
            return Err("failed".into());
        };
        let Some(object) = value.as_object() else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for name in key {
            let v = match object.get(*name).unwrap_or(&Value::Null) {
                Value::Null => return Ok(None),
                Value::String(s) => KeyValue::String(s.clone()),
                Value::Bool(b) => KeyValue::Boolean(*b),
                Value::Number(n) => match n.as_i64() {
                    Some(n) => KeyValue::Integer(n),
                    None => return Err(format!("unkeyable {name}")),
                },
                _ => return Err(format!("unkeyable {name}")),
            };
            out.push(v);
        }
        Ok(Some(out))
    }

    fn by_scanner(text: &[u8], key: &[&str]) -> std::result::Result<Option<Vec<KeyValue>>, String> {
        let mut finder = KeyFinder::default();
        match finder.find(key, text) {
            None => return Err("failed".into()),
            Some(false) => return Ok(None),
            Some(true) => {}
        }
        let mut out = Vec::new();
        for (i, name) in key.iter().enumerate() {
            match finder.value(i, text) {
                Ok(Some(v)) => out.push(v.into_owned()),
                Ok(None) => return Ok(None),
                Err(_) => return Err(format!("unkeyable {name}")),
            }
        }
        Ok(Some(out))
    }

    #[test]
    fn ranges_collected_on_threads_merge_into_the_serial_result() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        let mut text = String::new();
        for i in 0..5_000 {
            match i % 97 {
                0 => text.push_str("{\"torn\":\n"),
                1 => text.push_str("[1,2]\u{1e}"),
                2 => text.push_str("{\"k\":null}\n"),
                _ => {}
            }
            text.push_str(&format!("{{\"k\":\"s-{}\",\"n\":{}}}\n", i % 37, i % 5));
        }
        std::fs::write(&path, &text).unwrap();
        let file = Blob::Local(File::open(&path).unwrap());
        let size = text.len() as u64;
        let key = vec!["k".to_string(), "n".to_string()];
        let (serial, digest, len) = collect_serial(file.reader_at(0), size, &key, &path).unwrap();
        for threads in [2, 3, 7] {
            let (parallel, pdigest, plen) = collect_parallel(&file, size, threads, &key, &path)
                .unwrap()
                .expect("nothing refuses this build");
            assert_eq!((pdigest, plen), (digest, len));
            assert_eq!(parallel.locators, serial.locators, "{threads} threads");
            assert_eq!(
                parallel.keyed.into_entries(),
                serial.keyed.clone().into_entries()
            );
            assert_eq!(parallel.types, serial.types);
            assert_eq!(
                (parallel.indexed, parallel.unkeyed, parallel.failed),
                (serial.indexed, serial.unkeyed, serial.failed)
            );
        }
        // A key field whose type changes, and an unkeyable value: the
        // threads hand over to the serial pass, which names the record.
        for (bad, why) in [
            ("{\"k\":7,\"n\":1}\n", "Integer"),
            ("{\"k\":[1],\"n\":1}\n", "an array"),
        ] {
            let path = dir.path().join("bad.jsonl");
            std::fs::write(&path, format!("{text}{bad}")).unwrap();
            let file = Blob::Local(File::open(&path).unwrap());
            let size = file.size().unwrap();
            assert!(
                collect_parallel(&file, size, 3, &key, &path)
                    .unwrap()
                    .is_none()
            );
            let err = build(&path, &key).unwrap_err();
            assert_eq!(err.code, ErrorCode::IndexKeyUnkeyable);
            assert!(
                err.message.contains(why)
                    && err
                        .message
                        .contains(&format!("record {}", serial.locators.len() + 1)),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn key_fields_read_by_the_scanner_agree_with_serde_json() {
        let key = ["k", "n"];
        let values = [
            r#""a""#,
            r#""a,b""#,
            r#""\u00e9\"x""#,
            r#""é""#,
            "0",
            "-0",
            "-1",
            "12",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "1.0",
            "1e2",
            "1E-2",
            "true",
            "false",
            "null",
            "[]",
            "[1]",
            "{}",
            r#"{"k":1}"#,
        ];
        let mut cases: Vec<String> = Vec::new();
        for k in values {
            for n in values {
                cases.push(format!(r#"{{"k":{k},"n":{n}}}"#));
                cases.push(format!(r#"{{ "n" : {n} , "other":[{k}], "k" : {k} }}"#));
            }
            cases.push(format!(r#"{{"k":{k}}}"#));
            cases.push(format!(r#"{{"k":1,"n":2,"k":{k}}}"#));
            cases.push(format!(r#"{{"\u006b":{k},"n":3}}"#));
            cases.push(format!(r#"[{{"k":{k},"n":1}}]"#));
            cases.push(format!(r#"{{"k":{k},"n":1"#));
            cases.push(format!(r#"{{"x":{{"k":{k},"n":1}}}}"#));
        }
        cases.extend(["", "1", "\"s\"", "{}", "{\"k\":\"\u{7}\"}", "{\"k\":1,}"].map(String::from));
        for case in &cases {
            assert_eq!(
                by_scanner(case.as_bytes(), &key),
                by_serde(case.as_bytes(), &key),
                "{case}"
            );
        }
        let invalid_utf8 = b"{\"k\":\"\xff\",\"n\":1}";
        assert_eq!(by_scanner(invalid_utf8, &key), by_serde(invalid_utf8, &key));
    }

    #[test]
    fn a_record_too_large_to_buffer_is_located_like_any_other() {
        let dir = tempfile::tempdir().unwrap();
        let cohort = dir.path().join("big.jsonl");
        let big = format!("{{\"id\":2,\"pad\":\"{}\"}}", "x".repeat(17 << 20));
        let text = format!(" {{\"id\":1}}\n{big}\u{1e}{{\"id\":3}}\n{{\"id\":\n");
        std::fs::write(&cohort, &text).unwrap();
        let key = vec!["id".to_string()];
        let report = build(&cohort, &key).unwrap();
        assert_eq!((report.rows, report.indexed, report.failed), (4, 3, 1));
        let found =
            |id: &str| super::super::lookup::lookup(&cohort, &key, &[id.to_string()]).unwrap();
        assert_eq!(found("1"), vec![b"{\"id\":1}".to_vec()]);
        assert_eq!(found("2"), vec![big.into_bytes()]);
        assert_eq!(found("3"), vec![b"{\"id\":3}".to_vec()]);
    }
}
