//! `list`: one level of a directory, classified, with each entry's stat;
//! and the warnings a listing or a walk reports.

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use super::classify::DirNode;
use super::refresh::DirScan;
use super::{Catalog, Entry, Listing, NodeKind, Warning, display_rel, join_rel};
use crate::error::{Error, ErrorCode, Result, is_remote_failure};
use crate::records::RecordFormat;
use crate::warehouse::Stat;

impl Catalog {
    pub(super) fn list_now(&self, rel: &Path) -> Result<(Listing, Vec<Stat>)> {
        let target = self.resolve(rel)?;
        if let Some(name) = &target.name {
            let listing = Listing {
                kind: NodeKind::File,
                entries: vec![file_entry(".", name, &target.meta)],
                truncated: false,
                warnings: Vec::new(),
            };
            return Ok((listing, vec![target.meta]));
        }
        let dir = &target.dir;
        let node = self.dir_node(dir).map_err(|e| Error::io(rel, &e))?;
        let mut warnings = node_warnings(&node, "");
        if let Some(preview) = &node.leaf {
            let listing = Listing {
                kind: NodeKind::Dataset,
                entries: vec![Entry::Dataset {
                    name: ".".into(),
                    preview: Box::new(preview.clone()),
                }],
                truncated: false,
                warnings,
            };
            return Ok((listing, vec![target.meta]));
        }
        let scan = self.dir_scan(dir)?;
        scan_warnings(&scan, "", self.options.max_entries, &mut warnings);
        // As a walk does: what the listing asks ahead for its children
        // holds until it has classified them all, however many they are
        // (asked ahead, the first could expire before they are used).
        let _hold = dir.hold_listings();
        self.prefetch(dir, &scan.children);
        let mut entries = Vec::with_capacity(scan.children.len());
        let mut metas = Vec::with_capacity(scan.children.len());
        for name in scan.children.iter() {
            // A child that vanished, turned into a symlink or lies on
            // another filesystem since the scan is simply not listed; one
            // an object store could not say anything of fails the listing
            // (never a listing that looks whole without it).
            let meta = match dir.stat_at(name) {
                Ok(meta) => meta,
                Err(e) if is_remote_failure(&e) => return Err(Error::io(rel.join(name), &e)),
                Err(_) => continue,
            };
            if meta.is_dir() {
                let child = match self.child_node(dir, name, &meta) {
                    Ok(child) => child,
                    Err(e) if is_remote_failure(&e) => return Err(Error::io(rel.join(name), &e)),
                    // A directory that cannot be entered (no permission,
                    // another filesystem) is listed, like `ls` does, but
                    // not classified.
                    Err(e) if unenterable(&e) => {
                        warnings.push(Warning {
                            code: ErrorCode::Io,
                            path: name.to_string(),
                            message: e.to_string(),
                        });
                        entries.push(Entry::Directory {
                            name: name.to_string(),
                        });
                        metas.push(meta);
                        continue;
                    }
                    // Vanished or swapped for a symlink since the stat.
                    Err(_) => continue,
                };
                warnings.extend(node_warnings(&child, name));
                entries.push(match &child.leaf {
                    Some(preview) => Entry::Dataset {
                        name: name.to_string(),
                        preview: Box::new(preview.clone()),
                    },
                    None => Entry::Directory {
                        name: name.to_string(),
                    },
                });
            } else if meta.is_file() {
                entries.push(file_entry(name, OsStr::new(name), &meta));
            } else {
                continue;
            }
            metas.push(meta);
        }
        let listing = Listing {
            kind: NodeKind::Directory,
            entries,
            truncated: scan.truncated || scan.cut_by_store,
            warnings,
        };
        Ok((listing, metas))
    }
}

fn file_entry(name: &str, file_name: &OsStr, meta: &Stat) -> Entry {
    let file_name = file_name.to_str().unwrap_or(name);
    Entry::File {
        name: name.to_string(),
        size: meta.len(),
        format: RecordFormat::from_name(file_name),
    }
}

/// A node's warnings with paths made relative to the listed/opened path.
pub(super) fn node_warnings(node: &DirNode, rel: &str) -> Vec<Warning> {
    node.warnings
        .iter()
        .map(|w| Warning {
            code: w.code,
            path: match &w.subpath {
                Some(sub) => display_rel(&join_rel(rel, sub)),
                None => display_rel(rel),
            },
            message: w.message.clone(),
        })
        .collect()
}

pub(super) fn scan_warnings(
    scan: &DirScan,
    rel: &str,
    max_entries: usize,
    warnings: &mut Vec<Warning>,
) {
    for name in &scan.non_utf8 {
        warnings.push(Warning {
            code: ErrorCode::NameNotUtf8,
            path: display_rel(rel),
            message: format!("skipped an entry whose name is not UTF-8: {name:?}"),
        });
    }
    if scan.truncated {
        warnings.push(Warning {
            code: ErrorCode::BoundReached,
            path: display_rel(rel),
            message: format!("stopped at max_entries = {max_entries}"),
        });
    }
    if scan.cut_by_store {
        #[cfg(feature = "remote")]
        let message = format!(
            "the object store's listing stopped at its own bound ({} names, {} pages, {} MiB \
             of names or {} s); keys past it are not shown",
            crate::remote::LISTED_MAX,
            crate::remote::LISTED_PAGES_MAX,
            crate::remote::LISTED_BYTES_MAX >> 20,
            crate::remote::LISTING_TIME_MAX.as_secs()
        );
        #[cfg(not(feature = "remote"))]
        let message = String::from("the directory's listing stopped at its own bound");
        warnings.push(Warning {
            code: ErrorCode::BoundReached,
            path: display_rel(rel),
            message,
        });
    }
}

/// Whether opening a directory failed for a reason worth reporting (it
/// cannot be entered), rather than a race with a writer.
pub(super) fn unenterable(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EACCES) | Some(libc::EXDEV))
}
