//! The command line: argument parsing and output formatting only. Every
//! answer comes from the catalog; `--json` prints exactly what the mount's
//! synthetic files hold.
//!
//! Exit codes: 0 success, 1 a failure (printed as `error[CODE]: …`),
//! 2 bad usage.

mod table;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::catalog::{Catalog, CatalogOptions, CountCachePlace, pretty_json};
use crate::error::{Error, ErrorCode, Result};
use crate::fs::{FsOptions, MountConfig, Mounted};
use crate::shards::{self, ShardFormat};
use crate::sidecar;
use crate::store::CompactJsonlStore;
use crate::store::compact::ImportMode;

#[derive(Parser, Debug)]
#[command(
    name = "pchronicle",
    version,
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
    Mount {
        /// The warehouse directory to show.
        warehouse: PathBuf,
        /// An empty directory outside the warehouse.
        mountpoint: PathBuf,
        /// Serve in this process until unmounted or interrupted (for
        /// tests and service managers).
        #[arg(long)]
        foreground: bool,
        /// Let other users read the mount (needs `user_allow_other` in
        /// /etc/fuse.conf unless run as root). Permissions are still those
        /// of the underlying files.
        #[arg(long)]
        allow_other: bool,
        /// How long the kernel caches names and attributes, in
        /// milliseconds; changes underneath show up within this time.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        attr_ttl: u64,
        /// Mount options, comma-separated, fuse style: ro, allow_other,
        /// allow_root, default_permissions, nodev, nosuid, noexec, exec,
        /// noatime, atime. The mount is always read-only.
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Threads serving requests, so one slow `.stats` does not hold up
        /// listings elsewhere.
        #[arg(long, value_name = "N", default_value_t = 4)]
        threads: usize,
        /// Longest a `.stats`/`.sources` render may walk, in seconds; a
        /// longer one is answered with EIO (and logged) instead of holding
        /// a serving thread.
        #[arg(long, value_name = "SECS", default_value_t = 60)]
        render_timeout: u64,
        /// Append the background daemon's log (RUST_LOG levels) to FILE.
        #[arg(long, value_name = "FILE")]
        log: Option<PathBuf>,
        /// Internal: set on the re-executed background daemon.
        #[arg(long, hide = true)]
        daemon_child: bool,
        #[command(flatten)]
        walk: WalkArgs,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Unmount a pchronicle mount, also one whose daemon died.
    Umount {
        /// The directory given to `pchronicle mount`.
        mountpoint: PathBuf,
        /// Detach now even if the mount is busy; the kernel finishes when
        /// the last user leaves.
        #[arg(long)]
        lazy: bool,
    },
    /// List one level of PATH, like `ls`: directories, datasets (with a count
    /// preview) and files. A dataset leaf lists as itself alone.
    Ls {
        /// A warehouse directory, a dataset leaf, or a record file.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Print the Snapshot sources of PATH instead (every leaf and record
        /// file below it, with `_file_` relative to PATH).
        #[arg(long)]
        sources: bool,
        /// Print JSON (a listing object; with --sources, JSON Lines).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        walk: WalkArgs,
    },
    /// Open PATH as a Snapshot and print its rolled-up stats: sources,
    /// records, failed records, time range, per-format totals.
    Stats {
        /// A warehouse directory, a dataset leaf, or a record file.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Print pretty JSON (the content of the mount's `.stats`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        walk: WalkArgs,
    },
    /// Import record files into a compact-jsonl leaf (a Lance dataset) and
    /// publish its chronicle.manifest. Prints the published version and the
    /// leaf's record and failed counts.
    Import {
        /// A .jsonl/.ndjson/.jsonseq/.json file, or a directory scanned
        /// recursively for them.
        source: PathBuf,
        /// The leaf directory to write.
        dest: PathBuf,
        /// create: DEST must hold no dataset; append: add to DEST's dataset;
        /// overwrite: replace DEST's rows with a new version.
        #[arg(long, value_enum, default_value_t = ModeArg::Create)]
        mode: ModeArg,
        /// Print the import report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Append records to a session's current shard in a record store. The
    /// shard is `<session>.<token>.jsonl` (or `.jsonseq` when packed); a new
    /// one is started when the last is sealed (grown to 2 MiB, appended to
    /// by someone else, indexed, or of the other format). Each record is
    /// written with one write(2); invalid JSON is refused and nothing is
    /// written.
    Append {
        /// The record store directory (created if missing).
        #[arg(long, value_name = "DIR")]
        store: PathBuf,
        /// The session id (dots allowed; no `/`, no leading dot).
        #[arg(long, value_name = "ID")]
        session: String,
        /// Write packed shards (`.jsonseq`); PCHRONICLE_PACKED_RECORDS=1 does
        /// the same.
        #[arg(long)]
        packed: bool,
        /// One record (one JSON value on one line), or `-` to read one
        /// record per line from standard input (blank lines skipped).
        #[arg(default_value = "-")]
        record: String,
        /// Print the append report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Build, list, verify or drop the sidecar point-lookup indexes of a
    /// record file (`FILE.<keyhash>.idx`, listed in `FILE.indexes.json`).
    Index {
        #[command(subcommand)]
        action: IndexAction,
    },
    /// Print the records of FILE whose key fields equal the values, in file
    /// order, through its index (reading one bucket, not the file).
    Lookup {
        /// A .jsonl, .ndjson or .jsonseq record file with an index.
        file: PathBuf,
        /// The key fields in the index's order, `a,b`; or `a=x,b=y` with
        /// the values inline.
        #[arg(long, value_name = "FIELDS")]
        key: String,
        /// The values, in key order, `x,y`.
        #[arg(long, value_name = "VALUES")]
        value: Option<String>,
        /// Print `{"matches": N, "records": [...]}` instead of JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// Print every error code with what it means and how to fix it, or one.
    Errors {
        /// A code such as PCHRONICLE_MANIFEST_PARSE.
        code: Option<String>,
    },
    /// Build the sample warehouse in DIR (new or empty).
    Demo {
        #[arg(default_value = "pchronicle-demo")]
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum IndexAction {
    /// Build (or rebuild) the index of FILE over the key fields, and
    /// record it in FILE.indexes.json.
    Build {
        file: PathBuf,
        /// Key fields, in order: `session` or `session,turn`.
        #[arg(long, value_name = "FIELDS")]
        key: String,
        #[arg(long)]
        json: bool,
    },
    /// List FILE's indexes (one read of FILE.indexes.json).
    List {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Hash FILE and check its indexes (or the one over --key) against it.
    Verify {
        file: PathBuf,
        #[arg(long, value_name = "FIELDS")]
        key: Option<String>,
    },
    /// Remove the index over the key and its manifest entry.
    Drop {
        file: PathBuf,
        #[arg(long, value_name = "FIELDS")]
        key: String,
    },
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum ModeArg {
    Create,
    Append,
    Overwrite,
}

impl From<ModeArg> for ImportMode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Create => ImportMode::Create,
            ModeArg::Append => ImportMode::Append,
            ModeArg::Overwrite => ImportMode::Overwrite,
        }
    }
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

/// The mount's caches and their bounds.
#[derive(Debug, Args)]
struct CacheArgs {
    /// Keep record-file counts in memory only: nothing is read from or
    /// written to the persisted count cache.
    #[arg(long, conflicts_with = "cache_file")]
    no_cache: bool,
    /// Where record-file counts persist across restarts [default:
    /// WAREHOUSE/.pchronicle/cache/counts when that directory belongs to
    /// this user and no one else can write it, else this user's cache
    /// directory].
    #[arg(long, value_name = "PATH")]
    cache_file: Option<PathBuf>,
    /// Record-file counts kept (in memory and persisted), least recently
    /// used dropped first.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().file_cache_entries)]
    file_cache_entries: usize,
    /// Directory listings kept.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().dir_cache_entries)]
    dir_cache_entries: usize,
    /// Directory classifications and dataset previews kept.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().node_cache_entries)]
    node_cache_entries: usize,
    /// Rendered `.stats`/`.sources` kept for reuse within the attribute TTL.
    #[arg(long, value_name = "N", default_value_t = FsOptions::default().render_cache_entries)]
    render_cache_entries: usize,
    /// Bytes of rendered `.stats`/`.sources` kept, in MiB (a larger render
    /// is not kept).
    #[arg(long, value_name = "MIB", default_value_t = FsOptions::default().render_cache_bytes >> 20)]
    render_cache_mib: usize,
}

impl CacheArgs {
    /// `options` with these caches, the persisted one placed in the
    /// warehouse unless told otherwise.
    fn apply(&self, options: CatalogOptions) -> CatalogOptions {
        let count_cache = match (&self.cache_file, self.no_cache) {
            (_, true) => CountCachePlace::Memory,
            (Some(path), false) => {
                CountCachePlace::File(std::path::absolute(path).unwrap_or(path.clone()))
            }
            (None, false) => CountCachePlace::Default,
        };
        CatalogOptions {
            file_cache_entries: self.file_cache_entries,
            dir_cache_entries: self.dir_cache_entries,
            node_cache_entries: self.node_cache_entries,
            count_cache,
            ..options
        }
    }
}

/// Parses the process arguments and runs the command.
pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    match execute(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.render());
            eprintln!("  fix: {}", e.code.fixup());
            ExitCode::from(1)
        }
    }
}

fn execute(command: Command) -> Result<ExitCode> {
    match command {
        Command::Mount {
            warehouse,
            mountpoint,
            foreground,
            allow_other,
            attr_ttl,
            options,
            threads,
            render_timeout,
            log,
            daemon_child,
            walk,
            cache,
        } => {
            let catalog = CatalogOptions {
                walk_budget: Some(Duration::from_secs(render_timeout.max(1))),
                ..cache.apply(walk.options())
            };
            let config = MountConfig {
                catalog,
                warehouse,
                mount_point: mountpoint,
                fs: FsOptions {
                    attr_ttl: Duration::from_millis(attr_ttl),
                    render_cache_entries: cache.render_cache_entries,
                    render_cache_bytes: cache.render_cache_mib.saturating_mul(1 << 20),
                },
                foreground,
                allow_other,
                options,
                threads,
                log,
                daemon_child,
            };
            let announce = |m: &Mounted| {
                eprintln!(
                    "serving {} at {} (pid {}); Ctrl-C or `pchronicle umount {}` to stop",
                    m.warehouse.display(),
                    m.mount_point.display(),
                    m.pid,
                    m.mount_point.display()
                );
            };
            let mounted = crate::fs::mount(&config, &announce)?;
            if !foreground {
                println!(
                    "mounted {} at {} (daemon pid {})",
                    mounted.warehouse.display(),
                    mounted.mount_point.display(),
                    mounted.pid
                );
                println!(
                    "try: ls -la {0}  |  cat {0}/.stats  |  pchronicle umount {0}",
                    mounted.mount_point.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Umount { mountpoint, lazy } => {
            crate::fs::unmount(&mountpoint, lazy)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ls {
            path,
            sources,
            json,
            walk,
        } => {
            let (catalog, rel) = Catalog::for_path(&path, walk.options())?;
            if sources {
                let snapshot = catalog.open(&rel).map_err(|e| at_user_path(e, &path))?;
                if json {
                    print!("{}", snapshot.sources_jsonl());
                } else {
                    print!("{}", table::sources(&snapshot));
                }
                table::warn(&snapshot.warnings, snapshot.truncated);
            } else {
                let listing = catalog.list(&rel).map_err(|e| at_user_path(e, &path))?;
                if json {
                    print!("{}", listing.to_json());
                } else {
                    print!("{}", table::listing(&listing));
                }
                table::warn(&listing.warnings, listing.truncated);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { path, json, walk } => {
            let (catalog, rel) = Catalog::for_path(&path, walk.options())?;
            let stats = catalog.stats(&rel).map_err(|e| at_user_path(e, &path))?;
            if json {
                print!("{}", stats.to_json());
            } else {
                print!("{}", table::stats(&stats));
            }
            table::warn(&stats.warnings, stats.truncated);
            Ok(ExitCode::SUCCESS)
        }
        Command::Import {
            source,
            dest,
            mode,
            json,
        } => {
            let report = CompactJsonlStore::default().import_path(&source, &dest, mode.into())?;
            if json {
                print!("{}", pretty_json(&report));
            } else {
                print!("{}", table::import(&report, &dest));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Append {
            store,
            session,
            packed,
            record,
            json,
        } => {
            let mut input = Vec::new();
            let records: Vec<&[u8]> = if record == "-" {
                std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut input)
                    .map_err(|e| Error::io("<stdin>", &e))?;
                input
                    .split(|b| *b == b'\n')
                    .filter(|line| !line.trim_ascii().is_empty())
                    .collect()
            } else {
                vec![record.as_bytes()]
            };
            if records.is_empty() {
                return Err(Error::new(
                    ErrorCode::RecordInvalid,
                    "no records on standard input",
                ));
            }
            let report =
                shards::append_records(&store, &session, &records, ShardFormat::choose(packed))?;
            if json {
                print!("{}", pretty_json(&report));
            } else {
                println!(
                    "appended {} record{} ({} bytes) to {}",
                    report.records,
                    if report.records == 1 { "" } else { "s" },
                    report.bytes,
                    report.shard.display()
                );
                for sidecar in &report.invalidated_sidecars {
                    println!(
                        "invalidated sidecar {} (key {}); rebuild with: {}",
                        sidecar.index.display(),
                        sidecar.key.join(","),
                        sidecar.rebuild
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Index { action } => index(action),
        Command::Lookup {
            file,
            key,
            value,
            json,
        } => {
            let (fields, values) = sidecar::parse_lookup_key(&key, value.as_deref())?;
            let records = sidecar::lookup::lookup(&file, &fields, &values)?;
            if json {
                let parsed: Vec<serde_json::Value> = records
                    .iter()
                    .map(|r| serde_json::from_slice(r).unwrap_or(serde_json::Value::Null))
                    .collect();
                print!(
                    "{}",
                    pretty_json(&serde_json::json!({"matches": records.len(), "records": parsed}))
                );
            } else {
                let mut out = std::io::stdout().lock();
                for record in &records {
                    let _ = std::io::Write::write_all(&mut out, record);
                    let _ = std::io::Write::write_all(&mut out, b"\n");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Errors { code } => match code {
            None => {
                print!("{}", table::error_codes(ErrorCode::ALL));
                Ok(ExitCode::SUCCESS)
            }
            Some(text) => match ErrorCode::parse(&text) {
                Some(code) => {
                    print!("{}", table::error_codes(&[code]));
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    let code = ErrorCode::UnknownCode;
                    eprintln!("error[{code}]: no error code {text:?}");
                    eprintln!("  fix: {}", code.fixup());
                    Ok(ExitCode::from(2))
                }
            },
        },
        Command::Demo { dir } => {
            let summary = crate::demo::build(&dir)?;
            println!("built the demo warehouse in {}", dir.display());
            println!("  {summary}");
            println!(
                "try: pchronicle ls {0}  |  pchronicle stats {0}",
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn index(action: IndexAction) -> Result<ExitCode> {
    use sidecar::{build, lookup, manifest};
    match action {
        IndexAction::Build { file, key, json } => {
            let report = sidecar::build_index(&file, &build::parse_key_spec(&key)?)?;
            if json {
                print!("{}", pretty_json(&report));
            } else {
                println!(
                    "indexed {} of {} records over {} ({} keys; {} without the key, {} failed) in {}",
                    report.indexed,
                    report.rows,
                    report.key.join(","),
                    report.keys,
                    report.unkeyed,
                    report.failed,
                    report.index.display()
                );
            }
        }
        IndexAction::List { file, json } => {
            let entries = manifest::list(&file)?;
            if json {
                print!("{}", pretty_json(&entries));
            } else {
                for e in &entries {
                    let types: Vec<String> = e
                        .types
                        .iter()
                        .map(|t| format!("{t:?}").to_lowercase())
                        .collect();
                    println!(
                        "{}  ({})  {} rows  {}",
                        e.key.join(","),
                        types.join(","),
                        e.rows,
                        e.file
                    );
                }
            }
        }
        IndexAction::Verify { file, key } => {
            let keys = match key {
                Some(key) => vec![build::parse_key_spec(&key)?],
                None => manifest::list(&file)?.into_iter().map(|e| e.key).collect(),
            };
            for key in &keys {
                lookup::verify(&file, key)?;
                println!(
                    "ok: the index over {} matches {}",
                    key.join(","),
                    file.display()
                );
            }
        }
        IndexAction::Drop { file, key } => {
            let key = build::parse_key_spec(&key)?;
            sidecar::drop_index(&file, &key)?;
            println!(
                "dropped the index over {} of {}",
                key.join(","),
                file.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Errors name the path as the user typed it, not the catalog-relative one.
fn at_user_path(mut error: Error, user: &Path) -> Error {
    if error.path.as_deref().is_some_and(Path::is_relative) {
        error.path = Some(user.to_path_buf());
    }
    error
}
