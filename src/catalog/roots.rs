//! Catalogs for paths named from outside (a command line): the path
//! itself when it is a directory, its parent when it is a file, local or
//! an `s3://` location, never a path inside a dataset leaf.

use std::path::{Path, PathBuf};

use super::{Catalog, CatalogOptions, classify};
use crate::error::{Error, ErrorCode, Result};
use crate::store::Stores;

impl Catalog {
    /// A catalog for one path named from outside (a command line): rooted
    /// at the path itself, or at its parent when it is a file, together
    /// with the path to ask it for. The named path is resolved once, so it
    /// may be a symlink; nothing below it is followed. A path inside a leaf
    /// is refused like `resolve` refuses one, even though the leaf lies
    /// above the root.
    pub fn for_path(path: &Path, options: CatalogOptions) -> Result<(Catalog, PathBuf)> {
        #[cfg(feature = "remote")]
        if crate::remote::is_remote(path) {
            return Catalog::for_remote(path, options);
        }
        if let Some((leaf, past)) = past_of(path) {
            let (catalog, rel) = Catalog::for_path(leaf, options)?;
            return Ok((catalog, rel.join(past)));
        }
        let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(path, &e))?;
        let stores = Stores::default();
        refuse_inside_leaf(path, &canonical, &stores)?;
        if canonical.is_dir() {
            return Ok((
                Catalog::with_stores(&canonical, options, stores)?,
                PathBuf::from("."),
            ));
        }
        match (canonical.parent(), canonical.file_name()) {
            (Some(parent), Some(name)) => Ok((
                Catalog::with_stores(parent, options, stores)?,
                PathBuf::from(name),
            )),
            _ => Err(Error::at(
                ErrorCode::PathInvalid,
                path,
                "not a file or directory",
            )),
        }
    }

    /// [`Catalog::for_path`] of an `s3://` location: rooted at the prefix
    /// when it holds anything, else at its parent when the parent lists it
    /// as a file.
    #[cfg(feature = "remote")]
    fn for_remote(path: &Path, options: CatalogOptions) -> Result<(Catalog, PathBuf)> {
        let location = crate::remote::Location::parse_path(path)?;
        let stores = Stores::default();
        refuse_inside_leaf(path, Path::new(&location.url()), &stores)?;
        let root = PathBuf::from(location.url());
        match Catalog::with_stores(&root, options.clone(), stores) {
            Ok(catalog) => Ok((catalog, PathBuf::from("."))),
            Err(e) if e.code == ErrorCode::PathNotFound && !location.prefix.is_empty() => {
                let (parent, name) = match location.prefix.rsplit_once('/') {
                    Some((parent, name)) => (parent.to_string(), name.to_string()),
                    None => (String::new(), location.prefix.clone()),
                };
                let parent = crate::remote::Location {
                    bucket: location.bucket.clone(),
                    prefix: parent,
                };
                let catalog =
                    Catalog::with_stores(Path::new(&parent.url()), options, Stores::default())?;
                match catalog.root_dir().probe(&name) {
                    Ok(Some(meta)) if meta.is_file() => Ok((catalog, PathBuf::from(name))),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// A path into a leaf's past (`LEAF/.versions`, `LEAF/.versions/N`,
/// `LEAF/.tags/NAME`) that is not a real path: the leaf's path and the
/// rest, which the catalog rooted above the leaf reads (see
/// `versions.rs`).
fn past_of(path: &Path) -> Option<(&Path, PathBuf)> {
    use super::versions::{TAGS, VERSIONS};
    let past = |name: &std::ffi::OsStr| name == VERSIONS || name == TAGS;
    fn parent_of(path: &Path) -> Option<&Path> {
        match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => Some(parent),
            Some(_) => Some(Path::new(".")),
            None => None,
        }
    }
    if std::fs::symlink_metadata(path).is_ok() {
        return None;
    }
    let name = path.file_name()?;
    let parent = parent_of(path)?;
    if past(name) {
        return Some((parent, PathBuf::from(name)));
    }
    let parent_name = parent.file_name()?;
    if !past(parent_name) {
        return None;
    }
    Some((parent_of(parent)?, Path::new(parent_name).join(name)))
}

/// Refuses `path` (named from outside, resolved to `resolved`) when it lies
/// inside a dataset leaf, like `resolve` refuses one.
fn refuse_inside_leaf(path: &Path, resolved: &Path, stores: &Stores) -> Result<()> {
    match classify::enclosing_leaf(resolved, stores) {
        Some(leaf) => Err(Error::at(
            ErrorCode::PathNotFound,
            path,
            format!(
                "the path is inside the dataset leaf {}, whose interior is not listed",
                leaf.display()
            ),
        )),
        None => Ok(()),
    }
}
