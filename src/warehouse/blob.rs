//! [`Blob`]: a regular file of a warehouse, open for reading: a local
//! file, or one version of a remote object. Both are read by position, so
//! every reader of record files, indexes and metadata serves either.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// A warehouse file open for reading.
#[derive(Debug)]
pub enum Blob {
    Local(File),
    #[cfg(feature = "remote")]
    /// Boxed: it holds its block cache's state, and a local file is one
    /// descriptor.
    Remote(Box<crate::remote::RemoteFile>),
}

impl Blob {
    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end.
    /// Charged to the thread's current work ([`crate::work`]): a read of
    /// work cancelled or past its budget fails instead.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        crate::work::charge(buf.len())?;
        match self {
            Blob::Local(file) => file.read_at(buf, offset),
            #[cfg(feature = "remote")]
            Blob::Remote(object) => object.read_at(buf, offset),
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        crate::work::charge(buf.len())?;
        match self {
            Blob::Local(file) => file.read_exact_at(buf, offset),
            #[cfg(feature = "remote")]
            Blob::Remote(object) => object.read_exact_at(buf, offset),
        }
    }

    /// The file's size now (a remote object's as listed when opened).
    pub fn size(&self) -> io::Result<u64> {
        match self {
            Blob::Local(file) => Ok(file.metadata()?.len()),
            #[cfg(feature = "remote")]
            Blob::Remote(object) => Ok(object.len()),
        }
    }

    /// The file's stat now (a remote object's as listed when opened).
    pub fn stat(&self) -> io::Result<super::Stat> {
        match self {
            Blob::Local(file) => super::Stat::of(file),
            #[cfg(feature = "remote")]
            Blob::Remote(object) => Ok(object.stat()),
        }
    }

    /// The version of a remote object (its ETag, which changes with its
    /// bytes); `None` for a local file, whose version is its mtime.
    pub fn etag(&self) -> Option<&str> {
        match self {
            Blob::Local(_) => None,
            #[cfg(feature = "remote")]
            Blob::Remote(object) => object.etag(),
        }
    }

    /// The local file, when it is one (for what only a descriptor can do:
    /// read-ahead advice, FUSE passthrough).
    pub fn local(&self) -> Option<&File> {
        match self {
            Blob::Local(file) => Some(file),
            #[cfg(feature = "remote")]
            Blob::Remote(_) => None,
        }
    }

    /// A reader from `offset` on, by position (the blob itself has none).
    pub fn reader_at(&self, offset: u64) -> BlobReader<'_> {
        BlobReader { blob: self, offset }
    }
}

impl From<File> for Blob {
    fn from(file: File) -> Blob {
        Blob::Local(file)
    }
}

/// Sequential reading of a [`Blob`].
#[derive(Debug)]
pub struct BlobReader<'a> {
    blob: &'a Blob,
    offset: u64,
}

impl Read for BlobReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.blob.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// A [`Blob`] read sequentially and owned, for readers that keep it.
#[derive(Debug)]
pub struct OwnedBlobReader {
    pub blob: Blob,
    pub offset: u64,
}

impl Read for OwnedBlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.blob.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}
