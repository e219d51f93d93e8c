//! The persisted count cache: a restarted catalog answers from it without
//! reading record files, and each validation outcome (older, newer,
//! damaged, unrelated, rename, ambiguous rename) does what it says.

use std::fs;
use std::path::{Path, PathBuf};

use pchronicle::catalog::counts::Loaded;
use pchronicle::catalog::{Catalog, CatalogOptions, CountCachePlace, Stats};
use pchronicle::error::ErrorCode;

use crate::support::{Warehouse, jsonl, settle};

fn options(file: &Path) -> CatalogOptions {
    CatalogOptions {
        count_cache: CountCachePlace::File(file.to_path_buf()),
        ..CatalogOptions::default()
    }
}

fn catalog(wh: &Warehouse, file: &Path) -> Catalog {
    Catalog::new(wh.path(), options(file)).unwrap()
}

fn root_stats(catalog: &Catalog) -> Stats {
    catalog.stats(Path::new("")).unwrap()
}

/// Three partitions of record files, settled, and a cache file path.
fn warehouse() -> (Warehouse, PathBuf) {
    let wh = Warehouse::new();
    for (i, rel) in ["date=1/a.jsonl", "date=1/b.jsonl", "date=2/c.ndjson"]
        .iter()
        .enumerate()
    {
        wh.file(rel, jsonl(3 + i, 1_700_000_000 + i as i64));
    }
    settle();
    let file = wh.path().join(".pchronicle/cache/counts");
    (wh, file)
}

/// Counts the warehouse once with a persisted cache and saves it.
fn warm(wh: &Warehouse, file: &Path) -> Stats {
    let first = catalog(wh, file);
    let stats = root_stats(&first);
    assert_eq!(first.cache_hits().files_read, 3);
    drop(first);
    assert!(file.is_file(), "dropping the catalog writes the cache");
    stats
}

#[test]
fn a_restarted_catalog_reads_no_record_file() {
    let (wh, file) = warehouse();
    let expected = warm(&wh, &file);
    let second = catalog(&wh, &file);
    assert_eq!(second.count_cache_loaded(), &Loaded::Entries(3));
    assert_eq!(root_stats(&second), expected);
    assert_eq!(second.cache_hits().files_read, 0);

    // A file that changed is read again; the others are not.
    wh.file("date=1/a.jsonl", jsonl(7, 1_700_000_000));
    settle();
    let third = catalog(&wh, &file);
    assert_eq!(root_stats(&third).record_count, expected.record_count + 4);
    assert_eq!(third.cache_hits().files_read, 1);
}

#[test]
fn an_older_schema_is_rebuilt() {
    let (wh, file) = warehouse();
    let expected = warm(&wh, &file);
    let mut bytes = fs::read(&file).unwrap();
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    fs::write(&file, &bytes).unwrap();
    let older = catalog(&wh, &file);
    assert_eq!(older.count_cache_loaded(), &Loaded::Older(0));
    assert_eq!(root_stats(&older), expected);
    assert_eq!(older.cache_hits().files_read, 3);
    drop(older);
    let rebuilt = catalog(&wh, &file);
    assert_eq!(rebuilt.count_cache_loaded(), &Loaded::Entries(3));
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let (wh, file) = warehouse();
    warm(&wh, &file);
    let mut bytes = fs::read(&file).unwrap();
    bytes[8..12].copy_from_slice(&(pchronicle::catalog::counts::SCHEMA + 1).to_le_bytes());
    fs::write(&file, &bytes).unwrap();
    let err = Catalog::new(wh.path(), options(&file)).err().unwrap();
    assert_eq!(err.code, ErrorCode::CountCacheNewer);
    assert!(err.code.fixup().contains("--cache-file"));
    assert_eq!(fs::read(&file).unwrap(), bytes);
    // Without the persisted cache the warehouse still reads.
    let plain = Catalog::new(wh.path(), CatalogOptions::default()).unwrap();
    assert_eq!(root_stats(&plain).files, 3);
    drop(plain);
    assert_eq!(fs::read(&file).unwrap(), bytes);
}

#[test]
fn damaged_caches_are_rebuilt() {
    let (wh, file) = warehouse();
    let expected = warm(&wh, &file);
    let good = fs::read(&file).unwrap();
    let mut damaged = good.clone();
    let at = good.len() / 2;
    damaged[at] ^= 0x01;
    for (what, bytes) in [
        ("damaged", damaged),
        ("truncated", good[..good.len() - 3].to_vec()),
        ("header only", good[..10].to_vec()),
        ("empty", Vec::new()),
    ] {
        fs::write(&file, &bytes).unwrap();
        let catalog = catalog(&wh, &file);
        assert!(
            matches!(catalog.count_cache_loaded(), Loaded::Unusable(_)),
            "{what}: {:?}",
            catalog.count_cache_loaded()
        );
        assert_eq!(root_stats(&catalog), expected, "{what}");
        assert_eq!(catalog.cache_hits().files_read, 3, "{what}");
        drop(catalog);
        assert_eq!(
            fs::read(&file).unwrap().len(),
            good.len(),
            "{what}: rebuilt"
        );
    }
}

#[test]
fn a_file_that_is_not_a_count_cache_is_never_overwritten() {
    let (wh, file) = warehouse();
    let unrelated = b"schema_version = 1\nkind = \"leaf\"\n".to_vec();
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, &unrelated).unwrap();
    let err = Catalog::new(wh.path(), options(&file)).err().unwrap();
    assert_eq!(err.code, ErrorCode::CountCacheForeign);
    assert_eq!(fs::read(&file).unwrap(), unrelated);
    // Nor is a symlink there followed, for reading or for writing.
    let victim = wh.path().join("victim.txt");
    fs::write(&victim, "keep").unwrap();
    fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&victim, &file).unwrap();
    let err = Catalog::new(wh.path(), options(&file)).err().unwrap();
    assert_eq!(err.code, ErrorCode::CountCacheForeign);
    assert_eq!(fs::read(&victim).unwrap(), b"keep");
}

#[test]
fn a_renamed_partition_is_not_read_again() {
    let (wh, file) = warehouse();
    warm(&wh, &file);
    fs::rename(wh.abs("date=1"), wh.abs("date=9")).unwrap();
    settle();
    let after = catalog(&wh, &file);
    let snapshot = after.open(Path::new("")).unwrap();
    let hits = after.cache_hits();
    assert_eq!((hits.files_read, hits.renames), (0, 2));
    let a = snapshot
        .sources
        .iter()
        .find(|s| s.file == "date=9/a.jsonl")
        .unwrap();
    assert_eq!(a.counts.record_count, Some(3));
    assert_eq!(a.path_attrs.get("date").map(String::as_str), Some("9"));
    drop(after);
    // The moved entries are saved under their new paths.
    let again = catalog(&wh, &file);
    root_stats(&again);
    assert_eq!(again.cache_hits().files_read, 0);
}

/// Record files of the same size with one mtime, settled, counted once
/// with a persisted cache: `(warehouse, cache file, set_mtime)`.
fn same_identity(files: &[(&str, &str)]) -> (Warehouse, PathBuf, std::time::SystemTime) {
    let wh = Warehouse::new();
    for (rel, content) in files {
        wh.file(rel, content);
    }
    let mtime = fs::metadata(wh.abs(files[0].0))
        .unwrap()
        .modified()
        .unwrap();
    for (rel, _) in files {
        set_mtime(&wh.abs(rel), mtime);
    }
    settle();
    let file = wh.path().join(".pchronicle/cache/counts");
    root_stats(&catalog(&wh, &file));
    (wh, file, mtime)
}

fn set_mtime(path: &Path, mtime: std::time::SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

fn record_counts(catalog: &Catalog) -> Vec<(String, Option<u64>)> {
    let snapshot = catalog.open(Path::new("")).unwrap();
    snapshot
        .sources
        .iter()
        .map(|s| (s.file.clone(), s.counts.record_count))
        .collect()
}

/// One new path matching two vanished entries: guessing could take the
/// wrong counts, so the file is read.
#[test]
fn a_rename_matching_two_vanished_files_is_read() {
    // Same size and mtime, different record counts.
    let (wh, file, _) = same_identity(&[("one.jsonl", "{}\n{}\n"), ("two.jsonl", "[1,2]\n")]);
    fs::rename(wh.abs("two.jsonl"), wh.abs("moved.jsonl")).unwrap();
    fs::remove_file(wh.abs("one.jsonl")).unwrap();
    settle();
    let after = catalog(&wh, &file);
    assert_eq!(
        record_counts(&after),
        [("moved.jsonl".to_string(), Some(1))]
    );
    let hits = after.cache_hits();
    assert_eq!((hits.files_read, hits.renames), (1, 0));
}

/// Two new paths matching one vanished entry: whichever took it over is
/// read again once the walk has met the other.
#[test]
fn two_new_files_matching_one_vanished_file_are_read() {
    let (wh, file, mtime) = same_identity(&[("one.jsonl", "{}\n{}\n")]);
    fs::remove_file(wh.abs("one.jsonl")).unwrap();
    wh.file("x.jsonl", "[1,2]\n").file("y.jsonl", "[3,4]\n");
    set_mtime(&wh.abs("x.jsonl"), mtime);
    set_mtime(&wh.abs("y.jsonl"), mtime);
    settle();
    let after = catalog(&wh, &file);
    assert_eq!(
        record_counts(&after),
        [
            ("x.jsonl".to_string(), Some(1)),
            ("y.jsonl".to_string(), Some(1))
        ]
    );
    assert_eq!(after.cache_hits().files_read, 2);
    drop(after);
    // What was saved is what the files hold.
    let again = catalog(&wh, &file);
    assert_eq!(root_stats(&again).record_count, 2);
    assert_eq!(again.cache_hits().files_read, 0);
}

#[test]
fn concurrent_catalogs_never_leave_a_torn_cache() {
    let (wh, file) = warehouse();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..10 {
                    let c = catalog(&wh, &file);
                    root_stats(&c);
                    c.clear_cache();
                    root_stats(&c);
                    c.save_counts().unwrap();
                }
            });
        }
    });
    let last = catalog(&wh, &file);
    assert_eq!(last.count_cache_loaded(), &Loaded::Entries(3));
}

/// The daemon's exit writes through a saver that outlives the catalog:
/// whichever thread drops the catalog last, and whichever of the two
/// writes first, the file is in place once the saver's write returns.
#[test]
fn a_saver_waits_for_the_write_a_dropped_catalog_began() {
    let (wh, file) = warehouse();
    for round in 0..20 {
        let _ = fs::remove_file(&file);
        let c = catalog(&wh, &file);
        c.clear_cache();
        root_stats(&c);
        let saver = c.count_saver();
        let dropping = std::thread::spawn(move || drop(c));
        saver.save().unwrap();
        assert!(file.is_file(), "round {round}: the cache is in place");
        dropping.join().unwrap();
    }
}
