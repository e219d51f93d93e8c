//! Inode numbers for the life of a mount.
//!
//! Every name the kernel is told about gets a number the first time it is
//! seen, keyed by its parent's number and its name, and keeps it while the
//! kernel holds it: each reply that hands the kernel an inode (a lookup, an
//! entry of `readdirplus`) counts one reference, and `forget` gives them
//! back; at zero the number is dropped. Numbers are never reused, so
//! `find`, `du` and `tar` (which match files by inode) see a stable tree
//! while they hold it, and the table tracks what the kernel holds rather
//! than every path ever seen, so a long mount over rotating shards stays
//! bounded. Numbers handed out by a plain `readdir` (no reference) are
//! swept when the table has doubled since the last sweep.
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

/// The synthetic files: `.stats` and `.sources` in every directory and
/// dataset, `.records` in datasets only. Their names are reserved
/// everywhere: a real file so named is not shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Synthetic {
    /// `.stats`: the node's Snapshot rolled up, as `pchronicle stats --json`.
    Stats,
    /// `.sources`: the Snapshot's sources, as `pchronicle ls --sources --json`.
    Sources,
    /// `.records`: a leaf's records, as `pchronicle cat`, streamed.
    Records,
}

impl Synthetic {
    pub const ALL: [Synthetic; 3] = [Synthetic::Stats, Synthetic::Sources, Synthetic::Records];

    pub fn name(self) -> &'static str {
        match self {
            Synthetic::Stats => ".stats",
            Synthetic::Sources => ".sources",
            Synthetic::Records => ".records",
        }
    }

    /// Whether a node of `kind` carries this file.
    pub fn belongs_in(self, kind: crate::catalog::NodeKind) -> bool {
        self != Synthetic::Records || kind == crate::catalog::NodeKind::Dataset
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
    /// References the kernel holds (lookups not yet forgotten).
    lookups: u64,
    /// Replies being built that will hand the number to the kernel: such
    /// a number is neither forgotten nor swept meanwhile.
    pending: u64,
}

/// Tables smaller than this are never swept.
const SWEEP_MIN: usize = 65_536;

#[derive(Debug)]
struct Inner {
    nodes: HashMap<u64, Inode>,
    /// The next number to hand out.
    next: u64,
    /// Size of the table after the last sweep.
    swept_at: usize,
    /// Sweeps so far, so the mount can drop what it keeps per number for
    /// the numbers a sweep dropped.
    sweeps: u64,
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

/// A numbered node as the kernel finds it: by name in its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub ino: u64,
    pub parent: u64,
    /// `None` for the root.
    pub name: Option<String>,
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
            lookups: 1,
            pending: 0,
        };
        InodeTable {
            inner: RwLock::new(Inner {
                nodes: HashMap::from([(ROOT, root)]),
                next: ROOT + 1,
                swept_at: 0,
                sweeps: 0,
                by_name: HashMap::new(),
                collided: HashMap::new(),
                last_open: HashMap::new(),
            }),
        }
    }

    /// What `ino` stands for, and its parent's number.
    pub fn get(&self, ino: u64) -> Option<(Target, u64)> {
        let inner = self.inner.read();
        let node = inner.nodes.get(&ino)?;
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
        // Swept before the new number is made, so it is never swept itself.
        if inner.nodes.len() >= SWEEP_MIN.max(inner.swept_at.saturating_mul(2)) {
            inner.sweep();
        }
        let Target::Path(parent_rel) = &inner.nodes.get(&parent)?.target else {
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
        let ino = inner.next;
        inner.next += 1;
        inner.nodes.insert(
            ino,
            Inode {
                target,
                parent,
                lookups: 0,
                pending: 0,
            },
        );
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

    /// The number of `name` in `parent`, as [`child`](InodeTable::child),
    /// held for a reply about to hand it to the kernel: call
    /// [`remember`](InodeTable::remember) once it was sent, or
    /// [`release`](InodeTable::release) if it was not.
    pub fn claim(&self, parent: u64, name: &str) -> Option<u64> {
        loop {
            let ino = self.child(parent, name)?;
            if let Some(node) = self.inner.write().nodes.get_mut(&ino) {
                node.pending += 1;
                return Some(ino);
            }
            // Forgotten between the two locks: number it again.
        }
    }

    /// Holds the number `ino` itself for a reply about to hand it to the
    /// kernel, as [`claim`](InodeTable::claim); false when it is gone.
    pub fn claim_number(&self, ino: u64) -> bool {
        match self.inner.write().nodes.get_mut(&ino) {
            Some(node) => {
                node.pending += 1;
                true
            }
            None => false,
        }
    }

    /// A claimed number was not handed to the kernel after all.
    pub fn release(&self, ino: u64) {
        if let Some(node) = self.inner.write().nodes.get_mut(&ino) {
            node.pending = node.pending.saturating_sub(1);
        }
    }

    /// The number of `name` in `parent` if it has one (none is assigned).
    pub fn existing_child(&self, parent: u64, name: &str) -> Option<u64> {
        self.inner.read().find((parent, name_hash(name)), name)
    }

    /// The kernel was handed the claimed `ino` once more.
    pub fn remember(&self, ino: u64) {
        if let Some(node) = self.inner.write().nodes.get_mut(&ino) {
            node.pending = node.pending.saturating_sub(1);
            node.lookups = node.lookups.saturating_add(1);
        }
    }

    /// The kernel gave back `n` references to `ino`; true when the number
    /// was dropped.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        if ino == ROOT {
            return false;
        }
        let mut inner = self.inner.write();
        let Some(node) = inner.nodes.get_mut(&ino) else {
            return false;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 || node.pending > 0 {
            return false;
        }
        inner.remove(ino);
        true
    }

    /// Detaches `ino` from its name: the name's next lookup numbers it
    /// afresh, while `ino` stays valid (for the handles and references the
    /// kernel holds) until forgotten. For a file replaced underneath, so
    /// the new file is a new inode, as on a native filesystem.
    pub fn detach(&self, ino: u64) {
        let mut inner = self.inner.write();
        inner.unname(ino);
    }

    /// Records that `ino` was opened as `id`; true when the previous open
    /// saw the same identity (its cached pages are still the file's).
    pub fn reopened_unchanged(&self, ino: u64, id: FileId) -> bool {
        let mut inner = self.inner.write();
        if !inner.nodes.contains_key(&ino) {
            return false;
        }
        inner.last_open.insert(ino, id) == Some(id)
    }

    /// How many sweeps dropped unheld numbers so far.
    pub fn sweeps(&self) -> u64 {
        self.inner.read().sweeps
    }

    /// Keeps in `by_number` only the numbers the table still holds.
    pub fn retain_held<V>(&self, by_number: &mut HashMap<u64, V>) {
        let inner = self.inner.read();
        by_number.retain(|ino, _| inner.nodes.contains_key(ino));
    }

    /// Every numbered node at or below the warehouse path `scope` (the
    /// synthetic files of the directories there included), each with its
    /// parent's number and its name (none for the root).
    pub fn within(&self, scope: &Path) -> Vec<Named> {
        let inner = self.inner.read();
        inner
            .nodes
            .iter()
            .filter(|(_, node)| match &node.target {
                Target::Path(rel) | Target::Synthetic { rel, .. } => rel.starts_with(scope),
            })
            .map(|(ino, node)| Named {
                ino: *ino,
                parent: node.parent,
                name: (*ino != ROOT)
                    .then(|| inner.name_of(*ino).map(str::to_string))
                    .flatten(),
            })
            .collect()
    }

    /// `ino` itself when it stands for a warehouse path, then every
    /// directory above it up to the root, nearest first.
    pub fn ancestors(&self, ino: u64) -> Vec<u64> {
        let inner = self.inner.read();
        let mut out = Vec::new();
        let mut at = ino;
        while let Some(node) = inner.nodes.get(&at) {
            if matches!(node.target, Target::Path(_)) {
                out.push(at);
            }
            if at == ROOT || out.len() > inner.nodes.len() {
                break;
            }
            at = node.parent;
        }
        out
    }

    /// How many numbers are held.
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

    /// Drops `ino` and the ways to find it.
    fn remove(&mut self, ino: u64) {
        self.unname(ino);
        self.last_open.remove(&ino);
        self.nodes.remove(&ino);
    }

    /// Drops the ways to find `ino` by its name (only if they lead to it).
    fn unname(&mut self, ino: u64) {
        let Some(name) = self.name_of(ino).map(str::to_string) else {
            return;
        };
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        let key = (node.parent, name_hash(&name));
        if self.by_name.get(&key) == Some(&ino) {
            self.by_name.remove(&key);
        }
        let collided = (key.0, Box::from(name.as_str()));
        if self.collided.get(&collided) == Some(&ino) {
            self.collided.remove(&collided);
        }
    }

    /// Drops every number the kernel holds no reference to.
    fn sweep(&mut self) {
        let unheld: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(ino, node)| **ino != ROOT && node.lookups == 0 && node.pending == 0)
            .map(|(ino, _)| *ino)
            .collect();
        for ino in unheld {
            self.remove(ino);
        }
        self.swept_at = self.nodes.len();
        self.sweeps += 1;
    }

    /// The last component an inode was numbered under.
    fn name_of(&self, ino: u64) -> Option<&str> {
        match &self.nodes.get(&ino)?.target {
            Target::Path(rel) => rel.file_name()?.to_str(),
            Target::Synthetic { which, .. } => Some(which.name()),
        }
    }
}

fn name_hash(name: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(name)
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
    fn within_finds_a_subtree_and_ancestors_climb_to_the_root() {
        let table = InodeTable::new();
        let a = table.child(ROOT, "a").unwrap();
        let ab = table.child(a, "b").unwrap();
        let stats = table.child(ab, ".stats").unwrap();
        let abc = table.child(ab, "c.jsonl").unwrap();
        let other = table.child(ROOT, "ab").unwrap();
        let mut found: Vec<u64> = table
            .within(Path::new("a/b"))
            .iter()
            .map(|n| n.ino)
            .collect();
        found.sort_unstable();
        assert_eq!(found, [ab, stats, abc]);
        let named = table.within(Path::new("a/b/c.jsonl"));
        assert_eq!(
            named,
            [Named {
                ino: abc,
                parent: ab,
                name: Some("c.jsonl".into())
            }]
        );
        // The empty path is the whole mount, the root unnamed.
        let all = table.within(Path::new(""));
        assert_eq!(all.len(), 6);
        assert!(all.contains(&Named {
            ino: ROOT,
            parent: ROOT,
            name: None
        }));
        assert!(all.iter().any(|n| n.ino == other));
        assert_eq!(table.ancestors(abc), [abc, ab, a, ROOT]);
        assert_eq!(table.ancestors(stats), [ab, a, ROOT]);
        assert!(table.ancestors(999).is_empty());
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

    #[test]
    fn forgotten_numbers_are_dropped_and_never_reused() {
        let table = InodeTable::new();
        let a = table.claim(ROOT, "a").unwrap();
        table.remember(a);
        assert_eq!(table.claim(ROOT, "a"), Some(a));
        table.remember(a);
        let b = table.claim(a, "b").unwrap();
        table.remember(b);
        assert!(!table.forget(a, 1), "one reference is still held");
        assert!(table.forget(b, 1));
        assert!(table.get(b).is_none());
        assert_eq!(table.existing_child(a, "b"), None);
        let again = table.child(a, "b").unwrap();
        assert!(again > b, "a number is never handed out twice");
        assert!(table.forget(a, 1));
        assert!(table.get(a).is_none());
        assert!(!table.forget(ROOT, 1));
        assert!(table.get(ROOT).is_some());
    }

    #[test]
    fn unheld_numbers_are_swept_when_the_table_doubles() {
        let table = InodeTable::new();
        let held = table.claim(ROOT, "held").unwrap();
        table.remember(held);
        let claimed = table.claim(ROOT, "claimed").unwrap();
        for i in 0..SWEEP_MIN + 1 {
            let ino = table.child(ROOT, &format!("f{i}")).unwrap();
            assert!(
                table.get(ino).is_some(),
                "a new number is never swept at once"
            );
        }
        assert!(table.len() < SWEEP_MIN, "{}", table.len());
        assert!(table.get(held).is_some());
        assert!(
            table.get(claimed).is_some(),
            "a claimed number survives a sweep"
        );
        // A claim in flight also survives a forget of the kernel's reference.
        table.remember(claimed);
        let again = table.claim(ROOT, "claimed").unwrap();
        assert!(!table.forget(claimed, 1));
        table.remember(again);
        assert!(table.forget(claimed, 1));
    }
}
