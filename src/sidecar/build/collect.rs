//! What an index build collects from a range of the cohort: each
//! record's locator, whether it is valid, and its key.
//!
//! A run of whole records is walked by counting's vector walk where the
//! CPU has it ([`Structural::walk_run`]), which hands over each record's
//! end and the key's fields among its top-level members ([`Visit`]). The
//! byte scanner ([`RecordScanner::walk`]) checks the rest: a record longer
//! than the walk's window, one too large to buffer, the last record of a
//! file that does not end with a separator, and every record where the
//! CPU has no vector walk. Both end in the same [`Collector::index`].

use std::io;
use std::ops::Range;
use std::path::Path;

use super::super::format::{KeyType, Locator, push_boolean, push_integer, push_string};
use super::super::keyed::KeyedRows;
use crate::error::{Error, ErrorCode, Result};
use crate::records::scan::{self, RecordScanner, Token};
use crate::records::structural::{self, Structural, Visit};
use crate::records::{OversizeSegment, SegmentVisitor, split_run};

/// One key field's value as read from a record, borrowed from it where it
/// can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeyPart<'t> {
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
    pub(super) fn into_owned(self) -> super::super::format::KeyValue {
        use super::super::format::KeyValue;
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

/// Finds a record's key fields: in one walk of the counting scanner, or
/// as the vector walk hands them over ([`Visit`]).
pub(super) struct KeyFinder {
    scanner: RecordScanner,
    /// Per key field, the token of its (last) occurrence in the record
    /// walked last, its range in the text it was found in.
    found: Vec<Option<(Token, std::ops::Range<usize>)>>,
}

impl KeyFinder {
    pub(super) fn new(fields: usize) -> Self {
        KeyFinder {
            scanner: RecordScanner::default(),
            found: vec![None; fields],
        }
    }

    /// Validates `text` and finds each of `key`'s fields among its
    /// top-level members: `None` when it is not valid JSON, `Some(false)`
    /// when it is not an object.
    pub(super) fn find(&mut self, key: &[impl AsRef<str>], text: &[u8]) -> Option<bool> {
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
    pub(super) fn value<'t>(
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

pub(super) struct Collector<'a> {
    key: &'a [String],
    /// The vector walk, where this CPU has it (else each record goes
    /// through `finder`'s scanner); taken out while it walks a run.
    pub(super) structural: Option<Box<Structural>>,
    finder: KeyFinder,
    /// The canonical bytes of the record's key, reused between records.
    key_bytes: Vec<u8>,
    pub(super) types: Vec<Option<KeyType>>,
    pub(super) keyed: KeyedRows,
    pub(super) locators: Vec<Locator>,
    pub(super) indexed: u64,
    pub(super) unkeyed: u64,
    pub(super) failed: u64,
    cohort: &'a Path,
    /// Where the next segment (or run of them) starts in the cohort.
    next_offset: u64,
    /// Why the build stopped, when a record refused it.
    pub(super) refusal: Option<Error>,
}

impl SegmentVisitor for Collector<'_> {
    fn buffered(&mut self, segment: &[u8]) -> io::Result<()> {
        // Segments are contiguous, one separator byte apart, so adding up
        // their lengths places each one.
        let offset = self.next_offset;
        self.next_offset += segment.len() as u64 + 1;
        let done = self.segment(segment, offset);
        self.refused(done)
    }

    fn oversize(&mut self, segment: &mut OversizeSegment<'_>) -> io::Result<()> {
        // A locator and a key need the whole record, however large.
        let mut whole = Vec::new();
        segment.read_whole(&mut whole)?;
        self.buffered(&whole)
    }

    fn run(&mut self, run: &[u8]) -> io::Result<()> {
        let Some(mut structural) = self.structural.take() else {
            return split_run(self, run);
        };
        structural.walk_run(run, self);
        self.structural = Some(structural);
        self.next_offset += run.len() as u64;
        match self.refusal {
            Some(_) => Err(refused()),
            None => Ok(()),
        }
    }
}

/// The error a refusal stops the segment splitter with (the refusal
/// itself is kept in the collector).
fn refused() -> io::Error {
    io::Error::other("the index build was refused")
}

/// What the vector walk hands over: the key's fields among each record's
/// top-level members, and each record's end.
impl Visit for Collector<'_> {
    type Field = usize;

    #[inline(always)]
    fn field(&self, b: &[u8], key: Range<usize>, any_backslash: bool) -> Option<usize> {
        let token = &b[key];
        let escaped = structural::escaped(token, any_backslash);
        self.key
            .iter()
            .position(|k| scan::key_is(token, escaped, k))
    }

    #[inline(always)]
    fn member(
        &mut self,
        _: &[u8],
        _: bool,
        field: usize,
        _: Range<usize>,
        token: Token,
        value: Range<usize>,
    ) {
        self.finder.found[field] = Some((token, value));
    }

    fn record(&mut self, b: &[u8], segment: Range<usize>, at: usize, valid: bool) {
        if self.refusal.is_none() {
            let offset = self.next_offset + (at + segment.start) as u64;
            let done = match self.locate(&b[segment], offset) {
                Ok(Some(row)) => self.index(row, b, valid.then_some(true)),
                Ok(None) => Ok(()),
                Err(refusal) => Err(refusal),
            };
            if let Err(refusal) = done {
                self.refusal = Some(refusal);
            }
        }
        self.finder.found.fill(None);
    }

    fn long(&mut self, segment: &[u8], at: usize) {
        if self.refusal.is_none() {
            let offset = self.next_offset + at as u64;
            if let Err(refusal) = self.segment(segment, offset) {
                self.refusal = Some(refusal);
            }
        }
    }
}

impl<'a> Collector<'a> {
    /// A collector for the records of `cohort` from byte `start` on.
    pub(super) fn new(key: &'a [String], cohort: &'a Path, start: u64) -> Self {
        Collector {
            key,
            structural: structural::available().then(Box::default),
            finder: KeyFinder::new(key.len()),
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
    pub(super) fn absorb(&mut self, later: Collector<'a>) -> bool {
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

    /// Keeps a refusal for the caller, stopping the segment splitter.
    fn refused(&mut self, done: Result<()>) -> io::Result<()> {
        done.map_err(|refusal| {
            self.refusal = Some(refusal);
            refused()
        })
    }

    /// Locates and indexes one segment at `offset`, checked by the byte
    /// scanner.
    fn segment(&mut self, segment: &[u8], offset: u64) -> Result<()> {
        let Some(row) = self.locate(segment, offset)? else {
            return Ok(());
        };
        let trimmed = segment.trim_ascii();
        let outcome = self.finder.find(self.key, trimmed);
        let done = self.index(row, trimmed, outcome);
        // The vector walk's next record starts from no field found.
        self.finder.found.fill(None);
        done
    }

    /// Gives the segment at `offset` its row and locator: `None` when it
    /// is blank (no record).
    fn locate(&mut self, segment: &[u8], offset: u64) -> Result<Option<u64>> {
        let lead = segment.len() - segment.trim_ascii_start().len();
        let trimmed = segment.trim_ascii();
        if trimmed.is_empty() {
            return Ok(None);
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
        Ok(Some(row))
    }

    /// Indexes record `row` under the key fields `finder` found in `text`,
    /// given whether the record is valid (`None`) and an object
    /// (`Some(false)` when not).
    fn index(&mut self, row: u64, text: &[u8], outcome: Option<bool>) -> Result<()> {
        match outcome {
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
        let key = self.key;
        self.key_bytes.clear();
        for (i, name) in key.iter().enumerate() {
            let value = self.finder.value(i, text).map_err(|why| {
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
