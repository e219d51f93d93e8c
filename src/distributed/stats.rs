//! `stats` over workers: the record files not in the count cache are
//! counted on the workers, and their counts kept in the coordinator's
//! cache as if counted here (when the file is still the one counted), so
//! the answer is then made as without workers.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, Int64Array, StringArray, UInt64Array};

use super::cat::spread;
use super::coordinator::Workers;
use crate::catalog::{Catalog, SourceKind, StatsOrigin};
use crate::error::{Error, ErrorCode, Result};
use crate::extract::{Plan, Selection, Shape};
use crate::query::scan::Rows;
use crate::records::RecordStats;

/// Counts on `workers` the record files of `rel` the count cache does
/// not hold; returns how many were counted there and kept.
pub fn count_on_workers(workers: &Workers, catalog: &Arc<Catalog>, rel: &Path) -> Result<usize> {
    let snapshot = catalog.open_for_reading(rel)?;
    let uncounted: Vec<_> = snapshot
        .sources
        .into_iter()
        .filter(|s| s.kind == SourceKind::File && s.stats_origin == StatsOrigin::Uncounted)
        .collect();
    if uncounted.is_empty() {
        return Ok(0);
    }
    // Only counts of the files asked for are kept.
    let asked: std::collections::HashSet<String> =
        uncounted.iter().map(|s| s.file.clone()).collect();
    let plan = Plan::of_sources(
        rel.to_path_buf(),
        uncounted,
        Selection::default(),
        Shape::Plain,
    );
    let mut kept = 0;
    let malformed = || Error::new(ErrorCode::Io, "a worker sent counts of another shape");
    spread(workers, Arc::clone(catalog), plan, Rows::Counts, |batch| {
        let text = |i: usize| batch.column(i).as_any().downcast_ref::<StringArray>();
        let unsigned = |i: usize| batch.column(i).as_any().downcast_ref::<UInt64Array>();
        let signed = |i: usize| batch.column(i).as_any().downcast_ref::<Int64Array>();
        let (
            Some(file),
            Some(size),
            Some(mtime),
            Some(records),
            Some(failed),
            Some(min),
            Some(max),
        ) = (
            text(0),
            unsigned(1),
            signed(2),
            unsigned(3),
            unsigned(4),
            signed(5),
            signed(6),
        )
        else {
            return Err(malformed());
        };
        for i in 0..batch.num_rows() {
            let stats = RecordStats {
                record_count: records.value(i),
                failed_count: failed.value(i),
                min_timestamp: min.is_valid(i).then(|| min.value(i)),
                max_timestamp: max.is_valid(i).then(|| max.value(i)),
            };
            if !asked.contains(file.value(i)) {
                return Err(Error::new(
                    ErrorCode::WorkerRefused,
                    format!(
                        "a worker sent counts of {:?}, which it was not asked to count",
                        file.value(i)
                    ),
                ));
            }
            let path = rel.join(file.value(i));
            if catalog.adopt_counts(&path, size.value(i), mtime.value(i), stats) {
                kept += 1;
            }
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    log::info!("{kept} record files counted on workers");
    // Written where counts made here are written, if anywhere (a
    // command's cache lives in memory).
    catalog.save_counts()?;
    Ok(kept)
}
