//! One record as one output line: as stored, annotated, or (failed) as an
//! object holding its raw text.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use std::ops::ControlFlow;

use super::{Output, Position, Selected, Shape};
use crate::catalog::Source;
use crate::records::read::{Body, Record, Span};
use crate::records::timestamp;

/// Raw text kept of a failed record; the rest is cut (and said so).
const FAILED_TEXT_CAP: u64 = 16 << 20;
/// Pieces a streamed record is copied in.
const COPY_CHUNK: usize = 256 << 10;

/// Writes `record` as one line (with its `\n`).
pub(super) fn write_record(
    out: &mut dyn Write,
    shape: Shape,
    file: &str,
    attrs: Option<&BTreeMap<String, String>>,
    record: Record<'_>,
) -> io::Result<()> {
    if shape == Shape::Annotated || record.failed {
        write_head(out, file, record.line)?;
    }
    if shape == Shape::Annotated {
        let attrs = serde_json::to_string(&attrs.cloned().unwrap_or_default())?;
        let time = match record.timestamp {
            Some(ts) => format!("\"{}\"", timestamp::format_rfc3339(ts)),
            None => "null".to_string(),
        };
        write!(out, ",\"path_attrs\":{attrs},\"timestamp\":{time}")?;
    }
    if record.failed {
        if shape == Shape::Annotated {
            out.write_all(b",\"record\":null")?;
        }
        let (raw, cut) = capped_text(record.body)?;
        write!(
            out,
            ",\"failed\":true,\"raw\":{}",
            serde_json::to_string(&raw)?
        )?;
        if cut {
            out.write_all(b",\"raw_truncated\":true")?;
        }
        return out.write_all(b"}\n");
    }
    if shape == Shape::Annotated {
        out.write_all(b",\"record\":")?;
    }
    write_one_line(out, record.body)?;
    if shape == Shape::Annotated {
        out.write_all(b"}")?;
    }
    out.write_all(b"\n")
}

fn write_head(out: &mut dyn Write, file: &str, line: u64) -> io::Result<()> {
    write!(
        out,
        "{{\"_file_\":{},\"line\":{line}",
        serde_json::to_string(file)?
    )
}

/// A valid record's bytes on one line: as stored, with any line break
/// (only whitespace between tokens can hold one in valid JSON) made a
/// space.
fn write_one_line(out: &mut dyn Write, body: Body<'_>) -> io::Result<()> {
    match body {
        Body::Bytes(bytes) => write_flat(out, bytes),
        Body::Stream { reader, len } => {
            let mut buf = vec![0u8; COPY_CHUNK.min(len.max(1) as usize)];
            let mut copied = 0u64;
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) if copied == len => return Ok(()),
                    // Never a record cut short (or grown) without a word.
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "a record of {len} bytes changed while it was read ({copied} bytes)"
                            ),
                        ));
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                copied += n as u64;
                write_flat(out, &buf[..n])?;
            }
        }
    }
}

fn write_flat(out: &mut dyn Write, bytes: &[u8]) -> io::Result<()> {
    let mut rest = bytes;
    while let Some(i) = memchr::memchr2(b'\n', b'\r', rest) {
        out.write_all(&rest[..i])?;
        out.write_all(b" ")?;
        rest = &rest[i + 1..];
    }
    out.write_all(rest)
}

/// A failed record's text (invalid UTF-8 replaced), at most
/// [`FAILED_TEXT_CAP`] bytes of it; true when it was cut.
fn capped_text(body: Body<'_>) -> io::Result<(String, bool)> {
    match body {
        Body::Bytes(bytes) => {
            let cut = bytes.len() as u64 > FAILED_TEXT_CAP;
            let kept = &bytes[..bytes.len().min(FAILED_TEXT_CAP as usize)];
            Ok((String::from_utf8_lossy(kept).into_owned(), cut))
        }
        Body::Stream { reader, len } => {
            let mut kept = Vec::new();
            reader.take(FAILED_TEXT_CAP).read_to_end(&mut kept)?;
            Ok((
                String::from_utf8_lossy(&kept).into_owned(),
                len > FAILED_TEXT_CAP,
            ))
        }
    }
}

/// Records as JSON Lines.
pub(super) struct Lines<'a> {
    pub(super) shape: Shape,
    pub(super) out: &'a mut dyn Output,
}

impl Selected for Lines<'_> {
    fn selected(
        &mut self,
        source: &Source,
        file: &str,
        record: Record<'_>,
        after: Position,
    ) -> io::Result<ControlFlow<()>> {
        write_record(
            &mut *self.out,
            self.shape,
            file,
            Some(&source.path_attrs),
            record,
        )?;
        self.out.record_end(after)
    }

    /// A plain line is the record as stored: when no record of the span
    /// holds a line break (one look over them all), they go out as they
    /// are.
    fn selected_span(
        &mut self,
        source: &Source,
        file: &str,
        span: &Span<'_>,
        index: usize,
    ) -> io::Result<ControlFlow<()>> {
        if self.shape == Shape::Plain && memchr::memchr2(b'\n', b'\r', span.all_bytes()).is_none() {
            return self.out.span_lines(span, index);
        }
        super::one_by_one(self, source, file, span, index)
    }

    /// A valid record is written as stored; only an annotated line (and a
    /// failed record's, which the selection then asks heads for) tells
    /// where it came from.
    fn wants_heads(&self) -> bool {
        self.shape == Shape::Annotated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(shape: Shape, failed: bool, body: &[u8]) -> String {
        let mut out = Vec::new();
        let attrs = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let record = Record {
            file: "",
            line: 7,
            timestamp: Some(0),
            failed,
            body: Body::Bytes(body),
            landmarks: None,
        };
        write_record(&mut out, shape, "x/s.jsonl", Some(&attrs), record).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn plain_records_are_written_as_stored() {
        assert_eq!(line(Shape::Plain, false, b"{\"a\":  1}"), "{\"a\":  1}\n");
        assert_eq!(
            line(Shape::Plain, false, b"{\"a\":\r\n 1}"),
            "{\"a\":   1}\n"
        );
    }

    #[test]
    fn failed_and_annotated_records_are_objects() {
        assert_eq!(
            line(Shape::Plain, true, b"{\"a\":\xff"),
            "{\"_file_\":\"x/s.jsonl\",\"line\":7,\"failed\":true,\"raw\":\"{\\\"a\\\":\u{fffd}\"}\n"
        );
        let annotated = line(Shape::Annotated, false, b"[1]");
        assert_eq!(
            annotated,
            "{\"_file_\":\"x/s.jsonl\",\"line\":7,\"path_attrs\":{\"team\":\"a\"},\"timestamp\":\"1970-01-01T00:00:00Z\",\"record\":[1]}\n"
        );
        let value: serde_json::Value =
            serde_json::from_str(&line(Shape::Annotated, true, b"{torn")).unwrap();
        assert_eq!(value["record"], serde_json::Value::Null);
        assert_eq!(value["raw"], "{torn");
    }
}
