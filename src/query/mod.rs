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
pub(crate) mod bounds;
#[cfg(feature = "sql")]
mod engine;
#[cfg(feature = "sql")]
mod print;
#[cfg(feature = "sql")]
pub mod records;
#[cfg(feature = "sql")]
pub mod scan;
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

/// Bounds of one query: rows written and time taken. Hitting one ends the
/// query early without an error; [`Outcome`] says which.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub rows: Option<u64>,
    pub time: Option<std::time::Duration>,
    /// Bytes the query's operators (sorts, groupings, joins) may hold;
    /// past it the query fails with `PCHRONICLE_QUERY_MEMORY` and nothing
    /// spills to disk. `None`: unbounded, spilling to a temporary
    /// directory as DataFusion does. A quarter of it bounds what one
    /// function may make of one batch of rows (`repeat`, `lpad`, …).
    pub memory: Option<usize>,
    /// Bytes of output at most: the result ends at the last whole line
    /// within it.
    pub bytes: Option<usize>,
}

/// How a query ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// What the Snapshot warned about.
    pub warnings: Vec<crate::catalog::Warning>,
    /// Rows were left out at [`Limits::rows`].
    pub rows_capped: bool,
    /// The query was stopped at [`Limits::time`].
    pub timed_out: bool,
    /// Rows were left out at [`Limits::bytes`].
    pub bytes_capped: bool,
}

/// Runs `sql` over the Snapshot of `rel` narrowed by `selection`, writing
/// the result to `out`; returns what the Snapshot warned about. Only
/// queries that read are run (`SELECT`, `WITH`, `EXPLAIN`): anything that
/// would define, change or write is refused (`PCHRONICLE_QUERY_REFUSED`).
pub fn run(
    catalog: std::sync::Arc<Catalog>,
    rel: &Path,
    selection: Selection,
    sql: &str,
    format: ResultFormat,
    out: &mut dyn std::io::Write,
) -> Result<Vec<crate::catalog::Warning>> {
    run_limited(catalog, rel, selection, sql, format, Limits::default(), out)
        .map(|outcome| outcome.warnings)
}

/// [`run`] within `limits`.
pub fn run_limited(
    catalog: std::sync::Arc<Catalog>,
    rel: &Path,
    selection: Selection,
    sql: &str,
    format: ResultFormat,
    limits: Limits,
    out: &mut dyn std::io::Write,
) -> Result<Outcome> {
    refuse_writes(sql)?;
    #[cfg(feature = "sql")]
    {
        engine::run(catalog, rel, selection, sql, format, limits, out)
    }
    #[cfg(not(feature = "sql"))]
    {
        let _ = (catalog, selection, sql, format, limits, out);
        Err(crate::error::Error::at(
            crate::error::ErrorCode::LanceNotBuilt,
            rel,
            "SQL needs DataFusion, and this build was made without the sql feature",
        ))
    }
}

/// Refuses SQL that starts with the word of a statement that does not
/// read (comments and parentheses before it skipped). Anything else goes
/// to the parser, so a misspelt query gets its syntax error with a caret;
/// the engine then refuses definitions, changes, `COPY` and other
/// statements in the plan itself, subqueries included.
fn refuse_writes(sql: &str) -> Result<()> {
    const REFUSED: &[&str] = &[
        "ALTER",
        "ANALYZE",
        "BEGIN",
        "CACHE",
        "COMMENT",
        "COMMIT",
        "COPY",
        "CREATE",
        "DEALLOCATE",
        "DELETE",
        "DESC",
        "DESCRIBE",
        "DROP",
        "EXECUTE",
        "GRANT",
        "INSERT",
        "LOAD",
        "MERGE",
        "PREPARE",
        "REPLACE",
        "RESET",
        "REVOKE",
        "ROLLBACK",
        "SAVEPOINT",
        "SET",
        "SHOW",
        "START",
        "TRUNCATE",
        "UNLOAD",
        "UPDATE",
        "USE",
        "VACUUM",
    ];
    let mut rest = sql;
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(after) = trimmed.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = trimmed.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            rest = trimmed;
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect::<String>()
        .to_ascii_uppercase();
    if !REFUSED.contains(&word.as_str()) {
        return Ok(());
    }
    Err(crate::error::Error::new(
        crate::error::ErrorCode::QueryRefused,
        format!("only queries that read are run (SELECT, WITH, EXPLAIN); this one is {word}"),
    ))
}

#[cfg(test)]
mod limit_tests {
    use super::refuse_writes;

    #[test]
    fn statements_that_do_not_read_are_refused_by_their_first_word() {
        for ok in [
            "SELEC 1",
            "",
            "-- only a comment",
            "SELECT 1",
            "  with x as (select 1) select * from x",
            "-- c\n(SELECT 1)",
            "/* x */ EXPLAIN SELECT 1",
        ] {
            assert!(refuse_writes(ok).is_ok(), "{ok}");
        }
        for bad in [
            "COPY records TO '/tmp/x'",
            "CREATE TABLE t AS SELECT 1",
            "INSERT INTO t VALUES (1)",
            "SET x = 1",
            "DROP TABLE records",
            "/* hidden */ ( copy records to 'x')",
            "describe records",
            "DESC records",
        ] {
            assert!(refuse_writes(bad).is_err(), "{bad}");
        }
    }
}
