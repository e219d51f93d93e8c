//! Bad input never panics: each malformed input gets its error code or the
//! documented fallback.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use pchronicle::catalog::{CatalogOptions, NodeKind, StatsOrigin};
use pchronicle::error::ErrorCode;

use crate::support::{Warehouse, pchronicle};

/// What a malformed input must produce.
enum Expect {
    /// A warning with this code at this path, and the answer still given.
    Warning(ErrorCode, &'static str),
    /// The record file `x` counts this many records, this many failed.
    Counts(u64, u64),
}

fn case(name: &str, build: impl Fn(&Warehouse), expect: Expect) {
    let w = Warehouse::new();
    build(&w);
    let catalog = w.catalog_with(CatalogOptions {
        max_entries: 50,
        ..CatalogOptions::default()
    });
    let listing = catalog
        .list(Path::new("."))
        .unwrap_or_else(|e| panic!("{name}: list failed: {e}"));
    let snapshot = catalog
        .open(Path::new("."))
        .unwrap_or_else(|e| panic!("{name}: open failed: {e}"));
    match expect {
        Expect::Warning(code, path) => {
            let found = listing
                .warnings
                .iter()
                .chain(&snapshot.warnings)
                .any(|w| w.code == code && w.path == path);
            assert!(
                found,
                "{name}: expected {code} at {path}, got {:?} / {:?}",
                listing.warnings, snapshot.warnings
            );
        }
        Expect::Counts(records, failed) => {
            let stats = snapshot.stats();
            assert_eq!(
                (stats.record_count, stats.failed_count),
                (records, failed),
                "{name}"
            );
        }
    }
}

const LEAF_HEAD: &str = "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n";

#[test]
fn malformed_inputs_get_a_code_or_the_fallback() {
    use Expect::*;
    let manifest = |text: &'static str| {
        move |w: &Warehouse| {
            w.storyline("s", 2).manifest("s", text);
        }
    };
    case(
        "manifest: not TOML",
        manifest("kind = = leaf"),
        Warning(ErrorCode::ManifestParse, "s/chronicle.manifest"),
    );
    case(
        "manifest: binary",
        |w| {
            w.storyline("s", 2)
                .file("s/chronicle.manifest", [0xff, 0x00, 0xfe, 0x80]);
        },
        Warning(ErrorCode::ManifestParse, "s/chronicle.manifest"),
    );
    case(
        "manifest: schema_version 2",
        manifest("schema_version = 2\nkind = \"leaf\"\nformat = \"storyline/v1\""),
        Warning(ErrorCode::ManifestVersion, "s/chronicle.manifest"),
    );
    case(
        "manifest: no schema_version",
        manifest("kind = \"leaf\"\nformat = \"storyline/v1\""),
        Warning(ErrorCode::ManifestVersion, "s/chronicle.manifest"),
    );
    case(
        "manifest: unknown kind",
        manifest("schema_version = 1\nkind = \"forest\""),
        Warning(ErrorCode::ManifestKind, "s/chronicle.manifest"),
    );
    case(
        "manifest: leaf without format",
        manifest("schema_version = 1\nkind = \"leaf\""),
        Warning(ErrorCode::ManifestFormatMissing, "s/chronicle.manifest"),
    );
    case(
        "manifest: negative count",
        manifest(concat!(
            "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n",
            "[stats]\nrecord_count = -5\n"
        )),
        Warning(ErrorCode::ManifestParse, "s/chronicle.manifest"),
    );
    case(
        "manifest: stats is a string",
        manifest(concat!(
            "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n",
            "stats = \"many\"\n"
        )),
        Warning(ErrorCode::ManifestParse, "s/chronicle.manifest"),
    );
    case(
        "manifest: is a directory",
        |w| {
            w.dir("d/chronicle.manifest");
        },
        Warning(ErrorCode::ManifestUnreadable, "d/chronicle.manifest"),
    );
    case(
        "manifest: huge",
        |w| {
            let mut text = String::from(LEAF_HEAD);
            text.push_str(&"# padding\n".repeat(200_000));
            text.push_str("[stats]\nrecord_count = \"x\"\n");
            w.storyline("s", 2).manifest("s", &text);
        },
        // Past the 1 MiB cap the manifest is not read at all.
        Warning(ErrorCode::MetadataTooLarge, "s/chronicle.manifest"),
    );
    case(
        "CURRENT: empty",
        |w| {
            w.storyline("s", 2).file("s/CURRENT", "");
        },
        Warning(ErrorCode::StorylineCurrentInvalid, "s/CURRENT"),
    );
    case(
        "CURRENT: climbs out",
        |w| {
            w.storyline("s", 2).file("s/CURRENT", "../../etc\n");
        },
        Warning(ErrorCode::StorylineCurrentInvalid, "s/CURRENT"),
    );
    case(
        "CURRENT: binary",
        |w| {
            w.storyline("s", 2).file("s/CURRENT", [0xffu8, 0xfe, 0x00]);
        },
        Warning(ErrorCode::StorylineCurrentInvalid, "s/CURRENT"),
    );
    case(
        "record file: binary garbage",
        |w| {
            w.file(
                "x.jsonl",
                (0..=255u8).cycle().take(10_000).collect::<Vec<_>>(),
            );
        },
        Counts(80, 80),
    );
    case(
        "record file: invalid UTF-8 inside a string",
        |w| {
            w.file("x.jsonl", b"{\"a\":\"\xff\xfe\"}\n{\"a\":1}\n");
        },
        Counts(2, 1),
    );
    // JSON sets no depth limit: 100,000 levels are a valid record, and
    // reading it must not exhaust the stack; an unclosed one is torn.
    case(
        "record file: nested 100,000 deep",
        |w| {
            w.file(
                "x.jsonl",
                format!(
                    "{}{}\n{{}}\n{}\n",
                    "[".repeat(100_000),
                    "]".repeat(100_000),
                    "{\"a\":".repeat(100_000)
                ),
            );
        },
        Counts(3, 1),
    );
    case(
        "record file: only separators",
        |w| {
            w.file("x.jsonseq", "\u{1e}\n\u{1e}\u{1e}\n\n");
        },
        Counts(0, 0),
    );
    case(
        "record file: NUL bytes",
        |w| {
            w.file("x.ndjson", vec![0u8; 4096]);
        },
        Counts(1, 1),
    );
    case(
        "json document: truncated",
        |w| {
            w.file("x.json", "[{\"a\":1},{\"b\":");
        },
        Counts(2, 1),
    );
    case(
        "json document: empty file",
        |w| {
            w.file("x.json", "");
        },
        Counts(0, 0),
    );
    case(
        "name: not UTF-8",
        |w| {
            let name = OsStr::from_bytes(b"bad\xff.jsonl");
            std::fs::write(w.path().join(name), "{}\n").unwrap();
        },
        Warning(ErrorCode::NameNotUtf8, "."),
    );
    case(
        "symlink loop",
        |w| {
            w.symlink("loop_b", "loop_a")
                .symlink("loop_a", "loop_b")
                .symlink(".", "self");
        },
        Counts(0, 0),
    );
    case(
        "directory over max_entries",
        |w| {
            for i in 0..60 {
                w.file(&format!("many/{i:03}.jsonl"), "{}\n");
            }
        },
        Warning(ErrorCode::BoundReached, "many"),
    );
}

/// The obvious, slow way to count: split everything in memory, trim, parse
/// each segment into a `serde_json::Value`.
fn reference_count(bytes: &[u8]) -> (u64, u64) {
    let (mut records, mut failed) = (0, 0);
    for segment in bytes.split(|b| *b == b'\n' || *b == 0x1e) {
        let segment = segment.trim_ascii();
        if segment.is_empty() {
            continue;
        }
        records += 1;
        if serde_json::from_slice::<serde_json::Value>(segment).is_err() {
            failed += 1;
        }
    }
    (records, failed)
}

#[test]
fn counting_matches_a_naive_reference() {
    let mut inputs: Vec<Vec<u8>> = vec![(0..=255u8).cycle().take(10_000).collect()];
    // A deterministic pseudo-random mix of valid records, torn records and
    // noise, in both framings.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20 {
        let mut input = Vec::new();
        for i in 0..500 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let record = format!(
                "{{\"i\":{i},\"ts\":\"2026-01-01T00:00:{:02}Z\",\"v\":[{seed}]}}",
                i % 60
            );
            match seed % 7 {
                0 => input.extend_from_slice(&record.as_bytes()[..(seed as usize % record.len())]),
                1 => input.extend_from_slice(&seed.to_le_bytes()),
                _ => input.extend_from_slice(record.as_bytes()),
            }
            input.push(if seed.is_multiple_of(3) { 0x1e } else { b'\n' });
        }
        inputs.push(input);
    }
    for input in inputs {
        let stats = pchronicle::records::count_segments(&input[..]).unwrap();
        assert_eq!(
            (stats.record_count, stats.failed_count),
            reference_count(&input)
        );
    }
}

#[test]
fn unknown_format_leaf_without_stats_is_unavailable() {
    let w = Warehouse::new();
    w.manifest(
        "x",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"future/v9\"\n",
    );
    let listing = w.catalog().list(Path::new(".")).unwrap();
    let pchronicle::catalog::Entry::Dataset { preview, .. } = &listing.entries[0] else {
        panic!()
    };
    assert_eq!(preview.stats_origin, StatsOrigin::Unavailable);
    assert_eq!(
        w.catalog().kind_of(Path::new("x")).unwrap(),
        NodeKind::Dataset
    );
}

#[test]
fn cli_reports_codes_and_exit_statuses() {
    let missing = pchronicle(&["ls", "/definitely/not/here"]);
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.starts_with("error[PCHRONICLE_PATH_NOT_FOUND]: /definitely/not/here"),
        "{stderr}"
    );
    assert!(stderr.contains("fix: "), "{stderr}");

    let usage = pchronicle(&["ls", "--no-such-flag"]);
    assert_eq!(usage.status.code(), Some(2));

    let unknown = pchronicle(&["errors", "PCHRONICLE_NOPE"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("PCHRONICLE_UNKNOWN_CODE"));

    let all = pchronicle(&["errors"]);
    let text = String::from_utf8(all.stdout).unwrap();
    for code in ErrorCode::ALL {
        assert!(
            text.contains(code.as_str()),
            "{code} missing from `pchronicle errors`"
        );
        assert!(text.contains(code.fixup()), "{code} fix-up missing");
    }
    let one = pchronicle(&["errors", "pchronicle_manifest_parse"]);
    assert!(
        String::from_utf8(one.stdout)
            .unwrap()
            .starts_with("PCHRONICLE_MANIFEST_PARSE\n")
    );
}

#[test]
fn cli_refuses_paths_inside_a_leaf() {
    let w = Warehouse::new();
    w.storyline("s", 2);
    for rel in [
        "s/generations",
        "s/generations/g2/part-0.jsonl",
        "s/CURRENT",
    ] {
        let out = pchronicle(&["ls", w.abs(rel).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{rel}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("error[PCHRONICLE_PATH_NOT_FOUND]"),
            "{rel}"
        );
    }
    assert_eq!(
        pchronicle(&["ls", w.abs("s").to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn warnings_do_not_fail_the_cli() {
    let w = Warehouse::new();
    w.storyline("s", 2).manifest("s", "not toml at all [");
    let out = pchronicle(&["stats", "--no-repair", w.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("warning[PCHRONICLE_MANIFEST_PARSE]: s/chronicle.manifest")
    );
}
