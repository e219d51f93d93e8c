//! `mount` and `umount`: the flags that become a [`MountConfig`], and the
//! hand-over to the FUSE adapter, which does the mounting, backgrounding
//! and unmounting.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::WalkArgs;
use crate::catalog::{CatalogOptions, CountCachePlace};
use crate::error::Result;
use crate::fs::{FsOptions, MountConfig, Mounted};

// The flags of `mount`.
#[derive(Args, Debug)]
pub(super) struct MountArgs {
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
    /// Have the daemon read every warehouse file itself, even where the
    /// kernel could read it directly (FUSE passthrough, Linux 6.9+, the
    /// daemon running as root): slower, for comparison and diagnosis.
    #[arg(long)]
    no_passthrough: bool,
    #[command(flatten)]
    walk: WalkArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

impl MountArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let MountArgs {
            warehouse,
            mountpoint,
            foreground,
            allow_other,
            attr_ttl,
            options,
            threads,
            render_timeout,
            log,
            no_passthrough,
            walk,
            cache,
        } = self;
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
                // Set by the mount from who may read it.
                shared: false,
            },
            foreground,
            allow_other,
            options,
            threads,
            log,
            passthrough: !no_passthrough,
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
}

// The flags of `umount`.
#[derive(Args, Debug)]
pub(super) struct UmountArgs {
    /// The directory given to `pchronicle mount`.
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
