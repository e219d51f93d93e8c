//! The sidecar index file, layout v3: writing it ([`write`]), and reading
//! it with only the bytes a point lookup needs ([`read`]); keys and their
//! canonical encoding are in [`key`].
//!
//! All integers are little-endian. In order:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `PCHRNIDX` |
//! | 1 | version `0x03` |
//! | 32 | SHA-256 of the cohort (the indexed record file) |
//! | 2 | number of key fields `k` (1–64) |
//! | k × (1 + 2 + n) | each key field: type (1 string, 2 integer, 3 boolean), name length `n`, UTF-8 name |
//! | 8 | cohort size in bytes |
//! | 8 | cohort mtime, Unix nanoseconds (signed) |
//! | 4 | bucket count `b` (1 – 2²⁸) |
//! | b × 8 | absolute file offset of each bucket |
//! | … | bucket data |
//! | r × 12 | record locators: cohort byte offset (8) and length (4) of row `i` |
//! | 8 | row count `r` |
//!
//! Bucket `i` runs from its offset to the next bucket's offset (the last to
//! the locator table). It holds a `u32` entry count, then per entry: the
//! canonical key encoding's length (`u32`) and bytes, a row count (`u32`)
//! and that many row ids (`u64`, ascending). A key lands in bucket
//! `fnv1a64(canonical key) % b`. The canonical encoding of a key is, per
//! field in spec order, a type byte and the value: a string as `u32` length
//! and UTF-8 bytes, an integer as `i64`, a boolean as one byte 0 or 1.
//!
//! A reader checks every length and offset against the file's size before
//! it trusts it, so a corrupt or truncated file is reported as
//! [`Corrupt`], never a panic or an out-of-bounds read.

pub mod key;
pub mod read;
pub mod write;

pub use key::{KeyType, KeyValue, encode_key, fnv1a64, push_boolean, push_integer, push_string};
pub use read::{Corrupt, Header, IndexReader, ReadAt};
pub use write::{Entries, IndexContent, bucket_count_for, encode_index};

/// The first bytes of every index file.
pub const MAGIC: &[u8; 8] = b"PCHRNIDX";
/// The layout version this module writes and reads.
pub const VERSION: u8 = 3;

/// The most key fields an index may have.
const MAX_KEY_FIELDS: usize = 64;
/// The most buckets an index may have.
const MAX_BUCKETS: u32 = 1 << 28;
/// The size of one record locator: offset (8) and length (4).
const LOCATOR_BYTES: u64 = 12;

/// Where one record lies in the cohort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locator {
    pub offset: u64,
    pub len: u32,
}
