//! Writing an index: everything it holds, laid out in v3 in one buffer.
//! Entries go to their key's bucket (`fnv1a64(key) % buckets`), about one
//! key per bucket, so a lookup reads one small bucket.

use super::key::{KeyType, fnv1a64};
use super::{Locator, MAGIC, MAX_BUCKETS, VERSION};

/// Everything an index file holds, for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexContent {
    pub cohort_sha256: [u8; 32],
    pub key: Vec<(String, KeyType)>,
    pub cohort_size: u64,
    pub cohort_mtime_ns: i64,
    /// Each distinct key (canonical encoding) with its rows, ascending.
    pub entries: Vec<(Vec<u8>, Vec<u64>)>,
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
    // The entries by bucket, each bucket's in the entries' order: a
    // counting sort into one list (no list per bucket).
    let bucket_of: Vec<u32> = content
        .entries
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
    let mut by_bucket = vec![0u32; content.entries.len()];
    let mut next = starts.clone();
    for (i, &b) in bucket_of.iter().enumerate() {
        by_bucket[next[b as usize] as usize] = i as u32;
        next[b as usize] += 1;
    }
    // Sized up front: an index of a large cohort is tens of MiB, and
    // growing it by doubling would copy it several times over.
    let key_names: usize = content.key.iter().map(|(name, _)| 3 + name.len()).sum();
    let entries: usize = content
        .entries
        .iter()
        .map(|(key, rows)| 8 + key.len() + 8 * rows.len())
        .sum();
    let size = MAGIC.len()
        + 1
        + 32
        + 2
        + key_names
        + 20
        + 12 * buckets as usize
        + entries
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
            let (key, rows) = &content.entries[entry as usize];
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
