//! The exact JSON the CLI prints (and the mount will serve), pinned on a
//! warehouse built here. docs/cli.md documents these shapes.

use serde_json::{Value, json};

use crate::support::{Warehouse, pchronicle, stdout};

fn shaped_warehouse() -> Warehouse {
    let w = Warehouse::new();
    w.file(
        "p=1/a.jsonl",
        "{\"ts\":\"2026-01-01T00:00:00Z\"}\n{\"torn\n",
    )
    .file("p=1/b.txt", "hello")
    .storyline("s", 2);
    pchronicle::sidecar::build_index(&w.abs("p=1/a.jsonl"), &["ts".to_string()]).unwrap();
    // Make the leaf's manifest current before the CLI looks.
    w.catalog().open(std::path::Path::new(".")).unwrap();
    w
}

fn cli_json(args: &[&str]) -> Value {
    serde_json::from_str(&stdout(&pchronicle(args))).unwrap()
}

#[test]
fn ls_json_shape() {
    let w = shaped_warehouse();
    let root = w.path().to_str().unwrap();
    let b_size = 5;
    assert_eq!(
        cli_json(&["ls", "--json", root]),
        json!({
            "kind": "directory",
            "entries": [
                {"kind": "directory", "name": "p=1"},
                {
                    "kind": "dataset", "name": "s", "format": "storyline/v1",
                    "record_count": 2, "failed_count": 0,
                    "min_timestamp": "2026-01-01T00:00:00Z", "max_timestamp": "2026-01-01T00:00:01Z",
                    "fingerprint": "storyline:generation:g2", "trusted": true, "stats_origin": "manifest"
                }
            ],
            "truncated": false,
            "warnings": []
        })
    );
    assert_eq!(
        cli_json(&["ls", "--json", &format!("{root}/p=1")]),
        json!({
            "kind": "directory",
            "entries": [
                {"kind": "file", "name": "a.jsonl", "size": 37, "format": "jsonl"},
                // Sidecars are plain files, never record sources.
                {"kind": "file", "name": "a.jsonl.44ad63f60af0f6db.idx", "size": 153, "format": null},
                {"kind": "file", "name": "a.jsonl.indexes.json", "size": 248, "format": null},
                {"kind": "file", "name": "b.txt", "size": b_size, "format": null}
            ],
            "truncated": false,
            "warnings": []
        })
    );
}

#[test]
fn sources_json_shape() {
    let w = shaped_warehouse();
    let out = stdout(&pchronicle(&[
        "ls",
        "--sources",
        "--json",
        w.path().to_str().unwrap(),
    ]));
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mtime = std::fs::metadata(w.abs("p=1/a.jsonl")).unwrap();
    let mtime_ns = {
        use std::os::unix::fs::MetadataExt;
        mtime.mtime() * 1_000_000_000 + mtime.mtime_nsec()
    };
    assert_eq!(
        lines,
        [
            json!({
                "_file_": "p=1/a.jsonl", "kind": "file", "format": "jsonl",
                "record_count": 2, "failed_count": 1,
                "min_timestamp": "2026-01-01T00:00:00Z", "max_timestamp": "2026-01-01T00:00:00Z",
                "fingerprint": format!("file:37:{mtime_ns}"), "trusted": true, "stats_origin": "scan",
                "size": 37, "path_attrs": {"p": "1"}
            }),
            json!({
                "_file_": "s", "kind": "dataset", "format": "storyline/v1",
                "record_count": 2, "failed_count": 0,
                "min_timestamp": "2026-01-01T00:00:00Z", "max_timestamp": "2026-01-01T00:00:01Z",
                "fingerprint": "storyline:generation:g2", "trusted": true, "stats_origin": "manifest",
                "size": null, "path_attrs": {}
            }),
        ]
    );
}

#[test]
fn stats_json_shape() {
    let w = shaped_warehouse();
    assert_eq!(
        cli_json(&[
            "stats",
            "--json",
            "--max-files",
            "1",
            w.path().to_str().unwrap()
        ]),
        json!({
            "kind": "directory", "format": null,
            "sources": 1, "datasets": 0, "files": 1,
            "record_count": 2, "failed_count": 1,
            "min_timestamp": "2026-01-01T00:00:00Z", "max_timestamp": "2026-01-01T00:00:00Z",
            "untrusted_sources": 0, "unreadable_sources": 0,
            "counting_sources": 0, "counting": [],
            "formats": {"jsonl": {"sources": 1, "record_count": 2, "failed_count": 1}},
            "indexes": [
                {"file": "p=1/a.jsonl", "index": "p=1/a.jsonl.44ad63f60af0f6db.idx",
                 "key": ["ts"], "types": ["string"], "rows": 2, "state": "fresh"}
            ],
            "truncated": true,
            "warnings": [
                {"code": "PCHRONICLE_BOUND_REACHED", "path": ".", "message": "stopped at max_files = 1"}
            ]
        })
    );
}
