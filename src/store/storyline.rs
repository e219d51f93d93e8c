//! `storyline/v1` leaves: a directory with a `CURRENT` file naming the
//! current generation, whose records live in `generations/<name>/` as line
//! (`.jsonl`) or packed (`.jsonseq`) files.
//!
//! A generation is treated as immutable once `CURRENT` names it: a writer
//! builds a new generation and then replaces `CURRENT`. So the fingerprint
//! `storyline:generation:<name>` identifies the revision, and counting reads
//! only the current generation's files (not subdirectories, not symlinks).

use std::ops::ControlFlow;

use super::{LeafScan, LeafStore, RecordCounter, RevisionAt};
use crate::error::{Error, ErrorCode, Result};
use crate::records::read::{self, RecordSink, Resume, Wanted};
use crate::records::timestamp::Micros;
use crate::records::{RecordFormat, RecordStats};
use crate::warehouse::{self, Dir, Stat};

pub const FORMAT: &str = "storyline/v1";
pub const CURRENT_FILE: &str = "CURRENT";
pub const GENERATIONS_DIR: &str = "generations";

pub struct StorylineStore;

impl StorylineStore {
    /// The name of the current generation and its open directory. The
    /// generation is reached from `dir` without following a symlink, so a
    /// planted `generations/<name>` link is refused, not counted.
    pub fn current_generation(dir: &Dir) -> Result<(String, Dir)> {
        let name = current_name(dir)?;
        let opened = dir
            .open_dir(GENERATIONS_DIR)
            .and_then(|generations| generations.open_dir(&name));
        match opened {
            Ok(opened) => Ok((name, opened)),
            Err(e) => Err(generation_missing(dir, &name, e)),
        }
    }
}

/// The generation `CURRENT` names, checked to be a plain name (not that
/// the generation exists).
fn current_name(dir: &Dir) -> Result<String> {
    let current = dir.path().join(CURRENT_FILE);
    let invalid =
        |message: String| Error::at(ErrorCode::StorylineCurrentInvalid, &current, message);
    let text = match dir.read_capped(CURRENT_FILE, warehouse::POINTER_CAP) {
        Ok(Some((bytes, _))) => {
            String::from_utf8(bytes).map_err(|_| invalid("CURRENT is not valid UTF-8".into()))?
        }
        Ok(None) => return Err(invalid("CURRENT is missing".into())),
        Err(e) => {
            return Err(e.into_error(&current, "a pointer file", |e| invalid(e.to_string())));
        }
    };
    let name = text.lines().next().unwrap_or("").trim();
    if !warehouse::is_plain_name(name.as_bytes()) {
        return Err(invalid(format!("{name:?} is not a generation name")));
    }
    Ok(name.to_string())
}

fn generation_missing(dir: &Dir, name: &str, e: std::io::Error) -> Error {
    Error::at(
        ErrorCode::StorylineGenerationMissing,
        dir.path().join(GENERATIONS_DIR).join(name),
        format!("CURRENT names generation {name:?}, which is not a directory of the leaf ({e})"),
    )
}

/// The generations in `generations/` with the time (seconds and
/// nanoseconds) their directory was last changed, oldest first, then by
/// name.
fn generations_by_time(dir: &Dir) -> Result<Vec<((i64, i64), String)>> {
    let path = dir.path().join(GENERATIONS_DIR);
    let generations = dir
        .open_dir(GENERATIONS_DIR)
        .map_err(|e| Error::io(&path, &e))?;
    let entries = generations.entries().map_err(|e| Error::io(&path, &e))?;
    let mut kept = Vec::new();
    for entry in entries {
        if !entry.is_dir || !warehouse::is_plain_name(&entry.name) {
            continue;
        }
        let Ok(name) = String::from_utf8(entry.name) else {
            continue;
        };
        if let Ok(meta) = generations.stat_at(&name) {
            kept.push(((meta.mtime, meta.mtime_nsec), name));
        }
    }
    kept.sort();
    Ok(kept)
}

/// A file time as microseconds since the epoch.
fn micros_of(secs: i64, nanos: i64) -> Micros {
    secs.saturating_mul(1_000_000).saturating_add(nanos / 1_000)
}

fn fingerprint_of(generation: &str) -> String {
    format!("storyline:generation:{generation}")
}

impl LeafStore for StorylineStore {
    fn format(&self) -> &'static str {
        FORMAT
    }

    fn markers(&self) -> &'static [&'static str] {
        &[CURRENT_FILE]
    }

    /// The fingerprint looks for the current generation in `generations/`.
    fn classify_reads(&self) -> &'static [&'static str] {
        &[CURRENT_FILE, GENERATIONS_DIR]
    }

    fn detect(&self, dir: &Dir) -> Result<bool> {
        Ok(dir.stat_at(CURRENT_FILE).is_ok_and(|m| m.is_file()))
    }

    /// Checks that the generation exists without opening it (on object
    /// storage, opening it would list it).
    fn fingerprint(&self, dir: &Dir) -> Result<String> {
        let name = current_name(dir)?;
        dir.open_dir(GENERATIONS_DIR)
            .and_then(|generations| generations.check_dir(&name))
            .map_err(|e| generation_missing(dir, &name, e))?;
        Ok(fingerprint_of(&name))
    }

    fn scan(&self, dir: &Dir, counter: &dyn RecordCounter) -> Result<LeafScan> {
        let (name, generation) = Self::current_generation(dir)?;
        count_generation(&name, &generation, counter)
    }

    fn keeps_history(&self) -> bool {
        true
    }

    /// The generations in `generations/`, oldest first by the time their
    /// directory was last changed (a writer fills a generation before
    /// `CURRENT` names it), then by name.
    fn history(&self, dir: &Dir) -> Result<Option<Vec<String>>> {
        let kept = generations_by_time(dir)?;
        Ok(Some(kept.into_iter().map(|(_, name)| name).collect()))
    }

    /// `CURRENT` is replaced whole each time it moves, so from its
    /// modification time on, the generation it names is the one: exact.
    /// Before that, the newest generation whose directory was last changed
    /// at or before `at` (and before `CURRENT` last moved: a generation
    /// still being filled was never current), judged from file times: not
    /// exact.
    fn revision_at(&self, dir: &Dir, at: Micros) -> Result<Option<RevisionAt>> {
        let moved = dir
            .stat_at(CURRENT_FILE)
            .map_err(|e| Error::io(dir.path().join(CURRENT_FILE), &e))?;
        let moved = micros_of(moved.mtime, moved.mtime_nsec);
        if at >= moved {
            return Ok(Some(RevisionAt {
                name: current_name(dir)?,
                exact: true,
            }));
        }
        let kept = generations_by_time(dir)?;
        Ok(kept
            .into_iter()
            .rev()
            .find(|(made, _)| micros_of(made.0, made.1) <= at)
            .map(|(_, name)| RevisionAt { name, exact: false }))
    }

    fn revision_cut(&self) -> &'static str {
        "generation"
    }

    fn revision_meta(&self, dir: &Dir, name: &str) -> Result<Option<Stat>> {
        if !warehouse::is_plain_name(name.as_bytes()) {
            return Ok(None);
        }
        let path = dir.path().join(GENERATIONS_DIR);
        let meta = dir
            .open_dir(GENERATIONS_DIR)
            .and_then(|generations| generations.stat_at(name));
        match meta {
            Ok(meta) if meta.is_dir() => Ok(Some(meta)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path.join(name), &e)),
        }
    }

    fn revision_fingerprint(&self, name: &str) -> Option<String> {
        warehouse::is_plain_name(name.as_bytes()).then(|| fingerprint_of(name))
    }

    /// The generation `version` names, counted as the current one is.
    fn at_version(
        &self,
        dir: &Dir,
        version: &str,
        counter: &dyn RecordCounter,
    ) -> Result<Option<LeafScan>> {
        if self.revision_meta(dir, version)?.is_none() {
            return Err(Error::at(
                ErrorCode::VersionNotFound,
                dir.path(),
                format!("the leaf keeps no generation {version:?}"),
            ));
        }
        let generation = dir
            .open_dir(GENERATIONS_DIR)
            .and_then(|generations| generations.open_dir(version))
            .map_err(|e| Error::io(dir.path().join(GENERATIONS_DIR).join(version), &e))?;
        count_generation(version, &generation, counter).map(Some)
    }

    /// A snapshot names its generation, which stays as it was while it
    /// exists (a writer makes a new one and moves `CURRENT`), so reading
    /// resumes in the same records even after `CURRENT` moved on.
    fn read_records(
        &self,
        dir: &Dir,
        fingerprint: Option<&str>,
        from: Resume,
        _wanted: &Wanted,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        // A snapshot reads the generation it named or nothing: another
        // generation would not resume at the same places.
        let generation = match fingerprint.and_then(|f| f.strip_prefix("storyline:generation:")) {
            Some(name) if warehouse::is_plain_name(name.as_bytes()) => dir
                .open_dir(GENERATIONS_DIR)
                .and_then(|generations| generations.open_dir(name))
                .map_err(|e| {
                    Error::reading(
                        ErrorCode::StorylineGenerationMissing,
                        dir.path().join(GENERATIONS_DIR).join(name),
                        &e,
                    )
                })?,
            _ => Self::current_generation(dir)?.1,
        };
        for (part, (file_name, format)) in record_files(&generation)?.into_iter().enumerate() {
            let part = part as u64;
            if part < from.part {
                continue;
            }
            let start = if part == from.part {
                from
            } else {
                Resume {
                    part,
                    ..Resume::default()
                }
            };
            let flow = generation
                .open_file(&file_name)
                .and_then(|(file, _)| read::read_file(&file, format, &file_name, start, None, sink))
                .map_err(|e| unreadable(&generation, &file_name, e))?;
            if flow.is_break() {
                return Ok(flow);
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// The counts of the generation `name`, open as `generation`.
fn count_generation(name: &str, generation: &Dir, counter: &dyn RecordCounter) -> Result<LeafScan> {
    let mut stats = RecordStats::default();
    for (file_name, format) in record_files(generation)? {
        let counted = counter
            .count(generation, &file_name, format)
            .map_err(|e| unreadable(generation, &file_name, e))?;
        stats.merge(&counted);
    }
    Ok(LeafScan {
        fingerprint: fingerprint_of(name),
        stats,
    })
}

/// The record files of a generation (line and packed files directly in
/// it, no subdirectories, no symlinks), sorted by name.
fn record_files(generation: &Dir) -> Result<Vec<(String, RecordFormat)>> {
    let mut files = Vec::new();
    let entries = generation
        .entries()
        .map_err(|e| Error::io(generation.path(), &e))?;
    for entry in entries {
        let Ok(file_name) = String::from_utf8(entry.name) else {
            continue;
        };
        let format = match RecordFormat::from_name(&file_name) {
            Some(f @ (RecordFormat::Jsonl | RecordFormat::Jsonseq)) => f,
            _ => continue,
        };
        if entry.is_file {
            files.push((file_name, format));
        }
    }
    files.sort();
    Ok(files)
}

fn unreadable(generation: &Dir, file_name: &str, e: std::io::Error) -> Error {
    if crate::records::is_counting_later(&e) {
        return Error::at(
            ErrorCode::BeingCounted,
            generation.path().join(file_name),
            e.to_string(),
        );
    }
    Error::reading(
        ErrorCode::RecordFileUnreadable,
        generation.path().join(file_name),
        &e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DirectCounter;
    use std::fs;

    fn open(dir: &tempfile::TempDir) -> Dir {
        Dir::open_root(dir.path()).unwrap()
    }

    fn leaf(current: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path().join("generations/g2");
        fs::create_dir_all(&g).unwrap();
        fs::create_dir_all(dir.path().join("generations/g1")).unwrap();
        fs::write(dir.path().join("generations/g1/old.jsonl"), "{}\n{}\n{}\n").unwrap();
        fs::write(g.join("a.jsonl"), "{\"ts\":1}\n{\"ts\":2}\n").unwrap();
        fs::write(g.join("b.jsonseq"), "\x1e{}\x1e{\"torn\":").unwrap();
        fs::write(g.join("notes.txt"), "not records\n").unwrap();
        fs::write(dir.path().join(CURRENT_FILE), current).unwrap();
        dir
    }

    #[test]
    fn counts_only_the_current_generation() {
        let dir = leaf("g2\n");
        let scan = StorylineStore.scan(&open(&dir), &DirectCounter).unwrap();
        assert_eq!(scan.fingerprint, "storyline:generation:g2");
        assert_eq!((scan.stats.record_count, scan.stats.failed_count), (4, 1));
    }

    #[test]
    fn invalid_current_is_coded() {
        for (current, code) in [
            ("", ErrorCode::StorylineCurrentInvalid),
            ("../etc\n", ErrorCode::StorylineCurrentInvalid),
            ("a/b", ErrorCode::StorylineCurrentInvalid),
            ("g9\n", ErrorCode::StorylineGenerationMissing),
        ] {
            let dir = leaf(current);
            assert_eq!(
                StorylineStore.fingerprint(&open(&dir)).unwrap_err().code,
                code,
                "{current:?}"
            );
        }
    }

    #[test]
    fn ensure_manifest_writes_then_trusts() {
        let dir = leaf("g2");
        let m = StorylineStore
            .ensure_manifest(&open(&dir), &DirectCounter)
            .unwrap();
        assert_eq!(m.fingerprint.as_deref(), Some("storyline:generation:g2"));
        assert_eq!(m.stats.unwrap().record_count, 4);
        let again = crate::store::manifest::read(&open(&dir)).unwrap().unwrap();
        assert_eq!(again, m);
    }

    #[test]
    fn a_planted_generation_symlink_is_not_counted() {
        let dir = leaf("g3\n");
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.jsonl"), "{}\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("generations/g3")).unwrap();
        let err = StorylineStore
            .scan(&open(&dir), &DirectCounter)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::StorylineGenerationMissing);
        // The same through a symlinked `generations/` directory.
        let dir = leaf("g2\n");
        fs::rename(dir.path().join("generations"), dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("generations"))
            .unwrap();
        let err = StorylineStore
            .scan(&open(&dir), &DirectCounter)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::StorylineGenerationMissing);
    }
}
