//! `serve`: the warehouse over HTTP, as a JSON API and as pages.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::WalkArgs;
use crate::catalog::{CatalogOptions, CountCachePlace};
use crate::error::Result;
use crate::web::{Limits, ServeOptions};

// The flags of `serve`.
#[derive(Args, Debug)]
pub(super) struct ServeArgs {
    /// The warehouse: a local directory, or `s3://BUCKET/PREFIX`.
    warehouse: PathBuf,
    /// Where to listen. Port 0 picks a free one (the printed URL names it).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8765")]
    listen: SocketAddr,
    /// The token requests must bring (default: a random one, printed in
    /// the URL). PCHRONICLE_SERVE_TOKEN does the same without showing it
    /// to other users in `ps`.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Require no token: anyone who can reach the address reads the
    /// warehouse. Refused unless --listen is a loopback address.
    #[arg(long, conflicts_with = "token")]
    no_token: bool,
    /// Requests whose answers are made at once; more wait (up to 256,
    /// then 503).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_requests)]
    max_requests: usize,
    /// Longest one answer may take before it is stopped (503,
    /// PCHRONICLE_ANSWER_LATE).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    request_seconds: u64,
    /// Longest a scan of records for runs or a histogram may go on. A
    /// scan that outlasts its request (503) goes on, and the next request
    /// of the same path and filters joins it instead of starting over.
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::default().scan_time.as_secs())]
    scan_seconds: u64,
    /// Bytes one answer of `POST /api/query` may hold: past it the rows
    /// are cut at a whole row and the answer says so (header X-Byte-Cap).
    #[arg(long, value_name = "MIB", default_value_t = Limits::default().answer_bytes >> 20)]
    answer_mib: usize,
    /// Rows `POST /api/query` returns at most (the answer says when it
    /// cut them: header X-Row-Cap).
    #[arg(long, value_name = "N", default_value_t = Limits::default().query_rows)]
    query_rows: u64,
    /// Longest a query may run (header X-Time-Limit when it was stopped).
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    query_seconds: u64,
    /// Memory one query's sorts, groupings and joins may hold; a query
    /// that needs more fails (422, PCHRONICLE_QUERY_MEMORY), and nothing
    /// spills to disk.
    #[arg(long, value_name = "MIB", default_value_t = Limits::default().query_memory >> 20)]
    query_memory_mib: usize,
    /// How long an answer is given again before the warehouse is looked
    /// at anew (pages poll every 5 s).
    #[arg(long, value_name = "SECONDS", default_value = "2", value_parser = seconds)]
    ttl: Duration,
    /// Record files at least this large that are not counted yet are
    /// counted in the background, and shown as being counted meanwhile.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    count_in_background_mib: u64,
    /// Keep record-file counts in memory only (not in the warehouse's
    /// state directory).
    #[arg(long)]
    no_cache: bool,
    /// Do not watch the warehouse for changes: an answer whose TTL ran
    /// out checks each leaf below it with a `stat`, as on a filesystem
    /// that does not report changes.
    #[arg(long)]
    no_watch: bool,
    #[command(flatten, next_help_heading = "Traversal")]
    walk: WalkArgs,
    #[cfg(feature = "distributed")]
    #[command(flatten)]
    workers: super::worker::WorkersArgs,
}

impl ServeArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        #[cfg(feature = "distributed")]
        self.workers.configure()?;
        let token = self
            .token
            .or_else(|| std::env::var("PCHRONICLE_SERVE_TOKEN").ok());
        let token = match (token, self.no_token) {
            (_, true) => None,
            (Some(token), false) if !token.is_empty() => Some(token),
            _ => Some(crate::web::random_token()?),
        };
        let ttl = self.ttl;
        #[cfg(feature = "remote")]
        if super::is_remote(&self.warehouse) {
            crate::remote::set_listing_ttl(ttl.max(Duration::from_secs(1)));
        }
        let catalog = CatalogOptions {
            background_count_bytes: Some(self.count_in_background_mib.saturating_mul(1 << 20)),
            walk_budget: Some(Duration::from_secs(self.request_seconds.max(1))),
            watch: !self.no_watch,
            count_cache: if self.no_cache {
                CountCachePlace::Memory
            } else {
                CountCachePlace::Default
            },
            ..self.walk.options()
        };
        crate::web::serve(ServeOptions {
            warehouse: self.warehouse,
            listen: self.listen,
            token,
            limits: Limits {
                max_requests: self.max_requests.max(1),
                request_time: Duration::from_secs(self.request_seconds.max(1)),
                scan_time: Duration::from_secs(self.scan_seconds.max(self.request_seconds).max(1)),
                answer_bytes: self.answer_mib.clamp(1, 1 << 20) << 20,
                query_rows: self.query_rows.max(1),
                query_time: Duration::from_secs(self.query_seconds.max(1)),
                query_memory: self.query_memory_mib.clamp(1, 1 << 20) << 20,
                ttl,
                ..Limits::default()
            },
            catalog,
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

/// A TTL: a number of seconds from 0 to 3600 (fractions allowed).
fn seconds(text: &str) -> std::result::Result<Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(0.0..=3600.0).contains(&value) {
        return Err(format!("{text:?}: expected seconds from 0 to 3600"));
    }
    Ok(Duration::from_secs_f64(value))
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn a_ttl_is_a_finite_number_of_seconds_in_range() {
        assert_eq!(seconds("2").unwrap().as_secs(), 2);
        assert_eq!(seconds("0.5").unwrap().as_millis(), 500);
        for bad in ["nan", "NaN", "inf", "-1", "3601", "", "x"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
