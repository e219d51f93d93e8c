//! The inode table's storage: one fixed-size slot per number in one
//! vector, each holding its name and its parent's slot rather than a whole
//! path, every name in one string arena. A walk of 100,000 files numbers
//! 100,000 names; a map entry and a path allocation for each cost about
//! twice what a 48-byte slot and the name's bytes do.
//!
//! A number is its slot's index (plus one: the root, slot 0, is number 1)
//! in its low 32 bits and the slot's generation in its high 32 bits. A slot
//! is reused once its number is dropped, under the next generation, so a
//! number is never handed out twice (a slot whose generation would wrap is
//! retired instead). Numbers stay small while nothing is dropped.
//!
//! A path is rebuilt by walking parents, so a slot is kept while slots
//! below it are: a number dropped while it still has children becomes a
//! ghost (no longer a number, only its name and parent kept) and is freed
//! with its last child. The kernel never holds a child without its parent,
//! so ghosts only anchor numbers nobody holds, until they are dropped too.
//!
//! A name is found by a hash of its parent's number and itself, keyed per
//! process (names come from the warehouse, and a hostile writer can choose
//! them). The table of names holds slot indices only (five bytes a name):
//! the key of each is recomputed from its slot, which a ghost parent keeps
//! its number for, and two names of one hash are told apart by comparing
//! them.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hashbrown::HashTable;

use super::Synthetic;

/// [`Slot::shown`] when no file was shown.
pub(super) const NOT_SHOWN: (u64, u64) = (0, 0);

/// The root's slot.
const ROOT_SLOT: u32 = 0;

/// The arena is rewritten without the names of freed slots once those
/// take more than half of it, and at least this much.
const COMPACT_MIN: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Unused: on the vacant list, or retired.
    Free,
    /// Stands for its number.
    Live,
    /// Its number was dropped; kept because slots below it still are.
    Ghost,
}

/// One number. 48 bytes.
#[derive(Debug)]
pub(super) struct Slot {
    /// References the kernel holds (lookups not yet forgotten).
    pub(super) lookups: u64,
    /// The file underneath (device, inode) the kernel was last shown as
    /// this number; `(0, 0)`, which no file is, when none was.
    pub(super) shown: (u64, u64),
    /// Replies being built that will hand the number to the kernel: such
    /// a number is neither forgotten nor swept meanwhile.
    pub(super) pending: u32,
    parent: u32,
    generation: u32,
    /// Where the name lies in the arena (a synthetic file's name is its
    /// kind's).
    name_at: u32,
    /// Slots whose parent this is.
    children: u32,
    name_len: u16,
    which: Option<Synthetic>,
    state: State,
}

impl Slot {
    /// The synthetic file this slot is, if it is one.
    pub(super) fn synthetic(&self) -> Option<Synthetic> {
        self.which
    }
}

/// The slots of one table.
pub(super) struct Slots<S = RandomState> {
    slots: Vec<Slot>,
    /// Freed slots, reused first.
    vacant: Vec<u32>,
    names: String,
    /// Bytes of the arena no slot refers to any more.
    garbage: usize,
    /// Live slots.
    live: usize,
    /// The live slots found by name (all but the root and detached ones),
    /// by the hash of their parent's number and their name.
    by_name: HashTable<u32>,
    hasher: S,
}

impl<S> std::fmt::Debug for Slots<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("live", &self.live)
            .field("slots", &self.slots.len())
            .field("arena", &self.names.len())
            .finish_non_exhaustive()
    }
}

impl Slots {
    /// Only the root, held for good.
    pub(super) fn new() -> Slots {
        Slots::with_hasher(RandomState::new())
    }
}

impl<S: BuildHasher> Slots<S> {
    /// Only the root, names hashed by `hasher`.
    pub(super) fn with_hasher(hasher: S) -> Slots<S> {
        let root = Slot {
            lookups: 1,
            shown: NOT_SHOWN,
            pending: 0,
            parent: ROOT_SLOT,
            generation: 0,
            name_at: 0,
            children: 0,
            name_len: 0,
            which: None,
            state: State::Live,
        };
        Slots {
            slots: vec![root],
            vacant: Vec::new(),
            names: String::new(),
            garbage: 0,
            live: 1,
            by_name: HashTable::new(),
            hasher,
        }
    }

    /// Bytes of the name arena.
    #[cfg(test)]
    pub(super) fn arena_len(&self) -> usize {
        self.names.len()
    }

    /// How many numbers are live.
    pub(super) fn live(&self) -> usize {
        self.live
    }

    /// The number slot `at` stands for.
    fn number(&self, at: u32) -> u64 {
        number(&self.slots, at)
    }

    /// The slot of the live number `ino`.
    fn slot_of(&self, ino: u64) -> Option<u32> {
        let at = (ino as u32).checked_sub(1)?;
        let slot = self.slots.get(at as usize)?;
        (slot.state == State::Live && u64::from(slot.generation) == ino >> 32).then_some(at)
    }

    pub(super) fn get(&self, ino: u64) -> Option<&Slot> {
        self.slot_of(ino).map(|at| &self.slots[at as usize])
    }

    pub(super) fn get_mut(&mut self, ino: u64) -> Option<&mut Slot> {
        self.slot_of(ino).map(|at| &mut self.slots[at as usize])
    }

    /// The number of `ino`'s parent (the root's is the root).
    pub(super) fn parent(&self, ino: u64) -> Option<u64> {
        let at = self.slot_of(ino)?;
        Some(self.number(self.slots[at as usize].parent))
    }

    /// The name `ino` was numbered under (empty for the root).
    pub(super) fn name(&self, ino: u64) -> Option<&str> {
        self.slot_of(ino).map(|at| self.name_at(at))
    }

    fn name_at(&self, at: u32) -> &str {
        name_at(&self.slots, &self.names, at)
    }

    /// The live number of `name` in the directory numbered `parent`, if
    /// it has one.
    pub(super) fn find(&self, parent: u64, name: &str) -> Option<u64> {
        let hash = self.hasher.hash_one((parent, name));
        let at = *self.by_name.find(hash, |&at| {
            self.number(self.slots[at as usize].parent) == parent && self.name_at(at) == name
        })?;
        Some(self.number(at))
    }

    /// Makes `at` (a live slot) found by its name.
    fn index_name(&mut self, at: u32) {
        let (slots, names, hasher) = (&self.slots, &self.names, &self.hasher);
        let key = |at: u32| {
            let parent = number(slots, slots[at as usize].parent);
            hasher.hash_one((parent, name_at(slots, names, at)))
        };
        self.by_name.insert_unique(key(at), at, |&at| key(at));
    }

    /// Stops `ino` from being found by its name (it stays a number): its
    /// name's next lookup numbers it afresh.
    pub(super) fn unname(&mut self, ino: u64) {
        let Some(at) = self.slot_of(ino) else {
            return;
        };
        let parent = self.number(self.slots[at as usize].parent);
        let hash = self.hasher.hash_one((parent, self.name_at(at)));
        if let Ok(entry) = self.by_name.find_entry(hash, |&other| other == at) {
            entry.remove();
        }
    }

    /// A new number for `name` in the directory numbered `parent` (a
    /// synthetic file when `name` is one's), found by that name from now
    /// on: ask [`find`](Slots::find) first. `None` when `parent` is not a
    /// live directory's number, or the table cannot hold another name (a
    /// name over 64 KiB, which no kernel sends, or 4 Gi of them).
    pub(super) fn add(&mut self, parent: u64, name: &str) -> Option<u64> {
        let parent_at = self.slot_of(parent)?;
        if self.slots[parent_at as usize].which.is_some() {
            return None;
        }
        let which = Synthetic::from_name(name);
        let (name_at, name_len) = match which {
            Some(_) => (0, 0),
            None => self.store_name(name)?,
        };
        let at = match self.vacant.pop() {
            Some(at) => at,
            None => {
                // Number 0 does not exist: the last slot is number 2^32 - 1.
                let at = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|at| *at < u32::MAX)?;
                self.slots.push(Slot {
                    lookups: 0,
                    shown: NOT_SHOWN,
                    pending: 0,
                    parent: 0,
                    generation: 0,
                    name_at: 0,
                    children: 0,
                    name_len: 0,
                    which: None,
                    state: State::Free,
                });
                at
            }
        };
        let slot = &mut self.slots[at as usize];
        *slot = Slot {
            lookups: 0,
            shown: NOT_SHOWN,
            pending: 0,
            parent: parent_at,
            generation: slot.generation,
            name_at,
            children: 0,
            name_len,
            which,
            state: State::Live,
        };
        self.slots[parent_at as usize].children += 1;
        self.live += 1;
        self.index_name(at);
        Some(self.number(at))
    }

    /// Drops the number `ino` (never the root's): its slot is freed, or
    /// kept as a ghost while slots below it are.
    pub(super) fn drop_number(&mut self, ino: u64) {
        let Some(at) = self.slot_of(ino).filter(|at| *at != ROOT_SLOT) else {
            return;
        };
        self.unname(ino);
        self.live -= 1;
        if self.slots[at as usize].children > 0 {
            self.slots[at as usize].state = State::Ghost;
            return;
        }
        self.free(at);
    }

    /// Frees the childless slot `at`, and each ghost above it left
    /// childless by that.
    fn free(&mut self, mut at: u32) {
        loop {
            let slot = &mut self.slots[at as usize];
            slot.state = State::Free;
            slot.lookups = 0;
            slot.shown = NOT_SHOWN;
            slot.pending = 0;
            self.garbage += usize::from(slot.name_len);
            slot.name_len = 0;
            slot.which = None;
            let parent = slot.parent;
            // Under the next generation the slot's number is a new one; a
            // slot whose generations are spent is never reused.
            if let Some(next) = slot.generation.checked_add(1) {
                slot.generation = next;
                self.vacant.push(at);
            }
            let up = &mut self.slots[parent as usize];
            up.children -= 1;
            if up.children > 0 || up.state != State::Ghost {
                break;
            }
            at = parent;
        }
        self.compact_if_wasteful();
    }

    /// Every live number with its slot.
    pub(super) fn numbers(&self) -> impl Iterator<Item = (u64, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.state == State::Live)
            .map(|(at, slot)| (self.number(at as u32), slot))
    }

    /// The warehouse path `ino` stands for: its own, or for a synthetic
    /// file its directory's (empty for the root).
    pub(super) fn path(&self, ino: u64) -> Option<Arc<Path>> {
        let at = self.slot_of(ino)?;
        let mut chain = Vec::new();
        self.chain(at, &mut chain);
        let len = chain.iter().map(|at| self.name_at(*at).len() + 1).sum();
        let mut path = String::with_capacity(len);
        for at in chain.iter().rev() {
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(self.name_at(*at));
        }
        Some(Arc::from(PathBuf::from(path)))
    }

    /// Whether the path `ino` stands for (as [`path`](Slots::path)) is
    /// `scope` or lies below it; `chain` is scratch space.
    pub(super) fn within(&self, ino: u64, scope: &[&str], chain: &mut Vec<u32>) -> bool {
        let Some(at) = self.slot_of(ino) else {
            return false;
        };
        chain.clear();
        self.chain(at, chain);
        chain.len() >= scope.len()
            && chain
                .iter()
                .rev()
                .zip(scope)
                .all(|(at, name)| self.name_at(*at) == *name)
    }

    /// The slots whose names make the path of `at`, nearest first (a
    /// synthetic file's own name left out; the root has none).
    fn chain(&self, mut at: u32, out: &mut Vec<u32>) {
        if self.slots[at as usize].which.is_some() {
            at = self.slots[at as usize].parent;
        }
        // Each parent was numbered before its children, so the walk ends;
        // the bound only guards that invariant.
        while at != ROOT_SLOT && out.len() < self.slots.len() {
            out.push(at);
            at = self.slots[at as usize].parent;
        }
    }

    /// Stores `name` in the arena: where it lies and its length.
    fn store_name(&mut self, name: &str) -> Option<(u32, u16)> {
        let len = u16::try_from(name.len()).ok()?;
        if self.names.len() + name.len() > u32::MAX as usize {
            self.compact();
        }
        let at = u32::try_from(self.names.len()).ok()?;
        u32::try_from(self.names.len() + name.len()).ok()?;
        self.names.push_str(name);
        Some((at, len))
    }

    fn compact_if_wasteful(&mut self) {
        if self.garbage >= COMPACT_MIN && self.garbage * 2 > self.names.len() {
            self.compact();
        }
    }

    /// Rewrites the arena with only the names slots refer to.
    fn compact(&mut self) {
        let mut names = String::with_capacity(self.names.len() - self.garbage);
        for slot in &mut self.slots {
            if slot.state == State::Free || slot.which.is_some() {
                continue;
            }
            let start = slot.name_at as usize;
            slot.name_at = names.len() as u32;
            names.push_str(&self.names[start..start + usize::from(slot.name_len)]);
        }
        self.names = names;
        self.garbage = 0;
    }
}

/// The number slot `at` of `slots` stands for (a ghost's is the one it
/// had, which its children's keys were made with).
fn number(slots: &[Slot], at: u32) -> u64 {
    u64::from(slots[at as usize].generation) << 32 | (u64::from(at) + 1)
}

/// The name of slot `at` of `slots`, whose names lie in `names`.
fn name_at<'a>(slots: &[Slot], names: &'a str, at: u32) -> &'a str {
    let slot = &slots[at as usize];
    match slot.which {
        Some(which) => which.name(),
        None => {
            let start = slot.name_at as usize;
            &names[start..start + usize::from(slot.name_len)]
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasherDefault, Hasher};

    use super::*;

    const ROOT: u64 = 1;

    /// Every name hashes the same: each lookup compares names along one
    /// probe sequence.
    #[derive(Default)]
    struct Constant;

    impl Hasher for Constant {
        fn write(&mut self, _: &[u8]) {}
        fn finish(&self) -> u64 {
            7
        }
    }

    #[test]
    fn names_of_one_hash_are_told_apart_and_go_alone() {
        let mut slots = Slots::with_hasher(BuildHasherDefault::<Constant>::default());
        let a = slots.add(ROOT, "a").unwrap();
        let b = slots.add(ROOT, "b").unwrap();
        let dir = slots.add(ROOT, "dir").unwrap();
        let a_below = slots.add(dir, "a").unwrap();
        assert_eq!(slots.find(ROOT, "a"), Some(a));
        assert_eq!(slots.find(ROOT, "b"), Some(b));
        assert_eq!(slots.find(dir, "a"), Some(a_below));
        slots.drop_number(a);
        assert_eq!(slots.find(ROOT, "a"), None);
        assert_eq!(slots.find(ROOT, "b"), Some(b));
        assert_eq!(slots.find(dir, "a"), Some(a_below));
        let again = slots.add(ROOT, "a").unwrap();
        assert_ne!(again, a);
        assert_eq!(slots.find(ROOT, "a"), Some(again));
    }

    #[test]
    fn a_ghosts_children_keep_their_keys_while_the_table_grows() {
        let mut slots = Slots::new();
        let dir = slots.add(ROOT, "d").unwrap();
        let file = slots.add(dir, "f").unwrap();
        slots.drop_number(dir);
        assert_eq!(slots.find(ROOT, "d"), None);
        // Growing rehashes every name, the ghost's child's from its slot.
        for i in 0..5_000 {
            slots.add(ROOT, &format!("n{i}")).unwrap();
        }
        assert_eq!(slots.find(dir, "f"), Some(file));
        slots.drop_number(file);
        assert_eq!(slots.find(dir, "f"), None);
        assert_eq!(slots.by_name.len(), 5_000);
        assert_eq!(
            slots.find(ROOT, "n4999").and_then(|n| slots.name(n)),
            Some("n4999")
        );
    }

    #[test]
    fn an_unnamed_number_stays_but_is_not_found() {
        let mut slots = Slots::new();
        let file = slots.add(ROOT, "f").unwrap();
        slots.unname(file);
        assert_eq!(slots.find(ROOT, "f"), None);
        assert_eq!(slots.name(file), Some("f"));
        let new = slots.add(ROOT, "f").unwrap();
        assert_eq!(slots.find(ROOT, "f"), Some(new));
        slots.drop_number(file);
        assert_eq!(slots.find(ROOT, "f"), Some(new));
    }
}
