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
//! swept when the table has doubled since the last sweep. A number is a
//! slot of the table and that slot's generation ([`slots`]): small while
//! nothing was dropped, and never handed out twice.
//!
//! An inode records where it points (a path relative to the warehouse
//! root, or one of a directory's two synthetic files), not what it is:
//! whether a path is a directory, a dataset or a file is asked of the
//! catalog each time, so a directory that becomes a leaf underneath is
//! shown as one within the attribute TTL. It is stored as its name and its
//! parent's number ([`slots`]); the path is rebuilt when asked for.
//! A name is found by a hash of its parent's number and itself ([`slots`]).

mod slots;

use std::collections::HashMap;
use std::path::{Component, Path};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::catalog::cache::FileId;
use slots::Slots;

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

/// Tables smaller than this are never swept.
const SWEEP_MIN: usize = 65_536;

#[derive(Debug)]
struct Inner {
    slots: Slots,
    /// Live numbers after the last sweep.
    swept_at: usize,
    /// Sweeps so far, so the mount can drop what it keeps per number for
    /// the numbers a sweep dropped.
    sweeps: u64,
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
        InodeTable {
            inner: RwLock::new(Inner {
                slots: Slots::new(),
                swept_at: 0,
                sweeps: 0,
                last_open: HashMap::new(),
            }),
        }
    }

    /// What `ino` stands for, and its parent's number.
    pub fn get(&self, ino: u64) -> Option<(Target, u64)> {
        let inner = self.inner.read();
        let slot = inner.slots.get(ino)?;
        let parent = inner.slots.parent(ino)?;
        let rel = inner.slots.path(ino)?;
        let target = match slot.synthetic() {
            Some(which) => Target::Synthetic {
                of: parent,
                rel,
                which,
            },
            None => Target::Path(rel),
        };
        Some((target, parent))
    }

    /// The number of `name` in the directory numbered `parent`, assigned on
    /// first sight. `None` when `parent` is unknown or is not a path.
    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        if let Some(ino) = self.inner.read().find(parent, name) {
            return Some(ino);
        }
        let mut inner = self.inner.write();
        if let Some(ino) = inner.find(parent, name) {
            return Some(ino);
        }
        // Swept before the new number is made, so it is never swept itself.
        if inner.slots.live() >= SWEEP_MIN.max(inner.swept_at.saturating_mul(2)) {
            inner.sweep();
        }
        inner.slots.add(parent, name)
    }

    /// The number of `name` in `parent`, as [`child`](InodeTable::child),
    /// held for a reply about to hand it to the kernel: call
    /// [`remember`](InodeTable::remember) once it was sent, or
    /// [`release`](InodeTable::release) if it was not.
    pub fn claim(&self, parent: u64, name: &str) -> Option<u64> {
        loop {
            let ino = self.child(parent, name)?;
            if self.claim_number(ino) {
                return Some(ino);
            }
            // Forgotten between the two locks: number it again.
        }
    }

    /// Holds the number `ino` itself for a reply about to hand it to the
    /// kernel, as [`claim`](InodeTable::claim); false when it is gone.
    pub fn claim_number(&self, ino: u64) -> bool {
        match self.inner.write().slots.get_mut(ino) {
            Some(slot) => {
                slot.pending = slot.pending.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// A claimed number was not handed to the kernel after all.
    pub fn release(&self, ino: u64) {
        if let Some(slot) = self.inner.write().slots.get_mut(ino) {
            slot.pending = slot.pending.saturating_sub(1);
        }
    }

    /// The number of `name` in `parent` if it has one (none is assigned).
    pub fn existing_child(&self, parent: u64, name: &str) -> Option<u64> {
        self.inner.read().find(parent, name)
    }

    /// The kernel was handed the claimed `ino` once more.
    pub fn remember(&self, ino: u64) {
        if let Some(slot) = self.inner.write().slots.get_mut(ino) {
            slot.pending = slot.pending.saturating_sub(1);
            slot.lookups = slot.lookups.saturating_add(1);
        }
    }

    /// The kernel gave back `n` references to `ino`; true when the number
    /// was dropped.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        if ino == ROOT {
            return false;
        }
        let mut inner = self.inner.write();
        let Some(slot) = inner.slots.get_mut(ino) else {
            return false;
        };
        slot.lookups = slot.lookups.saturating_sub(n);
        if slot.lookups > 0 || slot.pending > 0 {
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
        self.inner.write().slots.unname(ino);
    }

    /// Records that `ino` was opened as `id`; true when the previous open
    /// saw the same identity (its cached pages are still the file's).
    pub fn reopened_unchanged(&self, ino: u64, id: FileId) -> bool {
        let mut inner = self.inner.write();
        if inner.slots.get(ino).is_none() {
            return false;
        }
        inner.last_open.insert(ino, id) == Some(id)
    }

    /// Notes that the kernel was shown the file `file` (device, inode)
    /// underneath `ino` (dropped with the number).
    pub fn show(&self, ino: u64, file: (u64, u64)) {
        if let Some(slot) = self.inner.write().slots.get_mut(ino) {
            slot.shown = file;
        }
    }

    /// The file underneath `ino` the kernel was last shown, if noted.
    pub fn shown(&self, ino: u64) -> Option<(u64, u64)> {
        let inner = self.inner.read();
        let shown = inner.slots.get(ino)?.shown;
        (shown != slots::NOT_SHOWN).then_some(shown)
    }

    /// How many numbers have the file they were last shown as noted.
    pub fn files_shown(&self) -> usize {
        let inner = self.inner.read();
        inner
            .slots
            .numbers()
            .filter(|(_, slot)| slot.shown != slots::NOT_SHOWN)
            .count()
    }

    /// How many sweeps dropped unheld numbers so far.
    pub fn sweeps(&self) -> u64 {
        self.inner.read().sweeps
    }

    /// Keeps in `by_number` only the numbers the table still holds.
    pub fn retain_held<V>(&self, by_number: &mut HashMap<u64, V>) {
        let inner = self.inner.read();
        by_number.retain(|ino, _| inner.slots.get(*ino).is_some());
    }

    /// Every numbered node at or below the warehouse path `scope` (the
    /// synthetic files of the directories there included), each with its
    /// parent's number and its name (none for the root).
    pub fn within(&self, scope: &Path) -> Vec<Named> {
        let Some(scope) = scope
            .components()
            .map(|c| match c {
                Component::Normal(name) => name.to_str(),
                _ => None,
            })
            .collect::<Option<Vec<&str>>>()
        else {
            // Every numbered path is plain UTF-8 names.
            return Vec::new();
        };
        let inner = self.inner.read();
        let mut chain = Vec::new();
        inner
            .slots
            .numbers()
            .map(|(ino, _)| ino)
            .filter(|ino| inner.slots.within(*ino, &scope, &mut chain))
            .map(|ino| Named {
                ino,
                parent: inner.slots.parent(ino).unwrap_or(ROOT),
                name: (ino != ROOT)
                    .then(|| inner.slots.name(ino).map(str::to_string))
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
        while let Some(slot) = inner.slots.get(at) {
            if slot.synthetic().is_none() {
                out.push(at);
            }
            match inner.slots.parent(at) {
                Some(parent) if at != ROOT && out.len() <= inner.slots.live() => at = parent,
                _ => break,
            }
        }
        out
    }

    /// How many numbers are held.
    pub fn len(&self) -> usize {
        self.inner.read().slots.live()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Inner {
    /// The number of `name` under `parent`, if numbered.
    fn find(&self, parent: u64, name: &str) -> Option<u64> {
        self.slots.find(parent, name)
    }

    /// Drops `ino` and the ways to find it.
    fn remove(&mut self, ino: u64) {
        self.last_open.remove(&ino);
        self.slots.drop_number(ino);
    }

    /// Drops every number the kernel holds no reference to.
    fn sweep(&mut self) {
        let unheld: Vec<u64> = self
            .slots
            .numbers()
            .filter(|(ino, slot)| *ino != ROOT && slot.lookups == 0 && slot.pending == 0)
            .map(|(ino, _)| ino)
            .collect();
        for ino in unheld {
            self.remove(ino);
        }
        self.swept_at = self.slots.live();
        self.sweeps += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

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

    fn path_of(table: &InodeTable, ino: u64) -> Option<PathBuf> {
        match table.get(ino)? {
            (Target::Path(rel), _) => Some(rel.to_path_buf()),
            (Target::Synthetic { rel, which, .. }, _) => Some(rel.join(which.name())),
        }
    }

    #[test]
    fn a_slot_takes_48_bytes() {
        assert_eq!(std::mem::size_of::<slots::Slot>(), 48);
    }

    #[test]
    fn deep_paths_are_rebuilt_from_names() {
        let table = InodeTable::new();
        let mut at = ROOT;
        let mut expected = PathBuf::new();
        for depth in 0..200 {
            let name = format!("level-{depth}");
            at = table.child(at, &name).unwrap();
            expected.push(&name);
        }
        assert_eq!(path_of(&table, at), Some(expected.clone()));
        let stats = table.child(at, ".stats").unwrap();
        assert_eq!(path_of(&table, stats), Some(expected.join(".stats")));
        assert_eq!(table.ancestors(at).len(), 201);
        assert_eq!(table.within(&expected).len(), 2);
        assert_eq!(table.within(Path::new("level-0/level-1")).len(), 200);
        assert!(table.within(Path::new("level-1")).is_empty());
        assert!(table.within(Path::new("../level-0")).is_empty());
    }

    #[test]
    fn a_child_keeps_its_path_after_its_parent_is_dropped() {
        let table = InodeTable::new();
        let dir = table.claim(ROOT, "dir").unwrap();
        table.remember(dir);
        let file = table.claim(dir, "f.jsonl").unwrap();
        table.remember(file);
        assert!(table.forget(dir, 1));
        assert!(table.get(dir).is_none());
        assert_eq!(table.existing_child(ROOT, "dir"), None);
        assert_eq!(path_of(&table, file), Some(PathBuf::from("dir/f.jsonl")));
        assert_eq!(table.ancestors(file), [file], "the parent's number is gone");
        // The name gets a new number; the held child keeps its own.
        let again = table.child(ROOT, "dir").unwrap();
        assert_ne!(again, dir);
        assert_ne!(table.child(again, "f.jsonl"), Some(file));
        assert_eq!(table.len(), 4);
        assert!(table.forget(file, 1));
        assert!(table.get(file).is_none());
        // The dropped parent's slot went with its last child, under a new
        // generation: its number is not handed out again.
        let numbers: Vec<u64> = (0..4)
            .map(|i| table.child(ROOT, &format!("n{i}")).unwrap())
            .collect();
        assert!(!numbers.contains(&dir) && !numbers.contains(&file));
    }

    #[test]
    fn a_reused_slot_gets_a_number_never_handed_out() {
        let table = InodeTable::new();
        let mut seen = std::collections::HashSet::new();
        for round in 0..50 {
            let ino = table.claim(ROOT, &format!("f{round}")).unwrap();
            table.remember(ino);
            assert!(seen.insert(ino), "{ino} handed out twice");
            assert_eq!(
                path_of(&table, ino),
                Some(PathBuf::from(format!("f{round}")))
            );
            assert!(table.forget(ino, 1));
        }
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_detached_number_keeps_its_path_and_its_name_gets_another() {
        let table = InodeTable::new();
        let dir = table.child(ROOT, "d").unwrap();
        let old = table.child(dir, "f").unwrap();
        table.detach(old);
        let new = table.child(dir, "f").unwrap();
        assert_ne!(old, new);
        assert_eq!(path_of(&table, old), path_of(&table, new));
        assert_eq!(table.child(dir, "f"), Some(new));
    }

    #[test]
    fn names_survive_the_arena_being_rewritten() {
        let table = InodeTable::new();
        let dir = table.child(ROOT, "keep").unwrap();
        let kept = table.child(dir, "kept.jsonl").unwrap();
        let long = "x".repeat(200);
        for i in 0..2_000 {
            let ino = table.claim(ROOT, &format!("{long}{i}")).unwrap();
            table.remember(ino);
            assert!(table.forget(ino, 1));
        }
        assert_eq!(
            path_of(&table, kept),
            Some(PathBuf::from("keep/kept.jsonl"))
        );
        assert_eq!(table.child(dir, "kept.jsonl"), Some(kept));
        assert!(table.inner.read().slots.arena_len() < (64 << 10) + 512);
    }
}
