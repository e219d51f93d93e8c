//! `storyline/v1` leaves: a directory with a `CURRENT` file naming the
//! current generation, whose records live in `generations/<name>/` as line
//! (`.jsonl`) or packed (`.jsonseq`) files.
//!
//! A generation is treated as immutable once `CURRENT` names it: a writer
//! builds a new generation and then replaces `CURRENT`. So the fingerprint
//! `storyline:generation:<name>` identifies the revision, and counting reads
//! only the current generation's files (not subdirectories, not symlinks).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{LeafScan, LeafStore, RecordCounter};
use crate::error::{Error, ErrorCode, Result};
use crate::records::{RecordFormat, RecordStats};

pub const FORMAT: &str = "storyline/v1";
pub const CURRENT_FILE: &str = "CURRENT";
pub const GENERATIONS_DIR: &str = "generations";

/// `CURRENT` is a one-line pointer; more than this is not a pointer.
const CURRENT_MAX_BYTES: u64 = 4096;

pub struct StorylineStore;

impl StorylineStore {
    /// The name of the current generation and its directory.
    pub fn current_generation(dir: &Path) -> Result<(String, PathBuf)> {
        let current = dir.join(CURRENT_FILE);
        let mut text = String::new();
        fs::File::open(&current)
            .and_then(|f| f.take(CURRENT_MAX_BYTES).read_to_string(&mut text))
            .map_err(|e| Error::at(ErrorCode::StorylineCurrentInvalid, &current, e.to_string()))?;
        let name = text.lines().next().unwrap_or("").trim();
        let valid = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
        if !valid {
            return Err(Error::at(
                ErrorCode::StorylineCurrentInvalid,
                &current,
                format!("{name:?} is not a generation name"),
            ));
        }
        let generation = dir.join(GENERATIONS_DIR).join(name);
        match fs::symlink_metadata(&generation) {
            Ok(meta) if meta.is_dir() => Ok((name.to_string(), generation)),
            _ => Err(Error::at(
                ErrorCode::StorylineGenerationMissing,
                &generation,
                format!("CURRENT names generation {name:?}, which is not a directory"),
            )),
        }
    }
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

    fn detect(&self, dir: &Path) -> Result<bool> {
        Ok(fs::symlink_metadata(dir.join(CURRENT_FILE)).is_ok_and(|m| m.is_file()))
    }

    fn fingerprint(&self, dir: &Path) -> Result<String> {
        Self::current_generation(dir).map(|(name, _)| fingerprint_of(&name))
    }

    fn scan(&self, dir: &Path, counter: &dyn RecordCounter) -> Result<LeafScan> {
        let (name, generation) = Self::current_generation(dir)?;
        let mut files = Vec::new();
        for entry in fs::read_dir(&generation).map_err(|e| Error::io(&generation, &e))? {
            let entry = entry.map_err(|e| Error::io(&generation, &e))?;
            let Ok(file_name) = entry.file_name().into_string() else {
                continue;
            };
            let format = match RecordFormat::from_name(&file_name) {
                Some(f @ (RecordFormat::Jsonl | RecordFormat::Jsonseq)) => f,
                _ => continue,
            };
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                files.push((file_name, format));
            }
        }
        files.sort();
        let mut stats = RecordStats::default();
        for (file_name, format) in files {
            let path = generation.join(&file_name);
            let counted = counter
                .count(&path, format)
                .map_err(|e| Error::at(ErrorCode::RecordFileUnreadable, &path, e.to_string()))?;
            stats.merge(&counted);
        }
        Ok(LeafScan {
            fingerprint: fingerprint_of(&name),
            stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DirectCounter;

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
        let scan = StorylineStore.scan(dir.path(), &DirectCounter).unwrap();
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
                StorylineStore.fingerprint(dir.path()).unwrap_err().code,
                code,
                "{current:?}"
            );
        }
    }

    #[test]
    fn ensure_manifest_writes_then_trusts() {
        let dir = leaf("g2");
        let m = StorylineStore
            .ensure_manifest(dir.path(), &DirectCounter)
            .unwrap();
        assert_eq!(m.fingerprint.as_deref(), Some("storyline:generation:g2"));
        assert_eq!(m.stats.unwrap().record_count, 4);
        let again = crate::catalog::manifest::read(dir.path()).unwrap().unwrap();
        assert_eq!(again, m);
    }
}
