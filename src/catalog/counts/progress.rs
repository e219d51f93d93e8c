//! How far the background counts got, kept beside the count cache so a
//! restarted daemon resumes a large file where the last one stopped
//! instead of starting over.
//!
//! The file is the count cache's name with `.progress` added, in the same
//! state directory (under the same rules: see `persisted.rs`), written by
//! temp file and rename. Its first line is [`MAGIC`]; then one JSON object
//! a file: its path below the root, the `size` and `mtime_ns` it had, and
//! where its count stood. An entry is used only for a file of exactly that
//! size and mtime, like a count-cache entry. A file at that path that does
//! not start with the magic's name is never overwritten, nor one of a
//! newer version (`PCHRONICLE_COUNT_CACHE_NEWER`); a damaged one is
//! ignored (a warning) and rewritten.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::CacheFile;
use crate::error::{Error, ErrorCode, Result};
use crate::records::{CountProgress, RecordStats};
use crate::warehouse::{self, Replace};

/// The first line of a progress file: [`MAGIC_NAME`] and the version of
/// its layout.
pub const MAGIC: &str = "pchronicle-count-progress 1";
const MAGIC_NAME: &str = "pchronicle-count-progress ";
const VERSION: u32 = 1;

/// Where one file's background count stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    pub size: u64,
    pub mtime_ns: i64,
    pub progress: CountProgress,
}

#[derive(Serialize, Deserialize)]
struct Line {
    path: String,
    size: u64,
    mtime_ns: i64,
    offset: u64,
    in_failed: bool,
    record_count: u64,
    failed_count: u64,
    min_timestamp: Option<i64>,
    max_timestamp: Option<i64>,
}

/// The progress file beside the count cache `cache`.
pub fn beside(cache: &CacheFile) -> Option<CacheFile> {
    Some(CacheFile {
        dir: cache.dir.try_clone().ok()?,
        name: format!("{}.progress", cache.name),
    })
}

/// The entries of the progress file; none when it is absent or unusable.
pub fn load(file: &CacheFile) -> HashMap<String, Saved> {
    let bytes = match file.dir.read_capped(&file.name, warehouse::COUNT_CACHE_CAP) {
        Ok(Some((bytes, _))) => bytes,
        Ok(None) => return HashMap::new(),
        Err(e) => {
            log::warn!("ignoring the count progress {}: {e}", file.path().display());
            return HashMap::new();
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        log::warn!(
            "ignoring the count progress {}: not a pchronicle count progress file",
            file.path().display()
        );
        return HashMap::new();
    }
    let mut saved = HashMap::new();
    for line in lines {
        let Ok(line) = serde_json::from_str::<Line>(line) else {
            log::warn!(
                "ignoring a damaged line of the count progress {}",
                file.path().display()
            );
            continue;
        };
        let stats = RecordStats {
            record_count: line.record_count,
            failed_count: line.failed_count,
            min_timestamp: line.min_timestamp,
            max_timestamp: line.max_timestamp,
        };
        saved.insert(
            line.path,
            Saved {
                size: line.size,
                mtime_ns: line.mtime_ns,
                progress: CountProgress {
                    offset: line.offset.min(line.size),
                    stats,
                    in_failed: line.in_failed,
                },
            },
        );
    }
    saved
}

/// Replaces the progress file with `entries`, unless what is there is not
/// a progress file.
pub fn save<'a>(file: &CacheFile, entries: impl Iterator<Item = (&'a str, Saved)>) -> Result<()> {
    let mut text = format!("{MAGIC}\n");
    for (path, saved) in entries {
        let p = saved.progress;
        let line = Line {
            path: path.to_string(),
            size: saved.size,
            mtime_ns: saved.mtime_ns,
            offset: p.offset,
            in_failed: p.in_failed,
            record_count: p.stats.record_count,
            failed_count: p.stats.failed_count,
            min_timestamp: p.stats.min_timestamp,
            max_timestamp: p.stats.max_timestamp,
        };
        // Strings, integers and booleans always serialize.
        text.push_str(&serde_json::to_string(&line).expect("a progress line serializes"));
        text.push('\n');
    }
    let path = file.path();
    check_ours(file)?;
    let how = Replace {
        sweep_temps: true,
        ..Replace::hint()
    };
    file.dir
        .replace(&file.name, text.as_bytes(), how)
        .map_err(|e| Error::io(&path, &e))
}

/// Refuses to replace anything at the file's path but a progress file of
/// this version or an older one, or an empty file. A newer version (a
/// newer build's) is left as it is, as a newer count cache is.
fn check_ours(file: &CacheFile) -> Result<()> {
    let path = file.path();
    let foreign = |why: &str| {
        Err(Error::at(
            ErrorCode::CountCacheForeign,
            &path,
            format!("{why}; pchronicle never overwrites a file it did not write"),
        ))
    };
    let (opened, stat) = match file.dir.open_file(&file.name) {
        Ok(opened) => opened,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if warehouse::is_not_regular(&e) => {
            return foreign("the path is not a regular file");
        }
        Err(e) => return Err(Error::io(&path, &e)),
    };
    let mut head = [0u8; 64];
    let read = opened
        .read_at(&mut head, 0)
        .map_err(|e| Error::io(&path, &e))?;
    let first_line = head[..read]
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    let version = first_line
        .strip_prefix(MAGIC_NAME.as_bytes())
        .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u32>().ok());
    match version {
        _ if stat.size == 0 => Ok(()),
        Some(newer) if newer > VERSION => Err(Error::at(
            ErrorCode::CountCacheNewer,
            &path,
            format!("the count progress file has version {newer}; this build writes {VERSION}"),
        )),
        Some(_) => Ok(()),
        None => foreign("the file is not a pchronicle count progress file"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_survives_a_save_and_a_load() {
        let dir = tempfile::tempdir().unwrap();
        let file = CacheFile::at(&dir.path().join("counts")).unwrap();
        let file = beside(&file).unwrap();
        assert!(load(&file).is_empty());
        let saved = Saved {
            size: 100,
            mtime_ns: 7,
            progress: CountProgress {
                offset: 64,
                stats: RecordStats {
                    record_count: 3,
                    failed_count: 1,
                    min_timestamp: Some(-5),
                    max_timestamp: None,
                },
                in_failed: true,
            },
        };
        save(&file, [("a/b.jsonl", saved)].into_iter()).unwrap();
        assert_eq!(load(&file).get("a/b.jsonl"), Some(&saved));
    }

    #[test]
    fn a_newer_version_is_left_as_it_is_and_an_older_one_replaced() {
        assert_eq!(MAGIC, format!("{MAGIC_NAME}{VERSION}"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counts.progress");
        let file = beside(&CacheFile::at(&dir.path().join("counts")).unwrap()).unwrap();
        let none = std::iter::empty::<(&str, Saved)>;
        for newer in [
            format!("{MAGIC}0\n"),
            format!("{MAGIC_NAME}{}\n", VERSION + 1),
        ] {
            std::fs::write(&path, &newer).unwrap();
            let refused = save(&file, none()).unwrap_err();
            assert_eq!(refused.code, ErrorCode::CountCacheNewer, "{newer:?}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);
        }
        for ours in [
            format!("{MAGIC_NAME}0\n"),
            format!("{MAGIC}\n{{}}\n"),
            String::new(),
        ] {
            std::fs::write(&path, &ours).unwrap();
            save(&file, none()).unwrap();
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                format!("{MAGIC}\n")
            );
        }
    }

    #[test]
    fn a_foreign_file_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("counts.progress"), b"precious").unwrap();
        let file = beside(&CacheFile::at(&dir.path().join("counts")).unwrap()).unwrap();
        assert!(load(&file).is_empty());
        let refused = save(&file, std::iter::empty()).unwrap_err();
        assert_eq!(refused.code, ErrorCode::CountCacheForeign);
        let kept = std::fs::read(dir.path().join("counts.progress")).unwrap();
        assert_eq!(kept, b"precious");
    }
}
