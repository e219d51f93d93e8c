//! `index` and `lookup`: the sidecar point-lookup indexes of a record
//! file, built, listed, verified, dropped and used.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::out::{self, say};
use crate::catalog::pretty_json;
use crate::error::Result;
use crate::sidecar;

// `index` only chooses an action.
#[derive(Args, Debug)]
pub(super) struct IndexArgs {
    #[command(subcommand)]
    action: IndexAction,
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

impl IndexArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        use sidecar::{build, lookup, manifest};
        match self.action {
            IndexAction::Build { file, key, json } => {
                super::refuse_remote(&file, "index build")?;
                let report = sidecar::build_index(&file, &build::parse_key_spec(&key)?)?;
                if json {
                    out::exact(&pretty_json(&report));
                } else {
                    say!(
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
                    out::exact(&pretty_json(&entries));
                } else {
                    for e in &entries {
                        let types: Vec<String> = e
                            .types
                            .iter()
                            .map(|t| format!("{t:?}").to_lowercase())
                            .collect();
                        say!(
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
                    say!(
                        "ok: the index over {} matches {}",
                        key.join(","),
                        file.display()
                    );
                }
            }
            IndexAction::Drop { file, key } => {
                super::refuse_remote(&file, "index drop")?;
                let key = build::parse_key_spec(&key)?;
                sidecar::drop_index(&file, &key)?;
                say!(
                    "dropped the index over {} of {}",
                    key.join(","),
                    file.display()
                );
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

// The flags of `lookup`.
#[derive(Args, Debug)]
pub(super) struct LookupArgs {
    /// A .jsonl, .ndjson or .jsonseq record file with an index.
    file: PathBuf,
    /// One key field and its value, `NAME=VALUE`, repeated for each field
    /// in the index's order; or, with --value, the field names `a,b`. A
    /// value is taken as given, commas and `=` included.
    #[arg(long, value_name = "NAME=VALUE", required = true)]
    key: Vec<String>,
    /// A value, in key order, repeated for each field. A single --value
    /// for a key of several fields is split on commas (`x,1`); give each
    /// value its own --value when one holds a comma.
    #[arg(long, value_name = "VALUE")]
    value: Vec<String>,
    /// Print `{"matches": N, "records": [...]}` instead of JSON Lines.
    #[arg(long)]
    json: bool,
}

impl LookupArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let LookupArgs {
            file,
            key,
            value,
            json,
        } = self;
        let (fields, values) = sidecar::parse_lookup_key(&key, &value)?;
        let records = sidecar::lookup::lookup(&file, &fields, &values)?;
        if json {
            let parsed: Vec<serde_json::Value> = records
                .iter()
                .map(|r| serde_json::from_slice(r).unwrap_or(serde_json::Value::Null))
                .collect();
            out::exact(&pretty_json(
                &serde_json::json!({"matches": records.len(), "records": parsed}),
            ));
        } else {
            let mut stdout = out::exact_stdout();
            for record in &records {
                let _ = std::io::Write::write_all(&mut stdout, record);
                let _ = std::io::Write::write_all(&mut stdout, b"\n");
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
