//! `--version N|TAG` and `LEAF/.versions/`, `LEAF/.tags/`: a leaf read as
//! it was at one of its revisions, the same Snapshot through `stats`,
//! `ls --sources` and `cat`, by flag or by path.

use pchronicle::store::compact::CompactJsonlStore;

use crate::support::{FIVE_VERSIONS, Warehouse, five_versions, jsonl, pchronicle, stdout};

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&stdout(&pchronicle(args))).unwrap()
}

#[test]
fn every_version_of_a_leaf_reads_as_it_was() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let leaf = dest.to_str().unwrap();
    for (version, records) in FIVE_VERSIONS {
        let v = version.to_string();
        let stats = json(&["stats", leaf, "--json", "--version", &v]);
        assert_eq!(stats["record_count"], records, "stats of version {v}");
        let sources = stdout(&pchronicle(&[
            "ls",
            "--sources",
            leaf,
            "--json",
            "--version",
            &v,
        ]));
        let source: serde_json::Value = serde_json::from_str(sources.trim()).unwrap();
        assert_eq!(source["fingerprint"], format!("lance:version:{v}"));
        assert_eq!(source["cut"], "version");
        assert_eq!(source["record_count"], records);
        let cat = stdout(&pchronicle(&["cat", leaf, "--version", &v]));
        assert_eq!(cat.lines().count() as u64, records, "cat of version {v}");
    }
    // The newest, read without --version, is not marked as cut.
    let now = stdout(&pchronicle(&["ls", "--sources", leaf, "--json"]));
    assert!(!now.contains("\"cut\""));
    // A tag names its version.
    let tagged = json(&["stats", leaf, "--json", "--version", "before-eval"]);
    assert_eq!(tagged["record_count"], 6);
    let cat = stdout(&pchronicle(&["cat", leaf, "--version", "before-eval"]));
    assert!(cat.contains("\"ts\":30") && !cat.contains("\"ts\":40"));
}

#[test]
fn a_version_that_is_not_there_is_refused_with_a_code() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", jsonl(3, 0));
    let dest = w.abs("wh/leaf");
    CompactJsonlStore::default()
        .sync_path(&w.abs("src"), &dest, false)
        .unwrap();
    let leaf = dest.to_str().unwrap();
    let code = |args: &[&str]| {
        let out = pchronicle(args);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(code(&["stats", leaf, "--version", "7"]).contains("PCHRONICLE_VERSION_NOT_FOUND"));
    assert!(code(&["cat", leaf, "--version", "no-such-tag"]).contains("PCHRONICLE_TAG_NOT_FOUND"));
    assert!(code(&["cat", leaf, "--version", "../x"]).contains("PCHRONICLE_TAG_INVALID"));
    let wh = w.abs("wh");
    assert!(
        code(&["stats", wh.to_str().unwrap(), "--version", "1"])
            .contains("PCHRONICLE_PATH_INVALID")
    );
}

/// `LEAF/.versions/N` is the same Snapshot as `LEAF --version N`, through
/// every verb; `.tags/NAME` as the version it names; `.versions` lists
/// each version the leaf keeps and is never one of the leaf's sources.
#[test]
fn versions_by_path_equal_versions_by_flag() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let leaf = dest.to_str().unwrap();
    let listed = json(&["ls", &format!("{leaf}/.versions"), "--json"]);
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1", "2", "3", "4", "5"]);
    for (version, records) in FIVE_VERSIONS {
        let v = version.to_string();
        let by_path = format!("{leaf}/.versions/{v}");
        for verb in [&["stats", "--json"][..], &["ls", "--sources", "--json"]] {
            let flag = stdout(&pchronicle(&[verb, &[leaf, "--version", &v]].concat()));
            let path = stdout(&pchronicle(&[verb, &[by_path.as_str()]].concat()));
            assert_eq!(flag, path, "{verb:?} of version {v}");
        }
        let cat = stdout(&pchronicle(&["cat", &by_path]));
        assert_eq!(cat, stdout(&pchronicle(&["cat", leaf, "--version", &v])));
        assert_eq!(cat.lines().count() as u64, records);
    }
    // The tag reads as its version; the whole `.versions` directory is its
    // versions rolled up, each a source named by its number.
    let tagged = format!("{leaf}/.tags/before-eval");
    assert_eq!(
        stdout(&pchronicle(&["stats", &tagged, "--json"])),
        stdout(&pchronicle(&[
            "stats",
            &format!("{leaf}/.versions/3"),
            "--json"
        ]))
    );
    let all = json(&["stats", &format!("{leaf}/.versions"), "--json"]);
    assert_eq!(all["record_count"], 3 + 5 + 6 + 6 + 8);
    // The leaf itself, and the warehouse above it, count only the newest.
    assert_eq!(json(&["stats", leaf, "--json"])["record_count"], 8);
    let wh = w.abs("wh");
    assert_eq!(
        json(&["stats", wh.to_str().unwrap(), "--json"])["record_count"],
        8
    );
    let sources = stdout(&pchronicle(&["ls", "--sources", wh.to_str().unwrap()]));
    assert!(!sources.contains(".versions"), "{sources}");
}

/// A name in `.versions` that is not a version the leaf keeps, a tag name
/// that tries to leave, and a version cleaned up are refused or gone,
/// never read.
#[test]
fn names_in_a_leafs_past_that_are_not_there_are_refused() {
    let w = Warehouse::new();
    let dest = five_versions(&w);
    let leaf = dest.to_str().unwrap();
    let fails = |path: String| {
        let out = pchronicle(&["stats", &path, "--json"]);
        assert!(!out.status.success(), "{path} was read");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for name in ["abc", "03", "+3", "6", "1.0", " 1"] {
        let err = fails(format!("{leaf}/.versions/{name}"));
        assert!(
            err.contains("PCHRONICLE_VERSION_NOT_FOUND"),
            "{name}: {err}"
        );
    }
    assert!(fails(format!("{leaf}/.tags/nope")).contains("PCHRONICLE_TAG_NOT_FOUND"));
    for escape in [".tags/..", ".tags/../..", ".versions/../x", ".tags/a/b"] {
        let err = fails(format!("{leaf}/{escape}"));
        assert!(err.contains("PCHRONICLE_"), "{escape}: {err}");
    }
    // Nothing inside a version.
    let err = fails(format!("{leaf}/.versions/3/.versions/2"));
    assert!(err.contains("PCHRONICLE_PATH_NOT_FOUND"), "{err}");
    // A version Lance cleaned up (its manifest removed) leaves the listing.
    let manifests = std::fs::read_dir(dest.join("_versions")).unwrap();
    let second = manifests
        .filter_map(|e| e.ok())
        .find(|e| {
            pchronicle::store::compact::versions::version_of(e.file_name().to_str().unwrap())
                == Some(2)
        })
        .unwrap();
    std::fs::remove_file(second.path()).unwrap();
    let listed = json(&["ls", &format!("{leaf}/.versions"), "--json"]);
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1", "3", "4", "5"]);
    assert!(fails(format!("{leaf}/.versions/2")).contains("PCHRONICLE_VERSION_NOT_FOUND"));
    assert_eq!(
        json(&["stats", &format!("{leaf}/.versions/4"), "--json"])["record_count"],
        6
    );
}

/// A storyline leaf's generations are its versions, by name, oldest
/// first; it has no tags; a leaf keeping more than the listing bound
/// lists the newest, marked truncated.
#[test]
fn a_storyline_leafs_generations_are_its_versions() {
    let w = Warehouse::new();
    w.storyline("wh/story", 4);
    let leaf = w.abs("wh/story");
    let leaf = leaf.to_str().unwrap();
    let listed = json(&["ls", &format!("{leaf}/.versions"), "--json"]);
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"g1") && names.contains(&"g2"), "{names:?}");
    let g1 = json(&["stats", &format!("{leaf}/.versions/g1"), "--json"]);
    assert_eq!(g1["record_count"], 99);
    assert_eq!(
        json(&["stats", leaf, "--version", "g1", "--json"])["record_count"],
        99
    );
    let g2 = stdout(&pchronicle(&["cat", &format!("{leaf}/.versions/g2")]));
    assert_eq!(g2, stdout(&pchronicle(&["cat", leaf])));
    let out = pchronicle(&["stats", &format!("{leaf}/.tags"), "--json"]);
    assert!(!out.status.success());
    for n in 0..(pchronicle::catalog::REVISIONS_LISTED + 3) {
        std::fs::create_dir(w.abs(&format!("wh/story/generations/x{n:05}"))).unwrap();
    }
    let listed = json(&["ls", &format!("{leaf}/.versions"), "--json"]);
    assert_eq!(listed["truncated"], true);
    assert_eq!(
        listed["entries"].as_array().unwrap().len(),
        pchronicle::catalog::REVISIONS_LISTED
    );
}
