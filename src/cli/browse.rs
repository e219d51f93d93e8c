//! `ls` and `stats`: one catalog for the named path, one call into it, and
//! the answer printed as a table or as the JSON the mount serves.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::records::FilterArgs;
use super::{WalkArgs, out, table};
use crate::catalog::Catalog;
use crate::error::{Error, Result};

// The flags of `ls`.
#[derive(Args, Debug)]
pub(super) struct LsArgs {
    /// A warehouse directory, a dataset leaf, or a record file; local, or
    /// `s3://BUCKET/PREFIX/...` on object storage (docs/remote.md).
    #[arg(default_value = ".")]
    path: PathBuf,
    /// Print the Snapshot sources of PATH instead (every leaf and record
    /// file below it, with `_file_` relative to PATH).
    #[arg(long)]
    sources: bool,
    /// Print JSON (a listing object; with --sources, JSON Lines).
    #[arg(long)]
    json: bool,
    /// With --sources: only the sources the filters may match.
    #[command(flatten)]
    filters: FilterArgs,
    #[command(flatten)]
    walk: WalkArgs,
}

impl LsArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let LsArgs {
            path,
            sources,
            json,
            filters,
            walk,
        } = self;
        let selection = filters.selection()?;
        if (selection.narrows() || selection.contains.is_some() || selection.reads_past())
            && !sources
        {
            return Err(Error::new(
                crate::error::ErrorCode::FilterInvalid,
                "filters select sources: use them with `ls --sources` (a listing is one level, unfiltered)",
            ));
        }
        let (catalog, rel) = Catalog::for_path(&path, walk.options())?;
        if sources {
            let snapshot = crate::extract::sources(&catalog, &rel, &selection)
                .map_err(|e| at_user_path(e, &path))?;
            if json {
                out::exact(&snapshot.sources_jsonl());
            } else {
                out::say_text(&table::sources(&snapshot));
            }
            table::warn(&snapshot.warnings, snapshot.truncated);
        } else {
            let listing = catalog.list(&rel).map_err(|e| at_user_path(e, &path))?;
            if json {
                out::exact(&listing.to_json());
            } else {
                out::say_text(&table::listing(&listing));
            }
            table::warn(&listing.warnings, listing.truncated);
        }
        Ok(ExitCode::SUCCESS)
    }
}

// The flags of `stats`.
#[derive(Args, Debug)]
pub(super) struct StatsArgs {
    /// A warehouse directory, a dataset leaf, or a record file; local, or
    /// `s3://BUCKET/PREFIX/...` on object storage (docs/remote.md).
    #[arg(default_value = ".")]
    path: PathBuf,
    /// Print pretty JSON (the content of the mount's `.stats`).
    #[arg(long)]
    json: bool,
    /// Roll up only the sources the filters may match (whole sources: a
    /// source that overlaps the time window counts with all its records).
    #[command(flatten)]
    filters: FilterArgs,
    #[command(flatten)]
    walk: WalkArgs,
    // Record files not counted yet are counted by the workers, their
    // counts kept here as if counted here.
    #[cfg(feature = "distributed")]
    #[command(flatten)]
    workers: super::worker::WorkersArgs,
}

impl StatsArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let StatsArgs {
            path,
            json,
            filters,
            walk,
            #[cfg(feature = "distributed")]
            workers,
        } = self;
        let selection = filters.selection()?;
        let (catalog, rel) = Catalog::for_path(&path, walk.options())?;
        #[cfg(feature = "distributed")]
        let catalog = {
            workers.configure()?;
            let catalog = std::sync::Arc::new(catalog);
            if let Some(workers) = crate::distributed::configured() {
                crate::distributed::stats::count_on_workers(&workers, &catalog, &rel)
                    .map_err(|e| at_user_path(e, &path))?;
            }
            catalog
        };
        let stats = crate::extract::stats(&catalog, &rel, &selection)
            .map_err(|e| at_user_path(e, &path))?;
        if json {
            out::exact(&stats.to_json());
        } else {
            out::say_text(&table::stats(&stats));
        }
        table::warn(&stats.warnings, stats.truncated);
        Ok(ExitCode::SUCCESS)
    }
}

/// Errors name the path as the user typed it, not the catalog-relative one.
pub(super) fn at_user_path(mut error: Error, user: &Path) -> Error {
    if error.path.as_deref().is_some_and(Path::is_relative) {
        error.path = Some(user.to_path_buf());
    }
    error
}
