//! `import`, `append` and `tag`: records into a compact-jsonl leaf, or
//! onto a session's shard, and names for a leaf's versions; the report
//! printed as a sentence or as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::out::{self, say};
use super::table;
use crate::catalog::pretty_json;
use crate::error::{Error, ErrorCode, Result};
use crate::shards::{self, ShardFormat};
use crate::store::CompactJsonlStore;
use crate::store::compact::ImportMode;

// The flags of `import`.
#[derive(Args, Debug)]
pub(super) struct ImportArgs {
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
}

impl ImportArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let ImportArgs {
            source,
            dest,
            mode,
            json,
        } = self;
        super::refuse_remote(&source, "import")?;
        super::refuse_remote(&dest, "import")?;
        let report = CompactJsonlStore::default().import_path(&source, &dest, mode.into())?;
        if json {
            out::exact(&pretty_json(&report));
        } else {
            out::say_text(&table::import(&report, &dest));
        }
        Ok(ExitCode::SUCCESS)
    }
}

// The flags of `sync`.
#[cfg(feature = "compact-jsonl")]
#[derive(Args, Debug)]
pub(super) struct SyncArgs {
    /// A record file, or a directory scanned recursively for them (as
    /// `import` does).
    source: PathBuf,
    /// The compact-jsonl leaf to keep in step (created by the first sync).
    dest: PathBuf,
    /// Say what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Sync again every DURATION (`30s`, `5m`, `1h`) until stopped
    /// (SIGINT, SIGTERM); a sync that fails is reported and tried again.
    #[arg(long, value_name = "DURATION", value_parser = sync_interval)]
    every: Option<std::time::Duration>,
}

/// The interval of `sync --every`: a duration of at least one second
/// (bare numbers are seconds).
#[cfg(feature = "compact-jsonl")]
fn sync_interval(text: &str) -> std::result::Result<std::time::Duration, String> {
    let every = super::mount::duration_s(text)?;
    if every < std::time::Duration::from_secs(1) {
        return Err(format!("`{text}`: at least 1s"));
    }
    Ok(every)
}

#[cfg(feature = "compact-jsonl")]
impl SyncArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        super::refuse_remote(&self.source, "sync")?;
        super::refuse_remote(&self.dest, "sync")?;
        let store = CompactJsonlStore::default();
        let Some(every) = self.every else {
            self.once(&store)?;
            return Ok(ExitCode::SUCCESS);
        };
        loop {
            if let Err(e) = self.once(&store) {
                eprintln!("{}", e.render());
            }
            std::thread::sleep(every);
        }
    }

    fn once(&self, store: &CompactJsonlStore) -> Result<()> {
        let report = store.sync_path(&self.source, &self.dest, self.dry_run)?;
        if self.json {
            out::exact(&pretty_json(&report));
        } else {
            out::say_text(&table::sync(&report, &self.dest));
        }
        Ok(())
    }
}

// The flags of `append`.
#[derive(Args, Debug)]
pub(super) struct AppendArgs {
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
}

impl AppendArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let AppendArgs {
            store,
            session,
            packed,
            record,
            json,
        } = self;
        super::refuse_remote(&store, "append")?;
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
            out::exact(&pretty_json(&report));
        } else {
            say!(
                "appended {} record{} ({} bytes) to {}",
                report.records,
                if report.records == 1 { "" } else { "s" },
                report.bytes,
                report.shard.display()
            );
            for sidecar in &report.invalidated_sidecars {
                say!(
                    "invalidated sidecar {} (key {}); rebuild with: {}",
                    sidecar.index.display(),
                    sidecar.key.join(","),
                    sidecar.rebuild
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }
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

// The flags of `tag`.
#[cfg(feature = "compact-jsonl")]
#[derive(Args, Debug)]
pub(super) struct TagArgs {
    /// The compact-jsonl leaf.
    leaf: PathBuf,
    /// The tag to make (with --delete: to delete).
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// The version to name (default: the newest).
    #[arg(long, value_name = "N", conflicts_with_all = ["list", "delete"])]
    version: Option<u64>,
    /// List the leaf's tags instead.
    #[arg(long, conflicts_with_all = ["delete", "name"])]
    list: bool,
    /// Delete the tag NAME (the version it names stays).
    #[arg(long)]
    delete: bool,
    /// Print JSON (one object a line for --list).
    #[arg(long)]
    json: bool,
}

#[cfg(feature = "compact-jsonl")]
impl TagArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        super::refuse_remote(&self.leaf, "tag")?;
        let store = CompactJsonlStore::default();
        let leaf = &self.leaf;
        match (self.list, self.delete, self.name.as_deref()) {
            (true, _, _) => {
                let tags = store.tags(leaf)?;
                if self.json {
                    let lines: String = tags
                        .iter()
                        .map(|t| serde_json::to_string(t).expect("a tag serializes") + "\n")
                        .collect();
                    out::exact(&lines);
                } else if tags.is_empty() {
                    say!("{} has no tags", leaf.display());
                } else {
                    for t in &tags {
                        say!(
                            "{}\tversion {}\t{}",
                            t.name,
                            t.version,
                            t.created_at.as_deref().unwrap_or("-")
                        );
                    }
                }
            }
            (false, true, Some(name)) => {
                let version = store.delete_tag(leaf, name)?;
                if self.json {
                    out::exact(&pretty_json(
                        &serde_json::json!({"deleted": name, "version": version}),
                    ));
                } else {
                    say!(
                        "deleted tag {name} of {} (version {version} stays)",
                        leaf.display()
                    );
                }
            }
            (false, false, Some(name)) => {
                let tag = store.create_tag(leaf, name, self.version)?;
                if self.json {
                    out::exact(&pretty_json(&tag));
                } else {
                    say!(
                        "tagged version {} of {} as {}",
                        tag.version,
                        leaf.display(),
                        tag.name
                    );
                }
            }
            (false, _, None) => unreachable!("clap requires NAME without --list"),
        }
        Ok(ExitCode::SUCCESS)
    }
}
