//! `pchronicle refresh`: a running mount forgets what it knows of a path
//! at once, for those who cannot wait for the TTL.
//!
//! The daemon's own caches are dropped here; what the kernel must forget
//! (names, attributes, cached pages and listings) is returned as a
//! [`Forget`] for the protocol layer to send as invalidations.

use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::WarehouseFs;
use crate::fs::FsError;
use crate::fs::inodes::{Synthetic, Target};
use crate::fs::views::Caller;

/// What the kernel must forget after a refresh.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Forget {
    /// Inodes whose attributes and cached pages (a directory's listing)
    /// go, sorted.
    pub inodes: Vec<u64>,
    /// Names, as (directory inode, name), whose entries go (also a name
    /// the kernel remembers as missing), sorted.
    pub entries: Vec<(u64, String)>,
}

impl WarehouseFs {
    /// Forgets what the mount holds of `name` in the directory `dir` (of
    /// `dir` itself when `name` is `None`) and of everything below it:
    /// the renders of the synthetic files there and in every
    /// directory above (their rollups include it; the contents their
    /// numbers hold are checked again at next use), the listings kept for
    /// the kernel, and the catalogs' cached listings and classifications.
    /// Returns what the kernel must forget: every name there (also those
    /// it was told are missing) and every inode there and above. Only root and the daemon's own user may ask
    /// (`EPERM`): a refresh costs the daemon a walk.
    pub fn refresh(
        &self,
        caller: &Caller,
        dir: u64,
        name: Option<&str>,
    ) -> Result<Forget, FsError> {
        if !self.views.is_own(caller) {
            return Err(Errno::EPERM.into());
        }
        let Target::Path(dir_rel) = self.target(dir)?.0 else {
            return Err(Errno::ENOTDIR.into());
        };
        if let Some(name) = name {
            if !crate::warehouse::is_plain_name(name.as_bytes()) {
                return Err(Errno::EINVAL.into());
            }
        }
        // A synthetic file is refreshed with its directory.
        let name = name.filter(|n| Synthetic::from_name(n).is_none());
        let scope: PathBuf = match name {
            Some(name) => dir_rel.join(name),
            None => dir_rel.to_path_buf(),
        };
        let mut forget = Forget::default();
        let within = self.inodes.within(&scope);
        for node in &within {
            forget.inodes.push(node.ino);
            if let Some(name) = &node.name {
                forget.entries.push((node.parent, name.clone()));
            }
        }
        if let Some(name) = name {
            // Also when the kernel knows the name only as missing.
            forget.entries.push((dir, name.to_string()));
        }
        // Names the kernel was told are missing in a directory there.
        {
            let dirs: std::collections::HashSet<u64> = within.iter().map(|n| n.ino).collect();
            let negatives = self.negatives.lock();
            for ((parent, missing), ()) in negatives.iter() {
                if dirs.contains(parent) {
                    forget.entries.push((*parent, missing.to_string()));
                }
            }
        }
        // Above: each directory's listing and attributes and its rollups,
        // whose versions are checked again at their next use (a name's
        // entry is not invalidated there: that waits for the directory's
        // lock, which a slow lookup in it, a render, may hold for long).
        for above in self.inodes.ancestors(dir) {
            forget.inodes.push(above);
            for which in [Synthetic::Stats, Synthetic::Sources] {
                if let Some(ino) = self.inodes.existing_child(above, which.name()) {
                    forget.inodes.push(ino);
                }
            }
        }
        forget.inodes.sort_unstable();
        forget.inodes.dedup();
        forget.entries.sort_unstable();
        forget.entries.dedup();
        self.renders.forget(&forget.inodes);
        self.mark_stale(&forget.inodes);
        {
            let mut listed = self.listed.lock();
            let mut snapshots = self.snapshots.lock();
            for ino in &forget.inodes {
                listed.remove(ino);
                snapshots.remove(ino);
                self.unopened.forget(*ino);
            }
        }
        self.views.forget_below(&scope);
        log::info!(
            "refreshed {:?} ({} inodes)",
            display(&scope),
            forget.inodes.len()
        );
        Ok(forget)
    }
}

/// A warehouse path for a log line (`.` for the root).
fn display(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}
