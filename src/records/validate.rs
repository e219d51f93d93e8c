//! Streaming validation of one record: is it valid JSON (and UTF-8), and
//! what is its top-level `timestamp` (or `ts`)?
//!
//! This is the slow, general path beside the scanner ([`super::scan`]):
//! it validates a record read from a stream, for segments too large to
//! buffer and for whole `.json` documents, with serde_json deciding
//! validity and nothing kept but the timestamp. UTF-8 is checked
//! separately, on the raw bytes as they pass, chunk by chunk.

use std::io::{self, BufReader, Read};

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::segments::{ProbedSegment, read_retrying};
use super::timestamp::{self, Micros};

/// Validates one record read from `reader` to its end with a streaming
/// parser. `None` when the stream is blank.
pub fn probe_stream<R: Read>(reader: R) -> io::Result<Option<ProbedSegment>> {
    let mut input = WhitespaceTracker::new(reader);
    let parsed = {
        let mut de = serde_json::Deserializer::from_reader(BufReader::new(&mut input));
        Probe::deserialize(&mut de).and_then(|probe| de.end().map(|()| probe))
    };
    io::copy(&mut input, &mut io::sink())?;
    if let Some(err) = input.io_error.take() {
        return Err(err);
    }
    Ok(match parsed {
        Ok(probe) if input.utf8.is_valid() => Some(ProbedSegment::Record(probe.0)),
        Err(_) if !input.saw_content => None,
        _ => Some(ProbedSegment::Failed),
    })
}

/// Remembers whether any non-whitespace byte went through, so a blank
/// `.json` file counts as zero records rather than one failed record, and
/// whether all of it was UTF-8.
pub(super) struct WhitespaceTracker<R> {
    inner: R,
    pub(super) saw_content: bool,
    pub(super) utf8: Utf8Validator,
    pub(super) io_error: Option<io::Error>,
}

impl<R> WhitespaceTracker<R> {
    pub(super) fn new(inner: R) -> Self {
        WhitespaceTracker {
            inner,
            saw_content: false,
            utf8: Utf8Validator::default(),
            io_error: None,
        }
    }
}

impl<R: Read> Read for WhitespaceTracker<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match read_retrying(&mut self.inner, out) {
            Ok(n) => {
                if !self.saw_content {
                    self.saw_content = out[..n].iter().any(|b| !b.is_ascii_whitespace());
                }
                self.utf8.feed(&out[..n]);
                Ok(n)
            }
            Err(e) => {
                let kind = e.kind();
                self.io_error = Some(e);
                Err(io::Error::from(kind))
            }
        }
    }
}

/// UTF-8 validation of a stream fed in arbitrary chunks: a character cut
/// by a chunk boundary is carried to the next chunk.
#[derive(Default)]
pub(super) struct Utf8Validator {
    pending: [u8; 4],
    pending_len: usize,
    invalid: bool,
}

impl Utf8Validator {
    fn feed(&mut self, mut input: &[u8]) {
        if self.invalid || input.is_empty() {
            return;
        }
        if self.pending_len > 0 {
            let take = (4 - self.pending_len).min(input.len());
            let mut joined = [0u8; 8];
            joined[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
            joined[self.pending_len..self.pending_len + take].copy_from_slice(&input[..take]);
            let total = self.pending_len + take;
            match std::str::from_utf8(&joined[..total]) {
                Ok(_) => input = &input[take..],
                // The carried character completed (it starts at 0, so any
                // valid prefix covers it); continue after what was valid.
                Err(e) if e.valid_up_to() > 0 => {
                    input = &input[e.valid_up_to() - self.pending_len..]
                }
                Err(e) if e.error_len().is_some() => {
                    self.invalid = true;
                    return;
                }
                Err(_) => {
                    self.pending[..total].copy_from_slice(&joined[..total]);
                    self.pending_len = total;
                    return;
                }
            }
            self.pending_len = 0;
        }
        if let Err(e) = std::str::from_utf8(input) {
            match e.error_len() {
                Some(_) => self.invalid = true,
                None => {
                    let tail = &input[e.valid_up_to()..];
                    self.pending[..tail.len()].copy_from_slice(tail);
                    self.pending_len = tail.len();
                }
            }
        }
    }

    /// Whether everything fed so far was UTF-8 and no character is cut off.
    pub(super) fn is_valid(&self) -> bool {
        !self.invalid && self.pending_len == 0
    }
}

/// A validated record and its top-level timestamp, if any. Deserializing
/// it checks the whole value is valid JSON while keeping nothing but the
/// `timestamp` (preferred) or `ts` field.
pub(super) struct Probe(pub(super) Option<Micros>);

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ProbeVisitor)
    }
}

pub(super) struct ProbeVisitor;

impl<'de> Visitor<'de> for ProbeVisitor {
    type Value = Probe;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Probe, A::Error> {
        let (mut timestamp, mut ts) = (None, None);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Timestamp => timestamp = map.next_value::<TimestampValue>()?.0,
                Key::Ts => ts = map.next_value::<TimestampValue>()?.0,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Probe(timestamp.or(ts)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Probe, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        Ok(Probe(None))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Probe, E> {
        Ok(Probe(None))
    }
    fn visit_unit<E>(self) -> Result<Probe, E> {
        Ok(Probe(None))
    }
}

/// A top-level key, matched without allocating.
enum Key {
    Timestamp,
    Ts,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "timestamp" => Key::Timestamp,
                    "ts" => Key::Ts,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A `timestamp`/`ts` value: RFC 3339 text or epoch seconds/millis.
/// Anything else is accepted as valid JSON and yields no timestamp.
struct TimestampValue(Option<Micros>);

impl<'de> Deserialize<'de> for TimestampValue {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TsVisitor;
        impl<'de> Visitor<'de> for TsVisitor {
            type Value = TimestampValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a timestamp")
            }
            fn visit_str<E>(self, v: &str) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::parse_rfc3339(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::from_epoch(v as f64)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::from_epoch(v as f64)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<TimestampValue, E> {
                Ok(TimestampValue(timestamp::from_epoch(v)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<TimestampValue, E> {
                Ok(TimestampValue(None))
            }
            fn visit_unit<E>(self) -> Result<TimestampValue, E> {
                Ok(TimestampValue(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<TimestampValue, A::Error> {
                IgnoredAny.visit_seq(seq)?;
                Ok(TimestampValue(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TimestampValue, A::Error> {
                IgnoredAny.visit_map(map)?;
                Ok(TimestampValue(None))
            }
        }
        d.deserialize_any(TsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_validator_across_chunk_boundaries() {
        let text = "añ€𝄞z".repeat(3);
        for chunk in 1..=7 {
            let mut v = Utf8Validator::default();
            for piece in text.as_bytes().chunks(chunk) {
                v.feed(piece);
            }
            assert!(v.is_valid(), "chunk {chunk}");
        }
        let mut cut = Utf8Validator::default();
        cut.feed(&"€".as_bytes()[..2]);
        assert!(!cut.is_valid());
        let mut bad = Utf8Validator::default();
        bad.feed(b"ok\xe2\x82");
        bad.feed(b"\x41");
        assert!(!bad.is_valid());
    }
}
