//! A records scan as it travels to a worker, and back into a scan there.
//!
//! What travels is a description, never records: the warehouse root and
//! the opened path as the coordinator named them, the filters, the
//! sources of the task (each with what pins it: a leaf's revision, a
//! file's size), the columns and the partitions. The worker rebuilds the
//! scan over its own open of that root, after checking that the root is
//! one it serves and that every path is a plain path below it.
//!
//! The description is JSON inside the plan DataFusion's protobuf codec
//! writes: small next to the records, and readable when something goes
//! wrong.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use serde::{Deserialize, Serialize};

use super::roots::Roots;
use crate::catalog::{Counts, Fingerprint, Source, SourceKind, StatsOrigin, Timestamp};
use crate::error::{Error, ErrorCode};
use crate::extract::{Glob, Plan, Selection, Shape};
use crate::query::scan::{RecordsScan, Rows, scan_schema};

/// The build a description was written by, with the features that
/// decide what it reads: a worker reads only its own.
pub(crate) fn build() -> String {
    let mut build = concat!(env!("CARGO_PKG_VERSION"), "+", env!("PCHRONICLE_COMMIT")).to_string();
    for (on, feature) in [
        (cfg!(feature = "compact-jsonl"), "compact-jsonl"),
        (cfg!(feature = "remote"), "remote"),
    ] {
        if on {
            build.push('+');
            build.push_str(feature);
        }
    }
    build
}

/// Partitions one scan may have on a worker.
const MAX_PARTS: usize = 1024;

#[derive(Debug, Serialize, Deserialize)]
struct ScanWire {
    build: String,
    /// The coordinator's warehouse root: a local path or `s3://…`.
    root: String,
    /// The opened path, relative to the root.
    base: String,
    selection: SelectionWire,
    annotated: bool,
    /// `columns`, `lines` or `counts`.
    rows: String,
    columns: Vec<String>,
    sources: Vec<SourceWire>,
    parts: Vec<Vec<usize>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SelectionWire {
    attrs: BTreeMap<String, Vec<String>>,
    since: Option<i64>,
    until: Option<i64>,
    file: Option<String>,
    contains: Option<String>,
    limit: Option<u64>,
    failed: bool,
    version: Option<String>,
    as_of: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SourceWire {
    file: String,
    dataset: bool,
    format: String,
    /// A leaf's revision: the worker reads exactly it.
    revision: Option<String>,
    size: Option<u64>,
    path_attrs: BTreeMap<String, String>,
    record_count: Option<u64>,
    failed_count: Option<u64>,
    min_timestamp: Option<i64>,
    max_timestamp: Option<i64>,
}

/// Encodes and decodes [`RecordsScan`]s. The coordinator's only encodes;
/// a worker's decodes over the roots it serves.
#[derive(Debug, Clone, Default)]
pub struct ScanCodec {
    roots: Option<Arc<Roots>>,
}

impl ScanCodec {
    pub fn coordinator() -> ScanCodec {
        ScanCodec { roots: None }
    }

    pub fn worker(roots: Arc<Roots>) -> ScanCodec {
        ScanCodec { roots: Some(roots) }
    }
}

/// A coded error as DataFusion carries it between processes: its text
/// keeps the code, which the coordinator reads back.
pub(crate) fn carried(error: Error) -> DataFusionError {
    DataFusionError::Execution(error.render())
}

impl PhysicalExtensionCodec for ScanCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let Some(roots) = &self.roots else {
            return Err(DataFusionError::Internal(
                "a coordinator does not read scans sent to it".into(),
            ));
        };
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(
                "a records scan has no inputs".into(),
            ));
        }
        let wire: ScanWire = serde_json::from_slice(buf).map_err(|e| {
            carried(Error::new(
                ErrorCode::WorkerVersion,
                format!("the scan sent could not be read ({e}): is the coordinator another build?"),
            ))
        })?;
        decode(wire, roots).map_err(carried)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
    ) -> datafusion::common::Result<()> {
        let Some(scan) = node.downcast_ref::<RecordsScan>() else {
            return Err(DataFusionError::Internal(format!(
                "not a records scan: {}",
                node.name()
            )));
        };
        let wire = encode(scan).map_err(carried)?;
        serde_json::to_writer(buf, &wire).map_err(|e| DataFusionError::External(Box::new(e)))
    }
}

fn text_of(path: &std::path::Path, what: &str) -> crate::error::Result<String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        Error::at(
            ErrorCode::PathInvalid,
            path,
            format!("{what} is not UTF-8, and only UTF-8 paths can be named to a worker"),
        )
    })
}

fn encode(scan: &RecordsScan) -> crate::error::Result<ScanWire> {
    let plan = scan.plan();
    let selection = plan.selection();
    Ok(ScanWire {
        build: build(),
        root: text_of(scan.catalog().root(), "the warehouse root")?,
        base: text_of(plan.base(), "the path")?,
        selection: SelectionWire {
            attrs: selection.attrs.clone(),
            since: selection.since,
            until: selection.until,
            file: selection.file.as_ref().map(|g| g.text().to_string()),
            contains: selection.contains.clone(),
            limit: selection.limit,
            failed: selection.failed,
            version: selection.version.clone(),
            as_of: selection.as_of,
        },
        annotated: plan.shape() == Shape::Annotated,
        rows: match scan.rows() {
            Rows::Columns => "columns",
            Rows::Lines => "lines",
            Rows::Counts => "counts",
        }
        .to_string(),
        columns: match scan.rows() {
            Rows::Columns => scan
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
            Rows::Lines | Rows::Counts => Vec::new(),
        },
        sources: plan
            .sources()
            .iter()
            .map(|s| SourceWire {
                file: s.file.clone(),
                dataset: s.kind == SourceKind::Dataset,
                format: s.format.to_string(),
                revision: s
                    .fingerprint
                    .as_ref()
                    .and_then(Fingerprint::revision)
                    .map(str::to_string),
                size: s.size,
                path_attrs: s.path_attrs.clone(),
                record_count: s.counts.record_count,
                failed_count: s.counts.failed_count,
                min_timestamp: s.counts.min_timestamp.map(|t| t.0),
                max_timestamp: s.counts.max_timestamp.map(|t| t.0),
            })
            .collect(),
        parts: scan.parts().to_vec(),
    })
}

fn decode(wire: ScanWire, roots: &Roots) -> crate::error::Result<Arc<dyn ExecutionPlan>> {
    if wire.build != build() {
        return Err(Error::new(
            ErrorCode::WorkerVersion,
            format!(
                "the coordinator is pchronicle {}, this worker {}",
                wire.build,
                build()
            ),
        ));
    }
    let (catalog, base) = roots.open(
        &wire.root,
        &wire.base,
        wire.sources.iter().map(|s| s.file.as_str()),
    )?;
    let count = wire.sources.len();
    let mut named = std::collections::BTreeSet::new();
    if wire.parts.len() > MAX_PARTS || !wire.columns.iter().all(|c| named.insert(c.as_str())) {
        return Err(Error::new(
            ErrorCode::WorkerRefused,
            format!("the scan names a column twice, or has more than {MAX_PARTS} partitions"),
        ));
    }
    let mut seen = vec![false; count];
    let disjoint = wire.parts.iter().all(|part| {
        part.windows(2).all(|w| w[0] < w[1])
            && part
                .iter()
                .all(|&i| i < count && !std::mem::replace(&mut seen[i], true))
    });
    if !disjoint {
        return Err(Error::new(
            ErrorCode::WorkerRefused,
            "the scan's partitions do not cut its sources into ordered, disjoint parts",
        ));
    }
    let w = wire.selection;
    let selection = Selection {
        attrs: w.attrs,
        since: w.since,
        until: w.until,
        file: w.file.as_deref().map(Glob::new).transpose()?,
        contains: w.contains,
        limit: w.limit,
        failed: w.failed,
        version: w.version,
        as_of: w.as_of,
    };
    let sources = wire
        .sources
        .into_iter()
        .map(|s| Source {
            file: s.file,
            kind: if s.dataset {
                SourceKind::Dataset
            } else {
                SourceKind::File
            },
            format: s.format.into(),
            counts: Counts {
                record_count: s.record_count,
                failed_count: s.failed_count,
                min_timestamp: s.min_timestamp.map(Timestamp),
                max_timestamp: s.max_timestamp.map(Timestamp),
            },
            fingerprint: s.revision.map(Fingerprint::Revision),
            trusted: false,
            stats_origin: StatsOrigin::Uncounted,
            size: s.size,
            path_attrs: s.path_attrs,
            cut: None,
        })
        .collect();
    let shape = if wire.annotated {
        Shape::Annotated
    } else {
        Shape::Plain
    };
    let rows = match wire.rows.as_str() {
        "columns" => Rows::Columns,
        "lines" => Rows::Lines,
        "counts" => Rows::Counts,
        other => {
            return Err(Error::new(
                ErrorCode::WorkerVersion,
                format!("a scan of {other:?} rows: is the coordinator another build?"),
            ));
        }
    };
    let plan = Plan::of_sources(base, sources, selection, shape);
    Ok(Arc::new(RecordsScan::new(
        catalog,
        Arc::new(plan),
        scan_schema(rows, &wire.columns),
        rows,
        wire.parts,
    )))
}
