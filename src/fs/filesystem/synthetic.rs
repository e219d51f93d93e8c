//! The synthetic files `.stats` and `.sources`: their attributes, and
//! their bytes rendered from one walk of the directory they describe.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::FileAttr;
use nix::errno::Errno;

use super::WarehouseFs;
use crate::catalog::Snapshot;
use crate::fs::FsError;
use crate::fs::attributes::{NO_TTL, synthetic_attr};
use crate::fs::handles::Handle;
use crate::fs::inodes::{Synthetic, Target};
use crate::fs::render::Stands;
use crate::fs::views::{Caller, View};
use crate::heap::give_back_freed_memory_soon;

/// A directory's `.sources`, when its `.stats` is asked for, is made from
/// the same walk and kept too if it lists at most this many sources (about
/// 70 KB), or if the catalog does not keep the walk's answer. Else it is
/// made when asked for, from that kept answer, without a walk: a
/// `.sources` of 1,000 files takes about 290 KB, and a `cat` of every
/// `.stats` would otherwise fill the render cache with them.
const UNASKED_SOURCES_MAX: usize = 256;

impl WarehouseFs {
    /// A synthetic file's attributes: those of the content its number
    /// holds (a number pushed out is described by a handle still open on
    /// it, else stale), or, rendered per open, the length of what the
    /// handle holds or of a render now, never cached.
    pub(super) fn synthetic_file_attr(
        &self,
        caller: &Caller,
        ino: u64,
        rel: &Path,
        which: Synthetic,
        handle: Option<&Handle>,
    ) -> Result<(FileAttr, Duration), FsError> {
        let owner = self.synthetic_owner(rel, which)?;
        let now = SystemTime::now();
        // `.records` says 0 bytes, as /proc files do: its length is
        // known only by producing it (see docs/filesystem.md).
        if which == Synthetic::Records {
            return Ok((synthetic_attr(ino, 0, &owner.meta, now), NO_TTL));
        }
        if let Some(made) = self.retired(ino) {
            let any = self.handles.any_of(ino);
            if let Some(Handle::Bytes(bytes)) = handle.or(any.as_deref()) {
                let attr = synthetic_attr(ino, bytes.len() as u64, &owner.meta, made);
                return Ok((attr, self.options.attr_ttl));
            }
        }
        let view = self.views.of(caller)?;
        if let Some(version) = self.served_version(&view, ino, which, rel)? {
            return Ok((version.attr(ino, &owner.meta), self.options.attr_ttl));
        }
        let len = match handle {
            Some(Handle::Bytes(bytes)) => bytes.len(),
            _ => self.synthetic_bytes(&view, ino, which, rel)?.len(),
        };
        Ok((synthetic_attr(ino, len as u64, &owner.meta, now), NO_TTL))
    }

    /// A synthetic file's bytes, reused when rendered within the TTL.
    pub(super) fn synthetic_bytes(
        &self,
        view: &View,
        ino: u64,
        which: Synthetic,
        rel: &Path,
    ) -> Result<Arc<[u8]>, FsError> {
        self.renders
            .get_or_render((ino, view.id), || self.render(view, ino, which, rel))
    }

    /// Renders a synthetic file. One walk serves both of a directory's
    /// synthetic files (an `ls -l` stats both, a poller reads one): the
    /// other is rendered and kept for the TTL too, unless it is a large
    /// `.sources` the catalog can make again without a walk (see
    /// [`UNASKED_SOURCES_MAX`]), or one larger than a render kept may be.
    /// Made then, it shows the directory as it is then, which within the
    /// TTL may be newer than the `.stats` kept.
    fn render(
        &self,
        view: &View,
        ino: u64,
        which: Synthetic,
        rel: &Path,
    ) -> Result<Arc<[u8]>, FsError> {
        let catalog = &view.catalog;
        // A refresh during this render makes what it found too old to keep.
        let generation = self.renders.generation();
        let bytes: Arc<[u8]> = if self.options.attr_ttl.is_zero() {
            let text = match which {
                Synthetic::Stats => catalog.stats(rel).map(|s| s.to_json()),
                Synthetic::Sources => catalog.open(rel).map(|s| s.sources_jsonl()),
                // Streamed at open, never rendered.
                Synthetic::Records => return Err(Errno::EINVAL.into()),
            }?;
            Arc::from(text.into_bytes())
        } else {
            // Taken before the walk: a change during it shows as one since.
            let mark = catalog.change_mark();
            let snapshot = catalog.open_shared(rel)?;
            // A render whose every count is final stands past the TTL while
            // nothing below the directory changed (a count being made
            // finishes with no change to report).
            let stands = mark.filter(|_| snapshot.settled()).map(|mark| {
                let (catalog, rel) = (Arc::clone(catalog), rel.to_path_buf());
                Arc::new(move || catalog.unchanged_since(&rel, &mark)) as Stands
            });
            let other = match which {
                Synthetic::Stats => Synthetic::Sources,
                Synthetic::Sources => Synthetic::Stats,
                Synthetic::Records => return Err(Errno::EINVAL.into()),
            };
            let bytes: Arc<[u8]> = Arc::from(rendered(which, &snapshot).into_bytes());
            self.renders.keep(
                (ino, view.id),
                Arc::clone(&bytes),
                stands.clone(),
                generation,
            );
            // The other file, nobody asked for yet, is made and kept when
            // it is small, or when making it later would take another walk
            // (and it fits the renders kept).
            let unasked = other == Synthetic::Stats
                || snapshot.sources.len() <= UNASKED_SOURCES_MAX
                || !catalog.keeps(rel);
            // Never one too large to keep: that would be made for nothing.
            let sibling = self.sibling(ino, other).filter(|_| unasked);
            let text = sibling.and_then(|_| match other {
                Synthetic::Sources => snapshot.sources_jsonl_within(self.renders.max_kept_bytes()),
                _ => Some(rendered(other, &snapshot)),
            });
            if let (Some(sibling), Some(text)) = (sibling, text) {
                self.renders.keep(
                    (sibling, view.id),
                    Arc::from(text.into_bytes()),
                    stands,
                    generation,
                );
            }
            bytes
        };
        give_back_freed_memory_soon();
        Ok(bytes)
    }

    /// The inode of the other synthetic file of the directory `ino`'s
    /// synthetic file belongs to.
    fn sibling(&self, ino: u64, other: Synthetic) -> Option<u64> {
        match self.inodes.get(ino)? {
            (Target::Synthetic { of, .. }, _) => self.inodes.existing_child(of, other.name()),
            _ => None,
        }
    }
}

/// The text of `which` (`.stats` or `.sources`) of `snapshot`.
fn rendered(which: Synthetic, snapshot: &Snapshot) -> String {
    match which {
        Synthetic::Sources => snapshot.sources_jsonl(),
        _ => snapshot.stats().to_json(),
    }
}
