//! Counting a run of whole records with a vector structural pass.
//!
//! The byte scanner ([`super::scan`]) validates one record at a time after
//! the records were cut apart with `memchr`. Here a run of many records is
//! read once, 64 bytes at a time, and cut, validated and measured in two
//! passes over windows of at most 64 KiB of whole records (so both stay in
//! the cache):
//!
//! 1. **Structure.** Each 64-byte block is classified with AVX2 into bit
//!    masks: quotes, backslashes, control and non-ASCII bytes, and (from
//!    one table lookup per nibble) the six operators with the separators
//!    (`\n`, U+001E), and those with whitespace. Escapes are resolved
//!    from the backslash mask; the inside of strings is the running XOR of
//!    the unescaped quotes, restarted at every separator (a separator never
//!    belongs to a valid string, so it ends a torn one). What remains is
//!    one list of offsets the grammar must look at: operators outside
//!    strings, unescaped quotes, the first byte of every number or
//!    literal, separators — and, as positions the grammar will refuse or
//!    take note of, raw control bytes inside strings, invalid escapes and
//!    the start of each non-ASCII run.
//! 2. **Grammar.** The byte scanner's state machine, stepping from one
//!    listed offset to the next: a string is its opening quote and the
//!    next offset, which must be its closing quote; whitespace is never
//!    visited; a number or literal is checked to end where its run of
//!    bytes ends; a separator ends the record. A record that fails is
//!    counted as failed and the walk resumes after its separator. A record
//!    holding non-ASCII bytes has its UTF-8 checked once, whole.
//!
//! The outcome is exactly the byte scanner's on each segment (including
//! `trim_ascii`'s treatment of a form feed at a segment's edges); a
//! differential test over mutated records holds the two paths and
//! `serde_json` together. This path is taken where the CPU has AVX2 (and
//! the bit instructions that come with it), chosen once at run time;
//! elsewhere runs are cut and scanned record by record.

use std::ops::Range;

use super::count::{RecordStats, count_segment};
use super::scan::{self, Member, RecordFacts, RecordScanner, Token};
use super::segments::{RECORD_SEPARATOR, find_last_separator, find_separator};
use super::timestamp::DayMemo;

/// Records are validated in windows of whole records of at most this many
/// bytes: small enough that a window and its offsets stay in the cache
/// between the two passes.
const WINDOW: usize = 64 << 10;

/// Form feed: not JSON whitespace, but trimmed from a segment's edges like
/// the other ASCII whitespace (the byte scanner trims with `trim_ascii`).
const FORM_FEED: u8 = 0x0c;

/// Bytes that may follow a number or literal: whitespace, the operators,
/// the quote and the separators. Anything else right after one makes it
/// invalid (`12x`, `truee`).
const DELIMITER: [bool; 256] = {
    let mut table = [false; 256];
    let delimiters = b" \t\r\n{}[]:,\"\x1e";
    let mut k = 0;
    while k < delimiters.len() {
        table[delimiters[k] as usize] = true;
        k += 1;
    }
    table
};

/// Byte classes by nibble, for the vector classification: byte `v` is in
/// class `c` when `low[v & 15] & high[v >> 4] & c != 0`. One bit per high
/// nibble and class, set in `high` for that nibble and in `low` for the
/// low nibbles of that class's members under it.
struct NibbleClasses {
    low: [u8; 16],
    high: [u8; 16],
}

/// `,` (0x2c), `:` (0x3a), `[` `]` (0x5b, 0x5d), `{` `}` (0x7b, 0x7d).
const OPERATOR: u8 = 0b0000_0111;
/// `\n` (0x0a), U+001E.
const SEPARATOR: u8 = 0b0001_1000;
/// ` ` (0x20), `\t` (0x09), `\r` (0x0d).
const WHITESPACE: u8 = 0b0110_0000;

const NIBBLE_CLASSES: NibbleClasses = {
    // One bit per class and high nibble (5 and 7 share one: their
    // members have the same low nibbles), so no member's low nibble pairs
    // with another member's high nibble. Checked over all bytes by a test.
    const OP_2: u8 = 0b0000_0001; // `,` 0x2c
    const OP_3: u8 = 0b0000_0010; // `:` 0x3a
    const OP_57: u8 = 0b0000_0100; // `[` `]` `{` `}`: low nibbles b and d
    const SEP_0: u8 = 0b0000_1000; // `\n` 0x0a
    const SEP_1: u8 = 0b0001_0000; // U+001E 0x1e
    const WS_0: u8 = 0b0010_0000; // `\t` 0x09, `\r` 0x0d
    const WS_2: u8 = 0b0100_0000; // ` ` 0x20
    let mut low = [0u8; 16];
    let mut high = [0u8; 16];
    low[0xc] |= OP_2;
    low[0xa] |= OP_3 | SEP_0;
    low[0xb] |= OP_57;
    low[0xd] |= OP_57 | WS_0;
    low[0xe] |= SEP_1;
    low[0x9] |= WS_0;
    low[0x0] |= WS_2;
    high[0x0] = SEP_0 | WS_0;
    high[0x1] = SEP_1;
    high[0x2] = OP_2 | WS_2;
    high[0x3] = OP_3;
    high[0x5] = OP_57;
    high[0x7] = OP_57;
    NibbleClasses { low, high }
};

/// Whether this process may take the vector path (decided once).
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FEATURES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FEATURES.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("popcnt")
                && std::arch::is_x86_feature_detected!("bmi1")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn is_separator(byte: u8) -> bool {
    byte == b'\n' || byte == RECORD_SEPARATOR
}

/// Per-thread state of the vector path, reused between runs.
#[derive(Default)]
pub(super) struct Structural {
    /// The offsets of the window scanned last, in `indices[..count]`; the
    /// rest is slack that lets a block write its offsets unconditionally.
    indices: Vec<u32>,
    count: usize,
    /// Whether the window scanned last holds a backslash at all.
    any_backslash: bool,
    /// Open containers of the record being walked, innermost last: `true`
    /// for an object.
    stack: Vec<bool>,
    days: DayMemo,
}

/// The masks of one 64-byte block, bit `i` for byte `i`.
#[derive(Clone, Copy)]
struct Block {
    quote: u64,
    backslash: u64,
    /// Operators and separators.
    operator: u64,
    /// Operators, separators and whitespace: what cannot be part of a
    /// number or literal.
    delimiter: u64,
    control: u64,
    non_ascii: u64,
}

impl Block {
    /// The masks shifted down by `shift` bits, the bytes shifted in from
    /// past the end reading as whitespace.
    fn shifted(self, shift: u32) -> Block {
        Block {
            quote: self.quote >> shift,
            backslash: self.backslash >> shift,
            operator: self.operator >> shift,
            delimiter: self.delimiter >> shift | !(!0u64 >> shift),
            control: self.control >> shift,
            non_ascii: self.non_ascii >> shift,
        }
    }
}

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
    /// Counts the records of `run`, whole segments each ended by a
    /// separator, into `stats`. Only called when [`available`] said so.
    ///
    /// The run is taken in windows of whole records of at most [`WINDOW`]
    /// bytes, so a window's offsets take at most four times its size; a
    /// record longer than a window goes through `scanner` on its own.
    pub(super) fn count_run(
        &mut self,
        run: &[u8],
        stats: &mut RecordStats,
        scanner: &mut RecordScanner,
    ) {
        let mut pos = 0;
        while pos < run.len() {
            let limit = (pos + WINDOW).min(run.len());
            match find_last_separator(&run[pos..limit]) {
                Some(last) => {
                    self.count_window(&run[pos..=pos + last], stats);
                    pos += last + 1;
                }
                None => {
                    let end = find_separator(&run[limit..]).map_or(run.len(), |i| limit + i);
                    count_segment(scanner, &run[pos..end], stats);
                    pos = end + 1;
                }
            }
        }
    }

    fn count_window(&mut self, text: &[u8], stats: &mut RecordStats) {
        debug_assert!(text.len() <= WINDOW, "offsets are u32, and bounded");
        self.index_vector(text);
        let mut cursor = Cursor {
            indices: &self.indices[..self.count],
            next: 0,
            last: 0,
        };
        let mut start = 0;
        let any_backslash = self.any_backslash;
        while cursor.next < cursor.indices.len() {
            let mut facts = RecordFacts::default();
            let mut walk = Walk {
                b: text,
                cursor: &mut cursor,
                facts: &mut facts,
                days: &mut self.days,
                any_backslash,
                non_ascii: false,
            };
            let outcome = walk.record(&mut self.stack, start);
            match outcome {
                Outcome::Blank => {}
                Outcome::Valid => stats.add_record(facts.timestamp()),
                Outcome::Failed => stats.add_failed(),
            }
            start = cursor.last + 1;
        }
    }

    /// Pass 1 compiled for the CPU's vector instructions.
    fn index_vector(&mut self, text: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `available()` found AVX2, POPCNT and BMI1 before this
        // path was taken.
        unsafe {
            avx2::index(self, text)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = text;
            unreachable!("the vector path is only taken where available() is true")
        }
    }

    /// Pass 1: fills `indices[..count]` with the offsets of `text` the
    /// grammar must look at.
    #[inline(always)]
    fn index(&mut self, text: &[u8], classify: impl Fn(&[u8; 64]) -> Block) {
        // Room for one offset per byte and a block's worth of slack, kept
        // between windows so it is zeroed only when it grows.
        if self.indices.len() < text.len() + 64 {
            self.indices.resize(text.len() + 64, 0);
        }
        self.count = 0;
        self.any_backslash = false;
        let mut carry = Carry::default();
        let mut blocks = text.chunks_exact(64);
        let mut base = 0usize;
        for block in blocks.by_ref() {
            let masks = classify(block.try_into().expect("chunks of 64"));
            self.block(text, base, masks, &mut carry);
            base += 64;
        }
        let tail = blocks.remainder().len();
        if tail > 0 {
            let masks = if text.len() >= 64 {
                // The last 64 bytes, shifted down so bit 0 is the tail's
                // first byte.
                let last = text[text.len() - 64..].try_into().expect("64 bytes");
                classify(last).shifted(64 - tail as u32)
            } else {
                let mut padded = [b' '; 64];
                padded[..tail].copy_from_slice(&text[base..]);
                classify(&padded)
            };
            self.block(text, base, masks, &mut carry);
        }
    }

    /// Resolves one block's escapes and strings and appends its offsets.
    #[inline(always)]
    fn block(&mut self, text: &[u8], base: usize, m: Block, carry: &mut Carry) {
        let (escaped, bad_escapes) = if m.backslash == 0 && !carry.escaped {
            (0, 0)
        } else {
            self.any_backslash = true;
            escapes(text, base, m.backslash, &mut carry.escaped)
        };
        let quote = m.quote & !escaped;
        let mut in_string = prefix_xor(quote) ^ if carry.in_string { !0 } else { 0 };
        // `in_string` holds a string's opening quote and body, never its
        // closing quote: a control byte there is raw inside a string. So
        // is a separator, which ends the string (and its torn record).
        let mut refused = m.control & in_string;
        if refused != 0 {
            let separator = separators(text, base, m.control);
            let mut torn = separator & in_string;
            while torn != 0 {
                let after = !0u64 << torn.trailing_zeros() << 1;
                in_string = (in_string & !after) | prefix_xor(quote & after);
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
        let mut bits = ((m.operator | starts) & !in_string) | quote | refused | bad_escapes | runs;
        // Written eight at a time whatever the count (a spare write past
        // the last offset lands in the slack), which keeps the loop's
        // branch predictable.
        let out: &mut [u32; 64] = (&mut self.indices[self.count..self.count + 64])
            .try_into()
            .expect("64 slots");
        let count = bits.count_ones() as usize;
        let mut k = 0;
        while k < count {
            for slot in &mut out[k..k + 4] {
                *slot = (base as u32).wrapping_add(bits.trailing_zeros());
                bits &= bits.wrapping_sub(1);
            }
            k += 4;
        }
        self.count += count;
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
struct Walk<'w, 'c> {
    b: &'w [u8],
    cursor: &'c mut Cursor<'w>,
    facts: &'c mut RecordFacts,
    days: &'c mut DayMemo,
    /// Whether the window holds a backslash (else no string has escapes).
    any_backslash: bool,
    /// Whether the record walked holds a non-ASCII byte.
    non_ascii: bool,
}

impl Walk<'_, '_> {
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
                b'{' => {
                    let j = self.cursor.take()?;
                    if b[j] == b'}' {
                        Token::Object
                    } else {
                        stack.push(true);
                        if let Some(key) = member {
                            self.note(key, Token::Object, start..end);
                        }
                        key = self.object_key(j, stack.len() == 1)?;
                        i = self.cursor.take()?;
                        continue 'value;
                    }
                }
                b'[' => {
                    let j = self.cursor.take()?;
                    if b[j] == b']' {
                        Token::Array
                    } else {
                        stack.push(false);
                        if let Some(key) = member {
                            self.note(key, Token::Array, start..end);
                        }
                        i = j;
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

    /// Takes in a top-level member (its key's token and its value's) for
    /// the record's facts. Whether a string holds an escape is looked up
    /// only for the keys the facts keep.
    #[inline(always)]
    fn note(&mut self, (key_start, key_end): (usize, usize), token: Token, value: Range<usize>) {
        let b = self.b;
        let key = &b[key_start..key_end];
        let escaped = |s: &[u8]| self.any_backslash && s.contains(&b'\\');
        let key_escaped = escaped(key);
        // Counting reads timestamps only, never a record's landmarks.
        let Some(field) = scan::fact_field(key, key_escaped).filter(|f| !f.is_mark()) else {
            return;
        };
        let token = match token {
            Token::String { .. } => Token::String {
                escaped: escaped(&b[value.clone()]),
            },
            other => other,
        };
        let member = Member {
            key,
            key_escaped,
            token,
            value,
        };
        self.facts.note_field(field, &member, b, self.days);
    }
}

/// The first byte from `at` on that is not whitespace or a form feed.
fn trim(b: &[u8], mut at: usize) -> usize {
    while let Some(&(b' ' | b'\t' | b'\r' | FORM_FEED)) = b.get(at) {
        at += 1;
    }
    at
}

/// The bits of the bytes escaped by a backslash in this block (the byte
/// after each backslash that is not itself escaped), and the bits of the
/// backslashes whose escape is invalid. `carry` says the block's first
/// byte is escaped, and is set when its last byte escapes the next
/// block's first.
#[inline(never)]
fn escapes(text: &[u8], base: usize, backslash: u64, carry: &mut bool) -> (u64, u64) {
    // A byte escaped from the previous block was checked there.
    let mut escaped = u64::from(std::mem::take(carry));
    let mut bad = 0;
    let mut pending = backslash & !escaped;
    while pending != 0 {
        let at = pending.trailing_zeros();
        if !valid_escape(text, base + at as usize + 1) {
            bad |= 1 << at;
        }
        if at == 63 {
            *carry = true;
            break;
        }
        escaped |= 1 << (at + 1);
        // The escaped byte may be a backslash: it escapes nothing.
        pending &= !(1 << at) & !(1 << (at + 1));
    }
    (escaped, bad)
}

/// Whether `text[at]`, after a backslash, is one of JSON's escapes (`u`
/// with four hexadecimal digits).
fn valid_escape(text: &[u8], at: usize) -> bool {
    match text.get(at) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => true,
        Some(b'u') => text
            .get(at + 1..at + 5)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)),
        _ => false,
    }
}

/// The separators among the control bytes `control` of the block at
/// `base` (only looked for when a control byte is inside a string).
#[inline(never)]
fn separators(text: &[u8], base: usize, mut control: u64) -> u64 {
    let mut found = 0;
    while control != 0 {
        let at = control.trailing_zeros();
        if text
            .get(base + at as usize)
            .is_some_and(|&b| is_separator(b))
        {
            found |= 1 << at;
        }
        control &= control - 1;
    }
    found
}

/// Bit `i` is the XOR of bits `0..=i`: inside a string from its opening
/// quote up to (not including) its closing one.
#[inline(always)]
fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Block, Structural};
    use std::arch::x86_64::*;

    /// [`Structural::index`] compiled for AVX2, the classification inlined.
    #[target_feature(enable = "avx2,popcnt,bmi1")]
    pub(super) unsafe fn index(s: &mut Structural, text: &[u8]) {
        s.index(text, |block| classify(block))
    }

    /// Classifies 64 bytes, 32 at a time.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn classify(block: &[u8; 64]) -> Block {
        // SAFETY: both loads read 32 bytes inside the 64-byte block;
        // `loadu` has no alignment requirement.
        let (lo, hi) = unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().cast()),
                _mm256_loadu_si256(block.as_ptr().add(32).cast()),
            )
        };
        let eq = |v: __m256i, c: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c as i8));
        // Operators, separators and whitespace in one table lookup per
        // nibble: a byte is in a class when the bits its low and its high
        // nibble select share one of the class's bits. Each bit stands
        // for one high nibble's members of a class (see `NIBBLE_CLASSES`).
        // SAFETY: each load reads the 16 bytes of a 16-byte table.
        let (low_table, high_table) = unsafe {
            (
                _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    super::NIBBLE_CLASSES.low.as_ptr().cast(),
                )),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    super::NIBBLE_CLASSES.high.as_ptr().cast(),
                )),
            )
        };
        let nibbles = _mm256_set1_epi8(0x0f);
        let classes = |v: __m256i| {
            let low = _mm256_shuffle_epi8(low_table, _mm256_and_si256(v, nibbles));
            let high = _mm256_shuffle_epi8(
                high_table,
                _mm256_and_si256(_mm256_srli_epi16(v, 4), nibbles),
            );
            _mm256_and_si256(low, high)
        };
        let zero = _mm256_setzero_si256();
        let (class_lo, class_hi) = (classes(lo), classes(hi));
        let in_class = |bits: u8| {
            let set = _mm256_set1_epi8(bits as i8);
            !mask(
                _mm256_cmpeq_epi8(_mm256_and_si256(class_lo, set), zero),
                _mm256_cmpeq_epi8(_mm256_and_si256(class_hi, set), zero),
            )
        };
        // Unsigned v < 0x20 ⇔ min(v, 0x1f) == v.
        let control = |v: __m256i| _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1f)), v);
        Block {
            quote: mask(eq(lo, b'"'), eq(hi, b'"')),
            backslash: mask(eq(lo, b'\\'), eq(hi, b'\\')),
            operator: in_class(super::OPERATOR | super::SEPARATOR),
            delimiter: in_class(super::OPERATOR | super::SEPARATOR | super::WHITESPACE),
            control: mask(control(lo), control(hi)),
            non_ascii: mask(lo, hi),
        }
    }

    /// The top bits of two 32-byte halves as one 64-bit mask.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mask(lo: __m256i, hi: __m256i) -> u64 {
        let mut bits = u64::from(_mm256_movemask_epi8(lo) as u32)
            | u64::from(_mm256_movemask_epi8(hi) as u32) << 32;
        // An empty barrier: without it LLVM folds the masks' later
        // arithmetic back into byte vectors, and extracts them one byte
        // at a time (several times slower on AVX2).
        // SAFETY: the assembly is empty; it only hides the value.
        unsafe { std::arch::asm!("/* {0} */", inout(reg) bits, options(pure, nomem, nostack)) };
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte scanner's count of `run`, segment by segment: the
    /// reference the vector pass must match exactly.
    fn by_segments(run: &[u8]) -> RecordStats {
        let mut stats = RecordStats::default();
        let mut scanner = RecordScanner::default();
        for segment in run.split(|&b| is_separator(b)) {
            let segment = segment.trim_ascii();
            if segment.is_empty() {
                continue;
            }
            match scanner.scan(segment) {
                Some(ts) => stats.add_record(ts),
                None => stats.add_failed(),
            }
        }
        stats
    }

    /// `serde_json`'s verdict on one segment, as counting reads it.
    fn serde_count(run: &[u8]) -> (u64, u64) {
        let (mut records, mut failed) = (0, 0);
        for segment in run.split(|&b| is_separator(b)) {
            let segment = segment.trim_ascii();
            if segment.is_empty() {
                continue;
            }
            records += 1;
            // Ignoring a string, serde_json does not check its UTF-8.
            let valid = std::str::from_utf8(segment).is_ok()
                && serde_json::from_slice::<serde::de::IgnoredAny>(segment).is_ok();
            if !valid {
                failed += 1;
            }
        }
        (records, failed)
    }

    fn vector(run: &[u8]) -> RecordStats {
        let mut stats = RecordStats::default();
        Structural::default().count_run(run, &mut stats, &mut RecordScanner::default());
        stats
    }

    /// Whether this CPU lacks the vector pass (said on stderr: the test
    /// then checks nothing; the byte scanner's own tests still run).
    fn no_vectors() -> bool {
        if !available() {
            eprintln!("skipped: this CPU has no AVX2, the vector pass is never taken here");
        }
        !available()
    }

    /// Checks one run (ended by a separator) on both paths and against
    /// `serde_json`.
    fn agree(run: &[u8]) {
        let expected = by_segments(run);
        assert_eq!(vector(run), expected, "{:?}", String::from_utf8_lossy(run));
        let serde = serde_count(run);
        assert_eq!(
            (expected.record_count, expected.failed_count),
            serde,
            "serde_json disagrees on {:?}",
            String::from_utf8_lossy(run)
        );
    }

    #[test]
    fn nibble_classes_are_exactly_the_byte_classes() {
        let class = |byte: u8| {
            NIBBLE_CLASSES.low[usize::from(byte & 15)] & NIBBLE_CLASSES.high[usize::from(byte >> 4)]
        };
        for byte in 0..=255u8 {
            let expect = |members: &[u8]| members.contains(&byte);
            assert_eq!(class(byte) & OPERATOR != 0, expect(b",:[]{}"), "{byte:#x}");
            assert_eq!(class(byte) & SEPARATOR != 0, expect(b"\n\x1e"), "{byte:#x}");
            assert_eq!(class(byte) & WHITESPACE != 0, expect(b" \t\r"), "{byte:#x}");
        }
    }

    #[test]
    fn counts_like_the_byte_scanner() {
        if no_vectors() {
            return;
        }
        for run in [
            &b"{\"a\":1}\n"[..],
            b"{\"a\":1}\x1e[1,2]\n\n  \r\n\"s\"\x1e",
            b"{\"a\":\n{\"a\":3}\n",
            b"{\"ts\":1767225600,\"id\":\"x\"}\n{\"timestamp\":\"2026-01-02T00:00:00Z\"}\n",
            b"{\"t\\u0073\":5}\n{\"ts\":\"2026-01-0\\u0031T00:00:00Z\"}\n",
            b"\"unterminated\n{\"after\":\"a torn string\"}\n",
            b"\"h\xc3\xa9llo \xe2\x82\xac\"\n\"\xff\"\n[\"\xc3\"]\n\xc3\xa9\n",
            b"\"tab\tinside\"\n\"bad \\x escape\"\n\"\\u12g4\"\n\"ok \\\" \\\\ \\/ \\b\"\n",
            b"\x0c{}\x0c\n\x0c\n1\x0c\n1\x0cx\n\x0c \x0c[]\r\x0c\n[1\x0c]\n",
            b"12x\ntruee\nnull\nnul\n-\n-0\n01\n1.5e3\n{\"a\":tru}\n",
            b"{} {}\n1 2\n{\"a\" 1}\n{\"a\":1,}\n[1,]\n[}\n{]\n",
            b"\\\n\\\"\n\"a\"b\n\"a\"1\n",
        ] {
            agree(run);
        }
    }

    #[test]
    fn strings_and_escapes_across_block_edges() {
        if no_vectors() {
            return;
        }
        // A string crossing the 64-byte edge at every offset, with an
        // escape, a non-ASCII character or a torn end placed on the edge.
        for pad in 0..130 {
            let p = "p".repeat(pad);
            for body in [
                format!("{{\"k\":\"{p}\\\"q\\\\\"}}\n"),
                format!("{{\"k\":\"{p}é€\"}}\n"),
                format!("[\"{p}\\\\\",\"\\u00e9\"]\n"),
                format!("{{\"k\":\"{p}\n{{\"n\":1}}\n"),
                format!("{{\"k\":\"{p}\\\n\"x\"\n"),
                format!("{p}\n{{\"ts\":\"2026-01-01T00:00:00Z\"}}\n"),
            ] {
                agree(body.as_bytes());
            }
        }
    }

    #[test]
    fn agrees_on_mutated_runs_of_records() {
        if no_vectors() {
            return;
        }
        let seeds: [&[u8]; 5] = [
            br#"{"id":"r-1","ts":"2026-01-01T00:00:00Z","content":"a \"quoted\" \\ word","n":[1,-2.5e3,true,null,{"k":false}]}"#,
            br#"[{"a":{}},[],"\u00e9",0,-0.0,1E9]"#,
            br#"{"deep":[[[[{"x":[[[]]]}]]]],"timestamp":1767225600123}"#,
            "{\"text\":\"naïve café — 東京\",\"ts\":\"2026-03-04T05:06:07.5+01:00\"}".as_bytes(),
            b"{\"role\":\"tool\",\"content\":\"line one\\nline two\\ttabbed \\u2028\"}",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet: &[u8] =
            b"{}[],:\"\\ 0123456789.-+eEtrufalsn\n\x1e\x0c\t\r\x01\x80\xc3\xa9\xe2\xff";
        let mut runs = 0;
        for _ in 0..20_000 {
            let mut run = Vec::new();
            for _ in 0..1 + next() % 6 {
                let mut record = seeds[(next() % seeds.len() as u64) as usize].to_vec();
                for _ in 0..next() % 4 {
                    let pos = (next() as usize) % record.len();
                    let byte = alphabet[(next() as usize) % alphabet.len()];
                    match next() % 3 {
                        0 => record[pos] = byte,
                        1 => {
                            record.remove(pos);
                        }
                        _ => record.insert(pos, byte),
                    }
                    if record.is_empty() {
                        break;
                    }
                }
                run.extend_from_slice(&record);
                run.push(if next() % 4 == 0 {
                    RECORD_SEPARATOR
                } else {
                    b'\n'
                });
            }
            agree(&run);
            runs += 1;
        }
        assert_eq!(runs, 20_000);
    }

    #[test]
    fn runs_longer_than_a_window() {
        if no_vectors() {
            return;
        }
        let mut run = Vec::new();
        let mut i = 0;
        while run.len() < 3 * WINDOW + 1000 {
            if i == 700 {
                // A record longer than a window, amid others.
                run.extend_from_slice(
                    format!("{{\"big\":\"{}\"}}\n", "b".repeat(WINDOW + 7)).as_bytes(),
                );
            }
            let line = match i % 5 {
                0 => format!("{{\"id\":{i},\"ts\":{}}}\n", 1_767_225_600 + i),
                1 => format!(
                    "{{\"id\":\"{i}\",\"content\":\"{}\"}}\n",
                    "w".repeat(i % 300)
                ),
                2 => format!("{{\"torn\":\"{}\n", "t".repeat(i % 70)),
                3 => "\n\x1e  \n".to_string(),
                _ => format!("[{i},\"{}\\n\"]\x1e", "é".repeat(i % 40)),
            };
            run.extend_from_slice(line.as_bytes());
            i += 1;
        }
        // One record much larger than a window, too.
        run.extend_from_slice(format!("{{\"big\":\"{}\"}}\n", "b".repeat(3 * WINDOW)).as_bytes());
        agree(&run);
        assert!(vector(&run).record_count > 1000);
    }
}
