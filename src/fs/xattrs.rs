//! The extended attributes the mount answers, all in `user.pchronicle.`:
//! `kind` on every node, and for a dataset leaf or a record file its
//! `format` and, when known, its `record_count`.

use std::ffi::OsStr;
use std::path::Path;

use super::FsError;
use crate::catalog::{Catalog, Entry, NodeKind, StatsOrigin};
use crate::records::RecordFormat;

/// The extended-attribute namespace pchronicle answers in.
const XATTR_PREFIX: &str = "user.pchronicle.";

/// Attributes by full name, with their values; `None`: a value still
/// being made (a record count being counted in the background), which a
/// read of it answers `EAGAIN` for.
pub type Attrs = Vec<(String, Option<String>)>;

/// The attributes of a synthetic file.
pub fn of_synthetic() -> Attrs {
    vec![xattr("kind", "synthetic")]
}

/// The attributes of the node at `rel` (of kind `kind`), as `catalog`
/// sees it, by full name.
pub fn of_node(catalog: &Catalog, rel: &Path, kind: NodeKind) -> Result<Attrs, FsError> {
    let mut out = vec![xattr("kind", kind_name(kind))];
    match kind {
        NodeKind::Directory => {}
        NodeKind::Dataset => {
            let listing = catalog.list(rel)?;
            if let Some(Entry::Dataset { preview, .. }) = listing.entries.first() {
                out.push(xattr("format", &preview.format));
                if let Some(n) = preview.counts.record_count {
                    out.push(xattr("record_count", &n.to_string()));
                }
            }
        }
        NodeKind::File => {
            let name = rel.file_name().and_then(OsStr::to_str).unwrap_or("");
            if RecordFormat::from_name(name).is_some() {
                let snapshot = catalog.open(rel)?;
                if let Some(source) = snapshot.sources.first() {
                    out.push(xattr("format", &source.format));
                    if source.stats_origin == StatsOrigin::Counting {
                        out.push((format!("{XATTR_PREFIX}record_count"), None));
                    } else if let Some(n) = source.counts.record_count {
                        out.push(xattr("record_count", &n.to_string()));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn xattr(name: &str, value: &str) -> (String, Option<String>) {
    (format!("{XATTR_PREFIX}{name}"), Some(value.to_string()))
}

fn kind_name(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Directory => "directory",
        NodeKind::Dataset => "dataset",
        NodeKind::File => "file",
    }
}
