//! Changes made underneath show up within the attribute TTL, and `.stats`
//! is never stale after it.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use pchronicle::catalog::{Catalog, CatalogOptions};

use crate::harness::{Mapping, Mounted, metrics_lines, within};
use crate::support::{Warehouse, jsonl};

/// The TTL these tests mount with, and the slack allowed for scheduling.
const TTL_MS: u64 = 400;
const SLACK: Duration = Duration::from_millis(600);

fn ttl() -> Duration {
    Duration::from_millis(TTL_MS)
}

fn names(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(path)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn record_count(stats: &str) -> u64 {
    let value: serde_json::Value = serde_json::from_str(stats).unwrap();
    value["record_count"].as_u64().unwrap()
}

#[test]
fn new_and_removed_directories_appear_within_the_ttl() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(2, 0));
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", &TTL_MS.to_string()]) else {
        return;
    };
    assert_eq!(names(&m.at("runs")), [".sources", ".stats", "a.jsonl"]);
    // Warm the kernel's caches, then change things underneath.
    let _ = fs::metadata(m.at("runs/a.jsonl"));
    fs::create_dir(wh.abs("runs/new")).unwrap();
    wh.file("runs/new/b.jsonl", jsonl(3, 0));
    let took = within(ttl() + SLACK, || {
        names(&m.at("runs")).contains(&"new".to_string())
    });
    assert!(took.is_some(), "a new directory appears");
    assert!(
        fs::read_to_string(m.at("runs/new/b.jsonl"))
            .unwrap()
            .lines()
            .count()
            == 3
    );

    fs::remove_dir_all(wh.abs("runs/new")).unwrap();
    let took = within(ttl() + SLACK, || {
        !names(&m.at("runs")).contains(&"new".to_string())
            && fs::metadata(m.at("runs/new")).is_err()
    });
    assert!(took.is_some(), "a removed directory disappears");
}

#[test]
fn an_appended_shard_shows_in_stats_size_and_content_within_the_ttl() {
    let wh = Warehouse::new();
    wh.file("sessions/s1.0a1b2c3d.jsonl", jsonl(4, 1_790_000_000));
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", &TTL_MS.to_string()]) else {
        return;
    };
    let shard = m.at("sessions/s1.0a1b2c3d.jsonl");
    assert_eq!(
        record_count(&fs::read_to_string(m.at("sessions/.stats")).unwrap()),
        4
    );
    let before = fs::read(&shard).unwrap();
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(wh.abs("sessions/s1.0a1b2c3d.jsonl"))
        .unwrap();
    file.write_all(jsonl(2, 1_790_000_100).as_bytes()).unwrap();
    drop(file);
    let took = within(ttl() + SLACK, || {
        record_count(&fs::read_to_string(m.at("sessions/.stats")).unwrap()) == 6
            && record_count(&fs::read_to_string(m.at(".stats")).unwrap()) == 6
    });
    assert!(took.is_some(), ".stats counts the appended records");
    let took = within(ttl() + SLACK, || {
        fs::metadata(&shard).unwrap().len()
            == fs::metadata(wh.abs("sessions/s1.0a1b2c3d.jsonl"))
                .unwrap()
                .len()
    });
    assert!(took.is_some(), "the size follows");
    let after = fs::read(&shard).unwrap();
    assert!(
        after.len() > before.len() && after.starts_with(&before),
        "the content follows (no stale pages)"
    );
    assert_eq!(
        after,
        fs::read(wh.abs("sessions/s1.0a1b2c3d.jsonl")).unwrap()
    );
}

#[test]
fn a_new_leaf_version_shows_within_the_ttl_and_stats_is_never_stale() {
    let wh = Warehouse::new();
    wh.storyline("team/planner", 5);
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", &TTL_MS.to_string()]) else {
        return;
    };
    let leaf_stats = m.at("team/planner/.stats");
    assert_eq!(record_count(&fs::read_to_string(&leaf_stats).unwrap()), 5);
    // Publish generation g3 with 9 records by switching CURRENT.
    wh.file(
        "team/planner/generations/g3/part-0.jsonl",
        jsonl(9, 1_790_000_000),
    );
    wh.file("team/planner/CURRENT.tmp", "g3\n");
    fs::rename(
        wh.abs("team/planner/CURRENT.tmp"),
        wh.abs("team/planner/CURRENT"),
    )
    .unwrap();
    let took = within(ttl() + SLACK, || {
        record_count(&fs::read_to_string(&leaf_stats).unwrap()) == 9
            && crate::harness::getxattr(&m.at("team/planner"), "user.pchronicle.record_count")
                .as_deref()
                == Ok("9")
    });
    assert!(took.is_some(), "the new generation is counted");
    // After the TTL, `.stats` equals what a fresh reader computes.
    std::thread::sleep(ttl());
    let fresh = Catalog::new(wh.path(), CatalogOptions::default()).unwrap();
    for rel in ["", "team", "team/planner"] {
        let shown =
            fs::read_to_string(m.at(format!("{rel}/.stats").trim_start_matches('/'))).unwrap();
        assert_eq!(
            shown,
            fresh.stats(Path::new(rel)).unwrap().to_json(),
            "{rel:?}"
        );
    }
}

#[test]
fn a_directory_turning_into_a_leaf_is_shown_as_one() {
    let wh = Warehouse::new();
    wh.file("team/planner/generations/g1/part-0.jsonl", jsonl(3, 0));
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", &TTL_MS.to_string()]) else {
        return;
    };
    assert!(names(&m.at("team/planner")).contains(&"generations".to_string()));
    wh.file("team/planner/CURRENT", "g1\n");
    let took = within(ttl() + SLACK, || {
        names(&m.at("team/planner")) == [".records", ".sources", ".stats", ".versions"]
    });
    assert!(took.is_some(), "the leaf's interior is no longer listed");
}

#[test]
fn page_cache_is_kept_while_a_file_is_unchanged_and_dropped_when_it_changes() {
    let wh = Warehouse::new();
    wh.file("runs/big.jsonl", jsonl(20_000, 1_790_000_000));
    // The mount's own page cache: with passthrough the kernel reads the
    // file underneath and its page cache instead (`reads.rs`).
    let ttl_ms = TTL_MS.to_string();
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", &ttl_ms, "--no-passthrough"]) else {
        return;
    };
    let path = m.at("runs/big.jsonl");
    let pages = (fs::metadata(&path).unwrap().len() as usize).div_ceil(4096);
    // First open: nothing to keep. Read it all into the cache.
    fs::read(&path).unwrap();
    assert_eq!(
        Mapping::of(&path).resident_pages(),
        pages,
        "an unchanged file keeps its pages across opens"
    );
    // Same bytes, new mtime: the identity changed, so the pages go.
    std::thread::sleep(ttl());
    let file = fs::File::options()
        .write(true)
        .open(wh.abs("runs/big.jsonl"))
        .unwrap();
    file.set_modified(std::time::SystemTime::now()).unwrap();
    drop(file);
    std::thread::sleep(ttl() + Duration::from_millis(100));
    assert_eq!(
        Mapping::of(&path).resident_pages(),
        0,
        "a changed file's pages are dropped"
    );
}

#[test]
fn records_appended_with_pchronicle_append_show_in_the_store_stats_within_the_ttl() {
    let wh = Warehouse::new();
    wh.dir(".pchronicle");
    wh.dir("sessions");
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", &TTL_MS.to_string()]) else {
        return;
    };
    let store = wh.abs("sessions");
    for (session, packed) in [("agent-a", false), ("agent-b", true)] {
        let mut args = vec![
            std::ffi::OsStr::new("append"),
            std::ffi::OsStr::new("--store"),
            store.as_os_str(),
            std::ffi::OsStr::new("--session"),
            std::ffi::OsStr::new(session),
        ];
        if packed {
            args.push(std::ffi::OsStr::new("--packed"));
        }
        args.push(std::ffi::OsStr::new(
            r#"{"id":"r1","ts":"2026-11-30T10:00:00Z"}"#,
        ));
        let out = crate::harness::run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let took = within(ttl() + SLACK, || {
        record_count(&fs::read_to_string(m.at("sessions/.stats")).unwrap()) == 2
    });
    assert!(took.is_some(), "the appended records are counted");
    // The shards are regular files under their store, line and packed.
    let names = names(&m.at("sessions"));
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("agent-a.") && n.ends_with(".jsonl")),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("agent-b.") && n.ends_with(".jsonseq")),
        "{names:?}"
    );
}

#[test]
fn refresh_shows_changes_underneath_at_once_under_long_ttls() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(2, 0));
    let Some(m) = Mounted::start(wh.path(), &["--attr-ttl", "1h", "--negative-ttl", "1h"]) else {
        return;
    };
    let refresh = |path: Option<&str>| {
        let mut args = vec![std::ffi::OsStr::new("refresh"), m.mnt.as_os_str()];
        args.extend(path.map(std::ffi::OsStr::new));
        let out = crate::harness::run(&args);
        assert!(
            out.status.success(),
            "refresh {path:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let size = |rel: &str| fs::metadata(m.at(rel)).map(|meta| meta.len());
    let count = |rel: &str| record_count(&fs::read_to_string(m.at(rel)).unwrap());
    // The kernel learns all of it: a size, two rollups, a missing name.
    let before = size("runs/a.jsonl").unwrap();
    assert_eq!(count(".stats"), 2);
    assert_eq!(count("runs/.stats"), 2);
    assert!(size("later").is_err());

    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(wh.abs("runs/a.jsonl"))
        .unwrap();
    a.write_all(jsonl(1, 100).as_bytes()).unwrap();
    drop(a);
    wh.file("runs/b.jsonl", jsonl(3, 0));
    wh.file("later/c.jsonl", jsonl(4, 0));
    std::thread::sleep(Duration::from_millis(200));
    // Within the TTLs the mount keeps what it showed.
    assert_eq!(size("runs/a.jsonl").unwrap(), before);
    assert_eq!(count(".stats"), 2);
    assert!(size("later").is_err(), "a missing name is remembered");

    refresh(Some("runs"));
    assert!(size("runs/a.jsonl").unwrap() > before, "the new size shows");
    assert!(names(&m.at("runs")).contains(&"b.jsonl".to_string()));
    assert_eq!(count("runs/.stats"), 6);
    // The rollups above the path count it too.
    assert_eq!(count(".stats"), 6 + 4);
    // Elsewhere the TTL still holds.
    assert!(size("later").is_err());

    // A name the kernel remembers as missing, and a path through it.
    refresh(Some("later/c.jsonl"));
    assert_eq!(size("later/c.jsonl").unwrap(), jsonl(4, 0).len() as u64);
    assert_eq!(count("later/.stats"), 4);

    // The whole mount; a path that does not exist is no error.
    fs::remove_file(wh.abs("runs/b.jsonl")).unwrap();
    refresh(None);
    assert!(!names(&m.at("runs")).contains(&"b.jsonl".to_string()));
    assert_eq!(count(".stats"), 3 + 4);
    let out = crate::harness::run(&[
        std::ffi::OsStr::new("refresh"),
        m.mnt.as_os_str(),
        std::ffi::OsStr::new("nowhere/at/all"),
    ]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("note: nowhere/at/all is not in the mount")
    );

    // Paths out of the mount are refused before anything is asked.
    let out = crate::harness::run(&[
        std::ffi::OsStr::new("refresh"),
        m.mnt.as_os_str(),
        std::ffi::OsStr::new("../etc"),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_PATH_INVALID"));
    let out = crate::harness::run(&[std::ffi::OsStr::new("refresh"), wh.path().as_os_str()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_NOT_MOUNTED"));
}

#[test]
fn a_polled_directory_is_listed_from_the_kernels_cache_and_renewed_after_the_ttl() {
    let wh = Warehouse::new();
    for i in 0..100 {
        wh.file(&format!("polled/f{i:03}.jsonl"), "{}\n");
    }
    let ttl_ms = TTL_MS.to_string();
    let Some(m) = Mounted::start_logging(
        wh.path(),
        &["--attr-ttl", &ttl_ms, "--log-metrics", "100ms"],
        "warn,pchronicle=info",
    ) else {
        return;
    };
    // What `ls -l` asks: the names, then each one's attributes.
    let ls_l = || {
        let mut listed = 0;
        for entry in fs::read_dir(m.at("polled")).unwrap() {
            fs::symlink_metadata(entry.unwrap().path()).unwrap();
            listed += 1;
        }
        listed
    };
    // Each operation's count, over every interval logged once the daemon
    // has been idle for a few.
    let counted = |op: &str| {
        std::thread::sleep(Duration::from_millis(350));
        metrics_lines(&m.log())
            .iter()
            .filter_map(|line| line["ops"][op]["count"].as_u64())
            .sum::<u64>()
    };
    let started = std::time::Instant::now();
    for _ in 0..10 {
        assert_eq!(ls_l(), 102, "100 files, .stats and .sources");
    }
    assert!(started.elapsed() < ttl(), "the rounds fit in the TTL");
    assert!(
        counted("opendir") <= 1,
        "the kernel opens directories itself: {}",
        m.log()
    );
    // 104 entries fill about five replies and an empty one: listed once.
    let pluses = counted("readdirplus");
    assert!(
        pluses <= 10,
        "{pluses} readdirplus: the kernel keeps the entries"
    );
    // Past the TTL the kernel's copy is dropped, so the next `ls -l`
    // renews every entry with the listing instead of a lookup per name.
    std::thread::sleep(ttl());
    let (lookups, pluses) = (counted("lookup"), counted("readdirplus"));
    assert_eq!(ls_l(), 102);
    let new_lookups = counted("lookup") - lookups;
    assert!(new_lookups < 10, "{new_lookups} lookups: {}", m.log());
    assert!(counted("readdirplus") > pluses, "listed again");
}
