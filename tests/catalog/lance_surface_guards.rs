//! Guards: one test per Lance behaviour pchronicle relies on. A guard that
//! fails after a Lance version bump means the design must be reviewed
//! (docs/lance.md says what each fence protects); it is not a test to relax.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch, RecordBatchIterator, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use pchronicle::store::compact::versions::{VERSIONS_DIR, latest_version, version_of};
use pchronicle::store::compact::{DATA_STORAGE_VERSION, FORMAT, FORMAT_METADATA_KEY};

use crate::support::{lance_runtime, scan_all};

fn marked_schema() -> Arc<Schema> {
    let fields = vec![
        Field::new("n", DataType::UInt64, false),
        Field::new("failed", DataType::Boolean, false),
    ];
    let metadata = [(FORMAT_METADATA_KEY.to_string(), FORMAT.to_string())].into();
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

fn batch(schema: &Arc<Schema>, rows: std::ops::Range<u64>) -> RecordBatch {
    let n: UInt64Array = rows.clone().collect();
    let failed: BooleanArray = rows.map(|i| Some(i % 3 == 0)).collect();
    RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(n), Arc::new(failed)]).unwrap()
}

fn write(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    rows: std::ops::Range<u64>,
    mode: WriteMode,
    v2_names: bool,
) -> Dataset {
    let schema = marked_schema();
    let reader = RecordBatchIterator::new(vec![Ok(batch(&schema, rows))], schema);
    let params = WriteParams {
        mode,
        data_storage_version: Some(DATA_STORAGE_VERSION),
        enable_v2_manifest_paths: v2_names,
        ..WriteParams::default()
    };
    rt.block_on(Dataset::write(reader, dir.to_str().unwrap(), Some(params)))
        .unwrap()
}

fn open(rt: &tokio::runtime::Runtime, dir: &Path) -> Dataset {
    rt.block_on(Dataset::open(dir.to_str().unwrap())).unwrap()
}

#[test]
fn schema_metadata_survives_append_and_overwrite() {
    let rt = lance_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    write(&rt, &path, 0..10, WriteMode::Create, true);
    for mode in [WriteMode::Append, WriteMode::Overwrite, WriteMode::Append] {
        write(&rt, &path, 0..5, mode, true);
        let dataset = open(&rt, &path);
        let marker = dataset.schema().metadata.get(FORMAT_METADATA_KEY);
        assert_eq!(marker.map(String::as_str), Some(FORMAT), "after {mode:?}");
    }
}

#[test]
fn one_commit_makes_exactly_one_new_version() {
    let rt = lance_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let modes = [
        WriteMode::Create,
        WriteMode::Append,
        WriteMode::Overwrite,
        WriteMode::Append,
    ];
    for (expected, mode) in (1u64..).zip(modes) {
        let dataset = write(&rt, &path, 0..4, mode, true);
        assert_eq!(dataset.version().version, expected, "{mode:?}");
        let manifests = std::fs::read_dir(path.join(VERSIONS_DIR))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_str()
                    .and_then(version_of)
                    .is_some()
            })
            .count();
        assert_eq!(
            manifests as u64, expected,
            "one manifest per version after {mode:?}"
        );
    }
}

#[test]
fn versions_dir_names_give_the_latest_version_in_both_schemes() {
    let rt = lance_runtime();
    for v2_names in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        for (i, mode) in [WriteMode::Create, WriteMode::Append, WriteMode::Append]
            .into_iter()
            .enumerate()
        {
            let dataset = write(&rt, &path, 0..3, mode, v2_names);
            assert_eq!(
                latest_version(&path).unwrap(),
                dataset.version().version,
                "v2 names: {v2_names}"
            );
            assert_eq!(dataset.version().version, i as u64 + 1);
        }
        let names: Vec<String> = std::fs::read_dir(path.join(VERSIONS_DIR))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".manifest"))
            .collect();
        let twenty_digit = names.iter().all(|n| n.len() == 20 + ".manifest".len());
        assert_eq!(twenty_digit, v2_names, "naming scheme of {names:?}");
    }
}

#[test]
fn row_count_from_metadata_equals_a_full_scan() {
    let rt = lance_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    write(&rt, &path, 0..1000, WriteMode::Create, true);
    write(&rt, &path, 0..234, WriteMode::Append, true);
    let dataset = open(&rt, &path);
    let counted = rt.block_on(dataset.count_rows(None)).unwrap();
    let scanned: usize = scan_all(&rt, &dataset)
        .iter()
        .map(RecordBatch::num_rows)
        .sum();
    assert_eq!(counted, 1234);
    assert_eq!(counted, scanned);
}

#[test]
fn the_selected_data_storage_version_is_what_gets_written() {
    let rt = lance_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    write(&rt, &path, 0..10, WriteMode::Create, true);
    write(&rt, &path, 0..10, WriteMode::Append, true);
    let dataset = open(&rt, &path);
    assert_eq!(
        dataset.manifest().data_storage_format.version,
        DATA_STORAGE_VERSION.resolve()
    );
    assert_ne!(
        DATA_STORAGE_VERSION,
        lance_file::version::LanceFileVersion::default(),
        "pchronicle pins its storage version explicitly rather than following the library default"
    );
}

#[test]
fn row_count_reads_no_data_file() {
    let rt = lance_runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    write(&rt, &path, 0..1000, WriteMode::Create, true);
    write(&rt, &path, 0..234, WriteMode::Append, true);
    // Every data file gone: whatever reads one fails from here on.
    let data = path.join("data");
    let files: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!files.is_empty());
    for file in &files {
        std::fs::remove_file(file).unwrap();
    }
    let dataset = open(&rt, &path);
    assert_eq!(rt.block_on(dataset.count_rows(None)).unwrap(), 1234);
    let scan = rt.block_on(async {
        use futures::TryStreamExt;
        dataset
            .scan()
            .try_into_stream()
            .await?
            .try_collect::<Vec<_>>()
            .await
    });
    assert!(scan.is_err(), "a scan does need the data files");
}

#[test]
fn an_import_writes_the_pinned_data_storage_version() {
    use pchronicle::store::compact::{CompactJsonlStore, ImportMode};
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("a.jsonl");
    std::fs::write(&source, crate::support::jsonl(30, 0)).unwrap();
    let leaf = dir.path().join("leaf");
    let store = CompactJsonlStore::default();
    store
        .import_path(&source, &leaf, ImportMode::Create)
        .unwrap();
    store
        .import_path(&source, &leaf, ImportMode::Append)
        .unwrap();
    let rt = lance_runtime();
    let dataset = open(&rt, &leaf);
    assert_eq!(dataset.version().version, 2);
    assert_eq!(
        dataset.manifest().data_storage_format.version,
        DATA_STORAGE_VERSION.resolve(),
        "the import path writes the storage version pchronicle pins"
    );
    assert_ne!(
        DATA_STORAGE_VERSION.resolve(),
        lance_file::version::LanceFileVersion::default().resolve(),
        "the pin differs from the library default, so this test can tell them apart"
    );
}

#[test]
fn the_record_column_is_written_with_the_chosen_compression() {
    use pchronicle::store::compact::{
        COMPRESSION_KEY, CompactJsonlStore, ImportMode, RECORD_COMPRESSION,
    };
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("a.jsonl");
    // Records that compress well under any general-purpose codec.
    let line = format!(
        "{{\"role\":\"tool\",\"content\":\"{}\"}}\n",
        "ok ".repeat(300)
    );
    let text = line.repeat(2_000);
    std::fs::write(&source, &text).unwrap();
    let leaf = dir.path().join("leaf");
    let store = CompactJsonlStore::default();
    store
        .import_path(&source, &leaf, ImportMode::Create)
        .unwrap();
    let rt = lance_runtime();
    let dataset = open(&rt, &leaf);
    let field = dataset.schema().field("record").expect("a record column");
    assert_eq!(
        field.metadata.get(COMPRESSION_KEY).map(String::as_str),
        Some(RECORD_COMPRESSION),
        "the compression asked for is kept with the dataset's schema"
    );
    // And the data is compressed: the data files hold far less than the
    // records.
    let data_bytes: u64 = std::fs::read_dir(leaf.join("data"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        data_bytes * 10 < text.len() as u64,
        "{data_bytes} bytes of data for {} bytes of records",
        text.len()
    );
    // An append with the same schema is accepted, and every record reads
    // back as it was.
    store
        .import_path(&source, &leaf, ImportMode::Append)
        .unwrap();
    let dataset = open(&rt, &leaf);
    let rows: usize = scan_all(&rt, &dataset)
        .iter()
        .map(|batch| {
            let records = batch
                .column_by_name("record")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow::array::LargeStringArray>()
                .unwrap();
            assert!(records.iter().all(|r| r == Some(line.trim_end())));
            batch.num_rows()
        })
        .sum();
    assert_eq!(rows, 4_000);
}

/// The `record` column's page layouts, as Lance wrote them into the first
/// data file of the leaf: the debug text of each page's encoding.
fn record_page_encodings(rt: &tokio::runtime::Runtime, leaf: &Path) -> Vec<String> {
    use lance_io::object_store::ObjectStore;
    use lance_io::scheduler::{ScanScheduler, SchedulerConfig};
    use lance_io::utils::CachedFileSize;
    let data = std::fs::read_dir(leaf.join("data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "lance"))
        .expect("a data file");
    rt.block_on(async {
        let (store, path) = ObjectStore::from_uri(data.to_str().unwrap()).await.unwrap();
        let scheduler = ScanScheduler::new(store, SchedulerConfig::default_for_testing());
        let file = scheduler
            .open_file(&path, &CachedFileSize::unknown())
            .await
            .unwrap();
        let metadata = lance_file::reader::FileReader::read_all_metadata(&file)
            .await
            .unwrap();
        let record = metadata
            .file_schema
            .fields
            .iter()
            .position(|f| f.name == "record")
            .expect("a record column");
        metadata.column_infos[record]
            .page_infos
            .iter()
            .map(|page| format!("{:?}", page.encoding))
            .collect()
    })
}

/// The `record` column asks for FSST, and gets it in pages of short
/// records (mini-block, many records per block) and in pages holding one
/// of 256 bytes or more (full-zip, one value at a time), where Lance
/// honours only some compressions and turns others into a zstd frame per
/// record, slow to read back (docs/performance.md, "Why pylance is slow
/// here"). A page holding a record over 32 KiB is compressed a record at
/// a time whatever is asked: pinned too, as the docs say so.
#[test]
fn the_record_column_is_fsst_in_pages_of_short_and_of_long_records() {
    use pchronicle::store::compact::{CompactJsonlStore, ImportMode, RECORD_COMPRESSION};
    assert_eq!(RECORD_COMPRESSION, "fsst");
    let rt = lance_runtime();
    let dir = tempfile::tempdir().unwrap();
    let store = CompactJsonlStore::default();
    for (name, words) in [("short", 10), ("long", 120), ("huge", 12_000)] {
        let source = dir.path().join(format!("{name}.jsonl"));
        let rows = if name == "huge" { 300 } else { 5_000 };
        let text: String = (0..rows)
            .map(|i| {
                let content: Vec<String> = (0..words)
                    .map(|w| format!("w{}", (i * 7 + w) % 97))
                    .collect();
                format!("{{\"i\":{i},\"content\":\"{}\"}}\n", content.join(" "))
            })
            .collect();
        std::fs::write(&source, &text).unwrap();
        let leaf = dir.path().join(name);
        store
            .import_path(&source, &leaf, ImportMode::Create)
            .unwrap();
        let pages = record_page_encodings(&rt, &leaf);
        assert!(!pages.is_empty());
        let layout = if name == "short" {
            "MiniBlock"
        } else {
            "FullZip"
        };
        let fsst = "value_compression: Some(CompressiveEncoding { compression: Some(Fsst(";
        for page in &pages {
            // What precedes the symbol table (whose bytes are the data's).
            let head = page.split("symbol_table").next().unwrap();
            assert!(
                head.contains(&format!("{layout}Layout")),
                "{name} records: a page is not {layout}: {head}"
            );
            if name == "huge" {
                assert!(
                    !head.contains(fsst) && head.contains("scheme: CompressionAlgorithmZstd"),
                    "{name} records: not zstd per record: {head}"
                );
            } else {
                assert!(head.contains(fsst), "{name} records: not FSST: {head}");
            }
        }
    }
}
