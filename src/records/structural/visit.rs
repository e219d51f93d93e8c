//! What a walk of whole records makes of them besides checking them.
//!
//! The walk ([`super::walk`]) and the shapes it learns ([`super::shape`])
//! decide which records are valid; a [`Visit`] says which top-level
//! members it wants to see and takes each record's end. Counting wants
//! the timestamp fields ([`Counting`]); an index build wants its key's
//! fields and each record's place in the file (the sidecar's collector).
//! The visitor is a type parameter, so each use is compiled on its own.

use std::ops::Range;

use super::Structural;
use super::walk::escaped;
use crate::records::count::{RecordStats, count_segment};
use crate::records::scan::{self, Field, Member, RecordFacts, RecordScanner, Token};
use crate::records::timestamp::DayMemo;

/// What a walk over runs of whole records hands its visitor.
///
/// Ranges are into the window `b` the walk is on; `at` is where `b`
/// starts in the run. `any_backslash` says whether `b` holds a backslash
/// at all (else no string in it is escaped).
pub(crate) trait Visit {
    /// What a wanted member is to the visitor.
    type Field: Copy;

    /// Whether the top-level member whose key token (quotes included) is
    /// `b[key]` is wanted, and as what.
    fn field(&self, b: &[u8], key: Range<usize>, any_backslash: bool) -> Option<Self::Field>;

    /// A wanted member of the record being walked: its value's token (a
    /// string's marked escaped when it holds an escape) and range, a
    /// container's opening byte only. A key met again is handed again,
    /// later in the record; a record that turns out invalid still hands
    /// the members met before its fault, so notes are only final at
    /// [`record`](Self::record).
    fn member(
        &mut self,
        b: &[u8],
        any_backslash: bool,
        field: Self::Field,
        key: Range<usize>,
        token: Token,
        value: Range<usize>,
    );

    /// The record `b[segment]` (its separator excluded, never blank) was
    /// walked to its end: valid or not.
    fn record(&mut self, b: &[u8], segment: Range<usize>, at: usize, valid: bool);

    /// A segment longer than a window, at `at` in the run (its separator
    /// excluded; it may be blank), left to the visitor to check.
    fn long(&mut self, segment: &[u8], at: usize);
}

/// Counting's visitor: the records, the failed ones and the span of the
/// top-level `timestamp` / `ts`.
pub(super) struct Counting<'a> {
    pub(super) stats: &'a mut RecordStats,
    pub(super) scanner: &'a mut RecordScanner,
    pub(super) days: &'a mut DayMemo,
    /// What the record being walked said so far.
    pub(super) facts: RecordFacts,
}

impl Visit for Counting<'_> {
    type Field = Field;

    #[inline(always)]
    fn field(&self, b: &[u8], key: Range<usize>, any_backslash: bool) -> Option<Field> {
        let key = &b[key];
        if escaped(key, any_backslash) {
            return scan::fact_field(key, true).filter(|f| f.is_timestamp());
        }
        // A plain key is compared with the two names as they are written.
        match key {
            b"\"ts\"" => Some(Field::Ts),
            b"\"timestamp\"" => Some(Field::Timestamp),
            _ => None,
        }
    }

    #[inline(always)]
    fn member(
        &mut self,
        b: &[u8],
        any_backslash: bool,
        field: Field,
        key: Range<usize>,
        token: Token,
        value: Range<usize>,
    ) {
        let key = &b[key];
        let member = Member {
            key,
            key_escaped: escaped(key, any_backslash),
            token,
            value,
        };
        self.facts.note_field(field, &member, b, self.days);
    }

    #[inline(always)]
    fn record(&mut self, _: &[u8], _: Range<usize>, _: usize, valid: bool) {
        let facts = std::mem::take(&mut self.facts);
        if valid {
            self.stats.add_record(facts.timestamp());
        } else {
            self.stats.add_failed();
        }
    }

    fn long(&mut self, segment: &[u8], _: usize) {
        count_segment(self.scanner, segment, self.stats);
    }
}

impl Structural {
    /// Counts the records of `run`, whole segments each ended by a
    /// separator, into `stats`. Only called when
    /// [`available`](super::available) said so.
    pub(in crate::records) fn count_run(
        &mut self,
        run: &[u8],
        stats: &mut RecordStats,
        scanner: &mut RecordScanner,
    ) {
        let mut days = std::mem::take(&mut self.days);
        let mut counting = Counting {
            stats,
            scanner,
            days: &mut days,
            facts: RecordFacts::default(),
        };
        self.walk_run(run, &mut counting);
        self.days = days;
    }
}
