//! compact-jsonl leaves on Lance: import, publish, repair, classification,
//! and interoperability with other Lance clients.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, BooleanArray, LargeStringArray, RecordBatch, RecordBatchIterator, StringArray,
    UInt64Array,
};
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use pchronicle::catalog::{Catalog, CatalogOptions, Entry, NodeKind, StatsOrigin};
use pchronicle::error::ErrorCode;
use pchronicle::store::compact::{self, CompactJsonlStore, ImportMode};
use pchronicle::store::manifest;
use pchronicle::store::{LeafStore, Stores, StorylineStore};

use crate::support::{Warehouse, jsonl, lance_runtime, pchronicle, scan_all, stdout};

/// A catalog whose compact-jsonl store is `store`, so tests can count its
/// dataset opens.
fn catalog(w: &Warehouse, store: &Arc<CompactJsonlStore>) -> Catalog {
    let stores = Stores::empty()
        .with(Arc::new(StorylineStore))
        .with(Arc::clone(store) as Arc<dyn LeafStore>);
    Catalog::with_stores(w.path(), CatalogOptions::default(), stores).unwrap()
}

/// A record over the 200-byte offload threshold the tests use.
fn big_record() -> String {
    format!(
        "{{\"id\":\"big\",\"ts\":5,\"pad\":\"{}\"}}",
        "z".repeat(400)
    )
}

/// Valid, torn and oversized records.
fn mixed_records() -> String {
    let big = big_record();
    format!(
        "{}{{\"id\":7,\"torn\":\n{big}\n\u{1e}{{\"timestamp\":\"2026-02-03T04:05:06Z\"}}\u{1e}\nnot json at all\n",
        jsonl(20, 1_767_225_600)
    )
}

fn read_rows(dir: &Path) -> Vec<RecordBatch> {
    let rt = lance_runtime();
    let dataset = rt.block_on(Dataset::open(dir.to_str().unwrap())).unwrap();
    scan_all(&rt, &dataset)
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> &'a T {
    batch
        .column_by_name(name)
        .unwrap()
        .as_any()
        .downcast_ref::<T>()
        .unwrap()
}

#[test]
fn import_agrees_with_manifest_ls_stats_and_a_direct_scan() {
    let w = Warehouse::new();
    w.file("src/a.jsonl", mixed_records());
    let store = CompactJsonlStore::default().with_offload_threshold(200);
    let report = store
        .import_path(&w.abs("src"), &w.abs("leaf"), ImportMode::Create)
        .unwrap();
    assert_eq!((report.imported_records, report.imported_failed), (24, 2));
    assert_eq!(report.offloaded_records, 1);
    assert_eq!(report.version, 1);
    assert_eq!(report.fingerprint, "lance:version:1");

    let written = manifest::read_at(&w.abs("leaf")).unwrap().unwrap();
    let stats = written.stats.unwrap();
    assert_eq!((stats.record_count, stats.failed_count), (24, 2));
    assert_eq!(written.fingerprint.as_deref(), Some("lance:version:1"));

    let rows = read_rows(&w.abs("leaf"));
    let total: usize = rows.iter().map(RecordBatch::num_rows).sum();
    let failed: usize = rows
        .iter()
        .map(|b| column::<BooleanArray>(b, "failed").true_count())
        .sum();
    assert_eq!((total, failed), (24, 2));

    let ls: serde_json::Value = serde_json::from_str(&stdout(&pchronicle(&[
        "ls",
        "--json",
        w.path().to_str().unwrap(),
    ])))
    .unwrap();
    let leaf = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "leaf")
        .unwrap();
    assert_eq!(
        (
            leaf["kind"].as_str(),
            leaf["record_count"].as_u64(),
            leaf["failed_count"].as_u64()
        ),
        (Some("dataset"), Some(24), Some(2))
    );
    assert_eq!(leaf["stats_origin"], "manifest");
    let st: serde_json::Value = serde_json::from_str(&stdout(&pchronicle(&[
        "stats",
        "--json",
        w.abs("leaf").to_str().unwrap(),
    ])))
    .unwrap();
    assert_eq!(
        (st["record_count"].as_u64(), st["failed_count"].as_u64()),
        (Some(24), Some(2))
    );
    assert_eq!(st["min_timestamp"], "1970-01-01T00:00:05Z");
    assert_eq!(st["max_timestamp"], "2026-02-03T04:05:06Z");
}

#[test]
fn rows_keep_file_line_id_raw_text_and_offloaded_bytes() {
    let w = Warehouse::new();
    w.file("src/x/a.jsonl", mixed_records())
        .file("src/b.json", "[{\"id\":\"j1\"},{\"id\":\"j2\"}]");
    let store = CompactJsonlStore::default().with_offload_threshold(200);
    store
        .import_path(&w.abs("src"), &w.abs("leaf"), ImportMode::Create)
        .unwrap();
    let rows = read_rows(&w.abs("leaf"));
    let mut seen = Vec::new();
    for batch in &rows {
        let file = column::<StringArray>(batch, "_file_");
        let line = column::<UInt64Array>(batch, "line");
        let id = column::<StringArray>(batch, "record_id");
        let failed = column::<BooleanArray>(batch, "failed");
        let record = column::<LargeStringArray>(batch, "record");
        let sha = column::<StringArray>(batch, "offload_sha256");
        for i in 0..batch.num_rows() {
            seen.push((
                file.value(i).to_string(),
                line.value(i),
                (!id.is_null(i)).then(|| id.value(i).to_string()),
                failed.value(i),
                (!record.is_null(i)).then(|| record.value(i).to_string()),
                (!sha.is_null(i)).then(|| sha.value(i).to_string()),
            ));
        }
    }
    seen.sort();
    assert_eq!(seen.len(), 26);
    assert_eq!(seen[0].0, "b.json");
    assert_eq!(seen[0].2.as_deref(), Some("j1"));
    let first = seen
        .iter()
        .find(|r| r.0 == "x/a.jsonl" && r.1 == 1)
        .unwrap();
    assert_eq!(first.2.as_deref(), Some("r0"));
    let torn = seen
        .iter()
        .find(|r| r.0 == "x/a.jsonl" && r.1 == 21)
        .unwrap();
    assert!(torn.3, "the torn record is failed");
    assert_eq!(
        torn.4.as_deref(),
        Some("{\"id\":7,\"torn\":"),
        "and its raw text is kept"
    );
    let big = seen.iter().find(|r| r.2.as_deref() == Some("big")).unwrap();
    assert_eq!(big.4, None);
    let sha = big.5.clone().unwrap();
    let offloaded =
        std::fs::read_to_string(w.abs(&format!("leaf/{}/{sha}.json", compact::OFFLOAD_DIR)))
            .unwrap();
    assert_eq!(offloaded, big_record());
}

#[test]
fn import_modes() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(5, 0)).file("b.jsonl", jsonl(3, 0));
    let store = CompactJsonlStore::default();
    store
        .import_path(&w.abs("a.jsonl"), &w.abs("leaf"), ImportMode::Create)
        .unwrap();
    let again = store
        .import_path(&w.abs("a.jsonl"), &w.abs("leaf"), ImportMode::Create)
        .unwrap_err();
    assert_eq!(again.code, ErrorCode::ImportDestinationExists);
    let missing = store
        .import_path(&w.abs("a.jsonl"), &w.abs("nowhere"), ImportMode::Append)
        .unwrap_err();
    assert_eq!(missing.code, ErrorCode::ImportDestinationMissing);
    let appended = store
        .import_path(&w.abs("b.jsonl"), &w.abs("leaf"), ImportMode::Append)
        .unwrap();
    assert_eq!(
        (
            appended.version,
            appended.record_count,
            appended.imported_records
        ),
        (2, 8, 3)
    );
    let replaced = store
        .import_path(&w.abs("b.jsonl"), &w.abs("leaf"), ImportMode::Overwrite)
        .unwrap();
    assert_eq!((replaced.version, replaced.record_count), (3, 3));
    let not_records = store
        .import_path(
            &w.abs("leaf/chronicle.manifest"),
            &w.abs("x"),
            ImportMode::Create,
        )
        .unwrap_err();
    assert_eq!(not_records.code, ErrorCode::ImportSource);
}

#[test]
fn failed_manifest_write_fails_the_import() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(2, 0))
        .dir("leaf/chronicle.manifest/blocker");
    let err = CompactJsonlStore::default()
        .import_path(&w.abs("a.jsonl"), &w.abs("leaf"), ImportMode::Create)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ImportManifest);
}

#[test]
fn cli_import_prints_the_report() {
    let w = Warehouse::new();
    w.file("a.ndjson", jsonl(4, 0));
    let out = stdout(&pchronicle(&[
        "import",
        "--json",
        w.abs("a.ndjson").to_str().unwrap(),
        w.abs("leaf").to_str().unwrap(),
    ]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["version"], 1);
    assert_eq!(report["record_count"], 4);
    assert_eq!(report["mode"], "create");
    let again = pchronicle(&[
        "import",
        w.abs("a.ndjson").to_str().unwrap(),
        w.abs("leaf").to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .starts_with("error[PCHRONICLE_IMPORT_DESTINATION_EXISTS]")
    );
}

/// A thousand copies of one imported leaf, each with a trusted manifest.
fn many_leaves(w: &Warehouse, count: usize) {
    w.file("src.jsonl", jsonl(10, 0));
    CompactJsonlStore::default()
        .import_path(
            &w.abs("src.jsonl"),
            &w.abs("leaves/l0000"),
            ImportMode::Create,
        )
        .unwrap();
    for i in 1..count {
        let status = std::process::Command::new("cp")
            .args([
                "-r",
                w.abs("leaves/l0000").to_str().unwrap(),
                w.abs(&format!("leaves/l{i:04}")).to_str().unwrap(),
            ])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

#[test]
fn listing_trusted_leaves_opens_no_dataset() {
    let w = Warehouse::new();
    many_leaves(&w, 1000);
    let store = Arc::new(CompactJsonlStore::default());
    let catalog = catalog(&w, &store);
    let listing = catalog.list(Path::new("leaves")).unwrap();
    assert_eq!(listing.entries.len(), 1000);
    assert!(listing.entries.iter().all(|e| matches!(e, Entry::Dataset { preview, .. } if preview.stats_origin == StatsOrigin::Manifest && preview.counts.record_count == Some(10))));
    assert_eq!(
        catalog.stats(Path::new("leaves")).unwrap().record_count,
        10_000
    );
    assert_eq!(store.dataset_opens(), 0);
}

#[test]
fn deleted_and_stale_manifests_are_repaired_on_the_next_ls_corrupt_ones_kept() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(6, 0)).file("b.jsonl", jsonl(4, 0));
    let store = Arc::new(CompactJsonlStore::default());
    store
        .import_path(&w.abs("a.jsonl"), &w.abs("leaf"), ImportMode::Create)
        .unwrap();
    let stale = std::fs::read(w.abs("leaf/chronicle.manifest")).unwrap();
    store
        .import_path(&w.abs("b.jsonl"), &w.abs("leaf"), ImportMode::Append)
        .unwrap();
    let corrupt: &[u8] = b"schema_version = [[[";
    let cases: [(&str, Option<&[u8]>); 3] = [
        ("deleted", None),
        ("corrupt", Some(corrupt)),
        ("stale", Some(&stale)),
    ];
    for (name, content) in cases {
        match content {
            None => std::fs::remove_file(w.abs("leaf/chronicle.manifest")).unwrap(),
            Some(bytes) => std::fs::write(w.abs("leaf/chronicle.manifest"), bytes).unwrap(),
        }
        let listing = catalog(&w, &store).list(Path::new(".")).unwrap();
        let leaf = listing.entries.iter().find(|e| e.name() == "leaf").unwrap();
        let Entry::Dataset { preview, .. } = leaf else {
            panic!("{name}: leaf is a dataset")
        };
        assert_eq!(preview.counts.record_count, Some(10), "{name}");
        if name == "corrupt" {
            // Counted from the data; the manifest is never rewritten.
            assert_eq!(preview.stats_origin, StatsOrigin::Scan, "{name}");
            let kept = std::fs::read(w.abs("leaf/chronicle.manifest")).unwrap();
            assert_eq!(kept, corrupt, "{name}");
            continue;
        }
        assert_eq!(preview.stats_origin, StatsOrigin::Repaired, "{name}");
        let repaired = manifest::read_at(&w.abs("leaf")).unwrap().unwrap();
        assert_eq!(
            repaired.fingerprint.as_deref(),
            Some("lance:version:2"),
            "{name}"
        );
        assert_eq!(repaired.stats.unwrap().record_count, 10, "{name}");
    }
}

#[test]
fn a_concurrent_reader_never_sees_a_partial_manifest() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(6, 0));
    let store = Arc::new(CompactJsonlStore::default());
    store
        .import_path(&w.abs("a.jsonl"), &w.abs("leaf"), ImportMode::Create)
        .unwrap();
    let path = w.abs("leaf/chronicle.manifest");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (path, stop) = (path.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    let parsed = manifest::Manifest::parse(&text);
                    assert!(parsed.is_ok(), "a reader saw a partial manifest: {text:?}");
                    reads += 1;
                }
            }
            reads
        })
    };
    let leaf = w.abs("leaf");
    for _ in 0..200 {
        // Make the manifest stale without touching its bytes in place, then
        // let the store repair it.
        let mut m = manifest::read_at(&leaf).unwrap().unwrap();
        m.set_leaf_state("lance:version:0", m.stats.unwrap());
        m.write_at(&leaf).unwrap();
        store
            .ensure_manifest(
                &pchronicle::warehouse::Dir::open_root(&leaf).unwrap(),
                &pchronicle::store::DirectCounter,
            )
            .unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

/// Writes a compact-jsonl dataset as another Lance client would: the schema
/// and its metadata, no chronicle.manifest.
fn foreign_dataset(dir: &Path, rows: u64, with_marker: bool) {
    let mut schema = compact::schema();
    if !with_marker {
        schema.metadata.clear();
    }
    let schema = Arc::new(schema);
    let n = rows as usize;
    let columns: Vec<Arc<dyn Array>> = vec![
        Arc::new(StringArray::from(vec!["f.jsonl"; n])),
        Arc::new(UInt64Array::from_iter_values(1..=rows)),
        Arc::new(StringArray::from(vec![None::<&str>; n])),
        Arc::new(
            arrow::array::TimestampMicrosecondArray::from(vec![Some(1_000_000i64); n])
                .with_timezone("UTC"),
        ),
        Arc::new(BooleanArray::from(
            (0..n).map(|i| i == 0).collect::<Vec<_>>(),
        )),
        Arc::new(LargeStringArray::from(vec![Some("{}"); n])),
        Arc::new(StringArray::from(vec![None::<&str>; n])),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    let rt = lance_runtime();
    let params = WriteParams {
        mode: WriteMode::Create,
        ..WriteParams::default()
    };
    rt.block_on(Dataset::write(reader, dir.to_str().unwrap(), Some(params)))
        .unwrap();
}

#[test]
fn a_dataset_from_another_client_is_classified_counted_and_backfilled() {
    let w = Warehouse::new();
    foreign_dataset(&w.abs("theirs"), 7, true);
    foreign_dataset(&w.abs("plain_lance"), 3, false);
    let store = Arc::new(CompactJsonlStore::default());
    let catalog = catalog(&w, &store);
    assert_eq!(
        catalog.kind_of(Path::new("theirs")).unwrap(),
        NodeKind::Dataset
    );
    assert_eq!(
        catalog.kind_of(Path::new("plain_lance")).unwrap(),
        NodeKind::Directory,
        "no marker, no leaf"
    );
    let stats = catalog.stats(Path::new("theirs")).unwrap();
    assert_eq!((stats.record_count, stats.failed_count), (7, 1));
    let backfilled = manifest::read_at(&w.abs("theirs")).unwrap().unwrap();
    assert_eq!(backfilled.format.as_deref(), Some(compact::FORMAT));
    assert_eq!(backfilled.fingerprint.as_deref(), Some("lance:version:1"));
    assert_eq!(backfilled.stats.unwrap().record_count, 7);
    assert!(!w.abs("plain_lance/chronicle.manifest").exists());
}

#[test]
fn an_imported_dataset_reads_back_in_plain_lance() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(9, 0));
    CompactJsonlStore::default()
        .import_path(&w.abs("a.jsonl"), &w.abs("leaf"), ImportMode::Create)
        .unwrap();
    let rt = lance_runtime();
    let dataset = rt
        .block_on(Dataset::open(w.abs("leaf").to_str().unwrap()))
        .unwrap();
    assert_eq!(rt.block_on(dataset.count_rows(None)).unwrap(), 9);
    assert_eq!(
        dataset
            .schema()
            .metadata
            .get(compact::FORMAT_METADATA_KEY)
            .map(String::as_str),
        Some(compact::FORMAT)
    );
    let arrow_schema = arrow::datatypes::Schema::from(dataset.schema());
    let expected = compact::schema();
    let names = |s: &arrow::datatypes::Schema| {
        s.fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&arrow_schema), names(&expected));
}

/// `pchronicle tag` of the leaf at `leaf` with `args`.
fn tag(leaf: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["tag", leaf.to_str().unwrap()];
    all.extend_from_slice(args);
    pchronicle(&all)
}

fn code_of(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .find(|w| w.starts_with("PCHRONICLE_"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn tags_name_versions_and_are_listed_and_deleted() {
    let w = Warehouse::new();
    w.file("a.jsonl", jsonl(5, 0)).file("b.jsonl", jsonl(3, 0));
    let store = CompactJsonlStore::default();
    let leaf = w.abs("leaf");
    store
        .import_path(&w.abs("a.jsonl"), &leaf, ImportMode::Create)
        .unwrap();
    for _ in 0..2 {
        store
            .import_path(&w.abs("b.jsonl"), &leaf, ImportMode::Append)
            .unwrap();
    }
    let made: serde_json::Value =
        serde_json::from_str(&stdout(&tag(&leaf, &["first", "--version", "1", "--json"]))).unwrap();
    assert_eq!(
        (made["name"].as_str(), made["version"].as_u64()),
        (Some("first"), Some(1))
    );
    assert!(made["created_at"].as_str().unwrap().ends_with('Z'));
    let newest: serde_json::Value =
        serde_json::from_str(&stdout(&tag(&leaf, &["newest", "--json"]))).unwrap();
    assert_eq!(newest["version"].as_u64(), Some(3));
    // Lance itself sees the tag at that version.
    let runtime = lance_runtime();
    let dataset = runtime
        .block_on(Dataset::open(leaf.to_str().unwrap()))
        .unwrap();
    assert_eq!(
        runtime
            .block_on(dataset.tags().get_version("first"))
            .unwrap(),
        1
    );
    // Refused: a taken name, a version the leaf does not keep, names that
    // are not plain words; none of them leaves a tag behind.
    assert_eq!(code_of(&tag(&leaf, &["first"])), "PCHRONICLE_TAG_EXISTS");
    assert_eq!(
        code_of(&tag(&leaf, &["later", "--version", "9"])),
        "PCHRONICLE_VERSION_NOT_FOUND"
    );
    for bad in ["a/b", "..", "../x", ".hidden", "x..y", "sp ace"] {
        assert_eq!(
            code_of(&tag(&leaf, &[bad])),
            "PCHRONICLE_TAG_INVALID",
            "{bad}"
        );
    }
    let listed = stdout(&tag(&leaf, &["--list", "--json"]));
    let listed: Vec<(String, u64)> = listed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [("first".to_string(), 1), ("newest".to_string(), 3)]
    );
    // Deleting a tag leaves its version.
    let deleted: serde_json::Value =
        serde_json::from_str(&stdout(&tag(&leaf, &["first", "--delete", "--json"]))).unwrap();
    assert_eq!(deleted["version"].as_u64(), Some(1));
    assert_eq!(
        code_of(&tag(&leaf, &["first", "--delete"])),
        "PCHRONICLE_TAG_NOT_FOUND"
    );
    let again = stdout(&tag(&leaf, &["again", "--version", "1"]));
    assert!(again.contains("version 1"), "{again}");
    // A leaf reached through a symlink is not written through it.
    std::os::unix::fs::symlink(&leaf, w.abs("link")).unwrap();
    assert_eq!(
        code_of(&tag(&w.abs("link"), &["through-link"])),
        "PCHRONICLE_NOT_COMPACT_JSONL"
    );
    // Not a compact-jsonl leaf; a remote one is never written.
    assert_eq!(
        code_of(&tag(&w.abs("."), &["x"])),
        "PCHRONICLE_NOT_COMPACT_JSONL"
    );
    assert_eq!(
        code_of(&tag(Path::new("s3://bucket/leaf"), &["x"])),
        "PCHRONICLE_REMOTE_READ_ONLY"
    );
}
