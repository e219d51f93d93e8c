//! Record stores: per-session sealed shards.
//!
//! A record store is a directory where agent sessions append their records.
//! Each session writes to its current *shard*, `<session>.<token>.jsonl`
//! (one record per line) or `<session>.<token>.jsonseq` (packed: the file
//! starts with U+001E and every record is followed by one), where the token
//! is 8 random lowercase hex digits. Every append is a single `write(2)` of
//! the record and its separator on an `O_APPEND` descriptor; nothing is
//! ever rewritten. When the rotation rule ([`rotation::reusable`]) says the
//! current shard is sealed, the writer starts a new one.
//!
//! The writer's state (which shard, at which size) is a hint kept under
//! the warehouse's `.pchronicle/shards/`, replaced by temp + rename. The
//! warehouse is the nearest directory at or above the store that holds a
//! `.pchronicle/` directory, or the store itself. A [`Writer`] keeps the
//! state in memory between appends and writes the hint lazily.
//!
//! Legacy `<session>.jsonl` files (no token) are read like any record file
//! and never appended to. Readers need nothing from here: a shard is a
//! record file ([`crate::records`]).
//!
//! Shard names and session ids are in `names.rs`, the writer and its hint
//! in `writer.rs`, the rule in [`rotation`]; this file validates records
//! and appends a batch of them.

pub mod git;
pub mod rotation;

mod names;
mod writer;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, ErrorCode, Result};
use crate::sidecar::status::InvalidatedSidecar;
use rotation::Sealed;

pub use names::{SessionId, ShardFormat, ShardName};
pub use writer::{Appended, HINT_INTERVAL, Writer, state_path};

/// Setting this to `1` makes writers pack by default.
pub const PACKED_ENV: &str = "PCHRONICLE_PACKED_RECORDS";

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_BYTES: usize = 200;

use crate::records::RECORD_SEPARATOR;

/// Checks that `record` is one JSON value on one line; returns it without
/// surrounding whitespace.
pub fn validate_record(record: &[u8]) -> Result<&[u8]> {
    let trimmed = record.trim_ascii();
    if trimmed.is_empty() {
        return Err(Error::new(ErrorCode::RecordInvalid, "the record is empty"));
    }
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(trimmed) {
        return Err(Error::new(
            ErrorCode::RecordInvalid,
            format!("the record is not one JSON value: {e}"),
        ));
    }
    if trimmed.contains(&b'\n') {
        return Err(Error::new(
            ErrorCode::RecordInvalid,
            "the record spans several lines; write it on one line",
        ));
    }
    Ok(trimmed)
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppendReport {
    /// The shard the last record went to.
    pub shard: PathBuf,
    pub format: ShardFormat,
    pub records: usize,
    pub bytes: u64,
    /// Shards this call started (the rule sealed the previous one).
    pub new_shards: Vec<PathBuf>,
    /// Sidecar indexes the appends made stale, with the command that
    /// rebuilds each; empty unless an index was built over the shard while
    /// this call was appending to it.
    pub invalidated_sidecars: Vec<InvalidatedSidecar>,
}

/// Appends one record to `session`'s current shard in `store`.
pub fn append_record(store: &Path, session: &str, record: &[u8]) -> Result<AppendReport> {
    append_records(store, session, &[record], ShardFormat::choose(false))
}

/// Appends records, in order, each with its own `write(2)`. Every record
/// is checked first: if one is not valid JSON, nothing is written.
pub fn append_records(
    store: &Path,
    session: &str,
    records: &[&[u8]],
    format: ShardFormat,
) -> Result<AppendReport> {
    let records = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            validate_record(r).map_err(|mut e| {
                if records.len() > 1 {
                    e.message = format!("record {}: {}", i + 1, e.message);
                }
                e
            })
        })
        .collect::<Result<Vec<&[u8]>>>()?;
    let mut writer = Writer::open(store, session, format)?;
    let mut report = AppendReport {
        shard: PathBuf::new(),
        format,
        records: 0,
        bytes: 0,
        new_shards: Vec::new(),
        invalidated_sidecars: Vec::new(),
    };
    for record in records {
        let appended = writer.append(record)?;
        if appended.started {
            report.new_shards.push(appended.shard.clone());
        }
        for sidecar in appended.invalidated {
            if !report.invalidated_sidecars.contains(&sidecar) {
                report.invalidated_sidecars.push(sidecar);
            }
        }
        report.shard = appended.shard;
        report.records += 1;
        report.bytes += appended.written;
    }
    writer.flush()?;
    Ok(report)
}

/// Why the rule sealed a shard, for logs and tests.
pub fn describe(sealed: Sealed) -> &'static str {
    match sealed {
        Sealed::NoState => "no usable writer state",
        Sealed::Missing => "the shard is gone or replaced",
        Sealed::SizeMoved => "the shard's size is not the one the writer left",
        Sealed::Full => "the shard reached 2 MiB",
        Sealed::FormatChanged => "the shard's format is not the one asked for",
        Sealed::Indexed => "a sidecar index covers the shard",
        Sealed::HeadMoved => "git's HEAD is on another branch or commit",
        Sealed::ReflogMoved => "git's HEAD moved (its reflog or ORIG_HEAD changed)",
        Sealed::IndexLocked => "git's index is locked (a stage or commit is under way)",
        Sealed::InGitIndex => "git's index holds the shard (staged or committed)",
        Sealed::GitUnreadable => "git's files could not be read",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_must_be_one_json_value_on_one_line() {
        assert_eq!(validate_record(b"  {\"a\":1}\r\n").unwrap(), b"{\"a\":1}");
        assert_eq!(validate_record(b"42").unwrap(), b"42");
        for bad in [
            &b""[..],
            b"   ",
            b"{",
            b"{} {}",
            b"{\"a\":\n1}",
            b"\x1e{}",
            b"nul",
        ] {
            assert_eq!(
                validate_record(bad).unwrap_err().code,
                ErrorCode::RecordInvalid,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
