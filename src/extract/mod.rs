//! Records out: the records of `open(path)` as JSON Lines.
//!
//! A [`Plan`] is a Snapshot narrowed by a [`Selection`]: the sources that
//! may hold a wanted record, in `_file_` order, found without reading any
//! record file (counts come from the count cache or a manifest when they
//! are known, and are not computed otherwise). [`Plan::run`] reads those
//! sources in order, each through its own reader (a record file through
//! [`crate::records::read`], a leaf through its store), checks every
//! record against the selection, and writes one line per record:
//!
//! - a valid record exactly as stored, when its stored bytes are one line
//!   (a line of a JSONL file, a packed segment, a `record` column value or
//!   an `_offload/` object); a record stored over several lines (an
//!   element of a pretty-printed `.json` array) has each line break
//!   replaced by a space, its only change;
//! - with `failed`, a failed record as one object naming where it is and
//!   holding its raw text;
//! - with [`Shape::Annotated`], each record wrapped with its `_file_`,
//!   line, path attributes and timestamp.
//!
//! Memory stays bounded whatever the sizes: records stream through, and
//! one too large to buffer is copied in pieces. Each record written comes
//! with the [`Position`] to resume after it, which is how the mount's
//! `.records` serves a read at any offset without starting over
//! ([`stream`]).
//!
//! A `_file_` of a record is relative to the opened path: a record file
//! source's own `_file_`, or for a leaf its `_file_` joined with the file
//! inside it (a storyline generation's file, a compact-jsonl row's
//! `_file_` column). Inside a leaf, records come in stored order.

mod filter;
mod output;
pub mod runs;
pub mod select;
pub mod stream;

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::catalog::{Catalog, Fingerprint, Source, SourceKind, Warning};
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordFormat;
use crate::records::read::{self, Record, Resume, Span};
use filter::Filter;
use output::Lines;
pub use select::{Glob, Selection};

/// What each record written looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// The record as stored.
    #[default]
    Plain,
    /// `{"_file_", "line", "path_attrs", "timestamp", "record"}`.
    Annotated,
}

/// A place in a plan's output: which source, and where in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    pub source: usize,
    pub within: Resume,
}

impl Position {
    /// The position after record `i` of `span`, of source number `source`.
    pub fn after(source: usize, span: &Span<'_>, i: usize) -> Position {
        Position {
            source,
            within: span.next(i),
        }
    }
}

/// Receives a plan's output: the bytes through `Write`, and after each
/// whole record (its `\n` included) a call to `record_end`.
pub trait Output: Write {
    /// `after` resumes after the record just written.
    fn record_end(&mut self, after: Position) -> io::Result<ControlFlow<()>>;

    /// Writes each record of `span` (of source number `index`), none of
    /// which holds a line break, as a line, with its `record_end`.
    fn span_lines(&mut self, span: &Span<'_>, index: usize) -> io::Result<ControlFlow<()>> {
        for i in 0..span.len() {
            self.write_all(span.bytes(i))?;
            self.write_all(b"\n")?;
            if self.record_end(Position::after(index, span, i))?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// `ls --sources`: the Snapshot of `rel` with only the sources
/// `selection` may match (the mount's `.sources` unfiltered).
pub fn sources(
    catalog: &Catalog,
    rel: &Path,
    selection: &Selection,
) -> Result<crate::catalog::Snapshot> {
    // Under `--as-of` the record files are counted as cut (see
    // `Catalog::open_as_of`); the other filters then keep or leave out
    // whole (cut) sources, as they do without it.
    let mut snapshot = selection.narrow(opened(catalog, rel, selection, false)?);
    if selection.contains.is_some() {
        // A source is kept when one of its records holds the text: each
        // is read up to its first such record.
        let mut first = selection.clone();
        first.limit = Some(1);
        let plan = Plan::of_snapshot(catalog, rel, snapshot.clone(), first, Shape::Plain)?;
        let mut holding = std::collections::BTreeSet::new();
        for (i, source) in plan.sources().iter().enumerate() {
            let mut seen = Seen(false);
            let _ =
                plan.part(|j, _| j == i)
                    .visit(catalog, Position::default(), true, &mut seen)?;
            if seen.0 {
                holding.insert(source.file.clone());
            }
        }
        snapshot.sources.retain(|s| holding.contains(&s.file));
    }
    Ok(snapshot)
}

/// The Snapshot a selection reads: of `rel` now (`reading`: for a reader
/// of its records, see [`Catalog::open_for_reading`]), or of the leaf
/// `rel` at the selection's version.
fn opened(
    catalog: &Catalog,
    rel: &Path,
    selection: &Selection,
    reading: bool,
) -> Result<crate::catalog::Snapshot> {
    match (&selection.version, selection.as_of) {
        (Some(version), _) => catalog.open_version(rel, version),
        (None, Some(at)) => catalog.open_as_of(rel, at, reading),
        (None, None) if reading => catalog.open_for_reading(rel),
        (None, None) => catalog.open(rel),
    }
}

/// Whether a record was selected.
struct Seen(bool);

impl Selected for Seen {
    fn selected(
        &mut self,
        _source: &Source,
        _file: &str,
        _record: Record<'_>,
        _after: Position,
    ) -> io::Result<ControlFlow<()>> {
        self.0 = true;
        Ok(ControlFlow::Break(()))
    }
}

/// `stats`: `rel` rolled up, over only the sources `selection` may match
/// (whole sources: one that overlaps the time window counts with all its
/// records).
pub fn stats(
    catalog: &Catalog,
    rel: &Path,
    selection: &Selection,
) -> Result<crate::catalog::Stats> {
    if selection.narrows() || selection.contains.is_some() || selection.reads_past() {
        Ok(sources(catalog, rel, selection)?.stats())
    } else {
        catalog.stats(rel)
    }
}

/// The sources of one read, narrowed by a selection.
pub struct Plan {
    /// The opened path, relative to the catalog's root.
    base: PathBuf,
    sources: Vec<Source>,
    selection: Selection,
    shape: Shape,
    warnings: Vec<Warning>,
    /// The Snapshot stopped at a bound: some sources are missing.
    truncated: bool,
}

impl Plan {
    /// The plan for `rel`: its Snapshot (record files are not counted for
    /// it) with every source the selection cannot match left out.
    /// A leaf of a format this build cannot read is left out with a
    /// warning (`PCHRONICLE_FORMAT_UNSUPPORTED`), or refused when it is
    /// the opened path itself.
    pub fn new(catalog: &Catalog, rel: &Path, selection: Selection, shape: Shape) -> Result<Plan> {
        // A catalog frozen at a time cuts every read at it.
        let selection = Selection {
            as_of: selection.as_of.or(catalog.frozen_at()),
            ..selection
        };
        let snapshot = opened(catalog, rel, &selection, true)?;
        Plan::of_snapshot(catalog, rel, snapshot, selection, shape)
    }

    /// The plan over the Snapshot `snapshot` of `rel` (see [`Plan::new`]).
    fn of_snapshot(
        catalog: &Catalog,
        rel: &Path,
        snapshot: crate::catalog::Snapshot,
        selection: Selection,
        shape: Shape,
    ) -> Result<Plan> {
        let total = snapshot.sources.len();
        let truncated = snapshot.truncated;
        let mut warnings = snapshot.warnings;
        let mut sources = Vec::with_capacity(total);
        for source in snapshot.sources {
            let readable = source.kind == SourceKind::File
                || catalog.stores().by_format(&source.format).is_some();
            if !readable {
                let message = format!("this build cannot read {} leaves", source.format);
                if source.file == "." {
                    return Err(Error::at(ErrorCode::FormatUnsupported, rel, message));
                }
                // The Snapshot already warned that the format cannot be
                // opened; say once more only what that means here.
                warnings
                    .retain(|w| !(w.code == ErrorCode::FormatUnsupported && w.path == source.file));
                warnings.push(Warning {
                    code: ErrorCode::FormatUnsupported,
                    path: source.file.clone(),
                    message: format!("{message}; its records are left out"),
                });
            } else if selection.may_match(&source) {
                sources.push(source);
            }
        }
        Ok(Plan {
            base: rel.to_path_buf(),
            sources,
            selection,
            shape,
            warnings,
            truncated,
        })
    }

    /// The plan reading `sources` of `base` (as another plan listed
    /// them: a worker is handed the sources of its part of a read).
    pub fn of_sources(
        base: PathBuf,
        sources: Vec<Source>,
        selection: Selection,
        shape: Shape,
    ) -> Plan {
        Plan {
            base,
            sources,
            selection,
            shape,
            warnings: Vec::new(),
            truncated: false,
        }
    }

    /// The opened path, relative to the catalog's root.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// How each record is written.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether the Snapshot behind the plan stopped at a bound.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The sources that will be read, in order.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// What the Snapshot warned about (unreadable directories, bounds).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Replaces the selection the records are checked against (the
    /// sources stay as they are: narrow them first with [`Plan::part`]).
    pub fn set_selection(&mut self, selection: Selection) {
        self.selection = selection;
    }

    /// Writes the selected records from `from` on into `out`, stopping
    /// after `selection.limit` records or when `out` says so. A source
    /// that cannot be read fails the run with its path (the records before
    /// it are already written).
    pub fn run(
        &self,
        catalog: &Catalog,
        from: Position,
        out: &mut dyn Output,
    ) -> Result<ControlFlow<()>> {
        let mut lines = Lines {
            shape: self.shape,
            out,
        };
        self.visit(catalog, from, true, &mut lines)
    }

    /// Hands every selected record from `from` on to `consumer`, stopping
    /// after `selection.limit` records or when it says so. Without
    /// `bodies`, a store may leave the records' bytes out (the consumer
    /// then sees them empty).
    pub fn visit(
        &self,
        catalog: &Catalog,
        from: Position,
        bodies: bool,
        consumer: &mut dyn Selected,
    ) -> Result<ControlFlow<()>> {
        let mut filter = Filter {
            selection: &self.selection,
            consumer,
            source: None,
            written: 0,
            index: from.source,
            named: None,
        };
        for (index, source) in self.sources.iter().enumerate().skip(from.source) {
            let start = if index == from.source {
                from.within
            } else {
                Resume::default()
            };
            filter.index = index;
            filter.source = Some(source);
            let flow = self.read_source(catalog, source, start, bodies, &mut filter)?;
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The plan's sources in at most `n` groups of about equal bytes (a
    /// leaf counts by its records), each a list of source indexes in
    /// order: the parts of a read made on several threads.
    pub fn balanced(&self, n: usize) -> Vec<Vec<usize>> {
        let sources = &self.sources;
        let mut order: Vec<usize> = (0..sources.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(weight(&sources[i])));
        let mut groups: Vec<(u64, Vec<usize>)> = vec![(0, Vec::new()); n.min(sources.len())];
        for i in order {
            let lightest = groups
                .iter_mut()
                .min_by_key(|(w, _)| *w)
                .expect("at least one group when there is a source");
            lightest.0 += weight(&sources[i]).max(1);
            lightest.1.push(i);
        }
        groups
            .into_iter()
            .map(|(_, mut g)| {
                g.sort_unstable();
                g
            })
            .collect()
    }

    /// The plan's sources cut into at most `n` runs of neighbours of
    /// about equal bytes, in order: the parts of a read whose outputs are
    /// put end to end (`cat` keeps `_file_` order whoever reads a part).
    pub fn contiguous(&self, n: usize) -> Vec<Vec<usize>> {
        let total: u64 = self.sources.iter().map(|s| weight(s).max(1)).sum();
        let n = n.clamp(1, self.sources.len().max(1)) as u64;
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut current = Vec::new();
        let mut done = 0u64;
        for (i, source) in self.sources.iter().enumerate() {
            current.push(i);
            done += weight(source).max(1);
            // Cut where the running total passes the next n-th of the
            // whole, leaving at least one source for each later run.
            let cuts_made = groups.len() as u64 + 1;
            let left = self.sources.len() - i - 1;
            if cuts_made < n && done * n >= total * cuts_made && left as u64 >= n - cuts_made {
                groups.push(std::mem::take(&mut current));
            }
        }
        if !current.is_empty() {
            groups.push(current);
        }
        groups
    }

    /// This plan with only the sources `keep` says yes to (a query reads
    /// disjoint parts of a plan on several threads).
    pub fn part(&self, keep: impl Fn(usize, &Source) -> bool) -> Plan {
        Plan {
            base: self.base.clone(),
            sources: self
                .sources
                .iter()
                .enumerate()
                .filter(|(i, s)| keep(*i, s))
                .map(|(_, s)| s.clone())
                .collect(),
            selection: self.selection.clone(),
            shape: self.shape,
            warnings: Vec::new(),
            truncated: self.truncated,
        }
    }

    fn read_source(
        &self,
        catalog: &Catalog,
        source: &Source,
        start: Resume,
        bodies: bool,
        filter: &mut Filter<'_>,
    ) -> Result<ControlFlow<()>> {
        let path = if source.file == "." {
            self.base.clone()
        } else {
            self.base.join(&source.file)
        };
        match source.kind {
            SourceKind::File => {
                let format = RecordFormat::from_name(&source.file)
                    .or_else(|| {
                        path.file_name()
                            .and_then(|n| n.to_str())
                            .and_then(RecordFormat::from_name)
                    })
                    .ok_or_else(|| {
                        Error::at(ErrorCode::RecordFileUnreadable, &path, "not a record file")
                    })?;
                let (file, _) = catalog.open_file(&path)?;
                read::read_file(&file, format, "", start, source.size, filter)
                    .map_err(|e| Error::reading(ErrorCode::RecordFileUnreadable, &path, &e))
            }
            SourceKind::Dataset => {
                let store = catalog.stores().by_format(&source.format).ok_or_else(|| {
                    Error::at(
                        ErrorCode::FormatUnsupported,
                        &path,
                        format!("this build cannot read {} leaves", source.format),
                    )
                })?;
                let leaf = catalog.open_leaf(&path)?;
                let fingerprint = source.fingerprint.as_ref().and_then(Fingerprint::revision);
                let wanted = self.selection.wanted(bodies, filter.consumer.wants_heads());
                store.read_records(&leaf, fingerprint, start, &wanted, filter)
            }
        }
    }
}

/// What a source weighs when reads are shared out: its bytes (a leaf
/// counts by its records).
fn weight(source: &Source) -> u64 {
    match source.kind {
        SourceKind::File => source.size.unwrap_or(0),
        SourceKind::Dataset => source.counts.record_count.unwrap_or(0).saturating_mul(512),
    }
}

/// Hands the records of `span` (of source number `index`) to
/// `consumer` one at a time.
fn one_by_one<S: Selected + ?Sized>(
    consumer: &mut S,
    source: &Source,
    file: &str,
    span: &Span<'_>,
    index: usize,
) -> io::Result<ControlFlow<()>> {
    span.each(|record, next| {
        let after = Position {
            source: index,
            within: next,
        };
        consumer.selected(source, file, record, after)
    })
}

/// Receives the records a plan selects.
pub trait Selected {
    /// `file`: the record's `_file_`; `after` resumes after it.
    fn selected(
        &mut self,
        source: &Source,
        file: &str,
        record: Record<'_>,
        after: Position,
    ) -> io::Result<ControlFlow<()>>;

    /// Records held back to back (a [`Span`]) of source number `index`,
    /// every one selected; by default one by one to
    /// [`Selected::selected`].
    fn selected_span(
        &mut self,
        source: &Source,
        file: &str,
        span: &Span<'_>,
        index: usize,
    ) -> io::Result<ControlFlow<()>> {
        one_by_one(self, source, file, span, index)
    }

    /// Whether records should come with their landmarks (see
    /// [`RecordSink::wants_landmarks`](read::RecordSink::wants_landmarks)).
    fn wants_landmarks(&self) -> bool {
        false
    }

    /// Whether records should come with where they came from and their
    /// time (see [`Wanted::heads`](crate::records::read::Wanted::heads)).
    fn wants_heads(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: String, size: u64) -> Source {
        Source {
            file: name,
            kind: SourceKind::File,
            format: "jsonl".into(),
            counts: Default::default(),
            fingerprint: None,
            trusted: false,
            stats_origin: crate::catalog::StatsOrigin::Uncounted,
            size: Some(size),
            path_attrs: Default::default(),
            cut: None,
        }
    }

    fn plan_of(sizes: &[u64]) -> Plan {
        let sources = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| file(format!("f{i}"), size))
            .collect();
        Plan::of_sources(
            PathBuf::from("."),
            sources,
            Selection::default(),
            Shape::Plain,
        )
    }

    #[test]
    fn contiguous_runs_keep_the_order_and_hold_every_source_once() {
        let cases: [&[u64]; 7] = [
            &[],
            &[5],
            &[1, 1, 1, 1],
            &[100, 1, 1, 1, 1],
            &[1, 1, 1, 100],
            &[0, 0, 0],
            &[7, 3, 9, 1, 1, 4, 6, 2],
        ];
        for sizes in cases {
            let plan = plan_of(sizes);
            for n in 1..6 {
                let runs = plan.contiguous(n);
                assert!(runs.len() <= n, "{sizes:?} in {n}: {runs:?}");
                assert!(runs.iter().all(|r| !r.is_empty()), "{sizes:?}: {runs:?}");
                assert_eq!(runs.concat(), (0..sizes.len()).collect::<Vec<_>>());
            }
        }
        assert_eq!(
            plan_of(&[1, 1, 1, 1]).contiguous(2),
            [vec![0, 1], vec![2, 3]]
        );
        assert_eq!(
            plan_of(&[100, 1, 1, 1, 1]).contiguous(3),
            [vec![0], vec![1], vec![2, 3, 4]]
        );
    }
}
