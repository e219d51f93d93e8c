//! Record stores: per-session sealed shards.
//!
//! A record store is a directory where agent sessions append their records.
//! Each session writes to its current *shard*, `<session>.<token>.jsonl`
//! (one record per line) or `<session>.<token>.jsonseq` (packed: the file
//! starts with U+001E and every record is followed by one), where the token
//! is 8 random lowercase hex digits. Every append is a single `write(2)` of
//! the record and its separator on an `O_APPEND` descriptor; nothing is
//! ever rewritten. When the rotation rule ([`rotation::reusable`]) says the
//! current shard is sealed, the writer starts a new one.
//!
//! The writer's state (which shard, at which size) is a hint kept under
//! the warehouse's `.pchronicle/shards/`, replaced by temp + rename. The
//! warehouse is the nearest directory at or above the store that holds a
//! `.pchronicle/` directory, or the store itself. A [`Writer`] keeps the
//! state in memory between appends and writes the hint lazily.
//!
//! Legacy `<session>.jsonl` files (no token) are read like any record file
//! and never appended to. Readers need nothing from here: a shard is a
//! record file ([`crate::records`]).

pub mod rotation;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::catalog::STATE_DIR;
use crate::error::{Error, ErrorCode, Result};
use crate::sidecar::status::InvalidatedSidecar;
use crate::warehouse::{Dir, Replace};
use rotation::{STATE_SCHEMA, Sealed, ShardState};

/// Setting this to `1` makes writers pack by default.
pub const PACKED_ENV: &str = "PCHRONICLE_PACKED_RECORDS";

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_BYTES: usize = 200;

use crate::records::RECORD_SEPARATOR;

/// The two shard layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardFormat {
    /// `.jsonl`: each record followed by `\n`.
    Line,
    /// `.jsonseq`: U+001E first, then each record followed by U+001E.
    Packed,
}

impl ShardFormat {
    /// Packed when asked, or when `PCHRONICLE_PACKED_RECORDS=1`.
    pub fn choose(packed: bool) -> ShardFormat {
        if packed || std::env::var(PACKED_ENV).is_ok_and(|v| v == "1") {
            ShardFormat::Packed
        } else {
            ShardFormat::Line
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ShardFormat::Line => "jsonl",
            ShardFormat::Packed => "jsonseq",
        }
    }
}

/// A validated session id: not empty, at most [`MAX_SESSION_BYTES`], no
/// `/` or NUL, not starting with a dot. Dots elsewhere are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionId(String);

impl SessionId {
    pub fn parse(text: &str) -> Result<SessionId> {
        let why = if text.is_empty() {
            Some("it is empty")
        } else if text.len() > MAX_SESSION_BYTES {
            Some("it is longer than 200 bytes")
        } else if text.contains('/') || text.contains('\0') {
            Some("it contains `/` or NUL")
        } else if text.starts_with('.') {
            Some("it starts with a dot")
        } else if text.chars().any(char::is_control) {
            Some("it contains a control character")
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::new(
                ErrorCode::SessionInvalid,
                format!("session id {text:?} is not usable: {why}"),
            )),
            None => Ok(SessionId(text.to_string())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A shard's file name, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardName {
    pub session: String,
    /// `None` for a legacy `<session>.jsonl`.
    pub token: Option<String>,
    pub format: ShardFormat,
}

impl ShardName {
    /// Parses `<session>.<token>.jsonl|jsonseq` or a legacy
    /// `<session>.jsonl`. The session is the name minus its last two
    /// dot-separated parts when the second-to-last is a token, else minus
    /// the extension.
    pub fn parse(name: &str) -> Option<ShardName> {
        let (stem, format) = if let Some(stem) = name.strip_suffix(".jsonl") {
            (stem, ShardFormat::Line)
        } else if let Some(stem) = name.strip_suffix(".jsonseq") {
            (stem, ShardFormat::Packed)
        } else {
            return None;
        };
        let (session, token) = match stem.rsplit_once('.') {
            Some((session, token)) if is_token(token) => (session, Some(token.to_string())),
            _ => (stem, None),
        };
        SessionId::parse(session).ok()?;
        Some(ShardName {
            session: session.to_string(),
            token,
            format,
        })
    }

    pub fn file_name(&self) -> String {
        match &self.token {
            Some(token) => format!("{}.{token}.{}", self.session, self.format.extension()),
            None => format!("{}.{}", self.session, self.format.extension()),
        }
    }
}

fn is_token(text: &str) -> bool {
    text.len() == 8
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A fresh token: 8 random lowercase hex digits.
fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 4];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks that `record` is one JSON value on one line; returns it without
/// surrounding whitespace.
pub fn validate_record(record: &[u8]) -> Result<&[u8]> {
    let trimmed = record.trim_ascii();
    if trimmed.is_empty() {
        return Err(Error::new(ErrorCode::RecordInvalid, "the record is empty"));
    }
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(trimmed) {
        return Err(Error::new(
            ErrorCode::RecordInvalid,
            format!("the record is not one JSON value: {e}"),
        ));
    }
    if trimmed.contains(&b'\n') {
        return Err(Error::new(
            ErrorCode::RecordInvalid,
            "the record spans several lines; write it on one line",
        ));
    }
    Ok(trimmed)
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppendReport {
    /// The shard the last record went to.
    pub shard: PathBuf,
    pub format: ShardFormat,
    pub records: usize,
    pub bytes: u64,
    /// Shards this call started (the rule sealed the previous one).
    pub new_shards: Vec<PathBuf>,
    /// Sidecar indexes the appends made stale, with the command that
    /// rebuilds each; empty unless an index was built over the shard while
    /// this call was appending to it.
    pub invalidated_sidecars: Vec<InvalidatedSidecar>,
}

/// Appends one record to `session`'s current shard in `store`.
pub fn append_record(store: &Path, session: &str, record: &[u8]) -> Result<AppendReport> {
    append_records(store, session, &[record], ShardFormat::choose(false))
}

/// Appends records, in order, each with its own `write(2)`. Every record
/// is checked first: if one is not valid JSON, nothing is written.
pub fn append_records(
    store: &Path,
    session: &str,
    records: &[&[u8]],
    format: ShardFormat,
) -> Result<AppendReport> {
    let records = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            validate_record(r).map_err(|mut e| {
                if records.len() > 1 {
                    e.message = format!("record {}: {}", i + 1, e.message);
                }
                e
            })
        })
        .collect::<Result<Vec<&[u8]>>>()?;
    let mut writer = Writer::open(store, session, format)?;
    let mut report = AppendReport {
        shard: PathBuf::new(),
        format,
        records: 0,
        bytes: 0,
        new_shards: Vec::new(),
        invalidated_sidecars: Vec::new(),
    };
    for record in records {
        let appended = writer.append(record)?;
        if appended.started {
            report.new_shards.push(appended.shard.clone());
        }
        for sidecar in appended.invalidated {
            if !report.invalidated_sidecars.contains(&sidecar) {
                report.invalidated_sidecars.push(sidecar);
            }
        }
        report.shard = appended.shard;
        report.records += 1;
        report.bytes += appended.written;
    }
    writer.flush()?;
    Ok(report)
}

/// How stale a writer lets the state hint on disk become while it keeps
/// appending (it is always written when the writer starts a shard, on
/// [`Writer::flush`] and when the writer is dropped).
pub const HINT_INTERVAL: Duration = Duration::from_millis(100);

/// One session's writer in one store.
///
/// A writer remembers where its last append ended, and asks the rotation
/// rule before every append with that knowledge; it reads the state hint
/// only for its first append. It replaces the hint when it starts a shard,
/// at most every [`HINT_INTERVAL`] otherwise, and when flushed or dropped,
/// so appending costs no file creation or rename in the common case. A hint
/// left stale by a crash costs the next writer one new shard, never an
/// append to a sealed one.
#[derive(Debug)]
pub struct Writer {
    store: PathBuf,
    session: SessionId,
    format: ShardFormat,
    state_path: PathBuf,
    /// The directory holding the hint, opened once without following a
    /// symlink anywhere below the warehouse.
    state_dir: Dir,
    state_name: String,
    /// Where this writer's last append ended (`None` before the first).
    memory: Option<ShardState>,
    /// The memory differs from the hint on disk.
    dirty: bool,
    flushed_at: Instant,
}

/// Where one record went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub shard: PathBuf,
    pub written: u64,
    /// True when this append started the shard.
    pub started: bool,
    /// The state the writer leaves behind.
    pub state: ShardState,
    /// Sidecar indexes this write made stale (see [`continue_shard`]).
    pub invalidated: Vec<InvalidatedSidecar>,
}

impl Writer {
    /// A writer for `session` in `store` (created if missing).
    pub fn open(store: &Path, session: &str, format: ShardFormat) -> Result<Writer> {
        let session = SessionId::parse(session)?;
        let store = open_store(store)?;
        let (state_dir, state_name) = open_state_dir(&store, &session)?;
        let state_path = state_dir.path().join(&state_name);
        Ok(Writer {
            store,
            session,
            format,
            state_path,
            state_dir,
            state_name,
            memory: None,
            dirty: false,
            flushed_at: Instant::now(),
        })
    }

    /// The state hint as it is on disk now (`None` if unusable).
    pub fn load_state(&self) -> Option<ShardState> {
        let (bytes, _) = self
            .state_dir
            .read_capped(&self.state_name, HINT_CAP)
            .ok()??;
        rotation::parse_state(&bytes)
    }

    /// Replaces the state hint on disk (temp file + rename).
    pub fn save_state(&self, state: &ShardState) -> Result<()> {
        let bytes = serde_json::to_vec(state).expect("a state always serialises");
        let how = Replace {
            durable: false,
            mode: 0o600,
            keep_owner: false,
            sweep_temps: false,
            expect: None,
        };
        self.state_dir
            .replace(&self.state_name, &bytes, how)
            .map_err(|e| Error::io(&self.state_path, &e))
    }

    /// Appends one already validated record (see [`validate_record`]).
    pub fn append(&mut self, record: &[u8]) -> Result<Appended> {
        if self.memory.is_none() {
            self.memory = self.load_state();
        }
        let appended = self.append_after(self.memory.as_ref(), record)?;
        self.memory = Some(appended.state.clone());
        self.dirty = true;
        if appended.started || self.flushed_at.elapsed() >= HINT_INTERVAL {
            self.flush()?;
        }
        Ok(appended)
    }

    /// Writes the state hint if this writer's memory is newer.
    pub fn flush(&mut self) -> Result<()> {
        if let (true, Some(state)) = (self.dirty, &self.memory) {
            self.save_state(state)?;
            self.dirty = false;
            self.flushed_at = Instant::now();
        }
        Ok(())
    }

    /// Appends one record as a writer holding `state` would, touching
    /// neither this writer's memory nor the hint: the rule and the write.
    pub fn append_after(&self, state: Option<&ShardState>, record: &[u8]) -> Result<Appended> {
        append_one(&self.store, &self.session, self.format, state, record)
    }

    pub fn state_path(&self) -> &Path {
        &self.state_path
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::warn!("{}", e.render());
        }
    }
}

/// One record into the shard the rule allows, or into a new one.
fn append_one(
    store: &Path,
    session: &SessionId,
    format: ShardFormat,
    state: Option<&ShardState>,
    record: &[u8],
) -> Result<Appended> {
    match rotation::reusable(state, session.as_str(), format, store) {
        Ok(shard) => {
            let state = state.expect("a reusable shard comes from a state");
            continue_shard(&store.join(shard), state, format, record)
        }
        Err(sealed) => {
            log::debug!(
                "session {}: new shard: {}",
                session.as_str(),
                describe(sealed)
            );
            start_shard(store, session, format, record)
        }
    }
}

/// Appends to the shard the rule just allowed. An index built over it
/// between the rule's check and the write is made stale by the write; the
/// append then reports it (and the next append seals the shard).
fn continue_shard(
    path: &Path,
    state: &ShardState,
    format: ShardFormat,
    record: &[u8],
) -> Result<Appended> {
    // No O_CREAT: a shard that vanished since the check is not recreated
    // under its old name.
    let file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, &e))?;
    let mut buf = Vec::with_capacity(record.len() + 1);
    buf.extend_from_slice(record);
    buf.push(separator(format));
    let written = write_once(&file, path, &buf)?;
    let invalidated = if crate::sidecar::covers(path) {
        crate::sidecar::status::invalidated(path).unwrap_or_else(|e| {
            log::warn!("{}", e.render());
            Vec::new()
        })
    } else {
        Vec::new()
    };
    Ok(Appended {
        shard: path.to_path_buf(),
        state: ShardState {
            size: state.size + written,
            ..state.clone()
        },
        written,
        started: false,
        invalidated,
    })
}

/// Starts a new shard with `record` as its first record.
fn start_shard(
    store: &Path,
    session: &SessionId,
    format: ShardFormat,
    record: &[u8],
) -> Result<Appended> {
    let (path, file) = create_shard(store, session, format)?;
    let mut buf = Vec::with_capacity(record.len() + 2);
    if format == ShardFormat::Packed {
        buf.push(RECORD_SEPARATOR);
    }
    buf.extend_from_slice(record);
    buf.push(separator(format));
    let written = write_once(&file, &path, &buf)?;
    let meta = file.metadata().map_err(|e| Error::io(&path, &e))?;
    let shard = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a shard name is UTF-8")
        .to_string();
    Ok(Appended {
        shard: path,
        state: ShardState {
            schema: STATE_SCHEMA,
            shard,
            size: written,
            dev: meta.dev(),
            ino: meta.ino(),
        },
        written,
        started: true,
        invalidated: Vec::new(),
    })
}

fn separator(format: ShardFormat) -> u8 {
    match format {
        ShardFormat::Line => b'\n',
        ShardFormat::Packed => RECORD_SEPARATOR,
    }
}

/// One `write(2)`; a short write (disk full) is an error, and leaves a torn
/// tail that seals the shard (its size no longer matches any state).
fn write_once(mut file: &File, path: &Path, buf: &[u8]) -> Result<u64> {
    let n = file.write(buf).map_err(|e| Error::io(path, &e))?;
    if n != buf.len() {
        return Err(Error::at(
            ErrorCode::Io,
            path,
            format!("short write: {n} of {} bytes", buf.len()),
        ));
    }
    Ok(n as u64)
}

/// Creates a shard with a fresh token (retrying on the rare collision).
fn create_shard(store: &Path, session: &SessionId, format: ShardFormat) -> Result<(PathBuf, File)> {
    for _ in 0..16 {
        let token = new_token().map_err(|e| Error::io(store, &e))?;
        let name = ShardName {
            session: session.as_str().to_string(),
            token: Some(token),
            format,
        };
        let path = store.join(name.file_name());
        match OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&path, &e)),
        }
    }
    Err(Error::at(
        ErrorCode::Io,
        store,
        "could not find a free shard name after 16 tries",
    ))
}

/// The store directory, created if missing, in canonical form.
fn open_store(store: &Path) -> Result<PathBuf> {
    match fs::symlink_metadata(store) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Error::at(
                ErrorCode::PathInvalid,
                store,
                "a record store must be a directory",
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(store).map_err(|e| Error::io(store, &e))?;
        }
        Err(e) => return Err(Error::io(store, &e)),
    }
    fs::canonicalize(store).map_err(|e| Error::io(store, &e))
}

/// A state hint is a few hundred bytes; more is not a hint.
const HINT_CAP: u64 = 64 << 10;

/// Where the writer state of `session` in `store` lives:
/// `<warehouse>/.pchronicle/shards/<store relative to it>/<session>.json`.
pub fn state_path(store: &Path, session: &SessionId) -> Result<PathBuf> {
    open_state_dir(store, session).map(|(dir, name)| dir.path().join(name))
}

/// The directory of the writer state of `session` in `store`, created and
/// opened one component at a time from the warehouse (never through a
/// symlink), and the hint's name in it.
fn open_state_dir(store: &Path, session: &SessionId) -> Result<(Dir, String)> {
    let warehouse = store
        .ancestors()
        .find(|dir| fs::symlink_metadata(dir.join(STATE_DIR)).is_ok_and(|m| m.is_dir()))
        .unwrap_or(store);
    let rel = store.strip_prefix(warehouse).unwrap_or(Path::new(""));
    let shown = warehouse.join(STATE_DIR).join("shards").join(rel);
    let opened = (|| {
        let mut dir = Dir::open_root(warehouse)?
            .create_dir(STATE_DIR, 0o755)?
            .create_dir("shards", 0o755)?;
        for name in crate::warehouse::components(rel)? {
            dir = dir.create_dir(name, 0o755)?;
        }
        Ok::<_, std::io::Error>(dir)
    })()
    .map_err(|e| Error::io(&shown, &e))?;
    Ok((opened, format!("{}.json", session.as_str())))
}

/// Why the rule sealed a shard, for logs and tests.
pub fn describe(sealed: Sealed) -> &'static str {
    match sealed {
        Sealed::NoState => "no usable writer state",
        Sealed::Missing => "the shard is gone or replaced",
        Sealed::SizeMoved => "the shard's size is not the one the writer left",
        Sealed::Full => "the shard reached 2 MiB",
        Sealed::FormatChanged => "the shard's format is not the one asked for",
        Sealed::Indexed => "a sidecar index covers the shard",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_round_trip_and_yield_their_session() {
        let n = ShardName::parse("s-1.0a1b2c3d.jsonl").unwrap();
        assert_eq!(
            (n.session.as_str(), n.token.as_deref(), n.format),
            ("s-1", Some("0a1b2c3d"), ShardFormat::Line)
        );
        assert_eq!(n.file_name(), "s-1.0a1b2c3d.jsonl");
        let dotted = ShardName::parse("run.2026.11.deadbeef.jsonseq").unwrap();
        assert_eq!(dotted.session, "run.2026.11");
        assert_eq!(dotted.format, ShardFormat::Packed);
        let legacy = ShardName::parse("agent-old.jsonl").unwrap();
        assert_eq!((legacy.session.as_str(), legacy.token), ("agent-old", None));
        // A second-to-last part that is not a token belongs to the session.
        assert_eq!(
            ShardName::parse("a.DEADBEEF.jsonl").unwrap().session,
            "a.DEADBEEF"
        );
        assert_eq!(
            ShardName::parse("a.0a1b2c3.jsonl").unwrap().session,
            "a.0a1b2c3"
        );
        assert!(ShardName::parse("a.txt").is_none());
        assert!(ShardName::parse(".jsonl").is_none());
    }

    #[test]
    fn session_ids_are_validated() {
        for good in ["s", "019a-claude", "run.2026.11", &"x".repeat(200)] {
            assert!(SessionId::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "a\0b",
            ".hidden",
            "..",
            "tab\there",
            &"x".repeat(201),
        ] {
            assert_eq!(
                SessionId::parse(bad).unwrap_err().code,
                ErrorCode::SessionInvalid,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn records_must_be_one_json_value_on_one_line() {
        assert_eq!(validate_record(b"  {\"a\":1}\r\n").unwrap(), b"{\"a\":1}");
        assert_eq!(validate_record(b"42").unwrap(), b"42");
        for bad in [
            &b""[..],
            b"   ",
            b"{",
            b"{} {}",
            b"{\"a\":\n1}",
            b"\x1e{}",
            b"nul",
        ] {
            assert_eq!(
                validate_record(bad).unwrap_err().code,
                ErrorCode::RecordInvalid,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// An index built over a shard between the rule's check and the write
    /// (the only way an append can change an indexed record file) is
    /// reported as invalidated, with its rebuild command; without one,
    /// nothing is reported.
    #[test]
    fn an_append_reports_the_sidecars_it_made_stale() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let first = append_record(&store, "s", br#"{"id":"a"}"#).unwrap();
        assert!(first.invalidated_sidecars.is_empty());
        let mut writer = Writer::open(&store, "s", ShardFormat::Line).unwrap();
        let state = writer.load_state().unwrap();
        let shard =
            store.join(rotation::reusable(Some(&state), "s", ShardFormat::Line, &store).unwrap());

        let plain = continue_shard(&shard, &state, ShardFormat::Line, br#"{"id":"b"}"#).unwrap();
        assert!(plain.invalidated.is_empty());

        let key = vec!["id".to_string()];
        crate::sidecar::build_index(&shard, &key).unwrap();
        let raced =
            continue_shard(&shard, &plain.state, ShardFormat::Line, br#"{"id":"c"}"#).unwrap();
        assert_eq!(
            raced.invalidated,
            vec![InvalidatedSidecar {
                file: shard.clone(),
                index: crate::sidecar::build::index_path(&shard, &key),
                key: key.clone(),
                rebuild: crate::sidecar::rebuild_command(&shard, &key),
            }]
        );
        let err = crate::sidecar::lookup::lookup(&shard, &key, &["c".to_string()]).unwrap_err();
        assert_eq!(err.code, ErrorCode::IndexStale);

        // The next append does not touch the indexed shard again.
        writer.memory = Some(raced.state);
        let next = writer.append(br#"{"id":"d"}"#).unwrap();
        assert!(next.started && next.invalidated.is_empty());
    }

    #[test]
    fn tokens_are_eight_lowercase_hex_digits() {
        let a = new_token().unwrap();
        assert!(is_token(&a), "{a}");
        assert_ne!(a, new_token().unwrap());
    }
}
