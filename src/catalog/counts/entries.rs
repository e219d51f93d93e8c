//! The count cache's entries in few allocations: one vector of fixed-size
//! slots, every path in one string arena (each ended by a NUL, which no
//! path holds, so a slot keeps no length), and a hash table of slot
//! numbers (five bytes a slot, where a map from a path's hash to its slot
//! took seventeen) whose keys are the paths in the arena. A first mount counts every file of the warehouse while it
//! walks; a map of a small allocation per path (key and node) interleaved
//! with the walk's own short-lived buffers leaves the heap fragmented long
//! after the walk. Large vectors come from their own mappings instead, and
//! give their memory back whole when they grow or go.
//!
//! Entries are kept in least-recently-used order (a list threaded through
//! the slots), so the cache's capacity evicts the entry used longest ago.
//!
//! Paths come from the warehouse, and a hostile writer can choose them, so
//! the hash is keyed per process; two paths of one hash still both work
//! (the table compares whole paths).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::Entry;

/// "No slot": the end of the recency list.
const NIL: u32 = u32::MAX;

/// The arena is rewritten without the paths of removed entries once those
/// take more than half of it, and at least this much.
const COMPACT_MIN: usize = 64 << 10;

/// Which entry a slot held when it was seen: a slot reused by another
/// entry since has another serial. Serials are 32 bits and wrap: a
/// reference is taken for one directory's walk, far fewer than 2^32
/// entries before it is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef {
    slot: u32,
    serial: u32,
}

/// 96 bytes (as an `Option`).
struct Slot {
    entry: Entry,
    /// Where the path starts in the arena (a NUL ends it).
    path_at: u32,
    /// Toward the most recently used entry, and toward the least.
    newer: u32,
    older: u32,
    serial: u32,
}

/// Paths to entries, in recency order.
pub struct Entries<S = RandomState> {
    slots: Vec<Option<Slot>>,
    /// Slots emptied by removals, reused first.
    vacant: Vec<u32>,
    arena: String,
    /// Bytes of the arena no entry refers to any more.
    garbage: usize,
    /// The slot of each entry, found by its path's hash.
    table: HashTable<u32>,
    hasher: S,
    newest: u32,
    oldest: u32,
    len: usize,
    next_serial: u32,
}

impl Default for Entries {
    fn default() -> Entries {
        Entries::with_hasher(RandomState::new())
    }
}

impl<S: BuildHasher> Entries<S> {
    pub fn with_hasher(hasher: S) -> Entries<S> {
        Entries {
            slots: Vec::new(),
            vacant: Vec::new(),
            arena: String::new(),
            garbage: 0,
            table: HashTable::new(),
            hasher,
            newest: NIL,
            oldest: NIL,
            len: 0,
            next_serial: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Drops every entry (the serials go on, so no [`SlotRef`] taken
    /// before refers to an entry added after).
    pub fn clear(&mut self) {
        self.slots = Vec::new();
        self.vacant = Vec::new();
        self.arena = String::new();
        self.garbage = 0;
        self.table = HashTable::new();
        self.newest = NIL;
        self.oldest = NIL;
        self.len = 0;
    }

    /// The entry of `path`, made the most recently used.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Entry> {
        let at = self.find(path)?;
        self.unlink(at);
        self.link_newest(at);
        Some(&mut self.slot_mut(at).entry)
    }

    /// Adds or replaces the entry of `path` as the most recently used;
    /// false when it replaced one. An entry whose path would not fit the
    /// arena's 32-bit offsets, or holding a NUL, is not kept.
    pub fn push(&mut self, path: &str, entry: Entry) -> bool {
        if let Some(at) = self.find(path) {
            self.slot_mut(at).entry = entry;
            self.unlink(at);
            self.link_newest(at);
            return false;
        }
        let Some(path_at) = self.store_path(path) else {
            return true;
        };
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1);
        let slot = Slot {
            entry,
            path_at,
            newer: NIL,
            older: NIL,
            serial,
        };
        let at = match self.vacant.pop() {
            Some(at) => {
                self.slots[at as usize] = Some(slot);
                at
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        let hash = self.hasher.hash_one(path);
        let Entries {
            table,
            slots,
            arena,
            hasher,
            ..
        } = self;
        // Growing the table hashes each path again, from the arena.
        table.insert_unique(hash, at, |&other| {
            hasher.hash_one(slot_path(arena, slot_in(slots, other)))
        });
        self.link_newest(at);
        self.len += 1;
        true
    }

    /// Removes the entry of `path`.
    pub fn pop(&mut self, path: &str) -> Option<Entry> {
        let at = self.find(path)?;
        Some(self.remove_at(at))
    }

    /// Removes the least recently used entry.
    pub fn pop_lru(&mut self) -> Option<Entry> {
        (self.oldest != NIL).then(|| self.remove_at(self.oldest))
    }

    /// Every entry with its path, least recently used first.
    pub fn oldest_first(&self) -> impl Iterator<Item = (&str, &Entry)> {
        let mut at = self.oldest;
        std::iter::from_fn(move || {
            let slot = self.slot_at(at)?;
            at = slot.newer;
            Some((self.path_of_slot(slot), &slot.entry))
        })
    }

    /// Every entry with where it is, in no order.
    pub fn refs(&self) -> impl Iterator<Item = (SlotRef, &Entry)> {
        self.slots.iter().enumerate().filter_map(|(at, slot)| {
            let slot = slot.as_ref()?;
            let at = SlotRef {
                slot: at as u32,
                serial: slot.serial,
            };
            Some((at, &slot.entry))
        })
    }

    /// The path of the entry `at` refers to, if that entry is still here.
    pub fn path_of(&self, at: SlotRef) -> Option<&str> {
        let slot = self.slot_at(at.slot)?;
        (slot.serial == at.serial).then(|| self.path_of_slot(slot))
    }

    fn find(&self, path: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(path);
        let path = path.as_bytes();
        if memchr::memchr(0, path).is_some() {
            // Never kept, and would match a kept path and the one after it.
            return None;
        }
        // The path and the NUL that ends it, without looking for the NUL.
        let holds = |at: u32| {
            let rest = &self.arena.as_bytes()[self.slot(at).path_at as usize..];
            rest.get(..path.len()) == Some(path) && rest.get(path.len()) == Some(&0)
        };
        self.table.find(hash, |&at| holds(at)).copied()
    }

    fn slot_at(&self, at: u32) -> Option<&Slot> {
        self.slots.get(at as usize)?.as_ref()
    }

    fn slot(&self, at: u32) -> &Slot {
        slot_in(&self.slots, at)
    }

    fn slot_mut(&mut self, at: u32) -> &mut Slot {
        self.slots[at as usize]
            .as_mut()
            .expect("a linked slot holds an entry")
    }

    fn path_of_slot(&self, slot: &Slot) -> &str {
        slot_path(&self.arena, slot)
    }

    /// Appends `path` and its NUL to the arena (compacting it first when
    /// mostly garbage); `None` when it would not fit 32-bit offsets or
    /// holds a NUL itself.
    fn store_path(&mut self, path: &str) -> Option<u32> {
        if path.as_bytes().contains(&0) {
            return None;
        }
        if self.garbage > COMPACT_MIN && self.garbage * 2 > self.arena.len() {
            self.compact();
        }
        let at = u32::try_from(self.arena.len()).ok()?;
        u32::try_from(self.arena.len() + path.len() + 1).ok()?;
        self.arena.push_str(path);
        self.arena.push('\0');
        Some(at)
    }

    /// Rewrites the arena with the paths of the entries kept.
    fn compact(&mut self) {
        let mut arena = String::with_capacity(self.arena.len() - self.garbage);
        for slot in self.slots.iter_mut().flatten() {
            let path = slot_path(&self.arena, slot);
            slot.path_at = arena.len() as u32;
            arena.push_str(path);
            arena.push('\0');
        }
        self.arena = arena;
        self.garbage = 0;
    }

    fn remove_at(&mut self, at: u32) -> Entry {
        self.unlink(at);
        let slot = self.slots[at as usize]
            .take()
            .expect("a linked slot holds an entry");
        let path = slot_path(&self.arena, &slot);
        let hash = self.hasher.hash_one(path);
        if let Ok(found) = self.table.find_entry(hash, |&other| other == at) {
            found.remove();
        }
        self.garbage += path.len() + 1;
        self.vacant.push(at);
        self.len -= 1;
        if self.len == 0 {
            // Nothing refers to the arena: start it again.
            self.arena.clear();
            self.garbage = 0;
        }
        slot.entry
    }

    fn unlink(&mut self, at: u32) {
        let (newer, older) = {
            let slot = self.slot(at);
            (slot.newer, slot.older)
        };
        match newer {
            NIL => self.newest = older,
            n => self.slot_mut(n).older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.slot_mut(o).newer = newer,
        }
        let slot = self.slot_mut(at);
        slot.newer = NIL;
        slot.older = NIL;
    }

    fn link_newest(&mut self, at: u32) {
        let previous = self.newest;
        {
            let slot = self.slot_mut(at);
            slot.older = previous;
            slot.newer = NIL;
        }
        match previous {
            NIL => self.oldest = at,
            p => self.slot_mut(p).newer = at,
        }
        self.newest = at;
    }
}

/// The slot `at` of `slots`, which holds an entry.
fn slot_in(slots: &[Option<Slot>], at: u32) -> &Slot {
    slots[at as usize]
        .as_ref()
        .expect("a linked slot holds an entry")
}

/// The path of `slot` in `arena`: up to its NUL.
fn slot_path<'a>(arena: &'a str, slot: &Slot) -> &'a str {
    let rest = &arena[slot.path_at as usize..];
    let len = memchr::memchr(0, rest.as_bytes()).unwrap_or(rest.len());
    &rest[..len]
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasherDefault, Hasher};

    use super::*;
    use crate::records::RecordStats;

    fn entry(n: u64) -> Entry {
        Entry::new(n, 1, None, RecordStats::default())
    }

    #[test]
    fn a_path_holding_a_nul_is_not_kept_and_a_prefix_is_another_path() {
        let mut entries = Entries::default();
        assert!(entries.push("a\0b", entry(1)));
        assert_eq!(entries.len(), 0);
        assert!(entries.push("ab", entry(2)));
        assert!(entries.push("a", entry(3)));
        assert_eq!(entries.get_mut("a").map(|e| e.size), Some(3));
        assert_eq!(entries.get_mut("ab").map(|e| e.size), Some(2));
        assert!(entries.get_mut("a\0b").is_none());
        assert!(entries.get_mut("").is_none());
    }

    #[test]
    fn a_slot_takes_96_bytes() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 96);
    }

    /// Every path hashes the same: each lookup compares whole paths along
    /// one probe sequence.
    #[derive(Default)]
    struct Constant;

    impl Hasher for Constant {
        fn write(&mut self, _: &[u8]) {}
        fn finish(&self) -> u64 {
            7
        }
    }

    fn sizes<S: BuildHasher>(entries: &Entries<S>) -> Vec<(String, u64)> {
        let kept: Vec<_> = entries
            .oldest_first()
            .map(|(path, e)| (path.to_string(), e.size))
            .collect();
        assert_eq!(kept.len(), entries.len());
        kept
    }

    #[test]
    fn the_least_recently_used_entry_leaves_first() {
        let mut entries = Entries::default();
        for (i, path) in ["a", "b", "c"].into_iter().enumerate() {
            assert!(entries.push(path, entry(i as u64)));
        }
        assert_eq!(entries.get_mut("a").map(|e| e.size), Some(0));
        assert!(!entries.push("b", entry(9)), "replaced, not added");
        assert_eq!(
            sizes(&entries),
            [("c".into(), 2), ("a".into(), 0), ("b".into(), 9)]
        );
        assert_eq!(entries.pop_lru().map(|e| e.size), Some(2));
        assert_eq!(entries.pop("b").map(|e| e.size), Some(9));
        assert!(entries.get_mut("b").is_none() && entries.get_mut("c").is_none());
        assert_eq!(sizes(&entries), [("a".into(), 0)]);
    }

    #[test]
    fn a_reference_outlives_no_entry() {
        let mut entries = Entries::default();
        entries.push("gone", entry(1));
        let (at, _) = entries.refs().next().unwrap();
        assert_eq!(entries.path_of(at), Some("gone"));
        entries.pop("gone");
        entries.push("other", entry(2));
        assert_eq!(entries.path_of(at), None, "the slot holds another entry");
        entries.clear();
        entries.push("gone", entry(1));
        assert_eq!(entries.path_of(at), None, "nor after a clear");
    }

    #[test]
    fn the_arena_sheds_the_paths_of_removed_entries() {
        let mut entries = Entries::default();
        let long = "x".repeat(1000);
        for round in 0..50 {
            for i in 0..100 {
                entries.push(&format!("{long}/{round}/{i}"), entry(i));
            }
            for i in 0..99 {
                assert!(entries.pop(&format!("{long}/{round}/{i}")).is_some());
            }
        }
        // The next path finds the arena mostly garbage and rewrites it.
        entries.push("last", entry(0));
        // Each path with the NUL that ends it.
        let live: usize = entries.oldest_first().map(|(p, _)| p.len() + 1).sum();
        assert_eq!(entries.len(), 51);
        assert_eq!(entries.arena.len(), live);
        for round in 0..50 {
            let path = format!("{long}/{round}/99");
            assert_eq!(entries.get_mut(&path).map(|e| e.size), Some(99));
        }
    }

    /// Random operations against a plain list in recency order.
    fn follows_a_model<S: BuildHasher>(mut entries: Entries<S>) {
        let mut model: Vec<(String, u64)> = Vec::new();
        let mut next = crate::records::structural::tests::xorshift(0x9e37_79b9_7f4a_7c15);
        for step in 0..20_000u64 {
            let path = format!("d{}/f{}", next() % 7, next() % 40);
            let at = model.iter().position(|(p, _)| *p == path);
            match next() % 5 {
                0 | 1 => {
                    assert_eq!(entries.push(&path, entry(step)), at.is_none());
                    if let Some(at) = at {
                        model.remove(at);
                    }
                    model.push((path, step));
                }
                2 => {
                    let got = entries.get_mut(&path).map(|e| e.size);
                    assert_eq!(got, at.map(|at| model[at].1));
                    if let Some(at) = at {
                        let kept = model.remove(at);
                        model.push(kept);
                    }
                }
                3 => {
                    let got = entries.pop(&path).map(|e| e.size);
                    assert_eq!(got, at.map(|at| model.remove(at).1));
                }
                _ => {
                    let got = entries.pop_lru().map(|e| e.size);
                    let want = (!model.is_empty()).then(|| model.remove(0).1);
                    assert_eq!(got, want);
                }
            }
            if step % 1000 == 0 {
                assert_eq!(sizes(&entries), model);
            }
        }
        assert_eq!(sizes(&entries), model);
    }

    #[test]
    fn entries_follow_a_model_list() {
        follows_a_model(Entries::default());
    }

    #[test]
    fn entries_follow_a_model_list_when_every_hash_collides() {
        follows_a_model(Entries::with_hasher(
            BuildHasherDefault::<Constant>::default(),
        ));
    }
}
