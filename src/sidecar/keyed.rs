//! Grouping an index's rows by key without a random memory access per
//! record.
//!
//! A cohort of a million records over a hundred thousand keys makes a key
//! table of megabytes; looking every record's key up in it as the record
//! arrives costs a cache miss or two each, which was most of a build. So
//! keys are only appended as records arrive: each record's key is hashed
//! (a per-process keyed hash, so keys chosen by whoever wrote the cohort
//! cannot crowd one place) and, by the hash's top bits, appended with its
//! row to one of [`PARTITIONS`] partitions — append-only streams whose
//! ends stay in the cache. At the end each partition (a few thousand
//! records) is grouped on its own with a small table that fits in the
//! cache, its keys compared whole, and every key's rows are laid out in
//! one buffer: no allocation per key, and no sort (the index's writer
//! orders each bucket's few keys).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::OnceLock;

use super::format::Entries;

/// How many partitions keys are spread over (a power of two).
const PARTITIONS: usize = 256;

/// One process-wide keyed hasher, so the rows two threads collected can
/// be merged without hashing their keys again.
fn hasher() -> &'static std::collections::hash_map::RandomState {
    static HASHER: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    HASHER.get_or_init(Default::default)
}

/// One indexed record in a partition: its key's hash, its row, and where
/// its key's bytes end in the partition's `bytes` (they start where the
/// previous record's end).
#[derive(Clone, Copy, Debug)]
struct Keyed {
    hash: u64,
    row: u64,
    end: usize,
}

#[derive(Clone, Default, Debug)]
struct Partition {
    records: Vec<Keyed>,
    bytes: Vec<u8>,
}

impl Partition {
    /// Each record's key bytes, hash and row, in the order they came.
    fn each(&self) -> impl Iterator<Item = (&[u8], u64, u64)> {
        let mut start = 0;
        self.records.iter().map(move |r| {
            let key = &self.bytes[start..r.end];
            start = r.end;
            (key, r.hash, r.row)
        })
    }
}

/// The rows of each distinct key, collected in row order (see the module
/// documentation).
#[derive(Clone, Debug)]
pub(super) struct KeyedRows {
    partitions: Vec<Partition>,
}

impl Default for KeyedRows {
    fn default() -> Self {
        KeyedRows {
            partitions: vec![Partition::default(); PARTITIONS],
        }
    }
}

impl KeyedRows {
    /// Adds `row` under the key whose canonical bytes are `key`; rows come
    /// in increasing order.
    pub(super) fn push(&mut self, key: &[u8], row: u64) {
        let hash = hasher().hash_one(key);
        let partition = &mut self.partitions[partition_of(hash)];
        partition.bytes.extend_from_slice(key);
        partition.records.push(Keyed {
            hash,
            row,
            end: partition.bytes.len(),
        });
    }

    /// Appends the rows `later` collected, which come after this one's:
    /// its row ids moved by `offset`.
    pub(super) fn append(&mut self, later: KeyedRows, offset: u64) {
        for (mine, theirs) in self.partitions.iter_mut().zip(later.partitions) {
            let base = mine.bytes.len();
            mine.bytes.extend_from_slice(&theirs.bytes);
            mine.records
                .extend(theirs.records.into_iter().map(|r| Keyed {
                    hash: r.hash,
                    row: r.row + offset,
                    end: r.end + base,
                }));
        }
    }

    /// Each key with its rows in row order, partition by partition and
    /// each partition's keys in the order they first came: the same order
    /// whichever threads collected the rows.
    pub(super) fn into_entries(self) -> Entries {
        let total: usize = self.partitions.iter().map(|p| p.records.len()).sum();
        let mut keys = Vec::new();
        let mut rows = vec![0u64; total];
        let mut ends: Vec<(usize, usize)> = Vec::new();
        let mut groups: HashMap<Hashed<'_>, usize, BuildHasherDefault<PassHash>> =
            HashMap::default();
        let mut group_of = Vec::new();
        // Per group of the partition: its row count, then where its next
        // row goes.
        let mut next: Vec<usize> = Vec::new();
        let mut placed = 0;
        for partition in &self.partitions {
            groups.clear();
            group_of.clear();
            next.clear();
            let first = ends.len();
            for (key, hash, _) in partition.each() {
                let group = *groups.entry(Hashed { hash, key }).or_insert_with(|| {
                    keys.extend_from_slice(key);
                    ends.push((keys.len(), 0));
                    next.push(0);
                    next.len() - 1
                });
                next[group] += 1;
                group_of.push(group);
            }
            for (count, end) in next.iter_mut().zip(&mut ends[first..]) {
                let start = placed;
                placed += *count;
                end.1 = placed;
                *count = start;
            }
            for (&group, record) in group_of.iter().zip(&partition.records) {
                rows[next[group]] = record.row;
                next[group] += 1;
            }
        }
        Entries::from_parts(keys, rows, ends)
    }
}

fn partition_of(hash: u64) -> usize {
    (hash >> (64 - PARTITIONS.trailing_zeros())) as usize
}

/// A key with its hash already taken: the table uses the hash as it is
/// and compares keys whole.
#[derive(PartialEq, Eq)]
struct Hashed<'k> {
    hash: u64,
    key: &'k [u8],
}

impl Hash for Hashed<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Hands a [`Hashed`] key's hash (keyed already) to the table unchanged.
#[derive(Default)]
struct PassHash(u64);

impl Hasher for PassHash {
    fn write(&mut self, bytes: &[u8]) {
        // Only `Hashed` is ever hashed here, through `write_u64`.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_key_in_row_order_across_appends() {
        let mut first = KeyedRows::default();
        for (key, row) in [("b", 0), ("a", 1), ("b", 2)] {
            first.push(key.as_bytes(), row);
        }
        let mut later = KeyedRows::default();
        for (key, row) in [("c", 0), ("a", 1), ("c", 2)] {
            later.push(key.as_bytes(), row);
        }
        first.append(later, 3);
        let expect: Vec<(Vec<u8>, Vec<u64>)> = vec![
            (b"a".to_vec(), vec![1, 4]),
            (b"b".to_vec(), vec![0, 2]),
            (b"c".to_vec(), vec![3, 5]),
        ];
        assert_eq!(first.into_entries().sorted(), expect);
    }

    #[test]
    fn many_keys_match_a_plain_map() {
        let mut rows = KeyedRows::default();
        let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u64>> = Default::default();
        for row in 0..50_000u64 {
            // Keys of varied lengths, one a prefix of another.
            let key = format!("s-{}", row * 7919 % 3_001).into_bytes();
            let key = if row % 5 == 0 { key[..2].to_vec() } else { key };
            rows.push(&key, row);
            model.entry(key).or_default().push(row);
        }
        let expect: Vec<(Vec<u8>, Vec<u64>)> = model.into_iter().collect();
        assert_eq!(rows.into_entries().sorted(), expect);
    }

    #[test]
    fn keys_of_one_hash_stay_apart() {
        // The table compares keys whole: two keys given one hash are two
        // groups.
        let mut table: HashMap<Hashed<'_>, usize, BuildHasherDefault<PassHash>> =
            HashMap::default();
        table.insert(Hashed { hash: 7, key: b"a" }, 0);
        table.insert(Hashed { hash: 7, key: b"b" }, 1);
        assert_eq!(table.len(), 2);
        assert_eq!(table[&Hashed { hash: 7, key: b"b" }], 1);
    }
}
