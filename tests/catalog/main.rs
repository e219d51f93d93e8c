//! Integration tests of the catalog core against real temporary
//! warehouses, of the CLI that exposes it, and of the filesystem's
//! operations driven without a kernel. No `/dev/fuse` here.
//!
//! Tests that need Lance (compact-jsonl datasets) build only with the
//! default feature `compact-jsonl`; the rest also run in a build without it
//! (`cargo test --release --no-default-features`), which compiles in
//! minutes.

#[cfg(feature = "compact-jsonl")]
mod as_of;
mod classification;
#[cfg(feature = "compact-jsonl")]
mod compact;
mod count_cache;
#[cfg(all(feature = "distributed", feature = "remote", feature = "compact-jsonl"))]
mod distributed;
mod docs;
mod extract;
mod git;
mod hostile;
#[cfg(feature = "compact-jsonl")]
mod lance_surface_guards;
mod malformed;
mod open;
#[cfg(feature = "compact-jsonl")]
mod records_out;
#[cfg(all(feature = "remote", feature = "compact-jsonl"))]
mod remote;
mod rfc;
#[cfg(all(feature = "remote", feature = "compact-jsonl"))]
#[path = "../support/s3.rs"]
mod s3;
mod shapes;
mod shards;
mod sidecar;
mod support;
#[cfg(feature = "compact-jsonl")]
mod sync;
#[cfg(feature = "compact-jsonl")]
mod terminal;
#[cfg(feature = "compact-jsonl")]
mod versions;
mod watch;
#[cfg(feature = "serve")]
mod web;
#[cfg(feature = "serve")]
mod web_compare;
#[cfg(feature = "serve")]
mod web_hostile;
#[cfg(not(feature = "compact-jsonl"))]
mod without_lance;

// The filesystem tier (operations without a kernel) lives in `tests/fs/`
// and links into this binary: each test binary links the whole crate graph.
#[path = "../fs/mod.rs"]
mod fs;
