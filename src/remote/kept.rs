//! What a bucket keeps of what it read (listings, small objects), least
//! recently used first out, within a budget of weight (names, bytes)
//! rather than of entries: one directory of a hundred thousand keys
//! weighs what a hundred thousand small ones do.

use std::borrow::Borrow;
use std::hash::Hash;

use lru::LruCache;

pub(super) struct Kept<K: Hash + Eq, V> {
    entries: LruCache<K, (V, u64)>,
    weight: u64,
    budget: u64,
}

impl<K: Hash + Eq, V> Kept<K, V> {
    pub(super) fn new(budget: u64) -> Self {
        Kept {
            entries: LruCache::unbounded(),
            weight: 0,
            budget,
        }
    }

    pub(super) fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.get(key).map(|(value, _)| value)
    }

    /// Keeps `value` as `key`, then lets the least recently used go until
    /// the budget holds. A value heavier than the whole budget is not
    /// kept.
    pub(super) fn put(&mut self, key: K, value: V, weight: u64) {
        if let Some((_, old)) = self.entries.pop(&key) {
            self.weight -= old;
        }
        if weight > self.budget {
            return;
        }
        self.entries.put(key, (value, weight));
        self.weight += weight;
        while self.weight > self.budget {
            match self.entries.pop_lru() {
                Some((_, (_, w))) => self.weight -= w,
                None => break,
            }
        }
    }

    pub(super) fn pop(&mut self, key: &K) {
        if let Some((_, w)) = self.entries.pop(key) {
            self.weight -= w;
        }
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(key, _)| key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_holds_by_weight_and_the_least_recent_goes_first() {
        let mut kept = Kept::new(10);
        kept.put("a", 1, 4);
        kept.put("b", 2, 4);
        assert_eq!(kept.get(&"a"), Some(&1));
        kept.put("c", 3, 4);
        assert_eq!(kept.get(&"b"), None, "b was the least recently used");
        assert_eq!(kept.get(&"a"), Some(&1));
        assert_eq!(kept.get(&"c"), Some(&3));
        kept.put("a", 4, 2);
        assert_eq!(kept.weight, 6, "a replaced, not added");
        kept.put("huge", 5, 11);
        assert_eq!(kept.get(&"huge"), None);
        assert_eq!(kept.weight, 6);
        kept.pop(&"c");
        assert_eq!(kept.weight, 2);
        assert_eq!(kept.keys().collect::<Vec<_>>(), vec![&"a"]);
    }
}
