//! What the filesystem's operations answer, in plain types: the protocol
//! layer turns each into its kernel reply, a test reads it directly.

use std::sync::Arc;
use std::time::Duration;

use fuser::FileAttr;
use nix::errno::Errno;

use crate::extract::stream::Chunk;
use crate::fs::FsError;

/// What a lookup hands the kernel.
#[derive(Debug, Clone)]
pub struct Entry {
    pub attr: FileAttr,
    /// How long the kernel may keep the attributes.
    pub attr_ttl: Duration,
    /// How long the kernel may keep the name.
    pub entry_ttl: Duration,
}

impl Entry {
    /// A name that does not exist, which the kernel may remember as such
    /// for `ttl` (inode number 0: a negative entry).
    pub fn negative(ttl: Duration) -> Entry {
        Entry {
            attr: crate::fs::attributes::absent_attr(),
            attr_ttl: Duration::ZERO,
            entry_ttl: ttl,
        }
    }

    /// Whether this is a negative entry.
    pub fn is_negative(&self) -> bool {
        self.attr.ino.0 == 0
    }
}

/// An opened file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub fh: u64,
    /// The kernel may keep the pages (or entries) it cached at the last
    /// open: nothing changed underneath since.
    pub keep_cache: bool,
    /// Reads bypass the page cache (synthetic files: their length is known
    /// only once rendered).
    pub direct_io: bool,
    /// A warehouse file: which one underneath (device, inode), so the
    /// protocol layer may hand it to the kernel to read directly.
    pub file: Option<(u64, u64)>,
}

/// The bytes a read returns: a range of a rendered synthetic file (not
/// copied), what `pread` read from a warehouse file, or a `.records`
/// stream's bytes (one piece of it, not copied, when they are).
pub enum ReadData {
    Shared(Arc<[u8]>, std::ops::Range<usize>),
    Owned(Vec<u8>),
    Records(Chunk),
}

impl ReadData {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            ReadData::Shared(bytes, range) => &bytes[range.clone()],
            ReadData::Owned(bytes) => bytes,
            ReadData::Records(chunk) => chunk.as_slice(),
        }
    }
}

/// One entry a directory read offers: `offset` is the one the next read
/// starts after.
pub struct DirEntry<'a> {
    pub ino: u64,
    pub offset: u64,
    pub name: &'a str,
    pub attr: &'a FileAttr,
    pub ttl: Duration,
}

/// Where a directory read puts its entries (a kernel reply buffer, or a
/// test's vector).
pub trait DirectoryReplier {
    /// Adds one entry; true when the buffer is full and it was not added.
    fn add(&mut self, entry: DirEntry<'_>) -> bool;
}

/// `statvfs` of the warehouse, which the mount reports as its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStats {
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_available: u64,
    pub files: u64,
    pub files_free: u64,
    pub block_size: u32,
    pub name_max: u32,
    pub fragment_size: u32,
}

/// An xattr answer: the length when the caller asked for it (size 0), the
/// bytes when they fit (a too small buffer is `ERANGE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XattrData {
    Size(u32),
    Data(Vec<u8>),
}

impl XattrData {
    pub(super) fn sized(bytes: Vec<u8>, size: u32) -> Result<XattrData, FsError> {
        if size == 0 {
            Ok(XattrData::Size(bytes.len() as u32))
        } else if bytes.len() <= size as usize {
            Ok(XattrData::Data(bytes))
        } else {
            Err(Errno::ERANGE.into())
        }
    }
}
