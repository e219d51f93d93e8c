//! A remote file open for reading: positional reads served by ranged
//! `GET`s of the version that was listed, through a small block cache.
//!
//! The first read of a file fetches what it asks for, at least
//! [`MIN_BLOCK`]; each read that continues where the previous block ended
//! doubles the next block, up to [`MAX_BLOCK`], and while a reader keeps
//! going forward the block after the one it reads is fetched in the
//! background. So a point lookup costs one small request and a sequential
//! reader streams at the size of a few large ones.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::{Bucket, ObjectInfo, block_on};
use crate::warehouse::Stat;

/// The least a read fetches.
pub const MIN_BLOCK: u64 = 256 << 10;
/// The most one request fetches, however much a reader asks for at once
/// (it gets the rest from the next reads).
pub const MAX_BLOCK: u64 = 16 << 20;

/// One version of one object, open for reading.
#[derive(Debug)]
pub struct RemoteFile {
    bucket: Arc<Bucket>,
    key: String,
    size: u64,
    etag: Option<String>,
    /// What the file shows (see [`Bucket::file_stat`]).
    stat: Stat,
    cache: Mutex<Blocks>,
}

#[derive(Debug, Default)]
struct Blocks {
    /// The block last read, at its offset.
    current: Option<(u64, Bytes)>,
    /// The block after it, fetched ahead (or being fetched).
    ahead: Option<(u64, tokio::task::JoinHandle<io::Result<Bytes>>)>,
    /// The size of the next block fetched.
    next_len: u64,
}

impl RemoteFile {
    pub fn new(bucket: Arc<Bucket>, key: String, info: &ObjectInfo) -> RemoteFile {
        RemoteFile {
            stat: bucket.file_stat(&key, info),
            bucket,
            key,
            size: info.size,
            etag: info.etag.clone(),
            cache: Mutex::new(Blocks {
                next_len: MIN_BLOCK,
                ..Blocks::default()
            }),
        }
    }

    /// The object's size as listed.
    pub fn len(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The stat the file shows.
    pub fn stat(&self) -> Stat {
        self.stat
    }

    /// The ETag of the version read, when the store gave one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// The object's key below its bucket.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Reads up to `buf.len()` bytes at `offset` (fewer only at the end).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.size - offset);
        let mut cache = self.cache.lock();
        if let Some(n) = copy_from(cache.current.as_ref(), buf, offset, want) {
            return Ok(n);
        }
        let sequential = cache
            .current
            .as_ref()
            .is_some_and(|(at, block)| at + block.len() as u64 == offset);
        let block = match cache.ahead.take() {
            Some((at, task)) if at == offset => block_on(task)?.map_err(|e| {
                io::Error::other(format!("{}: a read ahead failed: {e}", self.key))
            })??,
            ahead => {
                if let Some((_, task)) = ahead {
                    task.abort();
                }
                let len = if sequential {
                    cache.next_len
                } else {
                    cache.next_len = MIN_BLOCK;
                    MIN_BLOCK
                }
                .max(want)
                .min(MAX_BLOCK)
                .min(self.size - offset);
                let range = offset..offset + len;
                block_on(
                    self.bucket
                        .read_range(&self.key, self.etag.as_deref(), range),
                )??
            }
        };
        if sequential {
            cache.next_len = (cache.next_len * 2).min(MAX_BLOCK);
        }
        let end = offset + block.len() as u64;
        cache.current = Some((offset, block));
        if sequential && end < self.size {
            let len = cache.next_len.min(self.size - end);
            let bucket = Arc::clone(&self.bucket);
            let (key, etag) = (self.key.clone(), self.etag.clone());
            let task = super::with_registry(|r| {
                Ok(r.runtime.spawn(async move {
                    bucket
                        .read_range(&key, etag.as_deref(), end..end + len)
                        .await
                }))
            })?;
            cache.ahead = Some((end, task));
        }
        Ok(copy_from(cache.current.as_ref(), buf, offset, want).unwrap_or(0))
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        if let Some((_, task)) = self.cache.get_mut().ahead.take() {
            task.abort();
        }
    }
}

/// Copies what `block` holds of `[offset, offset + want)` into `buf`.
fn copy_from(
    block: Option<&(u64, Bytes)>,
    buf: &mut [u8],
    offset: u64,
    want: u64,
) -> Option<usize> {
    let (at, bytes) = block?;
    let end = at + bytes.len() as u64;
    if offset < *at || offset >= end {
        return None;
    }
    let start = (offset - at) as usize;
    let n = (want.min(end - offset)) as usize;
    buf[..n].copy_from_slice(&bytes[start..start + n]);
    Some(n)
}
