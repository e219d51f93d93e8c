//! Planning and running one query: the session, its tables and functions,
//! errors turned into coded ones that point into the SQL.

use std::path::Path;
use std::sync::Arc;

use datafusion::common::DataFusionError;
use datafusion::execution::config::SessionConfig;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::ResultFormat;
use super::print::Printer;
use super::records::RecordsTable;
use super::sources::SourcesTable;
use crate::catalog::{Catalog, Warning};
use crate::error::{Error, ErrorCode, Result};
use crate::extract::{Plan, Selection, Shape};

pub(super) fn run(
    catalog: Arc<Catalog>,
    rel: &Path,
    selection: Selection,
    sql: &str,
    format: ResultFormat,
    out: &mut dyn std::io::Write,
) -> Result<Vec<Warning>> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("pchronicle-query")
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                ErrorCode::QueryFailed,
                format!("cannot start the runtime: {e}"),
            )
        })?;
    let plan = Plan::new(&catalog, rel, selection.clone(), Shape::Plain)?;
    let warnings = plan.warnings().to_vec();
    let records = RecordsTable::new(plan, Arc::clone(&catalog), threads);
    let sources = SourcesTable::new(Arc::clone(&catalog), rel.to_path_buf(), selection);
    let config = SessionConfig::new()
        .with_target_partitions(threads)
        .set_bool("datafusion.sql_parser.collect_spans", true);
    let ctx = SessionContext::new_with_config(config);
    let registered = (|| {
        let mut ctx = ctx.clone();
        datafusion_functions_json::register_all(&mut ctx)?;
        ctx.register_table("records", Arc::new(records))?;
        ctx.register_table("sources", Arc::new(sources))?;
        Ok::<_, DataFusionError>(())
    })();
    registered.map_err(|e| Error::new(ErrorCode::QueryFailed, e.to_string()))?;
    runtime.block_on(async {
        let frame = ctx.sql(sql).await.map_err(|e| invalid(sql, &e))?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let mut stream = frame.execute_stream().await.map_err(|e| invalid(sql, &e))?;
        let mut printer = Printer::new(format, schema, out);
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| failed(&e))?;
            if printer.batch(&batch).is_break() {
                return Ok(());
            }
        }
        printer.finish();
        printer.error().map_or(Ok(()), Err)
    })?;
    Ok(warnings)
}

/// An error of the SQL itself, with the position it names shown under
/// the offending line.
fn invalid(sql: &str, error: &DataFusionError) -> Error {
    let location = error
        .diagnostic()
        .and_then(|d| d.span)
        .map(|span| (span.start.line, span.start.column))
        .filter(|(line, _)| *line > 0)
        .or_else(|| position_in_text(&error.to_string()));
    let mut message = error.find_root().to_string();
    if let Some((line, column)) = location {
        if let Some(text) = sql.lines().nth(line.saturating_sub(1) as usize) {
            let pad = " ".repeat(column.saturating_sub(1) as usize);
            message =
                format!("{message}\n  at line {line}, column {column}:\n    {text}\n    {pad}^");
        }
    }
    // An error of reading (not of the SQL) can surface while planning.
    if matches!(error.find_root(), DataFusionError::External(_)) {
        return Error::new(ErrorCode::QueryFailed, message);
    }
    Error::new(ErrorCode::QueryInvalid, message)
}

/// `Line: L, Column: C` in a parser error's text.
fn position_in_text(text: &str) -> Option<(u64, u64)> {
    let at = text.rfind("Line: ")?;
    let rest = &text[at + "Line: ".len()..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let column: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((line.trim().parse().ok()?, column.parse().ok()?))
}

fn failed(error: &DataFusionError) -> Error {
    Error::new(ErrorCode::QueryFailed, error.find_root().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_positions_are_found_in_the_text() {
        assert_eq!(
            position_in_text(
                "sql parser error: Expected: end of statement, found: x at Line: 1, Column: 15"
            ),
            Some((1, 15))
        );
        assert_eq!(position_in_text("no position"), None);
    }
}
