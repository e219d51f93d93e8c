//! Records of a shape seen before, checked without the grammar walk.
//!
//! Record files repeat a few shapes: the same keys in the same order, with
//! values of the same kinds. A record's *shape* here is the sequence of
//! bytes at its listed offsets (its tokens), each number's first byte
//! written as `0`. Every decision of the grammar walk depends on those
//! bytes alone, except whether each number or literal is well formed and
//! ends at a delimiter. So a record whose tokens equal those of a record
//! the walk found valid is valid exactly when its numbers and literals
//! are, and the top-level members a visitor wants (counting's timestamp,
//! an index's key) are read where its shape locates them.
//!
//! Only the shape of an object or array is learnt, and only when it holds
//! nothing but operators, quotes, numbers, literals and its separator:
//! never a control byte, a refused escape, the start of a non-ASCII run
//! (whose UTF-8 only the walk checks) or a form feed (which the walk
//! trims at a top-level value's edge). Any record outside the known
//! shapes, or with a malformed number or literal, is walked as before.

use super::visit::Visit;
use super::walk::escapes_marked;
use super::{DELIMITER, is_separator};
use crate::records::scan::{self, Token};

/// How many shapes are kept, the one matched last first.
const KEPT: usize = 8;

/// The most tokens a learnt shape holds.
const LONGEST: usize = 512;

/// After this many records in a row walked (no shape of theirs known),
/// shapes are only tried on one record in [`RETRY_EVERY`]: a file whose
/// records rarely repeat a shape pays for matching and learning hardly
/// at all.
const MISSES_BEFORE_REST: u32 = 16;
const RETRY_EVERY: u32 = 32;

/// The token of a listed byte: the byte, or `0` for the first byte of a
/// number.
#[inline(always)]
pub(super) fn token(byte: u8) -> u8 {
    if byte.is_ascii_digit() || byte == b'-' {
        b'0'
    } else {
        byte
    }
}

/// A window's listed offsets and their tokens.
pub(super) struct Listed<'a> {
    pub(super) text: &'a [u8],
    pub(super) indices: &'a [u32],
    pub(super) tokens: &'a [u8],
}

/// The shapes of valid records met lately.
#[derive(Default)]
pub(super) struct Shapes {
    /// The shape matched or learnt last first.
    known: Vec<Shape>,
    /// A shape's buffers, reused for the next one learnt.
    spare: Shape,
    /// Records walked since one matched a shape.
    walked: u32,
    /// How many records matched a known shape (for the tests).
    #[cfg(test)]
    pub(super) matched: u64,
}

#[derive(Default)]
struct Shape {
    /// The tokens, the separator last.
    tokens: Vec<u8>,
    /// Where its numbers and literals are, in `tokens`.
    scalars: Vec<u16>,
    /// Where the opening quotes of its top-level keys are, in `tokens`.
    keys: Vec<u16>,
}

impl Shapes {
    /// The record whose tokens begin at `listed.tokens[next]`, when it has
    /// a known shape and well-formed numbers and literals: how many
    /// tokens it takes (its separator included), its top-level members
    /// handed to `visit` as the walk would. `None` leaves the record to
    /// the walk, having handed `visit` nothing.
    #[inline(always)]
    pub(super) fn matched<V: Visit>(
        &mut self,
        listed: &Listed<'_>,
        next: usize,
        any_backslash: bool,
        visit: &mut V,
    ) -> Option<usize> {
        if self.resting() {
            return None;
        }
        let rest = &listed.tokens[next..];
        let found = self
            .known
            .iter()
            .position(|shape| rest.starts_with(&shape.tokens))?;
        if found > 0 {
            self.known[..=found].rotate_right(1);
        }
        self.walked = 0;
        #[cfg(test)]
        {
            self.matched += 1;
        }
        let shape = &self.known[0];
        let text = listed.text;
        let at = |p: u16| listed.indices[next + usize::from(p)] as usize;
        for &p in &shape.scalars {
            let end = scalar_end(text, shape.tokens[usize::from(p)], at(p))?;
            if !DELIMITER[usize::from(text.get(end).copied().unwrap_or(b'\n'))] {
                return None;
            }
        }
        // Every number and literal was checked above, so nothing below
        // fails: the members are handed only for a matched record.
        for &p in &shape.keys {
            let key = at(p)..at(p + 1) + 1;
            let Some(field) = visit.field(text, key.clone(), any_backslash) else {
                continue;
            };
            // The value follows the key's two quotes and its colon.
            let v = p + 3;
            let start = at(v);
            let (token, end) = match shape.tokens[usize::from(v)] {
                b'"' => (Token::String { escaped: false }, at(v + 1) + 1),
                b'{' => (Token::Object, start + 1),
                b'[' => (Token::Array, start + 1),
                kind => {
                    let token = match kind {
                        b'0' => Token::Number,
                        b't' => Token::True,
                        b'f' => Token::False,
                        _ => Token::Null,
                    };
                    let end = scalar_end(text, kind, start).unwrap_or(start);
                    (token, end)
                }
            };
            let token = escapes_marked(text, token, start..end, any_backslash);
            visit.member(text, any_backslash, field, key, token, start..end);
        }
        Some(shape.tokens.len())
    }

    /// Learns the shape of a record the walk found valid, whose tokens
    /// are `tokens` (its separator last), unless it is not one to learn.
    pub(super) fn learn(&mut self, tokens: &[u8]) {
        if self.resting() || !self.spare.fill(tokens) {
            return;
        }
        let learnt = std::mem::take(&mut self.spare);
        if self.known.len() == KEPT {
            self.spare = self.known.pop().expect("KEPT shapes");
        }
        self.known.insert(0, learnt);
    }

    /// Notes a record the grammar walked (after [`learn`](Self::learn)).
    pub(super) fn walked(&mut self) {
        self.walked = self.walked.wrapping_add(1);
    }

    /// Whether shapes are left alone for this record: many records in a
    /// row had none known, and this is not one to try again on.
    fn resting(&self) -> bool {
        self.walked >= MISSES_BEFORE_REST && !self.walked.is_multiple_of(RETRY_EVERY)
    }
}

impl Shape {
    /// Takes `tokens` as this shape; false when it is not one to learn.
    fn fill(&mut self, tokens: &[u8]) -> bool {
        self.tokens.clear();
        self.scalars.clear();
        self.keys.clear();
        let Some((&last, body)) = tokens.split_last() else {
            return false;
        };
        if tokens.len() > LONGEST
            || !is_separator(last)
            || !matches!(body.first(), Some(b'{' | b'['))
        {
            return false;
        }
        let mut depth = 0u32;
        let mut p = 0;
        while p < body.len() {
            match body[p] {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth = depth.saturating_sub(1),
                b':' | b',' => {}
                b'"' => {
                    // Nothing listed inside the string: its closing quote
                    // follows. A key is a string before a colon.
                    if body.get(p + 1) != Some(&b'"') {
                        return false;
                    }
                    if depth == 1 && body.get(p + 2) == Some(&b':') {
                        self.keys.push(p as u16);
                    }
                    p += 1;
                }
                b'0' | b't' | b'f' | b'n' => self.scalars.push(p as u16),
                _ => return false,
            }
            p += 1;
        }
        self.tokens.extend_from_slice(tokens);
        true
    }
}

/// Where the number or literal whose token is `kind` and which starts at
/// `text[start]` ends, when it is well formed.
#[inline(always)]
fn scalar_end(text: &[u8], kind: u8, start: usize) -> Option<usize> {
    match kind {
        b'0' => scan::scan_number(text, start),
        b't' => scan::literal(text, start, b"true"),
        b'f' => scan::literal(text, start, b"false"),
        _ => scan::literal(text, start, b"null"),
    }
}
