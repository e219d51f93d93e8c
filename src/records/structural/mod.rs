//! Walking a run of whole records with a vector structural pass: what
//! counting takes (records, failed ones, timestamps) and what an index
//! build takes (each record's place and key fields), through a visitor
//! ([`visit`]) that says which top-level members it wants.
//!
//! The byte scanner ([`super::scan`]) validates one record at a time after
//! the records were cut apart with `memchr`. Here a run of many records is
//! read once, 64 bytes at a time, and cut, validated and measured in two
//! passes over windows of at most 64 KiB of whole records (so both stay in
//! the cache):
//!
//! 1. **Structure** ([`classify`], [`walk`]). Each 64-byte block is
//!    classified into bit masks: quotes, backslashes, control and
//!    non-ASCII bytes, the six operators with the separators (`\n`,
//!    U+001E), and those with whitespace — with AVX-512 where the CPU has
//!    it (F, BW, VBMI and VBMI2), AVX2 otherwise, chosen once at run time.
//!    Escapes are resolved from the backslash mask; the inside of strings
//!    is the running XOR of the unescaped quotes, restarted at every
//!    separator (a separator never belongs to a valid string, so it ends
//!    a torn one). What remains is one list of offsets the grammar must
//!    look at, with the byte at each (its token).
//! 2. **Grammar** ([`walk`]). The byte scanner's state machine, stepping
//!    from one listed offset to the next; a record that fails is counted
//!    as failed and the walk resumes after its separator. A record whose
//!    tokens are those of a valid record met lately ([`shape`]) only has
//!    its numbers and literals checked.
//!
//! The outcome is exactly the byte scanner's on each segment (including
//! `trim_ascii`'s treatment of a form feed at a segment's edges); a
//! differential test over mutated records, random token sequences and
//! records of a few shapes holds both instruction sets to the byte
//! scanner and `serde_json`.
//! Where the CPU has neither, runs are cut and scanned record by record.

mod classify;
mod shape;
mod visit;
mod walk;

pub(crate) use visit::Visit;
pub(crate) use walk::escaped;

use super::segments::{RECORD_SEPARATOR, find_last_separator, find_separator};
use super::timestamp::DayMemo;
use classify::Block;

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

/// The vector instructions the passes are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// AVX-512 (F, BW, VBMI and VBMI2), with POPCNT, BMI1 and PCLMULQDQ.
    Avx512,
    /// AVX2, with POPCNT, BMI1 and PCLMULQDQ.
    Avx2,
}

impl Level {
    /// The best level this CPU has, if any (decided once).
    pub(super) fn detected() -> Option<Level> {
        static LEVEL: std::sync::OnceLock<Option<Level>> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(Level::detect)
    }

    fn detect() -> Option<Level> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if !(has!("avx2") && has!("popcnt") && has!("bmi1") && has!("pclmulqdq")) {
                return None;
            }
            if has!("avx512f") && has!("avx512bw") && has!("avx512vbmi") && has!("avx512vbmi2") {
                return Some(Level::Avx512);
            }
            Some(Level::Avx2)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// The levels this CPU runs (the best one first).
    #[cfg(test)]
    pub(crate) fn here() -> Vec<Level> {
        [Level::Avx512, Level::Avx2]
            .into_iter()
            .filter(|level| level.runs_here())
            .collect()
    }

    /// Whether this CPU can run code compiled for `self`.
    #[cfg(test)]
    fn runs_here(self) -> bool {
        match Level::detected() {
            Some(Level::Avx512) => true,
            Some(Level::Avx2) => self == Level::Avx2,
            None => false,
        }
    }
}

/// Whether this process may take the vector passes.
pub(crate) fn available() -> bool {
    Level::detected().is_some()
}

fn is_separator(byte: u8) -> bool {
    byte == b'\n' || byte == RECORD_SEPARATOR
}

/// Per-thread state of the vector passes, reused between windows.
pub(crate) struct Structural {
    level: Level,
    /// The offsets of the window listed last, in `indices[..count]`; the
    /// rest is slack that lets a block write its offsets unconditionally.
    indices: Vec<u32>,
    /// The byte at each listed offset, in `tokens[..count]`, a digit or
    /// `-` written as `0` (see [`shape`]).
    tokens: Vec<u8>,
    count: usize,
    /// Whether the window listed last holds a backslash at all.
    any_backslash: bool,
    /// Open containers of the record being walked, innermost last: `true`
    /// for an object.
    stack: Vec<bool>,
    days: DayMemo,
    /// The shapes of records walked lately.
    shapes: shape::Shapes,
}

impl Default for Structural {
    fn default() -> Self {
        // Never used where no level was detected (see `available`).
        Structural::at_level(Level::detected().unwrap_or(Level::Avx2))
    }
}

impl Structural {
    pub(crate) fn at_level(level: Level) -> Structural {
        Structural {
            level,
            indices: Vec::new(),
            tokens: Vec::new(),
            count: 0,
            any_backslash: false,
            stack: Vec::new(),
            days: DayMemo::default(),
            shapes: shape::Shapes::default(),
        }
    }

    /// Walks the records of `run`, whole segments each ended by a
    /// separator, handing `visit` what it asks for. Only called when
    /// [`available`] said so.
    ///
    /// The run is taken in windows of whole records of at most [`WINDOW`]
    /// bytes, so a window's offsets take at most four times its size; a
    /// segment longer than a window is handed to [`Visit::long`].
    pub(crate) fn walk_run<V: Visit>(&mut self, run: &[u8], visit: &mut V) {
        let mut pos = 0;
        while pos < run.len() {
            let limit = (pos + WINDOW).min(run.len());
            match find_last_separator(&run[pos..limit]) {
                Some(last) => {
                    self.walk_window(&run[pos..=pos + last], pos, visit);
                    pos += last + 1;
                }
                None => {
                    let end = find_separator(&run[limit..]).map_or(run.len(), |i| limit + i);
                    visit.long(&run[pos..end], pos);
                    pos = end + 1;
                }
            }
        }
    }

    /// The grammar walk's offsets of `text`, compiled for the level.
    fn walk_index_compiled(&mut self, text: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `self.level` was detected on this CPU (or, in tests,
        // checked with `runs_here`) before this path was taken.
        unsafe {
            match self.level {
                Level::Avx512 => compiled::walk_index_avx512(self, text),
                Level::Avx2 => compiled::walk_index_avx2(self, text),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = text;
            unreachable!("the vector passes are only taken where available() is true")
        }
    }
}

/// The passes compiled for each level, the classification inlined. Both
/// levels include PCLMULQDQ (see [`prefix_xor`]).
#[cfg(target_arch = "x86_64")]
mod compiled {
    use super::classify::{avx2, avx512};
    use super::{Structural, push_offsets};

    /// # Safety
    ///
    /// The CPU has the features enabled here.
    #[target_feature(enable = "avx2,popcnt,bmi1,pclmulqdq")]
    pub(super) unsafe fn walk_index_avx2(s: &mut Structural, text: &[u8]) {
        // SAFETY: the CPU has PCLMULQDQ and AVX2 (this function's contract).
        unsafe { s.walk_index(text, |block| avx2::classify(block), push_offsets) }
    }

    /// # Safety
    ///
    /// The CPU has the features enabled here.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,popcnt,bmi1,pclmulqdq")]
    pub(super) unsafe fn walk_index_avx512(s: &mut Structural, text: &[u8]) {
        // SAFETY: the CPU has PCLMULQDQ and AVX-512 with VBMI and VBMI2
        // (this function's contract).
        unsafe {
            s.walk_index(
                text,
                |block| avx512::classify(block),
                |out, tokens, base, block, bits| avx512::offsets(out, tokens, base, block, bits),
            )
        }
    }
}

/// Calls `f` with each 64-byte block of `text`, its offset and its
/// classes; a last partial block is classified padded with spaces. One
/// call site, so `f` is inlined into the loop.
#[inline(always)]
fn each_block(
    text: &[u8],
    classify: impl Fn(&[u8; 64]) -> Block,
    mut f: impl FnMut(usize, &[u8; 64], Block),
) {
    let whole = text.len() / 64 * 64;
    let mut padded = [b' '; 64];
    padded[..text.len() - whole].copy_from_slice(&text[whole..]);
    let mut base = 0usize;
    while base < text.len() {
        let block = match text.get(base..base + 64) {
            Some(block) => block.try_into().expect("64 bytes"),
            None => &padded,
        };
        f(base, block, classify(block));
        base += 64;
    }
}

/// Writes the offsets of the set bits of `bits` (in `block`, at `base`)
/// to the front of `out`, and their bytes as tokens to the front of
/// `tokens`; both have room for 64. Returns how many. Written four at a
/// time whatever the count (a spare write lands in the slack), which
/// keeps the loop's branch predictable.
#[inline(always)]
fn push_offsets(
    out: &mut [u32],
    tokens: &mut [u8],
    base: usize,
    block: &[u8; 64],
    mut bits: u64,
) -> usize {
    let out: &mut [u32; 64] = (&mut out[..64]).try_into().expect("64 slots");
    let tokens: &mut [u8; 64] = (&mut tokens[..64]).try_into().expect("64 slots");
    let count = bits.count_ones() as usize;
    let mut k = 0;
    while k < count {
        for (slot, token) in out[k..k + 4].iter_mut().zip(&mut tokens[k..k + 4]) {
            let at = bits.trailing_zeros();
            *slot = (base as u32).wrapping_add(at);
            *token = shape::token(block[at as usize & 63]);
            bits &= bits.wrapping_sub(1);
        }
        k += 4;
    }
    count
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
/// quote up to (not including) its closing one. One carry-less multiply
/// by all ones: only where the CPU has PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
fn prefix_xor(bits: u64) -> u64 {
    use std::arch::x86_64::*;
    let product = _mm_clmulepi64_si128::<0>(_mm_set_epi64x(0, bits as i64), _mm_set1_epi8(-1));
    _mm_cvtsi128_si64(product) as u64
}

/// [`prefix_xor`] where there is no carry-less multiply (the vector passes
/// are never taken there, but they are compiled).
///
/// # Safety
///
/// None: `unsafe` only to be called as the x86-64 one is.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

#[cfg(test)]
pub(crate) mod tests;
