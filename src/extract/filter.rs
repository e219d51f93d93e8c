//! The per-record checks of a plan's selection, between a source's reader
//! and what consumes the records selected.

use std::io::{self, Read};
use std::ops::ControlFlow;

use super::{Position, Selected, Selection};
use crate::catalog::{Source, SourceKind};
use crate::records::read::{Body, Record, RecordSink, Resume, Span};

/// Applies the per-record filters and the limit.
pub(super) struct Filter<'a> {
    pub(super) selection: &'a Selection,
    pub(super) consumer: &'a mut dyn Selected,
    pub(super) source: Option<&'a Source>,
    pub(super) written: u64,
    pub(super) index: usize,
    /// The `_file_` of the last record's file.
    pub(super) named: Option<Named>,
}

/// A record file's `_file_` and whether it passes the glob.
pub(super) struct Named {
    index: usize,
    inner: String,
    file: String,
    passes: bool,
}

impl RecordSink for Filter<'_> {
    fn wants_landmarks(&self) -> bool {
        self.consumer.wants_landmarks()
    }

    fn record(&mut self, record: Record<'_>, next: Resume) -> io::Result<ControlFlow<()>> {
        let Some(source) = self.source else {
            return Ok(ControlFlow::Break(()));
        };
        let wanted = (!record.failed || self.selection.failed)
            && self.selection.in_window(record.timestamp)
            && (source.kind != SourceKind::File || self.selection.before_cut(record.timestamp));
        if !wanted {
            return Ok(ControlFlow::Continue(()));
        }
        self.name(source, record.file);
        let named = self.named.as_ref().expect("named just above");
        if !named.passes {
            return Ok(ControlFlow::Continue(()));
        }
        let after = Position {
            source: self.index,
            within: next,
        };
        // `--contains` looks into the stored bytes; a record too large to
        // hold is read whole once, to look and to hand on.
        let flow = match (&self.selection.contains, record.body) {
            (None, body) => {
                let record = Record { body, ..record };
                self.consumer.selected(source, &named.file, record, after)?
            }
            (Some(_), Body::Bytes(bytes)) => {
                if !self.selection.holds(bytes) {
                    return Ok(ControlFlow::Continue(()));
                }
                let record = Record {
                    body: Body::Bytes(bytes),
                    ..record
                };
                self.consumer.selected(source, &named.file, record, after)?
            }
            (Some(_), Body::Stream { reader, len }) => {
                let held = read_whole(reader, len)?;
                if held.is_empty() || !self.selection.holds(&held) {
                    return Ok(ControlFlow::Continue(()));
                }
                let record = Record {
                    body: Body::Bytes(&held),
                    ..record
                };
                self.consumer.selected(source, &named.file, record, after)?
            }
        };
        self.written += 1;
        Ok(self.went_on(flow))
    }

    /// A span needs no check of its own records when nothing but the
    /// limit is asked (its records are valid, and a span comes only when
    /// their times and files were not asked for): then it goes on whole,
    /// cut to the limit. Anything else is checked record by record.
    fn span(&mut self, span: &Span<'_>) -> io::Result<ControlFlow<()>> {
        let Some(source) = self.source else {
            return Ok(ControlFlow::Break(()));
        };
        let selection = self.selection;
        let left = selection
            .limit
            .map_or(u64::MAX, |l| l.saturating_sub(self.written));
        if selection.contains.is_some()
            || selection.has_window()
            || selection.file.is_some()
            || source.kind == SourceKind::File
            || left == 0
        {
            return span.each(|record, next| self.record(record, next));
        }
        let index = self.index;
        self.name(source, "");
        let named = self.named.as_ref().expect("named just above");
        let span = span.prefix(usize::try_from(left).unwrap_or(usize::MAX));
        let file = &named.file;
        let flow = self.consumer.selected_span(source, file, &span, index)?;
        self.written += span.len() as u64;
        Ok(self.went_on(flow))
    }
}

impl Filter<'_> {
    /// Keeps in `named` the `_file_` of a record from `inner` (the file
    /// inside the source) and whether it passes the glob. Consecutive records mostly share
    /// their file: this is worked out once per run of them.
    fn name(&mut self, source: &Source, inner: &str) {
        if self
            .named
            .as_ref()
            .is_none_or(|n| n.index != self.index || !same_text(&n.inner, inner))
        {
            let file = match (source.file.as_str(), inner) {
                (source, "") => source.to_string(),
                (".", inner) => inner.to_string(),
                (source, inner) => format!("{source}/{inner}"),
            };
            self.named = Some(Named {
                index: self.index,
                inner: inner.to_string(),
                passes: self.selection.file_matches(&file),
                file,
            });
        }
    }

    /// Whether to go on after a consumer said `flow`: not past the limit.
    fn went_on(&self, flow: ControlFlow<()>) -> ControlFlow<()> {
        if flow.is_break()
            || self
                .selection
                .limit
                .is_some_and(|limit| self.written >= limit)
        {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// Whether two short texts are equal: the record's file name, compared
/// once per record. (`==` calls the C library's `memcmp` even for two
/// empty texts; not calling it took a third off `pchronicle cat` of a
/// leaf of short records, whose file names a plain listing leaves empty.)
fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// Records larger than this are not looked into by `--contains` (they
/// never match it).
const CONTAINS_AT_MOST: u64 = 256 << 20;

/// A streamed record's bytes, whole (empty past [`CONTAINS_AT_MOST`]).
fn read_whole(reader: &mut dyn io::Read, len: u64) -> io::Result<Vec<u8>> {
    if len > CONTAINS_AT_MOST {
        return Ok(Vec::new());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    reader.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}
