//! The command line: argument parsing and output formatting only. Every
//! answer comes from the catalog; `--json` prints exactly what the mount's
//! synthetic files hold.
//!
//! Exit codes: 0 success, 1 a failure (printed as `error[CODE]: …`),
//! 2 bad usage.
//!
//! [`Command`] is the whole grammar. Each command's flags and its `run`
//! live together, by area: `browse.rs` (ls, stats), `records.rs` (cat,
//! query and the filters they share), `mount.rs` (mount,
//! umount, refresh), `ingest.rs` (import, append, tag), `index.rs` (index,
//! lookup), `serve.rs` (serve) and `guide.rs` (errors, demo, completions,
//! man); `table.rs` renders answers for people,
//! and `out.rs` writes everything (escaped for a terminal, exact for machines). The
//! flag structs carry no doc comment of their own: clap would read it as
//! the command's description, which the [`Command`] variant gives.

mod browse;
mod guide;
mod helper;
mod index;
mod ingest;
mod mount;
mod out;
mod records;
mod runs;
#[cfg(feature = "serve")]
mod serve;
mod table;
#[cfg(feature = "distributed")]
mod worker;

use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::catalog::CatalogOptions;
use crate::error::Result;

/// `pchronicle --version`: the release and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PCHRONICLE_COMMIT"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "pchronicle",
    version = VERSION,
    about = "Browse a trajectory warehouse: mount it read-only, list datasets, count records.",
    long_about = "pchronicle reads a trajectory warehouse: a directory tree of dataset leaves \
(compact-jsonl Lance tables, storyline generations), loose JSON/JSONL/NDJSON/JSONSEQ record files \
and sealed record shards. `mount` shows it as a read-only filesystem with `.stats` and `.sources` \
in every directory and dataset. `ls` lists one level like the shell does; `ls --sources` and \
`stats` open a path as a virtual dataset of every leaf and record file below it.\n\n\
Exit codes: 0 success, 1 failure (error[CODE] on stderr; see `pchronicle errors CODE`), 2 bad usage."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount WAREHOUSE read-only at MOUNTPOINT. Every directory lists like
    /// `pchronicle ls`, every dataset leaf shows only `.stats` and
    /// `.sources`, record files and other files read as they are. Goes to
    /// the background once the mount answers; `pchronicle umount` ends it.
    #[command(after_help = "Examples:\n  \
pchronicle mount ./warehouse /tmp/wh && ls -la /tmp/wh && cat /tmp/wh/.stats\n  \
pchronicle umount /tmp/wh\n\n\
SIGINT, SIGTERM and SIGHUP unmount cleanly. After a daemon was killed, \
`pchronicle umount MOUNTPOINT` clears the dead mount, and mounting again onto it recovers it.")]
    Mount(mount::MountArgs),
    /// Unmount a pchronicle mount, also one whose daemon died.
    Umount(mount::UmountArgs),
    /// Make a running mount show what changed underneath now, instead of
    /// within its TTLs: the daemon and the kernel forget what they cached
    /// of PATH and everything below it (and the rollups above it). Root
    /// or the user the daemon runs as.
    #[command(after_help = "Examples:\n  \
pchronicle refresh /tmp/wh team/runs\n  \
pchronicle refresh /tmp/wh            # the whole mount")]
    Refresh(mount::RefreshArgs),
    /// List one level of PATH, like `ls`: directories, datasets (with a count
    /// preview) and files. A dataset leaf lists as itself alone.
    Ls(browse::LsArgs),
    /// Open PATH as a Snapshot and print its rolled-up stats: sources,
    /// records, failed records, time range, per-format totals.
    Stats(browse::StatsArgs),
    /// Print every record of PATH as JSON Lines: sources in `_file_`
    /// order, records in stored order, each valid record exactly as stored.
    /// Failed records are left out unless --failed.
    #[command(after_help = "Examples:\n  \
pchronicle cat ./warehouse/team/codex_jsonl | head -1\n  \
pchronicle cat ./warehouse --where session=abc --since 2026-01-01T00:00:00Z --annotate\n  \
pchronicle cat ./warehouse --file 'team/**/*.jsonl' --limit 10\n\n\
The mount shows the same bytes as LEAF/.records in every dataset leaf.")]
    Cat(records::CatArgs),
    /// Run SQL over the records and sources of PATH. Tables: `records`
    /// (_file_, one column per hive attribute, line, timestamp, failed,
    /// record as JSON text) and `sources` (the rows of .sources). JSON
    /// functions such as json_get_str(record, 'role') are available.
    #[command(after_help = "Examples:\n  \
pchronicle query ./warehouse \"SELECT json_get_str(record, 'role') AS role, count(*) FROM records GROUP BY role ORDER BY 2 DESC\"\n  \
pchronicle query ./warehouse \"SELECT _file_, count(*) FROM records WHERE failed GROUP BY _file_ ORDER BY 2 DESC LIMIT 5\"\n  \
pchronicle query ./warehouse --where session=abc \"SELECT timestamp, record FROM records WHERE timestamp >= '2026-01-01T00:00:00Z'\" --json")]
    Query(records::QueryArgs),
    /// Print the runs of PATH: one line per `_file_` (a session's shards
    /// together) with its records, failed records, first and last
    /// timestamp, duration, steps and tokens, sorted as asked. The same
    /// runs and figures as the Runs page and `GET /api/runs`.
    #[command(after_help = "Examples:\n  \
pchronicle runs ./warehouse --sort newest --limit 20\n  \
pchronicle runs ./warehouse/team --where agent=codex --since 2026-01-01T00:00:00Z --sort failed\n  \
pchronicle runs ./warehouse --sort tokens --limit 5 --json | jq '.runs[].run'")]
    Runs(runs::RunsArgs),
    /// Import record files into a compact-jsonl leaf (a Lance dataset) and
    /// publish its chronicle.manifest. Prints the published version and the
    /// leaf's record and failed counts.
    Import(ingest::ImportArgs),
    /// Bring a compact-jsonl leaf in step with the record files under
    /// SOURCE, in one new Lance version: new files are imported, files that
    /// only grew are imported from where the last sync stopped (a torn last
    /// record is left for the next sync), changed or removed files have
    /// their rows replaced or deleted. Nothing changed: no new version. A
    /// file that cannot be read is a warning and keeps its rows.
    #[cfg(feature = "compact-jsonl")]
    #[command(after_help = "Examples:\n  \
pchronicle sync ./sessions ./warehouse/team/sessions_compact\n  \
pchronicle sync ./sessions ./warehouse/team/sessions_compact --dry-run\n  \
pchronicle sync ./sessions ./warehouse/team/sessions_compact --every 5m")]
    Sync(ingest::SyncArgs),
    /// Append records to a session's current shard in a record store. The
    /// shard is `<session>.<token>.jsonl` (or `.jsonseq` when packed); a new
    /// one is started when the last is sealed (grown to 2 MiB, appended to
    /// by someone else, indexed, or of the other format). Each record is
    /// written with one write(2); invalid JSON is refused and nothing is
    /// written.
    Append(ingest::AppendArgs),
    /// Name a version of a compact-jsonl leaf (Lance's tags), list a
    /// leaf's tags, or delete one. A tag keeps "the leaf as it was" findable
    /// by name; deleting a tag leaves its version in place.
    #[cfg(feature = "compact-jsonl")]
    #[command(after_help = "Examples:\n  \
pchronicle tag ./warehouse/team/codex_jsonl trained-2026-11-30\n  \
pchronicle tag ./warehouse/team/codex_jsonl eval.v1 --version 3\n  \
pchronicle tag ./warehouse/team/codex_jsonl --list\n  \
pchronicle tag ./warehouse/team/codex_jsonl --delete eval.v1")]
    Tag(ingest::TagArgs),
    /// Serve the warehouse over HTTP: the Datasets, Runs, Run and SQL pages
    /// for a browser, and the JSON API they are drawn from (each endpoint
    /// the bytes of the CLI command it names). Runs in the foreground
    /// until SIGINT or SIGTERM.
    #[cfg(feature = "serve")]
    #[command(after_help = "Examples:\n  \
pchronicle serve ./warehouse                  # prints http://127.0.0.1:8765/#token=...\n  \
pchronicle serve s3://bucket/warehouse --listen 0.0.0.0:8080\n\n\
Open the printed URL: the pages keep its token. Programs send `Authorization: Bearer TOKEN`. \
The API is documented in docs/web.md.")]
    Serve(serve::ServeArgs),
    /// Run the parts of reads that coordinators (`query`, `cat`, `stats`
    /// or `serve` with `--workers`) send: scans of the warehouse roots it
    /// serves, read here, their rows sent back. Runs in the foreground until
    /// SIGINT or SIGTERM; see docs/distributed.md.
    #[cfg(feature = "distributed")]
    #[command(after_help = "Examples:\n  \
PCHRONICLE_WORKER_TOKEN=s3cret pchronicle worker --listen 0.0.0.0:7070 --warehouse /srv/warehouse\n  \
PCHRONICLE_WORKERS=10.0.0.5:7070,10.0.0.6:7070 PCHRONICLE_WORKER_TOKEN=s3cret \\\n    \
pchronicle query /srv/warehouse \"SELECT count(*) FROM records\"")]
    Worker(worker::WorkerArgs),
    /// Build, list, verify or drop the sidecar point-lookup indexes of a
    /// record file (`FILE.<keyhash>.idx`, listed in `FILE.indexes.json`).
    Index(index::IndexArgs),
    /// Print the records of FILE whose key fields equal the values, in file
    /// order, through its index (reading one bucket, not the file).
    Lookup(index::LookupArgs),
    /// Print every error code with what it means and how to fix it, or one.
    Errors(guide::ErrorsArgs),
    /// Build the sample warehouse in DIR (new or empty).
    Demo(guide::DemoArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or
    /// PowerShell.
    #[command(after_help = "Install, for example:\n  \
pchronicle completions bash > /usr/share/bash-completion/completions/pchronicle\n  \
pchronicle completions zsh > /usr/local/share/zsh/site-functions/_pchronicle\n  \
pchronicle completions fish > ~/.config/fish/completions/pchronicle.fish")]
    Completions(guide::CompletionsArgs),
    /// Print the manual page of pchronicle or of one of its commands
    /// (roff, for `man -l -`), or write them all into a directory.
    #[command(after_help = "Examples:\n  \
pchronicle man | man -l -\n  \
pchronicle man mount | man -l -\n  \
pchronicle man --dir /usr/local/share/man/man1")]
    Man(guide::ManArgs),
}

#[derive(Args, Debug, Clone)]
struct WalkArgs {
    /// Children considered per directory before the answer is truncated.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().max_entries)]
    max_entries: usize,
    /// Sources collected per open before the answer is truncated.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().max_files)]
    max_files: usize,
    /// Never rewrite a missing or stale leaf manifest; count from the data.
    #[arg(long)]
    no_repair: bool,
}

impl WalkArgs {
    fn options(&self) -> CatalogOptions {
        CatalogOptions {
            max_entries: self.max_entries,
            max_files: self.max_files,
            repair: !self.no_repair,
            ..CatalogOptions::default()
        }
    }
}

/// Parses the process arguments and runs the command. Called the way
/// mount helpers are (`SOURCE MOUNTPOINT -o OPTIONS`), it runs the mount
/// that call stands for (see `helper.rs`).
pub fn run() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match helper::helper_call(&args) {
        None => {}
        Some(Ok(helper::HelperCall::Mount(mount))) => args = mount,
        Some(Ok(helper::HelperCall::Fake(_))) => return ExitCode::SUCCESS,
        Some(Err(e)) => return failed(&e),
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    // `RUST_LOG` decides when set; else warnings, and a mount's own
    // start, ready, unmount and exit (or everything, with --debug).
    let default_filter = match &cli.command {
        Command::Mount(args) => args.log_filter(),
        #[cfg(feature = "serve")]
        Command::Serve(_) => "warn,pchronicle=info",
        #[cfg(feature = "distributed")]
        Command::Worker(_) => "warn,pchronicle=info",
        _ => "warn",
    };
    crate::logging::init(default_filter);
    // A one-shot command reads a remote warehouse as one snapshot: each
    // prefix is listed once (a mount sets its own TTL).
    #[cfg(feature = "remote")]
    if !cli.command.is_long_running() {
        crate::remote::set_listing_ttl(std::time::Duration::MAX);
    }
    match execute(cli.command) {
        Ok(code) => code,
        Err(e) => failed(&e),
    }
}

pub(crate) use crate::warehouse::is_remote_path as is_remote;

/// Refuses `command`, which writes, on an `s3://` path: object storage is
/// only ever read.
pub(crate) fn refuse_remote(path: &std::path::Path, command: &str) -> Result<()> {
    if is_remote(path) {
        return Err(crate::error::Error::at(
            crate::error::ErrorCode::RemoteReadOnly,
            path,
            format!(
                "`{command}` works on local files only (s3:// warehouses are read only, \
                 and sidecar indexes are read from local files)"
            ),
        ));
    }
    Ok(())
}

/// Prints `e` with its fix-up; exit code 1.
fn failed(e: &crate::error::Error) -> ExitCode {
    out::note!("{}", e.render());
    out::note!("  fix: {}", e.code.fixup());
    ExitCode::from(1)
}

impl Command {
    /// A mount or a server: it reads the warehouse again as it changes.
    fn is_long_running(&self) -> bool {
        #[cfg(feature = "serve")]
        if matches!(self, Command::Serve(_)) {
            return true;
        }
        #[cfg(feature = "distributed")]
        if matches!(self, Command::Worker(_)) {
            return true;
        }
        matches!(self, Command::Mount(_))
    }
}

/// Hands the parsed command to its `run`.
fn execute(command: Command) -> Result<ExitCode> {
    match command {
        Command::Mount(args) => args.run(),
        Command::Umount(args) => args.run(),
        Command::Refresh(args) => args.run(),
        Command::Ls(args) => args.run(),
        Command::Stats(args) => args.run(),
        Command::Cat(args) => args.run(),
        Command::Query(args) => args.run(),
        Command::Runs(args) => args.run(),
        Command::Import(args) => args.run(),
        #[cfg(feature = "compact-jsonl")]
        Command::Sync(args) => args.run(),
        Command::Append(args) => args.run(),
        #[cfg(feature = "compact-jsonl")]
        Command::Tag(args) => args.run(),
        Command::Index(args) => args.run(),
        Command::Lookup(args) => args.run(),
        #[cfg(feature = "serve")]
        Command::Serve(args) => args.run(),
        #[cfg(feature = "distributed")]
        Command::Worker(args) => args.run(),
        Command::Errors(args) => args.run(),
        Command::Demo(args) => args.run(),
        Command::Completions(args) => args.run(Cli::command()),
        Command::Man(args) => args.run(Cli::command()),
    }
}
