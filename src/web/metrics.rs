//! `GET /metrics`: what the server did, in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::catalog::CacheHits;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0];

#[derive(Default)]
pub struct Metrics {
    /// Requests by (endpoint, status).
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// Latency histograms by endpoint: counts per bucket (the last one
    /// is +Inf), and the sum in seconds.
    latency: Mutex<BTreeMap<&'static str, ([u64; BUCKETS.len() + 1], f64)>>,
    answers_kept_hits: AtomicU64,
    answers_kept_misses: AtomicU64,
    tallies_kept_hits: AtomicU64,
    tallies_kept_misses: AtomicU64,
    jobs: AtomicU64,
    connections_closed_idle: AtomicU64,
}

impl Metrics {
    pub fn request(&self, endpoint: &'static str, status: u16, took: Duration) {
        *self.requests.lock().entry((endpoint, status)).or_default() += 1;
        let seconds = took.as_secs_f64();
        let mut latency = self.latency.lock();
        let (counts, sum) = latency.entry(endpoint).or_default();
        let at = BUCKETS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(BUCKETS.len());
        counts[at] += 1;
        *sum += seconds;
    }

    pub fn answer_kept(&self, hit: bool) {
        let counter = if hit {
            &self.answers_kept_hits
        } else {
            &self.answers_kept_misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tally_kept(&self, hit: bool) {
        let counter = if hit {
            &self.tallies_kept_hits
        } else {
            &self.tallies_kept_misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed_idle(&self) {
        self.connections_closed_idle.fetch_add(1, Ordering::Relaxed);
    }

    pub fn job_started(&self) {
        self.jobs.fetch_add(1, Ordering::Relaxed);
    }

    /// The text of `/metrics`.
    pub fn render(&self, catalog: CacheHits) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP pchronicle_http_requests_total Requests answered, by endpoint and status.\n\
             # TYPE pchronicle_http_requests_total counter"
        );
        for ((endpoint, status), n) in self.requests.lock().iter() {
            let _ = writeln!(
                out,
                "pchronicle_http_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP pchronicle_http_request_seconds Time to answer, by endpoint.\n\
             # TYPE pchronicle_http_request_seconds histogram"
        );
        for (endpoint, (counts, sum)) in self.latency.lock().iter() {
            let mut cumulative = 0;
            for (i, count) in counts.iter().enumerate() {
                cumulative += count;
                let le = BUCKETS
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    out,
                    "pchronicle_http_request_seconds_bucket{{endpoint=\"{endpoint}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "pchronicle_http_request_seconds_sum{{endpoint=\"{endpoint}\"}} {sum}\n\
                 pchronicle_http_request_seconds_count{{endpoint=\"{endpoint}\"}} {cumulative}"
            );
        }
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counters = [
            (
                "pchronicle_answers_kept_hits_total",
                "Answers given again within the TTL without reading the warehouse.",
                load(&self.answers_kept_hits),
            ),
            (
                "pchronicle_answers_kept_misses_total",
                "Answers made anew.",
                load(&self.answers_kept_misses),
            ),
            (
                "pchronicle_tallies_kept_hits_total",
                "Runs and histograms given again for an unchanged Snapshot.",
                load(&self.tallies_kept_hits),
            ),
            (
                "pchronicle_tallies_kept_misses_total",
                "Runs and histograms computed by reading records.",
                load(&self.tallies_kept_misses),
            ),
            (
                "pchronicle_renders_total",
                "Answers made by reading the warehouse (one thread each).",
                load(&self.jobs),
            ),
            (
                "pchronicle_connections_closed_idle_total",
                "Idle connections closed to make room for a new one (all places were taken).",
                load(&self.connections_closed_idle),
            ),
            (
                "pchronicle_catalog_dir_hits_total",
                "Directory listings found in the refresh cache.",
                catalog.dirs.hits,
            ),
            (
                "pchronicle_catalog_dir_misses_total",
                "Directory listings read.",
                catalog.dirs.misses,
            ),
            (
                "pchronicle_catalog_count_hits_total",
                "Record-file counts found in the count cache.",
                catalog.files.hits,
            ),
            (
                "pchronicle_catalog_kept_hits_total",
                "Answers given again because nothing below their directory changed.",
                catalog.kept.hits,
            ),
            (
                "pchronicle_catalog_kept_misses_total",
                "Answers made anew (nothing kept, or something below changed).",
                catalog.kept.misses,
            ),
            (
                "pchronicle_catalog_files_read_total",
                "Record files read to count them.",
                catalog.files_read,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP pchronicle_resident_bytes Resident memory of the process.\n\
             # TYPE pchronicle_resident_bytes gauge\npchronicle_resident_bytes {}",
            resident_bytes()
        );
        out
    }
}

/// The process's resident set, in bytes (0 when it cannot be read).
fn resident_bytes() -> u64 {
    crate::fs::metrics::resident_kib().unwrap_or(0) * 1024
}
