//! `pchronicle worker`, and `--workers` on the commands that read.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::catalog::{CatalogOptions, CountCachePlace};
use crate::distributed::worker::WorkerOptions;
use crate::error::Result;

// The flags of `worker`.
#[derive(Args, Debug)]
pub(super) struct WorkerArgs {
    /// Where to listen for coordinators (gRPC). Port 0 picks a free one
    /// (printed at start).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// A warehouse root this worker reads for coordinators: a local
    /// directory (the same path on every machine) or `s3://BUCKET/PREFIX`.
    /// Repeat for more. A part naming a path outside them is refused
    /// (PCHRONICLE_WORKER_ROOT).
    #[arg(long = "warehouse", value_name = "ROOT", required = true)]
    warehouses: Vec<PathBuf>,
    /// The token coordinators must bring (default: a random one, printed
    /// at start). PCHRONICLE_WORKER_TOKEN does the same without showing
    /// it to other users in `ps`.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Require no token: anyone who can reach the address reads the
    /// warehouses. Refused unless --listen is a loopback address.
    #[arg(long, conflicts_with = "token")]
    no_token: bool,
    /// Memory the sorts, groupings and joins of the parts running here
    /// may hold together; a part that needs more fails, nothing spills.
    #[arg(long, value_name = "MIB")]
    max_memory_mib: Option<usize>,
    /// Partitions of queries' records read at once (each on a thread of
    /// its own); more wait their turn. (A `cat`'s and a count's parts are
    /// paced by the coordinator, which reads them in order.)
    #[arg(long, value_name = "N", default_value_t = default_tasks())]
    max_tasks: usize,
    /// After SIGTERM, how long the parts running may go on before the
    /// worker stops anyway.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    drain_seconds: u64,
    /// Children considered per directory before an answer is truncated.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().max_entries)]
    max_entries: usize,
    /// Sources collected per open before an answer is truncated.
    #[arg(long, value_name = "N", default_value_t = CatalogOptions::default().max_files)]
    max_files: usize,
}

fn default_tasks() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl WorkerArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let token = self
            .token
            .or_else(|| std::env::var("PCHRONICLE_WORKER_TOKEN").ok());
        let (token, printed) = match (token, self.no_token) {
            (_, true) => (None, false),
            (Some(token), false) if !token.is_empty() => (Some(token), false),
            _ => (Some(crate::web::random_token()?), true),
        };
        let shown = printed.then(|| token.clone()).flatten();
        let options = WorkerOptions {
            listen: self.listen,
            warehouses: self.warehouses,
            token,
            max_memory: self.max_memory_mib.map(|m| m.clamp(1, 1 << 20) << 20),
            max_tasks: self.max_tasks.max(1),
            drain: Duration::from_secs(self.drain_seconds),
            // A worker only reads: it keeps counts in memory and never
            // rewrites a leaf's manifest.
            catalog: CatalogOptions {
                max_entries: self.max_entries,
                max_files: self.max_files,
                count_cache: CountCachePlace::Memory,
                repair: false,
                ..CatalogOptions::default()
            },
        };
        let notifier = crate::fs::notify::Notifier::from_env(false).map(std::sync::Arc::new);
        let ready = {
            let notifier = notifier.clone();
            Box::new(move |local: SocketAddr| {
                match &shown {
                    Some(token) => println!(
                        "worker listening on {local}\ntoken: {token} (give it to coordinators as PCHRONICLE_WORKER_TOKEN)"
                    ),
                    None => println!("worker listening on {local}"),
                }
                if let Some(n) = &notifier {
                    n.ready(None, &format!("worker listening on {local}"));
                }
            })
        };
        let ran = crate::distributed::worker::run(options, ready);
        if let Some(n) = &notifier {
            n.stopping();
        }
        ran.map(|()| ExitCode::SUCCESS)
    }
}

// `--workers`, shared by the commands that read.
#[derive(Args, Debug, Clone, Default)]
pub(super) struct WorkersArgs {
    /// Spread the reading over these workers (`pchronicle worker`), as
    /// HOST:PORT or http://HOST:PORT, comma-separated. Default:
    /// PCHRONICLE_WORKERS. Their token: PCHRONICLE_WORKER_TOKEN.
    #[arg(long, value_name = "URL,…", help_heading = "Workers")]
    workers: Option<String>,
    /// The workers' token (default: PCHRONICLE_WORKER_TOKEN, which keeps
    /// it out of `ps`).
    #[arg(long, value_name = "TOKEN", help_heading = "Workers")]
    worker_token: Option<String>,
    /// Leave out a worker that does not answer at the start (its share
    /// goes to the others) instead of failing.
    #[arg(long, help_heading = "Workers")]
    workers_optional: bool,
}

impl WorkersArgs {
    /// Makes the workers named (if any) the ones this process reads with.
    pub(super) fn configure(&self) -> Result<()> {
        let list = self
            .workers
            .clone()
            .or_else(|| std::env::var("PCHRONICLE_WORKERS").ok())
            .filter(|l| !l.trim().is_empty());
        let Some(list) = list else {
            return Ok(());
        };
        let token = self
            .worker_token
            .clone()
            .or_else(|| std::env::var("PCHRONICLE_WORKER_TOKEN").ok());
        let workers = crate::distributed::Workers::parse(&list, token, self.workers_optional)?;
        crate::distributed::configure(workers);
        Ok(())
    }
}
