//! `--log-metrics`: what the mount did, as one log line every interval.
//!
//! Each request the protocol layer answers is counted per operation with
//! its latency (from decoding the request to sending the reply) in a
//! power-of-two histogram; the reporter takes the counts of the interval
//! (resetting them) and logs them with the renders, the catalog's cache
//! hits and the daemon's resident memory. Field by field in
//! `docs/operations.md`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::filesystem::WarehouseFs;
use crate::catalog::cache::HitCount;

/// The operations counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Getattr,
    Open,
    Read,
    Opendir,
    Readdir,
    Readdirplus,
    Statfs,
    Getxattr,
    Listxattr,
    Access,
    Refresh,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::Lookup,
        Op::Getattr,
        Op::Open,
        Op::Read,
        Op::Opendir,
        Op::Readdir,
        Op::Readdirplus,
        Op::Statfs,
        Op::Getxattr,
        Op::Listxattr,
        Op::Access,
        Op::Refresh,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "lookup",
            Op::Getattr => "getattr",
            Op::Open => "open",
            Op::Read => "read",
            Op::Opendir => "opendir",
            Op::Readdir => "readdir",
            Op::Readdirplus => "readdirplus",
            Op::Statfs => "statfs",
            Op::Getxattr => "getxattr",
            Op::Listxattr => "listxattr",
            Op::Access => "access",
            Op::Refresh => "refresh",
        }
    }
}

/// Histogram buckets: bucket `i` counts latencies below `2^(i+1)` µs
/// (and at least `2^i`, but bucket 0 also takes everything under 1 µs);
/// the last takes everything longer.
const BUCKETS: usize = 32;

#[derive(Default)]
struct OpCounts {
    errors: AtomicU64,
    total_us: AtomicU64,
    max_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

/// One operation's counts over an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSummary {
    pub op: Op,
    pub count: u64,
    pub errors: u64,
    pub mean_us: u64,
    /// Upper bounds of the histogram buckets holding the median and the
    /// 99th percentile (within a factor of two of the true value).
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// Request counts and latencies per operation, from every serving thread.
#[derive(Default)]
pub struct Metrics {
    ops: [OpCounts; Op::ALL.len()],
}

impl Metrics {
    /// Counts one request of `op` that took `took`.
    pub fn record(&self, op: Op, took: Duration, failed: bool) {
        let counts = &self.ops[op as usize];
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        if failed {
            counts.errors.fetch_add(1, Ordering::Relaxed);
        }
        counts.total_us.fetch_add(us, Ordering::Relaxed);
        counts.max_us.fetch_max(us, Ordering::Relaxed);
        counts.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts since the last call, per operation that had requests;
    /// the counts start again from zero. (A request counted while this
    /// runs may have its latency in one interval and its error or maximum
    /// in the next.)
    pub fn take(&self) -> Vec<OpSummary> {
        let mut out = Vec::new();
        for op in Op::ALL {
            let counts = &self.ops[op as usize];
            let buckets: Vec<u64> = counts
                .buckets
                .iter()
                .map(|b| b.swap(0, Ordering::Relaxed))
                .collect();
            let count: u64 = buckets.iter().sum();
            let errors = counts.errors.swap(0, Ordering::Relaxed);
            let total_us = counts.total_us.swap(0, Ordering::Relaxed);
            let max_us = counts.max_us.swap(0, Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            out.push(OpSummary {
                op,
                count,
                errors: errors.min(count),
                mean_us: total_us / count,
                p50_us: quantile(&buckets, count, 50),
                p99_us: quantile(&buckets, count, 99),
                max_us,
            });
        }
        out
    }
}

fn bucket_of(us: u64) -> usize {
    // 0 and 1 µs in bucket 0; else the position of the highest bit.
    let bit = 63 - us.max(1).leading_zeros() as usize;
    bit.min(BUCKETS - 1)
}

/// The upper bound, in µs, of the bucket holding the `percent`th
/// percentile of `count` requests.
fn quantile(buckets: &[u64], count: u64, percent: u64) -> u64 {
    let rank = (count * percent).div_ceil(100).max(1);
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return 1u64 << (i + 1);
        }
    }
    1u64 << BUCKETS
}

/// Logs a metrics line every `interval` until the filesystem is gone.
pub fn spawn_reporter(interval: Duration, metrics: Arc<Metrics>, fs: Weak<WarehouseFs>) {
    let spawned = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let mut last = Cumulative::default();
            let mut since = Instant::now();
            loop {
                std::thread::sleep(interval);
                let Some(fs) = fs.upgrade() else {
                    return;
                };
                let now = Cumulative::of(&fs);
                let line = report(&metrics.take(), &now, &last, since.elapsed(), &fs);
                drop(fs);
                log::info!(target: "pchronicle::metrics", "metrics {line}");
                last = now;
                since = Instant::now();
            }
        });
    if let Err(e) = spawned {
        log::warn!("no metrics: {e}");
    }
}

/// Counters that only grow, read at the end of an interval.
#[derive(Default, Clone, Copy)]
struct Cumulative {
    dirs: HitCount,
    nodes: HitCount,
    files: HitCount,
    kept: HitCount,
    files_read: u64,
    renders: super::render::RenderCounts,
}

impl Cumulative {
    fn of(fs: &WarehouseFs) -> Cumulative {
        let hits = fs.catalog().cache_hits();
        Cumulative {
            dirs: hits.dirs,
            nodes: hits.nodes,
            files: hits.files,
            kept: hits.kept,
            files_read: hits.files_read,
            renders: fs.render_counts(),
        }
    }
}

/// One metrics line (a JSON object) for an interval of `elapsed`.
fn report(
    ops: &[OpSummary],
    now: &Cumulative,
    last: &Cumulative,
    elapsed: Duration,
    fs: &WarehouseFs,
) -> String {
    let mut by_op = Map::new();
    for s in ops {
        by_op.insert(
            s.op.name().into(),
            json!({
                "count": s.count,
                "errors": s.errors,
                "mean_us": s.mean_us,
                "p50_us": s.p50_us,
                "p99_us": s.p99_us,
                "max_us": s.max_us,
            }),
        );
    }
    let hits = |now: HitCount, last: HitCount| {
        let (hits, misses) = (
            now.hits.saturating_sub(last.hits),
            now.misses.saturating_sub(last.misses),
        );
        let rate = if hits + misses == 0 {
            Value::Null
        } else {
            json!(((hits as f64 / (hits + misses) as f64) * 1000.0).round() / 1000.0)
        };
        json!({"hits": hits, "misses": misses, "hit_rate": rate})
    };
    let renders = now.renders.since(&last.renders);
    json!({
        "interval_s": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        "ops": by_op,
        "renders": {
            "count": renders.rendered,
            "total_ms": renders.render_us / 1000,
            "reused": renders.reused,
        },
        "cache": {
            "dirs": hits(now.dirs, last.dirs),
            "nodes": hits(now.nodes, last.nodes),
            "files": hits(now.files, last.files),
            "kept": hits(now.kept, last.kept),
            "renders": hits(
                HitCount { hits: now.renders.reused, misses: now.renders.rendered },
                HitCount { hits: last.renders.reused, misses: last.renders.rendered },
            ),
        },
        "files_read": now.files_read.saturating_sub(last.files_read),
        "inodes": fs.known_inodes(),
        "open_handles": fs.open_handles(),
        "rss_kib": resident_kib(),
    })
    .to_string()
}

/// The daemon's resident memory (`VmRSS` of `/proc/self/status`); null
/// when it cannot be read.
pub(crate) fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles_bound_the_latencies() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 1);
        assert_eq!(bucket_of(1024), 10);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        let metrics = Metrics::default();
        for us in [10u64, 12, 14, 16, 20, 30, 40, 50, 60, 5000] {
            metrics.record(Op::Lookup, Duration::from_micros(us), us == 5000);
        }
        metrics.record(Op::Read, Duration::from_micros(3), false);
        let taken = metrics.take();
        assert_eq!(taken.len(), 2);
        let lookup = &taken[0];
        assert_eq!(lookup.op, Op::Lookup);
        assert_eq!((lookup.count, lookup.errors), (10, 1));
        assert_eq!(lookup.mean_us, 5252 / 10);
        assert_eq!(lookup.max_us, 5000);
        // The 5th of 10 is 20 µs: bucket [16, 32).
        assert_eq!(lookup.p50_us, 32);
        // The 10th is 5000 µs: bucket [4096, 8192).
        assert_eq!(lookup.p99_us, 8192);
        assert!(lookup.p50_us >= 20 && lookup.p99_us >= 5000);
        assert_eq!(taken[1].op, Op::Read);
        // Taken means reset.
        assert!(metrics.take().is_empty());
    }

    #[test]
    fn every_operation_has_its_own_slot() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i);
        }
    }
}
