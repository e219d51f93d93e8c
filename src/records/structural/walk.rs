//! The grammar walked offset by offset: exact on every record.
//!
//! Pass 1 lists the offsets the grammar must look at (operators outside
//! strings, unescaped quotes, the first byte of every number or literal,
//! separators, and what the grammar will refuse or take note of: raw
//! control bytes inside strings, invalid escapes, the start of each
//! non-ASCII run). Pass 2 is the byte scanner's state machine stepping
//! from one listed offset to the next: a string is its opening quote and
//! the next offset, which must be its closing quote; whitespace is never
//! visited; a number or literal is checked to end where its run of bytes
//! ends; a separator ends the record. A record that fails is counted as
//! failed and the walk resumes after its separator. A record holding
//! non-ASCII bytes has its UTF-8 checked once, whole.

use std::ops::Range;

use super::classify::Block;
use super::shape::Listed;
use super::visit::Visit;
use super::{
    DELIMITER, FORM_FEED, Structural, WINDOW, each_block, escapes, is_separator, prefix_xor,
    separators, trim,
};
use crate::records::scan::{self, Token};

/// What carries from one block to the next.
#[derive(Default)]
struct Carry {
    /// The next block's first byte is escaped.
    escaped: bool,
    /// The previous block ended inside a string.
    in_string: bool,
    /// The previous block ended with a byte of a number or literal run.
    in_scalar: bool,
    /// The previous block ended inside a run of non-ASCII bytes.
    in_non_ascii: bool,
}

impl Structural {
    /// Walks the records of `window` (whole records, at most [`WINDOW`]
    /// bytes, at `at` in its run) over its listed offsets, handing
    /// `visit` what it asks for: exact on every record, valid or not.
    pub(super) fn walk_window<V: Visit>(&mut self, text: &[u8], at: usize, visit: &mut V) {
        debug_assert!(text.len() <= WINDOW, "offsets are u32, and bounded");
        self.walk_index_compiled(text);
        let listed = Listed {
            text,
            indices: &self.indices[..self.count],
            tokens: &self.tokens[..self.count],
        };
        let mut cursor = Cursor {
            indices: listed.indices,
            next: 0,
            last: 0,
        };
        let mut start = 0;
        let any_backslash = self.any_backslash;
        while cursor.next < cursor.indices.len() {
            let begin = cursor.next;
            if let Some(taken) = self.shapes.matched(&listed, begin, any_backslash, visit) {
                cursor.next += taken;
                cursor.last = cursor.indices[cursor.next - 1] as usize;
                visit.record(text, start..cursor.last, at, true);
                start = cursor.last + 1;
                continue;
            }
            let mut walk = Walk {
                b: text,
                cursor: &mut cursor,
                visit: &mut *visit,
                any_backslash,
                non_ascii: false,
            };
            let outcome = walk.record(&mut self.stack, start);
            match outcome {
                Outcome::Blank => {}
                Outcome::Valid => {
                    visit.record(text, start..cursor.last, at, true);
                    // Only where more records may follow: a file of one
                    // record (most files of a warehouse) learns nothing.
                    if cursor.next < cursor.indices.len() {
                        self.shapes.learn(&listed.tokens[begin..cursor.next]);
                    }
                }
                Outcome::Failed => visit.record(text, start..cursor.last, at, false),
            }
            self.shapes.walked();
            start = cursor.last + 1;
        }
    }

    /// Pass 1: fills `indices[..count]` with the offsets of `text` the
    /// grammar must look at, and `tokens[..count]` with their tokens.
    ///
    /// # Safety
    ///
    /// The CPU has PCLMULQDQ, and what `classify` and `offsets` need.
    #[inline(always)]
    pub(super) unsafe fn walk_index(
        &mut self,
        text: &[u8],
        classify: impl Fn(&[u8; 64]) -> Block,
        offsets: impl Fn(&mut [u32], &mut [u8], usize, &[u8; 64], u64) -> usize,
    ) {
        // Room for one offset per byte and a block's worth of slack, kept
        // between windows so it is zeroed only when it grows.
        if self.indices.len() < text.len() + 64 {
            self.indices.resize(text.len() + 64, 0);
            self.tokens.resize(text.len() + 64, 0);
        }
        self.count = 0;
        self.any_backslash = false;
        let mut carry = Carry::default();
        each_block(
            text,
            classify,
            #[inline(always)]
            |base, block, masks| {
                // SAFETY: the CPU has PCLMULQDQ (this function's contract).
                let bits = unsafe { self.walk_block(text, base, masks, &mut carry) };
                self.count += offsets(
                    &mut self.indices[self.count..],
                    &mut self.tokens[self.count..],
                    base,
                    block,
                    bits,
                );
            },
        );
    }

    /// Resolves one block's escapes and strings; the bits of the offsets
    /// to list.
    ///
    /// # Safety
    ///
    /// The CPU has PCLMULQDQ.
    #[inline(always)]
    unsafe fn walk_block(&mut self, text: &[u8], base: usize, m: Block, carry: &mut Carry) -> u64 {
        let (escaped, bad_escapes) = if m.backslash == 0 && !carry.escaped {
            (0, 0)
        } else {
            self.any_backslash = true;
            escapes(text, base, m.backslash, &mut carry.escaped)
        };
        let quote = m.quote & !escaped;
        // SAFETY: the CPU has PCLMULQDQ (this function's contract).
        let mut in_string = unsafe { prefix_xor(quote) } ^ if carry.in_string { !0 } else { 0 };
        // `in_string` holds a string's opening quote and body, never its
        // closing quote: a control byte there is raw inside a string. So
        // is a separator, which ends the string (and its torn record).
        let mut refused = m.control & in_string;
        if refused != 0 {
            let separator = separators(text, base, m.control);
            let mut torn = separator & in_string;
            while torn != 0 {
                let after = !0u64 << torn.trailing_zeros() << 1;
                // SAFETY: as above.
                in_string = (in_string & !after) | unsafe { prefix_xor(quote & after) };
                torn = separator & in_string & after;
            }
            // A separator itself is never inside a string, so one in the
            // last byte ends a torn string before the next block.
            in_string &= !separator;
            refused = m.control & in_string;
        }
        carry.in_string = in_string >> 63 == 1;
        // A number or literal starts at a byte that is neither whitespace,
        // an operator nor a separator and does not follow another such
        // byte (a quote ends a token, so a byte after a closing quote
        // starts one too).
        let scalar = !m.delimiter;
        let continues = scalar & !quote;
        let starts = scalar & !((continues << 1) | u64::from(carry.in_scalar));
        carry.in_scalar = continues >> 63 == 1;
        let runs = m.non_ascii & !((m.non_ascii << 1) | u64::from(carry.in_non_ascii));
        carry.in_non_ascii = m.non_ascii >> 63 == 1;
        ((m.operator | starts) & !in_string) | quote | refused | bad_escapes | runs
    }
}

/// How a record ended.
enum Outcome {
    /// Only whitespace: not a record.
    Blank,
    Valid,
    Failed,
}

/// Steps through a window's offsets.
struct Cursor<'a> {
    indices: &'a [u32],
    next: usize,
    /// The offset taken last.
    last: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn take(&mut self) -> Option<usize> {
        let i = *self.indices.get(self.next)? as usize;
        self.next += 1;
        self.last = i;
        Some(i)
    }

    /// Moves to offset `at` (a byte the first pass may or may not have
    /// listed), taking it if it is listed.
    /// Only on the rare path of a form feed at a segment's edge.
    fn seek(&mut self, at: usize) {
        self.next = self.indices.partition_point(|&i| (i as usize) < at);
        if self
            .indices
            .get(self.next)
            .is_some_and(|&i| i as usize == at)
        {
            self.next += 1;
        }
        self.last = at;
    }
}

/// The grammar's walk through one window's records.
struct Walk<'w, 'c, V> {
    b: &'w [u8],
    cursor: &'c mut Cursor<'w>,
    visit: &'c mut V,
    /// Whether the window holds a backslash (else no string has escapes).
    any_backslash: bool,
    /// Whether the record walked holds a non-ASCII byte.
    non_ascii: bool,
}

impl<V: Visit> Walk<'_, '_, V> {
    /// Walks one record starting at byte `start`, leaving the cursor on
    /// its separator (or past the last offset).
    #[inline(always)]
    fn record(&mut self, stack: &mut Vec<bool>, start: usize) -> Outcome {
        let b = self.b;
        let Some(mut first) = self.cursor.take() else {
            return Outcome::Blank;
        };
        if is_separator(b[first]) {
            return Outcome::Blank;
        }
        if b[first] == FORM_FEED {
            first = trim(b, first);
            self.cursor.seek(first);
            if is_separator(b[first]) {
                return Outcome::Blank;
            }
        }
        let valid = self.value(stack, first).is_some();
        if !valid {
            if !is_separator(b[self.cursor.last]) {
                while self.cursor.take().is_some_and(|i| !is_separator(b[i])) {}
            }
            return Outcome::Failed;
        }
        if self.non_ascii && std::str::from_utf8(&b[start..self.cursor.last]).is_err() {
            return Outcome::Failed;
        }
        Outcome::Valid
    }

    /// Walks the record's value starting at byte `i` and what follows it
    /// up to and including the record's separator. `None` when invalid.
    #[inline(always)]
    fn value(&mut self, stack: &mut Vec<bool>, mut i: usize) -> Option<()> {
        let b = self.b;
        stack.clear();
        let mut key: Option<(usize, usize)> = None;
        'value: loop {
            let member = key.take();
            let start = i;
            let mut end = i + 1;
            let token = match b[i] {
                open @ (b'{' | b'[') => {
                    let object = open == b'{';
                    let (token, close) = if object {
                        (Token::Object, b'}')
                    } else {
                        (Token::Array, b']')
                    };
                    let j = self.cursor.take()?;
                    if b[j] == close {
                        token
                    } else {
                        stack.push(object);
                        if let Some(key) = member {
                            self.note(key, token, start..end);
                        }
                        // An object's first member starts with its key.
                        i = if object {
                            key = self.object_key(j, stack.len() == 1)?;
                            self.cursor.take()?
                        } else {
                            j
                        };
                        continue 'value;
                    }
                }
                b'"' => {
                    end = self.string_end()?;
                    Token::String { escaped: false }
                }
                b'-' | b'0'..=b'9' => {
                    end = scan::scan_number(b, i)?;
                    Token::Number
                }
                b't' => {
                    end = scan::literal(b, i, b"true")?;
                    Token::True
                }
                b'f' => {
                    end = scan::literal(b, i, b"false")?;
                    Token::False
                }
                b'n' => {
                    end = scan::literal(b, i, b"null")?;
                    Token::Null
                }
                _ => return None,
            };
            if !matches!(token, Token::String { .. } | Token::Object | Token::Array) {
                let next = b.get(end).copied().unwrap_or(b'\n');
                if !(DELIMITER[next as usize] || next == FORM_FEED && stack.is_empty()) {
                    return None;
                }
            }
            if let Some(key) = member {
                self.note(key, token, start..end);
            }
            // After a value: a comma, the end of containers, or the end.
            loop {
                let Some(&in_object) = stack.last() else {
                    return self.after_top_level(end);
                };
                let j = self.cursor.take()?;
                match (b[j], in_object) {
                    (b',', true) => {
                        let at = self.cursor.take()?;
                        key = self.object_key(at, stack.len() == 1)?;
                        i = self.cursor.take()?;
                        continue 'value;
                    }
                    (b',', false) => {
                        i = self.cursor.take()?;
                        continue 'value;
                    }
                    (b'}', true) | (b']', false) => {
                        stack.pop();
                        end = j + 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// After the top-level value (which ended before byte `end`): nothing
    /// but whitespace up to the separator, or form feeds trimmed at the
    /// edge.
    #[inline(always)]
    fn after_top_level(&mut self, end: usize) -> Option<()> {
        let b = self.b;
        // A form feed right after a number or literal is not listed (it
        // continues the token's run of bytes): trim from the value's end.
        let from = if b.get(end) == Some(&FORM_FEED) {
            end
        } else {
            let j = self.cursor.take()?;
            if is_separator(b[j]) {
                return Some(());
            }
            if b[j] != FORM_FEED {
                return None;
            }
            j
        };
        let stop = trim(b, from);
        self.cursor.seek(stop);
        is_separator(*b.get(stop)?).then_some(())
    }

    /// Reads an object key at offset `at` (its opening quote) and the
    /// colon after it. The key's token when `top` (a member of the
    /// top-level object).
    #[inline(always)]
    fn object_key(&mut self, at: usize, top: bool) -> Option<Option<(usize, usize)>> {
        if self.b[at] != b'"' {
            return None;
        }
        let end = self.string_end()?;
        let colon = self.cursor.take()?;
        if self.b[colon] != b':' {
            return None;
        }
        Some(top.then_some((at, end)))
    }

    /// After an opening quote: the offset past its closing quote. Only the
    /// start of a non-ASCII run may be listed in between (noted for the
    /// UTF-8 check); anything else listed there is a control byte, an
    /// invalid escape or a separator.
    #[inline(always)]
    fn string_end(&mut self) -> Option<usize> {
        loop {
            let j = self.cursor.take()?;
            match self.b[j] {
                b'"' => return Some(j + 1),
                0x80.. => self.non_ascii = true,
                _ => return None,
            }
        }
    }

    /// Hands a top-level member (its key's token and its value's) to the
    /// visitor when it wants it.
    #[inline(always)]
    fn note(&mut self, key: (usize, usize), token: Token, value: Range<usize>) {
        let key = key.0..key.1;
        if let Some(field) = self.visit.field(self.b, key.clone(), self.any_backslash) {
            let token = escapes_marked(self.b, token, value.clone(), self.any_backslash);
            self.visit
                .member(self.b, self.any_backslash, field, key, token, value);
        }
    }
}

/// `token` of the value at `b[value]`, a string's marked escaped when it
/// holds an escape (the walk lists no escapes: it looks here, only for a
/// member a visitor wants).
#[inline(always)]
pub(super) fn escapes_marked(
    b: &[u8],
    token: Token,
    value: Range<usize>,
    any_backslash: bool,
) -> Token {
    match token {
        Token::String { .. } => Token::String {
            escaped: escaped(&b[value], any_backslash),
        },
        other => other,
    }
}

/// Whether a string holds an escape, where `any_backslash` says whether
/// its window holds a backslash at all.
#[inline(always)]
pub(crate) fn escaped(s: &[u8], any_backslash: bool) -> bool {
    any_backslash && s.contains(&b'\\')
}
