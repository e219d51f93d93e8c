//! `pchronicle serve`, API tier: the real server over real HTTP, every
//! endpoint against the CLI command it names, byte for byte; paging,
//! tallies, 304s, refused SQL and hostile requests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{jsonl, pchronicle, stdout};

/// A running `pchronicle serve`, stopped on drop.
pub struct Server {
    child: Child,
    pub addr: String,
    pub token: String,
}

impl Server {
    pub fn start(warehouse: &Path, extra: &[&str]) -> Server {
        Server::start_with(warehouse, extra, &[])
    }

    /// [`Server::start`] with more environment (an object store's).
    pub fn start_with(warehouse: &Path, extra: &[&str], env: &[(&str, String)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env_remove("AWS_PROFILE")
            .arg("serve")
            .arg(warehouse)
            .args(["--listen", "127.0.0.1:0", "--no-cache"])
            .args(extra)
            .env("RUST_LOG", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("pchronicle serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "serving WH at http://127.0.0.1:PORT/#token=T"
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        let rest = url.strip_prefix("http://").unwrap();
        let (addr, fragment) = rest.split_once('/').unwrap();
        let token = fragment
            .strip_prefix("#token=")
            .unwrap_or_default()
            .to_string();
        Server {
            child,
            addr: addr.to_string(),
            token,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET target` with the token.
    pub fn get(&self, target: &str) -> Reply {
        self.request(
            "GET",
            target,
            &[("Authorization", &format!("Bearer {}", self.token))],
            b"",
        )
    }

    /// `POST /api/query` of `body` (JSON).
    pub fn query(&self, body: &serde_json::Value) -> Reply {
        let bytes = serde_json::to_vec(body).unwrap();
        self.request(
            "POST",
            "/api/query",
            &[
                ("Authorization", &format!("Bearer {}", self.token)),
                ("Content-Type", "application/json"),
            ],
            &bytes,
        )
    }

    pub fn request(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut head = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            head.push_str(&format!("Host: {}\r\n", self.addr));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        Reply::parse(&raw)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Reply {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a whole head");
        let head = String::from_utf8_lossy(&raw[..end]);
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: BTreeMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let mut body = raw[end + 4..].to_vec();
        if headers
            .get("transfer-encoding")
            .is_some_and(|t| t == "chunked")
        {
            body = unchunk(&body);
        }
        Reply {
            status,
            headers,
            body,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    /// `{"code", …}` of an error answer.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or("").to_string()
    }
}

fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let at = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..at]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[at + 2..at + 2 + size]);
        body = &body[at + 2 + size + 2..];
    }
}

/// `text` percent-encoded for a query string.
pub fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn demo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    stdout(&pchronicle(&["demo", wh.to_str().unwrap()]));
    // The first reader repairs the one leaf the demo leaves without a
    // manifest: read it once, so that every later reader (CLI or server)
    // sees the same `stats_origin`.
    stdout(&pchronicle(&["stats", wh.to_str().unwrap()]));
    dir
}

fn cli(args: &[&str]) -> Vec<u8> {
    let out = pchronicle(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every directory below `rel`, `rel` first, found through the API.
fn directories(server: &Server, rel: &str) -> Vec<String> {
    let mut all = vec![rel.to_string()];
    let listing = server
        .get(&format!("/api/explorer/tree?path={}", enc(rel)))
        .json();
    for entry in listing["entries"].as_array().unwrap() {
        if entry["kind"] == "directory" {
            let name = entry["name"].as_str().unwrap();
            let child = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            all.extend(directories(server, &child));
        }
    }
    all
}

#[test]
fn the_datasets_children_of_every_prefix_equal_ls_of_it() {
    let dir = demo();
    let wh = dir.path().join("wh");
    let server = Server::start(&wh, &[]);
    let prefixes = directories(&server, "");
    assert!(prefixes.len() >= 6, "{prefixes:?}");
    for rel in prefixes
        .iter()
        .map(String::as_str)
        .chain(["team/codex_jsonl", "exports/highlights.json"])
    {
        let path = wh.join(rel);
        let api = server.get(&format!("/api/explorer/tree?path={}", enc(rel)));
        assert_eq!(api.status, 200, "{rel}: {}", api.text());
        assert_eq!(api.headers["content-type"], "application/json");
        let ls = cli(&["ls", path.to_str().unwrap(), "--json"]);
        assert_eq!(
            api.text(),
            String::from_utf8(ls).unwrap(),
            "tree of {rel:?}"
        );
    }
}

#[test]
fn stats_sources_records_and_query_equal_their_cli_byte_for_byte() {
    let dir = demo();
    let wh = dir.path().join("wh");
    let server = Server::start(&wh, &[]);
    for (rel, filters, flags) in [
        ("", "", vec![]),
        (
            "runs",
            "&where=agent%3Dclaude",
            vec!["--where", "agent=claude"],
        ),
        (
            "team",
            "&file=codex_jsonl%2F**",
            vec!["--file", "codex_jsonl/**"],
        ),
        ("", "&contains=read_file", vec!["--contains", "read_file"]),
        (
            "sessions",
            "&since=2026-11-05T00%3A00%3A00Z",
            vec!["--since", "2026-11-05T00:00:00Z"],
        ),
        (
            "",
            "&as_of=2026-11-05T00%3A00%3A00Z",
            vec!["--as-of", "2026-11-05T00:00:00Z"],
        ),
        (
            "",
            "&as_of=2099-01-01T00%3A00%3A00Z",
            vec!["--as-of", "2099-01-01T00:00:00Z"],
        ),
        ("team/codex_jsonl", "&version=1", vec!["--version", "1"]),
    ] {
        let path = wh.join(rel);
        let path = path.to_str().unwrap();
        let with = |verb: &[&str]| {
            let mut args = verb.to_vec();
            args.push(path);
            args.extend(flags.iter().copied());
            cli(&args)
        };
        let stats = server.get(&format!("/api/stats?path={rel}{filters}"));
        assert_eq!(
            stats.body,
            with(&["stats", "--json"]),
            "stats {rel} {filters}"
        );
        let sources = server.get(&format!("/api/sources?path={rel}{filters}"));
        assert_eq!(
            sources.body,
            with(&["ls", "--sources", "--json"]),
            "sources {rel} {filters}"
        );
        for (extra, cat_flags) in [
            ("", vec![]),
            ("&failed=1&annotate=1", vec!["--failed", "--annotate"]),
        ] {
            let mut cat = vec!["cat"];
            cat.extend(cat_flags.iter().copied());
            let whole = with(&cat);
            let mut paged = Vec::new();
            let mut after = String::new();
            let mut pages = 0;
            loop {
                let page = server.get(&format!(
                    "/api/records?path={rel}{filters}{extra}&limit=7{after}"
                ));
                assert_eq!(page.status, 200, "{}", page.text());
                assert!(page.body.iter().filter(|&&b| b == b'\n').count() <= 7);
                paged.extend_from_slice(&page.body);
                pages += 1;
                match page.headers.get("x-next-cursor") {
                    Some(cursor) => after = format!("&after={}", enc(cursor)),
                    None => break,
                }
            }
            assert_eq!(
                String::from_utf8_lossy(&paged),
                String::from_utf8_lossy(&whole),
                "records {rel} {filters} {extra} in {pages} pages"
            );
        }
        let sql = "SELECT _file_, count(*) AS n FROM records GROUP BY _file_ ORDER BY _file_";
        let mut body = serde_json::json!({"path": rel, "sql": sql});
        for pair in filters.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap();
            let v = urlish_decode(v);
            body[k] = serde_json::Value::String(v);
        }
        let answer = server.query(&body);
        assert_eq!(answer.status, 200, "{}", answer.text());
        let mut args = vec!["query", path, sql, "--json"];
        args.extend(flags.iter().copied());
        assert_eq!(answer.body, cli(&args), "query {rel} {filters}");
    }
}

fn urlish_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn runs_agree_with_an_independent_count_and_a_second_request_reads_no_record() {
    let dir = demo();
    let wh = dir.path().join("wh");
    let server = Server::start(&wh, &["--ttl", "0"]);
    let runs = server.get("/api/runs?path=&limit=1000");
    assert_eq!(runs.status, 200, "{}", runs.text());
    let runs = runs.json();
    assert!(runs["next"].is_null(), "every demo run is on one page");
    // Count from `cat --annotate --failed`; the shards of a session
    // (`SESSION.TOKEN.jsonl|jsonseq`, an eight-character token) are one run.
    let all = cli(&["cat", wh.to_str().unwrap(), "--annotate", "--failed"]);
    let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in String::from_utf8(all).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let file = v["_file_"].as_str().unwrap();
        // The shards of a session (`SESSION.TOKEN.jsonl|jsonseq`, an
        // eight-character token) are one run, wherever they are.
        let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
        let run = match name.split_once('.') {
            Some((session, rest)) if rest.len() > 8 && rest.as_bytes()[8] == b'.' => {
                format!("{dir}/{session}")
            }
            _ => file.to_string(),
        };
        let e = expected.entry(run).or_default();
        e.0 += 1;
        e.1 += u64::from(v["failed"] == true);
    }
    let got: BTreeMap<String, (u64, u64)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().to_string(),
                (
                    r["records"].as_u64().unwrap(),
                    r["failed"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(got, expected);
    // The demo's sessions carry token usage and tool calls.
    let with_tokens = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["tokens"].is_null())
        .count();
    assert!(with_tokens > 5, "{runs}");
    let summary = server.get("/api/runs/summary?path=").json();
    assert!(summary["roles"]["assistant"].as_u64().unwrap() > 0);
    assert_eq!(summary["runs"].as_u64().unwrap() as usize, expected.len());
    assert_eq!(runs["total"], summary["runs"]);
    let records: u64 = expected.values().map(|e| e.0).sum();
    let failed: u64 = expected.values().map(|e| e.1).sum();
    assert_eq!(
        (summary["records"].as_u64(), summary["failed"].as_u64()),
        (Some(records), Some(failed))
    );
    // One source alone (read on one thread while another looks into the
    // records) adds up the same as among all.
    let s0001 = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"].as_str().unwrap().ends_with("s-0001.jsonl"))
        .unwrap()
        .clone();
    let rel = s0001["run"].as_str().unwrap();
    let alone = server.get(&format!("/api/runs?path={}", enc(rel))).json();
    let alone = &alone["runs"][0];
    for key in ["records", "failed", "steps", "tokens", "first", "last"] {
        assert_eq!(alone[key], s0001[key], "{key} of {rel} alone");
    }
    assert!(s0001["steps"].as_u64().unwrap() > 0);
    // What a reviewer reads first, from each shape the demo writes.
    let run = |name: &str| {
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run"] == name)
            .unwrap_or_else(|| panic!("{name} in {runs}"))
            .clone()
    };
    let figures = |r: &serde_json::Value| {
        let n = |key: &str| r[key].as_u64().unwrap();
        (n("steps"), n("tool_calls"), n("tool_errors"))
    };
    for chat in [s0001["run"].as_str().unwrap(), "sessions/agent-old.jsonl"] {
        let chat = run(chat);
        assert!(
            chat["task"].as_str().is_some_and(|t| !t.is_empty()),
            "{chat}"
        );
        let (steps, calls, _) = figures(&chat);
        assert!(calls > 0 && steps > 0, "{chat}");
    }
    let claude = run("sessions/agent-a");
    assert_eq!(claude["model"], "claude-sonnet-4-5");
    assert!(claude["task"].is_string(), "{claude}");
    let (steps, calls, _) = figures(&claude);
    assert!(
        calls > 0 && steps >= calls,
        "a step per answered call: {claude}"
    );
    let codex = run("sessions/agent-b");
    assert!(codex["task"].is_string(), "{codex}");
    let (steps, calls, _) = figures(&codex);
    assert!(
        calls > 0 && steps >= calls,
        "a step per answered call: {codex}"
    );
    let atif = run("exports/highlights.json");
    assert_eq!(
        (&atif["model"], &atif["agent"]),
        (&"gpt-5".into(), &"harbor-agent".into())
    );
    assert_eq!(figures(&atif), (6, 3, 0));
    // A run filter chooses runs, and their summary, without a new tally.
    let models = &summary["reviewed"]["model"];
    let gpt5 = models["gpt-5"].as_u64().unwrap();
    let chosen = server.get("/api/runs?path=&model=gpt-5&limit=1000").json();
    assert_eq!(chosen["total"].as_u64(), Some(gpt5));
    assert!(
        chosen["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["model"] == "gpt-5")
    );
    let chosen_summary = server.get("/api/runs/summary?path=&model=gpt-5").json();
    assert_eq!(chosen_summary["runs"].as_u64(), Some(gpt5));
    assert_eq!(
        chosen_summary["reviewed"]["model"],
        serde_json::json!({"gpt-5": gpt5})
    );
    // A run's `file` glob selects exactly its records.
    let agent_a = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "sessions/agent-a")
        .unwrap();
    let page = server.get(&format!(
        "/api/records?path=&limit=1000&file={}",
        enc(agent_a["file"].as_str().unwrap())
    ));
    assert_eq!(
        page.body.iter().filter(|&&b| b == b'\n').count() as u64,
        agent_a["records"].as_u64().unwrap()
    );

    let tallied = |server: &Server| {
        let text = server.get("/metrics").text();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from {text}"))
                .parse::<u64>()
                .unwrap()
        };
        (
            value("pchronicle_tallies_kept_hits_total"),
            value("pchronicle_tallies_kept_misses_total"),
        )
    };
    let before = tallied(&server);
    let again = server.get("/api/runs?path=&limit=1000");
    assert_eq!(again.json(), runs);
    let after = tallied(&server);
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 0),
        "the second request was a tally kept"
    );
    // A changed file makes a new tally.
    std::fs::write(wh.join("runs/new.jsonl"), jsonl(3, 1_700_000_000)).unwrap();
    let changed = server.get("/api/runs?path=&limit=1000").json();
    assert!(
        changed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run"] == "runs/new.jsonl")
    );

    let histogram = server.get("/api/histogram?path=&bucket=day").json();
    let total: u64 = histogram["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["records"].as_u64().unwrap())
        .sum();
    let records: u64 = changed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["records"].as_u64().unwrap())
        .sum();
    assert_eq!(total + histogram["untimed"].as_u64().unwrap(), records);
}

/// `answer[field]` as an object of counts.
fn counts(answer: &serde_json::Value) -> BTreeMap<String, u64> {
    answer
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {answer}"))
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect()
}

#[test]
fn writer_controlled_lists_are_cut_at_their_count_and_the_rest_summed_beside_them() {
    let w = crate::support::Warehouse::new();
    // 100,000 roles, one record each, an hour apart; a real role named
    // "other"; three roles a megabyte long that read the same once cut.
    let mut roles = String::new();
    for i in 0..100_000i64 {
        roles.push_str(&format!(
            "{{\"role\":\"r{i:06}\",\"ts\":{}}}\n",
            1_700_000_000 + i * 3600
        ));
    }
    for _ in 0..7 {
        roles.push_str("{\"role\":\"other\"}\n");
    }
    let huge = "x".repeat(1 << 20);
    for j in 0..3 {
        roles.push_str(&format!("{{\"role\":\"{huge}{j}\"}}\n"));
    }
    w.file("roles.jsonl", roles);
    // 300 values of `d` with a record each, one with five, two long ones
    // that read the same once cut (three records); 150 more keys.
    for i in 0..300 {
        w.file(&format!("d=v{i:03}/a.jsonl"), "{\"n\":1}\n");
    }
    w.file("d=big/a.jsonl", "{\"n\":1}\n".repeat(5));
    w.file(
        &format!("d={}/a.jsonl", "y".repeat(250)),
        "{\"n\":1}\n".repeat(2),
    );
    w.file(&format!("d={}z/a.jsonl", "y".repeat(240)), "{\"n\":1}\n");
    for i in 0..150 {
        w.file(&format!("k{i:03}=1/a.jsonl"), "{\"n\":1}\n");
    }
    let server = Server::start(w.path(), &[]);

    let reply = server.get("/api/runs/summary?path=");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.body.len() < 1 << 20,
        "the runs summary is {} bytes",
        reply.body.len()
    );
    let runs = reply.json();
    let cut_x = format!("{}…", "x".repeat(200));
    let roles = counts(&runs["roles"]);
    assert_eq!(roles.len(), 100);
    assert_eq!(roles["other"], 7, "a real role named other is a role");
    assert_eq!(
        roles[&cut_x], 3,
        "cut roles that read the same count as one"
    );
    let first: Vec<String> = (0..98).map(|i| format!("r{i:06}")).collect();
    assert!(
        first.iter().all(|r| roles[r] == 1),
        "ties go to the first by name"
    );
    assert_eq!(
        runs["other"]["roles"],
        serde_json::json!({"values": 99_902, "records": 99_902})
    );

    let facets = runs["facets"].as_object().unwrap();
    assert_eq!(facets.len(), 100, "100 keys kept");
    let d = counts(&runs["facets"]["d"]);
    assert_eq!(d.len(), 100);
    assert_eq!(d["big"], 5);
    assert_eq!(d[&format!("{}…", "y".repeat(200))], 3);
    assert_eq!(d["v097"], 1);
    assert!(!d.contains_key("v098"));
    assert_eq!(
        runs["other"]["facets"],
        serde_json::json!({"d": {"values": 202, "records": 202}})
    );
    assert!(facets.contains_key("k098") && !facets.contains_key("k099"));
    assert_eq!(
        runs["other"]["facet_keys"],
        serde_json::json!({"values": 51, "records": 51})
    );
    assert_eq!(runs["runs"], 454, "every run is counted");
    let page = server.get("/api/runs?path=").json();
    assert_eq!(page["runs"].as_array().unwrap().len(), 200, "a page");
    assert_eq!(page["total"], 454);

    let reply = server.get("/api/histogram?path=&bucket=hour");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.body.len() < 1 << 20,
        "the histogram is {} bytes",
        reply.body.len()
    );
    let histogram = reply.json();
    let buckets = histogram["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 2000);
    // Every bucket holds one record: the earliest are kept, in order.
    assert_eq!(buckets[0]["start"], "2023-11-14T22:00:00Z");
    assert_eq!(buckets[1999]["start"], "2024-02-06T05:00:00Z");
    assert_eq!(
        histogram["other"],
        serde_json::json!({"values": 98_000, "records": 98_000, "failed": 0})
    );
}

#[test]
fn pages_of_runs_read_in_turn_are_every_run_once_in_the_order_asked() {
    let w = crate::support::Warehouse::new();
    // Every third run has a second record: a duration, and tokens.
    // Every fifth has a score; the second records are the model's, with
    // a few tool calls.
    for i in 0..2510 {
        let ts = 1_700_000_000 + (i * 7919) % 2510;
        let score = match i % 5 {
            0 => format!(",\"score\":{}", (i % 11) as f64 / 10.0),
            _ => String::new(),
        };
        let mut text = format!("{{\"n\":1,\"ts\":{ts}{score}}}\n");
        if i % 3 == 1 {
            let calls = vec!["{}"; i % 4].join(",");
            text.push_str(&format!(
                "{{\"n\":2,\"ts\":{},\"role\":\"assistant\",\"tool_calls\":[{calls}],\"usage\":{{\"input_tokens\":{},\"output_tokens\":1}}}}\n",
                ts + i % 97,
                i % 53
            ));
        }
        w.file(&format!("n/{i:05}.jsonl"), text);
    }
    w.file("n/a-big.jsonl", "{\"n\":1}\n".repeat(3));
    w.file("n/zz.jsonl", "not json\n");
    let server = Server::start(w.path(), &[]);
    let summary = server.get("/api/runs/summary?path=").json();
    assert_eq!(
        (&summary["runs"], &summary["records"], &summary["failed"]),
        (&2512.into(), &3351.into(), &1.into())
    );
    // Each order, from the figures the runs are answered with: largest
    // first, runs without one last, ties by name.
    let figure = |sort: &str, run: &serde_json::Value| -> Option<String> {
        let number = |v: &serde_json::Value| v.as_f64().map(|f| format!("{f:020.6}"));
        match sort {
            "newest" => run["last"].as_str().map(String::from),
            "longest" => number(&run["duration_seconds"]),
            "failed" => number(&run["failed"]),
            "records" => number(&run["records"]),
            "tokens" => number(&run["tokens"]["total"]),
            "steps" => number(&run["steps"]),
            "calls" => number(&run["tool_calls"]),
            "errors" => number(&run["tool_errors"]),
            "score" => number(&run["outcome"]["score"]),
            _ => None,
        }
    };
    let sorts = [
        "name", "newest", "longest", "failed", "tokens", "records", "steps", "calls", "errors",
        "score",
    ];
    for sort in sorts {
        let mut names: Vec<String> = Vec::new();
        let mut keys: Vec<(Option<String>, String)> = Vec::new();
        let mut pages = 0;
        let mut after: Option<String> = None;
        loop {
            let mut url = format!("/api/runs?path=&sort={sort}&limit=1000");
            if let Some(after) = &after {
                url.push_str(&format!("&after={}", enc(after)));
            }
            let reply = server.get(&url);
            assert_eq!(reply.status, 200, "{}", reply.text());
            let page = reply.json();
            assert_eq!(page["total"], 2512);
            assert_eq!(page["sort"], sort);
            let runs = page["runs"].as_array().unwrap();
            assert!(runs.len() <= 1000);
            names.extend(runs.iter().map(|r| r["run"].as_str().unwrap().to_string()));
            keys.extend(
                runs.iter()
                    .map(|r| (figure(sort, r), r["run"].as_str().unwrap().to_string())),
            );
            pages += 1;
            match page["next"].as_str() {
                Some(next) => {
                    assert_eq!(reply.headers["x-next-cursor"], next);
                    after = Some(next.to_string());
                }
                None => break,
            }
        }
        assert_eq!(pages, 3, "{sort}");
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!((names.len(), unique.len()), (2512, 2512), "{sort}");
        let mut want = keys.clone();
        want.sort_by(|a, b| match (&a.0, &b.0) {
            (Some(x), Some(y)) => y.cmp(x).then_with(|| a.1.cmp(&b.1)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.1.cmp(&b.1),
        });
        assert!(keys == want, "{sort}: the pages are not in its order");
        let with_figure = keys.iter().filter(|k| k.0.is_some()).count();
        match sort {
            "tokens" => assert_eq!(with_figure, 837),
            "score" => assert_eq!(with_figure, 502),
            "longest" | "newest" => assert_eq!(with_figure, 2510),
            _ => {}
        }
        match sort {
            "name" => assert!(names.windows(2).all(|w| w[0] < w[1])),
            "records" => assert_eq!(names[0], "n/a-big.jsonl"),
            "failed" => assert_eq!(names[0], "n/zz.jsonl"),
            // 3 calls: i % 3 == 1 and i % 4 == 3, the first such i is 7.
            "calls" => assert_eq!(names[0], "n/00007.jsonl"),
            "steps" => assert_eq!(names[0], "n/00001.jsonl"),
            // The latest record is the 2509th's (7919 * i mod 2510).
            // Runs without a timestamp come last.
            "newest" => assert!(names[2510..].contains(&"n/a-big.jsonl".to_string())),
            _ => {}
        }
    }
    // A cursor is bound to its sort and filters, and cannot be forged.
    let first = server.get("/api/runs?path=&sort=newest&limit=10").json();
    let next = first["next"].as_str().unwrap();
    for url in [
        format!("/api/runs?path=&sort=records&limit=10&after={}", enc(next)),
        format!("/api/runs?path=&sort=newest&file=n/0*&after={}", enc(next)),
        format!(
            "/api/runs?path=&sort=newest&after={}",
            enc(&next.replace('.', ".0"))
        ),
        "/api/runs?path=&after=x".to_string(),
    ] {
        let reply = server.get(&url);
        assert_eq!(reply.status, 409, "{url}: {}", reply.text());
        assert!(
            reply.text().contains("PCHRONICLE_CURSOR_INVALID"),
            "{}",
            reply.text()
        );
    }
    let size_changed = server.get(&format!(
        "/api/runs?path=&sort=newest&limit=5&after={}",
        enc(next)
    ));
    assert_eq!(size_changed.status, 200, "the page size may change");
    for url in [
        "/api/runs?path=&limit=0",
        "/api/runs?path=&limit=1001",
        "/api/runs?path=&sort=errors!",
    ] {
        let reply = server.get(url);
        assert_eq!(reply.status, 400, "{url}: {}", reply.text());
    }
    // The CLI prints the same page, with no cursor.
    let api = server.get("/api/runs?path=&sort=records&limit=7").json();
    let printed = cli(&[
        "runs",
        w.path().to_str().unwrap(),
        "--sort",
        "records",
        "--limit",
        "7",
        "--json",
    ]);
    let mut printed: serde_json::Value = serde_json::from_slice(&printed).unwrap();
    assert!(printed["next"].is_null());
    printed["next"] = api["next"].clone();
    assert_eq!(printed, api);
}

#[test]
fn unchanged_answers_are_304_and_every_answer_carries_the_security_headers() {
    let dir = demo();
    let server = Server::start(&dir.path().join("wh"), &[]);
    let first = server.get("/api/explorer/tree?path=team");
    let etag = first.headers["etag"].clone();
    let auth = format!("Bearer {}", server.token);
    let again = server.request(
        "GET",
        "/api/explorer/tree?path=team",
        &[("Authorization", &auth), ("If-None-Match", &etag)],
        b"",
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    for reply in [
        &first,
        &again,
        &server.get("/datasets"),
        &server.get("/nowhere"),
    ] {
        assert!(reply.headers["content-security-policy"].contains("script-src 'self'"));
        assert_eq!(reply.headers["x-content-type-options"], "nosniff");
    }
    assert_eq!(server.get("/nowhere").status, 404);
    let page = server.get("/runs?path=team");
    assert_eq!(page.status, 200);
    assert!(page.headers["content-type"].starts_with("text/html"));
    assert!(!page.text().contains("<script>"), "no inline script");
    let metrics = server.get("/metrics").text();
    assert!(
        metrics.contains("pchronicle_http_requests_total{endpoint=\"tree\",status=\"200\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("pchronicle_resident_bytes "));
}

#[test]
fn sql_that_writes_is_refused_and_limits_are_stated() {
    let dir = demo();
    let wh = dir.path().join("wh");
    let out_file = dir.path().join("copied.csv");
    let server = Server::start(&wh, &["--query-rows", "5"]);
    for sql in [
        format!("COPY (SELECT 1) TO '{}'", out_file.display()),
        "CREATE TABLE t AS SELECT 1".to_string(),
        "INSERT INTO records SELECT * FROM records".to_string(),
        "SET datafusion.execution.batch_size = 1".to_string(),
        "DROP TABLE records".to_string(),
        format!("EXPLAIN COPY (SELECT 1) TO '{}'", out_file.display()),
        format!(
            "WITH x AS (SELECT 1) SELECT * FROM x; COPY (SELECT 1) TO '{}'",
            out_file.display()
        ),
    ] {
        let answer = server.query(&serde_json::json!({"sql": sql}));
        assert_eq!(answer.status, 400, "{sql}: {}", answer.text());
        assert!(
            ["PCHRONICLE_QUERY_REFUSED", "PCHRONICLE_QUERY_INVALID"]
                .contains(&answer.code().as_str()),
            "{sql}: {}",
            answer.text()
        );
        let cli = pchronicle(&["query", wh.to_str().unwrap(), &sql]);
        assert_eq!(cli.status.code(), Some(1), "{sql}");
    }
    assert!(!out_file.exists(), "nothing was written");
    let capped = server.query(&serde_json::json!({"sql": "SELECT line FROM records"}));
    assert_eq!(capped.status, 200);
    assert_eq!(capped.headers["x-row-cap"], "5");
    assert_eq!(capped.text().lines().count(), 5);
    let form = server.request(
        "POST",
        "/api/query",
        &[
            ("Authorization", &format!("Bearer {}", server.token)),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        b"sql=SELECT+1",
    );
    assert_eq!(form.status, 400, "a form post is refused");
    let large =
        server.query(&serde_json::json!({"sql": format!("SELECT '{}'", "x".repeat(100 << 10))}));
    assert_eq!(large.status, 413);
    // A query's sorts hold at most --query-memory-mib; the same query
    // within the bound answers.
    let small = Server::start(&wh, &["--query-memory-mib", "1"]);
    let sort = "SELECT a.record, b.record FROM records a, records b ORDER BY a.record, b.record";
    let refused = small.query(&serde_json::json!({"sql": sort}));
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (422, "PCHRONICLE_QUERY_MEMORY"),
        "{}",
        refused.text()
    );
    let fits =
        small.query(&serde_json::json!({"sql": "SELECT _file_ FROM records ORDER BY _file_"}));
    assert_eq!(fits.status, 200, "{}", fits.text());
}

#[test]
fn hostile_requests_are_refused_and_nothing_outside_the_root_is_reached() {
    let dir = demo();
    let wh = dir.path().join("wh");
    std::fs::create_dir(dir.path().join("secret")).unwrap();
    std::fs::write(dir.path().join("secret/keys.jsonl"), "{\"k\":1}\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), wh.join("runs/link")).unwrap();
    let server = Server::start(&wh, &[]);
    // No token, a wrong one, a wrong Host.
    let none = server.request("GET", "/api/explorer/tree", &[], b"");
    assert_eq!(
        (none.status, none.code().as_str()),
        (401, "PCHRONICLE_SERVE_UNAUTHORIZED")
    );
    let wrong = server.request(
        "GET",
        "/api/explorer/tree",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let auth = format!("Bearer {}", server.token);
    let rebinding = server.request(
        "GET",
        "/api/explorer/tree",
        &[("Authorization", &auth), ("Host", "evil.example:80")],
        b"",
    );
    assert_eq!(rebinding.status, 400);
    // The pages' shell needs no token (it holds no data); the API does,
    // in a header or as a parameter, and no answer sets a cookie.
    let page = server.request("GET", "/runs?path=team", &[], b"");
    assert_eq!(page.status, 200);
    assert!(!page.headers.contains_key("set-cookie"));
    let by_parameter = server.request(
        "GET",
        &format!("/api/stats?path=team&token={}", server.token),
        &[],
        b"",
    );
    assert_eq!(by_parameter.status, 200, "{}", by_parameter.text());
    let by_cookie = server.request(
        "GET",
        "/api/stats?path=team",
        &[("Cookie", &format!("pchronicle_token={}", server.token))],
        b"",
    );
    assert_eq!(by_cookie.status, 401, "a cookie is no way in");
    // Paths that leave the root, however they are spelt.
    for path in [
        "..",
        "../secret",
        "%2e%2e%2fsecret",
        "runs%2F..%2F..%2Fsecret",
        "/etc",
        "runs/link",
        "runs/link/keys.jsonl",
    ] {
        let reply = server.get(&format!("/api/records?path={path}"));
        assert!(
            reply.status == 400 || reply.status == 404,
            "{path}: {} {}",
            reply.status,
            reply.text()
        );
        assert!(!reply.text().contains("\"k\""), "{path} reached outside");
    }
    // Unknown parameters and bad values are refused, not ignored.
    assert_eq!(server.get("/api/stats?wher=agent%3Dx").status, 400);
    assert_eq!(server.get("/api/records?limit=0").status, 400);
    assert_eq!(
        server.get("/api/records?after=1.2.3").code(),
        "PCHRONICLE_CURSOR_INVALID"
    );
    let missing = server.get("/api/explorer/tree?path=nowhere");
    assert_eq!(missing.status, 404);
    // Errors name paths as the client does, not where the server keeps
    // the warehouse.
    let root = wh.canonicalize().unwrap();
    assert!(
        !missing.text().contains(root.to_str().unwrap()),
        "{}",
        missing.text()
    );
    // Only cursors this server handed out are read from: one edited to
    // any position, however far, is refused like one made up.
    let first = server.get("/api/records?limit=1");
    let cursor = first.headers["x-next-cursor"].clone();
    let (position, tag) = cursor.rsplit_once('.').unwrap();
    let fields: Vec<&str> = position.split('.').collect();
    for offset in ["0", "2", "18446744073709551615", "9223372036854775808"] {
        if offset == fields[2] {
            continue;
        }
        let edited = format!("{}.{}.{offset}.{}.{tag}", fields[0], fields[1], fields[3]);
        let reply = server.get(&format!("/api/records?limit=1&after={edited}"));
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (409, "PCHRONICLE_CURSOR_INVALID"),
            "{edited}: {}",
            reply.text()
        );
    }
    let handed_out = server.get(&format!("/api/records?limit=1&after={cursor}"));
    assert_eq!(handed_out.status, 200, "{}", handed_out.text());
    // ... and only with the filters it was handed out with.
    let other_filters = server.get(&format!("/api/records?limit=1&failed=1&after={cursor}"));
    assert_eq!(other_filters.code(), "PCHRONICLE_CURSOR_INVALID");
    // Another server (or this one restarted) does not take it.
    let other = Server::start(&wh, &[]);
    let elsewhere = other.get(&format!("/api/records?limit=1&after={cursor}"));
    assert_eq!(elsewhere.code(), "PCHRONICLE_CURSOR_INVALID");
}

#[test]
fn clients_that_send_nothing_cannot_keep_others_out() {
    let dir = demo();
    let server = Server::start(&dir.path().join("wh"), &[]);
    // Every place taken by connections that trickle a head and never end
    // it (the server holds 256).
    let mut idle = Vec::new();
    for _ in 0..300 {
        let Ok(mut stream) = TcpStream::connect(&server.addr) else {
            break;
        };
        let _ = stream.write_all(b"GET /api/stats HTTP/1.1\r\nHost: ");
        idle.push(stream);
    }
    std::thread::sleep(Duration::from_millis(800));
    // A client with a whole request is answered at once, more than once.
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let reply = server.get("/api/stats");
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "answered after {:?}",
            started.elapsed()
        );
    }
    let metrics = server.get("/metrics").text();
    let closed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pchronicle_connections_closed_idle_total "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no closed-idle counter in {metrics}"));
    assert!(closed >= 3, "{closed} idle connections closed");
    drop(idle);
}

#[test]
fn a_non_loopback_address_needs_a_token() {
    let dir = demo();
    let out = pchronicle(&[
        "serve",
        dir.path().join("wh").to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
        "--no-token",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PCHRONICLE_SERVE_LISTEN"));
}
