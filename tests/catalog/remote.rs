//! Remote warehouses (`s3://`) against a local S3 server: the same bytes
//! out as for a local copy of the same tree, bounded requests, no writes,
//! and coded failures when the store fails.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::s3::{Fault, S3Server};
use crate::support::jsonl;

/// Runs `pchronicle` against `endpoint`.
fn remote(endpoint: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pchronicle"));
    command
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("AWS_PROFILE");
    for (key, value) in S3Server::env_for(endpoint) {
        command.env(key, value);
    }
    // No profile files of whoever runs the tests.
    command.env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent");
    command.env("AWS_CONFIG_FILE", "/nonexistent");
    command.output().expect("pchronicle runs")
}

fn out(output: &Output) -> Vec<u8> {
    assert!(
        output.status.success(),
        "pchronicle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout.clone()
}

/// Writes `bytes` at `rel` below `root`, making the directories on the way.
fn write_below(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A tree with every leaf kind and some awkward names.
pub(crate) fn generated(root: &Path) {
    let w = |rel: &str, bytes: &[u8]| write_below(root, rel, bytes);
    w("loose/a.jsonl", jsonl(7, 1_767_225_600).as_bytes());
    w(
        "loose/with space é.ndjson",
        jsonl(3, 1_767_225_700).as_bytes(),
    );
    w(
        "loose/per%cent#hash.jsonl",
        jsonl(2, 1_767_225_800).as_bytes(),
    );
    w("loose/empty.jsonl", b"");
    w("loose/cut.jsonl", b"{\"ts\":1}\n{\"ts\":2");
    w("loose/doc.json", b"[{\"ts\":1},{\"ts\":2},{\"ts\":3}]");
    w("loose/notes.txt", b"not records");
    w(
        "date=2026-01-01/agent=x/s.jsonl",
        jsonl(4, 1_767_225_600).as_bytes(),
    );
    w(
        "branch/chronicle.manifest",
        b"schema_version = 1\nkind = \"branch\"\n",
    );
    w("branch/story/CURRENT", b"g2\n");
    w(
        "branch/story/generations/g1/old.jsonl",
        jsonl(9, 0).as_bytes(),
    );
    w(
        "branch/story/generations/g2/part-0.jsonl",
        jsonl(5, 1_767_225_600).as_bytes(),
    );
    w("deep/a/b/c/d.jsonl", jsonl(1, 1_767_225_600).as_bytes());
    let source = root.join("../import.jsonl");
    std::fs::write(&source, jsonl(25, 1_767_225_600)).unwrap();
    let dest = root.join("branch/compact");
    out(&crate::support::pchronicle(&[
        "import",
        source.to_str().unwrap(),
        dest.to_str().unwrap(),
    ]));
    // Leaf manifests written by a local walk's repair, so that both sides
    // hold the same files (nothing is ever repaired remotely).
    out(&crate::support::pchronicle(&[
        "stats",
        root.to_str().unwrap(),
    ]));
}

/// The tree uploaded under `prefix` and its local copy, times in step.
pub(crate) fn both(
    server: &S3Server,
    bucket: &str,
    prefix: &str,
    build: impl Fn(&Path),
) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wh");
    std::fs::create_dir(&root).unwrap();
    build(&root);
    server.mirror(&root, bucket, prefix);
    tmp
}

fn compare(server: &S3Server, local: &Path, url: &str, rels: &[&str]) {
    let commands: &[&[&str]] = &[
        &["ls"],
        &["ls", "--json"],
        &["ls", "--sources"],
        &["stats"],
        &["stats", "--json"],
        &["cat"],
    ];
    for rel in rels {
        for command in commands {
            let at = |root: &str| {
                let path = if rel.is_empty() {
                    root.to_string()
                } else {
                    format!("{root}/{rel}")
                };
                let mut args = command.to_vec();
                args.push(&path);
                remote(&server.endpoint(), &args)
            };
            let (local_out, remote_out) = (at(local.to_str().unwrap()), at(url));
            assert_eq!(
                String::from_utf8_lossy(&out(&remote_out)),
                String::from_utf8_lossy(&out(&local_out)),
                "{command:?} {rel:?}"
            );
        }
    }
    let sql = "select _file_, count(*) as n, sum(cast(failed as int)) as f from records group by 1 order by 1";
    assert_eq!(
        out(&remote(&server.endpoint(), &["query", url, sql])),
        out(&remote(
            &server.endpoint(),
            &["query", local.to_str().unwrap(), sql]
        )),
    );
    // The `sources` table asks the catalog from inside the query's runtime.
    let sql = "select _file_, kind, record_count, fingerprint from sources order by 1";
    let local_sources = remote(&server.endpoint(), &["query", local.to_str().unwrap(), sql]);
    assert_eq!(
        out(&remote(&server.endpoint(), &["query", url, sql])),
        out(&local_sources)
    );
}

#[test]
fn a_remote_warehouse_answers_byte_for_byte_as_its_local_copy() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("equal");
    let demo = both(&server, "equal", "demo/main", |root| {
        out(&crate::support::pchronicle(&[
            "demo",
            root.to_str().unwrap(),
        ]));
    });
    compare(
        &server,
        &demo.path().join("wh"),
        "s3://equal/demo/main",
        &[
            "",
            "team",
            "team/codex_jsonl",
            "team/planner",
            "sessions",
            "sessions/agent-old.jsonl",
            "runs",
        ],
    );
    let generated_copy = both(&server, "equal", "gen", generated);
    // A "folder" marker object, as consoles create, is no file.
    server.put("equal", "gen/loose/", b"");
    compare(
        &server,
        &generated_copy.path().join("wh"),
        "s3://equal/gen",
        &[
            "",
            "loose",
            "loose/with space é.ndjson",
            "loose/per%cent#hash.jsonl",
            "branch",
            "branch/compact",
            "deep/a",
        ],
    );
    // The test uploads past the proxy: every write it saw was pchronicle's.
    assert_eq!(server.counts().writes, 0, "nothing written by pchronicle");
}

#[test]
fn keys_that_are_not_paths_are_skipped_and_the_rest_answers_as_its_local_copy() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("hostile");
    let copy = both(&server, "hostile", "wh", |root| {
        let w = |rel: &str, bytes: &[u8]| write_below(root, rel, bytes);
        w("loose/a.jsonl", jsonl(3, 1_767_225_600).as_bytes());
        w("story/CURRENT", b"g1\n");
        w(
            "story/generations/g1/p.jsonl",
            jsonl(2, 1_767_225_600).as_bytes(),
        );
        // `wh/a//b.jsonl` below: `a/` is a directory whose only key
        // cannot be a path, so it shows empty.
        std::fs::create_dir(root.join("a")).unwrap();
        // Manifests, written by a local listing's repair.
        out(&crate::support::pchronicle(&["ls", root.to_str().unwrap()]));
    });
    // Keys anyone allowed to write may choose, each of which would fail
    // (or pass for another object in) the listing of its directory: at
    // the root of the warehouse, and inside a leaf.
    for key in [
        "wh/a//b.jsonl",
        "wh/ctl\u{1}name.jsonl",
        "wh/loose/./dot.jsonl",
        "wh/loose/../up.jsonl",
        "wh/story/generations/g1/tab\tname.jsonl",
        "/wh/loose/a.jsonl",
    ] {
        server.put("hostile", key, jsonl(1, 0).as_bytes());
    }
    compare(
        &server,
        &copy.path().join("wh"),
        "s3://hostile/wh",
        &["", "a", "loose", "story"],
    );
}

#[test]
fn a_directory_of_more_than_a_page_of_keys_lists_whole() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("pages");
    let n = 1_100;
    for i in 0..n {
        server.put("pages", &format!("wh/d/f-{i:04}.jsonl"), b"{\"ts\":1}\n");
    }
    let before = server.counts();
    let listing = out(&remote(&server.endpoint(), &["ls", "s3://pages/wh/d"]));
    let text = String::from_utf8_lossy(&listing);
    assert_eq!(text.lines().count(), n + 1, "{text}");
    assert!(text.contains("f-0000.jsonl") && text.contains("f-1099.jsonl"));
    // Two pages of `wh/d/`; `wh/` and the bucket's root, once each.
    assert_eq!(server.counts().lists - before.lists, 4);
}

#[test]
fn lookup_and_index_list_and_verify_answer_as_for_the_local_copy_reading_by_range() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("lookups");
    let copy = both(&server, "lookups", "wh", |root| {
        let file = root.join("a.jsonl");
        std::fs::write(&file, jsonl(100_000, 1_767_225_600)).unwrap();
        out(&crate::support::pchronicle(&[
            "index",
            "build",
            file.to_str().unwrap(),
            "--key",
            "id",
        ]));
    });
    let local = copy.path().join("wh/a.jsonl");
    let local = local.to_str().unwrap();
    let url = "s3://lookups/wh/a.jsonl";
    let size = std::fs::metadata(local).unwrap().len();
    // The index was built before the copy took the objects' upload times,
    // so the first lookup hashes the file once (both copies do).
    let before = server.counts();
    let first = out(&remote(
        &server.endpoint(),
        &["lookup", url, "--key", "id=r77777"],
    ));
    assert_eq!(
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&out(&remote(
            &server.endpoint(),
            &["lookup", local, "--key", "id=r77777"]
        )))
    );
    assert!(String::from_utf8_lossy(&first).contains("\"id\":\"r77777\""));
    let hashed = server.counts().ranged_gets - before.ranged_gets;
    // Later lookups (other processes) know the file by its size and ETag:
    // the index's header, bucket and locator and the one record are read
    // (a read across a block's end takes two), not the file, which takes
    // at least five blocks (256 KiB doubling).
    let before = server.counts();
    let args = ["lookup", url, "--key", "id", "--value", "r5", "--json"];
    let second = out(&remote(&server.endpoint(), &args));
    let looked_up = server.counts().ranged_gets - before.ranged_gets;
    assert!(
        looked_up <= 8 && looked_up + 5 <= hashed,
        "{looked_up} ranged GETs for a lookup, {hashed} for the first, in a file of {size} bytes"
    );
    let local_args = ["lookup", local, "--key", "id", "--value", "r5", "--json"];
    assert_eq!(second, out(&remote(&server.endpoint(), &local_args)));
    for args in [vec!["index", "list"], vec!["index", "list", "--json"]] {
        let at = |path: &str| {
            let mut args = args.clone();
            args.push(path);
            out(&remote(&server.endpoint(), &args))
        };
        assert_eq!(at(url), at(local), "{args:?}");
    }
    let verified = out(&remote(&server.endpoint(), &["index", "verify", url]));
    assert_eq!(
        String::from_utf8_lossy(&verified),
        format!("ok: the index over id matches {url}\n")
    );
    assert_eq!(server.counts().writes, 0, "nothing written by pchronicle");
}

/// A warehouse of `n` leaves with trusted manifests (storyline and
/// compact-jsonl alternately) under `prefix`.
fn leaves(server: &S3Server, bucket: &str, prefix: &str, n: usize) -> tempfile::TempDir {
    both(server, bucket, prefix, |root| {
        let source = root.join("../one.jsonl");
        std::fs::write(&source, jsonl(3, 1_767_225_600)).unwrap();
        for i in 0..n {
            let leaf = root.join(format!("leaf-{i:04}"));
            if i % 2 == 0 {
                std::fs::create_dir_all(leaf.join("generations/g1")).unwrap();
                std::fs::write(leaf.join("generations/g1/p.jsonl"), jsonl(3, 1_767_225_600))
                    .unwrap();
                std::fs::write(leaf.join("CURRENT"), "g1\n").unwrap();
            } else {
                out(&crate::support::pchronicle(&[
                    "import",
                    source.to_str().unwrap(),
                    leaf.to_str().unwrap(),
                ]));
            }
        }
        // Storyline manifests, written by a local listing's repair.
        out(&crate::support::pchronicle(&["ls", root.to_str().unwrap()]));
    })
}

#[test]
fn listing_and_stats_send_a_bounded_number_of_requests() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("bounds");
    let n = 40;
    let _local = leaves(&server, "bounds", "wh", n);
    let url = "s3://bounds/wh";
    let before = server.counts();
    let listing = out(&remote(&server.endpoint(), &["ls", url]));
    assert_eq!(String::from_utf8_lossy(&listing).lines().count(), n + 1);
    let ls = server.counts();
    let spent = (
        ls.lists - before.lists,
        ls.gets - before.gets,
        ls.ranged_gets - before.ranged_gets,
    );
    // The root and the bucket (is the path inside a leaf?) are listed
    // once each, and the root once more when the walk's listing outlives
    // the first; each leaf once; each compact leaf's `_versions/` once;
    // each storyline leaf's `generations/` once (its current generation
    // is seen there, not listed). One GET of each manifest, and of each
    // CURRENT (which says whether the storyline manifest still holds).
    let (story, compact) = (n.div_ceil(2) as u64, (n / 2) as u64);
    assert!(spent.0 <= 3 + 2 * story + 2 * compact, "lists {spent:?}");
    assert!(spent.1 <= 2 * story + compact, "gets {spent:?}");
    assert_eq!(spent.2, 0, "no data object is read: {spent:?}");
    // `.stats` of the unchanged warehouse with trusted manifests reads no
    // data object either.
    let before = server.counts();
    out(&remote(&server.endpoint(), &["stats", url]));
    let stats = server.counts();
    assert_eq!(stats.ranged_gets, before.ranged_gets, "{stats:?}");
    assert!(
        server
            .gets_since(&before)
            .iter()
            .all(|key| key.ends_with("chronicle.manifest") || key.ends_with("CURRENT")),
        "{:?}",
        server.gets_since(&before)
    );
    assert_eq!(server.counts().writes, 0, "nothing written by pchronicle");
}

#[test]
fn writes_to_a_remote_warehouse_are_refused_with_a_code() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("readonly");
    server.put("readonly", "wh/a.jsonl", jsonl(2, 0).as_bytes());
    let src = tempfile::tempdir().unwrap();
    let file = src.path().join("r.jsonl");
    std::fs::write(&file, jsonl(2, 0)).unwrap();
    let before = server.counts();
    for args in [
        vec!["import", file.to_str().unwrap(), "s3://readonly/wh/leaf"],
        vec![
            "append",
            "--store",
            "s3://readonly/wh/shards",
            "--session",
            "s",
            "{}",
        ],
        vec!["index", "build", "s3://readonly/wh/a.jsonl", "--key", "ts"],
    ] {
        let output = remote(&server.endpoint(), &args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("PCHRONICLE_REMOTE_READ_ONLY"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(server.counts().writes, before.writes);
}

#[test]
fn a_store_that_fails_gives_a_coded_error_promptly_and_retries_what_recovers() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("faults");
    let records = jsonl(2_000, 1_767_225_600);
    server.put("faults", "wh/a.jsonl", records.as_bytes());
    let url = "s3://faults/wh";
    let expected = out(&remote(&server.endpoint(), &["cat", url]));
    assert_eq!(String::from_utf8_lossy(&expected).lines().count(), 2_000);

    // Nothing listens at all.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let output = remote(&dead, &["ls", url]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("PCHRONICLE_REMOTE_UNAVAILABLE"));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    // The server hangs up on every request.
    server.set_fault(Fault::Down);
    let output = remote(&server.endpoint(), &["cat", url]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("PCHRONICLE_REMOTE_UNAVAILABLE"));
    server.set_fault(Fault::None);

    // Throttling: two 503s are retried with backoff.
    server.set_fault(Fault::ServerErrors(2));
    assert_eq!(out(&remote(&server.endpoint(), &["cat", url])), expected);

    // A body cut short once is read again; cut short every time, it is
    // an error and never short output passed off as the records.
    server.set_fault(Fault::Truncate(1));
    assert_eq!(out(&remote(&server.endpoint(), &["cat", url])), expected);
    server.set_fault(Fault::Truncate(1_000));
    let output = remote(&server.endpoint(), &["cat", "s3://faults/wh/a.jsonl"]);
    assert!(!output.status.success(), "a truncated read passed");
    server.set_fault(Fault::None);
    assert_eq!(out(&remote(&server.endpoint(), &["cat", url])), expected);
}

#[test]
fn a_request_that_fails_anywhere_fails_the_whole_answer() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("partial");
    let local = leaves(&server, "partial", "wh", 6);
    let local = local.path().join("wh");
    let url = "s3://partial/wh";
    // Storyline leaves are the even ones, compact-jsonl the odd ones.
    // Each of these requests failing once would, if passed over, show a
    // leaf as a plain directory or leave it out of the totals.
    for failing in [
        "wh/leaf-0002/chronicle.manifest",
        "wh/leaf-0004/CURRENT",
        "prefix=wh/leaf-0003/",
        "prefix=wh/leaf-0001/_versions/",
        "prefix=wh/leaf-0000/generations/",
    ] {
        server.set_fault(Fault::FailWhere(failing));
        for command in ["ls", "stats"] {
            let started = Instant::now();
            let output = remote(&server.endpoint(), &[command, url]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !output.status.success() && stderr.contains("PCHRONICLE_REMOTE_UNAVAILABLE"),
                "{command} with {failing:?} failing answered:\n{}\n{stderr}",
                String::from_utf8_lossy(&output.stdout)
            );
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{command} with {failing:?} failing: {:?}",
                started.elapsed()
            );
        }
    }
    server.set_fault(Fault::None);
    for command in ["ls", "stats"] {
        assert_eq!(
            out(&remote(&server.endpoint(), &[command, url])),
            out(&remote(
                &server.endpoint(),
                &[command, local.to_str().unwrap()]
            )),
            "{command}"
        );
    }
}

#[test]
fn an_object_the_store_refuses_is_unreadable_and_the_rest_of_the_tree_answers() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("refused");
    let _copy = both(&server, "refused", "wh", |root| {
        let w = |rel: &str, bytes: &[u8]| write_below(root, rel, bytes);
        w("loose/a.jsonl", jsonl(7, 1_767_225_600).as_bytes());
        w("loose/archived.jsonl", jsonl(5, 1_767_225_600).as_bytes());
        w("story/CURRENT", b"g1\n");
        w(
            "story/generations/g1/p.jsonl",
            jsonl(2, 1_767_225_600).as_bytes(),
        );
        // The storyline manifest, written by a local listing's repair.
        out(&crate::support::pchronicle(&["ls", root.to_str().unwrap()]));
    });
    let url = "s3://refused/wh";
    let stats_of =
        |output: &Output| -> serde_json::Value { serde_json::from_slice(&out(output)).unwrap() };
    // An archived object, an SSE-C object read without its key, a policy.
    for (status, code) in [
        (403, "InvalidObjectState"),
        (400, "InvalidRequest"),
        (403, "AccessDenied"),
    ] {
        server.set_fault(Fault::DenyWhere(
            "/refused/wh/loose/archived.jsonl ",
            status,
            code,
        ));
        let listing = out(&remote(
            &server.endpoint(),
            &["ls", "s3://refused/wh/loose"],
        ));
        assert!(String::from_utf8_lossy(&listing).contains("archived.jsonl"));
        let output = remote(&server.endpoint(), &["stats", "--json", url]);
        let stats = stats_of(&output);
        assert_eq!(stats["record_count"], 7 + 2, "{code}: {stats}");
        assert_eq!(stats["unreadable_sources"], 1, "{code}: {stats}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("warning[PCHRONICLE_RECORD_FILE_UNREADABLE]: loose/archived.jsonl")
                && stderr.contains(code),
            "{code}: {stderr}"
        );
        // The file itself answers as a local file without permission.
        let output = remote(
            &server.endpoint(),
            &["cat", "s3://refused/wh/loose/archived.jsonl"],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{code}");
        assert!(
            !stderr.contains("PCHRONICLE_REMOTE_UNAVAILABLE"),
            "{code}: {stderr}"
        );
    }
    // A leaf manifest the store refuses: the leaf is counted from its data.
    server.set_fault(Fault::DenyWhere(
        "/refused/wh/story/chronicle.manifest ",
        403,
        "AccessDenied",
    ));
    let output = remote(&server.endpoint(), &["stats", "--json", url]);
    assert_eq!(stats_of(&output)["record_count"], 7 + 5 + 2);
    assert!(String::from_utf8_lossy(&output.stderr).contains("PCHRONICLE_MANIFEST_UNREADABLE"));
    // Credentials refused on every request, or a listing refused: the
    // store is unavailable, never an empty or partial tree.
    for fault in [
        Fault::DenyWhere("/", 403, "InvalidAccessKeyId"),
        Fault::DenyWhere("/", 403, "AccessDenied"),
        Fault::DenyWhere("list-type=", 403, "AccessDenied"),
    ] {
        server.set_fault(fault);
        for command in ["ls", "stats"] {
            let output = remote(&server.endpoint(), &[command, url]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !output.status.success() && stderr.contains("PCHRONICLE_REMOTE_UNAVAILABLE"),
                "{command} with {fault:?}: {stderr}"
            );
        }
    }
    server.set_fault(Fault::None);
    assert_eq!(
        stats_of(&remote(&server.endpoint(), &["stats", "--json", url]))["record_count"],
        7 + 5 + 2
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
#[cfg(feature = "serve")]
fn serve_of_a_remote_warehouse_answers_as_serve_of_its_local_copy() {
    use crate::web::{Server, enc};
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("served");
    let demo = both(&server, "served", "demo", |root| {
        out(&crate::support::pchronicle(&[
            "demo",
            root.to_str().unwrap(),
        ]));
        out(&crate::support::pchronicle(&[
            "stats",
            root.to_str().unwrap(),
        ]));
    });
    let env = S3Server::env_for(&server.endpoint());
    let local = Server::start(&demo.path().join("wh"), &[]);
    let remote = Server::start_with(Path::new("s3://served/demo"), &[], &env);
    for rel in [
        "",
        "team",
        "team/codex_jsonl",
        "sessions",
        "runs",
        "exports/highlights.json",
    ] {
        for endpoint in [
            "explorer/tree?path=",
            "stats?path=",
            "sources?path=",
            "records?failed=1&annotate=1&limit=1000&path=",
            "runs?path=",
            "histogram?bucket=day&path=",
        ] {
            let target = format!("/api/{endpoint}{}", enc(rel));
            let (l, r) = (local.get(&target), remote.get(&target));
            assert_eq!(l.status, 200, "{target}: {}", l.text());
            assert_eq!(r.text(), l.text(), "{target}");
        }
    }
    assert_eq!(server.counts().writes, 0, "nothing written by pchronicle");
}
