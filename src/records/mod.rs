//! Record files: how records are laid out in loose files and shards, and
//! how they are counted.
//!
//! A record file is a stream of JSON records. Line files (`.jsonl`,
//! `.ndjson`) and packed shards (`.jsonseq`) are cut into segments on `\n`
//! and U+001E alike, in one place (`segments`); a `.json` file is one
//! document (`document`). Every non-blank segment is a record, and one
//! that is not valid JSON is a *failed* record: counted and skipped, never
//! fatal. Counting streams, so memory stays constant however large a file
//! is.
//!
//! - `format`: which names are record files, in which format;
//! - `segments`: the separator and the splitting of a stream into
//!   segments, including those too large to buffer;
//! - `count`: counting a file's records, failures and timestamp span;
//! - `parallel`: counting one large file in ranges on several threads;
//! - `steps`: counting one file a bounded step at a time, resumable (the
//!   background count of a file too large to count while someone waits);
//! - `document`: `.json` documents;
//! - [`read`]: reading the records back out, each as stored, resumable
//!   after any record;
//! - `validate`: the streaming validator for records too large for the
//!   scanner's buffer, and for documents;
//! - [`scan`]: the fast validating scanner every buffered record goes
//!   through;
//! - `structural`: counting many buffered records in one vector pass,
//!   where the CPU has AVX2 (the scanner's verdicts, faster);
//! - [`timestamp`]: the timestamps records carry.

mod count;
mod document;
mod format;
mod parallel;
pub mod read;
mod read_parallel;
pub mod scan;
mod segments;
mod steps;
pub(crate) mod structural;
pub mod timestamp;
mod validate;

pub use count::{
    CountingLater, RecordStats, count_file, count_open, count_segments, is_counting_later,
};
pub use document::split_json_array;
pub use format::RecordFormat;
pub(crate) use parallel::{RangeReader, cut_points, threads_for};
pub(crate) use segments::split_run;
pub use segments::{
    OversizeSegment, ProbedSegment, RECORD_SEPARATOR, SegmentVisitor, for_each_segment,
    for_each_segment_sized,
};
pub use steps::{CountProgress, count_step};
pub use validate::probe_stream;
