//! Reading an index with only the bytes a point lookup needs: the header,
//! one bucket offset pair, one bucket, and one locator per matching row.
//! Every length and offset is checked against the file's size before it
//! is trusted, so damage surfaces as [`Corrupt`], never as a panic.

use std::fmt;

use super::key::{KeyType, fnv1a64};
use super::{LOCATOR_BYTES, Locator, MAGIC, MAX_BUCKETS, MAX_KEY_FIELDS, VERSION};

/// The largest bucket a lookup reads (see [`IndexReader::rows`]).
pub const BUCKET_MAX: u64 = 256 << 20;

/// A structural fault in an index file, with where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt(pub String);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn corrupt<T>(what: impl Into<String>) -> Result<T, Corrupt> {
    Err(Corrupt(what.into()))
}

/// Positional reads from an index file: a real file, or bytes in tests.
pub trait ReadAt {
    /// Fills `buf` from `offset`; an error when the bytes are not there.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl ReadAt for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for crate::warehouse::Blob {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        crate::warehouse::Blob::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .filter(|end| *end <= self.len())
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(&self[start..end]);
        Ok(())
    }
}

/// The fixed part of an index file, checked against the file's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub cohort_sha256: [u8; 32],
    pub key: Vec<(String, KeyType)>,
    pub cohort_size: u64,
    pub cohort_mtime_ns: i64,
    pub bucket_count: u32,
    table_offset: u64,
    locators_offset: u64,
    pub row_count: u64,
    file_len: u64,
}

/// An open index: its header, and lookups that read one offset entry, one
/// bucket, and one locator per matching row.
pub struct IndexReader<'a, R: ReadAt + ?Sized> {
    source: &'a R,
    pub header: Header,
}

impl<R: ReadAt + ?Sized> fmt::Debug for IndexReader<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexReader")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

fn read<R: ReadAt + ?Sized, const N: usize>(
    source: &R,
    offset: u64,
    what: &str,
) -> Result<[u8; N], Corrupt> {
    let mut buf = [0u8; N];
    source
        .read_exact_at(&mut buf, offset)
        .map_err(|e| Corrupt(format!("{what} at byte {offset}: {e}")))?;
    Ok(buf)
}

impl<'a, R: ReadAt + ?Sized> IndexReader<'a, R> {
    /// Reads and checks the header of an index of `file_len` bytes.
    pub fn open(source: &'a R, file_len: u64) -> Result<Self, Corrupt> {
        let magic: [u8; 8] = read(source, 0, "the magic")?;
        if &magic != MAGIC {
            return corrupt("not a pchronicle index (bad magic)");
        }
        let [version] = read::<R, 1>(source, 8, "the version")?;
        if version != VERSION {
            return corrupt(format!(
                "index layout version {version}, this build reads {VERSION}"
            ));
        }
        let cohort_sha256: [u8; 32] = read(source, 9, "the cohort digest")?;
        let fields = u16::from_le_bytes(read(source, 41, "the key field count")?) as usize;
        if fields == 0 || fields > MAX_KEY_FIELDS {
            return corrupt(format!(
                "{fields} key fields (1 to {MAX_KEY_FIELDS} allowed)"
            ));
        }
        let mut pos = 43u64;
        let mut key = Vec::with_capacity(fields);
        for i in 0..fields {
            let [tag] = read::<R, 1>(source, pos, "a key field type")?;
            let kind = KeyType::from_tag(tag)
                .ok_or_else(|| Corrupt(format!("key field {i} has unknown type {tag}")))?;
            let len =
                u16::from_le_bytes(read(source, pos + 1, "a key field name length")?) as usize;
            let mut name = vec![0u8; len];
            source
                .read_exact_at(&mut name, pos + 3)
                .map_err(|e| Corrupt(format!("key field {i} name: {e}")))?;
            let name = String::from_utf8(name)
                .map_err(|_| Corrupt(format!("key field {i} name is not UTF-8")))?;
            key.push((name, kind));
            pos += 3 + len as u64;
        }
        let cohort_size = u64::from_le_bytes(read(source, pos, "the cohort size")?);
        let cohort_mtime_ns = i64::from_le_bytes(read(source, pos + 8, "the cohort mtime")?);
        let bucket_count = u32::from_le_bytes(read(source, pos + 16, "the bucket count")?);
        if bucket_count == 0 || bucket_count > MAX_BUCKETS {
            return corrupt(format!("bucket count {bucket_count}"));
        }
        let table_offset = pos + 20;
        if file_len < 8 {
            return corrupt("the file is too short for a row count");
        }
        let row_count = u64::from_le_bytes(read(source, file_len - 8, "the row count")?);
        let table_end = table_offset + u64::from(bucket_count) * 8;
        let locators_len = row_count
            .checked_mul(LOCATOR_BYTES)
            .filter(|len| {
                table_end
                    .checked_add(*len)
                    .and_then(|end| end.checked_add(8))
                    .is_some_and(|end| end <= file_len)
            })
            .ok_or_else(|| {
                Corrupt(format!(
                    "{row_count} rows do not fit in a file of {file_len} bytes"
                ))
            })?;
        Ok(IndexReader {
            source,
            header: Header {
                cohort_sha256,
                key,
                cohort_size,
                cohort_mtime_ns,
                bucket_count,
                table_offset,
                locators_offset: file_len - 8 - locators_len,
                row_count,
                file_len,
            },
        })
    }

    /// The bounds of bucket `i`, checked.
    fn bucket_range(&self, i: u32) -> Result<(u64, u64), Corrupt> {
        let h = &self.header;
        let at = h.table_offset + u64::from(i) * 8;
        let start = u64::from_le_bytes(read(self.source, at, "a bucket offset")?);
        let end = if i + 1 == h.bucket_count {
            h.locators_offset
        } else {
            u64::from_le_bytes(read(self.source, at + 8, "a bucket offset")?)
        };
        let data_start = h.table_offset + u64::from(h.bucket_count) * 8;
        if start < data_start
            || start.checked_add(4).is_none_or(|min| end < min)
            || end > h.locators_offset
        {
            return corrupt(format!(
                "bucket {i} spans bytes {start}..{end}, outside the bucket data"
            ));
        }
        Ok((start, end))
    }

    /// The rows holding `key` (its canonical encoding), ascending. A
    /// bucket is read whole, so one larger than [`BUCKET_MAX`] (which no
    /// build writes: that is millions of rows under a few keys) is refused
    /// rather than held in memory.
    pub fn rows(&self, key: &[u8]) -> Result<Vec<u64>, Corrupt> {
        let bucket = (fnv1a64(key) % u64::from(self.header.bucket_count)) as u32;
        let (start, end) = self.bucket_range(bucket)?;
        let len = usize::try_from(end - start)
            .ok()
            .filter(|len| *len as u64 <= BUCKET_MAX)
            .ok_or_else(|| {
                Corrupt(format!(
                    "bucket {bucket} holds {} bytes, more than the {BUCKET_MAX} a lookup reads",
                    end - start
                ))
            })?;
        let mut data = vec![0u8; len];
        self.source
            .read_exact_at(&mut data, start)
            .map_err(|e| Corrupt(format!("bucket {bucket}: {e}")))?;
        let mut cursor = Cursor {
            data: &data,
            pos: 0,
            bucket,
        };
        let entries = cursor.u32()?;
        for _ in 0..entries {
            let key_len = cursor.u32()? as usize;
            let entry_key = cursor.take(key_len)?;
            let rows = cursor.u32()? as usize;
            let raw = cursor.take(
                rows.checked_mul(8)
                    .ok_or_else(|| cursor.fault("row count"))?,
            )?;
            if entry_key == key {
                let rows: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
                    .collect();
                if let Some(bad) = rows.iter().find(|r| **r >= self.header.row_count) {
                    return corrupt(format!(
                        "bucket {bucket} names row {bad} of {}",
                        self.header.row_count
                    ));
                }
                if rows.windows(2).any(|pair| pair[0] >= pair[1]) {
                    return corrupt(format!("bucket {bucket} names rows out of order"));
                }
                return Ok(rows);
            }
        }
        Ok(Vec::new())
    }

    /// Where row `row` lies in the cohort.
    pub fn locator(&self, row: u64) -> Result<Locator, Corrupt> {
        if row >= self.header.row_count {
            return corrupt(format!("row {row} of {}", self.header.row_count));
        }
        let at = self.header.locators_offset + row * LOCATOR_BYTES;
        let bytes: [u8; 12] = read(self.source, at, "a record locator")?;
        let locator = Locator {
            offset: u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(bytes[8..].try_into().expect("4 bytes")),
        };
        if locator
            .offset
            .checked_add(u64::from(locator.len))
            .is_none_or(|end| end > self.header.cohort_size)
        {
            return corrupt(format!(
                "row {row}'s locator points past the cohort's {} bytes",
                self.header.cohort_size
            ));
        }
        Ok(locator)
    }

    pub fn file_len(&self) -> u64 {
        self.header.file_len
    }
}

/// A bounds-checked walk through one bucket's bytes.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    bucket: u32,
}

impl<'a> Cursor<'a> {
    fn fault(&self, what: &str) -> Corrupt {
        Corrupt(format!(
            "bucket {}: {what} at byte {} runs past the bucket",
            self.bucket, self.pos
        ))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.data.len())
            .ok_or_else(|| self.fault("an entry"))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, Corrupt> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sidecar::format::{
        Entries, IndexContent, KeyValue, VERSION, encode_index, encode_key,
    };

    fn sample(keys: usize) -> IndexContent {
        sample_with(keys, &[0, 1])
    }

    /// `keys` keys of two rows each, the first key's rows `first`.
    fn sample_with(keys: usize, first: &[u64]) -> IndexContent {
        let mut entries = Entries::default();
        for i in 0..keys {
            let key = encode_key(&[
                KeyValue::String(format!("s-{i}")),
                KeyValue::Integer(i as i64 % 3),
            ]);
            match i {
                0 => entries.push(&key, first),
                _ => entries.push(&key, &[i as u64 * 2, i as u64 * 2 + 1]),
            }
        }
        IndexContent {
            cohort_sha256: [7; 32],
            key: vec![
                ("session".into(), KeyType::String),
                ("turn".into(), KeyType::Integer),
            ],
            cohort_size: keys as u64 * 2 * 40,
            cohort_mtime_ns: 1_790_000_000_000_000_000,
            entries,
            locators: (0..keys * 2)
                .map(|i| Locator {
                    offset: i as u64 * 40,
                    len: 39,
                })
                .collect(),
        }
    }

    #[test]
    fn an_index_round_trips_through_its_bytes() {
        let content = sample(50);
        let bytes = encode_index(&content);
        let reader = IndexReader::open(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(reader.header.key, content.key);
        assert_eq!(reader.header.cohort_sha256, [7; 32]);
        assert_eq!(
            (reader.header.cohort_size, reader.header.cohort_mtime_ns),
            (4_000, content.cohort_mtime_ns)
        );
        assert_eq!(reader.header.row_count, 100);
        for (key, rows) in content.entries.iter() {
            assert_eq!(reader.rows(key).unwrap(), rows);
        }
        let missing = encode_key(&[KeyValue::String("nope".into()), KeyValue::Integer(0)]);
        assert!(reader.rows(&missing).unwrap().is_empty());
        assert_eq!(
            reader.locator(99).unwrap(),
            Locator {
                offset: 99 * 40,
                len: 39
            }
        );
        assert!(reader.locator(100).is_err());
    }

    /// A small deterministic generator (xorshift), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Every probe of a damaged index answers or reports `Corrupt`; none
    /// panics or reads out of bounds.
    fn probe(bytes: &[u8]) {
        let Ok(reader) = IndexReader::open(bytes, bytes.len() as u64) else {
            return;
        };
        for i in 0..20 {
            let key = encode_key(&[KeyValue::String(format!("s-{i}")), KeyValue::Integer(i % 3)]);
            if let Ok(rows) = reader.rows(&key) {
                for row in rows {
                    let _ = reader.locator(row);
                }
            }
        }
        let _ = reader.locator(reader.header.row_count.saturating_sub(1));
    }

    #[test]
    fn damaged_and_truncated_indexes_never_panic() {
        let good = encode_index(&sample(20));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for len in 0..good.len() {
            probe(&good[..len]);
        }
        for _ in 0..20_000 {
            let mut bytes = good.clone();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() % bytes.len() as u64) as usize;
                bytes[at] = rng.next() as u8;
            }
            probe(&bytes);
        }
        for _ in 0..2_000 {
            let len = (rng.next() % 512) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if len > 9 && rng.next().is_multiple_of(2) {
                bytes[..8].copy_from_slice(MAGIC);
                bytes[8] = VERSION;
            }
            probe(&bytes);
        }
    }

    /// Counts the bytes a reader asks for.
    struct Counting<'a> {
        bytes: &'a [u8],
        read: std::cell::Cell<u64>,
    }

    impl ReadAt for Counting<'_> {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.read.set(self.read.get() + buf.len() as u64);
            self.bytes.read_exact_at(buf, offset)
        }
    }

    #[test]
    fn the_bytes_do_not_depend_on_the_order_the_entries_come_in() {
        let content = sample(1_000);
        let buckets = u64::from(crate::sidecar::format::bucket_count_for(1_000));
        let mut used: Vec<u64> = content
            .entries
            .iter()
            .map(|(key, _)| crate::sidecar::format::fnv1a64(key) % buckets)
            .collect();
        used.sort_unstable();
        used.dedup();
        assert!(used.len() < 900, "buckets holding several keys are tested");
        let mut reversed = Entries::default();
        for i in (0..content.entries.len()).rev() {
            let (key, rows) = content.entries.get(i);
            reversed.push(key, rows);
        }
        let other = IndexContent {
            entries: reversed,
            ..content.clone()
        };
        assert_eq!(encode_index(&other), encode_index(&content));
    }

    #[test]
    fn a_lookup_reads_the_header_one_offset_one_bucket_and_its_locators() {
        let content = sample(100_000);
        let bytes = encode_index(&content);
        let counting = Counting {
            bytes: &bytes,
            read: std::cell::Cell::new(0),
        };
        let reader = IndexReader::open(&counting, bytes.len() as u64).unwrap();
        let header = counting.read.get();
        let (key, expected) = content.entries.get(77_777);
        let rows = reader.rows(key).unwrap();
        assert_eq!(rows, expected);
        for row in &rows {
            reader.locator(*row).unwrap();
        }
        let total = counting.read.get();
        // Header, two offset entries (a bucket's start and end), one bucket
        // of about one key, and 12 bytes per matching row.
        assert!(header < 200, "header read {header} bytes");
        assert!(
            total - header < 16 + 200 + 24,
            "lookup read {} bytes",
            total - header
        );
        assert!(
            bytes.len() > 3_000_000,
            "the index is {} bytes",
            bytes.len()
        );
    }

    #[test]
    fn specific_faults_are_named() {
        let good = encode_index(&sample(5));
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        assert!(
            IndexReader::open(&bad_magic[..], bad_magic.len() as u64)
                .unwrap_err()
                .0
                .contains("magic")
        );
        let mut bad_version = good.clone();
        bad_version[8] = 2;
        assert!(
            IndexReader::open(&bad_version[..], bad_version.len() as u64)
                .unwrap_err()
                .0
                .contains("version 2")
        );
        let truncated = &good[..good.len() - 3];
        assert!(IndexReader::open(truncated, truncated.len() as u64).is_err());
    }

    #[test]
    fn rows_named_twice_or_out_of_order_are_a_fault() {
        for rows in [vec![3, 1], vec![2, 2]] {
            let content = sample_with(5, &rows);
            let key = content.entries.get(0).0;
            let bytes = encode_index(&content);
            let reader = IndexReader::open(&bytes[..], bytes.len() as u64).unwrap();
            let fault = reader.rows(&key).unwrap_err();
            assert!(fault.0.contains("out of order"), "{rows:?}: {fault}");
        }
        let content = sample(5);
        let bytes = encode_index(&content);
        let reader = IndexReader::open(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(reader.rows(content.entries.get(0).0).unwrap(), [0, 1]);
    }
}
