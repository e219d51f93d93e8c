//! The `_offload/` store an import writes: one file per distinct record
//! over the offload threshold, named by the SHA-256 of its bytes, written
//! atomically and never rewritten. A record too large to hold in memory
//! is streamed into a temporary file there while it is hashed and
//! validated, then renamed to its hash.

use crate::warehouse::hex;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use crate::atomic::write_atomic;
use crate::records::{OversizeSegment, ProbedSegment};

/// The `_offload/` store: one file per distinct record, named by the
/// SHA-256 of its bytes, written atomically and never rewritten.
pub(super) struct Offloader {
    pub(super) dir: PathBuf,
}

impl Offloader {
    pub(super) fn store(&self, bytes: &[u8]) -> io::Result<String> {
        let sha = hex(&Sha256::digest(bytes));
        let path = self.dir.join(format!("{sha}.json"));
        if !path.exists() {
            write_atomic(&path, bytes)?;
        }
        Ok(sha)
    }
}

/// Streams an oversize segment into a temporary file in `_offload/`,
/// hashing it on the way, while the caller's parser reads the same bytes.
pub(super) struct OffloadTee<'s, 'a> {
    segment: &'s mut OversizeSegment<'a>,
    temp: PathBuf,
    file: Option<File>,
    hasher: Sha256,
    dir: PathBuf,
}

impl<'s, 'a> OffloadTee<'s, 'a> {
    pub(super) fn new(dir: &Path, segment: &'s mut OversizeSegment<'a>) -> io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".partial.{}.{n}", std::process::id()));
        let file = File::create(&temp)?;
        Ok(OffloadTee {
            segment,
            temp,
            file: Some(file),
            hasher: Sha256::new(),
            dir: dir.to_path_buf(),
        })
    }

    /// Validates the segment as it streams through; everything read is
    /// also written and hashed.
    pub(super) fn probe(&mut self) -> io::Result<Option<ProbedSegment>> {
        // The parser reads through the tee, so every byte reaches the file
        // and the hash exactly once; probing drains the rest.
        crate::records::probe_stream(TeeReader { owner: self })
    }

    /// Moves the streamed record to `_offload/<sha>.json`.
    pub(super) fn commit(mut self) -> io::Result<String> {
        let mut file = self.file.take().expect("the tee is committed once");
        file.flush()?;
        file.sync_all()?;
        drop(file);
        let sha = hex(&std::mem::take(&mut self.hasher).finalize());
        let path = self.dir.join(format!("{sha}.json"));
        if path.exists() {
            fs::remove_file(&self.temp)?;
        } else {
            fs::rename(&self.temp, &path)?;
        }
        Ok(sha)
    }

    pub(super) fn discard(self) {
        drop(self.file);
        let _ = fs::remove_file(&self.temp);
    }
}

/// Reads from the oversize segment, copying every byte to the temporary
/// file and the hash.
struct TeeReader<'t, 's, 'a> {
    owner: &'t mut OffloadTee<'s, 'a>,
}

impl Read for TeeReader<'_, '_, '_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.owner.segment.read(out)?;
        self.owner.hasher.update(&out[..n]);
        if let Some(file) = self.owner.file.as_mut() {
            file.write_all(&out[..n])?;
        }
        Ok(n)
    }
}
