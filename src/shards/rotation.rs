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
//! 5. no sidecar index covers it: neither its discovery manifest nor any
//!    index file of it exists ([`crate::sidecar::covers`], and a listing
//!    of the store whenever the store changed since the last one);
//! 6. when the store lives in a git work tree ([`super::git`]): HEAD is on
//!    the same branch and commit, HEAD's reflog has the same size, no
//!    `index.lock` exists, and git's index holds the shard neither staged
//!    nor committed.
//!
//! Otherwise the writer starts a new shard, and the old one is sealed for
//! good: nothing in the rule can make a failed condition hold again for an
//! unchanged file, so once sealed, never appended to. The state is only a
//! hint: losing it, tearing it or shaping it wrongly costs a new shard,
//! never an append to a sealed one.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::git::{Facts, GitState, Repo};
use super::{ShardFormat, ShardName};
use crate::logbudget::warn_limited;

/// A shard at or over this size is sealed.
pub const MAX_SHARD_BYTES: u64 = 2 << 20;

/// The writer state's schema version.
pub const STATE_SCHEMA: u32 = 2;

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
    /// The store directory's ctime when a listing last found no index
    /// file of the shard in it (`None`: not listed yet, or not trusted).
    pub listed: Option<i64>,
    /// Git as the writer last saw it; `None` outside a work tree.
    pub git: Option<GitState>,
}

/// Git as it is just before an append, for the rule.
#[derive(Debug)]
pub struct Git<'a> {
    pub repo: &'a Repo,
    pub facts: io::Result<Facts>,
}

/// The rule's yes: the shard to append to, and what the writer's state
/// should now remember beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reuse<'a> {
    pub shard: &'a str,
    pub listed: Option<i64>,
    pub git: Option<GitState>,
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
    /// HEAD is on another branch or commit than at the last append (or
    /// the store moved into or out of a git work tree).
    HeadMoved,
    /// HEAD's reflog grew or shrank, or `ORIG_HEAD` was rewritten: HEAD
    /// moved, perhaps and came back.
    ReflogMoved,
    /// git's `index.lock` exists: a stage or commit is under way.
    IndexLocked,
    /// git's index holds the shard: it is staged or committed.
    InGitIndex,
    /// git's files could not be read (the writer logs why).
    GitUnreadable,
}

/// Reads a state file's bytes; anything unusable is `None`.
pub fn parse_state(bytes: &[u8]) -> Option<ShardState> {
    serde_json::from_slice::<ShardState>(bytes)
        .ok()
        .filter(|s| s.schema == STATE_SCHEMA)
}

/// The rotation rule. `Ok` with the shard's name when the writer may
/// append to it; otherwise why not. `git` is the work tree the store lives
/// in, with its facts read just now.
pub fn reusable<'a>(
    state: Option<&'a ShardState>,
    session: &str,
    format: ShardFormat,
    store: &Path,
    git: Option<&Git<'_>>,
) -> Result<Reuse<'a>, Sealed> {
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
    let git = match (git, &state.git) {
        (None, None) => None,
        (Some(git), Some(seen)) => Some(git_allows(git, seen, &path, &meta)?),
        _ => return Err(Sealed::HeadMoved),
    };
    let listed = unindexed(store, &state.shard, state.listed)?;
    Ok(Reuse {
        shard: &state.shard,
        listed,
        git,
    })
}

/// Condition 6: what git says. Returns what to remember of it.
fn git_allows(
    git: &Git<'_>,
    seen: &GitState,
    shard: &Path,
    meta: &std::fs::Metadata,
) -> Result<GitState, Sealed> {
    let facts = git.facts.as_ref().map_err(|_| Sealed::GitUnreadable)?;
    if !facts.head_is(seen) {
        return Err(Sealed::HeadMoved);
    }
    if !facts.stayed(seen) {
        return Err(Sealed::ReflogMoved);
    }
    if facts.locked {
        return Err(Sealed::IndexLocked);
    }
    let Some(index) = facts.index else {
        return Ok(facts.state(None));
    };
    // Staging or committing the shard rewrites the index (a new file)
    // after the shard's last write: an index that is the one already
    // searched and older than that write cannot hold it.
    let written = crate::warehouse::mtime_ns(meta);
    if seen.index == Some(index) && index.mtime_ns < written {
        return Ok(facts.state(Some(index)));
    }
    match git.repo.index_holds(shard) {
        Ok(false) => Ok(facts.state(Some(index))),
        Ok(true) => Err(Sealed::InGitIndex),
        Err(e) => {
            warn_limited!("{e}");
            Err(Sealed::GitUnreadable)
        }
    }
}

/// How long a store must have been unchanged before a listing of it is
/// trusted until it changes again: more than one tick of the coarse clock
/// file times are taken from, so an index file created just after the
/// listing cannot share the directory ctime the listing saw.
const LISTING_SETTLE: std::time::Duration = std::time::Duration::from_millis(20);

/// Condition 5 for an index file with no manifest: the store is listed
/// when it changed since `listed` (its ctime then, which no one can set
/// back). Returns the ctime to remember (`None` when the listing may not
/// be trusted until the next change, see [`listing_trusted`]).
fn unindexed(store: &Path, shard: &str, listed: Option<i64>) -> Result<Option<i64>, Sealed> {
    let before = std::fs::metadata(store).map_err(|_| Sealed::Missing)?;
    let ctime = crate::warehouse::ctime_ns(&before);
    if listed == Some(ctime) {
        return Ok(listed);
    }
    let entries = std::fs::read_dir(store).map_err(|_| Sealed::Indexed)?;
    for entry in entries {
        let entry = entry.map_err(|_| Sealed::Indexed)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".idx") && crate::sidecar::cohort_of(name) == Some(shard) {
            return Err(Sealed::Indexed);
        }
    }
    Ok(listing_trusted(ctime, std::time::SystemTime::now()).then_some(ctime))
}

/// Whether a listing made at `now` of a directory whose ctime is
/// `ctime_ns` shows every entry created after it by a ctime change: the
/// directory settled more than [`LISTING_SETTLE`] before, and its times
/// have sub-second precision (a file system keeping whole seconds could
/// give a later change the same ctime).
fn listing_trusted(ctime_ns: i64, now: std::time::SystemTime) -> bool {
    if ctime_ns % 1_000_000_000 == 0 {
        return false;
    }
    now.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|now| now.checked_sub(LISTING_SETTLE))
        .is_some_and(|cutoff| i128::from(ctime_ns) < cutoff.as_nanos() as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_parsing_refuses_what_is_not_a_current_state() {
        let good = br#"{"schema":2,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"ino":2,"listed":null,"git":null}"#;
        assert!(parse_state(good).is_some());
        for bad in [
            &b""[..],
            b"{",
            br#"{"schema":1,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"ino":2}"#,
            br#"{"schema":2,"shard":"s.0a1b2c3d.jsonl","size":-3,"dev":1,"ino":2,"listed":null,"git":null}"#,
            br#"{"schema":2,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"listed":null,"git":null}"#,
            br#"{"schema":2,"shard":"s.0a1b2c3d.jsonl","size":3,"dev":1,"ino":2,"listed":null,"git":null,"x":0}"#,
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
    fn a_listing_is_trusted_only_once_the_store_settled() {
        use std::time::{Duration, SystemTime, UNIX_EPOCH};
        let now = UNIX_EPOCH + Duration::from_nanos(1_764_583_200_500_000_001);
        let ns = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        assert!(listing_trusted(ns(now - Duration::from_millis(21)), now));
        assert!(listing_trusted(ns(now - Duration::from_secs(3600)), now));
        assert!(!listing_trusted(ns(now - Duration::from_millis(19)), now));
        assert!(!listing_trusted(ns(now), now));
        assert!(!listing_trusted(ns(now + Duration::from_secs(5)), now));
        // Whole seconds: a later change could keep the same time.
        assert!(!listing_trusted(1_764_583_100_000_000_000, now));
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
                listed: None,
                git: None,
            };
            assert_eq!(
                reusable(Some(&state), "s", ShardFormat::Line, dir.path(), None),
                Err(Sealed::NoState),
                "{shard}"
            );
        }
    }
}
