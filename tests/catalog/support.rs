//! Test helpers: a temporary warehouse builder, a stand-in compact-jsonl
//! store, and a runner for the real binary.

use std::fs;
use std::ops::ControlFlow;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pchronicle::catalog::{Catalog, CatalogOptions};
use pchronicle::error::{Error, ErrorCode, Result};
use pchronicle::records::read::{self, RecordSink, Resume, Wanted};
use pchronicle::records::{RecordFormat, RecordStats};
use pchronicle::store::manifest::Manifest;
use pchronicle::store::{LeafScan, LeafStore, RecordCounter, Stores, StorylineStore};
use pchronicle::warehouse::Dir;

/// `n` JSON Lines records with epoch-second timestamps from `first_ts`.
pub fn jsonl(n: usize, first_ts: i64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"id\":\"r{i}\",\"ts\":{},\"text\":\"hello\"}}\n",
                first_ts + i as i64
            )
        })
        .collect()
}

/// A warehouse in a temporary directory, built step by step.
pub struct Warehouse {
    dir: tempfile::TempDir,
}

impl Warehouse {
    pub fn new() -> Self {
        Warehouse {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn abs(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> &Self {
        let path = self.abs(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
        self
    }

    /// Appends `content` to the file `rel`, in place.
    pub fn file_append(&self, rel: &str, content: &str) {
        use std::io::Write;
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(self.abs(rel))
            .unwrap();
        file.write_all(content.as_bytes()).unwrap();
    }

    pub fn dir(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.abs(rel)).unwrap();
        self
    }

    pub fn symlink(&self, target: &str, rel: &str) -> &Self {
        let path = self.abs(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
        self
    }

    /// A FIFO at `rel`: opening it for reading blocks until a writer comes.
    pub fn fifo(&self, rel: &str) -> &Self {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            self.abs(rel),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o666),
            0,
        )
        .unwrap();
        self
    }

    /// Exchanges the entries `a` and `b` of the directory `rel` atomically
    /// (`renameat2(RENAME_EXCHANGE)`), again and again until `stop` is set;
    /// the thread returns how many swaps it made.
    pub fn swapper(
        &self,
        rel: &str,
        stop: &Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<u64> {
        let (dir, stop) = (self.abs(rel), Arc::clone(stop));
        std::thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    dir.join("a"),
                    rustix::fs::CWD,
                    dir.join("b"),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    }

    pub fn manifest(&self, rel: &str, text: &str) -> &Self {
        self.file(&format!("{rel}/chronicle.manifest"), text)
    }

    pub fn branch(&self, rel: &str) -> &Self {
        self.manifest(rel, "schema_version = 1\nkind = \"branch\"\n")
    }

    /// A storyline leaf whose current generation `g2` holds `records`
    /// records (and an older `g1` that must never be counted).
    pub fn storyline(&self, rel: &str, records: usize) -> &Self {
        self.file(&format!("{rel}/generations/g1/old.jsonl"), jsonl(99, 0));
        self.file(
            &format!("{rel}/generations/g2/part-0.jsonl"),
            jsonl(records, 1_767_225_600),
        );
        self.file(&format!("{rel}/CURRENT"), "g2\n")
    }

    /// A compact-jsonl-shaped leaf at Lance version `version` holding
    /// `records` rows, with a trusted manifest. Its "Lance interior" is a
    /// stand-in: `_versions/<N>.manifest`, `data/`, and the rows as JSONL in
    /// `data/rows.jsonl` for [`FakeCompactStore`] to count.
    pub fn compact(&self, rel: &str, version: u64, records: usize) -> &Self {
        self.compact_without_manifest(rel, version, records);
        let stats = RecordStats {
            record_count: records as u64,
            ..RecordStats::default()
        };
        Manifest::leaf(
            "compact-jsonl/v1",
            &format!("lance:version:{version}"),
            stats,
        )
        .write_at(&self.abs(rel))
        .unwrap();
        self
    }

    pub fn compact_without_manifest(&self, rel: &str, version: u64, records: usize) -> &Self {
        self.file(&format!("{rel}/_versions/{version}.manifest"), b"lance");
        self.file(&format!("{rel}/_versions/.format"), "compact-jsonl/v1");
        self.file(&format!("{rel}/data/rows.jsonl"), jsonl(records, 0));
        self.dir(&format!("{rel}/_offload"))
    }

    /// A catalog with the default stores (no compact-jsonl store).
    pub fn catalog(&self) -> Catalog {
        Catalog::new(self.path(), CatalogOptions::default()).unwrap()
    }

    pub fn catalog_with(&self, options: CatalogOptions) -> Catalog {
        Catalog::new(self.path(), options).unwrap()
    }

    /// A catalog whose stores include the stand-in compact-jsonl store.
    pub fn catalog_with_compact(&self, store: &Arc<FakeCompactStore>) -> Catalog {
        let stores = Stores::empty()
            .with(Arc::new(StorylineStore))
            .with(Arc::clone(store) as Arc<dyn LeafStore>);
        Catalog::with_stores(self.path(), CatalogOptions::default(), stores).unwrap()
    }

    /// Every file outside `except` with its bytes, to show writes stayed put.
    pub fn snapshot_files(&self, except: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.path().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.starts_with(self.abs(except)) {
                    continue;
                }
                let meta = fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path);
                } else if meta.is_file() {
                    out.push((path.clone(), fs::read(&path).unwrap()));
                }
            }
        }
        out.sort();
        out
    }
}

/// A stand-in for the Lance-backed compact-jsonl store: same format, same
/// `_versions/` marker and fingerprint shape, but it counts `data/rows.jsonl`
/// and records how often it was asked to open the data.
#[derive(Default)]
pub struct FakeCompactStore {
    pub scans: AtomicUsize,
    pub detects: AtomicUsize,
    /// Leaves whose records were read.
    pub reads: AtomicUsize,
}

impl FakeCompactStore {
    pub fn scans(&self) -> usize {
        self.scans.load(Ordering::SeqCst)
    }
}

impl LeafStore for FakeCompactStore {
    fn format(&self) -> &'static str {
        "compact-jsonl/v1"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["_versions"]
    }

    fn detect(&self, dir: &Dir) -> Result<bool> {
        self.detects.fetch_add(1, Ordering::SeqCst);
        let format = dir
            .open_dir("_versions")
            .ok()
            .and_then(|versions| versions.read_capped(".format", 64).ok().flatten());
        Ok(format.is_some_and(|(bytes, _)| bytes == b"compact-jsonl/v1"))
    }

    fn fingerprint(&self, dir: &Dir) -> Result<String> {
        let path = dir.path().join("_versions");
        let latest = dir
            .open_dir("_versions")
            .and_then(|versions| versions.entries())
            .map_err(|e| Error::io(&path, &e))?
            .into_iter()
            .filter_map(|e| {
                std::str::from_utf8(&e.name)
                    .ok()?
                    .strip_suffix(".manifest")?
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .ok_or_else(|| Error::at(ErrorCode::Io, &path, "no versions"))?;
        Ok(format!("lance:version:{latest}"))
    }

    fn read_records(
        &self,
        dir: &Dir,
        _fingerprint: Option<&str>,
        from: Resume,
        _wanted: &Wanted,
        sink: &mut dyn RecordSink,
    ) -> Result<ControlFlow<()>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let rows = dir.path().join("data/rows.jsonl");
        dir.open_dir("data")
            .and_then(|data| data.open_file("rows.jsonl"))
            .and_then(|(file, _)| {
                read::read_file(&file, RecordFormat::Jsonl, "rows.jsonl", from, None, sink)
            })
            .map_err(|e| Error::io(&rows, &e))
    }

    fn scan(&self, dir: &Dir, counter: &dyn RecordCounter) -> Result<LeafScan> {
        self.scans.fetch_add(1, Ordering::SeqCst);
        let rows = dir.path().join("data/rows.jsonl");
        let stats = dir
            .open_dir("data")
            .and_then(|data| counter.count(&data, "rows.jsonl", RecordFormat::Jsonl))
            .map_err(|e| Error::io(&rows, &e))?;
        Ok(LeafScan {
            fingerprint: self.fingerprint(dir)?,
            stats,
        })
    }
}

/// Runs the real `pchronicle` binary.
pub fn pchronicle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("the pchronicle binary runs")
}

pub fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "pchronicle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// A runtime for driving Lance directly in a test.
#[cfg(feature = "compact-jsonl")]
pub fn lance_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Every row of a Lance dataset, by a full scan.
#[cfg(feature = "compact-jsonl")]
pub fn scan_all(
    rt: &tokio::runtime::Runtime,
    dataset: &lance::Dataset,
) -> Vec<arrow::array::RecordBatch> {
    use futures::TryStreamExt;
    rt.block_on(async {
        let stream = dataset
            .scan()
            .try_into_stream()
            .await
            .expect("a scan starts");
        stream.try_collect().await.expect("a scan completes")
    })
}

/// The leaf `wh/leaf` of `w`, synced from `src/` five times: versions
/// 1 to 5 hold 3, 5, 6, 6 and 8 records, the tag `before-eval` names
/// version 3 (whose records have `ts` 20 to 33, none of 40 or later).
#[cfg(feature = "compact-jsonl")]
pub fn five_versions(w: &Warehouse) -> PathBuf {
    use pchronicle::store::compact::CompactJsonlStore;
    let (source, dest) = (w.abs("src"), w.abs("wh/leaf"));
    let store = CompactJsonlStore::default();
    w.file("src/a.jsonl", jsonl(3, 0));
    store.sync_path(&source, &dest, false).unwrap();
    w.file_append("src/a.jsonl", &jsonl(2, 10));
    store.sync_path(&source, &dest, false).unwrap();
    w.file("src/a.jsonl", jsonl(2, 20))
        .file("src/b.jsonl", jsonl(4, 30));
    store.sync_path(&source, &dest, false).unwrap();
    store.create_tag(&dest, "before-eval", None).unwrap();
    fs::remove_file(w.abs("src/b.jsonl")).unwrap();
    w.file("src/c.jsonl", jsonl(4, 40));
    store.sync_path(&source, &dest, false).unwrap();
    w.file_append("src/c.jsonl", &jsonl(2, 50));
    store.sync_path(&source, &dest, false).unwrap();
    dest
}

/// The records each of [`five_versions`]' versions holds.
pub const FIVE_VERSIONS: [(u64, u64); 5] = [(1, 3), (2, 5), (3, 6), (4, 6), (5, 8)];

/// Sleeps past the refresh cache's racy window so identities settle.
pub fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(1_100));
}
