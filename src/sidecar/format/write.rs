//! Writing an index: everything it holds, laid out in v3 in one buffer.
//! Entries go to their key's bucket (`fnv1a64(key) % buckets`), about one
//! key per bucket, so a lookup reads one small bucket.

use super::key::{KeyType, fnv1a64};
use super::{Locator, MAGIC, MAX_BUCKETS, VERSION};

/// Each distinct key (canonical encoding) with its rows, ascending, in no
/// order of keys (the writer orders each bucket's): three buffers, not two
/// allocations per key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    keys: Vec<u8>,
    rows: Vec<u64>,
    /// Per entry, where its key ends in `keys` and its rows in `rows`
    /// (each starts where the previous entry's ends).
    ends: Vec<(usize, usize)>,
}

impl Entries {
    /// Entries from their buffers: `ends` as in [`Entries`], each at or
    /// past the one before and the last at the buffers' ends.
    pub fn from_parts(keys: Vec<u8>, rows: Vec<u64>, ends: Vec<(usize, usize)>) -> Entries {
        assert!(
            ends.last().copied().unwrap_or((0, 0)) == (keys.len(), rows.len())
                && ends
                    .windows(2)
                    .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
            "entry ends out of place"
        );
        Entries { keys, rows, ends }
    }

    /// Adds a key with its rows.
    pub fn push(&mut self, key: &[u8], rows: &[u64]) {
        self.keys.extend_from_slice(key);
        self.rows.extend_from_slice(rows);
        self.ends.push((self.keys.len(), self.rows.len()));
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Entry `i`: its key and its rows.
    pub fn get(&self, i: usize) -> (&[u8], &[u64]) {
        let (key_start, row_start) = match i {
            0 => (0, 0),
            _ => self.ends[i - 1],
        };
        let (key_end, row_end) = self.ends[i];
        (
            &self.keys[key_start..key_end],
            &self.rows[row_start..row_end],
        )
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u64])> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Every entry, owned and sorted by key: for comparing entries whatever
    /// their order.
    #[cfg(test)]
    pub fn sorted(&self) -> Vec<(Vec<u8>, Vec<u64>)> {
        let mut all: Vec<_> = self.iter().map(|(k, r)| (k.to_vec(), r.to_vec())).collect();
        all.sort_unstable();
        all
    }
}

/// Everything an index file holds, for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexContent {
    pub cohort_sha256: [u8; 32],
    pub key: Vec<(String, KeyType)>,
    pub cohort_size: u64,
    pub cohort_mtime_ns: i64,
    pub entries: Entries,
    /// Row `i`'s place in the cohort.
    pub locators: Vec<Locator>,
}

/// A bucket count for `keys` distinct keys: about one key per bucket.
pub fn bucket_count_for(keys: usize) -> u32 {
    (keys.max(1) as u64)
        .next_power_of_two()
        .min(u64::from(MAX_BUCKETS)) as u32
}

/// Serialises an index in layout v3.
pub fn encode_index(content: &IndexContent) -> Vec<u8> {
    let buckets = bucket_count_for(content.entries.len());
    // The entries by bucket: a counting sort into one list (no list per
    // bucket).
    let entries = &content.entries;
    let bucket_of: Vec<u32> = entries
        .iter()
        .map(|(key, _)| (fnv1a64(key) % u64::from(buckets)) as u32)
        .collect();
    let mut starts = vec![0u32; buckets as usize + 1];
    for &b in &bucket_of {
        starts[b as usize + 1] += 1;
    }
    for i in 0..buckets as usize {
        starts[i + 1] += starts[i];
    }
    let mut by_bucket = vec![0u32; entries.len()];
    let mut next = starts.clone();
    for (i, &b) in bucket_of.iter().enumerate() {
        by_bucket[next[b as usize] as usize] = i as u32;
        next[b as usize] += 1;
    }
    // Each bucket's entries by key (a bucket holds about one), so the
    // bytes do not depend on the order the entries came in.
    for bucket in starts.windows(2) {
        let bucket = &mut by_bucket[bucket[0] as usize..bucket[1] as usize];
        if bucket.len() > 1 {
            bucket.sort_unstable_by(|&a, &b| {
                entries.get(a as usize).0.cmp(entries.get(b as usize).0)
            });
        }
    }
    // Sized up front: an index of a large cohort is tens of MiB, and
    // growing it by doubling would copy it several times over.
    let key_names: usize = content.key.iter().map(|(name, _)| 3 + name.len()).sum();
    let entry_bytes = 8 * entries.len() + entries.keys.len() + 8 * entries.rows.len();
    let size = MAGIC.len()
        + 1
        + 32
        + 2
        + key_names
        + 20
        + 12 * buckets as usize
        + entry_bytes
        + 12 * content.locators.len()
        + 8;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&content.cohort_sha256);
    out.extend_from_slice(&(content.key.len() as u16).to_le_bytes());
    for (name, kind) in &content.key {
        out.push(kind.tag());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
    }
    out.extend_from_slice(&content.cohort_size.to_le_bytes());
    out.extend_from_slice(&content.cohort_mtime_ns.to_le_bytes());
    out.extend_from_slice(&buckets.to_le_bytes());
    let table = out.len();
    out.resize(table + buckets as usize * 8, 0);
    for i in 0..buckets as usize {
        let offset = out.len() as u64;
        out[table + i * 8..table + i * 8 + 8].copy_from_slice(&offset.to_le_bytes());
        let bucket = &by_bucket[starts[i] as usize..starts[i + 1] as usize];
        out.extend_from_slice(&(bucket.len() as u32).to_le_bytes());
        for &entry in bucket {
            let (key, rows) = entries.get(entry as usize);
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
            push_u64s(&mut out, rows);
        }
    }
    for locator in &content.locators {
        out.extend_from_slice(&locator.offset.to_le_bytes());
        out.extend_from_slice(&locator.len.to_le_bytes());
    }
    out.extend_from_slice(&(content.locators.len() as u64).to_le_bytes());
    debug_assert_eq!(out.len(), size);
    out
}

/// Appends `values` little-endian: one copy where that is their layout
/// in memory already.
fn push_u64s(out: &mut Vec<u8>, values: &[u64]) {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: `u64` has no padding and any bytes are valid `u8`s; the
        // view covers exactly the slice's memory.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        out.extend_from_slice(bytes);
    }
    #[cfg(not(target_endian = "little"))]
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}
