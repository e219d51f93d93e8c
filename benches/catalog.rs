//! Catalog benchmarks, each printed beside its native baseline measured in
//! the same run:
//!
//! - counting a large JSONL file against `wc -l` on the same file (MB/s);
//! - `list` of a 10,000-entry directory, cold and warm, against a plain
//!   `readdir` + `lstat` of the same directory;
//! - `stats` (an `open` rolled up) of a warehouse of leaves and record
//!   files, cold and warm;
//! - `list` of compact-jsonl leaves with trusted manifests against opening
//!   every one of them in Lance;
//! - `pchronicle import` of a large JSONL file against `cp` of it, with the
//!   import's peak RSS;
//! - appending one record to a session's shard (line and packed) in a
//!   store of 100 and of 20,000 shards, against a bare `O_APPEND` write;
//! - the same append inside a git work tree whose index holds 10,000 and
//!   100,000 files, with the bytes of git's files each append reads, as
//!   usual and when git rewrote the index before every append;
//! - loading every record of a record store at 1x and 10x size, against
//!   reading its bytes;
//! - building a sidecar index over a large cohort (MB/s), and looking one
//!   key up through it against `grep -F` of the same key over the file.
//!
//! Sizes come from the environment so CI can run a small smoke pass:
//! `PCHRONICLE_BENCH_COUNT_MB` (default 1024), `PCHRONICLE_BENCH_ENTRIES`
//! (default 10000), `PCHRONICLE_BENCH_LEAVES` (default 1000),
//! `PCHRONICLE_BENCH_COMPACT_LEAVES` (default 1000),
//! `PCHRONICLE_BENCH_IMPORT_MB` (default 1024),
//! `PCHRONICLE_BENCH_STORE_SHARDS` (default 20000),
//! `PCHRONICLE_BENCH_GIT_FILES` (default 10000; 10x is measured too),
//! `PCHRONICLE_BENCH_INDEX_RECORDS` (default 1000000),
//! `PCHRONICLE_BENCH_DIR` (default: the system temp directory).
//!
//! Run: `cargo bench --bench catalog`, or `cargo bench --bench catalog --
//! git` for the benchmarks whose name holds `git`.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pchronicle::catalog::{Catalog, CatalogOptions};
use pchronicle::records::{RecordFormat, count_file};
use pchronicle::store::CompactJsonlStore;
use pchronicle::store::compact::ImportMode;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// Empties the kernel's page cache; false when not permitted.
fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// The process's peak resident set size (`VmHWM`), in MiB.
fn peak_rss_mib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Prints the native baseline, then each measurement with its ratio to it.
fn print_against_native(native_label: &str, native: Duration, measured: &[(&str, Duration)]) {
    println!("  {native_label:<22}{:8.2} ms", ms(native));
    for (label, time) in measured {
        println!(
            "  {label:<22}{:8.2} ms   ratio to native: {:.1}x",
            ms(*time),
            time.as_secs_f64() / native.as_secs_f64()
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn write_jsonl(path: &Path, bytes: u64) -> u64 {
    let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(path).unwrap());
    let (mut written, mut i) = (0u64, 0u64);
    while written < bytes {
        let line = format!(
            "{{\"id\":\"r-{i:010}\",\"session\":\"s-{:06}\",\"ts\":\"2026-11-{:02}T{:02}:{:02}:{:02}Z\",\"role\":\"assistant\",\"content\":\"step {i}: ran the tests, 3 passed, 0 failed; next: read the log\",\"tokens\":{}}}\n",
            i / 500,
            1 + (i / 86_400) % 28,
            (i / 3600) % 24,
            (i / 60) % 60,
            i % 60,
            i % 4096
        );
        out.write_all(line.as_bytes()).unwrap();
        written += line.len() as u64;
        i += 1;
    }
    out.flush().unwrap();
    i
}

fn bench_count(dir: &Path) {
    let mb = env_usize("PCHRONICLE_BENCH_COUNT_MB", 1024) as u64;
    let path = dir.join("big.jsonl");
    let records = write_jsonl(&path, mb << 20);
    let size = fs::metadata(&path).unwrap().len();
    let size_mb = size as f64 / (1 << 20) as f64;
    // Warm the page cache so both sides read the same way (streaming, so
    // the peak RSS reported below is the counter's own).
    std::io::copy(&mut fs::File::open(&path).unwrap(), &mut std::io::sink()).unwrap();
    let wc = median(3, || {
        let out = Command::new("wc")
            .arg("-l")
            .arg(&path)
            .output()
            .expect("wc runs");
        assert!(out.status.success());
    });
    let mut counted = 0;
    let ours = median(3, || {
        counted = count_file(&path, RecordFormat::Jsonl).unwrap().record_count;
    });
    assert_eq!(counted, records, "the benchmark counts what it wrote");
    println!("count {size_mb:.0} MiB JSONL ({records} records)");
    let report = |label: &str, wc: Duration, ours: Duration| {
        println!(
            "  {label}: wc -l          {:8.1} ms  {:8.0} MiB/s",
            ms(wc),
            size_mb / wc.as_secs_f64()
        );
        println!(
            "  {label}: pchronicle     {:8.1} ms  {:8.0} MiB/s   ratio to wc -l: {:.2}",
            ms(ours),
            size_mb / ours.as_secs_f64(),
            wc.as_secs_f64() / ours.as_secs_f64()
        );
    };
    report("page cache warm", wc, ours);
    println!(
        "  peak RSS of the benchmark process so far: {} MiB (the file is {size_mb:.0} MiB)",
        peak_rss_mib()
    );
    // Cold: the file is dropped from the page cache before each run, so
    // both read from the disk. Needs root; skipped (and said) otherwise.
    if drop_caches() {
        let wc_cold = timed(|| {
            Command::new("wc")
                .arg("-l")
                .arg(&path)
                .output()
                .expect("wc runs");
        });
        drop_caches();
        let ours_cold = timed(|| {
            count_file(&path, RecordFormat::Jsonl).unwrap();
        });
        report("page cache cold", wc_cold, ours_cold);
    } else {
        println!("  page cache cold: skipped (dropping the page cache needs root)");
    }
    fs::remove_file(&path).unwrap();
}

fn settle() {
    // Past the refresh cache's racy window, so identities are cacheable.
    std::thread::sleep(Duration::from_millis(1_100));
}

fn bench_list(dir: &Path) {
    let entries = env_usize("PCHRONICLE_BENCH_ENTRIES", 10_000);
    let root = dir.join("wide");
    fs::create_dir_all(&root).unwrap();
    for i in 0..entries {
        if i % 10 == 0 {
            let leaf = root.join(format!("leaf-{i:06}"));
            fs::create_dir_all(leaf.join("generations/g1")).unwrap();
            fs::write(leaf.join("generations/g1/a.jsonl"), "{\"ts\":1}\n").unwrap();
            fs::write(leaf.join("CURRENT"), "g1\n").unwrap();
        } else {
            fs::write(root.join(format!("file-{i:06}.jsonl")), "{}\n").unwrap();
        }
    }
    // Repair every leaf's manifest once, as a first reader would.
    Catalog::new(&root, CatalogOptions::default())
        .unwrap()
        .list(Path::new("."))
        .unwrap();
    settle();
    let native = median(5, || {
        let mut n = 0;
        for entry in fs::read_dir(&root).unwrap() {
            let entry = entry.unwrap();
            let _ = fs::symlink_metadata(entry.path()).unwrap();
            n += 1;
        }
        assert_eq!(n, entries);
    });
    let cold = median(5, || {
        let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
        assert_eq!(catalog.list(Path::new(".")).unwrap().entries.len(), entries);
    });
    let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
    catalog.list(Path::new(".")).unwrap();
    let warm = median(5, || {
        assert_eq!(catalog.list(Path::new(".")).unwrap().entries.len(), entries);
    });
    println!(
        "list {entries} entries ({} leaves with manifests)",
        entries / 10
    );
    print_against_native(
        "readdir + lstat",
        native,
        &[("list, cold catalog", cold), ("list, warm cache", warm)],
    );
}

fn bench_stats(dir: &Path) {
    let leaves = env_usize("PCHRONICLE_BENCH_LEAVES", 1_000);
    let root = dir.join("deep");
    for i in 0..leaves {
        let part = root.join(format!("date=2026-11-{:02}/agent=a{}", 1 + i % 28, i % 7));
        let leaf = part.join(format!("leaf-{i:05}"));
        fs::create_dir_all(leaf.join("generations/g1")).unwrap();
        fs::write(
            leaf.join("generations/g1/a.jsonl"),
            "{\"ts\":1}\n{\"ts\":2}\n",
        )
        .unwrap();
        fs::write(leaf.join("CURRENT"), "g1\n").unwrap();
        fs::write(part.join(format!("s-{i:05}.jsonl")), "{\"ts\":3}\n").unwrap();
    }
    Catalog::new(&root, CatalogOptions::default())
        .unwrap()
        .stats(Path::new("."))
        .unwrap();
    settle();
    let cold = median(5, || {
        let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
        assert_eq!(
            catalog.stats(Path::new(".")).unwrap().record_count,
            3 * leaves as u64
        );
    });
    let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
    catalog.stats(Path::new(".")).unwrap();
    let warm = median(5, || {
        assert_eq!(
            catalog.stats(Path::new(".")).unwrap().record_count,
            3 * leaves as u64
        );
    });
    let native = median(5, || {
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if fs::symlink_metadata(&path).unwrap().is_dir() && !path.join("CURRENT").exists() {
                    stack.push(path);
                }
            }
        }
    });
    println!("stats of {leaves} leaves + {leaves} record files in hive partitions");
    print_against_native(
        "walk (readdir+lstat)",
        native,
        &[("stats, cold catalog", cold), ("stats, warm cache", warm)],
    );
}

/// Copies a directory tree (regular files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn bench_compact_leaves(dir: &Path) {
    let count = env_usize("PCHRONICLE_BENCH_COMPACT_LEAVES", 1_000);
    let root = dir.join("compact");
    let source = dir.join("compact-src.jsonl");
    write_jsonl(&source, 64 << 10);
    let store = CompactJsonlStore::default();
    store
        .import_path(&source, &root.join("leaf-0000"), ImportMode::Create)
        .unwrap();
    for i in 1..count {
        copy_tree(&root.join("leaf-0000"), &root.join(format!("leaf-{i:04}")));
    }
    settle();
    let list = median(5, || {
        let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
        assert_eq!(catalog.list(Path::new(".")).unwrap().entries.len(), count);
    });
    // Without manifests a listing would have to open every leaf and compute
    // its preview (rows, failed rows, time range); opening alone is the
    // floor of that.
    let open_all = median(3, || {
        let store = CompactJsonlStore::default();
        for i in 0..count {
            store.open(&root.join(format!("leaf-{i:04}"))).unwrap();
        }
    });
    let preview_all = median(3, || {
        let store = CompactJsonlStore::default();
        for i in 0..count {
            store
                .dataset_stats(&root.join(format!("leaf-{i:04}")))
                .unwrap();
        }
    });
    let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
    catalog.list(Path::new(".")).unwrap();
    let warm = median(5, || {
        assert_eq!(catalog.list(Path::new(".")).unwrap().entries.len(), count);
    });
    println!("list {count} compact-jsonl leaves with trusted manifests");
    println!(
        "  open every leaf in Lance          {:8.2} ms",
        ms(open_all)
    );
    println!(
        "  open + compute each preview       {:8.2} ms",
        ms(preview_all)
    );
    for (label, time) in [("list, new catalog", list), ("list, warm cache", warm)] {
        println!(
            "  {label:<33} {:8.2} ms   {:.0}x faster than opening, {:.0}x than previewing every leaf",
            ms(time),
            open_all.as_secs_f64() / time.as_secs_f64(),
            preview_all.as_secs_f64() / time.as_secs_f64()
        );
    }
}

/// Imports a large JSONL file with the real binary and reports its
/// throughput and peak RSS next to `cp` of the same file.
fn bench_import(dir: &Path) {
    let mb = env_usize("PCHRONICLE_BENCH_IMPORT_MB", 1024) as u64;
    let source = dir.join("import.jsonl");
    let records = write_jsonl(&source, mb << 20);
    let size_mb = fs::metadata(&source).unwrap().len() as f64 / (1 << 20) as f64;
    std::io::copy(&mut fs::File::open(&source).unwrap(), &mut std::io::sink()).unwrap();
    let cp = timed(|| {
        assert!(
            Command::new("cp")
                .arg(&source)
                .arg(dir.join("copy.jsonl"))
                .status()
                .unwrap()
                .success()
        );
    });
    fs::remove_file(dir.join("copy.jsonl")).unwrap();
    let dest = dir.join("imported");
    let import = timed(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
            .args(["import", "--json"])
            .arg(&source)
            .arg(&dest)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["record_count"].as_u64(), Some(records));
    });
    println!("import {size_mb:.0} MiB JSONL ({records} records) into a compact-jsonl leaf");
    println!(
        "  cp of the same file      {:8.1} ms  {:8.0} MiB/s",
        ms(cp),
        size_mb / cp.as_secs_f64()
    );
    println!(
        "  pchronicle import        {:8.1} ms  {:8.0} MiB/s   ratio to cp: {:.2}",
        ms(import),
        size_mb / import.as_secs_f64(),
        cp.as_secs_f64() / import.as_secs_f64()
    );
    println!(
        "  peak RSS of the import process: {} MiB",
        children_peak_rss_mib()
    );
    fs::remove_file(&source).unwrap();
    fs::remove_dir_all(&dest).unwrap();
}

/// The largest peak RSS of any waited-for child process, in MiB.
fn children_peak_rss_mib() -> u64 {
    // SAFETY: getrusage writes only into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    usage.ru_maxrss as u64 / 1024
}

/// A benchmark: its name and what runs it over the fixture directory.
type Bench = (&'static str, fn(&Path));

fn main() {
    // `cargo bench` passes `--bench`; other arguments name the benchmarks
    // to run (a part of their name: `cargo bench --bench catalog -- git`).
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let base = std::env::var_os("PCHRONICLE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("pchronicle-bench")
        .tempdir_in(base)
        .unwrap();
    let benches: [Bench; 9] = [
        ("count", bench_count),
        ("list", bench_list),
        ("stats", bench_stats),
        ("compact_leaves", bench_compact_leaves),
        ("import", bench_import),
        ("append", bench_append),
        ("append_in_git", bench_append_in_git),
        ("load_store", bench_load_store),
        ("sidecar", bench_sidecar),
    ];
    for (name, bench) in benches {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            bench(dir.path());
        }
    }
}

fn bench_sidecar(dir: &Path) {
    use pchronicle::sidecar::build::build;
    use pchronicle::sidecar::lookup::lookup;
    let records = env_usize("PCHRONICLE_BENCH_INDEX_RECORDS", 1_000_000);
    let sessions = (records / 10).max(1);
    let cohort = dir.join("cohort.jsonl");
    {
        let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(&cohort).unwrap());
        for i in 0..records {
            writeln!(
                out,
                r#"{{"id":"r-{i:010}","session":"s-{:07}","turn":{},"ts":"2026-11-30T10:00:00Z","role":"assistant","content":"step {i}: ran the tests"}}"#,
                (i * 7919) % sessions,
                i % 10
            )
            .unwrap();
        }
    }
    let bytes = fs::metadata(&cohort).unwrap().len();
    let key = vec!["session".to_string()];
    // Baseline: `sha256sum` of the same file (page cache warm), the least
    // any build does, since an index records the file's digest.
    let sha256sum = median(3, || {
        let out = Command::new("sha256sum").arg(&cohort).output().unwrap();
        assert!(out.status.success());
    });
    let builds: Vec<Duration> = (0..3)
        .map(|_| {
            timed(|| {
                build(&cohort, &key).unwrap();
            })
        })
        .collect();
    let built = {
        let mut sorted = builds.clone();
        sorted.sort();
        sorted[1]
    };
    let probes: Vec<String> = (0..200)
        .map(|i| format!("s-{:07}", (i * 104_729) % sessions))
        .collect();
    for probe in &probes {
        assert_eq!(
            lookup(&cohort, &key, std::slice::from_ref(probe))
                .unwrap()
                .len(),
            10
        );
    }
    let mut times: Vec<Duration> = probes
        .iter()
        .map(|probe| {
            timed(|| {
                assert_eq!(
                    lookup(&cohort, &key, std::slice::from_ref(probe))
                        .unwrap()
                        .len(),
                    10
                )
            })
        })
        .collect();
    times.sort();
    let (typical, p99) = (times[times.len() / 2], times[times.len() * 99 / 100]);
    let grep = median(3, || {
        let out = Command::new("grep")
            .arg("-F")
            .arg(format!(r#""session":"{}""#, probes[0]))
            .arg(&cohort)
            .output()
            .unwrap();
        assert_eq!(
            out.stdout
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count(),
            10
        );
    });
    println!(
        "sidecar index over {records} records ({:.0} MiB, {sessions} sessions of 10)",
        bytes as f64 / (1 << 20) as f64
    );
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "  build (median of 3) {:.0} ms = {:.0} MiB/s (goal: >= 300 MiB/s)   sha256sum of the file {:.0} ms = {:.0} MiB/s   build / sha256sum throughput {:.2}",
        ms(built),
        mib / built.as_secs_f64(),
        ms(sha256sum),
        mib / sha256sum.as_secs_f64(),
        sha256sum.as_secs_f64() / built.as_secs_f64()
    );
    println!(
        "  lookup (10 records), warm: median {:.3} ms, p99 {:.3} ms   grep -F of the file {:.1} ms   {:.0}x faster (goals: median <= 0.2 ms, >= 1000x)",
        ms(typical),
        ms(p99),
        ms(grep),
        grep.as_secs_f64() / typical.as_secs_f64()
    );
}

/// The median and 99th percentile of `n` single-call timings.
fn percentiles(n: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut times: Vec<Duration> = (0..n).map(|_| timed(&mut f)).collect();
    times.sort();
    (times[n / 2], times[(n * 99) / 100])
}

/// The baseline of an append: 2,000 bare `open(O_APPEND)` + `write` of
/// `record` and a newline to `file`, median and 99th percentile.
fn bare_appends(file: &Path, record: &[u8]) -> (Duration, Duration) {
    percentiles(2_000, || {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .unwrap();
        f.write_all(record).unwrap();
        f.write_all(b"\n").unwrap();
    })
}

fn bench_append(dir: &Path) {
    use pchronicle::shards::{ShardFormat, Writer};

    let big = env_usize("PCHRONICLE_BENCH_STORE_SHARDS", 20_000);
    let record = br#"{"id":"r-0000000001","session":"bench","ts":"2026-11-30T10:00:00Z","role":"assistant","content":"ran the tests, 3 passed"}"#;
    println!("append one record (median / p99 of 2,000 appends)");
    for shards in [100, big] {
        let warehouse = dir.join(format!("appends-{shards}"));
        let store = warehouse.join("sessions");
        fs::create_dir_all(warehouse.join(".pchronicle")).unwrap();
        fs::create_dir_all(&store).unwrap();
        for i in 0..shards {
            fs::write(store.join(format!("other-{i:06}.{i:08x}.jsonl")), "{}\n").unwrap();
        }
        let (native, native_p99) = bare_appends(&store.join("native.jsonl"), record);
        println!(
            "  {shards} shards in the store: bare O_APPEND open+write {:.3} / {:.3} ms",
            ms(native),
            ms(native_p99)
        );
        for (label, format) in [("line", ShardFormat::Line), ("packed", ShardFormat::Packed)] {
            let mut writer = Writer::open(&store, &format!("bench-{label}"), format).unwrap();
            for _ in 0..50 {
                writer.append(record).unwrap();
            }
            let (median, p99) = percentiles(2_000, || {
                writer.append(record).unwrap();
            });
            println!(
                "    append, {label:<6} {:.3} / {:.3} ms   ratio to bare write: {:.1}x (goal: median <= 0.1 ms)",
                ms(median),
                ms(p99),
                median.as_secs_f64() / native.as_secs_f64()
            );
        }
    }
}

/// `git ARGS` in `dir` with no user configuration, `stdin` fed to it.
fn git(dir: &Path, args: &[&str], stdin: &[u8]) {
    use std::process::Stdio;
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("git runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    assert!(child.wait().unwrap().success(), "git {args:?}");
}

fn bench_append_in_git(dir: &Path) {
    use pchronicle::shards::git::bytes_read;
    use pchronicle::shards::{ShardFormat, Writer};
    let files = env_usize("PCHRONICLE_BENCH_GIT_FILES", 10_000);
    let record = br#"{"id":"r-0000000001","session":"bench","ts":"2026-11-30T10:00:00Z","role":"assistant","content":"ran the tests, 3 passed"}"#;
    println!("append one record inside a git work tree (median / p99 of 2,000 appends)");
    for scale in [1, 10] {
        let count = files * scale;
        let repo = dir.join(format!("git-{count}"));
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"], b"");
        // An index of `count` files (one empty blob), committed.
        git(&repo, &["hash-object", "-w", "--stdin"], b"");
        let mut entries = Vec::new();
        for i in 0..count {
            writeln!(
                entries,
                "100644 e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\tsrc/m{:03}/f{i:07}.txt",
                i % 1000
            )
            .unwrap();
        }
        git(&repo, &["update-index", "--index-info"], &entries);
        git(&repo, &["commit", "-q", "-m", "files"], b"");
        let index = repo.join(".git/index");
        let index_len = fs::metadata(&index).unwrap().len();
        let store = repo.join("records/journal");
        let (native, _) = bare_appends(&repo.join("native.jsonl"), record);
        let mut writer = Writer::open(&store, "bench", ShardFormat::Line).unwrap();
        for _ in 0..50 {
            writer.append(record).unwrap();
        }
        std::thread::sleep(Duration::from_millis(30));
        writer.append(record).unwrap();
        let before = bytes_read();
        let (median, p99) = percentiles(2_000, || {
            writer.append(record).unwrap();
        });
        let steady = (bytes_read() - before) as f64 / 2_000.0;
        // git rewrote the index before every append (as `git add` of
        // another file would): the index is searched each time.
        let mut searched_bytes = 0;
        let mut times = Vec::with_capacity(200);
        for i in 0..200u64 {
            let later = std::time::SystemTime::now() + Duration::from_secs(i + 1);
            fs::File::options()
                .write(true)
                .open(&index)
                .unwrap()
                .set_modified(later)
                .unwrap();
            let before = bytes_read();
            times.push(timed(|| {
                writer.append(record).unwrap();
            }));
            searched_bytes += bytes_read() - before;
        }
        times.sort();
        println!(
            "  {count} files in git's index ({index_len} bytes): append {:.3} / {:.3} ms, ratio to bare write {:.1}x (goal: median <= 0.1 ms); {steady:.0} bytes of git files read per append",
            ms(median),
            ms(p99),
            median.as_secs_f64() / native.as_secs_f64()
        );
        println!(
            "    index rewritten before every append: {:.3} ms median, {} bytes of git files read per append",
            ms(times[times.len() / 2]),
            searched_bytes / 200
        );
    }
}

fn bench_load_store(dir: &Path) {
    use pchronicle::shards::{ShardFormat, append_records};
    println!("load every record of a record store (median of 5)");
    for scale in [1usize, 10] {
        // The shape of a real store: 89 shards holding 1,146 records at 1x.
        let store = dir.join(format!("load-{scale}x"));
        let (files, records_per) = (89 * scale, 13);
        let mut total = 0;
        for f in 0..files {
            let records: Vec<String> = (0..records_per)
                .map(|i| {
                    format!(r#"{{"id":"s{f}-{i}","session":"s{f}","ts":"2026-11-30T10:00:{:02}Z","kind":"decision","text":"record {i} of session {f}"}}"#, i % 60)
                })
                .collect();
            let refs: Vec<&[u8]> = records.iter().map(|r| r.as_bytes()).collect();
            let format = if f % 2 == 0 {
                ShardFormat::Line
            } else {
                ShardFormat::Packed
            };
            append_records(&store, &format!("s{f}"), &refs, format).unwrap();
            total += records_per;
        }
        let shards: Vec<_> = fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        let native = median(5, || {
            let bytes: usize = shards.iter().map(|p| fs::read(p).unwrap().len()).sum();
            assert!(bytes > 0);
        });
        let parsed = median(5, || {
            let mut n = 0;
            for path in &shards {
                let bytes = fs::read(path).unwrap();
                for segment in bytes.split(|b| *b == b'\n' || *b == 0x1e) {
                    if !segment.trim_ascii().is_empty() {
                        serde_json::from_slice::<serde_json::Value>(segment).unwrap();
                        n += 1;
                    }
                }
            }
            assert_eq!(n, total);
        });
        let counted = median(5, || {
            let catalog = Catalog::new(&store, CatalogOptions::default()).unwrap();
            assert_eq!(
                catalog.stats(Path::new(".")).unwrap().record_count,
                total as u64
            );
        });
        println!("  {scale}x: {total} records in {files} shards (half line, half packed)");
        print_against_native(
            "read the bytes",
            native,
            &[
                ("parse every record", parsed),
                ("stats, cold catalog", counted),
            ],
        );
    }
}
