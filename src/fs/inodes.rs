//! Inode numbers for the life of a mount.
//!
//! Every name the kernel is told about gets a number the first time it is
//! seen, keyed by its parent's number and its name, and keeps it until the
//! mount ends: numbers are never reused, so `find`, `du` and `tar` (which
//! match files by inode) see a stable tree, and a dentry the kernel still
//! holds after a `forget` can always be resolved again. A path that
//! vanishes and comes back gets its old number. The table grows with the
//! number of distinct paths looked at, about two hundred bytes each.
//!
//! An inode records where it points (a path relative to the warehouse
//! root, or one of a directory's two synthetic files), not what it is:
//! whether a path is a directory, a dataset or a file is asked of the
//! catalog each time, so a directory that becomes a leaf underneath is
//! shown as one within the attribute TTL.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::catalog::cache::FileId;

/// The root directory's inode number (fixed by FUSE).
pub const ROOT: u64 = 1;

/// The two synthetic files every directory and dataset carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Synthetic {
    /// `.stats`: the node's Snapshot rolled up, as `pchronicle stats --json`.
    Stats,
    /// `.sources`: the Snapshot's sources, as `pchronicle ls --sources --json`.
    Sources,
}

impl Synthetic {
    pub const ALL: [Synthetic; 2] = [Synthetic::Stats, Synthetic::Sources];

    pub fn name(self) -> &'static str {
        match self {
            Synthetic::Stats => ".stats",
            Synthetic::Sources => ".sources",
        }
    }

    pub fn from_name(name: &str) -> Option<Synthetic> {
        Synthetic::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What an inode number stands for.
#[derive(Debug, Clone)]
pub enum Target {
    /// A warehouse path, relative to its root (empty for the root).
    Path(Arc<Path>),
    /// A synthetic file of the node numbered `of`, whose path is `rel`.
    Synthetic {
        of: u64,
        rel: Arc<Path>,
        which: Synthetic,
    },
}

#[derive(Debug)]
struct Inode {
    target: Target,
    parent: u64,
}

#[derive(Debug)]
struct Inner {
    /// Index `i` holds inode number `i + 1`.
    nodes: Vec<Inode>,
    /// `(parent, hash of the name)` to the first inode with that pair;
    /// the name itself is read back from the inode's path, so it is not
    /// stored twice.
    by_name: HashMap<(u64, u64), u64>,
    /// Names whose pair was already taken by another name (a hash
    /// collision): rare, so kept whole.
    collided: HashMap<(u64, Box<str>), u64>,
    /// The identity of each file when it was last opened, so an unchanged
    /// file keeps its page cache across opens (kept apart: most inodes are
    /// never opened).
    last_open: HashMap<u64, FileId>,
}

/// The mount's inode numbers; shared by every request thread.
#[derive(Debug)]
pub struct InodeTable {
    inner: RwLock<Inner>,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}

impl InodeTable {
    /// A table holding only the root.
    pub fn new() -> InodeTable {
        let root = Inode {
            target: Target::Path(Arc::from(Path::new(""))),
            parent: ROOT,
        };
        InodeTable {
            inner: RwLock::new(Inner {
                nodes: vec![root],
                by_name: HashMap::new(),
                collided: HashMap::new(),
                last_open: HashMap::new(),
            }),
        }
    }

    /// What `ino` stands for, and its parent's number.
    pub fn get(&self, ino: u64) -> Option<(Target, u64)> {
        let inner = self.inner.read();
        let node = inner.nodes.get(index(ino)?)?;
        Some((node.target.clone(), node.parent))
    }

    /// The number of `name` in the directory numbered `parent`, assigned on
    /// first sight. `None` when `parent` is unknown or is not a path.
    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        let key = (parent, name_hash(name));
        if let Some(ino) = self.inner.read().find(key, name) {
            return Some(ino);
        }
        let mut inner = self.inner.write();
        if let Some(ino) = inner.find(key, name) {
            return Some(ino);
        }
        let Target::Path(parent_rel) = &inner.nodes.get(index(parent)?)?.target else {
            return None;
        };
        let target = match Synthetic::from_name(name) {
            Some(which) => Target::Synthetic {
                of: parent,
                rel: Arc::clone(parent_rel),
                which,
            },
            None => Target::Path(Arc::from(join(parent_rel, name))),
        };
        inner.nodes.push(Inode { target, parent });
        let ino = inner.nodes.len() as u64;
        match inner.by_name.entry(key) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(ino);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                inner.collided.insert((parent, Box::from(name)), ino);
            }
        }
        Some(ino)
    }

    /// Records that `ino` was opened as `id`; true when the previous open
    /// saw the same identity (its cached pages are still the file's).
    pub fn reopened_unchanged(&self, ino: u64, id: FileId) -> bool {
        let mut inner = self.inner.write();
        if index(ino).is_none_or(|i| i >= inner.nodes.len()) {
            return false;
        }
        inner.last_open.insert(ino, id) == Some(id)
    }

    /// How many numbers have been handed out.
    pub fn len(&self) -> usize {
        self.inner.read().nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Inner {
    /// The inode of `name` under the parent in `key`, if numbered.
    fn find(&self, key: (u64, u64), name: &str) -> Option<u64> {
        let ino = *self.by_name.get(&key)?;
        if self.name_of(ino) == Some(name) {
            return Some(ino);
        }
        self.collided.get(&(key.0, Box::from(name))).copied()
    }

    /// The last component an inode was numbered under.
    fn name_of(&self, ino: u64) -> Option<&str> {
        match &self.nodes.get(index(ino)?)?.target {
            Target::Path(rel) => rel.file_name()?.to_str(),
            Target::Synthetic { which, .. } => Some(which.name()),
        }
    }
}

fn name_hash(name: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(name)
}

fn index(ino: u64) -> Option<usize> {
    usize::try_from(ino.checked_sub(1)?).ok()
}

fn join(parent: &Path, name: &str) -> PathBuf {
    if parent.as_os_str().is_empty() {
        PathBuf::from(name)
    } else {
        parent.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_name_hashes_still_get_their_own_numbers() {
        let table = InodeTable::new();
        let a = table.child(ROOT, "a").unwrap();
        // Forge a collision: "b" filed under the pair of "a".
        {
            let mut inner = table.inner.write();
            let key = (ROOT, name_hash("b"));
            inner.by_name.insert(key, a);
        }
        let b = table.child(ROOT, "b").unwrap();
        assert_ne!(a, b);
        assert_eq!(table.child(ROOT, "b"), Some(b));
        assert_eq!(table.child(ROOT, "a"), Some(a));
        assert!(matches!(table.get(b), Some((Target::Path(p), _)) if &*p == Path::new("b")));
    }

    #[test]
    fn numbers_are_stable_and_distinct() {
        let table = InodeTable::new();
        let a = table.child(ROOT, "a").unwrap();
        let b = table.child(ROOT, "b").unwrap();
        let ab = table.child(a, "b").unwrap();
        assert_ne!(a, b);
        assert_ne!(b, ab);
        assert_eq!(table.child(ROOT, "a"), Some(a));
        assert_eq!(table.child(a, "b"), Some(ab));
        match table.get(ab) {
            Some((Target::Path(rel), parent)) => {
                assert_eq!(&*rel, Path::new("a/b"));
                assert_eq!(parent, a);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn synthetic_names_point_at_their_directory() {
        let table = InodeTable::new();
        let dir = table.child(ROOT, "team").unwrap();
        let stats = table.child(dir, ".stats").unwrap();
        match table.get(stats) {
            Some((
                Target::Synthetic {
                    of,
                    rel,
                    which: Synthetic::Stats,
                },
                _,
            )) => {
                assert_eq!(of, dir);
                assert_eq!(&*rel, Path::new("team"));
            }
            other => panic!("unexpected {other:?}"),
        }
        // A synthetic file has no children.
        assert_eq!(table.child(stats, "x"), None);
        assert_eq!(table.child(999, "x"), None);
        assert!(table.get(0).is_none());
    }

    #[test]
    fn reopening_an_unchanged_file_is_recognised() {
        let table = InodeTable::new();
        let f = table.child(ROOT, "f.jsonl").unwrap();
        let id = FileId {
            dev: 1,
            ino: 2,
            size: 3,
            mtime_ns: 4,
            ctime_ns: 5,
            mode: 0o100644,
        };
        assert!(!table.reopened_unchanged(f, id));
        assert!(table.reopened_unchanged(f, id));
        let grown = FileId { size: 4, ..id };
        assert!(!table.reopened_unchanged(f, grown));
    }
}
