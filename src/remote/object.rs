//! A remote file open for reading: positional reads served by ranged
//! `GET`s of the version that was listed, through a small block cache.
//!
//! The first read of a file fetches what it asks for, at least
//! [`MIN_BLOCK`]; each read that continues where the previous block ended
//! doubles the next block, up to [`MAX_BLOCK`], and while a reader keeps
//! going forward the block after the one it reads is fetched in the
//! background. So a point lookup costs one small request and a sequential
//! reader streams at the size of a few large ones. What all open files
//! hold in blocks is bounded ([`HELD_MAX`]).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    current: Option<(u64, Bytes, Held)>,
    /// The block after it, fetched ahead (or being fetched).
    ahead: Option<(u64, tokio::task::JoinHandle<io::Result<Bytes>>, Held)>,
    /// The size of the next block fetched.
    next_len: u64,
}

/// Bytes all open remote files hold in blocks (and reads ahead), and the
/// most they may: past it, a reader gets blocks of [`MIN_BLOCK`] and no
/// read ahead, so many open files cannot hold 32 MiB each.
static HELD: AtomicU64 = AtomicU64::new(0);
pub const HELD_MAX: u64 = 512 << 20;

/// A share of [`HELD`], given back when dropped.
#[derive(Debug, Default)]
struct Held(u64);

impl Held {
    /// `len` bytes if they fit in the budget; `MIN_BLOCK` bytes always
    /// (every reader makes progress).
    fn take(len: u64) -> (Held, u64) {
        let granted = match HELD.fetch_add(len, Ordering::Relaxed) + len {
            total if total <= HELD_MAX || len <= MIN_BLOCK => len,
            _ => {
                HELD.fetch_sub(len - MIN_BLOCK, Ordering::Relaxed);
                MIN_BLOCK
            }
        };
        (Held(granted), granted)
    }

    /// Whether `len` more bytes fit in the budget now.
    fn fits(len: u64) -> bool {
        HELD.load(Ordering::Relaxed) + len <= HELD_MAX
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(self.0, Ordering::Relaxed);
    }
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
    /// The block cache is not held while a block is fetched, so readers of
    /// the same file do not queue behind one slow request.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.size - offset);
        let (sequential, ahead, len) = {
            let mut cache = self.cache.lock();
            let current = cache.current.as_ref();
            if let Some(n) =
                current.and_then(|(at, block, _)| copy_from(*at, block, buf, offset, want))
            {
                return Ok(n);
            }
            let sequential = cache
                .current
                .as_ref()
                .is_some_and(|(at, block, _)| at + block.len() as u64 == offset);
            if !sequential {
                cache.next_len = MIN_BLOCK;
            }
            let len = cache
                .next_len
                .max(want)
                .min(MAX_BLOCK)
                .min(self.size - offset);
            (sequential, cache.ahead.take(), len)
        };
        let (block, held) = match ahead {
            Some((at, task, held)) if at == offset => {
                let block = block_on(task)?.map_err(|e| {
                    io::Error::other(format!("{}: a read ahead failed: {e}", self.key))
                })??;
                (block, held)
            }
            ahead => {
                if let Some((_, task, _)) = ahead {
                    task.abort();
                }
                let (held, len) = Held::take(len);
                let range = offset..offset + len;
                let block = block_on(self.bucket.read_range(
                    &self.key,
                    self.etag.as_deref(),
                    self.size,
                    range,
                ))??;
                (block, held)
            }
        };
        let n = copy_from(offset, &block, buf, offset, want).unwrap_or(0);
        let mut cache = self.cache.lock();
        if sequential {
            cache.next_len = (cache.next_len * 2).min(MAX_BLOCK);
        }
        let end = offset + block.len() as u64;
        // Past the budget a block is not kept beyond the read that
        // fetched it: however many files are open, what they keep between
        // reads stays within HELD_MAX (each read then fetches again).
        cache.current = if HELD.load(Ordering::Relaxed) <= HELD_MAX {
            Some((offset, block, held))
        } else {
            None
        };
        if sequential && end < self.size && cache.ahead.is_none() {
            let len = cache.next_len.min(self.size - end);
            if Held::fits(len) {
                let (held, len) = Held::take(len);
                let bucket = Arc::clone(&self.bucket);
                let (key, etag, size) = (self.key.clone(), self.etag.clone(), self.size);
                let read = async move {
                    bucket
                        .read_range(&key, etag.as_deref(), size, end..end + len)
                        .await
                };
                let read = super::InAnswer::new(read);
                let task = super::with_registry(|r| Ok(r.runtime.spawn(read)))?;
                cache.ahead = Some((end, task, held));
            }
        }
        Ok(n)
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
        if let Some((_, task, _)) = self.cache.get_mut().ahead.take() {
            task.abort();
        }
    }
}

/// Copies what `block` (read at `at`) holds of `[offset, offset + want)`
/// into `buf`.
fn copy_from(at: u64, block: &[u8], buf: &mut [u8], offset: u64, want: u64) -> Option<usize> {
    let end = at + block.len() as u64;
    if offset < at || offset >= end {
        return None;
    }
    let start = (offset - at) as usize;
    let n = (want.min(end - offset)) as usize;
    buf[..n].copy_from_slice(&block[start..start + n]);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_budget_blocks_shrink_to_the_least_and_nothing_is_read_ahead() {
        let (all, granted) = Held::take(HELD_MAX);
        assert_eq!(granted, HELD_MAX);
        assert!(!Held::fits(1 << 20));
        let (small, granted) = Held::take(8 << 20);
        assert_eq!(granted, MIN_BLOCK, "every reader still gets a block");
        drop(all);
        assert!(Held::fits(8 << 20));
        drop(small);
        assert_eq!(HELD.load(Ordering::Relaxed), 0, "all given back");
    }
}
