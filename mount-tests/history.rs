//! A leaf's past through the mount: `LEAF/.versions/N/` and
//! `LEAF/.tags/NAME/` read exactly as `--version N` reads through the CLI,
//! and hostile interiors never hang the mount.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{Mounted, run};
use crate::support::{FIVE_VERSIONS, Warehouse, five_versions};

fn cli(args: &[&OsStr]) -> Vec<u8> {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Reads `path` on another thread; `None` when it takes longer than
/// `limit`.
fn read_within(path: PathBuf, limit: Duration) -> Option<std::io::Result<Vec<u8>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(fs::read(&path));
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn every_version_in_the_mount_equals_the_cli_at_that_version() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let Some(m) = Mounted::start(&w.abs("wh"), &[]) else {
        return;
    };
    let leaf = m.at("leaf");
    let listed = names(&leaf);
    assert_eq!(
        listed,
        [".records", ".sources", ".stats", ".tags", ".versions"],
        "a leaf lists its past beside its synthetic files"
    );
    let versions = names(&leaf.join(".versions"));
    assert_eq!(
        versions,
        [".sources", ".stats", "1", "2", "3", "4", "5"],
        "every version, and the synthetic files of a directory (no .records)"
    );
    for (version, records) in FIVE_VERSIONS {
        let v = version.to_string();
        let at = leaf.join(".versions").join(&v);
        assert!(fs::metadata(&at).unwrap().is_dir());
        assert_eq!(names(&at), [".records", ".sources", ".stats"]);
        let flag = |verb: &[&str]| {
            let mut args: Vec<&OsStr> = verb.iter().map(OsStr::new).collect();
            args.extend([dest.as_os_str(), OsStr::new("--version"), OsStr::new(&v)]);
            cli(&args)
        };
        let stats = flag(&["stats", "--json"]);
        assert_eq!(fs::read(at.join(".stats")).unwrap(), stats, "version {v}");
        assert_eq!(
            fs::read(at.join(".sources")).unwrap(),
            flag(&["ls", "--sources", "--json"]),
            "version {v}"
        );
        let records_read = fs::read(at.join(".records")).unwrap();
        assert_eq!(records_read, flag(&["cat"]), "version {v}");
        assert_eq!(
            records_read.iter().filter(|b| **b == b'\n').count() as u64,
            records
        );
    }
    let tag = leaf.join(".tags");
    assert_eq!(names(&tag), [".sources", ".stats", "before-eval"]);
    assert_eq!(
        fs::read(tag.join("before-eval/.stats")).unwrap(),
        fs::read(leaf.join(".versions/3/.stats")).unwrap()
    );
    // The warehouse's own rollup counts the leaf once, at its newest.
    let root: serde_json::Value =
        serde_json::from_slice(&fs::read(m.at(".stats")).unwrap()).unwrap();
    assert_eq!(root["record_count"], 8);
    // Nothing can be made in the past.
    assert!(fs::create_dir(leaf.join(".versions/9")).is_err());
    assert!(fs::write(leaf.join(".versions/3/x"), b"x").is_err());
    assert_eq!(
        fs::metadata(leaf.join(".versions/abc"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(
        fs::metadata(leaf.join(".versions/9"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOENT)
    );
    assert!(fs::metadata(leaf.join(".versions/3/.versions")).is_err());
}

#[test]
fn a_version_manifest_swapped_for_a_fifo_or_a_symlinked_versions_never_hangs() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let Some(m) = Mounted::start(&w.abs("wh"), &[]) else {
        return;
    };
    let manifest = fs::read_dir(dest.join("_versions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            pchronicle::store::compact::versions::version_of(
                p.file_name().unwrap().to_str().unwrap(),
            ) == Some(2)
        })
        .unwrap();
    fs::remove_file(&manifest).unwrap();
    w.fifo(manifest.strip_prefix(w.path()).unwrap().to_str().unwrap());
    let limit = Duration::from_secs(20);
    let leaf = m.at("leaf");
    for path in [
        leaf.join(".versions/2/.stats"),
        leaf.join(".versions/.stats"),
        leaf.join(".tags/before-eval/.stats"),
        leaf.join(".versions/3/.records"),
    ] {
        assert!(
            read_within(path.clone(), limit).is_some(),
            "{} hung",
            path.display()
        );
    }
    // The mount still answers.
    assert!(read_within(m.at(".stats"), limit).is_some());
    // A symlinked `_versions/` is never followed.
    fs::remove_file(&manifest).unwrap();
    let elsewhere = w.abs("elsewhere");
    fs::rename(dest.join("_versions"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dest.join("_versions")).unwrap();
    std::thread::sleep(Duration::from_millis(1_200));
    let listed: Vec<String> = fs::read_dir(leaf.join(".versions"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        listed.is_empty(),
        "a symlinked _versions/ was listed: {listed:?}"
    );
    assert!(read_within(leaf.join(".versions/3/.stats"), limit).is_some_and(|r| r.is_err()));
}

/// `mount --as-of TIME`: a frozen view whose every `.stats`, `.sources`
/// and `.records` is the command line's `--as-of TIME`, whose leaves are
/// those there were then, at their revision then.
#[test]
fn a_mount_as_of_a_time_is_the_cli_as_of_that_time() {
    use pchronicle::records::timestamp::format_rfc3339;
    use pchronicle::store::compact::CompactJsonlStore;

    let w = Warehouse::new();
    let dest = five_versions(&w);
    let store = CompactJsonlStore::default();
    let times = store.version_times(&dest).unwrap();
    let at = times[2].1;
    let at_text = format_rfc3339(at);
    let secs = at.div_euclid(1_000_000);
    w.file("wh/live/s.jsonl", crate::support::jsonl(4, secs - 2));
    w.file("src2/b.jsonl", crate::support::jsonl(2, 0));
    store
        .sync_path(&w.abs("src2"), &w.abs("wh/newer"), false)
        .unwrap();
    let wh = w.abs("wh");
    let Some(m) = Mounted::start(&wh, &["--as-of", &at_text]) else {
        return;
    };
    let as_of = |verb: &[&str], rel: &str| {
        let path = if rel.is_empty() {
            wh.clone()
        } else {
            wh.join(rel)
        };
        let mut args: Vec<&OsStr> = verb.iter().map(OsStr::new).collect();
        args.extend([
            path.as_os_str(),
            OsStr::new("--as-of"),
            OsStr::new(&at_text),
        ]);
        cli(&args)
    };
    let root = names(&m.mnt);
    assert!(root.contains(&"leaf".to_string()), "{root:?}");
    assert!(
        !root.contains(&"newer".to_string()),
        "a leaf made later: {root:?}"
    );
    for rel in ["", "leaf", "live"] {
        let at = if rel.is_empty() {
            m.mnt.clone()
        } else {
            m.at(rel)
        };
        assert_eq!(
            fs::read(at.join(".stats")).unwrap(),
            as_of(&["stats", "--json"], rel),
            ".stats of {rel:?}"
        );
        assert_eq!(
            fs::read(at.join(".sources")).unwrap(),
            as_of(&["ls", "--sources", "--json"], rel),
            ".sources of {rel:?}"
        );
    }
    let leaf = fs::read(m.at("leaf/.records")).unwrap();
    assert_eq!(leaf, as_of(&["cat"], "leaf"));
    assert_eq!(
        leaf.iter().filter(|b| **b == b'\n').count() as u64,
        FIVE_VERSIONS[2].1
    );
    // The live file counts its records stamped by then.
    let live: serde_json::Value =
        serde_json::from_slice(&fs::read(m.at("live/.stats")).unwrap()).unwrap();
    assert_eq!(live["record_count"], 3);
    // A frozen view shows no leaf's past of its own.
    assert!(fs::metadata(m.at("leaf/.versions")).is_err());
}
