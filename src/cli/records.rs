//! `cat` and `query`: the records of a path out, as JSON Lines or through
//! SQL, and the filters they share with `ls --sources` and `stats`.

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::WalkArgs;
use super::browse::at_user_path;
use super::out;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::{Output, Plan, Position, Selection, Shape};
use crate::query::{self, ResultFormat};

/// Bytes buffered before they are written to standard output.
const OUT_BUFFER: usize = 256 << 10;

// The filters `cat`, `query`, `ls --sources` and `stats` share.
#[derive(Args, Debug, Clone, Default)]
pub(super) struct FilterArgs {
    /// Only sources whose hive path attribute KEY is VALUE (a directory
    /// `KEY=VALUE` between PATH and the source). Repeat for more keys; a
    /// key given twice takes either value. Other sources are not opened.
    #[arg(long = "where", value_name = "KEY=VALUE", help_heading = "Filters")]
    where_: Vec<String>,
    /// Only records at or after this RFC 3339 time (records without a
    /// timestamp are left out). Sources whose known time range ends
    /// before it are not opened.
    #[arg(long, value_name = "TIME", help_heading = "Filters")]
    since: Option<String>,
    /// Only records before this RFC 3339 time.
    #[arg(long, value_name = "TIME", help_heading = "Filters")]
    until: Option<String>,
    /// Only records whose `_file_` matches GLOB (`*` within one path
    /// segment, `**` across them, `?`, `[a-z]`). Files that cannot match
    /// are not opened.
    #[arg(long, value_name = "GLOB", help_heading = "Filters")]
    file: Option<String>,
    /// Only records whose stored bytes hold TEXT (a literal substring,
    /// case-sensitive, matched without parsing; a failed record's raw
    /// text counts). With `ls --sources` and `stats`: the sources that
    /// hold such a record, whole.
    #[arg(long, value_name = "TEXT", help_heading = "Filters")]
    contains: Option<String>,
    /// Read the leaf PATH as it was at revision N: a compact-jsonl leaf's
    /// Lance version number or a tag made with `pchronicle tag`, a
    /// storyline leaf's generation. The same as reading PATH/.versions/N.
    #[arg(long, value_name = "N|TAG", help_heading = "Filters")]
    version: Option<String>,
    /// Read PATH as it was at TIME (RFC 3339): each compact-jsonl leaf at
    /// its newest Lance version committed by then, each storyline leaf at
    /// the generation current then (judged from file times, with a
    /// warning), each record file's records stamped at or before TIME;
    /// `cut` in `--sources` says which. Leaves made later are left out.
    #[arg(
        long = "as-of",
        value_name = "TIME",
        help_heading = "Filters",
        conflicts_with = "version"
    )]
    as_of: Option<String>,
}

impl FilterArgs {
    pub(super) fn selection(&self) -> Result<Selection> {
        Selection::from_filters(
            self.where_.iter().map(String::as_str),
            self.since.as_deref(),
            self.until.as_deref(),
            self.file.as_deref(),
            self.contains.as_deref(),
        )
        .and_then(|selection| {
            let mut selection = Selection {
                version: self.version.clone(),
                ..selection
            };
            if let Some(text) = &self.as_of {
                selection.set_as_of(text)?;
            }
            Ok(selection)
        })
    }
}

// The flags of `cat`.
#[derive(Args, Debug)]
pub(super) struct CatArgs {
    /// A warehouse directory, a dataset leaf, or a record file; local, or
    /// `s3://BUCKET/PREFIX/...` on object storage (docs/remote.md).
    #[arg(default_value = ".")]
    path: PathBuf,
    #[command(flatten)]
    filters: FilterArgs,
    /// Stop after N records.
    #[arg(long, value_name = "N", help_heading = "Filters")]
    limit: Option<u64>,
    /// Also print failed records, each as {"_file_", "line", "failed",
    /// "raw"} with its raw text.
    #[arg(long)]
    failed: bool,
    /// Wrap each record as {"_file_", "line", "path_attrs", "timestamp",
    /// "record"}.
    #[arg(long)]
    annotate: bool,
    #[command(flatten)]
    walk: WalkArgs,
    #[cfg(feature = "distributed")]
    #[command(flatten)]
    workers: super::worker::WorkersArgs,
}

impl CatArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let mut selection = self.filters.selection()?;
        selection.limit = self.limit;
        selection.failed = self.failed;
        let shape = if self.annotate {
            Shape::Annotated
        } else {
            Shape::Plain
        };
        #[cfg(feature = "distributed")]
        self.workers.configure()?;
        let (catalog, rel) = Catalog::for_path(&self.path, self.walk.options())?;
        let plan =
            Plan::new(&catalog, &rel, selection, shape).map_err(|e| at_user_path(e, &self.path))?;
        super::table::warn(plan.warnings(), false);
        if selection_is_empty(&plan) {
            return Ok(ExitCode::SUCCESS);
        }
        let mut out = PipeOut {
            inner: io::BufWriter::with_capacity(OUT_BUFFER, out::exact_stdout()),
            closed: false,
        };
        #[cfg(feature = "distributed")]
        let ran = match crate::distributed::configured() {
            Some(workers) => {
                crate::distributed::cat::cat(&workers, Arc::new(catalog), plan, &mut out)
                    .map(|()| ControlFlow::Continue(()))
            }
            None => plan.run(&catalog, Position::default(), &mut out),
        };
        #[cfg(not(feature = "distributed"))]
        let ran = plan.run(&catalog, Position::default(), &mut out);
        let flushed = out.flush();
        let _ = ran.map_err(|e| at_user_path(e, &self.path))?;
        flushed.map_err(|e| Error::new(ErrorCode::Io, format!("writing the records: {e}")))?;
        Ok(ExitCode::SUCCESS)
    }
}

fn selection_is_empty(plan: &Plan) -> bool {
    plan.sources().is_empty() || plan.selection().limit == Some(0)
}

/// Standard output for records: a reader that goes away (`| head`) ends
/// the read quietly instead of failing it.
struct PipeOut<W: Write> {
    inner: W,
    closed: bool,
}

impl<W: Write> PipeOut<W> {
    fn quiet(&mut self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}

impl<W: Write> Write for PipeOut<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(bytes.len());
        }
        let written = self.inner.write_all(bytes);
        self.quiet(written).map(|()| bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let flushed = self.inner.flush();
        self.quiet(flushed)
    }
}

impl<W: Write> Output for PipeOut<W> {
    fn record_end(&mut self, _after: Position) -> io::Result<ControlFlow<()>> {
        Ok(if self.closed {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }
}

// The flags of `query`.
#[derive(Args, Debug)]
pub(super) struct QueryArgs {
    /// A warehouse directory, a dataset leaf, or a record file; local, or
    /// `s3://BUCKET/PREFIX/...` on object storage (docs/remote.md).
    path: PathBuf,
    /// The SQL, over the tables `records` and `sources`.
    sql: String,
    #[command(flatten)]
    filters: FilterArgs,
    /// Print each row as a JSON object (JSON Lines).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV with a header row.
    #[arg(long)]
    csv: bool,
    #[command(flatten)]
    walk: WalkArgs,
    #[cfg(feature = "distributed")]
    #[command(flatten)]
    workers: super::worker::WorkersArgs,
}

impl QueryArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let selection = self.filters.selection()?;
        #[cfg(feature = "distributed")]
        self.workers.configure()?;
        let format = if self.json {
            ResultFormat::Json
        } else if self.csv {
            ResultFormat::Csv
        } else {
            ResultFormat::Table
        };
        let (catalog, rel) = Catalog::for_path(&self.path, self.walk.options())?;
        // A table is for people; JSON Lines and CSV are exact.
        let sink: Box<dyn Write> = match format {
            ResultFormat::Table => out::for_people(),
            ResultFormat::Json | ResultFormat::Csv => Box::new(out::exact_stdout()),
        };
        let mut out = io::BufWriter::with_capacity(OUT_BUFFER, sink);
        let catalog = Arc::new(catalog);
        let warnings = query::run(catalog, &rel, selection, &self.sql, format, &mut out)
            .map_err(|e| at_user_path(e, &self.path))?;
        super::table::warn(&warnings, false);
        Ok(ExitCode::SUCCESS)
    }
}
