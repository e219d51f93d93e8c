//! A fast validating scanner for one record: is this JSON text valid
//! (RFC 8259, UTF-8), and what is its top-level `timestamp` (or `ts`)?
//!
//! This is the counting hot path — every record of every record file goes
//! through it — so it is a byte-level state machine that allocates nothing
//! per record, keeps its nesting in a reusable stack (so depth is unbounded
//! and never recursive), and skips through string bodies eight bytes at a
//! time. Outside strings the grammar admits only ASCII, so UTF-8 needs
//! checking only where a string holds a non-ASCII byte.
//!
//! A differential test keeps it in agreement with `serde_json`.

use super::timestamp::{self, DayMemo, Micros};

/// Bytes that end the fast run through a string body: the closing quote,
/// a backslash, the control characters JSON forbids unescaped, and
/// non-ASCII bytes (whose UTF-8 is then checked).
const STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = b < 0x20 || b >= 0x80 || b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    table
};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// A mask whose lowest set bit marks the first stop byte in the eight
/// little-endian bytes of `word` (0 if none). Each term may flag extra
/// bytes only above its own first true match, so the lowest bit is exact.
#[inline]
fn stop_mask(word: u64) -> u64 {
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    quote | backslash | control | (word & HIGHS)
}

/// The length of the UTF-8 sequence a lead byte starts (0: not a lead).
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// Which timestamp field the next top-level value belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Timestamp,
    Ts,
    Id,
    /// One of the [`Landmarks`].
    Mark(Mark),
    Other,
}

impl Field {
    /// `timestamp` or `ts`: all a count reads of a record.
    pub(super) fn is_timestamp(self) -> bool {
        matches!(self, Field::Timestamp | Field::Ts)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mark {
    Role,
    Type,
    Inner,
    Usage,
    SchemaVersion,
    Content,
    /// One of the rarer fields (see [`Landmarks`]).
    Rare,
}

/// Where the values of a record's top-level `role`, `type`, `message` or
/// `payload`, `usage`, `schema_version` and `content` start in its text
/// (the last one of a repeated key), and whether it has any of the rarer
/// fields a run summary reads (`tool_calls`, `model`, `reward`, `score`,
/// `stop_reason`, `finish_reason`, `total_cost_usd`): found by the scan
/// that validates the record, so the summary need not walk the record
/// again. Kept small: the read hands one over with every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landmarks {
    /// Each mark's offset, `NONE` for none.
    at: [u32; 6],
    rare: bool,
}

impl Default for Landmarks {
    fn default() -> Self {
        Landmarks {
            at: [NONE; 6],
            rare: false,
        }
    }
}

/// No such field (no record this reads is 4 GiB long).
const NONE: u32 = u32::MAX;

impl Landmarks {
    fn get(&self, mark: usize) -> Option<u32> {
        Some(self.at[mark]).filter(|&at| at != NONE)
    }

    pub fn role(&self) -> Option<u32> {
        self.get(0)
    }

    pub fn kind(&self) -> Option<u32> {
        self.get(1)
    }

    /// `message` (chat lines) or `payload` (Codex rollout lines).
    pub fn inner(&self) -> Option<u32> {
        self.get(2)
    }

    pub fn usage(&self) -> Option<u32> {
        self.get(3)
    }

    pub fn schema_version(&self) -> Option<u32> {
        self.get(4)
    }

    pub fn content(&self) -> Option<u32> {
        self.get(5)
    }

    /// It has one of the rarer fields: a summary walks its top level.
    pub fn rare(&self) -> bool {
        self.rare
    }
}

enum State {
    Value,
    AfterValue,
    Key,
}

/// A reusable scanner; one per counting thread.
#[derive(Default)]
pub struct RecordScanner {
    /// Open containers, innermost last: `true` for an object.
    stack: Vec<bool>,
    days: DayMemo,
}

impl RecordScanner {
    /// `None` when `text` is not one valid JSON value (surrounding
    /// whitespace allowed) in UTF-8; otherwise its top-level timestamp, if
    /// any.
    pub fn scan(&mut self, text: &[u8]) -> Option<Option<Micros>> {
        self.facts(text).map(|facts| facts.timestamp())
    }

    /// Like [`scan`](Self::scan), with the top-level `id` as well.
    pub fn facts(&mut self, text: &[u8]) -> Option<RecordFacts> {
        let mut facts = RecordFacts::default();
        let days = &mut self.days;
        walk(&mut self.stack, text, |member| {
            facts.note(&member, text, days)
        })?;
        Some(facts)
    }

    /// Validates `text` as one JSON value (surrounding whitespace allowed)
    /// in UTF-8, calling `on_member` for each member of a top-level object
    /// in order (a repeated key once per occurrence). `None` when `text`
    /// is not valid; otherwise whether its value is an object.
    pub fn walk<'t>(&mut self, text: &'t [u8], on_member: impl FnMut(Member<'t>)) -> Option<bool> {
        walk(&mut self.stack, text, on_member)
    }
}

/// [`RecordScanner::walk`] with its stack of open containers.
fn walk<'t>(
    stack: &mut Vec<bool>,
    text: &'t [u8],
    mut on_member: impl FnMut(Member<'t>),
) -> Option<bool> {
    stack.clear();
    let b = text;
    let mut i = skip_ws(b, 0);
    let is_object = b.get(i) == Some(&b'{');
    // The top-level key whose value comes next, as its token.
    let mut key: Option<(std::ops::Range<usize>, bool)> = None;
    let mut state = State::Value;
    loop {
        match state {
            State::Value => {
                i = skip_ws(b, i);
                let member = key.take();
                let start = i;
                let token = match *b.get(i)? {
                    b'{' => {
                        i = skip_ws(b, i + 1);
                        if *b.get(i)? == b'}' {
                            i += 1;
                            state = State::AfterValue;
                        } else {
                            stack.push(true);
                            state = State::Key;
                        }
                        Token::Object
                    }
                    b'[' => {
                        i = skip_ws(b, i + 1);
                        if *b.get(i)? == b']' {
                            i += 1;
                            state = State::AfterValue;
                        } else {
                            stack.push(false);
                        }
                        Token::Array
                    }
                    b'"' => {
                        let (end, escaped) = scan_string(b, i)?;
                        i = end;
                        state = State::AfterValue;
                        Token::String { escaped }
                    }
                    b'-' | b'0'..=b'9' => {
                        i = scan_number(b, i)?;
                        state = State::AfterValue;
                        Token::Number
                    }
                    b't' => {
                        (i, state) = (literal(b, i, b"true")?, State::AfterValue);
                        Token::True
                    }
                    b'f' => {
                        (i, state) = (literal(b, i, b"false")?, State::AfterValue);
                        Token::False
                    }
                    b'n' => {
                        (i, state) = (literal(b, i, b"null")?, State::AfterValue);
                        Token::Null
                    }
                    _ => return None,
                };
                if let Some((key, key_escaped)) = member {
                    // A container's range is its opening byte alone.
                    let end = if matches!(token, Token::Object | Token::Array) {
                        start + 1
                    } else {
                        i
                    };
                    on_member(Member {
                        key: &b[key],
                        key_escaped,
                        token,
                        value: start..end,
                    });
                }
            }
            State::AfterValue => {
                i = skip_ws(b, i);
                let Some(&in_object) = stack.last() else {
                    return (i == b.len()).then_some(is_object);
                };
                match (*b.get(i)?, in_object) {
                    (b',', true) => state = State::Key,
                    (b',', false) => state = State::Value,
                    (b'}', true) | (b']', false) => {
                        stack.pop();
                    }
                    _ => return None,
                }
                i += 1;
            }
            State::Key => {
                i = skip_ws(b, i);
                if *b.get(i)? != b'"' {
                    return None;
                }
                let (end, escaped) = scan_string(b, i)?;
                if stack.len() == 1 {
                    key = Some((i..end, escaped));
                }
                i = skip_ws(b, end);
                if *b.get(i)? != b':' {
                    return None;
                }
                i += 1;
                state = State::Value;
            }
        }
    }
}

/// What a top-level member's value starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    String { escaped: bool },
    Number,
    True,
    False,
    Null,
    Array,
    Object,
}

/// One member of a top-level object, as [`RecordScanner::walk`] met it.
#[derive(Debug, Clone)]
pub struct Member<'t> {
    /// The key's token, quotes included.
    pub key: &'t [u8],
    pub key_escaped: bool,
    pub token: Token,
    /// The value's token in the walked text (quotes included); a
    /// container's opening byte only.
    pub value: std::ops::Range<usize>,
}

impl Member<'_> {
    /// Whether the key is `name`.
    pub fn key_is(&self, name: &str) -> bool {
        key_is(self.key, self.key_escaped, name)
    }
}

/// Whether the key token `key` (quotes included; `escaped` when it holds
/// an escape) is `name`.
pub fn key_is(key: &[u8], escaped: bool, name: &str) -> bool {
    if escaped {
        string_content(key, true).is_some_and(|k| k == name)
    } else {
        &key[1..key.len() - 1] == name.as_bytes()
    }
}

/// What a scan learned of a record's top-level fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFacts {
    from_timestamp: Option<Micros>,
    from_ts: Option<Micros>,
    /// The byte range of the `id` value: a string token (quotes included)
    /// or a number.
    id: Option<(std::ops::Range<usize>, IdToken)>,
    landmarks: Landmarks,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdToken {
    PlainString,
    EscapedString,
    Number,
}

impl RecordFacts {
    /// The top-level `timestamp`, or `ts` when `timestamp` gave none.
    pub fn timestamp(&self) -> Option<Micros> {
        self.from_timestamp.or(self.from_ts)
    }

    pub fn landmarks(&self) -> Landmarks {
        self.landmarks
    }

    /// The top-level `id` when it is a string or a number (a number as its
    /// JSON text), read from the scanned `text`.
    pub fn id<'t>(&self, text: &'t [u8]) -> Option<std::borrow::Cow<'t, str>> {
        let (range, kind) = self.id.clone()?;
        let token = text.get(range)?;
        match kind {
            IdToken::EscapedString => string_content(token, true),
            IdToken::PlainString => string_content(token, false),
            IdToken::Number => std::str::from_utf8(token).ok().map(Into::into),
        }
    }

    /// Takes in a top-level member of the record `text` if it is one
    /// of the fields a count or an import keeps.
    #[inline]
    pub(super) fn note(&mut self, member: &Member<'_>, text: &[u8], days: &mut DayMemo) {
        if let Some(field) = fact_field(member.key, member.key_escaped) {
            self.note_field(field, member, text, days);
        }
    }

    /// [`note`](Self::note) of a member whose key names `field`.
    #[inline]
    pub(super) fn note_field(
        &mut self,
        field: Field,
        member: &Member<'_>,
        text: &[u8],
        days: &mut DayMemo,
    ) {
        if let Field::Mark(mark) = field {
            // Texts longer than u32 are never records this reads.
            let at = u32::try_from(member.value.start).unwrap_or(NONE);
            let marks = &mut self.landmarks;
            match mark {
                Mark::Role => marks.at[0] = at,
                Mark::Type => marks.at[1] = at,
                // Only an object is looked into (a later one of another
                // type leaves an earlier object in place).
                Mark::Inner if member.token == Token::Object => marks.at[2] = at,
                Mark::Inner => {}
                Mark::Usage => marks.at[3] = at,
                Mark::SchemaVersion => marks.at[4] = at,
                Mark::Content => marks.at[5] = at,
                Mark::Rare => marks.rare = true,
            }
            return;
        }
        match member.token {
            Token::String { escaped } => {
                self.note_string(field, member.value.clone(), escaped, text, days)
            }
            Token::Number => self.note_number(field, member.value.clone(), text),
            _ => {}
        }
    }

    fn note_string(
        &mut self,
        field: Field,
        token: std::ops::Range<usize>,
        escaped: bool,
        b: &[u8],
        days: &mut DayMemo,
    ) {
        let mut ts = || {
            if escaped {
                string_content(&b[token.clone()], true).and_then(|t| timestamp::parse_rfc3339(&t))
            } else {
                timestamp::parse_rfc3339_remembering(&b[token.start + 1..token.end - 1], days)
            }
        };
        match field {
            Field::Timestamp => self.from_timestamp = ts(),
            Field::Ts => self.from_ts = ts(),
            Field::Id => {
                let kind = if escaped {
                    IdToken::EscapedString
                } else {
                    IdToken::PlainString
                };
                self.id = Some((token, kind));
            }
            Field::Mark(_) | Field::Other => {}
        }
    }

    fn note_number(&mut self, field: Field, token: std::ops::Range<usize>, b: &[u8]) {
        let ts = || {
            std::str::from_utf8(&b[token.clone()])
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .and_then(timestamp::from_epoch)
        };
        match field {
            Field::Timestamp => self.from_timestamp = ts(),
            Field::Ts => self.from_ts = ts(),
            Field::Id => self.id = Some((token, IdToken::Number)),
            Field::Mark(_) | Field::Other => {}
        }
    }
}

#[inline(always)]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// `b[start]` is an opening quote. Returns the index after the closing
/// quote and whether the body holds an escape.
#[inline(always)]
fn scan_string(b: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut j = start + 1;
    let mut escaped = false;
    loop {
        // Find the next stop byte: eight bytes at a time, then byte-wise
        // over a tail shorter than a word.
        j = loop {
            let Some(chunk) = b.get(j..j + 8) else {
                while j < b.len() && !STRING_STOP[b[j] as usize] {
                    j += 1;
                }
                break j;
            };
            let stop = stop_mask(u64::from_le_bytes(
                chunk.try_into().expect("an 8-byte slice"),
            ));
            if stop != 0 {
                break j + (stop.trailing_zeros() / 8) as usize;
            }
            j += 8;
        };
        match *b.get(j)? {
            b'"' => return Some((j + 1, escaped)),
            b'\\' => {
                escaped = true;
                match *b.get(j + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                    b'u' => {
                        let hex = b.get(j + 2..j + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        j += 6;
                    }
                    _ => return None,
                }
            }
            lead if lead >= 0x80 => {
                let end = j + utf8_width(lead);
                if end == j || std::str::from_utf8(b.get(j..end)?).is_err() {
                    return None;
                }
                j = end;
            }
            _ => return None, // an unescaped control character
        }
    }
}

/// The text of a scanned string token (quotes included in `token`), its
/// escapes decoded when it has any.
pub fn string_content(token: &[u8], escaped: bool) -> Option<std::borrow::Cow<'_, str>> {
    if escaped {
        serde_json::from_slice::<String>(token).ok().map(Into::into)
    } else {
        std::str::from_utf8(&token[1..token.len() - 1])
            .ok()
            .map(Into::into)
    }
}

/// The field a top-level key (its token) names, if [`RecordFacts`] keeps
/// it.
#[inline]
pub(super) fn fact_field(token: &[u8], escaped: bool) -> Option<Field> {
    Some(field_of(token, escaped)).filter(|&field| field != Field::Other)
}

/// Which field a top-level key names; plain keys are compared as bytes.
#[inline]
fn field_of(token: &[u8], escaped: bool) -> Field {
    if escaped {
        return escaped_field_of(token);
    }
    field_named(&token[1..token.len() - 1])
}

/// [`field_of`] a key written with escapes (rare: decoded first).
#[cold]
#[inline(never)]
fn escaped_field_of(token: &[u8]) -> Field {
    let decoded = string_content(token, true);
    field_named(decoded.as_deref().map(str::as_bytes).unwrap_or(b""))
}

#[inline]
fn field_named(name: &[u8]) -> Field {
    match name {
        b"timestamp" => Field::Timestamp,
        b"ts" => Field::Ts,
        b"id" => Field::Id,
        b"role" => Field::Mark(Mark::Role),
        b"type" => Field::Mark(Mark::Type),
        b"message" | b"payload" => Field::Mark(Mark::Inner),
        b"usage" => Field::Mark(Mark::Usage),
        b"schema_version" => Field::Mark(Mark::SchemaVersion),
        b"content" => Field::Mark(Mark::Content),
        b"tool_calls" | b"model" | b"reward" | b"score" | b"stop_reason" | b"finish_reason"
        | b"total_cost_usd" => Field::Mark(Mark::Rare),
        _ => Field::Other,
    }
}

/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
#[inline]
pub(super) fn scan_number(b: &[u8], start: usize) -> Option<usize> {
    let mut j = start;
    if b[j] == b'-' {
        j += 1;
    }
    match *b.get(j)? {
        b'0' => j += 1,
        b'1'..=b'9' => j = digits(b, j),
        _ => return None,
    }
    if b.get(j) == Some(&b'.') {
        let end = digits(b, j + 1);
        if end == j + 1 {
            return None;
        }
        j = end;
    }
    if let Some(b'e' | b'E') = b.get(j) {
        j += 1;
        if let Some(b'+' | b'-') = b.get(j) {
            j += 1;
        }
        let end = digits(b, j);
        if end == j {
            return None;
        }
        j = end;
    }
    Some(j)
}

#[inline]
fn digits(b: &[u8], mut j: usize) -> usize {
    while b.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    j
}

pub(super) fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(text: &str) -> bool {
        RecordScanner::default().scan(text.as_bytes()).is_some()
    }

    fn serde_valid(text: &str) -> bool {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }

    #[test]
    fn accepts_the_grammar() {
        for text in [
            "{}",
            "[]",
            " {} ",
            "0",
            "-0",
            "1.5e-3",
            "-12E+4",
            "true",
            "false",
            "null",
            "\"\"",
            "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\"",
            "[1,[2,{}],{\"a\":[]}]",
            "{\"a\" : 1 , \"b\":{\"c\":null}}",
            "\"héllo €\"",
        ] {
            assert!(valid(text), "{text:?}");
        }
    }

    #[test]
    fn rejects_what_json_forbids() {
        for text in [
            "",
            " ",
            "{",
            "}",
            "[1,]",
            "{\"a\":1,}",
            "{,}",
            "[,1]",
            "01",
            "1.",
            ".5",
            "1e",
            "+1",
            "-",
            "tru",
            "nul",
            "\"abc",
            "\"a\tb\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "{a:1}",
            "{\"a\" 1}",
            "[1 2]",
            "{} {}",
            "1 2",
            "NaN",
            "'a'",
            "{\"a\":}",
            "[}",
            "{]",
        ] {
            assert!(!valid(text), "{text:?}");
        }
    }

    #[test]
    fn checks_utf8_inside_strings_and_rejects_it_outside() {
        let scan = |bytes: &[u8]| RecordScanner::default().scan(bytes).is_some();
        assert!(scan(
            "\"ñ€𝄞 and a long tail of ascii to cross words\"".as_bytes()
        ));
        for bad in [
            &b"\"\xff\""[..],
            b"\"\xc3\"",
            b"\"\xed\xa0\x80\"",
            b"\"\xf4\x90\x80\x80\"",
            b"\"\xc0\xaf\"",
            b"[\xc3\xa9]",
            b"\"abcdefgh\xe2\x82\"",
        ] {
            assert!(!scan(bad), "{bad:?}");
            assert_eq!(
                scan(bad),
                std::str::from_utf8(bad).is_ok() && serde_valid(std::str::from_utf8(bad).unwrap())
            );
        }
    }

    #[test]
    fn stop_bytes_found_at_every_offset() {
        for stop in [b'"', b'\\', 0x01, 0x1f, 0x80, 0xff] {
            for at in 0..8 {
                let mut word = *b"abcdefgh";
                word[at] = stop;
                let found = stop_mask(u64::from_le_bytes(word)).trailing_zeros() / 8;
                assert_eq!(found as usize, at, "byte {stop:#x} at {at}");
            }
        }
        assert_eq!(stop_mask(u64::from_le_bytes(*b" ~!#[]{}")), 0);
    }

    #[test]
    fn extracts_top_level_ids() {
        let id = |text: &str| {
            let facts = RecordScanner::default().facts(text.as_bytes()).unwrap();
            facts.id(text.as_bytes()).map(|s| s.into_owned())
        };
        assert_eq!(id(r#"{"id":"r-1"}"#).as_deref(), Some("r-1"));
        assert_eq!(id(r#"{"id":"a\"b"}"#).as_deref(), Some("a\"b"));
        assert_eq!(id(r#"{"id":-12.5e3}"#).as_deref(), Some("-12.5e3"));
        assert_eq!(id(r#"{"id":true}"#), None);
        assert_eq!(id(r#"{"x":{"id":"inner"}}"#), None);
    }

    #[test]
    fn extracts_top_level_timestamps_only() {
        let ts = |text: &str| RecordScanner::default().scan(text.as_bytes()).unwrap();
        assert_eq!(ts(r#"{"ts":1}"#), Some(1_000_000));
        assert_eq!(
            ts(r#"{"timestamp":"1970-01-01T00:00:02Z","ts":1}"#),
            Some(2_000_000)
        );
        assert_eq!(ts(r#"{"ts":1,"timestamp":"garbage"}"#), Some(1_000_000));
        assert_eq!(ts(r#"{"a":{"ts":1},"b":[{"timestamp":5}]}"#), None);
        assert_eq!(ts(r#"{"t\u0073":3}"#), Some(3_000_000));
        assert_eq!(ts(r#"{"ts":{"nested":1}}"#), None);
        assert_eq!(ts(r#"[{"ts":1}]"#), None);
        assert_eq!(ts(r#"{"ts":[1],"x":2}"#), None);
    }

    #[test]
    fn agrees_with_serde_json_on_mutations() {
        let seeds = [
            r#"{"id":"r-1","ts":"2026-01-01T00:00:00Z","content":"a \"quoted\" \\ word","n":[1,-2.5e3,true,null,{"k":false}]}"#,
            r#"[{"a":{}},[],"\u00e9",0,-0.0,1E9]"#,
            r#"{"deep":[[[[{"x":[[[]]]}]]]]}"#,
        ];
        let mut next = crate::records::structural::tests::xorshift(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"{}[],:\"\\ 0123456789.-+eEtrufalsn";
        let mut checked = 0;
        for seed in seeds {
            for _ in 0..20_000 {
                let mut bytes = seed.as_bytes().to_vec();
                for _ in 0..1 + next() % 3 {
                    let pos = (next() as usize) % bytes.len();
                    match next() % 3 {
                        0 => bytes[pos] = alphabet[(next() as usize) % alphabet.len()],
                        1 => {
                            bytes.remove(pos);
                        }
                        _ => bytes.insert(pos, alphabet[(next() as usize) % alphabet.len()]),
                    }
                    if bytes.is_empty() {
                        break;
                    }
                }
                let Ok(text) = std::str::from_utf8(&bytes) else {
                    continue;
                };
                assert_eq!(valid(text), serde_valid(text), "{text:?}");
                checked += 1;
            }
        }
        assert!(checked > 50_000);
    }
}
