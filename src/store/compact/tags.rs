//! Tags of a compact-jsonl leaf: names Lance keeps beside the dataset for
//! one of its versions, so "what was in it when we trained X" has a name.
//! Written only by `pchronicle tag` (never through a mount).

use std::path::Path;

use serde::Serialize;

use super::CompactJsonlStore;
use super::engine::lance_error;
use crate::error::{Error, ErrorCode, Result};
use crate::records::timestamp::{Micros, format_rfc3339};

/// One tag of a leaf.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tag {
    pub name: String,
    /// The version it names.
    pub version: u64,
    /// When it was made (or last moved), UTC.
    pub created_at: Option<String>,
}

/// Longest tag name: it must fit in a file name with room to spare.
const NAME_AT_MOST: usize = 100;

impl CompactJsonlStore {
    /// The tags of the leaf at `dir`, by name.
    pub fn tags(&self, dir: &Path) -> Result<Vec<Tag>> {
        let dataset = self.open_leaf(dir)?;
        let listed = self
            .block_on(dataset.tags().list())?
            .map_err(|e| lance_error(dir, e))?;
        let mut tags: Vec<Tag> = listed
            .into_iter()
            .map(|(name, contents)| Tag {
                name,
                version: contents.version,
                // To the second: a name for people, not an ordering key.
                created_at: contents
                    .created_at
                    .map(|t| format_rfc3339(t.timestamp() * 1_000_000)),
            })
            .collect();
        tags.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tags)
    }

    /// Names `version` of the leaf at `dir` (its newest when `None`)
    /// `name`. The version must still be kept; a tag of that name must
    /// not exist yet.
    pub fn create_tag(&self, dir: &Path, name: &str, version: Option<u64>) -> Result<Tag> {
        check_name(dir, name)?;
        Self::writable(dir)?;
        let dataset = self.open_leaf(dir)?;
        let version = version.unwrap_or(dataset.version().version);
        self.check_kept(dir, &dataset, version)?;
        match self.block_on(dataset.tags().create(name, version))? {
            Ok(()) => {}
            Err(lance::Error::RefConflict { .. }) => {
                return Err(Error::at(
                    ErrorCode::TagExists,
                    dir,
                    format!("the leaf has a tag {name:?} already"),
                ));
            }
            Err(e) => return Err(lance_error(dir, e)),
        }
        self.tags(dir)?
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| {
                Error::at(
                    ErrorCode::Lance,
                    dir,
                    format!("the tag {name:?} was made but cannot be read back"),
                )
            })
    }

    /// The version `text` names on the leaf at `dir`: a number, or a tag.
    /// It must still be kept (`PCHRONICLE_VERSION_NOT_FOUND` names the
    /// ones that are).
    pub fn resolve_version(&self, dir: &Path, text: &str) -> Result<u64> {
        let version = match text.parse::<u64>() {
            Ok(version) => version,
            Err(_) => {
                check_name(dir, text)?;
                self.tags(dir)?
                    .into_iter()
                    .find(|t| t.name == text)
                    .map(|t| t.version)
                    .ok_or_else(|| {
                        Error::at(
                            ErrorCode::TagNotFound,
                            dir,
                            format!("the leaf has no version or tag {text:?}"),
                        )
                    })?
            }
        };
        let dataset = self.open_leaf(dir)?;
        self.check_kept(dir, &dataset, version)?;
        Ok(version)
    }

    /// The newest version of the leaf at `dir` committed at or before `at`
    /// (microseconds since the epoch, by Lance's own version timestamps);
    /// `None` when the leaf was made later. When the versions before the
    /// oldest it keeps were cleaned up, and `at` is before that one, the
    /// version of then is no longer kept: `PCHRONICLE_VERSION_NOT_FOUND`.
    pub fn version_at(&self, dir: &Path, at: Micros) -> Result<Option<u64>> {
        let times = self.version_times(dir)?;
        let then = times
            .iter()
            .filter(|(_, made)| *made <= at)
            .map(|(version, _)| *version)
            .max();
        match (then, times.first()) {
            (None, Some(&(oldest, made))) if oldest > 1 => Err(Error::at(
                ErrorCode::VersionNotFound,
                dir,
                format!(
                    "the leaf keeps no version from before {}: versions before {oldest} were \
                     cleaned up",
                    format_rfc3339(made)
                ),
            )),
            _ => Ok(then),
        }
    }

    /// Every version the leaf at `dir` keeps with the time Lance recorded
    /// for its commit (microseconds since the epoch), oldest first.
    pub fn version_times(&self, dir: &Path) -> Result<Vec<(u64, Micros)>> {
        let dataset = self.open_leaf(dir)?;
        let kept = self
            .block_on(dataset.versions())?
            .map_err(|e| lance_error(dir, e))?;
        let mut times: Vec<(u64, Micros)> = kept
            .iter()
            .map(|v| (v.version, v.timestamp.timestamp_micros()))
            .collect();
        times.sort_unstable();
        Ok(times)
    }

    /// Tags are written beside a local leaf only: a warehouse on object
    /// storage is read, never written.
    fn writable(dir: &Path) -> Result<()> {
        #[cfg(feature = "remote")]
        if crate::remote::is_remote(dir) {
            return Err(Error::at(
                ErrorCode::RemoteReadOnly,
                dir,
                "tags of a leaf on object storage are read here, never written",
            ));
        }
        let _ = dir;
        Ok(())
    }

    /// Fails unless `dataset` keeps `version`.
    fn check_kept(&self, dir: &Path, dataset: &lance::Dataset, version: u64) -> Result<()> {
        let kept = self
            .block_on(dataset.versions())?
            .map_err(|e| lance_error(dir, e))?;
        if kept.iter().any(|v| v.version == version) {
            return Ok(());
        }
        let known: Vec<String> = kept.iter().map(|v| v.version.to_string()).collect();
        Err(Error::at(
            ErrorCode::VersionNotFound,
            dir,
            format!(
                "the leaf keeps no version {version} (it keeps {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        ))
    }

    /// Deletes the tag `name` of the leaf at `dir`; returns the version it
    /// named (the version itself stays).
    pub fn delete_tag(&self, dir: &Path, name: &str) -> Result<u64> {
        // Any tag Lance lists can be deleted, also one another Lance
        // client named with letters beyond ASCII; never a path.
        if name.is_empty() || name.contains('/') || name.contains("..") || name.contains('\0') {
            return Err(Error::at(
                ErrorCode::TagInvalid,
                dir,
                format!("{name:?} is not a tag name"),
            ));
        }
        Self::writable(dir)?;
        let dataset = self.open_leaf(dir)?;
        let tags = dataset.tags();
        let version = match self.block_on(tags.get_version(name))? {
            Ok(version) => version,
            Err(lance::Error::RefNotFound { .. }) => {
                return Err(Error::at(
                    ErrorCode::TagNotFound,
                    dir,
                    format!("the leaf has no tag {name:?}"),
                ));
            }
            Err(e) => return Err(lance_error(dir, e)),
        };
        self.block_on(tags.delete(name))?
            .map_err(|e| lance_error(dir, e))?;
        Ok(version)
    }
}

impl CompactJsonlStore {
    /// The dataset of the compact-jsonl leaf at `dir`; a directory that
    /// holds no Lance dataset at all is said to be no leaf, and so is one
    /// reached through a symlink, or whose `_versions` is one (a tag is
    /// written inside the leaf: never where a link points).
    fn open_leaf(&self, dir: &Path) -> Result<lance::Dataset> {
        // Object storage has no symbolic links to be led through.
        #[cfg(feature = "remote")]
        if crate::remote::is_remote(dir) {
            return self.open_compact(dir);
        }
        let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
        if !real_dir(dir) || !real_dir(&dir.join(super::versions::VERSIONS_DIR)) {
            return Err(Error::at(
                ErrorCode::NotCompactJsonl,
                dir,
                "not a compact-jsonl leaf: no Lance dataset here (or one reached through a symlink)",
            ));
        }
        self.open_compact(dir)
    }
}

/// A tag name is a plain word: letters, digits, `.`, `-`, `_`, neither
/// starting nor ending with `.`, no `..`, at most [`NAME_AT_MOST`] bytes
/// (it becomes a file name, and a name under `.tags/`).
fn check_name(dir: &Path, name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && name.len() <= NAME_AT_MOST
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.ends_with(".lock");
    if plain {
        Ok(())
    } else {
        Err(Error::at(
            ErrorCode::TagInvalid,
            dir,
            format!("{name:?} is not a tag name"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_names_are_plain_words() {
        let dir = Path::new("leaf");
        for good in [
            "v1",
            "trained-2026-11-30",
            "eval_set.v2",
            "A",
            &"x".repeat(100),
        ] {
            assert!(check_name(dir, good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            ".hidden",
            "end.",
            "a..b",
            "sp ace",
            "ünï",
            "x.lock",
            &"x".repeat(101),
            "a\0b",
            "tab\t",
        ] {
            assert_eq!(
                check_name(dir, bad).unwrap_err().code,
                ErrorCode::TagInvalid,
                "{bad:?}"
            );
        }
    }
}
