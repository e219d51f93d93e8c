//! A local S3-compatible server for the tests and benchmarks: `moto` in
//! server mode on 127.0.0.1 (its `moto_server` named by
//! `PCHRONICLE_S3_SERVER`; `scripts/test.sh` installs it), reached through
//! a proxy that counts every request by kind and can fail them on demand
//! (refuse connections, answer 503, cut bodies short).
//!
//! With `PCHRONICLE_REQUIRE_S3=1` (CI) a missing server fails the test;
//! otherwise the test is skipped with a note.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests the proxy saw, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub lists: u64,
    pub gets: u64,
    pub ranged_gets: u64,
    pub heads: u64,
    pub writes: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.lists + self.gets + self.ranged_gets + self.heads + self.writes
    }
}

/// What the proxy does to the requests it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Passes every request on.
    None,
    /// Closes every connection at once, as a dead server's host would
    /// (the client sees the connection reset).
    Down,
    /// Answers the next N requests `503 Slow Down`.
    ServerErrors(u32),
    /// Cuts the body of the next N answers to half.
    Truncate(u32),
    /// Holds every request this long before passing it on (a store far
    /// away).
    Latency(std::time::Duration),
    /// Answers `503 Slow Down` to every request whose request line holds
    /// this text (`%2F` read as `/`): one object or prefix the store
    /// keeps failing on while it answers the rest.
    FailWhere(&'static str),
    /// Answers every request whose request line holds `.0` (`%2F` read as
    /// `/`) with the status `.1` and an S3 error body of code `.2`: an
    /// object the store refuses to read (403 `InvalidObjectState` for an
    /// archived one, 400 `InvalidRequest` for SSE-C, 403 `AccessDenied`;
    /// `"/bucket/key "`, with the space that ends its path, names only
    /// the reads of that object, not the listing of `key/`), or with
    /// `"/"`, credentials refused everywhere.
    DenyWhere(&'static str, u16, &'static str),
    /// Answers a request for the path `.0` (`/bucket/key`) with the object
    /// at `.1`, whatever its `If-Match` says: a store that ignores the
    /// condition and serves another version of the object.
    AnswerWith(&'static str, &'static str),
}

struct State {
    fault: Fault,
    counts: Counts,
    /// The target of every whole-object GET, in order.
    got: Vec<String>,
}

/// moto and the proxy in front of it; both stop when this is dropped.
pub struct S3Server {
    moto: Child,
    moto_port: u16,
    proxy_port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

fn required() -> bool {
    std::env::var("PCHRONICLE_REQUIRE_S3").is_ok_and(|v| v == "1")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl S3Server {
    /// Starts moto and the proxy, or says why not: `None` means skip.
    pub fn start() -> Option<S3Server> {
        let server = match std::env::var_os("PCHRONICLE_S3_SERVER") {
            Some(server) if Path::new(&server).exists() => server,
            _ => {
                let why =
                    "PCHRONICLE_S3_SERVER does not name moto_server (scripts/test.sh installs it)";
                assert!(
                    !required(),
                    "an S3 server is required (PCHRONICLE_REQUIRE_S3=1): {why}"
                );
                eprintln!("skipping: {why}; set PCHRONICLE_REQUIRE_S3=1 to fail instead");
                return None;
            }
        };
        let moto_port = free_port();
        let moto = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", moto_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let state = Arc::new(Mutex::new(State {
            fault: Fault::None,
            counts: Counts::default(),
            got: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_port = listener.local_addr().unwrap().port();
        {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let state = Arc::clone(&state);
                    std::thread::spawn(move || serve(client, moto_port, &state));
                }
            });
        }
        Some(S3Server {
            moto,
            moto_port,
            proxy_port,
            state,
            stop,
        })
    }

    /// The endpoint clients are given (the counting proxy).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.proxy_port)
    }

    /// moto itself, past the proxy (benchmarks of transfer speed).
    pub fn direct_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.moto_port)
    }

    /// The environment a pchronicle process is given to reach `endpoint`.
    pub fn env_for(endpoint: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", endpoint.to_string()),
            ("AWS_ACCESS_KEY_ID", "pchronicle-test".into()),
            ("AWS_SECRET_ACCESS_KEY", "pchronicle-test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    pub fn env(&self) -> Vec<(&'static str, String)> {
        S3Server::env_for(&self.endpoint())
    }

    pub fn counts(&self) -> Counts {
        self.state.lock().unwrap().counts
    }

    /// The keys of the whole-object GETs sent since `before` was taken.
    pub fn gets_since(&self, before: &Counts) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state.got[before.gets as usize..].to_vec()
    }

    /// Every object below `prefix/` with its last-modified time (seconds
    /// and nanoseconds), as the server lists it.
    pub fn modified(&self, bucket: &str, prefix: &str) -> Vec<(String, i64, u32)> {
        let (status, body) = request(
            self.moto_port,
            "GET",
            &format!(
                "/{bucket}?list-type=2&max-keys=1000&prefix={}",
                encode(&format!("{prefix}/"))
            ),
            &[],
        );
        assert_eq!(status, 200);
        let body = String::from_utf8(body).unwrap();
        assert!(!body.contains("<IsTruncated>true"), "more than 1000 keys");
        body.split("<Contents>")
            .skip(1)
            .map(|c| {
                let field = |name: &str| {
                    let start = c.find(&format!("<{name}>")).unwrap() + name.len() + 2;
                    let end = c[start..].find('<').unwrap() + start;
                    unescape(&c[start..end])
                };
                let (secs, nanos) = parse_time(&field("LastModified"));
                (field("Key"), secs, nanos)
            })
            .collect()
    }

    pub fn set_fault(&self, fault: Fault) {
        self.state.lock().unwrap().fault = fault;
    }

    /// Creates `bucket` (moto takes unsigned requests).
    pub fn create_bucket(&self, bucket: &str) {
        let status = direct(self.moto_port, "PUT", &format!("/{bucket}"), &[]);
        assert_eq!(status, 200, "creating bucket {bucket}");
    }

    /// Stores `bytes` at `key` of `bucket`.
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let status = direct(
            self.moto_port,
            "PUT",
            &format!("/{bucket}/{}", encode(key)),
            bytes,
        );
        assert_eq!(status, 200, "putting {key}");
    }

    /// Removes `key` of `bucket`.
    pub fn delete(&self, bucket: &str, key: &str) {
        let status = direct(
            self.moto_port,
            "DELETE",
            &format!("/{bucket}/{}", encode(key)),
            &[],
        );
        assert!(status == 204 || status == 200, "deleting {key}: {status}");
    }

    /// Uploads every regular file below `root` to `bucket` under `prefix`
    /// (symlinks and other types are skipped, as a sync tool skips them).
    pub fn upload_tree(&self, root: &Path, bucket: &str, prefix: &str) {
        for (rel, bytes) in files_below(root) {
            let key = if prefix.is_empty() {
                rel
            } else {
                format!("{prefix}/{rel}")
            };
            self.put(bucket, &key, &bytes);
        }
    }
}

impl S3Server {
    /// Uploads the tree at `root` under `prefix`, then gives every local
    /// file the modification time its object shows, as a sync tool copying
    /// the bucket down does: `root` is then a local copy of the remote tree.
    pub fn mirror(&self, root: &Path, bucket: &str, prefix: &str) {
        self.upload_tree(root, bucket, prefix);
        for (key, secs, nanos) in self.modified(bucket, prefix) {
            let rel = key.strip_prefix(&format!("{prefix}/")).unwrap();
            let time = filetime::FileTime::from_unix_time(secs, nanos);
            filetime::set_file_mtime(root.join(rel), time).unwrap();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.proxy_port));
        let _ = self.moto.kill();
        let _ = self.moto.wait();
    }
}

/// Every regular file below `root`, relative path and bytes, sorted.
pub fn files_below(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let rel = entry
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                out.push((rel, std::fs::read(entry.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A key as a URL path: every byte but unreserved ones and `/` escaped.
fn encode(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// XML text unescaped.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` as seconds and nanoseconds since the
/// epoch.
fn parse_time(text: &str) -> (i64, u32) {
    let n = |range: std::ops::Range<usize>| text[range].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (hh, mm, ss) = (n(11..13), n(14..16), n(17..19));
    let fraction = text[19..].trim_end_matches('Z').trim_start_matches('.');
    let nanos = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}")[..9].parse::<u32>().unwrap()
    };
    // Days from the civil date (proleptic Gregorian).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + hh * 3_600 + mm * 60 + ss, nanos)
}

/// One request straight to moto; its status.
fn direct(port: u16, method: &str, target: &str, body: &[u8]) -> u16 {
    request(port, method, target, body).0
}

/// One request straight to moto; its status and body.
fn request(port: u16, method: &str, target: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let line = String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |p| p + 4);
    let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
    let mut body = answer[split..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

/// A chunked body's bytes.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap().trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
    out
}

/// Reads one HTTP request head and body from `client`.
fn read_request(client: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    client.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn kind_of(head: &str, counts: &mut Counts, got: &mut Vec<String>) {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let ranged = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("range:"));
    match method {
        "GET" if target.contains("list-type=") => counts.lists += 1,
        "GET" if ranged => counts.ranged_gets += 1,
        "GET" => {
            counts.gets += 1;
            got.push(target.to_string());
        }
        "HEAD" => counts.heads += 1,
        _ => counts.writes += 1,
    }
}

/// Serves one client connection: each request is counted, then failed or
/// passed to moto on a connection of its own.
fn serve(mut client: TcpStream, moto_port: u16, state: &Mutex<State>) {
    while let Some((head, body)) = read_request(&mut client) {
        let fault = {
            let mut state = state.lock().unwrap();
            let state = &mut *state;
            kind_of(&head, &mut state.counts, &mut state.got);
            let fault = state.fault;
            match &mut state.fault {
                Fault::ServerErrors(n) | Fault::Truncate(n) => {
                    *n -= 1;
                    if *n == 0 {
                        state.fault = Fault::None;
                    }
                }
                _ => {}
            }
            fault
        };
        let failing = match fault {
            Fault::ServerErrors(_) => true,
            Fault::FailWhere(text) => head
                .lines()
                .next()
                .is_some_and(|line| line.replace("%2F", "/").contains(text)),
            _ => false,
        };
        if let Fault::DenyWhere(text, status, code) = fault {
            let line = head.lines().next().unwrap_or_default().replace("%2F", "/");
            if line.contains(text) {
                let body = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
                     <Message>refused by the test proxy</Message></Error>"
                );
                let reason = if status == 400 {
                    "Bad Request"
                } else {
                    "Forbidden"
                };
                let answer = format!(
                    "HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if client.write_all(answer.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
        }
        match fault {
            Fault::Down => return,
            Fault::Latency(delay) => std::thread::sleep(delay),
            _ if failing => {
                let answer = "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n";
                if client.write_all(answer.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
            _ => {}
        }
        // One upstream connection per request, closed after its answer.
        let (dropped, head): (&[&str], String) = match fault {
            Fault::AnswerWith(asked, other) => (
                &["connection:", "if-match:"],
                head.replacen(&format!(" {asked} "), &format!(" {other} "), 1),
            ),
            _ => (&["connection:"], head),
        };
        let head = head
            .lines()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                !l.is_empty() && !dropped.iter().any(|d| l.starts_with(d))
            })
            .map(|l| format!("{l}\r\n"))
            .collect::<String>()
            + "Connection: close\r\n\r\n";
        let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", moto_port)) else {
            return;
        };
        if upstream.write_all(head.as_bytes()).is_err() || upstream.write_all(&body).is_err() {
            return;
        }
        let mut answer = Vec::new();
        if upstream.read_to_end(&mut answer).is_err() {
            return;
        }
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(answer.len(), |p| p + 4);
        if let Fault::Truncate(_) = fault {
            let cut = split + (answer.len() - split) / 2;
            let _ = client.write_all(&answer[..cut]);
            return;
        }
        if client.write_all(&answer).is_err() {
            return;
        }
        // moto closes after each answer (Connection: close was asked),
        // so the answer says so and the client opens a new connection.
        return;
    }
}
