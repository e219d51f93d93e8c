//! Sidecar point-lookup indexes: lookups agree with a full scan, the three
//! staleness outcomes, and coded refusals.

use std::fs;
use std::io::Write;
use std::path::Path;

use pchronicle::error::ErrorCode;
use pchronicle::sidecar::build::{build, index_path};
use pchronicle::sidecar::lookup::{cohort_hashes, lookup, verify};

use crate::support::Warehouse;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn key(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// A cohort of `n` records: sessions from a small set, turns, flags, some
/// records lacking a field or holding null, a few torn ones.
fn cohort(n: usize, packed: bool, seed: u64) -> String {
    let mut rng = Rng(seed);
    let mut out = String::new();
    if packed {
        out.push('\u{1e}');
    }
    for i in 0..n {
        let session = format!("s-{}", rng.next() % 7);
        let turn = (rng.next() % 5) as i64 - 1;
        let flag = rng.next().is_multiple_of(2);
        let record = match rng.next() % 20 {
            0 => format!(r#"{{"id":{i},"turn":{turn}}}"#),
            1 => format!(r#"{{"id":{i},"session":null,"turn":{turn}}}"#),
            2 => format!(r#"{{"id":{i},"session":"{session}","tu"#),
            3 => "[1,2,3]".to_string(),
            _ => format!(
                r#"{{"id":{i},"session":"{session}","turn":{turn},"flag":{flag},"text":"record {i}"}}"#
            ),
        };
        out.push_str(&record);
        out.push(if packed { '\u{1e}' } else { '\n' });
    }
    out
}

/// The records a full scan finds with these field values, in file order.
fn scan(text: &str, fields: &[&str], values: &[serde_json::Value]) -> Vec<Vec<u8>> {
    text.split(['\n', '\u{1e}'])
        .filter(|s| !s.trim().is_empty())
        .filter(|s| {
            let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(s)
            else {
                return false;
            };
            fields
                .iter()
                .zip(values)
                .all(|(f, v)| map.get(*f) == Some(v))
        })
        .map(|s| s.trim().as_bytes().to_vec())
        .collect()
}

#[test]
fn lookups_return_exactly_what_a_full_scan_finds() {
    let wh = Warehouse::new();
    for (name, packed, seed) in [
        ("line.jsonl", false, 11),
        ("packed.jsonseq", true, 23),
        ("more.ndjson", false, 37),
    ] {
        let text = cohort(3_000, packed, seed);
        wh.file(name, &text);
        let path = wh.abs(name);
        for fields in [
            &["session"][..],
            &["session", "turn"],
            &["flag"],
            &["turn", "session"],
        ] {
            let report = build(&path, &key(fields)).unwrap();
            assert_eq!(
                report.rows as usize,
                text.split(['\n', '\u{1e}'])
                    .filter(|s| !s.trim().is_empty())
                    .count()
            );
            assert!(report.failed > 0 && report.unkeyed > 0, "{report:?}");
            let mut combos = 0;
            for s in 0..8 {
                for t in -1..5 {
                    for f in [true, false] {
                        let (values, texts): (Vec<serde_json::Value>, Vec<String>) = fields
                            .iter()
                            .map(|field| match *field {
                                "session" => {
                                    (serde_json::json!(format!("s-{s}")), format!("s-{s}"))
                                }
                                "turn" => (serde_json::json!(t), t.to_string()),
                                _ => (serde_json::json!(f), f.to_string()),
                            })
                            .unzip();
                        let found = lookup(&path, &key(fields), &texts).unwrap();
                        assert_eq!(
                            found,
                            scan(&text, fields, &values),
                            "{name} {fields:?} = {texts:?}"
                        );
                        combos += usize::from(!found.is_empty());
                    }
                }
            }
            assert!(
                combos > 1,
                "{name} {fields:?}: the cohort should hit several keys"
            );
        }
    }
}

#[test]
fn staleness_has_three_outcomes_and_verify_always_hashes() {
    let wh = Warehouse::new();
    let text = cohort(500, false, 5);
    wh.file("c.jsonl", &text);
    let path = wh.abs("c.jsonl");
    let k = key(&["session"]);
    build(&path, &k).unwrap();
    let value = ["s-3".to_string()];
    let expected = lookup(&path, &k, &value).unwrap();
    assert!(!expected.is_empty());

    // Size and mtime equal: served without hashing.
    let hashes = cohort_hashes();
    for _ in 0..5 {
        assert_eq!(lookup(&path, &k, &value).unwrap(), expected);
    }
    assert_eq!(
        cohort_hashes(),
        hashes,
        "an unchanged cohort is never hashed"
    );

    // Same size and bytes, new mtime: hashed once (memoised), served.
    let later =
        fs::metadata(&path).unwrap().modified().unwrap() + std::time::Duration::from_secs(5);
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(later)
        .unwrap();
    assert_eq!(lookup(&path, &k, &value).unwrap(), expected);
    assert_eq!(lookup(&path, &k, &value).unwrap(), expected);
    assert_eq!(cohort_hashes(), hashes + 1, "hashed once for the new mtime");

    // verify always hashes, and never uses the memo.
    verify(&path, &k).unwrap();
    verify(&path, &k).unwrap();
    assert_eq!(cohort_hashes(), hashes + 3);

    // Same size, new mtime, different bytes: refused.
    let changed = text.replacen("record", "RECORD", 1);
    assert_eq!(changed.len(), text.len());
    fs::write(&path, &changed).unwrap();
    let err = lookup(&path, &k, &value).unwrap_err();
    assert_eq!(err.code, ErrorCode::IndexStale);
    assert!(
        err.message.contains("pchronicle index build"),
        "{}",
        err.message
    );

    // Same size and same mtime, different bytes: lookup cannot tell; verify can.
    build(&path, &k).unwrap();
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    fs::write(&path, &text).unwrap();
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert!(lookup(&path, &k, &value).is_ok());
    assert_eq!(verify(&path, &k).unwrap_err().code, ErrorCode::IndexStale);

    // A different size: stale at once, without hashing.
    let hashes = cohort_hashes();
    fs::write(&path, format!("{text}{{\"session\":\"s-3\"}}\n")).unwrap();
    assert_eq!(
        lookup(&path, &k, &value).unwrap_err().code,
        ErrorCode::IndexStale
    );
    assert_eq!(cohort_hashes(), hashes);
}

#[test]
fn unusable_keys_values_and_files_are_refused_with_codes() {
    let wh = Warehouse::new();
    wh.file("arr.jsonl", "{\"k\":\"a\"}\n{\"k\":[1]}\n");
    wh.file("mixed.jsonl", "{\"k\":\"a\"}\n{\"k\":1}\n");
    wh.file("frac.jsonl", "{\"k\":1.5}\n");
    wh.file("doc.json", "[{\"k\":1}]");
    wh.file("ok.jsonl", "{\"k\":1,\"b\":true}\n{\"k\":2,\"b\":false}\n");
    let k = key(&["k"]);
    for name in ["arr.jsonl", "mixed.jsonl", "frac.jsonl"] {
        assert_eq!(
            build(&wh.abs(name), &k).unwrap_err().code,
            ErrorCode::IndexKeyUnkeyable,
            "{name}"
        );
        assert!(!index_path(&wh.abs(name), &k).exists());
    }
    assert_eq!(
        build(&wh.abs("doc.json"), &k).unwrap_err().code,
        ErrorCode::IndexCohortUnsupported
    );
    let ok = wh.abs("ok.jsonl");
    assert_eq!(
        lookup(&ok, &k, &["1".into()]).unwrap_err().code,
        ErrorCode::IndexMissing
    );
    build(&ok, &k).unwrap();
    assert_eq!(
        lookup(&ok, &k, &["1".into()]).unwrap(),
        [b"{\"k\":1,\"b\":true}".to_vec()]
    );
    assert_eq!(
        lookup(&ok, &k, &["one".into()]).unwrap_err().code,
        ErrorCode::LookupKeyMismatch
    );
    assert_eq!(
        lookup(&ok, &k, &["1".into(), "2".into()]).unwrap_err().code,
        ErrorCode::LookupKeyMismatch
    );
    let kb = key(&["b"]);
    build(&ok, &kb).unwrap();
    assert_eq!(lookup(&ok, &kb, &["false".into()]).unwrap().len(), 1);
    assert_eq!(
        lookup(&ok, &kb, &["no".into()]).unwrap_err().code,
        ErrorCode::LookupKeyMismatch
    );
    // A damaged index is reported, never a panic.
    let idx = index_path(&ok, &k);
    let bytes = fs::read(&idx).unwrap();
    fs::write(&idx, &bytes[..bytes.len() - 5]).unwrap();
    assert_eq!(
        lookup(&ok, &k, &["1".into()]).unwrap_err().code,
        ErrorCode::IndexCorrupt
    );
    // Index files are never record sources.
    let stats = wh.catalog().stats(Path::new("")).unwrap();
    assert_eq!(
        stats.files, 5,
        "the four .jsonl files and doc.json, no .idx"
    );
}

#[test]
fn the_cli_builds_lists_looks_up_verifies_and_drops() {
    use crate::support::{pchronicle, stdout};
    let wh = Warehouse::new();
    wh.file("c.jsonl", cohort(400, false, 3));
    let c = wh.abs("c.jsonl");
    let c = c.to_str().unwrap();
    let built: serde_json::Value = serde_json::from_str(&stdout(&pchronicle(&[
        "index",
        "build",
        c,
        "--key",
        "session,turn",
        "--json",
    ])))
    .unwrap();
    assert_eq!(built["key"], serde_json::json!(["session", "turn"]));
    assert_eq!(built["types"], serde_json::json!(["string", "integer"]));
    let listed: serde_json::Value =
        serde_json::from_str(&stdout(&pchronicle(&["index", "list", c, "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let inline = stdout(&pchronicle(&[
        "lookup",
        c,
        "--key",
        "session=s-2",
        "--key",
        "turn=1",
    ]));
    let separate = stdout(&pchronicle(&[
        "lookup",
        c,
        "--key",
        "session,turn",
        "--value",
        "s-2,1",
    ]));
    assert_eq!(inline, separate);
    assert!(!inline.is_empty());
    stdout(&pchronicle(&["index", "verify", c]));
    stdout(&pchronicle(&["index", "drop", c, "--key", "session,turn"]));
    assert!(
        !wh.abs("c.jsonl.indexes.json").exists(),
        "the last entry removes the manifest"
    );
    let out = pchronicle(&["lookup", c, "--key", "session=s-2", "--key", "turn=1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_INDEX_MISSING"));
    wh.file("c.jsonl.indexes.json", "{not json");
    let out = pchronicle(&["index", "list", c]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_INDEX_MANIFEST_INVALID"));
}

fn set_mtime_later(path: &Path, secs: u64) {
    let later =
        fs::metadata(path).unwrap().modified().unwrap() + std::time::Duration::from_secs(secs);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(later)
        .unwrap();
}

/// (index path, state) of what `stats PATH` reports.
fn index_states(wh: &Warehouse, rel: &str) -> Vec<(String, String)> {
    let stats = wh.catalog().stats(Path::new(rel)).unwrap();
    stats
        .indexes
        .iter()
        .map(|i| (i.index.clone(), i.state.as_str().to_string()))
        .collect()
}

#[test]
fn stats_list_the_indexes_under_a_path_with_their_state() {
    use pchronicle::sidecar::build_index;
    let wh = Warehouse::new();
    let id = key(&["id"]);
    let hash = pchronicle::sidecar::build::key_hash(&id);
    for name in [
        "a/fresh.jsonl",
        "a/grown.jsonl",
        "a/touched.jsonl",
        "b/gone.jsonl",
        "b/orphan.jsonl",
        "leaf/inner.jsonl",
    ] {
        wh.file(name, "{\"id\":1}\n{\"id\":2}\n");
        build_index(&wh.abs(name), &id).unwrap();
    }
    wh.storyline("leaf", 1);
    fs::OpenOptions::new()
        .append(true)
        .open(wh.abs("a/grown.jsonl"))
        .unwrap()
        .write_all(b"{\"id\":3}\n")
        .unwrap();
    set_mtime_later(&wh.abs("a/touched.jsonl"), 5);
    fs::remove_file(index_path(&wh.abs("b/gone.jsonl"), &id)).unwrap();
    fs::remove_file(wh.abs("b/orphan.jsonl")).unwrap();
    wh.file("b/bad.jsonl", "{}\n")
        .file(&format!("b/bad.jsonl.{hash}.idx"), "PCHRNIDX\x03 too short");

    let idx = |cohort: &str| format!("{cohort}.{hash}.idx");
    let expect = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(i, s)| (i.to_string(), s.to_string()))
            .collect()
    };
    assert_eq!(
        index_states(&wh, ""),
        expect(&[
            (&idx("a/fresh.jsonl"), "fresh"),
            (&idx("a/grown.jsonl"), "stale"),
            (&idx("a/touched.jsonl"), "unverified"),
            (&idx("b/bad.jsonl"), "corrupt"),
            (&idx("b/gone.jsonl"), "missing"),
            (&idx("b/orphan.jsonl"), "orphaned"),
        ]),
        "the index inside the leaf is not under any walked directory"
    );

    // A lookup hashes the touched file once; its digest then decides.
    lookup(&wh.abs("a/touched.jsonl"), &id, &["1".to_string()]).unwrap();
    assert_eq!(
        index_states(&wh, "a"),
        expect(&[
            (&idx("fresh.jsonl"), "fresh"),
            (&idx("grown.jsonl"), "stale"),
            (&idx("touched.jsonl"), "fresh"),
        ])
    );

    // A record file's own stats list its indexes by name.
    let own = wh.catalog().stats(Path::new("a/fresh.jsonl")).unwrap();
    assert_eq!(own.indexes.len(), 1);
    assert_eq!(
        (own.indexes[0].file.as_str(), own.indexes[0].rows),
        (".", 2)
    );
    assert_eq!(own.indexes[0].index, idx("fresh.jsonl"));

    // Sidecars are never sources; a malformed manifest is a warning.
    wh.file("b/fresh.jsonl.indexes.json", "{not json")
        .file("b/fresh.jsonl", "{}\n");
    let stats = wh.catalog().stats(Path::new("b")).unwrap();
    assert_eq!(stats.files, 3, "bad, gone and fresh .jsonl");
    assert!(
        stats
            .warnings
            .iter()
            .any(|w| w.code == ErrorCode::IndexManifestInvalid && w.path == "fresh.jsonl"),
        "{:?}",
        stats.warnings
    );
    assert!(!stats.indexes.iter().any(|i| i.file == "fresh.jsonl"));
}

/// Two indexes of one file, one of them left out of the manifest (built
/// by another tool, or its entry lost).
fn two_indexes_one_unlisted(wh: &Warehouse) -> std::path::PathBuf {
    use pchronicle::sidecar::{build_index, manifest};
    wh.file("c.jsonl", cohort(200, false, 9));
    let c = wh.abs("c.jsonl");
    build_index(&c, &key(&["session", "turn"])).unwrap();
    build_index(&c, &key(&["flag"])).unwrap();
    let mut m = manifest::read(&c).unwrap().unwrap();
    m.indexes.retain(|e| e.key == key(&["flag"]));
    fs::write(
        pchronicle::sidecar::manifest_path(&c),
        serde_json::to_vec(&m).unwrap(),
    )
    .unwrap();
    c
}

#[test]
fn index_list_and_stats_show_the_union_of_manifest_and_index_files() {
    use pchronicle::sidecar::manifest;
    let wh = Warehouse::new();
    let c = two_indexes_one_unlisted(&wh);
    let keys: Vec<Vec<String>> = manifest::list(&c)
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, [key(&["flag"]), key(&["session", "turn"])]);
    let mut stats: Vec<String> = wh
        .catalog()
        .stats(Path::new(""))
        .unwrap()
        .indexes
        .iter()
        .map(|i| format!("{} {}", i.key.join(","), i.state.as_str()))
        .collect();
    stats.sort();
    assert_eq!(stats, ["flag fresh", "session,turn fresh"]);
}

#[test]
fn a_reordered_or_partial_key_is_a_key_mismatch() {
    let wh = Warehouse::new();
    let c = two_indexes_one_unlisted(&wh);
    let values = ["s-1".to_string(), "1".to_string()];
    for (fields, values) in [
        (key(&["turn", "session"]), &values[..]),
        (key(&["session"]), &values[..1]),
        (key(&["turn"]), &values[1..]),
    ] {
        let err = lookup(&c, &fields, values).unwrap_err();
        assert_eq!(err.code, ErrorCode::LookupKeyMismatch, "{fields:?}");
        assert!(err.message.contains("session,turn"), "{}", err.message);
    }
    assert_eq!(
        lookup(&c, &key(&["nothing"]), &values[..1])
            .unwrap_err()
            .code,
        ErrorCode::IndexMissing
    );
}

#[test]
fn building_over_a_malformed_manifest_refuses_and_keeps_it() {
    use pchronicle::sidecar::build_index;
    let wh = Warehouse::new();
    wh.file("c.jsonl", cohort(50, false, 2));
    let c = wh.abs("c.jsonl");
    build_index(&c, &key(&["session"])).unwrap();
    let manifest = pchronicle::sidecar::manifest_path(&c);
    fs::write(&manifest, "{\"schema\":1,\"indexes\":[").unwrap();
    let err = build_index(&c, &key(&["turn"])).unwrap_err();
    assert_eq!(err.code, ErrorCode::IndexManifestInvalid);
    assert_eq!(fs::read(&manifest).unwrap(), b"{\"schema\":1,\"indexes\":[");
    assert!(!index_path(&c, &key(&["turn"])).exists(), "nothing built");
}

#[test]
fn a_stale_manifest_is_repaired_by_build_or_drop_and_drop_prunes_orphans() {
    use pchronicle::sidecar::{build_index, drop_index, manifest};
    let wh = Warehouse::new();
    wh.file("c.jsonl", cohort(80, false, 4));
    let c = wh.abs("c.jsonl");
    let (s, t) = (key(&["session"]), key(&["turn"]));
    build_index(&c, &s).unwrap();
    build_index(&c, &t).unwrap();
    let stale = || manifest::list(&c).unwrap_err().code;
    // Repaired by building the missing index again.
    fs::remove_file(index_path(&c, &s)).unwrap();
    assert_eq!(stale(), ErrorCode::IndexManifestStale);
    build_index(&c, &s).unwrap();
    assert_eq!(manifest::list(&c).unwrap().len(), 2);
    // Repaired by dropping it: the orphaned entry is pruned.
    fs::remove_file(index_path(&c, &t)).unwrap();
    assert_eq!(stale(), ErrorCode::IndexManifestStale);
    drop_index(&c, &t).unwrap();
    let left = manifest::read(&c).unwrap().unwrap();
    assert_eq!(left.indexes.len(), 1);
    assert_eq!(left.indexes[0].key, s);
    assert_eq!(manifest::list(&c).unwrap().len(), 1);
    // Dropping what is neither in the manifest nor on disk is an error.
    assert_eq!(
        drop_index(&c, &t).unwrap_err().code,
        ErrorCode::IndexMissing
    );
}

#[test]
fn the_digest_memo_outlives_the_process() {
    use pchronicle::sidecar::lookup::forget_process_memo;
    let wh = Warehouse::new();
    wh.file("c.jsonl", cohort(300, false, 6));
    let c = wh.abs("c.jsonl");
    let k = key(&["session"]);
    build(&c, &k).unwrap();
    // Without a state directory above the file, a lookup creates none
    // (its memo goes to the user's cache directory).
    set_mtime_later(&c, 9);
    lookup(&c, &k, &["s-2".to_string()]).unwrap();
    assert!(!wh.abs(".pchronicle").exists());
    wh.dir(".pchronicle");
    set_mtime_later(&c, 7);
    let value = ["s-2".to_string()];
    let hashes = cohort_hashes();
    let expected = lookup(&c, &k, &value).unwrap();
    assert_eq!(cohort_hashes(), hashes + 1);
    // A new process knows nothing but what is on disk.
    forget_process_memo();
    assert_eq!(lookup(&c, &k, &value).unwrap(), expected);
    assert_eq!(cohort_hashes(), hashes + 1, "served from the memo on disk");
    // A memo for other bytes (another mtime) is not used.
    set_mtime_later(&c, 3);
    forget_process_memo();
    lookup(&c, &k, &value).unwrap();
    assert_eq!(cohort_hashes(), hashes + 2);
    // Two CLI processes: the second finds the first's memo.
    set_mtime_later(&c, 3);
    let path = c.to_str().unwrap();
    let memo_dir = wh.abs(".pchronicle/digests");
    let count = || fs::read_dir(&memo_dir).map_or(0, |d| d.count());
    let run = || {
        crate::support::stdout(&crate::support::pchronicle(&[
            "lookup",
            path,
            "--key",
            "session=s-2",
        ]))
    };
    let first = run();
    let memo = fs::read_dir(&memo_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let written = fs::metadata(&memo).unwrap().modified().unwrap();
    assert_eq!(run(), first);
    assert_eq!(
        fs::metadata(&memo).unwrap().modified().unwrap(),
        written,
        "not hashed again"
    );
    assert_eq!(count(), 1);
}

#[test]
fn lookup_values_may_hold_commas_and_equals_signs() {
    use crate::support::{pchronicle, stdout};
    let wh = Warehouse::new();
    wh.file(
        "c.jsonl",
        "{\"who\":\"a,b\",\"n\":1}\n{\"who\":\"a\",\"n\":1}\n{\"who\":\"x=y,z\",\"n\":2}\n",
    );
    let c = wh.abs("c.jsonl");
    let c = c.to_str().unwrap();
    stdout(&pchronicle(&["index", "build", c, "--key", "who,n"]));
    stdout(&pchronicle(&["index", "build", c, "--key", "who"]));
    let one = |args: &[&str]| {
        let mut all = vec!["lookup", c];
        all.extend_from_slice(args);
        stdout(&pchronicle(&all))
    };
    assert_eq!(
        one(&["--key", "who=a,b", "--key", "n=1"]),
        "{\"who\":\"a,b\",\"n\":1}\n"
    );
    assert_eq!(
        one(&["--key", "who,n", "--value", "x=y,z", "--value", "2"]),
        "{\"who\":\"x=y,z\",\"n\":2}\n"
    );
    assert_eq!(
        one(&["--key", "who", "--value", "a,b"]),
        "{\"who\":\"a,b\",\"n\":1}\n"
    );
    assert_eq!(one(&["--key", "who=a"]), "{\"who\":\"a\",\"n\":1}\n");
    assert_eq!(
        one(&["--key", "who,n", "--value", "a,1"]),
        "{\"who\":\"a\",\"n\":1}\n"
    );
}
