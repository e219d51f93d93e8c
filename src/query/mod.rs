//! `pchronicle query PATH SQL`: SQL over the Snapshot of a path, with
//! DataFusion (the engine Lance already brings) and the JSON functions of
//! `datafusion-functions-json` (`json_get_str(record, 'role')`, …).
//!
//! Two tables: `records` (one row per record of the Snapshot: `_file_`,
//! one string column per hive attribute, `line`, `timestamp`, `failed`,
//! `record` as JSON text; see [`records`]) and `sources` (the rows of
//! `.sources`, `path_attrs` as JSON text; counted only when a query reads
//! it). Rows stream from the sources to the output; only what the SQL
//! itself must hold (a sort, a grouping) is held.
//!
//! Errors of the SQL itself are `PCHRONICLE_QUERY_INVALID` and point at
//! the position DataFusion names; errors while it runs are
//! `PCHRONICLE_QUERY_FAILED`.

#[cfg(feature = "sql")]
mod engine;
#[cfg(feature = "sql")]
mod print;
#[cfg(feature = "sql")]
pub mod records;
#[cfg(feature = "sql")]
mod sources;

use std::path::Path;

use crate::catalog::Catalog;
use crate::error::Result;
use crate::extract::Selection;

/// How query results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResultFormat {
    /// An aligned table.
    #[default]
    Table,
    /// One JSON object per row.
    Json,
    /// Comma-separated values with a header row.
    Csv,
}

/// Runs `sql` over the Snapshot of `rel` narrowed by `selection`, writing
/// the result to `out`; returns what the Snapshot warned about.
pub fn run(
    catalog: std::sync::Arc<Catalog>,
    rel: &Path,
    selection: Selection,
    sql: &str,
    format: ResultFormat,
    out: &mut dyn std::io::Write,
) -> Result<Vec<crate::catalog::Warning>> {
    #[cfg(feature = "sql")]
    {
        engine::run(catalog, rel, selection, sql, format, out)
    }
    #[cfg(not(feature = "sql"))]
    {
        let _ = (catalog, selection, sql, format, out);
        Err(crate::error::Error::at(
            crate::error::ErrorCode::LanceNotBuilt,
            rel,
            "SQL needs DataFusion, and this build was made without the sql feature",
        ))
    }
}
