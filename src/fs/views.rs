//! Whose eyes a request is answered with.
//!
//! The kernel checks each request against the attributes the mount shows
//! (`default_permissions`), but `.stats`, `.sources` and the counts in
//! xattrs roll up a whole subtree. For root and the daemon's own user they
//! are rendered by the daemon's catalog; for anyone else (`--allow-other`)
//! by a catalog that sees exactly what that user could read natively,
//! built once per set of credentials and kept for the most recent users.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use super::FsError;
use crate::catalog::Catalog;
use crate::warehouse::Viewer;

/// Who sent a request, as the kernel tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The calling process, whose supplementary groups count too.
    pub pid: u32,
}

/// A catalog and the id its renders are kept under.
#[derive(Clone)]
pub struct View {
    /// 0 for the daemon's own view; otherwise unique for the life of the
    /// mount, so renders of different viewers are never mixed up.
    pub id: u64,
    pub catalog: Arc<Catalog>,
}

/// Per-user catalogs kept at once.
const VIEWERS_KEPT: usize = 64;

/// The daemon's own view and the per-user ones.
pub struct Views {
    own: View,
    /// The daemon's effective uid, whose requests use its own view.
    own_uid: u32,
    others: Mutex<LruCache<Viewer, View>>,
    next_id: AtomicU64,
}

impl Views {
    pub fn new(catalog: Arc<Catalog>) -> Views {
        Views {
            own: View { id: 0, catalog },
            own_uid: rustix::process::geteuid().as_raw(),
            others: Mutex::new(LruCache::unbounded()),
            next_id: AtomicU64::new(1),
        }
    }

    /// The daemon's own view.
    pub fn own(&self) -> &View {
        &self.own
    }

    /// Whether `caller` is root or the daemon's own user, whose requests
    /// use the daemon's own view.
    pub fn is_own(&self, caller: &Caller) -> bool {
        caller.uid == 0 || caller.uid == self.own_uid
    }

    /// Makes every view's catalog forget what it cached at or below `rel`
    /// (see [`Catalog::forget_below`]).
    pub fn forget_below(&self, rel: &std::path::Path) {
        self.own.catalog.forget_below(rel);
        for (_, view) in self.others.lock().iter() {
            view.catalog.forget_below(rel);
        }
    }

    /// The view `caller`'s requests are answered with.
    pub fn of(&self, caller: &Caller) -> Result<View, FsError> {
        if self.is_own(caller) {
            return Ok(self.own.clone());
        }
        let viewer = Viewer {
            uid: caller.uid,
            gid: caller.gid,
            groups: supplementary_groups(caller.pid),
        };
        if let Some(view) = self.others.lock().get(&viewer) {
            return Ok(view.clone());
        }
        let view = View {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            catalog: Arc::new(self.own.catalog.viewed_by(viewer.clone())?),
        };
        let mut others = self.others.lock();
        others.put(viewer, view.clone());
        while others.len() > VIEWERS_KEPT {
            others.pop_lru();
        }
        Ok(view)
    }
}

/// The supplementary groups of process `pid` (from `/proc`), sorted; none
/// when they cannot be read (the process is gone): the viewer then has
/// only its primary group, which can only hide more.
fn supplementary_groups(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    let mut groups: Vec<u32> = status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|list| {
            list.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    groups.sort_unstable();
    groups.dedup();
    groups
}
