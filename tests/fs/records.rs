//! `.records`: a leaf's records, streamed, read at any offset.

use std::os::unix::fs::PermissionsExt;

use nix::errno::Errno;
use pchronicle::catalog::Catalog;
use pchronicle::extract::{Selection, Shape};

use super::driver::*;
use crate::extract::cat as cat_plan;
use crate::support::Warehouse;
use pchronicle::store::compact::{CompactJsonlStore, ImportMode};

/// A storyline leaf of about 9 MiB (so reads cross several checkpoints)
/// next to a plain directory.
fn warehouse() -> Warehouse {
    let wh = Warehouse::new();
    wh.storyline("team/planner", 200_000);
    wh.file("team/loose/s.jsonl", "{\"a\":1}\n");
    wh
}

fn expected(wh: &Warehouse, leaf: &str) -> Vec<u8> {
    let catalog = Catalog::new(wh.path(), Default::default()).unwrap();
    cat_plan(&catalog, leaf, Selection::default(), Shape::Plain)
}

#[test]
fn records_is_in_leaves_only() {
    let wh = warehouse();
    let fs = fs_of(&wh);
    let leaf = ino(&fs, "team/planner");
    assert_eq!(
        names(&list(&fs, leaf, 100, false)),
        vec![".", "..", ".stats", ".sources", ".records", ".versions"]
    );
    let plain = ino(&fs, "team/loose");
    assert!(!names(&list(&fs, plain, 100, true)).contains(&".records".to_string()));
    assert_eq!(errno(walk(&fs, "team/loose/.records")), Errno::ENOENT);
    assert_eq!(errno(walk(&fs, ".records")), Errno::ENOENT);
    let entry = walk(&fs, "team/planner/.records").unwrap();
    assert_eq!(entry.attr.size, 0, "its length is known only once produced");
}

#[test]
fn records_streams_exactly_what_cat_writes_in_any_request_size() {
    let wh = warehouse();
    let fs = fs_of(&wh);
    let want = expected(&wh, "team/planner");
    assert!(want.len() > 2 * pchronicle::extract::stream::CHECKPOINT_EVERY as usize);
    let records = ino(&fs, "team/planner/.records");
    for chunk in [4096, 128 << 10, 1 << 20, 3000] {
        let got = read_all_as(&fs, &ROOT_CALLER, records, chunk);
        assert!(
            got == want,
            "chunk {chunk}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
}

#[test]
fn random_preads_equal_slices_of_cat() {
    let wh = warehouse();
    let fs = fs_of(&wh);
    let want = expected(&wh, "team/planner");
    random_preads(&fs, "team/planner/.records", &want);
}

/// A compact-jsonl leaf's failed rows are left out after Lance's scan, not
/// by it: a read behind restarts the scan from a checkpoint's row, which
/// must count them too, in batches read row by row and in those handed on
/// whole.
#[test]
fn random_preads_of_a_leaf_with_failed_rows_equal_its_valid_records() {
    let wh = Warehouse::new();
    let mut text = String::new();
    let mut valid = String::new();
    for i in 0..200_000 {
        // Failed rows in the middle third only: Lance's batches there are
        // handed on row by row, and the others whole.
        if (70_000..140_000).contains(&i) && i % 997 == 13 {
            text.push_str(&format!("{{\"torn\":{i},\n"));
            continue;
        }
        // A few records of 700 KB (under the offload threshold): one
        // does not fit what is left of a piece, which then goes out
        // before the record ends.
        let pad = if [20_000, 40_001, 160_002].contains(&i) {
            "p".repeat(700 << 10)
        } else {
            String::new()
        };
        let line =
            format!("{{\"n\":{i},\"role\":\"user\",\"text\":\"turn {i} of the session{pad}\"}}\n");
        text.push_str(&line);
        valid.push_str(&line);
    }
    wh.file("in/s.jsonl", &text);
    CompactJsonlStore::default()
        .import_path(
            &wh.abs("in/s.jsonl"),
            &wh.abs("wh/leaf"),
            ImportMode::Create,
        )
        .unwrap();
    let fs = fs_of(&wh);
    let want = valid.into_bytes();
    assert!(want.len() > 2 * pchronicle::extract::stream::CHECKPOINT_EVERY as usize);
    assert!(read_all_as(&fs, &ROOT_CALLER, ino(&fs, "wh/leaf/.records"), 1 << 20) == want);
    random_preads(&fs, "wh/leaf/.records", &want);
}

/// Reads at a fixed pseudo-random walk of offsets and sizes (forward,
/// backward, past the end) through one handle, each checked against
/// `want`.
fn random_preads(fs: &pchronicle::fs::WarehouseFs, path: &str, want: &[u8]) {
    let records = ino(fs, path);
    let opened = fs.open(&ROOT_CALLER, records, false).unwrap();
    // A fixed pseudo-random walk: forward, backward, past the end.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..200 {
        let offset = next() % (want.len() as u64 + 4096);
        let size = (next() % (256 << 10)) as u32 + 1;
        let got = fs.read(opened.fh, offset, size).unwrap();
        let start = (offset as usize).min(want.len());
        let end = (start + size as usize).min(want.len());
        assert!(
            got.as_slice() == &want[start..end],
            "pread {size} at {offset}"
        );
    }
    fs.release(opened.fh);
}

#[test]
fn many_open_records_streams_share_a_bounded_set_of_producers() {
    let wh = warehouse();
    let fs = fs_of(&wh);
    let want = expected(&wh, "team/planner");
    let records = ino(&fs, "team/planner/.records");
    let handles: Vec<u64> = (0..40)
        .map(|_| fs.open(&ROOT_CALLER, records, false).unwrap().fh)
        .collect();
    // Round-robin reads: every stream is paused and resumed many times.
    let step = 64 << 10;
    let mut offsets = vec![0usize; handles.len()];
    for round in 0..6 {
        for (i, fh) in handles.iter().enumerate() {
            let got = fs.read(*fh, offsets[i] as u64, step as u32).unwrap();
            let end = (offsets[i] + step).min(want.len());
            assert!(
                got.as_slice() == &want[offsets[i]..end],
                "round {round} handle {i}"
            );
            offsets[i] = end + (i * 4096) % (1 << 20);
        }
    }
    for fh in handles {
        fs.release(fh);
    }
}

/// One user keeping many streams producing pauses their own producers
/// past their share, never another user's.
#[test]
fn one_users_streams_leave_another_users_producer_running() {
    let wh = warehouse();
    let fs = fs_of(&wh);
    let other = user(65534);
    let theirs = ino_as(&fs, &other, "team/planner/.records");
    let records = ino(&fs, "team/planner/.records");
    let mine: Vec<u64> = (0..40)
        .map(|_| fs.open(&ROOT_CALLER, records, false).unwrap().fh)
        .collect();
    let fh = fs.open(&other, theirs, false).unwrap().fh;
    let want = expected(&wh, "team/planner");
    assert!(fs.read(fh, 0, 4096).unwrap().as_slice() == &want[..4096]);
    for round in 0..2 {
        for (i, mine) in mine.iter().enumerate() {
            let at = (round * 40 + i) * 4096;
            let got = fs.read(*mine, at as u64, 4096).unwrap();
            assert!(
                got.as_slice() == &want[at..at + 4096],
                "round {round} handle {i}"
            );
        }
    }
    assert_eq!(fs.records_producers(Some(other.uid)), 1);
    assert_eq!(fs.records_producers(Some(ROOT_CALLER.uid)), 8);
    // Four more users, each with a full share: past the 32 in all, the
    // users with the most running give them up, not the one with one.
    let mut theirs_too = Vec::new();
    for uid in 1001..1005 {
        let caller = user(uid);
        let records = ino_as(&fs, &caller, "team/planner/.records");
        for i in 0..8 {
            let fh = fs.open(&caller, records, false).unwrap().fh;
            let at = i * 4096;
            let got = fs.read(fh, at as u64, 4096).unwrap();
            assert!(
                got.as_slice() == &want[at..at + 4096],
                "user {uid} handle {i}"
            );
            theirs_too.push(fh);
        }
    }
    assert_eq!(fs.records_producers(Some(other.uid)), 1);
    assert!(fs.records_producers(None) <= 32);
    assert!(fs.read(fh, 4096, 4096).unwrap().as_slice() == &want[4096..8192]);
    for fh in mine.into_iter().chain(theirs_too).chain([fh]) {
        fs.release(fh);
    }
    assert_eq!(fs.records_producers(None), 0);
}

#[test]
fn another_user_cannot_read_records_they_could_not_read_natively() {
    let wh = warehouse();
    let part = wh.abs("team/planner/generations/g2/part-0.jsonl");
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o600)).unwrap();
    let fs = fs_of(&wh);
    let nobody = user(65534);
    let records = ino_as(&fs, &nobody, "team/planner/.records");
    let failed = fs
        .open(&nobody, records, false)
        .and_then(|opened| fs.read(opened.fh, 0, 4096));
    assert_eq!(errno(failed), Errno::EACCES);
    // Root (the daemon's own view) still reads it.
    assert!(!cat(&fs, "team/planner/.records").is_empty());
}
