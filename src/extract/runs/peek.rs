//! The few fields of a record a run summary reads: its role, whether it is
//! an assistant turn, its token usage.
//!
//! A record read here is already known to be valid JSON, and most of its
//! bytes are text no summary needs. So it is not parsed: it is scanned,
//! key by key at the top level (and inside `message`, `payload` and
//! `usage`), every other value skipped whole (a string up to its closing
//! quote with one `memchr`, a container by counting brackets). A record
//! that is a whole ATIF trajectory is rare and small next to the rest; it
//! is parsed.

use std::borrow::Cow;

use serde::Deserialize;

use super::Tokens;
use crate::records::scan::Landmarks;
use crate::records::timestamp::{Micros, parse_rfc3339};

/// What one record adds to its run.
pub(super) struct Seen<'a> {
    pub role: Option<Cow<'a, str>>,
    pub steps: u64,
    pub tokens: Option<Tokens>,
    /// The run's tokens so far, as a Codex `token_count` event counts
    /// them (`payload.info.total_token_usage`): the largest is the run's.
    pub so_far: Option<Tokens>,
    /// The earliest and latest time inside the record (an ATIF
    /// trajectory's steps), beside its own timestamp.
    pub span: Option<(Micros, Micros)>,
}

/// What `record` adds to its run; `None` for a record that is not an
/// object.
pub(super) fn seen(record: &[u8]) -> Option<Seen<'_>> {
    let mut scan = Scan { b: record, i: 0 };
    let mut top = Fields::default();
    scan.object(&mut |key, scan| top.take(key, scan, true))?;
    if top.atif {
        return serde_json::from_slice::<Atif>(record).ok().map(Atif::seen);
    }
    Some(top.seen())
}

/// [`seen`] of a record whose top-level fields the read's scan found
/// already: only their values are read (a `message` or `payload` object
/// walked, `usage` summed), never the rest of the record.
pub(super) fn seen_at<'a>(record: &'a [u8], marks: &Landmarks) -> Option<Seen<'a>> {
    let at = |start: Option<u32>| {
        start.map(|i| Scan {
            b: record,
            i: i as usize,
        })
    };
    if let Some(mut scan) = at(marks.schema_version) {
        if scan.text().is_some_and(|v| v.starts_with("ATIF-")) {
            return serde_json::from_slice::<Atif>(record).ok().map(Atif::seen);
        }
    }
    let mut top = Fields {
        role: at(marks.role).and_then(|mut s| s.text()),
        kind: at(marks.kind).and_then(|mut s| s.text()),
        usage: at(marks.usage).and_then(|mut s| usage(&mut s)),
        ..Fields::default()
    };
    if let Some(mut scan) = at(marks.inner) {
        if scan.at(b'{') {
            let mut inner = Fields::default();
            scan.object(&mut |key, scan| inner.take(key, scan, false))?;
            top.inner = Some(Box::new(inner));
        }
    }
    Some(top.seen())
}

/// The fields found in one object.
#[derive(Default)]
struct Fields<'a> {
    role: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    usage: Option<Tokens>,
    /// `info.total_token_usage` (a Codex `token_count` event's payload).
    so_far: Option<Tokens>,
    /// `message` (chat lines) or `payload` (Codex rollout lines).
    inner: Option<Box<Fields<'a>>>,
    atif: bool,
}

impl<'a> Fields<'a> {
    /// What the top-level fields (and `message`'s or `payload`'s) add up
    /// to.
    fn seen(mut self) -> Seen<'a> {
        let inner = self.inner.take().unwrap_or_default();
        let assistant = self.kind.as_deref() == Some("assistant");
        let so_far = match inner.kind.as_deref() {
            Some("token_count") => inner.so_far,
            _ => None,
        };
        let role = self.role.or(inner.role).or(self.kind).or(inner.kind);
        let assistant = assistant || role.as_deref() == Some("assistant");
        Seen {
            role,
            steps: u64::from(assistant),
            tokens: self.usage.or(inner.usage),
            so_far,
            span: None,
        }
    }

    /// Reads or skips the value of `key` (its raw bytes: a key written with
    /// escapes is decoded first, as the read's scan decodes it).
    fn take(&mut self, key: &[u8], scan: &mut Scan<'a>, top: bool) -> Option<()> {
        let decoded;
        let key = if key.contains(&b'\\') {
            let quoted = [b"\"", key, b"\""].concat();
            decoded = serde_json::from_slice::<String>(&quoted).unwrap_or_default();
            decoded.as_bytes()
        } else {
            key
        };
        match key {
            b"role" => self.role = scan.text(),
            b"type" => self.kind = scan.text(),
            b"usage" => self.usage = usage(scan),
            b"message" | b"payload" if top && scan.at(b'{') => {
                let mut inner = Fields::default();
                scan.object(&mut |key, scan| inner.take(key, scan, false))?;
                self.inner = Some(Box::new(inner));
            }
            b"info" if !top && scan.at(b'{') => {
                scan.object(&mut |key, scan| {
                    match key {
                        b"total_token_usage" => self.so_far = usage(scan),
                        _ => scan.skip()?,
                    }
                    Some(())
                })?;
            }
            b"schema_version" if top => {
                self.atif = scan.text().is_some_and(|v| v.starts_with("ATIF-"));
            }
            _ => scan.skip()?,
        }
        Some(())
    }
}

/// Token totals of a `usage` object (input: `input_tokens` or
/// `prompt_tokens`; output: `output_tokens` or `completion_tokens`; total:
/// `total_tokens`, else their sum).
fn usage(scan: &mut Scan<'_>) -> Option<Tokens> {
    if !scan.at(b'{') {
        scan.skip()?;
        return None;
    }
    let (mut input, mut output, mut total) = (None, None, None);
    scan.object(&mut |key, scan| {
        match key {
            b"input_tokens" | b"prompt_tokens" => input = input.or(scan.number()),
            b"output_tokens" | b"completion_tokens" => output = output.or(scan.number()),
            b"total_tokens" => total = scan.number(),
            _ => scan.skip()?,
        }
        Some(())
    })?;
    let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
    Some(Tokens {
        input,
        output,
        total: total.unwrap_or(input.saturating_add(output)),
    })
}

/// A cursor over one JSON text known to be valid.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

/// Strings searched byte by byte up to this length.
const SHORT: usize = 16;

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Whether the next value starts with `c`.
    fn at(&mut self, c: u8) -> bool {
        self.ws();
        self.b.get(self.i) == Some(&c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.at(c).then(|| self.i += 1)
    }

    /// A string's raw bytes (escapes as they are), the cursor after it.
    fn raw_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        // Keys and most short values end within a few bytes: looked for
        // one by one there, before a vector search's setup pays.
        for k in start..self.b.len().min(start + SHORT) {
            match self.b[k] {
                b'"' => {
                    self.i = k + 1;
                    return Some(&self.b[start..k]);
                }
                b'\\' => break,
                _ => {}
            }
        }
        let mut j = start;
        loop {
            let k = j + memchr::memchr2(b'"', b'\\', self.b.get(j..)?)?;
            if self.b[k] == b'\\' {
                j = k + 2;
                continue;
            }
            self.i = k + 1;
            return Some(&self.b[start..k]);
        }
    }

    /// A string value as text; `None` (and skipped) for any other value.
    fn text(&mut self) -> Option<Cow<'a, str>> {
        if !self.at(b'"') {
            self.skip();
            return None;
        }
        let start = self.i;
        let raw = self.raw_string()?;
        if !raw.contains(&b'\\') {
            return std::str::from_utf8(raw).ok().map(Cow::Borrowed);
        }
        serde_json::from_slice::<String>(&self.b[start..self.i])
            .ok()
            .map(Cow::Owned)
    }

    /// A non-negative integer value; `None` (and skipped) for any other.
    fn number(&mut self) -> Option<u64> {
        self.ws();
        let start = self.i;
        self.skip()?;
        std::str::from_utf8(&self.b[start..self.i])
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Calls `each` with every key of an object; `each` consumes the value.
    fn object(&mut self, each: &mut dyn FnMut(&[u8], &mut Scan<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.raw_string()?;
            self.eat(b':')?;
            each(key, self)?;
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }

    /// Skips one value whole.
    fn skip(&mut self) -> Option<()> {
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.raw_string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0u32;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.raw_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    // A count, not a recursion: any depth is skipped.
                    self.i += 1;
                }
            }
            _ => {
                while !matches!(
                    self.b.get(self.i),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.i += 1;
                }
                Some(())
            }
        }
    }
}

/// A record that is a whole ATIF trajectory.
#[derive(Deserialize)]
struct Atif {
    #[serde(default)]
    steps: Vec<AtifStep>,
}

#[derive(Deserialize)]
struct AtifStep {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    metrics: Option<AtifMetrics>,
    /// Any JSON value: a step whose time is not an RFC 3339 text has none.
    #[serde(default)]
    timestamp: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AtifMetrics {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl Atif {
    /// Its agent steps and their token metrics.
    fn seen(self) -> Seen<'static> {
        let mut tokens: Option<Tokens> = None;
        let mut agent = 0;
        let mut span: Option<(Micros, Micros)> = None;
        for step in self.steps {
            agent += u64::from(step.source.as_deref() == Some("agent"));
            let at = step
                .timestamp
                .as_ref()
                .and_then(|t| t.as_str())
                .and_then(parse_rfc3339);
            if let Some(at) = at {
                span = Some(span.map_or((at, at), |(a, b)| (a.min(at), b.max(at))));
            }
            if let Some(m) = step.metrics {
                let (input, output) = (
                    m.prompt_tokens.unwrap_or(0),
                    m.completion_tokens.unwrap_or(0),
                );
                let sum = tokens.get_or_insert_with(Tokens::default);
                sum.input = sum.input.saturating_add(input);
                sum.output = sum.output.saturating_add(output);
                sum.total = sum.total.saturating_add(input.saturating_add(output));
            }
        }
        Seen {
            role: Some(Cow::Borrowed("trajectory")),
            steps: agent,
            tokens,
            so_far: None,
            span,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(json: &str) -> (Option<String>, u64, Option<Tokens>) {
        let s = seen(json.as_bytes()).unwrap();
        (s.role.map(Cow::into_owned), s.steps, s.tokens)
    }

    #[test]
    fn a_codex_token_count_is_the_runs_tokens_so_far_and_atif_steps_carry_times() {
        let event = r#"{"timestamp":"2026-01-01T00:00:05Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":120,"cached_input_tokens":100,"output_tokens":30,"reasoning_output_tokens":4,"total_tokens":150},"last_token_usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}},"rate_limits":null}}"#;
        let s = seen(event.as_bytes()).unwrap();
        let want = Tokens {
            input: 120,
            output: 30,
            total: 150,
        };
        assert_eq!((s.tokens, s.so_far), (None, Some(want)));
        // Only a token_count event's info counts.
        let other = r#"{"type":"event_msg","payload":{"type":"agent_message","info":{"total_token_usage":{"total_tokens":9}}}}"#;
        assert_eq!(seen(other.as_bytes()).unwrap().so_far, None);
        let atif = r#"{"schema_version":"ATIF-v1.2","steps":[{"source":"user","timestamp":"2026-01-01T00:00:10Z"},{"source":"agent","timestamp":"2026-01-01T00:00:04Z"},{"source":"agent","timestamp":7},{"source":"agent"}]}"#;
        let span = seen(atif.as_bytes()).unwrap().span.unwrap();
        let at = |t| parse_rfc3339(t).unwrap();
        assert_eq!(
            span,
            (at("2026-01-01T00:00:04Z"), at("2026-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn roles_steps_and_tokens_of_the_common_shapes() {
        // OpenAI chat
        let (role, steps, tokens) = look(
            r#"{"role":"assistant","content":"hi \"role\":\"user\" {[","usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
        );
        assert_eq!(role.as_deref(), Some("assistant"));
        assert_eq!(steps, 1);
        let want = Tokens {
            input: 10,
            output: 5,
            total: 15,
        };
        assert_eq!(tokens, Some(want));
        // Claude Code: the role under `message`, usage there too.
        let (role, steps, tokens) = look(
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":9}}}"#,
        );
        assert_eq!((role.as_deref(), steps), (Some("assistant"), 1));
        assert_eq!(tokens.unwrap().total, 9);
        // Codex, wrapped
        let (role, steps, tokens) =
            look(r#"{"type":"response_item","payload":{"type":"function_call","name":"sh"}}"#);
        assert_eq!(
            (role.as_deref(), steps, tokens),
            (Some("response_item"), 0, None)
        );
        // An escaped role, nested values of every kind skipped
        let (role, _, _) =
            look(r#" { "a" : [1, {"b": [true, null, -1.5e3]}], "role" : "us\u0065r" } "#);
        assert_eq!(role.as_deref(), Some("user"));
        // ATIF
        let (role, steps, tokens) = look(
            r#"{"schema_version":"ATIF-v1.4","steps":[{"source":"user"},{"source":"agent","metrics":{"prompt_tokens":7,"completion_tokens":2}},{"source":"agent"}]}"#,
        );
        assert_eq!((role.as_deref(), steps), (Some("trajectory"), 2));
        assert_eq!(tokens.unwrap().total, 9);
        // Not an object at all, and odd values where strings were expected
        assert!(seen(b"[1,2]").is_none());
        let (role, _, tokens) = look(r#"{"role":{"x":1},"usage":"none","type":7}"#);
        assert_eq!((role, tokens), (None, None));
    }

    type Effect = (Option<String>, u64, Option<Tokens>, Option<Tokens>);

    /// What a record adds, however it was found.
    fn effect(seen: Option<Seen<'_>>) -> Effect {
        seen.map_or((None, 0, None, None), |s| {
            (s.role.map(Cow::into_owned), s.steps, s.tokens, s.so_far)
        })
    }

    #[test]
    fn landmarks_from_the_scan_give_what_a_walk_of_the_record_gives() {
        let records = [
            r#"{"role":"assistant","content":"hi \"role\":\"user\" {[","usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":9}}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call","name":"sh"}}"#,
            r#" { "a" : [1, {"b": [true, null, -1.5e3]}], "role" : "us\u0065r" } "#,
            r#"{"schema_version":"ATIF-v1.4","steps":[{"source":"agent","metrics":{"prompt_tokens":7}}]}"#,
            r#"{"schema_version":"ATIF-v1.4","schema_version":"other","role":"user"}"#,
            r#"{"role":{"x":1},"usage":"none","type":7}"#,
            r#"{"message":{"role":"user"},"message":"text","usage":{"total_tokens":4}}"#,
            r#"{"message":"text","payload":{"role":"tool"}}"#,
            r#"{"payload":{"role":"tool"},"message":{"type":"assistant"}}"#,
            r#"{"role":"user","role":"assistant","usage":{"input_tokens":1},"usage":{"output_tokens":2}}"#,
            r#"{"message":{},"type":"user"}"#,
            r#"{"message":{"usage":{"prompt_tokens":"x","completion_tokens":2}}}"#,
            r#"{"ts":"2026-01-01T00:00:00Z","role":"tool","content":"wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"}"#,
            r#"[{"role":"user"}]"#,
            r#"{"rol\u0065":"assistant","mess\u0061ge":{"usage":{"total_tokens":3}}}"#,
            r#""a string""#,
            r#"{}"#,
            r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":5,"output_tokens":2}}}}"#,
            r#"{"payload":{"info":{"total_token_usage":{"total_tokens":3}},"type":"token_count"},"type":"event_msg"}"#,
            r#"{"info":{"total_token_usage":{"total_tokens":3}},"type":"token_count"}"#,
        ];
        let deep = format!(
            r#"{{"deep":{}1{},"role":"user"}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let mut scanner = crate::records::scan::RecordScanner::default();
        for record in records.iter().copied().chain([deep.as_str()]) {
            let bytes = record.as_bytes();
            let facts = scanner
                .facts(bytes)
                .unwrap_or_else(|| panic!("valid: {record}"));
            assert_eq!(
                effect(seen_at(bytes, &facts.landmarks())),
                effect(seen(bytes)),
                "{record}"
            );
        }
    }
}
