//! Reads spread over workers: `pchronicle worker` processes on loopback
//! ports, and `query` and `cat` with `--workers`, against the same
//! commands run locally over the demo warehouse and a generated tree with
//! every leaf kind; and the ways it fails.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::jsonl;

const TOKEN: &str = "test-worker-token";

/// A running `pchronicle worker`, killed on drop.
struct Worker {
    child: Child,
    addr: String,
}

impl Worker {
    fn start(roots: &[&Path], extra: &[&str]) -> Worker {
        Worker::start_with(roots, extra, &[])
    }

    fn start_with(roots: &[&Path], extra: &[&str], env: &[(&str, &str)]) -> Worker {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pchronicle"));
        command
            .args(["worker", "--listen", "127.0.0.1:0"])
            .env("PCHRONICLE_WORKER_TOKEN", TOKEN)
            .env("RUST_LOG", "off")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for root in roots {
            command.arg("--warehouse").arg(root);
        }
        let mut child = command
            .args(extra)
            .spawn()
            .expect("pchronicle worker starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "worker listening on 127.0.0.1:PORT"
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|a| a.contains(':'))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Worker { child, addr }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `pchronicle ARGS`, over `workers` when any are given.
fn run(args: &[&str], workers: &[&Worker], env: &[(&str, &str)]) -> Output {
    let list: Vec<&str> = workers.iter().map(|w| w.addr.as_str()).collect();
    run_over(args, &list, env)
}

/// `pchronicle ARGS` over the workers at `list`.
fn run_over(args: &[&str], list: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pchronicle"));
    command
        .args(args)
        .env("RUST_LOG", "off")
        .env("PCHRONICLE_WORKER_TOKEN", TOKEN)
        .env_remove("PCHRONICLE_WORKERS");
    if !list.is_empty() {
        command.env("PCHRONICLE_WORKERS", list.join(","));
    }
    command.envs(env.iter().copied());
    command.output().expect("pchronicle runs")
}

fn ok(output: &Output) -> Vec<u8> {
    assert!(
        output.status.success(),
        "pchronicle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout.clone()
}

fn failed_with(output: &Output, code: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        !output.status.success() && stderr.contains(code),
        "expected {code}, got status {:?}: {stderr}",
        output.status
    );
    stderr
}

/// Output lines, sorted: a query without a total order may give its rows
/// in any order.
fn sorted(bytes: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// The demo warehouse and a generated tree with every leaf kind, below
/// one root.
fn warehouse() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wh");
    std::fs::create_dir(&root).unwrap();
    ok(&crate::support::pchronicle(&[
        "demo",
        root.join("demo").to_str().unwrap(),
    ]));
    let generated = root.join("gen");
    std::fs::create_dir(&generated).unwrap();
    crate::remote::generated(&generated);
    for i in 0..12 {
        let path = generated.join(format!("many/part-{i:02}.jsonl"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, jsonl(40 + i, 1_767_225_600 + 3600 * i as i64)).unwrap();
    }
    (tmp, root)
}

const QUERIES: &[&str] = &[
    "SELECT count(*) FROM records",
    "SELECT _file_, count(*) AS n FROM records GROUP BY _file_",
    "SELECT _file_, line FROM records WHERE failed",
    "SELECT json_get_str(record, 'role') AS role, count(*) AS n FROM records GROUP BY role",
    "SELECT _file_, line, timestamp FROM records ORDER BY timestamp DESC NULLS LAST, _file_, line LIMIT 7",
    "SELECT count(DISTINCT _file_) AS files FROM records",
    "SELECT s.kind, count(*) AS n FROM records r JOIN sources s ON r._file_ = s._file_ GROUP BY s.kind",
    "SELECT agent, date, count(*) AS n FROM records WHERE agent IS NOT NULL GROUP BY agent, date",
    "SELECT _file_, line FROM records WHERE agent = 'claude'",
    "SELECT min(timestamp) AS lo, max(timestamp) AS hi FROM records",
    "SELECT _file_, max(line) AS last FROM records GROUP BY _file_ HAVING count(*) > 2",
    "SELECT _file_, line, length(record) AS l FROM records ORDER BY l DESC, _file_, line LIMIT 5",
    "SELECT count(*) AS n FROM records WHERE record LIKE '%tool%'",
    "SELECT json_get_str(record, 'type') AS t, count(DISTINCT _file_) AS files FROM records GROUP BY t",
    "WITH per AS (SELECT _file_, count(*) AS n FROM records GROUP BY _file_) SELECT max(n), min(n), sum(n) FROM per",
    "SELECT _file_ FROM records WHERE timestamp >= '2026-01-01T00:00:00Z' GROUP BY _file_",
    "SELECT * FROM records WHERE _file_ LIKE 'gen/loose/%'",
    "SELECT failed, count(*) AS n FROM records GROUP BY failed",
    "SELECT kind, count(*) AS n FROM sources GROUP BY kind",
    "SELECT a._file_, count(*) AS n FROM records a JOIN (SELECT _file_ FROM records WHERE line = 1) b ON a._file_ = b._file_ GROUP BY a._file_",
    "SELECT _file_ FROM records WHERE line = 1 UNION ALL SELECT _file_ FROM records WHERE line = 2",
    "SELECT json_get_str(record, 'session') AS session, count(*) AS n FROM records GROUP BY session ORDER BY n DESC, session LIMIT 3",
    "SELECT g.value, count(*) AS n FROM records r JOIN generate_series(1, 3) AS g ON r.line = g.value GROUP BY g.value",
];

/// Every query gives the local rows over 1, 2 and 3 workers; and with
/// the filters (`--where`, `--file`, `--contains`, `--as-of`) too.
#[test]
fn queries_over_one_two_and_three_workers_give_the_local_rows() {
    let (_tmp, root) = warehouse();
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&[&root], &[])).collect();
    let path = root.to_str().unwrap();
    let mut asked: Vec<Vec<&str>> = QUERIES
        .iter()
        .map(|sql| vec!["query", path, sql, "--json"])
        .collect();
    let count = "SELECT _file_, count(*) AS n FROM records GROUP BY _file_";
    asked.push(vec![
        "query",
        path,
        count,
        "--json",
        "--where",
        "agent=claude",
    ]);
    asked.push(vec!["query", path, count, "--json", "--file", "gen/**"]);
    asked.push(vec!["query", path, count, "--json", "--contains", "tool"]);
    asked.push(vec![
        "query",
        path,
        count,
        "--json",
        "--as-of",
        "2026-01-01T00:30:00Z",
    ]);
    // The workers really run the scans: the plan run has stages, and its
    // scans are cut into one task a worker.
    let over: Vec<&Worker> = workers.iter().take(2).collect();
    let analyzed = ok(&run(
        &[
            "query",
            path,
            &format!("EXPLAIN ANALYZE {}", QUERIES[3]),
            "--csv",
        ],
        &over,
        &[],
    ));
    let analyzed = String::from_utf8_lossy(&analyzed);
    for part in [
        "DistributedExec",
        "Stage 1",
        "t0: RecordsScan",
        "t1: RecordsScan",
    ] {
        assert!(analyzed.contains(part), "no {part:?} in {analyzed}");
    }
    for args in &asked {
        let local = sorted(&ok(&run(args, &[], &[])));
        assert!(!local.is_empty(), "{args:?} gives no rows");
        for n in 1..=3 {
            let over: Vec<&Worker> = workers.iter().take(n).collect();
            let spread = sorted(&ok(&run(args, &over, &[])));
            assert_eq!(spread, local, "{args:?} over {n} workers");
        }
    }
}

/// `cat` over workers is byte for byte the local `cat`, in order.
#[test]
fn cat_over_workers_gives_the_local_bytes_in_order() {
    let (_tmp, root) = warehouse();
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&[&root], &[])).collect();
    let path = root.to_str().unwrap();
    let demo = root.join("demo");
    let demo = demo.to_str().unwrap();
    let asked: &[&[&str]] = &[
        &["cat", path],
        &["cat", path, "--failed", "--annotate"],
        &["cat", path, "--limit", "17"],
        &["cat", path, "--contains", "tool"],
        &["cat", demo, "--where", "agent=claude"],
        &["cat", path, "--file", "gen/many/*"],
        &["cat", demo, "--as-of", "2026-11-02T12:00:00Z"],
    ];
    for args in asked {
        let local = ok(&run(args, &[], &[]));
        assert!(!local.is_empty(), "{args:?} gives nothing");
        for n in 1..=3 {
            let over: Vec<&Worker> = workers.iter().take(n).collect();
            let spread = ok(&run(args, &over, &[]));
            assert!(spread == local, "{args:?} over {n} workers differs");
        }
    }
}

/// `stats` over workers counts the files not counted yet there, keeps
/// their counts (the log says how many) and gives the bytes a local
/// `stats` gives of a copy.
#[test]
fn stats_over_workers_counts_there_and_gives_the_local_bytes() {
    let (_tmp, root) = warehouse();
    let copy = root.with_file_name("copy");
    let copied = Command::new("cp")
        .args(["-a", root.to_str().unwrap(), copy.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copied.success());
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start(&[&copy], &[])).collect();
    let over: Vec<&Worker> = workers.iter().collect();
    let path = copy.to_str().unwrap();
    let spread = run(
        &["stats", path, "--json"],
        &over,
        &[("RUST_LOG", "pchronicle=info")],
    );
    let local = run(&["stats", root.to_str().unwrap(), "--json"], &[], &[]);
    assert_eq!(
        String::from_utf8_lossy(&ok(&spread)),
        String::from_utf8_lossy(&ok(&local))
    );
    let log = String::from_utf8_lossy(&spread.stderr);
    let counted: usize = log
        .split(" record files counted on workers")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in the log: {log}"));
    assert!(counted >= 12, "{counted} files counted on workers: {log}");
}

/// A worker that is not there, that wants another token, of another
/// build, or asked for a path it does not serve: each a coded failure
/// before anything is read.
#[test]
fn workers_that_cannot_serve_are_coded_failures() {
    let (_tmp, root) = warehouse();
    let path = root.to_str().unwrap();
    let sql = "SELECT count(*) FROM records";
    let worker = Worker::start(&[&root], &[]);
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = free.local_addr().unwrap().to_string();
    drop(free);
    let both = [worker.addr.as_str(), gone.as_str()];
    let stderr = failed_with(
        &run_over(&["query", path, sql], &both, &[]),
        "PCHRONICLE_WORKER_UNAVAILABLE",
    );
    assert!(stderr.contains(&gone), "{stderr}");
    failed_with(
        &run_over(&["cat", path], &[&gone], &[]),
        "PCHRONICLE_WORKER_UNAVAILABLE",
    );
    // Optional: the worker that answers takes the whole read.
    let local = ok(&run(&["query", path, sql], &[], &[]));
    let optional = run_over(&["query", path, sql, "--workers-optional"], &both, &[]);
    assert_eq!(ok(&optional), local);

    // Another token, or none.
    failed_with(
        &run(
            &["query", path, sql],
            &[&worker],
            &[("PCHRONICLE_WORKER_TOKEN", "wrong")],
        ),
        "PCHRONICLE_WORKER_TOKEN",
    );
    let mut tokenless = Command::new(env!("CARGO_BIN_EXE_pchronicle"));
    tokenless
        .args(["query", path, sql])
        .env("PCHRONICLE_WORKERS", &worker.addr)
        .env_remove("PCHRONICLE_WORKER_TOKEN");
    failed_with(&tokenless.output().unwrap(), "PCHRONICLE_WORKER_TOKEN");

    // Another build.
    let other = Worker::start_with(&[&root], &[], &[("PCHRONICLE_WORKER_BUILD", "0.0.0+other")]);
    let stderr = failed_with(
        &run(&["query", path, sql], &[&worker, &other], &[]),
        "PCHRONICLE_WORKER_VERSION",
    );
    assert!(stderr.contains("0.0.0+other"), "{stderr}");

    // A path outside the roots it serves: a sibling, and a symlink that
    // leads out of them.
    let demo_only = Worker::start(&[&root.join("demo")], &[]);
    failed_with(
        &run(&["query", path, sql], &[&demo_only], &[]),
        "PCHRONICLE_WORKER_ROOT",
    );
    failed_with(
        &run(&["cat", path], &[&demo_only], &[]),
        "PCHRONICLE_WORKER_ROOT",
    );
    let link = root.join("demo/elsewhere");
    std::os::unix::fs::symlink(root.join("gen"), &link).unwrap();
    failed_with(
        &run(&["query", link.to_str().unwrap(), sql], &[&demo_only], &[]),
        "PCHRONICLE_WORKER_ROOT",
    );
    // What it serves, it reads.
    let demo = root.join("demo");
    assert_eq!(
        ok(&run(
            &["query", demo.to_str().unwrap(), sql],
            &[&demo_only],
            &[]
        )),
        ok(&run(&["query", demo.to_str().unwrap(), sql], &[], &[]))
    );
}

/// A worker killed while a query runs fails the query within seconds
/// with a code, never a result short of its share.
#[test]
fn a_worker_killed_mid_query_fails_it_with_a_code_within_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("wh");
    for i in 0..16 {
        let path = root.join(format!("big/part-{i:02}.jsonl"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, jsonl(20_000, 1_767_225_600)).unwrap();
    }
    let path = root.to_str().unwrap();
    let first = Worker::start(&[&root], &["--max-tasks", "1"]);
    let mut second = Worker::start(&[&root], &["--max-tasks", "1"]);
    // Heavy on every row: the query outlasts the kill by far.
    let sql = "SELECT count(DISTINCT sha256(repeat(record, 300))) FROM records";
    let list = format!("{},{}", first.addr, second.addr);
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(["query", path, sql])
        .env("RUST_LOG", "off")
        .env("PCHRONICLE_WORKERS", &list)
        .env("PCHRONICLE_WORKER_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the query ended within {:?}, before the kill",
        started.elapsed()
    );
    second.kill();
    let killed = Instant::now();
    let output = child.wait_with_output().unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "the query ran {:?} after the kill",
        killed.elapsed()
    );
    failed_with(&output, "PCHRONICLE_WORKER_LOST");
}

/// A worker stops at SIGTERM, after telling the service manager it is
/// ready once it listens.
#[test]
fn a_worker_says_ready_and_stops_at_sigterm() {
    let (_tmp, root) = warehouse();
    let socket_dir = tempfile::tempdir().unwrap();
    let socket_path = socket_dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let worker = Worker::start_with(
        &[&root],
        &[],
        &[("NOTIFY_SOCKET", socket_path.to_str().unwrap())],
    );
    let mut message = [0u8; 512];
    let n = socket.recv(&mut message).unwrap();
    assert!(
        String::from_utf8_lossy(&message[..n]).contains("READY=1"),
        "{:?}",
        String::from_utf8_lossy(&message[..n])
    );
    let mut worker = worker;
    // SAFETY: a plain kill(2) of the child just started.
    assert_eq!(
        unsafe { libc::kill(worker.child.id() as i32, libc::SIGTERM) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = worker.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the worker did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One worker reading an `s3://` warehouse gives what the coordinator
/// reads from a local copy.
#[test]
fn a_worker_reads_an_s3_warehouse() {
    let Some(server) = crate::s3::S3Server::start() else {
        return;
    };
    server.create_bucket("spread");
    let copy = crate::remote::both(&server, "spread", "wh", crate::remote::generated);
    let local = copy.path().join("wh");
    let env: Vec<(&str, String)> = server.env();
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain([
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_CONFIG_FILE", "/nonexistent"),
        ])
        .collect();
    let url = "s3://spread/wh";
    let worker = Worker::start_with(&[Path::new(url)], &[], &env);
    for sql in [
        "SELECT _file_, count(*) AS n, sum(cast(failed AS int)) AS f FROM records GROUP BY 1",
        "SELECT json_get_str(record, 'role') AS role, count(*) AS n FROM records GROUP BY role",
    ] {
        let here = sorted(&ok(&run(
            &["query", local.to_str().unwrap(), sql],
            &[],
            &env,
        )));
        let spread = sorted(&ok(&run(&["query", url, sql], &[&worker], &env)));
        assert_eq!(spread, here, "{sql}");
    }
    assert!(
        ok(&run(&["cat", url], &[&worker], &env))
            == ok(&run(&["cat", local.to_str().unwrap()], &[], &env))
    );
}

/// `serve --workers`: the SQL page's queries run over the workers, with
/// the rows they give without.
#[test]
fn serve_runs_its_queries_over_workers() {
    let (_tmp, root) = warehouse();
    let worker = Worker::start(&[&root], &[]);
    let server = crate::web::Server::start_with(
        &root,
        &["--workers", &worker.addr],
        &[("PCHRONICLE_WORKER_TOKEN", TOKEN.to_string())],
    );
    for sql in [
        "SELECT _file_, count(*) AS n FROM records GROUP BY _file_",
        "SELECT json_get_str(record, 'role') AS role, count(*) AS n FROM records GROUP BY role",
    ] {
        let answer = server.query(&serde_json::json!({ "sql": sql }));
        assert_eq!(answer.status, 200, "{sql}");
        let local = ok(&run(
            &["query", root.to_str().unwrap(), sql, "--json"],
            &[],
            &[],
        ));
        assert_eq!(sorted(&answer.body), sorted(&local), "{sql}");
    }
    // The worker gone: the answer is a coded failure, not fewer rows.
    drop(worker);
    let answer = server.query(&serde_json::json!({ "sql": "SELECT count(*) FROM records" }));
    assert_ne!(answer.status, 200);
    let text = String::from_utf8_lossy(&answer.body);
    assert!(text.contains("PCHRONICLE_WORKER_UNAVAILABLE"), "{text}");
}
