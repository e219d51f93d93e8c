//! Tests that really mount a warehouse with the release binary and read it
//! through the kernel with plain `std::fs` and shell tools (`ls`, `cat`,
//! `find`, `du`, `getfattr`, `jq`, `python3`).
//!
//! With `PCHRONICLE_REQUIRE_FUSE=1` (as CI sets it) a machine that cannot
//! mount fails these tests instead of skipping them.

#[allow(dead_code)]
#[path = "../tests/catalog/support.rs"]
mod support;

mod concurrency;
mod freshness;
mod harness;
mod history;
mod hostile;
mod lifecycle;
mod mounting;
mod reads;
mod records;
#[cfg(feature = "remote")]
mod remote;
mod responsive;
#[cfg(feature = "remote")]
#[path = "../tests/support/s3.rs"]
mod s3;
mod system;
mod tools;
mod tree;
