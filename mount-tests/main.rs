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
mod hostile;
mod lifecycle;
mod records;
mod tools;
mod tree;

use std::path::Path;

#[test]
fn fuse_device_is_usable() {
    // Fails under PCHRONICLE_REQUIRE_FUSE=1 when mounting is impossible.
    harness::fuse_usable();
}

#[test]
fn pchronicle_binary_is_built() {
    let binary = Path::new(env!("CARGO_BIN_EXE_pchronicle"));
    assert!(binary.is_file(), "{} is missing", binary.display());
}
