//! The writer: one session's appends to its current shard, and the state
//! hint that says which shard that is.
//!
//! Before every append the rotation rule ([`super::rotation::reusable`])
//! is asked whether the shard the writer left may take one more record;
//! if not, a new shard with a fresh token is created (`O_EXCL`). Each
//! record and its separator go out in one `write(2)` on an `O_APPEND`
//! descriptor. The hint lives under the warehouse's `.pchronicle/shards/`,
//! reached one component at a time without following a symlink, and is
//! replaced by temp + rename.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::git::Repo;
use super::names::new_token;
use super::rotation::{self, Git, STATE_SCHEMA, ShardState};
use super::{RECORD_SEPARATOR, SessionId, ShardFormat, ShardName, describe};
use crate::error::{Error, ErrorCode, Result};
use crate::logbudget::warn_limited;
use crate::sidecar::status::InvalidatedSidecar;
use crate::warehouse::{Dir, Replace, STATE_DIR};

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
    /// The git work tree the store lives in.
    repo: Option<Repo>,
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
        let repo = Repo::discover(&store);
        Ok(Writer {
            store,
            session,
            format,
            state_path,
            state_dir,
            state_name,
            repo,
            memory: None,
            dirty: false,
            flushed_at: Instant::now(),
        })
    }

    /// The state hint as it is on disk now (`None` if unusable). What
    /// spares a search (the store listing and git's index identity) is
    /// kept only from a hint this user wrote and no one else may replace;
    /// from any other, the writer searches again.
    pub fn load_state(&self) -> Option<ShardState> {
        let (bytes, stat) = self
            .state_dir
            .read_capped(&self.state_name, HINT_CAP)
            .ok()??;
        let mut state = rotation::parse_state(&bytes)?;
        if !stat.is_private() || !self.state_dir.stat().is_private() {
            state.listed = None;
            if let Some(git) = &mut state.git {
                git.index = None;
            }
        }
        Some(state)
    }

    /// Replaces the state hint on disk (temp file + rename).
    pub fn save_state(&self, state: &ShardState) -> Result<()> {
        let bytes = serde_json::to_vec(state).expect("a state always serialises");
        self.state_dir
            .replace(&self.state_name, &bytes, Replace::hint())
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
        let git = self.repo.as_ref().map(|repo| Git {
            repo,
            facts: repo.facts(),
        });
        append_one(
            &self.store,
            &self.session,
            self.format,
            state,
            git.as_ref(),
            record,
        )
    }

    pub fn state_path(&self) -> &Path {
        &self.state_path
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            warn_limited!("{}", e.render());
        }
    }
}

/// One record into the shard the rule allows, or into a new one.
fn append_one(
    store: &Path,
    session: &SessionId,
    format: ShardFormat,
    state: Option<&ShardState>,
    git: Option<&Git<'_>>,
    record: &[u8],
) -> Result<Appended> {
    match rotation::reusable(state, session.as_str(), format, store, git) {
        Ok(reuse) => {
            let state = state.expect("a reusable shard comes from a state");
            let state = ShardState {
                listed: reuse.listed,
                git: reuse.git,
                ..state.clone()
            };
            continue_shard(&store.join(reuse.shard), &state, format, record)
        }
        Err(sealed) => {
            if let Some(Git { facts: Err(e), .. }) = git {
                warn_limited!("session {}: {e}", session.as_str());
            }
            log::debug!(
                "session {}: new shard: {}",
                session.as_str(),
                describe(sealed)
            );
            // A new shard has not been searched for in git's index yet.
            let git = git
                .and_then(|g| g.facts.as_ref().ok())
                .map(|f| f.state(None));
            start_shard(store, session, format, git, record)
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
            warn_limited!("{}", e.render());
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
    git: Option<super::git::GitState>,
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
            listed: None,
            git,
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
        let mut dir = crate::warehouse::open_state(&Dir::open_root(warehouse)?)?
            .create_dir("shards", 0o755)?;
        for name in crate::warehouse::components(rel)? {
            dir = dir.create_dir(name, 0o755)?;
        }
        Ok::<_, std::io::Error>(dir)
    })()
    .map_err(|e| Error::io(&shown, &e))?;
    Ok((opened, format!("{}.json", session.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::append_record;

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
        let reuse = rotation::reusable(Some(&state), "s", ShardFormat::Line, &store, None).unwrap();
        let shard = store.join(reuse.shard);

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
}
