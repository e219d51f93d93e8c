//! Whole-document record files (`.json`): one JSON value, or one record
//! per element of a top-level array.
//!
//! A document is parsed as it streams through a fixed read buffer, never
//! held: serde_json walks it through the validating [`Probe`], which keeps
//! nothing of a record but its timestamp. A document that stops being valid JSON keeps the records read
//! before the fault and counts one failed record for the rest, as a torn
//! line does in a line file.

use std::io::{self, BufReader, Read};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::count::RecordStats;
use super::segments::READ_CHUNK;
use super::validate::{Probe, ProbeVisitor, WhitespaceTracker};

/// Splits a JSON array document (starting with `[`) into the text of its
/// elements, with serde_json deciding where each element ends (so the
/// elements are the ones [`count_json_document`] counts). When the document
/// stops being valid JSON, the elements read so far are returned with the
/// rest of the text after them.
pub fn split_json_array(document: &[u8]) -> (Vec<&[u8]>, Option<&[u8]>) {
    let skip_ws = |mut i: usize| {
        while document.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let mut elements = Vec::new();
    let mut i = skip_ws(1);
    if document.get(i) == Some(&b']') {
        let after = skip_ws(i + 1);
        return (
            elements,
            (after < document.len()).then(|| &document[after..]),
        );
    }
    loop {
        let mut values =
            serde_json::Deserializer::from_slice(&document[i..]).into_iter::<IgnoredAny>();
        if !matches!(values.next(), Some(Ok(_))) {
            break;
        }
        let end = i + values.byte_offset();
        elements.push(&document[i..end]);
        i = skip_ws(end);
        match document.get(i) {
            Some(b',') => i = skip_ws(i + 1),
            Some(b']') => {
                let after = skip_ws(i + 1);
                if after == document.len() {
                    return (elements, None);
                }
                i = after;
                break;
            }
            _ => break,
        }
    }
    (elements, Some(&document[i.min(document.len())..]))
}

/// Counts a `.json` file: one value, or one record per element of a
/// top-level array. A document that stops being valid JSON keeps the
/// elements read before the error and counts one failed record for the rest.
pub fn count_json_document<R: Read>(reader: R) -> io::Result<RecordStats> {
    let mut stats = RecordStats::default();
    let mut input = WhitespaceTracker::new(reader);
    let parsed = {
        let mut de =
            serde_json::Deserializer::from_reader(BufReader::with_capacity(READ_CHUNK, &mut input));
        DocumentSeed(&mut stats)
            .deserialize(&mut de)
            .and_then(|()| de.end())
    };
    if let Some(err) = input.io_error.take() {
        return Err(err);
    }
    if (parsed.is_err() || !input.utf8.is_valid()) && input.saw_content {
        stats.add_failed();
    }
    Ok(stats)
}

struct DocumentSeed<'a>(&'a mut RecordStats);

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(probe) = seq.next_element::<Probe>()? {
            self.0.add_record(probe.0);
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let probe = ProbeVisitor.visit_map(map)?;
        self.0.add_record(probe.0);
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.add_record(None);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_documents() {
        let doc = |b: &[u8]| count_json_document(b).unwrap();
        assert_eq!(doc(b"[{\"a\":1},{\"a\":2},3]").record_count, 3);
        assert_eq!(doc(b"{\"ts\":1}").record_count, 1);
        assert_eq!(doc(b"  \n").record_count, 0);
        assert_eq!(doc(b"[]").record_count, 0);
        let torn = doc(b"[{\"a\":1},{\"a\":");
        assert_eq!((torn.record_count, torn.failed_count), (2, 1));
        let trailing = doc(b"{} {}");
        assert_eq!((trailing.record_count, trailing.failed_count), (2, 1));
    }

    #[test]
    fn json_arrays_split_where_they_count() {
        let split = |text: &str| {
            let (elements, rest) = split_json_array(text.as_bytes());
            let elements: Vec<String> = elements
                .iter()
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .collect();
            (
                elements,
                rest.map(|r| String::from_utf8_lossy(r).into_owned()),
            )
        };
        assert_eq!(split("[]"), (vec![], None));
        assert_eq!(
            split("[ {\"a\":[1,2]} , \"x,]\" ,3 ]\n"),
            (
                vec!["{\"a\":[1,2]}".into(), "\"x,]\"".into(), "3".into()],
                None
            )
        );
        assert_eq!(
            split("[{\"a\":1},{\"a\":"),
            (vec!["{\"a\":1}".into()], Some("{\"a\":".into()))
        );
        assert_eq!(
            split("[1,2] x"),
            (vec!["1".into(), "2".into()], Some("x".into()))
        );
        for text in ["[]", "[1,[2]]", "[{\"a\":1},{\"a\":", "[1,2] x", "[1 2]"] {
            let (elements, rest) = split_json_array(text.as_bytes());
            let counted = count_json_document(text.as_bytes()).unwrap();
            assert_eq!(
                elements.len() as u64 + u64::from(rest.is_some()),
                counted.record_count,
                "{text}"
            );
        }
    }
}
