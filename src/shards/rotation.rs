//! When a writer may append to its last shard again: the rotation rule.
//!
//! Every writer asks [`reusable`] before every append; it is the only place
//! the rule lives. A writer reuses the shard its state names only while
//! all of these hold:
//!
//! 1. the state file parses and names a shard of this session;
//! 2. that shard exists, is the same file (device and inode), and has
//!    exactly the size the writer left — otherwise someone else appended
//!    (or a writer died mid-record, leaving a torn tail);
//! 3. it is under [`MAX_SHARD_BYTES`];
//! 4. its extension matches the packed setting;
//! 5. no sidecar index covers it ([`crate::sidecar::covers`]).
//!
//! Otherwise the writer starts a new shard, and the old one is sealed for
//! good: nothing in the rule can make a failed condition hold again for an
//! unchanged file, so once sealed, never appended to. The state is only a
//! hint: losing it, tearing it or shaping it wrongly costs a new shard,
//! never an append to a sealed one.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ShardFormat, ShardName};

/// A shard at or over this size is sealed.
pub const MAX_SHARD_BYTES: u64 = 2 << 20;

/// The writer state's schema version.
pub const STATE_SCHEMA: u32 = 1;

/// What a writer remembers of its last shard (a hint, never the truth).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardState {
    pub schema: u32,
    /// The shard's file name inside the store.
    pub shard: String,
    /// The shard's size right after the writer's last append.
    pub size: u64,
    pub dev: u64,
    pub ino: u64,
}

/// Why a writer may not append to its last shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed {
    /// No state, or it does not parse, has another schema, or names
    /// something that is not a shard of this session.
    NoState,
    /// The shard is gone, or another file now has its name.
    Missing,
    /// The shard's size is not the size the writer left.
    SizeMoved,
    /// The shard reached the size limit.
    Full,
    /// The shard's format is not the one now asked for.
    FormatChanged,
    /// A sidecar index covers the shard.
    Indexed,
}

/// Reads a state file's bytes; anything unusable is `None`.
pub fn parse_state(bytes: &[u8]) -> Option<ShardState> {
    serde_json::from_slice::<ShardState>(bytes)
        .ok()
        .filter(|s| s.schema == STATE_SCHEMA)
}

/// The rotation rule. `Ok` with the shard's name when the writer may
/// append to it; otherwise why not.
pub fn reusable<'a>(
    state: Option<&'a ShardState>,
    session: &str,
    format: ShardFormat,
    store: &Path,
) -> Result<&'a str, Sealed> {
    let state = state.ok_or(Sealed::NoState)?;
    let name = ShardName::parse(&state.shard).ok_or(Sealed::NoState)?;
    if name.session != session || name.token.is_none() {
        return Err(Sealed::NoState);
    }
    let path = store.join(&state.shard);
    let meta = std::fs::symlink_metadata(&path).map_err(|_| Sealed::Missing)?;
    if !meta.is_file() || meta.dev() != state.dev || meta.ino() != state.ino {
        return Err(Sealed::Missing);
    }
    if meta.len() != state.size {
        return Err(Sealed::SizeMoved);
    }
    if meta.len() >= MAX_SHARD_BYTES {
        return Err(Sealed::Full);
    }
    if name.format != format {
        return Err(Sealed::FormatChanged);
    }
    if crate::sidecar::covers(&path) {
        return Err(Sealed::Indexed);
    }
    Ok(&state.shard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_parsing_refuses_what_is_not_a_current_state() {
        let good = br#"{"schema":1,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"ino":2}"#;
        assert!(parse_state(good).is_some());
        for bad in [
            &b""[..],
            b"{",
            br#"{"schema":2,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"ino":2}"#,
            br#"{"schema":1,"shard":"s.0a1b2c3d.jsonl","size":-3,"dev":1,"ino":2}"#,
            br#"{"schema":1,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1}"#,
            br#"{"schema":1,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"ino":2,"x":0}"#,
            br#"[1,2]"#,
        ] {
            assert!(
                parse_state(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_state_naming_another_session_or_a_path_is_no_state() {
        let dir = tempfile::tempdir().unwrap();
        for shard in [
            "other.0a1b2c3d.jsonl",
            "../s.0a1b2c3d.jsonl",
            "s.jsonl",
            "s.0a1b2c3d.txt",
        ] {
            let state = ShardState {
                schema: STATE_SCHEMA,
                shard: shard.into(),
                size: 0,
                dev: 0,
                ino: 0,
            };
            assert_eq!(
                reusable(Some(&state), "s", ShardFormat::Line, dir.path()),
                Err(Sealed::NoState),
                "{shard}"
            );
        }
    }
}
