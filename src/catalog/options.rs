//! A catalog's bounds and switches.

use std::path::PathBuf;

/// Bounds and switches of a catalog.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Children considered per directory before the answer is truncated.
    pub max_entries: usize,
    /// Sources collected per `open` before the answer is truncated.
    pub max_files: usize,
    /// Rewrite missing or stale leaf manifests (`ensure_manifest`).
    pub repair: bool,
    /// Directory listings kept in the refresh cache.
    pub dir_cache_entries: usize,
    /// Directory classifications and leaf previews kept.
    pub node_cache_entries: usize,
    /// Record-file counts kept (in memory and in the persisted cache).
    pub file_cache_entries: usize,
    /// Where record-file counts persist across restarts.
    pub count_cache: CountCachePlace,
    /// Longest one directory walk (`open`, `stats`) may take; a walk past
    /// it fails with `PCHRONICLE_REQUEST_FAILED`. `None`: no limit.
    pub walk_budget: Option<std::time::Duration>,
    /// Record files at least this large that the count cache does not
    /// know are counted in the background, and shown as being counted
    /// meanwhile (a daemon's answers never wait for one). `None`: every
    /// file is counted when it is met (the CLI).
    pub background_count_bytes: Option<u64>,
    /// Watch the directories answers are made of, and give an answer to
    /// `list`, `open` or `stats` of a directory again while nothing below
    /// it changed (see [`watch`]). For a long-lived process; ignored where
    /// the filesystem does not report changes.
    pub watch: bool,
    /// Frozen at this time (microseconds since the epoch): every answer is
    /// the warehouse as of then (see `as_of.rs`). `None`: as it is now.
    pub as_of: Option<crate::records::timestamp::Micros>,
}

/// Where a catalog persists its record-file counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountCachePlace {
    /// Nowhere: counts are kept in memory only.
    Memory,
    /// The warehouse's state directory when it is safe to write, else this
    /// user's cache directory (see [`crate::warehouse::state_dir`]).
    Default,
    /// This file (named from outside).
    File(PathBuf),
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            max_entries: 100_000,
            max_files: 100_000,
            repair: true,
            dir_cache_entries: 4_096,
            node_cache_entries: 65_536,
            file_cache_entries: 262_144,
            count_cache: CountCachePlace::Memory,
            walk_budget: None,
            background_count_bytes: None,
            watch: false,
            as_of: None,
        }
    }
}
