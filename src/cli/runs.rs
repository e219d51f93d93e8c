//! `runs`: the runs of a path, sorted, as `GET /api/runs` answers them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::WalkArgs;
use super::browse::at_user_path;
use super::out;
use super::records::FilterArgs;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::runs::RunFilter;
use crate::extract::runs::page::{self, PageAnswer, Sort};
use crate::extract::{Plan, Shape};

// The flags of `runs`.
#[derive(Args, Debug)]
pub(super) struct RunsArgs {
    /// A warehouse directory, a dataset leaf, or a record file; local, or
    /// `s3://BUCKET/PREFIX/...` on object storage (docs/remote.md).
    #[arg(default_value = ".")]
    path: PathBuf,
    #[command(flatten)]
    filters: FilterArgs,
    /// Order: name (A to Z), newest (latest last record first), longest
    /// (duration), failed, tokens, records, steps, calls (tool calls),
    /// errors (failed tool results) or score (most first). Ties, and runs
    /// without the figure (last), go by name.
    #[arg(long, value_name = "KEY", default_value = "name", value_parser = sorts())]
    sort: String,
    /// Only runs whose first model a record names is exactly MODEL.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Only runs of the agent AGENT (ATIF `agent.name`, a Codex
    /// `originator`).
    #[arg(long, value_name = "AGENT")]
    agent: Option<String>,
    /// Only runs whose model last stopped for REASON (`end_turn`,
    /// `stop`, `tool_use`, ...).
    #[arg(long, value_name = "REASON")]
    stop: Option<String>,
    /// Print only the first N runs in that order.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print the JSON `GET /api/runs?limit=N` answers (its `next` is
    /// always null: there is no server to hand a cursor back to).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    walk: WalkArgs,
}

impl RunsArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let sort = Sort::parse(&self.sort).ok_or_else(|| {
            Error::new(
                ErrorCode::FilterInvalid,
                format!("--sort {}: expected one of {}", self.sort, Sort::names()),
            )
        })?;
        let selection = self.filters.selection()?;
        let (catalog, rel) = Catalog::for_path(&self.path, self.walk.options())?;
        let mut plan = Plan::new(&catalog, &rel, selection, Shape::Plain)
            .map_err(|e| at_user_path(e, &self.path))?;
        let all = crate::extract::runs::runs(&catalog, &mut plan)
            .map_err(|e| at_user_path(e, &self.path))?;
        let filter = RunFilter {
            model: self.model,
            agent: self.agent,
            stop: self.stop,
            ..RunFilter::default()
        };
        let chosen = all.chosen(&filter);
        let total = chosen.len();
        let limit = self.limit.unwrap_or(usize::MAX);
        let page = page::page(chosen, sort, None, limit);
        let answer = PageAnswer::of(&all, total, page, sort, None);
        if self.json {
            out::exact(&answer.to_json());
        } else {
            out::say_text(&super::table::runs(&answer));
        }
        super::table::warn(&all.summary.warnings, all.summary.truncated);
        Ok(ExitCode::SUCCESS)
    }
}

fn sorts() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(Sort::ALL.map(Sort::name))
}
