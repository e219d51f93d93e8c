//! `--as-of TIME`: a path read as it was at a time, each source cut the
//! way its layout allows (`version`, `generation`, `timestamp`), the same
//! Snapshot through `ls --sources`, `stats` and `cat`.

use std::time::{Duration, SystemTime};

use pchronicle::records::timestamp::format_rfc3339;
use pchronicle::store::compact::CompactJsonlStore;

use crate::support::{FIVE_VERSIONS, Warehouse, five_versions, jsonl, pchronicle, stdout};

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&stdout(&pchronicle(args))).unwrap()
}

fn sources(args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["ls", "--sources", "--json"];
    all.extend_from_slice(args);
    stdout(&pchronicle(&all))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn fails(args: &[&str]) -> String {
    let out = pchronicle(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A compact-jsonl leaf read at each version's commit time (Lance's own)
/// is that version, and halfway to the next it still is.
#[test]
fn a_leaf_as_of_each_commit_time_is_the_version_committed_then() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let leaf = dest.to_str().unwrap();
    let times = CompactJsonlStore::default().version_times(&dest).unwrap();
    assert_eq!(times.len(), FIVE_VERSIONS.len());
    for (i, &(version, made)) in times.iter().enumerate() {
        let v = version.to_string();
        let mut moments = vec![made];
        if let Some(&(_, next)) = times.get(i + 1) {
            moments.push(made + (next - made) / 2);
        }
        for at in moments {
            let at = format_rfc3339(at);
            let stats = json(&["stats", leaf, "--json", "--as-of", &at]);
            assert_eq!(stats["record_count"], FIVE_VERSIONS[i].1, "as of {at}");
            assert_eq!(stats, json(&["stats", leaf, "--json", "--version", &v]));
            let cut = sources(&[leaf, "--as-of", &at]);
            assert_eq!(cut.len(), 1);
            assert_eq!(cut[0]["cut"], "version");
            assert_eq!(cut[0]["fingerprint"], format!("lance:version:{v}"));
            let cat = stdout(&pchronicle(&["cat", leaf, "--as-of", &at]));
            assert_eq!(cat, stdout(&pchronicle(&["cat", leaf, "--version", &v])));
        }
    }
    // Before its first commit the leaf was not there.
    let before = format_rfc3339(times[0].1 - 1);
    assert!(fails(&["stats", leaf, "--as-of", &before]).contains("PCHRONICLE_VERSION_NOT_FOUND"));
    // Long after, it is its newest.
    let stats = json(&["stats", leaf, "--json", "--as-of", "9999-01-01T00:00:00Z"]);
    assert_eq!(stats["record_count"], FIVE_VERSIONS[4].1);
}

/// A record file as of a time holds its records stamped at or before it;
/// a record without a time, or a failed one, cannot be placed and is left
/// out; a file with none by then is left out.
#[test]
fn a_record_file_as_of_a_time_holds_its_records_stamped_by_then() {
    let w = Warehouse::new();
    w.file("wh/a.jsonl", jsonl(5, 100));
    w.file_append("wh/a.jsonl", "{\"id\":\"no-time\"}\nnot json\n");
    w.file("wh/later.jsonl", jsonl(2, 500));
    let wh = w.abs("wh");
    let wh = wh.to_str().unwrap();
    let at = format_rfc3339(102_000_000);
    let stats = json(&["stats", wh, "--json", "--as-of", &at]);
    assert_eq!(stats["record_count"], 3);
    assert_eq!(stats["failed_count"], 0);
    let cut = sources(&[wh, "--as-of", &at]);
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["_file_"], "a.jsonl");
    assert_eq!(cut[0]["cut"], "timestamp");
    assert_eq!(cut[0]["record_count"], 3);
    assert_eq!(cut[0]["max_timestamp"], at);
    let cat = stdout(&pchronicle(&["cat", wh, "--as-of", &at]));
    assert_eq!(cat, jsonl(3, 100));
    let with_failed = stdout(&pchronicle(&["cat", wh, "--as-of", &at, "--failed"]));
    assert_eq!(with_failed, cat);
    // Now (no cut) every record is there, and nothing is marked cut.
    let now = sources(&[wh]);
    assert_eq!(now.len(), 2);
    assert!(now.iter().all(|s| s.get("cut").is_none()));
}

/// A warehouse as of a time: each leaf at its revision then, each file
/// cut by timestamp, a leaf made later left out; `stats` is the sum of
/// what `cat` writes, and a storyline leaf's cut is said to be judged.
#[test]
fn a_warehouse_as_of_a_time_is_the_sum_of_what_cat_writes() {
    let w = Warehouse::new();
    let store = CompactJsonlStore::default();
    let (source, dest) = (w.abs("src"), w.abs("wh/leaf"));
    w.file("src/a.jsonl", jsonl(3, 0));
    store.sync_path(&source, &dest, false).unwrap();
    std::thread::sleep(Duration::from_millis(1_100));
    w.file_append("src/a.jsonl", &jsonl(4, 10));
    store.sync_path(&source, &dest, false).unwrap();
    let times = store.version_times(&dest).unwrap();
    // A whole second after version 1, before version 2.
    let at = (times[0].1 / 1_000_000 + 1) * 1_000_000;
    assert!(at < times[1].1);
    let at_text = format_rfc3339(at);
    let secs = at / 1_000_000;
    // A storyline leaf whose g1 was made before the time, g2 after.
    w.storyline("wh/story", 4);
    let generation = |name: &str, at: SystemTime| {
        std::fs::File::open(w.abs(&format!("wh/story/generations/{name}")))
            .unwrap()
            .set_modified(at)
            .unwrap();
    };
    let then = SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64);
    // A torn record in g1: counted as failed, written by `cat --failed`.
    w.file_append("wh/story/generations/g1/old.jsonl", "{\"torn\n");
    generation("g1", then - Duration::from_secs(100));
    generation("g2", then + Duration::from_secs(100));
    // Records around the time, and a leaf made after it.
    w.file("wh/live/s.jsonl", jsonl(4, secs - 2));
    w.file("src2/b.jsonl", jsonl(2, 0));
    store
        .sync_path(&w.abs("src2"), &w.abs("wh/newer"), false)
        .unwrap();
    let wh = w.abs("wh");
    let wh = wh.to_str().unwrap();

    let cut = sources(&[wh, "--as-of", &at_text]);
    let by_file: std::collections::BTreeMap<&str, &serde_json::Value> = cut
        .iter()
        .map(|s| (s["_file_"].as_str().unwrap(), s))
        .collect();
    assert_eq!(
        by_file.keys().copied().collect::<Vec<_>>(),
        ["leaf", "live/s.jsonl", "story"]
    );
    assert_eq!(by_file["leaf"]["cut"], "version");
    assert_eq!(by_file["leaf"]["record_count"], 3);
    assert_eq!(by_file["story"]["cut"], "generation");
    assert_eq!(by_file["story"]["fingerprint"], "storyline:generation:g1");
    assert_eq!(by_file["story"]["record_count"], 100);
    assert_eq!(by_file["story"]["failed_count"], 1);
    assert_eq!(by_file["live/s.jsonl"]["cut"], "timestamp");
    assert_eq!(by_file["live/s.jsonl"]["record_count"], 3);

    let stats = json(&["stats", wh, "--json", "--as-of", &at_text]);
    assert_eq!(stats["record_count"], 3 + 100 + 3);
    assert_eq!(stats["failed_count"], 1);
    let out = pchronicle(&["cat", wh, "--as-of", &at_text, "--failed"]);
    assert!(out.status.success());
    assert_eq!(stdout(&out).lines().count(), 3 + 100 + 3);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("PCHRONICLE_AS_OF_APPROXIMATE"), "{said}");
    let valid = stdout(&pchronicle(&["cat", wh, "--as-of", &at_text]));
    assert_eq!(valid.lines().count(), 3 + 99 + 3);
    // From the time `CURRENT` last moved on, the generation it names is
    // the one, exactly.
    let story = w.abs("wh/story");
    let out = pchronicle(&[
        "ls",
        "--sources",
        "--json",
        story.to_str().unwrap(),
        "--as-of",
        "2099-01-01T00:00:00Z",
    ]);
    assert!(stdout(&out).contains("storyline:generation:g2"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("APPROXIMATE"));
    // The count of a query is the same Snapshot's.
    let counted = stdout(&pchronicle(&[
        "query",
        wh,
        "--as-of",
        &at_text,
        "SELECT count(*) AS n FROM records WHERE NOT failed",
    ]));
    assert!(counted.contains("105"), "{counted}");
}

/// A leaf whose older versions Lance cleaned up says so for a time
/// before its oldest kept version, never leaves itself out silently.
#[test]
fn a_time_before_the_versions_kept_is_refused_never_silently_empty() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let times = CompactJsonlStore::default().version_times(&dest).unwrap();
    for entry in std::fs::read_dir(dest.join("_versions")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let version = pchronicle::store::compact::versions::version_of(name.to_str().unwrap());
        if version.is_some_and(|v| v <= 2) {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    let leaf = dest.to_str().unwrap();
    let at = format_rfc3339(times[0].1);
    let said = fails(&["stats", leaf, "--as-of", &at]);
    assert!(said.contains("PCHRONICLE_VERSION_NOT_FOUND"), "{said}");
    assert!(said.contains("cleaned up"), "{said}");
    // In a directory: a warning, and the leaf left out.
    let wh = w.abs("wh");
    let out = pchronicle(&["stats", wh.to_str().unwrap(), "--json", "--as-of", &at]);
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("PCHRONICLE_VERSION_NOT_FOUND"), "{said}");
    // The versions kept still read at their times.
    let at = format_rfc3339(times[2].1);
    let stats = json(&["stats", leaf, "--json", "--as-of", &at]);
    assert_eq!(stats["record_count"], FIVE_VERSIONS[2].1);
}

#[test]
fn as_of_refuses_what_it_cannot_mean_with_a_code() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let leaf = dest.to_str().unwrap();
    let at = "2026-01-01T00:00:00Z";
    assert!(fails(&["stats", leaf, "--as-of", "yesterday"]).contains("PCHRONICLE_FILTER_INVALID"));
    assert!(fails(&["stats", leaf, "--as-of", at, "--version", "2"]).contains("--version"));
    let wh = w.abs("wh");
    assert!(
        fails(&["ls", wh.to_str().unwrap(), "--as-of", at]).contains("PCHRONICLE_FILTER_INVALID")
    );
    let version = format!("{leaf}/.versions/2");
    assert!(fails(&["stats", &version, "--as-of", at]).contains("PCHRONICLE_PATH_INVALID"));
}
