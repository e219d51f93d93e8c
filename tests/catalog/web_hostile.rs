//! `pchronicle serve` against a hostile client: one without the token that
//! floods connections, a request that would grow the process, scans that
//! would hold every place, a cursor into a replaced file, and small inputs
//! that used to panic or pass.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Warehouse, jsonl, pchronicle};
use crate::web::{Server, enc};

/// Clients without the token that open connections, pipeline requests
/// for a public script and never read an answer, for as long as they are
/// kept: `initial` at once, then `per_second` more.
struct Flood {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Flood {
    fn start(addr: &str, initial: usize, per_second: usize) -> Flood {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let addr = addr.to_string();
        let stopping = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let request =
                format!("GET /assets/conversation.js HTTP/1.1\r\nHost: {addr}\r\n\r\n").repeat(600);
            let mut held = Vec::new();
            let open = |held: &mut Vec<TcpStream>| {
                if let Ok(mut stream) = TcpStream::connect(&addr) {
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                    let _ = stream.write_all(request.as_bytes());
                    held.push(stream);
                }
            };
            for _ in 0..initial {
                open(&mut held);
            }
            let mut opened = initial;
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                for _ in 0..per_second {
                    open(&mut held);
                    opened += 1;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            opened
        });
        Flood {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn clients_without_the_token_cannot_keep_a_token_holder_out() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(20, 1_700_000_000));
    let server = Server::start(wh.path(), &[]);
    assert_eq!(server.get("/api/stats?path=runs").status, 200);
    // 300 connections (more than every place there is), then 10 a second.
    let flood = Flood::start(&server.addr, 300, 10);
    std::thread::sleep(Duration::from_secs(3));
    let mut slowest = Duration::ZERO;
    for _ in 0..8 {
        let started = Instant::now();
        let reply = server.get("/api/stats?path=runs");
        let took = started.elapsed();
        assert_eq!(reply.status, 200, "{}", reply.text());
        slowest = slowest.max(took);
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(flood);
    eprintln!("slowest answer to a token holder under the flood: {slowest:?}");
    assert!(
        slowest <= Duration::from_secs(1),
        "a token holder waited {slowest:?}"
    );
}

/// A warehouse whose directory `a` holds one large sparse record file
/// (reading it takes a while: it is all zero bytes, one record with no
/// end) and `b` one small one.
fn slow_and_small(gib: u64) -> Warehouse {
    let wh = Warehouse::new();
    wh.file("b/small.jsonl", jsonl(3, 1_700_000_000));
    wh.dir("a");
    let file = std::fs::File::create(wh.abs("a/big.jsonl")).unwrap();
    file.set_len(gib << 30).unwrap();
    wh
}

#[test]
fn scans_never_delay_an_answer_from_the_catalogs_state() {
    let wh = slow_and_small(16);
    let server = Server::start(
        wh.path(),
        &["--max-requests", "2", "--count-in-background-mib", "1"],
    );
    // Every scan place taken, and more scans waiting: each search is a
    // new filter set, so a new scan.
    let scans: Vec<_> = (0..6)
        .map(|i| {
            let addr = server.addr.clone();
            let token = server.token.clone();
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(&addr).unwrap();
                let head = format!(
                    "GET /api/runs?path=a&contains=needle{i} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).unwrap();
                // Held open, never read: the scan goes on.
                std::thread::sleep(Duration::from_secs(8));
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let mut slowest = Duration::ZERO;
    for path in ["b", "", "b"] {
        let started = Instant::now();
        let reply = server.get(&format!("/api/explorer/tree?path={path}"));
        slowest = slowest.max(started.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.text());
        let started = Instant::now();
        let reply = server.get("/api/stats?path=b");
        slowest = slowest.max(started.elapsed());
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    eprintln!("slowest listing or stats while scans ran: {slowest:?}");
    assert!(slowest <= Duration::from_secs(1), "waited {slowest:?}");
    for scan in scans {
        scan.join().unwrap();
    }
}

#[test]
fn a_scan_that_outlasts_its_request_is_joined_not_started_again() {
    let wh = slow_and_small(8);
    let server = Server::start(
        wh.path(),
        &["--request-seconds", "1", "--count-in-background-mib", "1"],
    );
    let target = format!("/api/runs?path=a&contains={}", enc("needle"));
    let started = Instant::now();
    let first = server.get(&target);
    if first.status == 200 {
        panic!(
            "the scan of 8 GiB took {:?}: too fast for this test to show anything",
            started.elapsed()
        );
    }
    assert_eq!(first.status, 503, "{}", first.text());
    assert_eq!(first.code(), "PCHRONICLE_ANSWER_LATE");
    // The same filters in another order join the scan still going.
    let reordered = format!("/api/runs?contains={}&path=a", enc("needle"));
    let jobs_before = jobs(&server);
    let deadline = Instant::now() + Duration::from_secs(120);
    let answer = loop {
        let reply = server.get(&reordered);
        if reply.status == 200 {
            break reply;
        }
        assert_eq!(reply.code(), "PCHRONICLE_ANSWER_LATE", "{}", reply.text());
        assert!(Instant::now() < deadline, "the scan never ended");
    };
    assert!(answer.json()["runs"].is_array(), "{}", answer.text());
    assert_eq!(
        jobs(&server),
        jobs_before,
        "no new scan was started for the requests that came after the first"
    );
}

/// Answers started so far (`/metrics`).
fn jobs(server: &Server) -> u64 {
    let text = server.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix("pchronicle_renders_total "))
        .unwrap_or_else(|| panic!("no job counter in {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The peak resident memory of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib << 10
}

/// A memory cgroup of `bytes` holding `pid` (cgroup v2 or v1, whichever
/// this machine mounts writable), removed on drop; `None` where none can
/// be made.
struct Cgroup(std::path::PathBuf);

impl Cgroup {
    fn holding(pid: u32, bytes: u64) -> Option<Cgroup> {
        let name = format!("pchronicle-test-{}", std::process::id());
        for (base, limit) in [
            ("/sys/fs/cgroup/unified", "memory.max"),
            ("/sys/fs/cgroup", "memory.max"),
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ] {
            let dir = Path::new(base).join(&name);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let made = std::fs::write(dir.join(limit), bytes.to_string())
                .and_then(|()| std::fs::write(dir.join("cgroup.procs"), pid.to_string()));
            if made.is_ok() {
                return Some(Cgroup(dir));
            }
            let _ = std::fs::remove_dir(&dir);
        }
        None
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The server is gone by now (it is dropped first).
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_query_cannot_grow_the_server_past_its_bound() {
    // 300 records of 2 MB each.
    let wh = Warehouse::new();
    let big = "x".repeat(2 << 20);
    let records: String = (0..300)
        .map(|i| format!("{{\"id\":{i},\"text\":\"{big}\"}}\n"))
        .collect();
    wh.file("big/records.jsonl", records);
    let server = Server::start(wh.path(), &[]);
    let bound: u64 = 256 << 20;
    let cgroup = Cgroup::holding(server.pid(), 1536 << 20);
    eprintln!("memory cgroup: {:?}", cgroup.as_ref().map(|c| &c.0));
    // A function that would make 2.2 GB of one batch.
    let reply = server.query(&serde_json::json!({
        "sql": "SELECT length(s) FROM (SELECT repeat(CAST(value AS VARCHAR), 200000000) AS s FROM generate_series(1,10))",
    }));
    assert_eq!(reply.status, 422, "{}", reply.text());
    assert_eq!(reply.code(), "PCHRONICLE_QUERY_MEMORY");
    // An answer of 600 MB of records: cut at the answer bound.
    let reply = server.query(&serde_json::json!({
        "path": "big",
        "sql": "SELECT record FROM records",
    }));
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body[..200.min(reply.body.len())])
    );
    assert_eq!(
        reply.headers.get("x-byte-cap").map(String::as_str),
        Some("67108864")
    );
    assert!(reply.body.len() <= 64 << 20);
    assert!(reply.body.ends_with(b"\n"), "it ends at a whole row");
    let rows = reply.body.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    for row in rows {
        serde_json::from_slice::<serde_json::Value>(row).expect("every row is whole");
    }
    // Alive, and within twice its bound.
    assert_eq!(server.get("/api/stats?path=big").status, 200);
    let peak = peak_rss(server.pid());
    eprintln!("peak RSS: {} MiB (bound {} MiB)", peak >> 20, bound >> 20);
    assert!(peak <= 2 * bound, "peak RSS {} MiB", peak >> 20);
    drop(server);
    drop(cgroup);
}

#[test]
fn a_cursor_into_a_replaced_file_is_refused_and_one_into_a_grown_file_is_not() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(10, 1_700_000_000));
    let server = Server::start(wh.path(), &[]);
    let page = |after: Option<&str>| {
        let mut target = "/api/records?path=runs&limit=4".to_string();
        if let Some(after) = after {
            target.push_str(&format!("&after={}", enc(after)));
        }
        server.get(&target)
    };
    let first = page(None);
    assert_eq!(first.status, 200);
    let cursor = first.headers["x-next-cursor"].clone();
    // Grown in place: the cursor still reads on.
    wh.file_append("runs/a.jsonl", &jsonl(2, 1_800_000_000));
    let grown = page(Some(&cursor));
    assert_eq!(grown.status, 200, "{}", grown.text());
    assert!(
        grown.text().starts_with("{\"id\":\"r4\""),
        "{}",
        grown.text()
    );
    // The same bytes, but another file moved into its place.
    let bytes = std::fs::read(wh.abs("runs/a.jsonl")).unwrap();
    wh.file("runs/.next", &bytes);
    std::fs::rename(wh.abs("runs/.next"), wh.abs("runs/a.jsonl")).unwrap();
    let moved = page(Some(&cursor));
    assert_eq!(moved.status, 409, "{}", moved.text());
    assert_eq!(moved.code(), "PCHRONICLE_CURSOR_INVALID");
    // Rewritten in place before the position.
    let cursor = page(None).headers["x-next-cursor"].clone();
    let mut changed = std::fs::read(wh.abs("runs/a.jsonl")).unwrap();
    changed[8] = b'X';
    std::fs::OpenOptions::new()
        .write(true)
        .open(wh.abs("runs/a.jsonl"))
        .unwrap()
        .write_all(&changed)
        .unwrap();
    assert_eq!(page(Some(&cursor)).status, 409);
}

#[test]
fn small_hostile_inputs_are_refused_not_crashed_on() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(3, 1_700_000_000));
    for ttl in ["nan", "inf", "-1"] {
        let flag = format!("--ttl={ttl}");
        let out = pchronicle(&["serve", wh.path().to_str().unwrap(), &flag]);
        assert_eq!(out.status.code(), Some(2), "--ttl {ttl}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--ttl"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let server = Server::start(wh.path(), &[]);
    for sql in [
        "DESC records",
        "describe records",
        "/* x */ DESCRIBE records",
    ] {
        let reply = server.query(&serde_json::json!({ "sql": sql }));
        assert_eq!(reply.status, 400, "{sql}: {}", reply.text());
        assert_eq!(reply.code(), "PCHRONICLE_QUERY_REFUSED", "{sql}");
    }
}
