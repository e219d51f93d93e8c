//! A mount of a remote warehouse (`s3://`) against a local S3 server: the
//! same tree and synthetic files as a mount of its local copy, and a mount
//! that answers EIO while the store is down and recovers after.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::Mounted;
use crate::s3::{Fault, S3Server};

fn run_ok(args: &[&str]) {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let out = crate::harness::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn find(root: &Path) -> Vec<String> {
    let out = std::process::Command::new("find")
        .arg(".")
        .current_dir(root)
        .output()
        .unwrap();
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

/// The demo warehouse, its leaf manifests repaired locally (nothing is
/// repaired remotely), and its copy in `bucket` under `demo/`.
fn demo_in(server: &S3Server, bucket: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    server.create_bucket(bucket);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wh");
    run_ok(&["demo", root.to_str().unwrap()]);
    run_ok(&["stats", root.to_str().unwrap()]);
    server.mirror(&root, bucket, "demo");
    (tmp, root)
}

/// Asserts that `rels` read the same bytes through both mounts.
fn same_bytes(local: &Mounted, remote: &Mounted, rels: &[&str]) {
    for rel in rels {
        let (l, r) = (
            std::fs::read(local.at(rel)).unwrap(),
            std::fs::read(remote.at(rel)).unwrap(),
        );
        assert!(
            l == r,
            "{rel} differs:\n{}\n{}",
            String::from_utf8_lossy(&l),
            String::from_utf8_lossy(&r)
        );
    }
}

#[test]
fn a_remote_mount_shows_what_a_mount_of_its_local_copy_shows_and_survives_the_store() {
    let Some(server) = S3Server::start() else {
        return;
    };
    let (_tmp, root) = demo_in(&server, "mounted");
    let env = S3Server::env_for(&server.endpoint());
    let no_env: &[(&str, String)] = &[];
    let Some(local) = Mounted::start_with_env(&root, &["--attr-ttl", "2s"], no_env) else {
        return;
    };
    let remote =
        Mounted::start_with_env(Path::new("s3://mounted/demo"), &["--attr-ttl", "2s"], &env)
            .expect("mounted, since the local one was");
    assert_eq!(find(&remote.mnt), find(&local.mnt));
    same_bytes(
        &local,
        &remote,
        &[
            ".stats",
            ".sources",
            "team/.stats",
            "team/.sources",
            "team/codex_jsonl/.records",
            "team/codex_jsonl/.stats",
            "team/planner/.records",
            "sessions/agent-old.jsonl",
            "runs/.stats",
            "runs/.sources",
        ],
    );

    // A reader polling `.stats` within the TTL lists nothing again.
    let before = server.counts();
    for _ in 0..20 {
        std::fs::read(remote.at(".stats")).unwrap();
    }
    assert_eq!(
        server.counts().lists,
        before.lists,
        "re-listed within the TTL"
    );

    // The store goes away: a file not read yet answers EIO promptly, and
    // the mount stays.
    server.set_fault(Fault::Down);
    let started = Instant::now();
    let e = std::fs::read(remote.at("sessions/agent-a.7b20e4c1.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Past the attribute TTL, so the root is asked of the daemon again.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(std::fs::metadata(remote.at(".")).is_ok(), "the mount left");
    // It comes back: the same read succeeds.
    server.set_fault(Fault::None);
    let back = std::fs::read(remote.at("sessions/agent-a.7b20e4c1.jsonl")).unwrap();
    assert_eq!(
        back,
        std::fs::read(local.at("sessions/agent-a.7b20e4c1.jsonl")).unwrap()
    );
}

#[test]
fn a_first_walk_longer_than_the_ttl_lists_each_prefix_once() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("slow");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wh");
    let n = 40;
    for i in 0..n {
        let leaf = root.join(format!("leaf-{i:02}"));
        std::fs::create_dir_all(leaf.join("generations/g1")).unwrap();
        std::fs::write(leaf.join("generations/g1/p.jsonl"), "{\"ts\":1}\n").unwrap();
        std::fs::write(leaf.join("CURRENT"), "g1\n").unwrap();
    }
    // Manifests, written by a local listing's repair.
    run_ok(&["stats", root.to_str().unwrap()]);
    server.mirror(&root, "slow", "wh");
    let env = S3Server::env_for(&server.endpoint());
    let remote = Mounted::start_with_env(Path::new("s3://slow/wh"), &["--attr-ttl", "1s"], &env)
        .expect("mounted");
    // Far enough away that the first walk takes longer than the TTL.
    server.set_fault(Fault::Latency(Duration::from_millis(150)));
    let (before, started) = (server.counts(), Instant::now());
    std::fs::read(remote.at(".stats")).unwrap();
    let took = started.elapsed();
    let lists = server.counts().lists - before.lists;
    server.set_fault(Fault::None);
    assert!(took > Duration::from_secs(1), "the walk took only {took:?}");
    // The root once (and once more for its own attributes after the TTL),
    // each leaf and its `generations/` once.
    assert!(
        lists <= 2 + 2 * n as u64,
        "{lists} LISTs for {n} leaves in {took:?}"
    );
}

#[test]
fn another_user_reads_nothing_of_a_remote_mount_shared_with_allow_other() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: needs root to act as a second user");
        return;
    }
    let Some(server) = S3Server::start() else {
        return;
    };
    let _demo = demo_in(&server, "shared");
    let (uid, gid) = crate::hostile::test_user();
    let env = S3Server::env_for(&server.endpoint());
    let Some(remote) = Mounted::start_with_env(
        Path::new("s3://shared/demo"),
        &["--allow-other", "--attr-ttl", "0"],
        &env,
    ) else {
        return;
    };
    // The mount point itself is within the other user's reach.
    let parent = remote.mnt.parent().unwrap();
    std::fs::set_permissions(parent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let as_other = |program: &str, rel: &str| {
        crate::hostile::as_user(uid, gid, Path::new(program), &[remote.at(rel).as_os_str()])
    };
    let reached = crate::hostile::as_user(uid, gid, Path::new("/bin/ls"), &[parent.as_os_str()]);
    assert!(
        reached.status.success(),
        "{}",
        String::from_utf8_lossy(&reached.stderr)
    );
    // The daemon reads the store with its own credentials: another user
    // gets none of what they reach, neither names nor bytes nor counts.
    for (program, rel) in [
        ("/bin/ls", "."),
        ("/bin/cat", ".stats"),
        ("/bin/ls", "sessions"),
        ("/bin/cat", "sessions/agent-old.jsonl"),
    ] {
        let out = as_other(program, rel);
        assert!(!out.status.success(), "{program} {rel} read it");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{program} {rel}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The user the daemon runs as still reads it.
    assert!(std::fs::read(remote.at(".stats")).unwrap().len() > 10);
}

#[test]
fn a_remote_mount_answers_eio_while_one_request_fails_and_keeps_nothing_it_met_then() {
    let Some(server) = S3Server::start() else {
        return;
    };
    let (_tmp, root) = demo_in(&server, "flaky");
    let no_env: &[(&str, String)] = &[];
    let Some(local) = Mounted::start_with_env(&root, &["--attr-ttl", "1s"], no_env) else {
        return;
    };
    // One leaf's manifest cannot be read: had the leaf been classified
    // without it (by its markers, counted from its data, with a warning),
    // that classification would outlive the failure.
    server.set_fault(Fault::FailWhere("demo/team/planner/chronicle.manifest"));
    let env = S3Server::env_for(&server.endpoint());
    let remote = Mounted::start_with_env(Path::new("s3://flaky/demo"), &["--attr-ttl", "1s"], &env)
        .expect("mounted, since the local one was");
    for rel in [".stats", "team/.stats", ".sources"] {
        let e = std::fs::read(remote.at(rel)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{rel}: {e}");
    }
    server.set_fault(Fault::None);
    same_bytes(
        &local,
        &remote,
        &[".stats", "team/.stats", ".sources", "team/.sources"],
    );
}

#[test]
fn a_store_that_ignores_if_match_never_passes_off_another_version() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("swapped");
    let listed = crate::support::jsonl(2_000, 1_767_225_600);
    let other = crate::support::jsonl(2_000, 1_767_225_700);
    assert_eq!(listed.len(), other.len());
    server.put("swapped", "wh/a.jsonl", listed.as_bytes());
    server.put("swapped", "other/a.jsonl", other.as_bytes());
    let env = S3Server::env_for(&server.endpoint());
    let Some(remote) =
        Mounted::start_with_env(Path::new("s3://swapped/wh"), &["--attr-ttl", "60s"], &env)
    else {
        return;
    };
    // The mount knows the listed version (not read yet); the store answers
    // a read of it with another object of the same size, as a store that
    // ignores `If-Match` would answer with a newer version.
    assert_eq!(
        std::fs::metadata(remote.at("a.jsonl")).unwrap().len(),
        listed.len() as u64
    );
    server.set_fault(Fault::AnswerWith(
        "/swapped/wh/a.jsonl",
        "/swapped/other/a.jsonl",
    ));
    let e = std::fs::read(remote.at("a.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    server.set_fault(Fault::None);
    assert_eq!(
        std::fs::read(remote.at("a.jsonl")).unwrap(),
        listed.as_bytes()
    );
}

#[test]
fn a_remote_mount_answers_eacces_for_an_object_the_store_refuses_and_serves_the_rest() {
    let Some(server) = S3Server::start() else {
        return;
    };
    server.create_bucket("refusing");
    let readable = crate::support::jsonl(7, 1_767_225_600);
    server.put("refusing", "wh/a.jsonl", readable.as_bytes());
    server.put(
        "refusing",
        "wh/archived.jsonl",
        crate::support::jsonl(5, 1_767_225_600).as_bytes(),
    );
    // An archived object: the store refuses every read of it.
    server.set_fault(Fault::DenyWhere(
        "/refusing/wh/archived.jsonl ",
        403,
        "InvalidObjectState",
    ));
    let env = S3Server::env_for(&server.endpoint());
    let Some(remote) =
        Mounted::start_with_env(Path::new("s3://refusing/wh"), &["--attr-ttl", "1s"], &env)
    else {
        return;
    };
    let names: Vec<String> = std::fs::read_dir(&remote.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.contains(&"archived.jsonl".to_string()), "{names:?}");
    let e = std::fs::read(remote.at("archived.jsonl")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    assert_eq!(
        std::fs::read(remote.at("a.jsonl")).unwrap(),
        readable.as_bytes()
    );
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(remote.at(".stats")).unwrap()).unwrap();
    assert_eq!(stats["record_count"], 7, "{stats}");
    assert_eq!(stats["unreadable_sources"], 1, "{stats}");
    let warned = stats["warnings"].as_array().unwrap();
    assert!(
        warned
            .iter()
            .any(|w| w["code"] == "PCHRONICLE_RECORD_FILE_UNREADABLE"
                && w["path"] == "archived.jsonl"),
        "{stats}"
    );
}
