//! The shapes `list` and `open` return, and their JSON form.
//!
//! These types are the contract with tooling: `pchronicle ls --json`,
//! `ls --sources --json`, `stats --json` and the mount's `.stats` and
//! `.sources` files are their serde serialisations, documented field by
//! field in `docs/cli.md`. Every field is always present (absent values
//! are `null`), so a consumer never has to guess the shape. Nothing in them
//! depends on where the warehouse is: paths are relative to the listed or
//! opened path, so the CLI and a mount give byte-identical output.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::error::ErrorCode;
use crate::records::timestamp::{self, Micros};
use crate::records::{RecordFormat, RecordStats};
use crate::sidecar::format::KeyType;
use crate::sidecar::status::Freshness;

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A navigational directory (including one with a branch manifest).
    Directory,
    /// A dataset leaf: opaque, its interior is never listed.
    Dataset,
    /// A regular file.
    File,
}

/// A condition met while answering that did not stop the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    pub code: ErrorCode,
    /// Relative to the listed or opened path (`.` for the path itself).
    pub path: String,
    pub message: String,
}

/// Where a dataset's counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StatsOrigin {
    /// A manifest whose fingerprint matches the physical revision.
    Manifest,
    /// The data was scanned and the manifest rewritten to match.
    Repaired,
    /// The data was scanned; the manifest is missing or stale and was not
    /// rewritten (repairs disabled or the write failed).
    Scan,
    /// The manifest's stats as written, unchecked: the format cannot be
    /// opened by this build, or its revision could not be read.
    Unverified,
    /// No counts could be had.
    Unavailable,
    /// Not counted: the source was gathered to read its records, and its
    /// counts were not in the count cache.
    Uncounted,
    /// Being counted in the background (a large record file a daemon met
    /// for the first time): no counts yet; a later answer has them.
    Counting,
}

/// A timestamp, serialised as RFC 3339 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub Micros);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&timestamp::format_rfc3339(self.0))
    }
}

/// Counts as reported: `None` where they could not be had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub record_count: Option<u64>,
    pub failed_count: Option<u64>,
    pub min_timestamp: Option<Timestamp>,
    pub max_timestamp: Option<Timestamp>,
}

impl From<RecordStats> for Counts {
    fn from(s: RecordStats) -> Self {
        Counts {
            record_count: Some(s.record_count),
            failed_count: Some(s.failed_count),
            min_timestamp: s.min_timestamp.map(Timestamp),
            max_timestamp: s.max_timestamp.map(Timestamp),
        }
    }
}

/// A leaf's preview: what `list` shows for a dataset without opening it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatasetPreview {
    pub format: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub fingerprint: Option<String>,
    /// True when the counts are known to describe the current physical
    /// revision (origin `manifest`, `repaired` or `scan`); false when they
    /// are a manifest's unchecked word or missing.
    pub trusted: bool,
    pub stats_origin: StatsOrigin,
}

/// One child in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Entry {
    Directory {
        name: String,
    },
    Dataset {
        name: String,
        /// Boxed: a listing holds mostly files and directories, and an
        /// entry is as large as its largest kind (152 bytes unboxed, 40 so).
        #[serde(flatten)]
        preview: Box<DatasetPreview>,
    },
    File {
        name: String,
        size: u64,
        /// The record format, or `null` when the file is not a record source.
        format: Option<RecordFormat>,
    },
}

impl Entry {
    pub fn name(&self) -> &str {
        match self {
            Entry::Directory { name } | Entry::Dataset { name, .. } | Entry::File { name, .. } => {
                name
            }
        }
    }

    pub fn kind(&self) -> NodeKind {
        match self {
            Entry::Directory { .. } => NodeKind::Directory,
            Entry::Dataset { .. } => NodeKind::Dataset,
            Entry::File { .. } => NodeKind::File,
        }
    }
}

/// The result of `list(path)`: one level, like `ls`. For a leaf or a file
/// it holds that one node, named `.`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listing {
    pub kind: NodeKind,
    pub entries: Vec<Entry>,
    pub truncated: bool,
    pub warnings: Vec<Warning>,
}

/// Whether a source is a leaf or a record file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Dataset,
    File,
}

/// One member of a Snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// Path relative to the opened path; `.` when the opened path is itself
    /// the source.
    #[serde(rename = "_file_")]
    pub file: String,
    pub kind: SourceKind,
    /// Leaf format (`storyline/v1`) or record format (`jsonl`: one of the
    /// names the program knows, so a record file's takes no allocation).
    pub format: Cow<'static, str>,
    #[serde(flatten)]
    pub counts: Counts,
    /// Leaves: the revision fingerprint. Files: `file:<size>:<mtime_ns>`.
    pub fingerprint: Option<Fingerprint>,
    /// As in [`DatasetPreview`]; a record file counted from its content is
    /// trusted.
    pub trusted: bool,
    pub stats_origin: StatsOrigin,
    /// Files: size in bytes. Datasets: `null`.
    pub size: Option<u64>,
    /// Hive-style `key=value` attributes of the directories between the
    /// opened path and this source.
    pub path_attrs: BTreeMap<String, String>,
    /// How a read of the past cut this source (`version`: a leaf pinned to
    /// an older revision); absent when it is read as it is now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<&'static str>,
}

/// What a source is as read: a leaf's revision as its store names it, or
/// a record file's size and modification time (written
/// `file:<size>:<mtime_ns>`, and kept as numbers: a walk makes one for
/// every file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fingerprint {
    Revision(String),
    File { size: u64, mtime_ns: i64 },
}

impl Fingerprint {
    /// A leaf's revision, as its store reads it back.
    pub fn revision(&self) -> Option<&str> {
        match self {
            Fingerprint::Revision(text) => Some(text),
            Fingerprint::File { .. } => None,
        }
    }

    /// The fingerprint as written, taken.
    pub fn into_string(self) -> String {
        match self {
            Fingerprint::Revision(text) => text,
            file => file.to_string(),
        }
    }

    /// The fingerprint as written.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Fingerprint::Revision(text) => Cow::Borrowed(text),
            Fingerprint::File { .. } => Cow::Owned(self.to_string()),
        }
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fingerprint::Revision(text) => f.write_str(text),
            Fingerprint::File { size, mtime_ns } => write!(f, "file:{size}:{mtime_ns}"),
        }
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The result of `open(path)`: a frozen set of sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub kind: NodeKind,
    /// Ordered by `_file_`.
    pub sources: Vec<Source>,
    pub truncated: bool,
    pub warnings: Vec<Warning>,
    /// The sidecar indexes of the record files in the snapshot (and orphans
    /// beside them), ordered by index path. Not part of `.sources`.
    pub indexes: Vec<IndexInfo>,
}

/// A sidecar index found under the opened path, and whether it still
/// describes its record file (see [`Freshness`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexInfo {
    /// The record file, relative to the opened path (`.` for the opened
    /// record file itself).
    pub file: String,
    /// The index file, relative to the opened path (beside `file`).
    pub index: String,
    /// The ordered key; empty when the index file cannot be read.
    pub key: Vec<String>,
    pub types: Vec<KeyType>,
    pub rows: u64,
    pub state: Freshness,
}

/// Per-format totals inside [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FormatTotals {
    pub sources: u64,
    pub record_count: u64,
    pub failed_count: u64,
}

/// Sources being counted that `.stats` names, at most.
pub const COUNTING_LISTED: usize = 64;

/// A Snapshot rolled up: the content of `.stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub kind: NodeKind,
    /// The format of a leaf or record file; `null` for a directory.
    pub format: Option<String>,
    pub sources: u64,
    pub datasets: u64,
    pub files: u64,
    pub record_count: u64,
    pub failed_count: u64,
    pub min_timestamp: Option<Timestamp>,
    pub max_timestamp: Option<Timestamp>,
    /// Sources whose counts are not known to match their data
    /// (`unverified` or `unavailable`).
    pub untrusted_sources: u64,
    /// Sources with no counts at all (left out of the totals), those
    /// being counted aside.
    pub unreadable_sources: u64,
    /// Sources still being counted in the background (left out of the
    /// totals until they are counted; see `counting`).
    pub counting_sources: u64,
    /// The `_file_` of the first [`COUNTING_LISTED`] of them.
    pub counting: Vec<String>,
    pub formats: BTreeMap<String, FormatTotals>,
    /// As in [`Snapshot::indexes`].
    pub indexes: Vec<IndexInfo>,
    pub truncated: bool,
    pub warnings: Vec<Warning>,
}

impl Snapshot {
    /// Whether every source's counts are final: none is being counted,
    /// uncounted or unreadable (so what is made of it changes only with
    /// the files).
    pub fn settled(&self) -> bool {
        self.sources.iter().all(|s| {
            !matches!(
                s.stats_origin,
                StatsOrigin::Counting | StatsOrigin::Uncounted | StatsOrigin::Unavailable
            )
        })
    }

    /// Rolls the sources up. Unreadable sources add nothing to the totals.
    pub fn stats(&self) -> Stats {
        let mut totals = StatsBuilder::new(self.kind);
        for source in &self.sources {
            totals.add(source);
        }
        totals.finish(self.truncated, self.warnings.clone(), self.indexes.clone())
    }
}

/// Rolls sources up one at a time, so a walk can total a directory without
/// holding every source.
#[derive(Debug, Clone)]
pub struct StatsBuilder {
    stats: Stats,
}

impl StatsBuilder {
    pub fn new(kind: NodeKind) -> StatsBuilder {
        StatsBuilder {
            stats: Stats {
                kind,
                format: None,
                sources: 0,
                datasets: 0,
                files: 0,
                record_count: 0,
                failed_count: 0,
                min_timestamp: None,
                max_timestamp: None,
                untrusted_sources: 0,
                unreadable_sources: 0,
                counting_sources: 0,
                counting: Vec::new(),
                formats: BTreeMap::new(),
                indexes: Vec::new(),
                truncated: false,
                warnings: Vec::new(),
            },
        }
    }

    /// Adds one source. Unreadable sources add nothing to the totals.
    pub fn add(&mut self, source: &Source) {
        let stats = &mut self.stats;
        if stats.sources == 0 && stats.kind != NodeKind::Directory {
            stats.format = Some(source.format.to_string());
        }
        stats.sources += 1;
        match source.kind {
            SourceKind::Dataset => stats.datasets += 1,
            SourceKind::File => stats.files += 1,
        }
        if source.stats_origin == StatsOrigin::Counting {
            stats.counting_sources += 1;
            if stats.counting.len() < COUNTING_LISTED {
                stats.counting.push(source.file.clone());
            }
            stats
                .formats
                .entry(source.format.to_string())
                .or_default()
                .sources += 1;
            return;
        }
        if !source.trusted {
            stats.untrusted_sources += 1;
        }
        let totals = match stats.formats.get_mut(&*source.format) {
            Some(totals) => totals,
            None => stats.formats.entry(source.format.to_string()).or_default(),
        };
        totals.sources += 1;
        let Some(records) = source.counts.record_count else {
            stats.unreadable_sources += 1;
            return;
        };
        let failed = source.counts.failed_count.unwrap_or(0);
        // Counts come from manifests others write: a sum saturates rather
        // than overflowing.
        totals.record_count = totals.record_count.saturating_add(records);
        totals.failed_count = totals.failed_count.saturating_add(failed);
        stats.record_count = stats.record_count.saturating_add(records);
        stats.failed_count = stats.failed_count.saturating_add(failed);
        stats.min_timestamp = min_opt(stats.min_timestamp, source.counts.min_timestamp);
        stats.max_timestamp = max_opt(stats.max_timestamp, source.counts.max_timestamp);
    }

    pub fn finish(
        mut self,
        truncated: bool,
        warnings: Vec<Warning>,
        indexes: Vec<IndexInfo>,
    ) -> Stats {
        self.stats.truncated = truncated;
        self.stats.warnings = warnings;
        self.stats.indexes = indexes;
        self.stats
    }
}

fn min_opt(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The exact text of the JSON outputs, shared by the CLI and the mount so
/// the two are byte-identical.
impl Listing {
    /// Pretty JSON plus a final newline (`pchronicle ls --json`).
    pub fn to_json(&self) -> String {
        pretty_json(self)
    }
}

impl Stats {
    /// Pretty JSON plus a final newline (`stats --json`, `.stats`).
    pub fn to_json(&self) -> String {
        pretty_json(self)
    }
}

impl Snapshot {
    /// JSON Lines, one source per line (`ls --sources --json`, `.sources`).
    pub fn sources_jsonl(&self) -> String {
        self.sources_jsonl_within(usize::MAX)
            .expect("no text is longer than usize::MAX")
    }

    /// [`sources_jsonl`](Self::sources_jsonl) when it takes at most `max`
    /// bytes; `None`, with no more made than that, when it would take more.
    pub fn sources_jsonl_within(&self, max: usize) -> Option<String> {
        let mut out = String::new();
        for source in &self.sources {
            // A Source holds only strings, integers, booleans and string
            // maps, which always serialize.
            out.push_str(&serde_json::to_string(source).expect("a Source always serializes"));
            out.push('\n');
            if out.len() > max {
                return None;
            }
        }
        Some(out)
    }
}

/// Pretty JSON plus a final newline: the text of every pretty JSON output,
/// the answers above (`--json`, `.stats`) and the CLI's reports alike.
///
/// The answers always serialize (strings, integers, booleans, string
/// maps). A report may hold a path, which does not serialize when it is
/// not UTF-8; such a report prints as an empty document, not a panic.
pub fn pretty_json<T: Serialize>(value: &T) -> String {
    let mut out = serde_json::to_string_pretty(value).unwrap_or_default();
    out.push('\n');
    out
}
