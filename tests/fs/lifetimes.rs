//! What holds across calls: handles, inode references, renders reused
//! within the TTL, freshness, and the file an open serves.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nix::errno::Errno;
use pchronicle::fs::filesystem::KernelCopy;
use pchronicle::fs::{Caller, FsOptions};
use serde_json::Value;

use super::driver::*;
use crate::support::{Warehouse, jsonl, settle};

fn record_count(bytes: &[u8]) -> u64 {
    let v: Value = serde_json::from_slice(bytes).unwrap();
    v["record_count"].as_u64().unwrap()
}

#[test]
fn handles_live_from_open_to_release() {
    let wh = Warehouse::new();
    wh.file("d/r.jsonl", jsonl(3, 0));
    let fs = fs_of(&wh);
    let file = ino(&fs, "d/r.jsonl");
    assert_eq!(fs.open_handles(), 0);
    let a = fs.open(&ROOT_CALLER, file, false).unwrap();
    let b = fs.open(&ROOT_CALLER, ino(&fs, "d/.stats"), false).unwrap();
    let d = fs.opendir(&ROOT_CALLER, ino(&fs, "d")).unwrap();
    assert_eq!(fs.open_handles(), 3);
    assert!(a.fh != b.fh && b.fh != d.fh);
    // A handle keeps reading the file it opened after it is removed.
    std::fs::remove_file(wh.abs("d/r.jsonl")).unwrap();
    assert_eq!(
        fs.read(a.fh, 0, 1 << 20).unwrap().as_slice(),
        jsonl(3, 0).as_bytes()
    );
    for fh in [a.fh, b.fh, d.fh] {
        fs.release(fh);
    }
    assert_eq!(fs.open_handles(), 0);
    assert_eq!(errno(fs.read(a.fh, 0, 10)), Errno::EBADF);
}

#[test]
fn an_open_synthetic_file_keeps_the_bytes_it_was_opened_with() {
    let wh = Warehouse::new();
    wh.file("d/a.jsonl", jsonl(3, 0));
    let fs = fs_with_ttl(&wh, Duration::ZERO);
    let stats = ino(&fs, "d/.stats");
    let opened = fs.open(&ROOT_CALLER, stats, false).unwrap();
    wh.file("d/b.jsonl", jsonl(4, 0));
    let held = fs.read(opened.fh, 0, 1 << 20).unwrap().as_slice().to_vec();
    assert_eq!(record_count(&held), 3);
    // A new open (TTL zero) renders afresh.
    assert_eq!(record_count(&cat(&fs, "d/.stats")), 7);
    fs.release(opened.fh);
}

#[test]
fn lookups_and_readdirplus_hold_references_until_forgotten() {
    let wh = Warehouse::new();
    for i in 0..10 {
        wh.file(&format!("d/f{i}.txt"), "x");
    }
    let fs = fs_of(&wh);
    let dir = ino(&fs, "d");
    let before = fs.known_inodes();
    let listed = list(&fs, dir, 3, true);
    assert_eq!(listed.len(), 14);
    // Every entry but `.` and `..` was handed over once.
    let numbered = fs.known_inodes();
    assert_eq!(numbered, before + 12);
    let f0 = listed.iter().find(|l| l.name == "f0.txt").unwrap().ino;
    // A lookup of the same name gives the same number, one more reference.
    assert_eq!(ino(&fs, "d/f0.txt"), f0);
    fs.forget(f0, 1);
    assert_eq!(fs.getattr(&ROOT_CALLER, f0, None).unwrap().0.ino.0, f0);
    fs.forget(f0, 1);
    assert_eq!(errno(fs.getattr(&ROOT_CALLER, f0, None)), Errno::ENOENT);
    assert_eq!(fs.known_inodes(), numbered - 1);
}

/// The names the reads into `buffers` got, in order.
fn names_read<'a>(buffers: &[&'a Buffer]) -> Vec<&'a str> {
    buffers
        .iter()
        .flat_map(|buffer| &buffer.got)
        .map(|l| l.name.as_str())
        .collect()
}

#[test]
fn a_directory_read_continues_from_its_snapshot_and_restarts_fresh() {
    let wh = Warehouse::new();
    wh.file("d/a.txt", "x");
    wh.file("d/b.txt", "x");
    let fs = fs_with_ttl(&wh, Duration::ZERO);
    let dir = ino(&fs, "d");
    let handle = fs.opendir(&ROOT_CALLER, dir).unwrap();
    let mut first = Buffer::with_room(5);
    fs.readdir(dir, Some(handle.fh), 0, &mut first).unwrap();
    wh.file("d/c.txt", "x");
    let mut rest = Buffer::with_room(10);
    let offset = first.got.last().unwrap().offset;
    fs.readdir(dir, Some(handle.fh), offset, &mut rest).unwrap();
    let seen = names_read(&[&first, &rest]);
    assert_eq!(seen, [".", "..", ".stats", ".sources", "a.txt", "b.txt"]);
    let mut again = Buffer::with_room(10);
    fs.readdir(dir, Some(handle.fh), 0, &mut again).unwrap();
    assert!(
        again.got.iter().any(|l| l.name == "c.txt"),
        "offset 0 takes a new snapshot"
    );
    fs.release(handle.fh);
}

#[test]
fn a_read_without_a_handle_continues_the_directorys_snapshot() {
    let wh = Warehouse::new();
    wh.file("d/a.txt", "x");
    wh.file("d/b.txt", "x");
    let fs = fs_with_ttl(&wh, Duration::ZERO);
    let dir = ino(&fs, "d");
    let mut first = Buffer::with_room(5);
    fs.readdir(dir, None, 0, &mut first).unwrap();
    wh.file("d/c.txt", "x");
    assert_eq!(fs.unopened_listings(), 1);
    let mut rest = Buffer::with_room(10);
    let offset = first.got.last().unwrap().offset;
    fs.readdir(dir, None, offset, &mut rest).unwrap();
    let seen = names_read(&[&first, &rest]);
    assert_eq!(seen, [".", "..", ".stats", ".sources", "a.txt", "b.txt"]);
    assert!(seen.len() < 1 << 31, "offsets are positions");
    // Read to the end, the snapshot goes; from the start, a new one.
    let mut end = Buffer::with_room(10);
    let offset = rest.got.last().unwrap().offset;
    fs.readdir(dir, None, offset, &mut end).unwrap();
    assert!(end.got.is_empty());
    assert_eq!(fs.unopened_listings(), 0);
    let mut again = Buffer::with_room(10);
    fs.readdir(dir, None, 0, &mut again).unwrap();
    assert!(again.got.iter().any(|l| l.name == "c.txt"));
}

#[test]
fn a_listing_the_kernel_caches_itself_is_kept_for_the_ttl_at_most() {
    let wh = Warehouse::new();
    wh.file("d/a.txt", "x");
    wh.storyline("leaf", 2);
    // Reads `rel` to the end, two entries at a time: what the first read
    // and the one that found the end said (no other read says anything).
    let copy = |fs: &pchronicle::fs::WarehouseFs, rel: &str, fh: Option<u64>| {
        let mut offset = 0;
        let mut said = Vec::new();
        loop {
            let mut buffer = Buffer::with_room(2);
            let copy = fs.readdir(ino(fs, rel), fh, offset, &mut buffer).unwrap();
            let Some(last) = buffer.got.last() else {
                said.push(copy);
                return said;
            };
            if offset == 0 {
                said.push(copy);
            } else {
                assert_eq!(copy, KernelCopy::Unchanged, "in the middle");
            }
            offset = last.offset;
        }
    };
    let kept = |fs: &pchronicle::fs::WarehouseFs, rel: &str| match copy(fs, rel, None)[..] {
        [KernelCopy::Begun, KernelCopy::Complete(kept)] => kept,
        ref other => panic!("{other:?}"),
    };
    let fs = fs_with_ttl(&wh, Duration::from_millis(700));
    assert_eq!(kept(&fs, "d"), Some(Duration::from_millis(700)));
    let handle = fs.opendir(&ROOT_CALLER, ino(&fs, "d")).unwrap();
    assert_eq!(
        copy(&fs, "d", Some(handle.fh)),
        [KernelCopy::Unchanged; 2],
        "as opendir said"
    );
    fs.release(handle.fh);
    // With a zero TTL the kernel asks for the mtime at every read from the
    // start: a leaf's past changes without it, and so may a directory
    // changed within the racy window.
    let fs = fs_with_ttl(&wh, Duration::ZERO);
    assert_eq!(kept(&fs, "leaf"), Some(Duration::ZERO));
    assert_eq!(kept(&fs, "leaf/.versions"), Some(Duration::ZERO));
    wh.file("d/b.txt", "x");
    assert_eq!(kept(&fs, "d"), Some(Duration::from_secs(1)));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(kept(&fs, "d"), None, "as long as its mtime is");
}

/// A catalog of `wh` that watches, or `None` where the filesystem reports
/// no changes (nothing is kept there, so there is nothing to test).
fn watching_catalog(wh: &Warehouse) -> Option<pchronicle::catalog::Catalog> {
    let options = pchronicle::catalog::CatalogOptions {
        watch: true,
        ..Default::default()
    };
    let catalog = pchronicle::catalog::Catalog::new(wh.path(), options).unwrap();
    catalog.keeps_answers().then_some(catalog)
}

/// A catalog that watches: a render whose directory did not change stands
/// past the TTL without a walk; one whose directory changed is made again.
#[test]
fn a_render_of_a_quiet_directory_stands_past_the_ttl_without_a_walk() {
    let wh = Warehouse::new();
    wh.file("d/a.jsonl", jsonl(3, 0));
    wh.file("d/e/b.jsonl", jsonl(2, 0));
    let Some(catalog) = watching_catalog(&wh) else {
        return;
    };
    let ttl = Duration::from_millis(200);
    let fs = pchronicle::fs::WarehouseFs::new(
        std::sync::Arc::new(catalog),
        pchronicle::fs::FsOptions {
            attr_ttl: ttl,
            ..Default::default()
        },
    );
    assert_eq!(record_count(&cat(&fs, "d/.stats")), 5);
    assert!(String::from_utf8_lossy(&cat(&fs, "d/.sources")).contains("e/b.jsonl"));
    let rendered = fs.render_counts().rendered;
    for _ in 0..3 {
        std::thread::sleep(ttl + Duration::from_millis(50));
        assert_eq!(record_count(&cat(&fs, "d/.stats")), 5);
        assert!(String::from_utf8_lossy(&cat(&fs, "d/.sources")).contains("e/b.jsonl"));
    }
    assert_eq!(
        fs.render_counts().rendered,
        rendered,
        "a quiet directory is never walked again"
    );
    // A change below it, however deep, is rendered past the TTL.
    wh.file_append("d/e/b.jsonl", &jsonl(4, 10));
    std::thread::sleep(ttl + Duration::from_millis(50));
    assert_eq!(record_count(&cat(&fs, "d/.stats")), 9);
    assert!(fs.render_counts().rendered > rendered);
}

/// The `.sources` of a large directory, when only its `.stats` was asked
/// for, is not kept: it is made when asked for, from the answer the
/// catalog kept, without walking the directory again. A small one is kept.
#[test]
fn a_large_sources_nobody_asked_for_is_made_from_the_kept_answer() {
    let wh = Warehouse::new();
    for i in 0..300 {
        wh.file(&format!("big/f{i:03}.jsonl"), jsonl(1, i as i64));
    }
    wh.file("small/a.jsonl", jsonl(2, 0));
    let Some(catalog) = watching_catalog(&wh) else {
        return;
    };
    settle();
    let catalog = std::sync::Arc::new(catalog);
    let fs = pchronicle::fs::WarehouseFs::new(
        std::sync::Arc::clone(&catalog),
        pchronicle::fs::FsOptions {
            attr_ttl: Duration::from_secs(60),
            ..Default::default()
        },
    );
    let expected = catalog
        .open(std::path::Path::new("big"))
        .unwrap()
        .sources_jsonl();
    // Both synthetic files numbered unrendered, as a plain `ls -a` does.
    for dir in ["big", "small"] {
        list(&fs, ino(&fs, dir), 1 << 16, false);
    }
    let before = fs.render_counts().rendered;
    assert_eq!(record_count(&cat(&fs, "big/.stats")), 300);
    assert_eq!(record_count(&cat(&fs, "small/.stats")), 2);
    assert_eq!(fs.render_counts().rendered, before + 2);
    let (rendered, kept) = (fs.render_counts().rendered, catalog.cache_hits().kept);
    // The small one was kept with its `.stats`.
    assert!(String::from_utf8_lossy(&cat(&fs, "small/.sources")).contains("a.jsonl"));
    assert_eq!(fs.render_counts().rendered, rendered);
    // The large one is made now, from the kept answer.
    assert_eq!(cat(&fs, "big/.sources"), expected.as_bytes());
    assert_eq!(fs.render_counts().rendered, rendered + 1);
    assert_eq!(catalog.cache_hits().kept.hits, kept.hits + 1);
    assert_eq!(catalog.cache_hits().kept.misses, kept.misses);
}

/// A `.sources` nobody asked for is made only as far as a kept render may
/// take: past that it stops, having made no more than the bound.
#[test]
fn a_sources_text_is_made_only_within_the_bytes_it_may_take() {
    let wh = Warehouse::new();
    for i in 0..50 {
        wh.file(&format!("d/f{i:02}.jsonl"), jsonl(1, i));
    }
    let catalog = pchronicle::catalog::Catalog::new(wh.path(), Default::default()).unwrap();
    let snapshot = catalog.open(std::path::Path::new("d")).unwrap();
    let full = snapshot.sources_jsonl();
    assert_eq!(full.lines().count(), 50);
    assert_eq!(
        snapshot.sources_jsonl_within(full.len()).as_deref(),
        Some(full.as_str())
    );
    assert_eq!(snapshot.sources_jsonl_within(full.len() - 1), None);
    assert_eq!(snapshot.sources_jsonl_within(0), None);
}

#[test]
fn renders_are_reused_within_the_ttl_and_redone_after_it() {
    let wh = Warehouse::new();
    wh.file("d/a.jsonl", jsonl(3, 0));
    let fs = fs_with_ttl(&wh, Duration::from_millis(400));
    let stats = ino(&fs, "d/.stats");
    let sources = ino(&fs, "d/.sources");
    let first = fs.open(&ROOT_CALLER, stats, false).unwrap();
    // One walk rendered both files: the sibling and a second open reuse it.
    wh.file("d/b.jsonl", jsonl(4, 0));
    let text = cat(&fs, "d/.sources");
    assert!(
        !String::from_utf8_lossy(&text).contains("b.jsonl"),
        "reused within the TTL"
    );
    let (a, b) = (
        fs.read(first.fh, 0, 1 << 20).unwrap(),
        fs.open(&ROOT_CALLER, stats, false).unwrap(),
    );
    let b_data = fs.read(b.fh, 0, 1 << 20).unwrap();
    assert_eq!(a.as_slice(), b_data.as_slice());
    assert_eq!(record_count(a.as_slice()), 3);
    fs.release(first.fh);
    fs.release(b.fh);
    std::thread::sleep(Duration::from_millis(450));
    // Looked up again after the TTL: rendered again, new content under a
    // new number; the old numbers keep the content they stand for.
    assert_eq!(record_count(&cat(&fs, "d/.stats")), 7);
    assert!(String::from_utf8_lossy(&cat(&fs, "d/.sources")).contains("b.jsonl"));
    assert_ne!(ino(&fs, "d/.stats"), stats);
    assert_ne!(ino(&fs, "d/.sources"), sources);
    assert_eq!(
        record_count(&read_all_as(&fs, &ROOT_CALLER, stats, 1 << 20)),
        3
    );
}

#[test]
fn an_unchanged_synthetic_file_keeps_its_number_and_pages_and_a_changed_one_is_a_new_file() {
    let wh = Warehouse::new();
    wh.file("d/a.jsonl", jsonl(3, 0));
    let ttl = Duration::from_millis(200);
    let fs = fs_with_ttl(&wh, ttl);
    let entry = walk(&fs, "d/.stats").unwrap();
    let stats = entry.attr.ino.0;
    assert_eq!(entry.attr_ttl, ttl, "its attributes may be cached");
    let opened = fs.open(&ROOT_CALLER, stats, false).unwrap();
    assert!(
        opened.keep_cache && !opened.direct_io,
        "served from the page cache"
    );
    let first = fs.read(opened.fh, 0, 1 << 20).unwrap().as_slice().to_vec();
    assert_eq!(entry.attr.size, first.len() as u64);
    fs.release(opened.fh);

    // Unchanged after the TTL: same number, same times, pages kept.
    std::thread::sleep(ttl + Duration::from_millis(50));
    let again = walk(&fs, "d/.stats").unwrap();
    assert_eq!(again.attr.ino.0, stats);
    assert_eq!(again.attr.mtime, entry.attr.mtime);
    let (attr, attr_ttl) = fs.getattr(&ROOT_CALLER, stats, None).unwrap();
    assert_eq!(
        (attr.size, attr.mtime, attr_ttl),
        (entry.attr.size, entry.attr.mtime, ttl)
    );
    assert!(fs.open(&ROOT_CALLER, stats, false).unwrap().keep_cache);

    // Changed: a new number with the new bytes; the old number, still
    // open, keeps its own bytes and attributes (no reader sees a mix).
    let held = fs.open(&ROOT_CALLER, stats, false).unwrap();
    wh.file("d/b.jsonl", jsonl(4, 0));
    std::thread::sleep(ttl + Duration::from_millis(50));
    let changed = walk(&fs, "d/.stats").unwrap();
    assert_ne!(changed.attr.ino.0, stats);
    assert_eq!(record_count(&cat(&fs, "d/.stats")), 7);
    assert_eq!(fs.read(held.fh, 0, 1 << 20).unwrap().as_slice(), first);
    let (attr, _) = fs.getattr(&ROOT_CALLER, stats, Some(held.fh)).unwrap();
    assert_eq!(attr.size, first.len() as u64);
    fs.release(held.fh);
    // A listing offers the current number with its attributes.
    let listed = list(&fs, ino(&fs, "d"), 100, true);
    let entry = listed.iter().find(|e| e.name == ".stats").unwrap();
    assert_eq!(
        (entry.ino, entry.size),
        (changed.attr.ino.0, changed.attr.size)
    );
}

#[test]
fn where_other_users_read_the_mount_synthetic_files_are_rendered_per_open() {
    let wh = Warehouse::new();
    wh.file("d/a.jsonl", jsonl(3, 0));
    let fs = fs_with_options(
        &wh,
        FsOptions {
            shared: true,
            ..FsOptions::default()
        },
    );
    let entry = walk(&fs, "d/.stats").unwrap();
    assert!(
        entry.attr_ttl.is_zero(),
        "a synthetic length is never cached"
    );
    let opened = fs.open(&ROOT_CALLER, entry.attr.ino.0, false).unwrap();
    assert!(
        opened.direct_io && !opened.keep_cache,
        "never the shared page cache"
    );
    fs.release(opened.fh);
}

#[test]
fn nodes_are_fresh_within_the_ttl_the_daemon_is_asked_again() {
    let wh = Warehouse::new();
    wh.file("d/a.jsonl", jsonl(3, 0));
    let fs = fs_of(&wh);
    let d = ino(&fs, "d");
    // The daemon answers from the warehouse as it is now: the kernel's
    // TTL is what delays a change, never the filesystem.
    wh.file("d/new/x.jsonl", jsonl(1, 0));
    assert!(names(&list(&fs, d, 100, false)).contains(&"new".to_string()));
    std::fs::remove_dir_all(wh.abs("d/new")).unwrap();
    assert_eq!(errno(walk(&fs, "d/new")), Errno::ENOENT);
    // A directory that becomes a leaf is shown as one.
    wh.storyline("d/leafy", 2);
    let leafy = ino(&fs, "d/leafy");
    assert_eq!(
        names(&list(&fs, leafy, 100, false)),
        [".", "..", ".stats", ".sources", ".records", ".versions"]
    );
}

#[test]
fn an_open_serves_the_file_last_shown_or_answers_estale() {
    let wh = Warehouse::new();
    wh.file("d/r.jsonl", "old\n");
    let fs = fs_of(&wh);
    let file = ino(&fs, "d/r.jsonl");
    // Replaced by another file (a new inode) after the lookup.
    wh.file("d/r.jsonl.tmp", "new and longer\n");
    std::fs::rename(wh.abs("d/r.jsonl.tmp"), wh.abs("d/r.jsonl")).unwrap();
    assert_eq!(errno(fs.open(&ROOT_CALLER, file, false)), Errno::ESTALE);
    // The kernel looks the name up again, finds a new inode, and opens it.
    assert_ne!(ino(&fs, "d/r.jsonl"), file);
    assert_eq!(cat(&fs, "d/r.jsonl"), b"new and longer\n");
}

#[test]
fn an_unchanged_file_keeps_its_page_cache_and_a_changed_one_drops_it() {
    let wh = Warehouse::new();
    wh.file("d/r.jsonl", jsonl(3, 0));
    settle();
    let fs = fs_of(&wh);
    let file = ino(&fs, "d/r.jsonl");
    let open = |fs: &pchronicle::fs::WarehouseFs| {
        let opened = fs.open(&ROOT_CALLER, file, false).unwrap();
        fs.release(opened.fh);
        opened.keep_cache
    };
    assert!(!open(&fs), "the first open has nothing cached");
    assert!(open(&fs));
    std::fs::OpenOptions::new()
        .append(true)
        .open(wh.abs("d/r.jsonl"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{}\n"))
        .unwrap();
    assert!(!open(&fs), "a changed file drops its pages");
    // The directory's cached entries are kept only while it is unchanged
    // and settled.
    let d = ino(&fs, "d");
    let opendir = |fs: &pchronicle::fs::WarehouseFs| {
        let opened = fs.opendir(&ROOT_CALLER, d).unwrap();
        fs.release(opened.fh);
        opened.keep_cache
    };
    settle();
    assert!(!opendir(&fs));
    assert!(opendir(&fs));
    wh.file("d/s.jsonl", jsonl(1, 0));
    assert!(!opendir(&fs), "a new name drops the cached entries");
}

#[test]
fn another_user_is_answered_with_what_it_could_read_natively() {
    let wh = Warehouse::new();
    wh.file("open/a.jsonl", jsonl(3, 0));
    wh.file("closed/b.jsonl", jsonl(5, 0));
    std::fs::set_permissions(wh.abs("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let fs = fs_of(&wh);
    let nobody = Caller {
        uid: 65_534,
        gid: 65_534,
        pid: std::process::id(),
    };
    let stats = ino(&fs, ".stats");
    let own = read_all_as(&fs, &ROOT_CALLER, stats, 1 << 20);
    let theirs = read_all_as(&fs, &nobody, stats, 1 << 20);
    assert_eq!(record_count(&own), 8);
    assert_eq!(
        record_count(&theirs),
        3,
        "a directory it cannot enter is not counted"
    );
    // Their render is kept apart from the daemon's.
    assert_eq!(
        record_count(&read_all_as(&fs, &ROOT_CALLER, stats, 1 << 20)),
        8
    );
    // And a file it may not read is not opened for it.
    let closed = ino(&fs, "closed/b.jsonl");
    assert_eq!(errno(fs.open(&nobody, closed, false)), Errno::EACCES);
    let count = OsStr::new("user.pchronicle.record_count");
    assert!(fs.getxattr(&ROOT_CALLER, closed, count, 64).is_ok());
}

#[test]
fn a_file_replaced_under_its_name_is_a_new_inode_and_the_old_one_serves_its_handle() {
    let wh = Warehouse::new();
    wh.file("d/r.jsonl", jsonl(3, 0));
    let fs = fs_with_ttl(&wh, Duration::ZERO);
    let old = ino(&fs, "d/r.jsonl");
    let opened = fs.open(&ROOT_CALLER, old, false).unwrap();
    std::fs::write(wh.abs("d/r.tmp"), jsonl(5, 100)).unwrap();
    std::fs::rename(wh.abs("d/r.tmp"), wh.abs("d/r.jsonl")).unwrap();

    // The old number now stands for the file its handle holds: described
    // by that handle, named or not (`fstat` does not name it).
    for fh in [Some(opened.fh), None] {
        let (attr, _) = fs.getattr(&ROOT_CALLER, old, fh).unwrap();
        assert_eq!(attr.size, jsonl(3, 0).len() as u64);
    }
    assert_eq!(errno(fs.open(&ROOT_CALLER, old, false)), Errno::ESTALE);
    assert_eq!(
        fs.read(opened.fh, 0, 1 << 20).unwrap().as_slice(),
        jsonl(3, 0).as_bytes()
    );

    // The name's lookup numbers the new file afresh, and so does a listing.
    let new = ino(&fs, "d/r.jsonl");
    assert_ne!(new, old);
    assert_eq!(cat(&fs, "d/r.jsonl"), jsonl(5, 100).as_bytes());
    let listed = list(&fs, ino(&fs, "d"), 100, true);
    let entry = listed.iter().find(|e| e.name == "r.jsonl").unwrap();
    assert_eq!(entry.ino, new);
    fs.release(opened.fh);
    // No handle left on the old number: stale (the kernel looks it up).
    assert_eq!(errno(fs.getattr(&ROOT_CALLER, old, None)), Errno::ESTALE);

    // Replaced again and seen first by a listing: a third number there.
    std::fs::write(wh.abs("d/r.tmp"), jsonl(7, 200)).unwrap();
    std::fs::rename(wh.abs("d/r.tmp"), wh.abs("d/r.jsonl")).unwrap();
    let listed = list(&fs, ino(&fs, "d"), 100, true);
    let third = listed.iter().find(|e| e.name == "r.jsonl").unwrap().ino;
    assert!(third != new && third != old);
    assert_eq!(ino(&fs, "d/r.jsonl"), third);
}

#[test]
fn versions_held_are_bounded_and_a_number_pushed_out_is_looked_up_anew() {
    let wh = Warehouse::new();
    // Room for 16 versions per render kept: 2 renders, 32 versions.
    let dirs: Vec<String> = (0..33).map(|i| format!("d{i:02}")).collect();
    for d in &dirs {
        wh.file(&format!("{d}/r.jsonl"), jsonl(3, 0));
    }
    for (from, to) in [("d00", "a"), ("d01", "b"), ("d02", "c")] {
        std::fs::rename(wh.abs(from), wh.abs(to)).unwrap();
    }
    let fs = fs_with_options(
        &wh,
        FsOptions {
            render_cache_entries: 2,
            ..FsOptions::default()
        },
    );
    let a = ino(&fs, "a/.stats");
    ino(&fs, "b/.stats");
    for d in &dirs[3..] {
        ino(&fs, &format!("{d}/.stats"));
    }
    ino(&fs, "c/.stats");
    // 33 versions, room for 32: `a`'s went, and its bytes with it.
    assert_eq!(errno(fs.getattr(&ROOT_CALLER, a, None)), Errno::ESTALE);
    assert_eq!(errno(fs.open(&ROOT_CALLER, a, false)), Errno::ESTALE);
    // A handle opened before is still described (`fstat`), with its times.
    let b = ino(&fs, "b/.stats");
    let (before, _) = fs.getattr(&ROOT_CALLER, b, None).unwrap();
    let held = fs.open(&ROOT_CALLER, b, false).unwrap();
    for d in dirs[3..].iter().map(String::as_str).chain(["c", "a"]) {
        ino(&fs, &format!("{d}/.stats"));
    }
    wh.file("e/r.jsonl", jsonl(3, 0));
    ino(&fs, "e/.stats");
    assert_eq!(
        errno(fs.open(&ROOT_CALLER, b, false)),
        Errno::ESTALE,
        "pushed out"
    );
    let (after, _) = fs.getattr(&ROOT_CALLER, b, None).unwrap();
    assert_eq!((after.size, after.mtime), (before.size, before.mtime));
    fs.release(held.fh);
    let again = ino(&fs, "a/.stats");
    assert_ne!(again, a);
    assert_eq!(record_count(&cat(&fs, "a/.stats")), 3);
    // One larger than the byte budget is rendered per open, never held.
    let fs = fs_with_options(
        &wh,
        FsOptions {
            render_cache_bytes: 10,
            ..FsOptions::default()
        },
    );
    let entry = walk(&fs, "a/.stats").unwrap();
    assert!(entry.attr_ttl.is_zero());
    let opened = fs.open(&ROOT_CALLER, entry.attr.ino.0, false).unwrap();
    assert!(opened.direct_io);
    fs.release(opened.fh);
}

#[test]
fn what_is_kept_per_number_goes_with_numbers_a_sweep_drops() {
    let wh = Warehouse::new();
    wh.file("a/only.txt", "x");
    // More entries than the inode table keeps unheld, listed without
    // handing them to the kernel (plain readdir): the table sweeps.
    for i in 0..70_000 {
        wh.file(&format!("d/f{i:05}.txt"), "");
    }
    let fs = fs_of(&wh);
    let a = ino(&fs, "a");
    let only = list(&fs, a, 10, false)
        .into_iter()
        .find(|l| l.name == "only.txt")
        .unwrap()
        .ino;
    // An attribute request for a number the kernel was never handed notes
    // the file it shows.
    let before = fs.files_shown();
    assert_eq!(fs.getattr(&ROOT_CALLER, only, None).unwrap().0.ino.0, only);
    assert_eq!(fs.files_shown(), before + 1);
    let d = ino(&fs, "d");
    // Every file, `.` and `..`, `.stats` and `.sources`.
    assert_eq!(list(&fs, d, 100_000, false).len(), 70_004);
    assert_eq!(
        errno(fs.getattr(&ROOT_CALLER, only, None)),
        Errno::ENOENT,
        "the table swept the unheld number"
    );
    assert_eq!(
        fs.files_shown(),
        before,
        "the swept number's shown file went with it"
    );
}
