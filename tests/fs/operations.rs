//! What each operation answers.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use pchronicle::catalog::Entry as Listed;
use pchronicle::fs::{Caller, FsOptions, ROOT, WarehouseFs, XattrData};
use serde_json::Value;

use super::driver::*;
use crate::support::{Warehouse, jsonl, pchronicle, stdout};

/// A warehouse with every kind of node and things the mount must not show.
fn mixed() -> Warehouse {
    let wh = Warehouse::new();
    for day in 1..=2 {
        wh.file(
            &format!("runs/date=2026-11-0{day}/s{day}.jsonl"),
            jsonl(day * 3, 1_790_000_000),
        );
    }
    wh.storyline("team/planner", 7);
    wh.file("README.txt", "hello\n");
    wh.file(".pchronicle/state.json", "{}");
    wh.file("shadow/.stats", "a real file named like a synthetic one\n");
    wh.file("shadow/real.jsonl", jsonl(2, 1_790_000_000));
    wh.symlink("README.txt", "readme-link");
    wh.fifo("pipe");
    std::fs::write(wh.abs(".").join(OsStr::from_bytes(b"bad\xffname")), "x").unwrap();
    wh
}

#[test]
fn lookup_and_getattr_show_each_node_as_the_catalog_classifies_it() {
    let wh = mixed();
    let fs = fs_of(&wh);
    let root = fs.getattr(&ROOT_CALLER, ROOT, None).unwrap().0;
    assert_eq!(root.kind, fuser::FileType::Directory);
    let readme = walk(&fs, "README.txt").unwrap();
    let native = std::fs::metadata(wh.abs("README.txt")).unwrap();
    assert_eq!(readme.attr.kind, fuser::FileType::RegularFile);
    assert_eq!(readme.attr.size, native.len());
    assert_eq!(u32::from(readme.attr.perm), native.mode() & 0o7777);
    assert_eq!(readme.attr_ttl, FsOptions::default().attr_ttl);
    // A leaf is a directory, masked read-only.
    let leaf = walk(&fs, "team/planner").unwrap().attr;
    assert_eq!(leaf.kind, fuser::FileType::Directory);
    assert_eq!(leaf.perm & 0o222, 0);
    // getattr says what lookup said.
    let again = fs.getattr(&ROOT_CALLER, readme.attr.ino.0, None).unwrap().0;
    assert_eq!(again, readme.attr);
}

#[test]
fn names_the_mount_does_not_show_are_not_found() {
    let wh = mixed();
    let fs = fs_of(&wh);
    for rel in [
        "readme-link",
        "pipe",
        ".pchronicle",
        "team/planner/CURRENT",
        "team/planner/generations",
        "nothing-here",
    ] {
        assert_eq!(errno(walk(&fs, rel)), Errno::ENOENT, "{rel}");
    }
    let bad = OsStr::from_bytes(b"bad\xffname");
    assert_eq!(errno(fs.lookup(&ROOT_CALLER, ROOT, bad)), Errno::ENOENT);
    let readme = ino(&fs, "README.txt");
    // Nothing is below a file.
    assert_eq!(
        errno(fs.lookup(&ROOT_CALLER, readme, OsStr::new("x"))),
        Errno::ENOENT
    );
    assert_eq!(
        errno(fs.getattr(&ROOT_CALLER, 999_999, None)),
        Errno::ENOENT
    );
    assert_eq!(errno(fs.opendir(&ROOT_CALLER, readme)), Errno::ENOTDIR);
}

#[test]
fn directories_list_dots_synthetics_then_the_listing_and_leaves_only_synthetics() {
    let wh = mixed();
    let fs = fs_of(&wh);
    for plus in [false, true] {
        let root = names(&list(&fs, ROOT, 100, plus));
        assert_eq!(
            root,
            [
                ".",
                "..",
                ".stats",
                ".sources",
                "README.txt",
                "runs",
                "shadow",
                "team"
            ],
            "plus: {plus}"
        );
        let leaf = names(&list(&fs, ino(&fs, "team/planner"), 100, plus));
        // A storyline leaf keeps its generations: its past is listed too.
        assert_eq!(
            leaf,
            [".", "..", ".stats", ".sources", ".records", ".versions"]
        );
        // A real `.stats` is shadowed by the synthetic one.
        let shadow = names(&list(&fs, ino(&fs, "shadow"), 100, plus));
        assert_eq!(shadow, [".", "..", ".stats", ".sources", "real.jsonl"]);
    }
    // Entries carry the numbers and sizes a lookup gives.
    let listed = list(&fs, ROOT, 100, true);
    let readme = listed.iter().find(|l| l.name == "README.txt").unwrap();
    let looked_up = walk(&fs, "README.txt").unwrap().attr;
    assert_eq!((readme.ino, readme.size), (looked_up.ino.0, looked_up.size));
    assert!(listed.iter().find(|l| l.name == "runs").unwrap().is_dir);
}

#[test]
fn directory_reads_continue_at_their_offset_in_any_buffer_size() {
    let wh = Warehouse::new();
    for i in 0..57 {
        wh.file(&format!("many/f{i:03}.txt"), "x");
    }
    let fs = fs_of(&wh);
    let dir = ino(&fs, "many");
    let whole = names(&list(&fs, dir, 1000, false));
    assert_eq!(whole.len(), 61);
    for room in [1, 2, 7, 60] {
        assert_eq!(names(&list(&fs, dir, room, false)), whole, "room {room}");
        assert_eq!(
            names(&list(&fs, dir, room, true)),
            whole,
            "plus, room {room}"
        );
    }
    // Offsets past the end return nothing.
    let handle = fs.opendir(&ROOT_CALLER, dir).unwrap();
    let mut buffer = Buffer::with_room(10);
    fs.readdir(dir, Some(handle.fh), 0, &mut buffer).unwrap();
    let mut past = Buffer::with_room(10);
    fs.readdir(dir, Some(handle.fh), 1_000, &mut past).unwrap();
    assert!(past.got.is_empty());
    fs.release(handle.fh);
}

#[test]
fn synthetic_files_hold_the_cli_bytes_and_stat_their_length() {
    let wh = mixed();
    let fs = fs_of(&wh);
    for rel in ["", "runs", "runs/date=2026-11-01", "team/planner"] {
        synthetics_match_the_cli(&fs, &wh, rel);
        let looked_up = walk(&fs, &join(rel, ".stats")).unwrap();
        assert_eq!(
            looked_up.attr.size,
            cat(&fs, &join(rel, ".stats")).len() as u64,
            "stat says the exact length"
        );
        assert_eq!(looked_up.attr.perm, 0o444);
    }
    let record_count = |bytes: &[u8]| -> u64 {
        let v: Value = serde_json::from_slice(bytes).unwrap();
        v["record_count"].as_u64().unwrap()
    };
    assert_eq!(record_count(&cat(&fs, "runs/.stats")), 9);
}

#[test]
fn reads_at_any_offset_return_the_bytes_there() {
    let wh = Warehouse::new();
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    wh.file("blob.bin", &content);
    wh.file("d/r.jsonl", jsonl(500, 0));
    let fs = fs_of(&wh);
    assert_eq!(cat(&fs, "blob.bin"), content);
    let blob = ino(&fs, "blob.bin");
    let opened = fs.open(&ROOT_CALLER, blob, false).unwrap();
    assert!(!opened.direct_io);
    for (offset, size) in [
        (0u64, 10u32),
        (4_095, 3),
        (299_990, 100),
        (300_000, 5),
        (1 << 40, 5),
    ] {
        let data = fs.read(opened.fh, offset, size).unwrap();
        let start = (offset as usize).min(content.len());
        let end = (start + size as usize).min(content.len());
        assert_eq!(data.as_slice(), &content[start..end], "at {offset}");
    }
    fs.release(opened.fh);
    // A synthetic file likewise, in small reads.
    let stats = ino(&fs, "d/.stats");
    let whole = read_all_as(&fs, &ROOT_CALLER, stats, 1 << 20);
    assert_eq!(read_all_as(&fs, &ROOT_CALLER, stats, 7), whole);
    let opened = fs.open(&ROOT_CALLER, stats, false).unwrap();
    assert_eq!(fs.read(opened.fh, 5, 4).unwrap().as_slice(), &whole[5..9]);
    assert!(
        fs.read(opened.fh, whole.len() as u64 + 9, 4)
            .unwrap()
            .as_slice()
            .is_empty()
    );
    // An open handle reports the length of what it holds.
    let (attr, _) = fs.getattr(&ROOT_CALLER, stats, Some(opened.fh)).unwrap();
    assert_eq!(attr.size, whole.len() as u64);
    fs.release(opened.fh);
}

#[test]
fn writes_are_refused_and_handles_are_checked() {
    let wh = mixed();
    let fs = fs_of(&wh);
    let readme = ino(&fs, "README.txt");
    assert_eq!(errno(fs.open(&ROOT_CALLER, readme, true)), Errno::EROFS);
    assert_eq!(errno(fs.access(readme, true)), Errno::EROFS);
    fs.access(readme, false).unwrap();
    assert_eq!(errno(fs.access(424_242, false)), Errno::ENOENT);
    assert_eq!(errno(fs.read(424_242, 0, 10)), Errno::EBADF);
    let dir = fs.opendir(&ROOT_CALLER, ROOT).unwrap();
    assert_eq!(errno(fs.read(dir.fh, 0, 10)), Errno::EISDIR);
    let file = fs.open(&ROOT_CALLER, readme, false).unwrap();
    let mut buffer = Buffer::with_room(5);
    assert_eq!(
        errno(fs.readdir(ROOT, Some(file.fh), 0, &mut buffer)),
        Errno::EBADF
    );
    fs.release(dir.fh);
    fs.release(file.fh);
}

/// What the extended attributes say of every kind of node.
#[test]
fn extended_attributes_describe_every_node() {
    let wh = mixed();
    let fs = fs_of(&wh);
    let get = |rel: &str, name: &str| {
        let ino = if rel.is_empty() { ROOT } else { ino(&fs, rel) };
        match fs.getxattr(&ROOT_CALLER, ino, OsStr::new(name), 4096) {
            Ok(XattrData::Data(bytes)) => Ok(String::from_utf8(bytes).unwrap()),
            Ok(XattrData::Size(_)) => panic!("a size for a sized request"),
            Err(e) => Err(e.errno()),
        }
    };
    let list_of = |rel: &str| -> Vec<String> {
        let XattrData::Data(bytes) = fs.listxattr(&ROOT_CALLER, ino(&fs, rel), 4096).unwrap()
        else {
            panic!("a size for a sized request")
        };
        bytes
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8(n.to_vec()).unwrap())
            .collect()
    };
    assert_eq!(get("", "user.pchronicle.kind").unwrap(), "directory");
    assert_eq!(
        get("team/planner", "user.pchronicle.kind").unwrap(),
        "dataset"
    );
    assert_eq!(get("README.txt", "user.pchronicle.kind").unwrap(), "file");
    assert_eq!(get(".stats", "user.pchronicle.kind").unwrap(), "synthetic");
    assert_eq!(
        get("team/planner", "user.pchronicle.format").unwrap(),
        "storyline/v1"
    );
    let catalog = wh.catalog();
    let Listed::Dataset { preview, .. } =
        &catalog.list(Path::new("team/planner")).unwrap().entries[0]
    else {
        panic!("a leaf lists as a dataset")
    };
    assert_eq!(
        get("team/planner", "user.pchronicle.record_count").unwrap(),
        preview.counts.record_count.unwrap().to_string()
    );
    let shard = "runs/date=2026-11-02/s2.jsonl";
    assert_eq!(get(shard, "user.pchronicle.format").unwrap(), "jsonl");
    assert_eq!(get(shard, "user.pchronicle.record_count").unwrap(), "6");
    assert_eq!(
        list_of(shard),
        [
            "user.pchronicle.kind",
            "user.pchronicle.format",
            "user.pchronicle.record_count"
        ]
    );
    assert_eq!(list_of("README.txt"), ["user.pchronicle.kind"]);
    assert_eq!(
        get("README.txt", "user.pchronicle.format"),
        Err(Errno::ENODATA)
    );
    assert_eq!(
        get("README.txt", "security.selinux"),
        Err(Errno::EOPNOTSUPP)
    );
    // Size 0 asks for the length; a short buffer is ERANGE.
    let readme = ino(&fs, "README.txt");
    let kind = OsStr::new("user.pchronicle.kind");
    assert_eq!(
        fs.getxattr(&ROOT_CALLER, readme, kind, 0).unwrap(),
        XattrData::Size(4)
    );
    assert_eq!(
        errno(fs.getxattr(&ROOT_CALLER, readme, kind, 2)),
        Errno::ERANGE
    );
    let names_len = "user.pchronicle.kind".len() as u32 + 1;
    assert_eq!(
        fs.listxattr(&ROOT_CALLER, readme, 0).unwrap(),
        XattrData::Size(names_len)
    );
    assert_eq!(errno(fs.listxattr(&ROOT_CALLER, readme, 3)), Errno::ERANGE);
}

#[test]
fn statfs_is_the_warehouse_filesystem() {
    let wh = mixed();
    let fs = fs_of(&wh);
    let ours = fs.statfs().unwrap();
    let native = nix::sys::statvfs::statvfs(wh.path()).unwrap();
    assert_eq!(ours.blocks, native.blocks());
    assert_eq!(ours.block_size as u64, native.block_size());
    assert_eq!(ours.name_max as u64, native.name_max());
    assert_eq!(ours.files, native.files());
}

/// RFC test 7 without a kernel: on the demo warehouse, every directory's
/// and dataset's `.sources` is `ls --sources --json` and `open`, and its
/// `.stats` is `stats --json`, byte for byte.
#[test]
#[cfg(feature = "compact-jsonl")]
fn rfc7_sources_equal_ls_sources_and_open_and_stats_equal_stats() {
    let wh = Warehouse::new();
    pchronicle::demo::build(wh.path()).unwrap();
    // Read once so every missing manifest is repaired before comparing.
    assert!(
        pchronicle(&["stats", wh.path().to_str().unwrap()])
            .status
            .success()
    );
    let fs = fs_of(&wh);
    let catalog = wh.catalog();
    let mut nodes = vec![String::new()];
    let mut checked = 0;
    while let Some(rel) = nodes.pop() {
        let node = ino(&fs, &rel);
        for entry in list(&fs, node, 1000, true) {
            if entry.is_dir && entry.name != "." && entry.name != ".." {
                nodes.push(join(&rel, &entry.name));
            }
        }
        let sources = synthetics_match_the_cli(&fs, &wh, &rel);
        let opened = catalog.open(Path::new(&rel)).unwrap();
        assert_eq!(
            sources,
            opened.sources_jsonl().into_bytes(),
            "open({rel:?})"
        );
        checked += 1;
    }
    assert!(checked >= 10, "the demo has many nodes, checked {checked}");
    // The root's sources name the compact leaf inside team/.
    let root_sources = String::from_utf8(cat(&fs, ".sources")).unwrap();
    assert!(
        root_sources.contains("\"_file_\":\"team/codex_jsonl\""),
        "{root_sources}"
    );
}

/// Asserts that the `.stats` and `.sources` of `rel` hold the bytes of
/// `stats --json` and `ls --sources --json`, and that a lookup states the
/// length a read returns; returns the `.sources` bytes.
fn synthetics_match_the_cli(fs: &WarehouseFs, wh: &Warehouse, rel: &str) -> Vec<u8> {
    let path = wh.abs(rel);
    let path = path.to_str().unwrap();
    let stats = cat(fs, &join(rel, ".stats"));
    let cli = pchronicle(&["stats", "--json", path]);
    assert_eq!(
        String::from_utf8_lossy(&stats),
        stdout(&cli),
        ".stats of {rel:?}"
    );
    let sources = cat(fs, &join(rel, ".sources"));
    let cli = pchronicle(&["ls", "--sources", "--json", path]);
    assert_eq!(
        String::from_utf8_lossy(&sources),
        stdout(&cli),
        ".sources of {rel:?}"
    );
    // The length a stat reports is the length a read returns.
    assert_eq!(
        walk(fs, &join(rel, ".stats")).unwrap().attr.size,
        stats.len() as u64
    );
    sources
}

#[test]
fn a_missing_name_is_a_negative_entry_only_with_a_negative_ttl() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(1, 0));
    let plain = fs_with_ttl(&wh, std::time::Duration::from_secs(1));
    assert_eq!(errno(walk(&plain, "runs/missing")), Errno::ENOENT);
    let ttl = std::time::Duration::from_secs(30);
    let fs = fs_with_options(
        &wh,
        FsOptions {
            negative_ttl: ttl,
            ..FsOptions::default()
        },
    );
    for name in ["missing", ".records"] {
        let entry = fs
            .lookup(&ROOT_CALLER, ino(&fs, "runs"), OsStr::new(name))
            .unwrap();
        assert!(entry.is_negative(), "{name}");
        assert_eq!(entry.entry_ttl, ttl);
    }
    let latin = OsStr::from_bytes(b"caf\xe9");
    assert!(fs.lookup(&ROOT_CALLER, ROOT, latin).unwrap().is_negative());
    // A name that exists is an ordinary entry.
    assert!(!walk(&fs, "runs/a.jsonl").unwrap().is_negative());
    // Another user's answer is not remembered for everyone: the kernel
    // shares negative entries among users.
    let stranger = Caller {
        uid: 4242,
        gid: 4242,
        pid: 1,
    };
    assert_eq!(
        errno(fs.lookup(&stranger, ROOT, OsStr::new("later"))),
        Errno::ENOENT
    );
    // A refresh names the missing names it answered, the root's too.
    assert!(
        fs.lookup(&ROOT_CALLER, ROOT, OsStr::new("later"))
            .unwrap()
            .is_negative()
    );
    let forget = fs.refresh(&ROOT_CALLER, ROOT, None).unwrap();
    let runs = ino(&fs, "runs");
    for (dir, name) in [(ROOT, "later"), (runs, "missing"), (runs, ".records")] {
        assert!(
            forget.entries.contains(&(dir, name.to_string())),
            "{name}: {forget:?}"
        );
    }
}

/// The record count a `.stats` in the filesystem says.
fn cat_count(fs: &WarehouseFs, rel: &str) -> u64 {
    let stats: Value = serde_json::from_slice(&cat(fs, rel)).unwrap();
    stats["record_count"].as_u64().unwrap()
}

#[test]
fn refresh_names_the_subtree_and_the_rollups_above_and_only_for_the_mounts_users() {
    let wh = Warehouse::new();
    wh.file("team/runs/a.jsonl", jsonl(2, 0));
    wh.file("other/b.jsonl", jsonl(1, 0));
    let fs = fs_with_ttl(&wh, std::time::Duration::from_secs(3600));
    let (team, runs, a) = (
        ino(&fs, "team"),
        ino(&fs, "team/runs"),
        ino(&fs, "team/runs/a.jsonl"),
    );
    let (root_stats, team_stats, runs_stats) = (
        ino(&fs, ".stats"),
        ino(&fs, "team/.stats"),
        ino(&fs, "team/runs/.stats"),
    );
    let other = ino(&fs, "other/b.jsonl");
    assert_eq!(cat_count(&fs, "team/runs/.stats"), 2);
    assert_eq!(cat_count(&fs, ".stats"), 3);

    let forget = fs.refresh(&ROOT_CALLER, team, Some("runs")).unwrap();
    for wanted in [ROOT, team, runs, a, root_stats, team_stats, runs_stats] {
        assert!(forget.inodes.contains(&wanted), "{wanted} in {forget:?}");
    }
    assert!(!forget.inodes.contains(&other), "outside the path");
    for (dir, name) in [(team, "runs"), (runs, "a.jsonl"), (runs, ".stats")] {
        assert!(
            forget.entries.contains(&(dir, name.to_string())),
            "{name} in {dir}: {forget:?}"
        );
    }
    // Above the path only inodes: a name's entry there would wait for a
    // lock a slow lookup in that directory may hold. Their contents are
    // checked again at next use: unchanged, a number keeps serving.
    assert!(
        forget.entries.iter().all(|(dir, _)| *dir != ROOT),
        "{forget:?}"
    );
    assert!(fs.getattr(&ROOT_CALLER, root_stats, None).is_ok());
    // A name not yet known is named too (the kernel may remember it as
    // missing); the daemon's renders are gone, so a new record shows.
    wh.file("team/runs/new.jsonl", jsonl(5, 0));
    let forget = fs.refresh(&ROOT_CALLER, runs, Some("new.jsonl")).unwrap();
    assert!(forget.entries.contains(&(runs, "new.jsonl".to_string())));
    // Changed: the old number is stale, so the kernel looks the name up
    // again and is given a number for the new content.
    assert_eq!(
        errno(fs.getattr(&ROOT_CALLER, root_stats, None)),
        Errno::ESTALE
    );
    assert_ne!(ino(&fs, ".stats"), root_stats);
    assert_eq!(cat_count(&fs, "team/runs/.stats"), 7);
    assert_eq!(cat_count(&fs, ".stats"), 8);

    // Only root and the daemon's own user; names, never paths.
    let stranger = Caller {
        uid: 4242,
        gid: 4242,
        pid: 1,
    };
    assert_eq!(errno(fs.refresh(&stranger, ROOT, None)), Errno::EPERM);
    for bad in ["", ".", "..", "a/b"] {
        assert_eq!(
            errno(fs.refresh(&ROOT_CALLER, ROOT, Some(bad))),
            Errno::EINVAL,
            "{bad:?}"
        );
    }
    assert_eq!(
        errno(fs.refresh(&ROOT_CALLER, root_stats, None)),
        Errno::ENOTDIR
    );
}
