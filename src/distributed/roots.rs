//! The warehouse roots a worker serves (`--warehouse`), and the one rule
//! of what it reads: a root it serves, or a directory below one, and
//! below that only plain relative paths (no `..`, no absolute path), each
//! opened the way the mount opens them (relative to an open directory,
//! no symlink followed).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::catalog::{Catalog, CatalogOptions};
use crate::error::{Error, ErrorCode, Result};

/// The roots a worker serves, each opened once, on first use.
pub struct Roots {
    /// Canonical local directories and `s3://` locations.
    served: Vec<String>,
    options: CatalogOptions,
    opened: Mutex<HashMap<String, Arc<Catalog>>>,
}

impl std::fmt::Debug for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roots")
            .field("served", &self.served)
            .finish()
    }
}

impl Roots {
    /// The roots named by `--warehouse`, each checked now: a directory
    /// that exists, or an `s3://` location.
    pub fn new(named: &[PathBuf], options: CatalogOptions) -> Result<Roots> {
        if named.is_empty() {
            return Err(Error::new(
                ErrorCode::WorkerRefused,
                "a worker serves no warehouse: name at least one with --warehouse ROOT",
            ));
        }
        let mut served = Vec::new();
        for path in named {
            let text = if is_remote(path) {
                path.to_string_lossy().trim_end_matches('/').to_string()
            } else {
                let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(path, &e))?;
                if !canonical.is_dir() {
                    return Err(Error::at(
                        ErrorCode::PathInvalid,
                        path,
                        "a worker's --warehouse must be a directory",
                    ));
                }
                canonical.to_str().map(str::to_string).ok_or_else(|| {
                    Error::at(ErrorCode::PathInvalid, path, "the root is not UTF-8")
                })?
            };
            served.push(text);
        }
        Ok(Roots {
            served,
            options,
            opened: Mutex::new(HashMap::new()),
        })
    }

    /// The roots served, as named to coordinators.
    pub fn served(&self) -> &[String] {
        &self.served
    }

    /// The catalog to read `base` (below the coordinator's `root`) with,
    /// and `base` relative to that catalog's root; refused
    /// (`PCHRONICLE_WORKER_ROOT`) unless `root` is a served root or below
    /// one, and `base` and every one of `files` plain relative paths.
    pub fn open<'a>(
        &self,
        root: &'a str,
        base: &'a str,
        files: impl IntoIterator<Item = &'a str>,
    ) -> Result<(Arc<Catalog>, PathBuf)> {
        let outside = |what: &str| {
            Error::new(
                ErrorCode::WorkerRoot,
                format!("{what}: this worker serves only {}", self.served.join(", ")),
            )
        };
        let (served, below) = self
            .served
            .iter()
            .find_map(|served| {
                let rest = root.strip_prefix(served.as_str())?;
                if rest.is_empty() {
                    Some((served, ""))
                } else {
                    rest.strip_prefix('/').map(|below| (served, below))
                }
            })
            .ok_or_else(|| outside(&format!("the warehouse {root} is not one it serves")))?;
        for path in std::iter::once(below)
            .chain(std::iter::once(base))
            .chain(files)
        {
            if !plain(path) {
                return Err(outside(&format!(
                    "{path:?} is not a plain path below the root"
                )));
            }
        }
        let catalog = self.catalog(served)?;
        let prefix = if below.is_empty() {
            PathBuf::from(".")
        } else {
            PathBuf::from(below)
        };
        let rel = match (below.is_empty(), base) {
            (true, base) => PathBuf::from(base),
            (false, ".") => prefix,
            (false, base) => prefix.join(base),
        };
        Ok((catalog, rel))
    }
}

fn is_remote(path: &Path) -> bool {
    #[cfg(feature = "remote")]
    {
        crate::remote::is_remote(path)
    }
    #[cfg(not(feature = "remote"))]
    {
        let _ = path;
        false
    }
}

impl Roots {
    /// The catalog of the served root `served`, opened at first use (not
    /// while holding the others up).
    fn catalog(&self, served: &str) -> Result<Arc<Catalog>> {
        if let Some(catalog) = self.opened.lock().get(served) {
            return Ok(Arc::clone(catalog));
        }
        let (catalog, rel) = Catalog::for_path(Path::new(served), self.options.clone())?;
        // A root is the directory (or prefix) itself: never its parent,
        // as an `s3://` location naming one object would be opened.
        if rel != Path::new(".") {
            return Err(Error::new(
                ErrorCode::WorkerRefused,
                format!("the root {served} is not a directory"),
            ));
        }
        let mut opened = self.opened.lock();
        let catalog = opened
            .entry(served.to_string())
            .or_insert_with(|| Arc::new(catalog));
        Ok(Arc::clone(catalog))
    }
}

/// Empty, `.`, or relative components that are all names (no `..`, no
/// root, no `.` inside).
fn plain(path: &str) -> bool {
    if path.is_empty() || path == "." {
        return true;
    }
    !path.contains('\0')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        && !path.split('/').any(|part| part == "." || part == "..")
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn only_plain_relative_paths_are_read() {
        for ok in ["", ".", "a", "a/b.jsonl", "team=x/run 1.jsonl"] {
            assert!(plain(ok), "{ok}");
        }
        for bad in ["/etc/passwd", "..", "a/../../b", "a/./b", "a\0b", "../x"] {
            assert!(!plain(bad), "{bad}");
        }
    }
}
