//! `mount` and `umount`: the flags that become a [`MountConfig`], and the
//! hand-over to the FUSE adapter, which does the mounting, backgrounding
//! and unmounting.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::WalkArgs;
use super::out::{note, say};
use crate::catalog::{CatalogOptions, CountCachePlace};
use crate::error::Result;
use crate::fs::handles::HandleLimits;
use crate::fs::{FsOptions, MountConfig, Mounted, WorkerOptions};

// The flags of `mount`.
#[derive(Args, Debug)]
pub(super) struct MountArgs {
    /// The warehouse directory to show: local, or `s3://BUCKET/PREFIX`
    /// (read only; endpoint and credentials from the AWS environment).
    warehouse: PathBuf,
    /// An empty directory outside the warehouse (not a symlink: its own
    /// name is never followed), or `/dev/fd/N`: an open `/dev/fuse`
    /// descriptor already mounted by the caller (a container runtime),
    /// served in this process.
    mountpoint: PathBuf,
    /// Serve in this process until unmounted or interrupted (for
    /// tests and service managers).
    #[arg(short, long, help_heading = "Running")]
    foreground: bool,
    /// Print nothing once mounted (what the mount helper does for
    /// `mount -t fuse.pchronicle` and fstab).
    #[arg(short, long, help_heading = "Running")]
    quiet: bool,
    /// Log every request and decision (the daemon's log, or standard
    /// error in the foreground); `RUST_LOG`, when set, decides instead.
    #[arg(short, long, help_heading = "Running")]
    debug: bool,
    /// Let other users read the mount (needs `user_allow_other` in
    /// /etc/fuse.conf unless run as root). Permissions are still those
    /// of the underlying files.
    #[arg(long, help_heading = "Access")]
    allow_other: bool,
    /// How long the kernel caches names and attributes: `1s`, `500ms`,
    /// `2m`, `0` (a bare number is milliseconds); changes underneath show
    /// up within this time. `indefinite`, for a warehouse that never
    /// changes underneath: nothing is asked again until unmounted.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration_ms, help_heading = "Serving")]
    attr_ttl: Duration,
    /// How long the kernel remembers that a name does not exist: `0`
    /// (every lookup of a missing name asks, so a new file shows at
    /// once), `1s`, `indefinite`. `pchronicle refresh` forgets at once.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = duration_ms, help_heading = "Serving")]
    negative_ttl: Duration,
    /// Mount options, comma-separated, fuse style: ro, allow_other,
    /// allow_root, default_permissions, nodev, nosuid, noexec, exec,
    /// noatime, atime. The mount is always read-only, nodev and nosuid,
    /// and noexec unless `exec` is given.
    #[arg(short = 'o', value_name = "OPTIONS", help_heading = "Access")]
    options: Vec<String>,
    /// Threads serving requests, so one slow `.stats` does not hold up
    /// listings elsewhere.
    #[arg(long, value_name = "N", default_value_t = 4, help_heading = "Serving")]
    threads: usize,
    /// Longest a slow answer may take (`60s`, `5m`; a bare number is
    /// seconds): a `.stats`/`.sources` render, a count, a read of
    /// `.records` or of a remote file. Past it the request is answered
    /// with EIO (and logged); what was counted meanwhile is kept.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_s, help_heading = "Serving")]
    render_timeout: Duration,
    /// Threads making the answers that may be slow (renders, counts,
    /// `.records`, remote reads), so the serving threads never wait for
    /// one; requests past 256 waiting for them are answered EAGAIN.
    #[arg(long, value_name = "N", default_value_t = 8, help_heading = "Serving")]
    workers: usize,
    /// Record files at least this large (MiB) that were never counted
    /// are counted in the background, one step at a time; meanwhile
    /// `.stats` and `.sources` show them as being counted (`counting`)
    /// instead of waiting. 0 counts every file in the background.
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 256,
        help_heading = "Serving"
    )]
    count_in_background_mib: u64,
    /// Open files and directories of the mount one user may hold at once
    /// (past it, EMFILE), so one user cannot take the daemon's
    /// descriptors from the others. Kept below half of what the daemon's
    /// descriptor limit leaves after its own reserve.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4096,
        help_heading = "Access"
    )]
    max_handles_per_user: usize,
    /// Log a line of metrics this often (`10s`, `1m`; a bare number is
    /// seconds): request counts and latencies per operation, renders,
    /// cache hit rates, resident memory (see docs/operations.md).
    #[arg(long, value_name = "DURATION", value_parser = metrics_interval, help_heading = "Running")]
    log_metrics: Option<Duration>,
    /// Append the background daemon's log (RUST_LOG levels) to FILE.
    #[arg(long, value_name = "FILE", help_heading = "Running")]
    log: Option<PathBuf>,
    /// Have the daemon read every warehouse file itself, even where the
    /// kernel could read it directly (FUSE passthrough, Linux 6.9+, the
    /// daemon running as root): slower, for comparison and diagnosis.
    #[arg(long, help_heading = "Serving")]
    no_passthrough: bool,
    /// Show the warehouse as it was at TIME (RFC 3339), frozen: every
    /// leaf at its revision then (one made later is not listed), and every
    /// `.stats`, `.sources` and `.records` as `pchronicle stats|ls
    /// --sources|cat --as-of TIME` (docs/history.md). Files themselves are
    /// shown, and read, as they are.
    #[arg(long = "as-of", value_name = "TIME", help_heading = "Serving")]
    as_of: Option<String>,
    #[command(flatten, next_help_heading = "Traversal")]
    walk: WalkArgs,
    #[command(flatten, next_help_heading = "Caches")]
    cache: CacheArgs,
}

impl MountArgs {
    /// The log filter when `RUST_LOG` is unset: warnings, plus the mount's
    /// own start, ready, unmount and exit lines, or everything of
    /// pchronicle's with `--debug`.
    pub(super) fn log_filter(&self) -> &'static str {
        if self.debug {
            "warn,pchronicle=debug"
        } else {
            "warn,pchronicle=info"
        }
    }

    pub(super) fn run(self) -> Result<ExitCode> {
        let MountArgs {
            warehouse,
            mountpoint,
            foreground,
            quiet,
            debug: _,
            allow_other,
            attr_ttl,
            negative_ttl,
            options,
            threads,
            render_timeout,
            workers,
            count_in_background_mib,
            max_handles_per_user,
            log,
            log_metrics,
            no_passthrough,
            as_of,
            walk,
            cache,
        } = self;
        let as_of = match as_of {
            Some(text) => {
                let mut selection = crate::extract::Selection::default();
                selection.set_as_of(&text)?;
                selection.as_of
            }
            None => None,
        };
        let budget = render_timeout.max(Duration::from_secs(1));
        let catalog = CatalogOptions {
            walk_budget: Some(budget),
            background_count_bytes: Some(count_in_background_mib.saturating_mul(1 << 20)),
            as_of,
            ..cache.apply(walk.options())
        };
        // A remote warehouse is listed again at most once per attribute
        // TTL (at least a second), and its files are read by the daemon.
        let remote = super::is_remote(&warehouse);
        #[cfg(feature = "remote")]
        if remote {
            crate::remote::set_listing_ttl(attr_ttl.max(REMOTE_LISTING_TTL_MIN));
        }
        let config = MountConfig {
            catalog,
            warehouse,
            mount_point: mountpoint,
            fs: FsOptions {
                attr_ttl,
                negative_ttl,
                render_cache_entries: cache.render_cache_entries,
                render_cache_bytes: cache.render_cache_mib.saturating_mul(1 << 20),
                // Set by the mount from who may read it.
                shared: false,
                // Set by the daemon from its descriptor limit.
                handle_limits: HandleLimits {
                    per_user: max_handles_per_user.max(1),
                    ..HandleLimits::default()
                },
            },
            foreground,
            allow_other,
            options,
            threads,
            workers: WorkerOptions {
                threads: workers.max(1),
                budget,
                ..WorkerOptions::default()
            },
            log,
            passthrough: !no_passthrough && !remote,
            log_metrics,
        };
        let announce = |m: &Mounted| {
            if quiet {
                return;
            }
            let stop = if m.owner_unmounts {
                "Ctrl-C, or unmounting it where it was mounted, stops it".to_string()
            } else {
                format!(
                    "Ctrl-C or `pchronicle umount {}` to stop",
                    m.mount_point.display()
                )
            };
            note!(
                "serving {} at {} (pid {}); {stop}",
                m.warehouse.display(),
                m.mount_point.display(),
                m.pid,
            );
        };
        let mounted = crate::fs::mount(&config, &announce)?;
        // A daemon of its own serves the mount (not this process, which
        // served it until now in the foreground or for a /dev/fd/N).
        let daemon_elsewhere = mounted.pid != std::process::id();
        if daemon_elsewhere && !foreground && !quiet {
            say!(
                "mounted {} at {} (daemon pid {})",
                mounted.warehouse.display(),
                mounted.mount_point.display(),
                mounted.pid
            );
            say!(
                "try: ls -la {0}  |  cat {0}/.stats  |  pchronicle umount {0}",
                mounted.mount_point.display()
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The shortest time a mount trusts a remote listing, whatever its
/// attribute TTL: a polling reader lists a prefix at most once per it.
#[cfg(feature = "remote")]
const REMOTE_LISTING_TTL_MIN: Duration = Duration::from_secs(1);

// The flags of `umount`.
#[derive(Args, Debug)]
pub(super) struct UmountArgs {
    /// The directory given to `pchronicle mount` (a symlink is refused,
    /// never followed).
    mountpoint: PathBuf,
    /// Detach now even if the mount is busy; the kernel finishes when
    /// the last user leaves.
    #[arg(long)]
    lazy: bool,
}

impl UmountArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        crate::fs::unmount(&self.mountpoint, self.lazy)?;
        Ok(ExitCode::SUCCESS)
    }
}

// The flags of `refresh`.
#[derive(Args, Debug)]
pub(super) struct RefreshArgs {
    /// The directory given to `pchronicle mount`.
    mountpoint: PathBuf,
    /// A path inside the mount, relative to its root [default: the whole
    /// mount].
    path: Option<PathBuf>,
}

impl RefreshArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let path = self.path.unwrap_or_default();
        let refreshed = crate::fs::control::refresh(&self.mountpoint, &path)?;
        if refreshed == crate::fs::control::Refreshed::Absent {
            note!(
                "note: {} is not in the mount (now); what it showed there is forgotten",
                path.display()
            );
        }
        Ok(ExitCode::SUCCESS)
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
    /// Rendered `.stats`/`.sources` kept for reuse within the attribute
    /// TTL; 16 times as many unchanged contents are served from the page
    /// cache.
    #[arg(long, value_name = "N", default_value_t = FsOptions::default().render_cache_entries)]
    render_cache_entries: usize,
    /// Bytes of rendered `.stats`/`.sources` kept, in MiB (a larger render
    /// is not kept, and is rendered on every open); the same bound holds
    /// for contents served from the page cache.
    #[arg(long, value_name = "MIB", default_value_t = FsOptions::default().render_cache_bytes >> 20)]
    render_cache_mib: usize,
    /// Do not watch the warehouse for changes: every listing, `.stats` and
    /// `.sources` checks each leaf below it with a `stat` once its TTL
    /// ran out, as on a filesystem that does not report changes.
    #[arg(long)]
    no_watch: bool,
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
            watch: !self.no_watch,
            ..options
        }
    }
}

/// A duration of `--attr-ttl`: a number with a unit, or bare milliseconds.
fn duration_ms(text: &str) -> std::result::Result<Duration, String> {
    parse_duration(text, Duration::from_millis)
}

/// A duration of `--render-timeout`: a number with a unit, or bare seconds.
pub(super) fn duration_s(text: &str) -> std::result::Result<Duration, String> {
    parse_duration(text, Duration::from_secs)
}

/// The interval of `--log-metrics`: a duration of at least 100 ms (bare
/// numbers are seconds).
fn metrics_interval(text: &str) -> std::result::Result<Duration, String> {
    let every = duration_s(text)?;
    if every < Duration::from_millis(100) {
        return Err(format!("`{text}`: at least 100ms"));
    }
    Ok(every)
}

/// What `indefinite` stands for: a hundred years, as good as forever for
/// a mount, and far from any overflow when added to a clock.
const INDEFINITE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `0`, `250ms`, `1.5s`, `2m`, `1h`, `indefinite`, or a bare whole number
/// in the flag's own unit (`bare`).
fn parse_duration(text: &str, bare: fn(u64) -> Duration) -> std::result::Result<Duration, String> {
    let text = text.trim();
    if text == "indefinite" {
        return Ok(INDEFINITE);
    }
    if let Ok(n) = text.parse::<u64>() {
        return Ok(bare(n));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds_per_unit = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "`{text}`: expected e.g. 1s, 500ms, 2m, 1h, 0 or indefinite"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}`: expected a number before the unit"))?;
    Duration::try_from_secs_f64(value * seconds_per_unit)
        .map_err(|_| format!("`{text}`: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_numbers_keep_the_flags_unit() {
        assert_eq!(duration_ms("0"), Ok(Duration::ZERO));
        assert_eq!(duration_ms("250"), Ok(Duration::from_millis(250)));
        assert_eq!(duration_s("250"), Ok(Duration::from_secs(250)));
        assert_eq!(duration_ms("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration_ms("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration_s("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration_s("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(duration_ms("indefinite"), Ok(INDEFINITE));
        assert!(std::time::Instant::now().checked_add(INDEFINITE).is_some());
        for bad in ["", "s", "1d", "-1s", "1.2.3s", "1e400s", "ms5"] {
            assert!(duration_ms(bad).is_err(), "{bad:?}");
        }
    }
}
