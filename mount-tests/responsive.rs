//! One slow answer never stops the others: a huge file, `.records`
//! readers that leave, one user hoarding handles. Every wait is bounded:
//! a request stuck in the mount is run on a thread of its own and given
//! up on (the mount is taken down at the end either way).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::os::unix::fs::PermissionsExt;

use crate::harness::{Mounted, open_mount_point};
use crate::hostile::{as_user, test_user};
use crate::support::Warehouse;

/// Runs `f` on a thread of its own; its result if it ends within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result.recv_timeout(limit).ok()
}

/// A sparse file of `size` bytes (no disk used): zeros when read.
fn sparse(path: &Path, size: u64) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::File::create(path).unwrap().set_len(size).unwrap();
}

fn getxattr(path: PathBuf, name: &'static str) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    let n = rustix::fs::getxattr(&path, name, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// CPU seconds (user + system) the process `pid` used so far.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

#[test]
fn a_huge_file_never_stops_answers_elsewhere() {
    let wh = Warehouse::new();
    // 60 GB of zeros, one command, no disk: counting it reads them all.
    sparse(&wh.abs("a/huge.jsonl"), 60_000_000_000);
    wh.file("a/small.jsonl", "{\"i\":1}\n");
    wh.file("b/ok.jsonl", "{\"i\":1}\n{\"i\":2}\n");
    let Some(m) = Mounted::start(wh.path(), &["--render-timeout", "10s"]) else {
        return;
    };
    // Four readers that each used to count the zeros on a serving thread.
    let started = Instant::now();
    let readers: Vec<_> = vec![
        Box::new({
            let p = m.at("a/huge.jsonl");
            move || getxattr(p, "user.pchronicle.record_count").map(|_| ())
        }) as Box<dyn FnOnce() -> std::io::Result<()> + Send>,
        Box::new({
            let p = m.at(".stats");
            move || fs::read(p).map(|_| ())
        }),
        Box::new({
            let p = m.at("a/.stats");
            move || fs::read(p).map(|_| ())
        }),
        Box::new({
            let p = m.at("a/.sources");
            move || fs::read(p).map(|_| ())
        }),
    ]
    .into_iter()
    .map(|reader| {
        let (done, ended) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(reader());
        });
        ended
    })
    .collect();
    std::thread::sleep(Duration::from_millis(100));
    // Meanwhile, elsewhere: each answers within 2 s.
    for round in 0..5 {
        let b = m.at("b");
        let listed = within(Duration::from_secs(2), move || {
            fs::read_dir(&b).map(|d| d.count())
        });
        assert_eq!(listed.map(|r| r.unwrap()), Some(3), "ls b, round {round}");
        let ok = m.at("b/ok.jsonl");
        let read = within(Duration::from_secs(2), move || fs::read(ok));
        assert_eq!(
            read.map(|r| r.unwrap().len()),
            Some(16),
            "cat b/ok.jsonl, round {round}"
        );
        let stats = m.at("b/.stats");
        let stats = within(Duration::from_secs(2), move || fs::read(stats));
        assert!(
            stats.is_some_and(|s| s.is_ok()),
            "cat b/.stats, round {round}"
        );
    }
    // The readers end within their budget (10 s), whatever they got.
    for (i, ended) in readers.into_iter().enumerate() {
        let left = Duration::from_secs(15).saturating_sub(started.elapsed());
        assert!(ended.recv_timeout(left).is_ok(), "reader {i} still waits");
    }
    // The rollups show the huge file as being counted, not as zero.
    let root = json(&fs::read(m.at(".stats")).unwrap());
    assert_eq!(root["counting_sources"], 1, "{root}");
    assert_eq!(root["counting"][0], "a/huge.jsonl", "{root}");
    assert_eq!(root["record_count"], 3, "{root}");
    let sources = fs::read_to_string(m.at("a/.sources")).unwrap();
    let huge = sources
        .lines()
        .map(|l| json(l.as_bytes()))
        .find(|s| s["_file_"] == "huge.jsonl");
    let huge = huge.expect("huge.jsonl is a source");
    assert_eq!(huge["stats_origin"], "counting", "{huge}");
    assert_eq!(huge["record_count"], serde_json::Value::Null, "{huge}");
    let counted = getxattr(m.at("a/huge.jsonl"), "user.pchronicle.record_count");
    assert_eq!(
        counted.unwrap_err().raw_os_error(),
        Some(libc::EAGAIN),
        "the count is not ready"
    );
}

#[test]
fn a_large_file_is_counted_once_in_the_background() {
    let wh = Warehouse::new();
    let line =
        "{\"id\":\"x\",\"ts\":\"2026-11-30T00:00:00Z\",\"text\":\"a record of some length\"}\n";
    let records = (48 << 20) / line.len();
    wh.file("big.jsonl", line.repeat(records));
    wh.file("small.jsonl", line);
    let Some(m) = Mounted::start(wh.path(), &["--count-in-background-mib", "16"]) else {
        return;
    };
    let first = json(&fs::read(m.at(".stats")).unwrap());
    assert_eq!(
        first["counting"],
        serde_json::json!(["big.jsonl"]),
        "{first}"
    );
    assert_eq!(first["record_count"], 1, "partial, and said so: {first}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let counted = loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = json(&fs::read(m.at(".stats")).unwrap());
        if now["counting_sources"] == 0 {
            break now;
        }
        assert!(Instant::now() < deadline, "never counted: {now}");
    };
    assert_eq!(counted["record_count"], records as u64 + 1, "{counted}");
    assert_eq!(counted["counting"], serde_json::json!([]), "{counted}");
    let xattr = getxattr(m.at("big.jsonl"), "user.pchronicle.record_count").unwrap();
    assert_eq!(String::from_utf8(xattr).unwrap(), records.to_string());
}

#[test]
fn records_producers_stop_when_their_readers_leave() {
    let wh = Warehouse::new();
    // A storyline leaf: two records of 200 KB, then 200 GB of zeros, which
    // a producer skips without sending anything.
    let record = format!("{{\"text\":\"{}\"}}\n", "x".repeat(200 << 10)).repeat(2);
    wh.file("s/CURRENT", "g1\n");
    let part = wh.abs("s/generations/g1/part-0.jsonl");
    wh.file("s/generations/g1/part-0.jsonl", &record);
    fs::File::options()
        .write(true)
        .open(&part)
        .unwrap()
        .set_len(200_000_000_000)
        .unwrap();
    // A manifest that matches the generation, so the leaf is not counted
    // (that would be the background counter's work, not a producer's).
    let stats = pchronicle::records::RecordStats {
        record_count: 2,
        ..Default::default()
    };
    pchronicle::store::manifest::Manifest::leaf("storyline/v1", "storyline:generation:g1", stats)
        .write_at(&wh.abs("s"))
        .unwrap();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let records = m.at("s/.records");
    for i in 0..12 {
        let path = records.clone();
        let out = within(Duration::from_secs(20), move || {
            Command::new("dd")
                .arg(format!("if={}", path.display()))
                .args(["bs=1", "count=1", "status=none"])
                .output()
                .unwrap()
        });
        let out = out.unwrap_or_else(|| panic!("dd {i} never ended"));
        assert_eq!(
            out.stdout,
            b"{",
            "dd {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A reader of both records in small requests: each request is
    // answered, though the second record was written before the request
    // that asks for its end, and nothing follows it for a long while.
    let path = records.clone();
    let want = record.len() - 8;
    let out = within(Duration::from_secs(20), move || {
        Command::new("head")
            .args(["-c", &want.to_string()])
            .arg(&path)
            .output()
            .unwrap()
    });
    let out = out.unwrap_or_else(|| panic!("head -c {want} never ended"));
    assert_eq!(out.stdout.len(), want);
    // Every reader left: within a few seconds the daemon is idle.
    std::thread::sleep(Duration::from_secs(10));
    let pid = m.pid();
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = (cpu_seconds(pid) - before) / 3.0;
    assert!(
        used < 0.05,
        "the daemon used {:.0} % of a core",
        used * 100.0
    );
}

#[test]
fn one_user_hoarding_handles_leaves_the_others_working() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: reading as another user needs root");
        return;
    }
    let (uid, gid) = test_user();
    let wh = Warehouse::new();
    wh.file("shared/a.jsonl", "{\"i\":1}\n");
    for dir in [wh.path().to_path_buf(), wh.abs("shared")] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
    if !crate::harness::fuse_usable() {
        return;
    }
    let (dir, mnt) = open_mount_point();
    let m = Mounted::start_at(
        wh.path(),
        &mnt,
        &["--allow-other", "--max-handles-per-user", "64"],
        dir,
    );
    // The test user opens the file until refused, says how far it got and
    // why, and holds them all while root reads.
    let script = "import errno, os, sys, time\n\
        held = []\n\
        try:\n\
        \x20   while len(held) < 10000:\n\
        \x20       held.append(os.open(sys.argv[1], os.O_RDONLY))\n\
        except OSError as e:\n\
        \x20   print(len(held), errno.errorcode[e.errno], flush=True)\n\
        time.sleep(4)\n";
    let target = m.at("shared/a.jsonl");
    let hoarder = std::thread::spawn(move || {
        as_user(
            uid,
            gid,
            Path::new("/usr/bin/python3"),
            &["-c".as_ref(), script.as_ref(), target.as_os_str()],
        )
    });
    std::thread::sleep(Duration::from_millis(1500));
    for round in 0..5 {
        let read = fs::read(m.at("shared/a.jsonl"));
        assert_eq!(read.unwrap(), b"{\"i\":1}\n", "root reads, round {round}");
        assert!(fs::read_dir(m.at("")).is_ok(), "root lists, round {round}");
    }
    let out = hoarder.join().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        "64 EMFILE",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
