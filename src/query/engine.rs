//! Planning and running one query: the session, its tables and functions,
//! errors turned into coded ones that point into the SQL.

use std::path::Path;
use std::sync::Arc;

use datafusion::common::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::bounds::{self, Bounded};
use super::print::Printer;
use super::records::RecordsTable;
use super::sources::SourcesTable;
use super::{Limits, Outcome, ResultFormat};
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::{Plan, Selection, Shape};

pub(super) fn run(
    catalog: Arc<Catalog>,
    rel: &Path,
    selection: Selection,
    sql: &str,
    format: ResultFormat,
    limits: Limits,
    out: &mut dyn std::io::Write,
) -> Result<Outcome> {
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
    // The query's own budget when it has a time limit (what reads for it
    // on other threads stops with it), else the caller's.
    let job = match limits.time {
        Some(time) => Some(crate::work::Work::within_budget("query", time)),
        None => crate::work::current(),
    };
    let sources = SourcesTable::new(
        Arc::clone(&catalog),
        rel.to_path_buf(),
        selection,
        job.clone(),
    );
    let config = SessionConfig::new()
        .with_target_partitions(threads)
        .set_bool("datafusion.sql_parser.collect_spans", true);
    let mut env = RuntimeEnvBuilder::new();
    if let Some(bytes) = limits.memory {
        env = env.with_memory_limit(bytes, 1.0).with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        );
    }
    let env = env
        .build_arc()
        .map_err(|e| Error::new(ErrorCode::QueryFailed, e.to_string()))?;
    #[allow(unused_mut)]
    let mut state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_runtime_env(env);
    #[cfg(feature = "distributed")]
    if let Some(workers) = crate::distributed::configured() {
        state = runtime.block_on(crate::distributed::coordinator::over(state, &workers))?;
    }
    let ctx = SessionContext::new_with_state(state.build());
    let registered = (|| {
        let mut ctx = ctx.clone();
        datafusion_functions_json::register_all(&mut ctx)?;
        ctx.register_table("records", Arc::new(records))?;
        ctx.register_table("sources", Arc::new(sources))?;
        Ok::<_, DataFusionError>(())
    })();
    registered.map_err(|e| Error::new(ErrorCode::QueryFailed, e.to_string()))?;
    if let Some(bytes) = limits.memory {
        bounds::bound_functions(&ctx, (bytes / 4).max(1 << 20));
    }
    let mut bounded = None;
    let out: &mut dyn std::io::Write = match limits.bytes {
        Some(most) => bounded.insert(Bounded::new(out, most)),
        None => out,
    };
    let mut outcome = Outcome {
        warnings,
        ..Outcome::default()
    };
    // Only what reads: the plan itself is checked, subqueries included.
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let query = async {
        let frame = ctx
            .sql_with_options(sql, read_only)
            .await
            .map_err(|e| invalid(sql, &e))?;
        // DESCRIBE (or DESC) is a statement of its own that the options
        // above let through.
        if matches!(
            frame.logical_plan(),
            datafusion::logical_expr::LogicalPlan::DescribeTable(_)
        ) {
            return Err(Error::new(
                ErrorCode::QueryRefused,
                "only queries that read are run (SELECT, WITH, EXPLAIN); this one is DESCRIBE",
            ));
        }
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let mut stream = frame.execute_stream().await.map_err(|e| invalid(sql, &e))?;
        let mut printer = Printer::new(format, schema, out);
        let mut left = limits.rows.unwrap_or(u64::MAX);
        let mut capped = false;
        while let Some(batch) = stream.next().await {
            let mut batch = batch.map_err(|e| failed(&e))?;
            if batch.num_rows() as u64 > left {
                batch = batch.slice(0, left as usize);
                capped = true;
            }
            left -= batch.num_rows() as u64;
            if printer.batch(&batch).is_break() || capped {
                break;
            }
        }
        printer.finish();
        printer.error().map_or(Ok(capped), Err)
    };
    let ended = runtime.block_on(async {
        match limits.time {
            None => query.await.map(Some),
            Some(time) => match tokio::time::timeout(time, query).await {
                Ok(done) => done.map(Some),
                Err(_) => Ok(None),
            },
        }
    })?;
    match ended {
        Some(capped) => outcome.rows_capped = capped,
        None => {
            outcome.timed_out = true;
            // What still reads for it stops at its next check; nothing
            // waits for that here.
            if let Some(job) = &job {
                job.cancel();
            }
        }
    }
    runtime.shutdown_background();
    outcome.bytes_capped = bounded.is_some_and(|b| b.capped());
    Ok(outcome)
}

/// An error of the SQL itself, with the position it names shown under
/// the offending line.
fn invalid(sql: &str, error: &DataFusionError) -> Error {
    #[cfg(feature = "distributed")]
    if let Some(error) =
        crate::distributed::configured().and_then(|_| crate::distributed::worker_error(error))
    {
        return error;
    }
    let location = error
        .diagnostic()
        .and_then(|d| d.span)
        .map(|span| (span.start.line, span.start.column))
        .filter(|(line, _)| *line > 0)
        .or_else(|| position_in_text(&error.to_string()));
    let mut message = crate::error::without_source_locations(&error.find_root().to_string());
    if let Some((line, column)) = location {
        if let Some(text) = sql.lines().nth(line.saturating_sub(1) as usize) {
            let pad = " ".repeat(column.saturating_sub(1) as usize);
            message =
                format!("{message}\n  at line {line}, column {column}:\n    {text}\n    {pad}^");
        }
    }
    // The plan defines, changes or writes something (checked by the
    // session's SQL options).
    let root = error.find_root().to_string();
    if [
        "DDL not supported",
        "DML not supported",
        "Statement not supported",
    ]
    .iter()
    .any(|refused| root.contains(refused))
    {
        return Error::new(
            ErrorCode::QueryRefused,
            format!("only queries that read are run: {root}"),
        );
    }
    // A function's bound (see bounds.rs) can be met while planning, when
    // the optimizer folds constants.
    if matches!(error.find_root(), DataFusionError::ResourcesExhausted(_)) {
        return Error::new(ErrorCode::QueryMemory, message);
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
    #[cfg(feature = "distributed")]
    if let Some(error) =
        crate::distributed::configured().and_then(|_| crate::distributed::worker_error(error))
    {
        return error;
    }
    let root = error.find_root();
    let code = match root {
        DataFusionError::ResourcesExhausted(_) => ErrorCode::QueryMemory,
        _ => ErrorCode::QueryFailed,
    };
    Error::new(
        code,
        crate::error::without_source_locations(&root.to_string()),
    )
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
