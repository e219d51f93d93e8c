//! Classification of a directory, and the preview of a leaf.
//!
//! A directory is a leaf when, in this order: its manifest says
//! `kind = "leaf"`; or a registered store recognises its physical markers
//! (storyline's `CURRENT` first, then the others in registration order).
//! Otherwise it is a plain directory — a branch manifest included, since a
//! branch only describes. A malformed manifest is reported as a warning and
//! classification carries on with the physical markers.
//!
//! Repair never destroys: only a missing manifest, or a valid leaf manifest
//! whose fingerprint is stale, is (re)written. A manifest that does not
//! parse, has another schema version, or says `branch` over a physical
//! leaf is reported (`PCHRONICLE_MANIFEST_KEPT`) and left as it is; the
//! leaf is counted from its data.
//!
//! A leaf's preview comes from its manifest when the manifest's fingerprint
//! matches the store's cheap physical fingerprint; then no record is read.
//! Otherwise the store scans the data and, unless repairs are disabled,
//! rewrites the leaf's own manifest; when that fails the scanned counts are
//! still reported. A leaf of a format no store can open reports its
//! manifest's stats as they are, marked unverified.
//!
//! Nothing here recurses below the directory it classifies.

use std::path::Path;
use std::sync::Arc;

use super::model::{Counts, DatasetPreview, StatsOrigin};
use crate::error::{Error, ErrorCode};
use crate::store::manifest::{self, Manifest, ManifestKind};
use crate::store::{LeafStore, RecordCounter, Stores};
use crate::warehouse::{Dir, is_remote_path};

/// What a directory is, with the warnings met while finding out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirNode {
    /// `Some` for a leaf.
    pub leaf: Option<DatasetPreview>,
    pub warnings: Vec<NodeWarning>,
}

/// A warning about a directory node; `subpath` is relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeWarning {
    pub code: ErrorCode,
    pub subpath: Option<String>,
    pub message: String,
}

impl NodeWarning {
    fn from_error(dir: &Path, error: &Error) -> Self {
        let subpath = error
            .path
            .as_deref()
            .and_then(|p| p.strip_prefix(dir).ok())
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| p.to_string_lossy().into_owned());
        NodeWarning {
            code: error.code,
            subpath,
            message: error.message.clone(),
        }
    }
}

/// What stands where a leaf's manifest would be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ManifestSlot {
    /// No manifest: one may be written.
    Free,
    /// A valid leaf manifest: it may be updated in place.
    Leaf,
    /// A manifest this build cannot rewrite without losing it (unparsable,
    /// another schema, another kind): never written.
    Kept,
}

/// Classifies `dir`.
pub fn classify_dir(
    dir: &Dir,
    stores: &Stores,
    repair: bool,
    counter: &dyn RecordCounter,
) -> DirNode {
    let mut warnings = Vec::new();
    let (manifest, slot) = match manifest::read(dir) {
        Ok(None) => (None, ManifestSlot::Free),
        Ok(Some(m)) if m.kind == ManifestKind::Leaf => (Some(m), ManifestSlot::Leaf),
        Ok(Some(m)) => (Some(m), ManifestSlot::Kept),
        Err(e) => {
            warnings.push(NodeWarning::from_error(dir.path(), &e));
            (None, ManifestSlot::Kept)
        }
    };
    let leaf = leaf_store(dir, stores, manifest.as_ref(), &mut warnings).map(|store| match store {
        Some(store) => preview(
            dir,
            store.as_ref(),
            manifest,
            repair && slot != ManifestSlot::Kept,
            repair && slot == ManifestSlot::Kept,
            counter,
            &mut warnings,
        ),
        None => {
            let format = manifest
                .as_ref()
                .and_then(|m| m.format.clone())
                .unwrap_or_default();
            warnings.push(NodeWarning {
                code: ErrorCode::FormatUnsupported,
                subpath: None,
                message: format!("format {format:?} cannot be opened by this build"),
            });
            unverified(format, manifest.as_ref())
        }
    });
    DirNode { leaf, warnings }
}

/// The nearest proper ancestor of `path` that is a leaf, if any. Reads only
/// each ancestor's manifest and markers and never repairs anything, so a
/// caller can refuse a path inside a leaf before rooting a catalog there.
pub fn enclosing_leaf(path: &Path, stores: &Stores) -> Option<std::path::PathBuf> {
    let remote = is_remote_path(path);
    path.ancestors().skip(1).find_map(|ancestor| {
        // The ancestors of `s3://bucket` are no warehouse (`s3:` would be
        // a local directory).
        let bucket_or_below =
            is_remote_path(ancestor) && ancestor.as_os_str().len() > "s3://".len();
        if remote && !bucket_or_below {
            return None;
        }
        let dir = Dir::open_root(ancestor).ok()?;
        let manifest = manifest::read(&dir).ok().flatten();
        leaf_store(&dir, stores, manifest.as_ref(), &mut Vec::new()).map(|_| ancestor.to_path_buf())
    })
}

/// Whether `dir` is a leaf, and if so the store that opens it: `Some(None)`
/// for a leaf manifest whose format no registered store handles.
fn leaf_store<'a>(
    dir: &Dir,
    stores: &'a Stores,
    manifest: Option<&Manifest>,
    warnings: &mut Vec<NodeWarning>,
) -> Option<Option<&'a Arc<dyn LeafStore>>> {
    if let Some(m) = manifest.filter(|m| m.kind == ManifestKind::Leaf) {
        return Some(stores.by_format(m.format.as_deref().unwrap_or_default()));
    }
    for store in stores.iter() {
        match store.detect(dir) {
            Ok(true) => return Some(Some(store)),
            Ok(false) => {}
            Err(e) => warnings.push(NodeWarning::from_error(dir.path(), &e)),
        }
    }
    None
}

/// The preview of a leaf that `store` can open. `kept`: a repair was
/// asked for, but a manifest is there that must not be rewritten.
fn preview(
    dir: &Dir,
    store: &dyn LeafStore,
    manifest: Option<Manifest>,
    repair: bool,
    kept: bool,
    counter: &dyn RecordCounter,
    warnings: &mut Vec<NodeWarning>,
) -> DatasetPreview {
    let format = store.format().to_string();
    let manifest = manifest.filter(|m| m.kind == ManifestKind::Leaf);
    let physical = match store.fingerprint(dir) {
        Ok(f) => f,
        Err(e) => {
            warnings.push(NodeWarning::from_error(dir.path(), &e));
            return unverified(format, manifest.as_ref());
        }
    };
    if let Some(m) = &manifest {
        if let (ManifestKind::Leaf, Some(stats)) = (m.kind, m.stats) {
            if m.fingerprint.as_deref() == Some(physical.as_str()) {
                return DatasetPreview {
                    format,
                    counts: stats.into(),
                    fingerprint: Some(physical),
                    trusted: true,
                    stats_origin: StatsOrigin::Manifest,
                };
            }
        }
    }
    let scan = match store.scan(dir, counter) {
        Ok(scan) => scan,
        // A build without the store's engine (Lance) reports what the
        // manifest says, unverified, rather than nothing.
        Err(e) if e.code == ErrorCode::LanceNotBuilt => {
            warnings.push(NodeWarning::from_error(dir.path(), &e));
            return DatasetPreview {
                fingerprint: Some(physical),
                ..unverified(format, manifest.as_ref())
            };
        }
        // A record file of the leaf is being counted in the background: no
        // counts (and no manifest written) until it is.
        Err(e) if e.code == ErrorCode::BeingCounted => {
            return DatasetPreview {
                format,
                counts: Counts::default(),
                fingerprint: Some(physical),
                trusted: false,
                stats_origin: StatsOrigin::Counting,
            };
        }
        Err(e) => {
            warnings.push(NodeWarning::from_error(dir.path(), &e));
            return DatasetPreview {
                format,
                counts: Counts::default(),
                fingerprint: Some(physical),
                trusted: false,
                stats_origin: StatsOrigin::Unavailable,
            };
        }
    };
    let repaired = if repair {
        match store.write_manifest(dir, manifest, &scan) {
            Ok(_) => true,
            Err(e) => {
                warnings.push(NodeWarning::from_error(dir.path(), &e));
                false
            }
        }
    } else if kept {
        warnings.push(NodeWarning {
            code: ErrorCode::ManifestKept,
            subpath: Some(manifest::MANIFEST_FILE.into()),
            message: format!(
                "left as it is; counted from the data (revision {})",
                scan.fingerprint
            ),
        });
        false
    } else {
        if manifest.is_some() {
            warnings.push(NodeWarning {
                code: ErrorCode::ManifestStale,
                subpath: Some(manifest::MANIFEST_FILE.into()),
                message: format!("manifest does not match revision {}", scan.fingerprint),
            });
        }
        false
    };
    DatasetPreview {
        format,
        counts: scan.stats.into(),
        fingerprint: Some(scan.fingerprint),
        trusted: true,
        stats_origin: if repaired {
            StatsOrigin::Repaired
        } else {
            StatsOrigin::Scan
        },
    }
}

/// A preview taken from a manifest as written, unchecked.
fn unverified(format: String, manifest: Option<&Manifest>) -> DatasetPreview {
    let stats = manifest.and_then(|m| m.stats);
    DatasetPreview {
        format,
        counts: stats.map(Counts::from).unwrap_or_default(),
        fingerprint: manifest.and_then(|m| m.fingerprint.clone()),
        trusted: false,
        stats_origin: if stats.is_some() {
            StatsOrigin::Unverified
        } else {
            StatsOrigin::Unavailable
        },
    }
}
