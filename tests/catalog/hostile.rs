//! The warehouse is written by others and read by a root daemon: every
//! attack a hostile writer can make from inside the tree, one test each,
//! against the core (no mount). The mount's side is in
//! `mount-tests/hostile.rs`.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pchronicle::catalog::{Catalog, CatalogOptions, CountCachePlace, NodeKind};
use pchronicle::error::ErrorCode;
use pchronicle::warehouse::Viewer;

use crate::support::{Warehouse, jsonl, settle};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn warning_codes(stats: &pchronicle::catalog::Stats) -> Vec<ErrorCode> {
    stats.warnings.iter().map(|w| w.code).collect()
}

/// Runs `f` on another thread and fails the test if it does not return
/// within `limit` (a hang is the failure, not a stuck test run).
fn finishes_within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

/// Options persisting counts where the daemon would by default.
fn default_cache() -> CatalogOptions {
    CatalogOptions {
        count_cache: CountCachePlace::Default,
        ..CatalogOptions::default()
    }
}

#[test]
fn a_planted_state_symlink_never_receives_the_count_cache() {
    let wh = Warehouse::new();
    wh.file("a.jsonl", jsonl(3, 0));
    let victim = tempfile::tempdir().unwrap();
    wh.dir(".pchronicle");
    wh.symlink(victim.path().to_str().unwrap(), ".pchronicle/cache");
    settle();
    let catalog = wh.catalog_with(default_cache());
    assert_eq!(catalog.stats(Path::new("")).unwrap().record_count, 3);
    let file = catalog.count_cache_file().expect("a persisted cache");
    assert!(!file.starts_with(victim.path()), "{}", file.display());
    assert!(!file.starts_with(wh.path()), "{}", file.display());
    drop(catalog);
    assert_eq!(fs::read_dir(victim.path()).unwrap().count(), 0);
    assert!(file.is_file(), "the cache went to {}", file.display());
    assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    let _ = fs::remove_dir_all(file.parent().unwrap().parent().unwrap());
}

#[test]
fn a_state_directory_others_can_write_is_not_used() {
    let wh = Warehouse::new();
    wh.file("a.jsonl", jsonl(2, 0));
    wh.dir(".pchronicle/cache");
    fs::set_permissions(wh.abs(".pchronicle"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(
        wh.abs(".pchronicle/cache"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    settle();
    let catalog = wh.catalog_with(default_cache());
    assert_eq!(catalog.stats(Path::new("")).unwrap().record_count, 2);
    let file = catalog.count_cache_file().unwrap();
    assert!(!file.starts_with(wh.path()), "{}", file.display());
    drop(catalog);
    assert!(file.is_file(), "the counts were kept in {}", file.display());
    assert!(!wh.abs(".pchronicle/cache/counts").exists());
    let _ = fs::remove_dir_all(file.parent().unwrap().parent().unwrap());
    // A safe one is used.
    fs::set_permissions(wh.abs(".pchronicle"), fs::Permissions::from_mode(0o755)).unwrap();
    let catalog = wh.catalog_with(default_cache());
    let file = catalog.count_cache_file().unwrap();
    assert_eq!(
        file,
        fs::canonicalize(wh.path())
            .unwrap()
            .join(".pchronicle/cache/counts")
    );
}

#[test]
fn a_generation_symlink_out_of_the_warehouse_is_not_counted() {
    let wh = Warehouse::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret.jsonl"), jsonl(50, 0)).unwrap();
    wh.storyline("leaf", 2);
    wh.file("leaf/CURRENT", "g3\n");
    wh.symlink(outside.path().to_str().unwrap(), "leaf/generations/g3");
    let catalog = wh.catalog();
    let stats = catalog.stats(Path::new("")).unwrap();
    assert_eq!(stats.record_count, 0, "{stats:?}");
    assert!(warning_codes(&stats).contains(&ErrorCode::StorylineGenerationMissing));
    // Nothing was published about the outside files.
    assert!(!wh.abs("leaf/chronicle.manifest").exists());
}

#[test]
fn index_manifests_naming_paths_outside_are_refused() {
    let wh = Warehouse::new();
    wh.file("a.jsonl", jsonl(2, 0));
    for named in ["../../../../etc/passwd", "/etc/passwd", "sub/x.idx"] {
        let manifest = serde_json::json!({
            "schema": 1,
            "indexes": [{"file": named, "key": ["id"], "types": ["string"],
                         "rows": 2, "keys": 2, "unkeyed": 0, "failed": 0}]
        });
        wh.file("a.jsonl.indexes.json", manifest.to_string());
        let stats = wh.catalog().stats(Path::new("")).unwrap();
        assert!(
            warning_codes(&stats).contains(&ErrorCode::IndexManifestInvalid),
            "{named}: {stats:?}"
        );
        assert!(stats.indexes.is_empty(), "{named}: {:?}", stats.indexes);
    }
}

#[test]
fn fifos_and_devices_in_metadata_places_neither_block_nor_flood() {
    let wh = Warehouse::new();
    wh.storyline("fifo_manifest", 2);
    wh.fifo("fifo_manifest/chronicle.manifest");
    wh.storyline("zero_manifest", 2);
    wh.symlink("/dev/zero", "zero_manifest/chronicle.manifest");
    wh.dir("fifo_current/generations/g1");
    wh.fifo("fifo_current/CURRENT");
    wh.file("a.jsonl", jsonl(1, 0));
    wh.fifo("a.jsonl.indexes.json");
    wh.fifo("b.jsonl");
    let root = wh.path().to_path_buf();
    let stats = finishes_within(Duration::from_secs(20), move || {
        let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
        catalog.stats(Path::new("")).unwrap()
    });
    let codes = warning_codes(&stats);
    assert!(codes.contains(&ErrorCode::ManifestUnreadable), "{codes:?}");
    // Both storyline leaves still count their records; the FIFO record
    // file is not a source.
    assert_eq!(stats.record_count, 2 + 2 + 1, "{stats:?}");
    // A record file's own stats read its index manifest, a FIFO: refused.
    let root = wh.path().to_path_buf();
    let file = finishes_within(Duration::from_secs(20), move || {
        let catalog = Catalog::new(&root, CatalogOptions::default()).unwrap();
        catalog.stats(Path::new("a.jsonl")).unwrap()
    });
    assert!(
        warning_codes(&file).contains(&ErrorCode::NotRegularFile),
        "{file:?}"
    );
    // Nothing replaced the planted entries.
    assert!(
        fs::symlink_metadata(wh.abs("fifo_manifest/chronicle.manifest"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(
        fs::symlink_metadata(wh.abs("zero_manifest/chronicle.manifest"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn oversized_metadata_is_refused_with_its_code() {
    let wh = Warehouse::new();
    wh.storyline("leaf", 2);
    let manifest = fs::File::create(wh.abs("leaf/chronicle.manifest")).unwrap();
    manifest.set_len(64 << 20).unwrap();
    let stats = wh.catalog().stats(Path::new("")).unwrap();
    assert!(
        warning_codes(&stats).contains(&ErrorCode::MetadataTooLarge),
        "{stats:?}"
    );
    assert_eq!(stats.record_count, 2);
    assert_eq!(
        fs::metadata(wh.abs("leaf/chronicle.manifest"))
            .unwrap()
            .len(),
        64 << 20
    );
}

#[test]
fn manifests_this_build_cannot_understand_are_never_rewritten() {
    let wh = Warehouse::new();
    let cases: [(&str, &[u8]); 5] = [
        (
            "typo",
            b"schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n[stats\n",
        ),
        (
            "newer",
            b"schema_version = 2\nkind = \"leaf\"\nformat = \"storyline/v1\"\nowner = \"x\"\n",
        ),
        (
            "bad_utf8",
            b"schema_version = 1\nkind = \"leaf\"\nformat = \"\xff\"\n",
        ),
        ("branch", b"schema_version = 1\nkind = \"branch\"\n# ours\n"),
        ("no_kind", b"schema_version = 1\n"),
    ];
    for (name, bytes) in cases {
        wh.storyline(name, 3);
        wh.file(&format!("{name}/chronicle.manifest"), bytes);
    }
    let catalog = wh.catalog();
    let stats = catalog.stats(Path::new("")).unwrap();
    assert_eq!(stats.record_count, 15, "every leaf counted from its data");
    for (name, bytes) in cases {
        assert_eq!(
            fs::read(wh.abs(&format!("{name}/chronicle.manifest"))).unwrap(),
            bytes,
            "{name} was rewritten"
        );
        assert!(
            stats
                .warnings
                .iter()
                .any(|w| w.code == ErrorCode::ManifestKept && w.path.starts_with(name)),
            "{name}: {:?}",
            stats.warnings
        );
    }
}

#[test]
fn a_stale_manifest_is_updated_in_place_keeping_comments_owner_and_mode() {
    let wh = Warehouse::new();
    wh.storyline("leaf", 4);
    let text = "# written by the team\nschema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\nowner = \"team-a\" # who to ask\n\n[identity]\nfingerprint = \"storyline:generation:g1\" # set by pchronicle\n\n[stats]\nrecord_count = 99\n";
    wh.file("leaf/chronicle.manifest", text);
    let path = wh.abs("leaf/chronicle.manifest");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&path, Some(4242), Some(4243)).unwrap();
    }
    let stats = wh.catalog().stats(Path::new("")).unwrap();
    assert_eq!(stats.record_count, 4);
    let after = fs::read_to_string(&path).unwrap();
    assert!(after.starts_with("# written by the team\n"), "{after}");
    assert!(after.contains("owner = \"team-a\" # who to ask"), "{after}");
    assert!(
        after.contains("fingerprint = \"storyline:generation:g2\" # set by pchronicle"),
        "{after}"
    );
    assert!(after.contains("record_count = 4"), "{after}");
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o640);
    if is_root() {
        assert_eq!((meta.uid(), meta.gid()), (4242, 4243));
    }
    let leftovers: Vec<_> = fs::read_dir(wh.abs("leaf"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn counts_saturate_instead_of_overflowing() {
    let wh = Warehouse::new();
    for name in ["a", "b", "c"] {
        wh.manifest(
            name,
            "schema_version = 1\nkind = \"leaf\"\nformat = \"parquet-thing/v9\"\n[stats]\nrecord_count = 9223372036854775807\nfailed_count = 9223372036854775807\n",
        );
    }
    let stats = wh.catalog().stats(Path::new("")).unwrap();
    assert_eq!(stats.record_count, u64::MAX);
    assert_eq!(stats.failed_count, u64::MAX);
}

#[test]
fn a_directory_swapped_for_a_symlink_never_leads_outside() {
    let wh = Warehouse::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("f.jsonl"), "{\"secret\":1}\n".repeat(7)).unwrap();
    wh.file("d/a/f.jsonl", jsonl(3, 0));
    wh.symlink(outside.path().to_str().unwrap(), "d/b");
    let catalog = Arc::new(wh.catalog());
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = wh.swapper("d", &stop);
    let (mut opened, mut counted) = (0, 0);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for name in ["d/a/f.jsonl", "d/b/f.jsonl"] {
            if let Ok((file, _)) = catalog.open_file(Path::new(name)) {
                let text = std::io::read_to_string(file.reader_at(0)).unwrap();
                assert!(!text.contains("secret"), "read outside through {name}");
                opened += 1;
            }
        }
        let stats = catalog.stats(Path::new("d")).unwrap();
        // 0, 3 or (when the swap moves the directory under the walk's
        // feet) 6 of its own records; never one of the 7 outside.
        assert!(
            stats.record_count.is_multiple_of(3) && stats.record_count <= 6,
            "{stats:?}"
        );
        counted += u64::from(stats.record_count == 3);
        catalog.clear_cache();
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swaps.join().unwrap();
    assert!(
        swaps > 100 && opened > 0 && counted > 0,
        "{swaps} {opened} {counted}"
    );
}

#[test]
fn a_viewer_sees_only_what_it_could_read() {
    if !is_root() {
        eprintln!("skipping: needs root to make files other users cannot read");
        return;
    }
    let wh = Warehouse::new();
    fs::set_permissions(wh.path(), fs::Permissions::from_mode(0o755)).unwrap();
    wh.file("open/a.jsonl", jsonl(2, 0));
    wh.file("closed/b.jsonl", jsonl(5, 0));
    wh.file("open/private.jsonl", jsonl(7, 0));
    fs::set_permissions(wh.abs("closed"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(
        wh.abs("open/private.jsonl"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let catalog = wh.catalog();
    assert_eq!(catalog.stats(Path::new("")).unwrap().record_count, 14);
    let viewer = Viewer {
        uid: 4242,
        gid: 4242,
        groups: Vec::new(),
    };
    let theirs = catalog.viewed_by(viewer).unwrap();
    let stats = theirs.stats(Path::new("")).unwrap();
    assert_eq!(stats.record_count, 2, "{stats:?}");
    let codes = warning_codes(&stats);
    assert!(codes.contains(&ErrorCode::Io), "{codes:?}");
    assert!(
        codes.contains(&ErrorCode::RecordFileUnreadable),
        "{codes:?}"
    );
    assert!(theirs.list(Path::new("closed")).is_err());
    assert!(theirs.open_file(Path::new("open/private.jsonl")).is_err());
    // Owning the directory, or being in its group, opens it.
    std::os::unix::fs::chown(wh.abs("closed"), None, Some(4300)).unwrap();
    fs::set_permissions(wh.abs("closed"), fs::Permissions::from_mode(0o750)).unwrap();
    let member = catalog
        .viewed_by(Viewer {
            uid: 4242,
            gid: 4242,
            groups: vec![4300],
        })
        .unwrap();
    assert_eq!(member.stats(Path::new("")).unwrap().record_count, 2 + 5);
    assert_eq!(
        member.node(Path::new("closed")).unwrap().kind,
        NodeKind::Directory
    );
}

#[test]
fn a_lookup_refuses_a_record_file_or_index_that_is_not_regular() {
    use pchronicle::sidecar::build::{build, index_path};
    use pchronicle::sidecar::lookup::{lookup, verify};
    let wh = Warehouse::new();
    wh.file("a.jsonl", jsonl(3, 0));
    let key = vec!["id".to_string()];
    build(&wh.abs("a.jsonl"), &key).unwrap();
    fs::rename(wh.abs("a.jsonl"), wh.abs("kept.jsonl")).unwrap();
    // Each swap of the record file, then of its index: refused at once,
    // with the code that says why, never opened (a FIFO would hang).
    let index = index_path(&wh.abs("a.jsonl"), &key);
    let index_name = index.file_name().unwrap().to_str().unwrap().to_string();
    let swaps: [(&str, &dyn Fn()); 3] = [
        ("record file is a FIFO", &|| {
            wh.fifo("a.jsonl");
        }),
        ("record file is a symlink", &|| {
            fs::remove_file(wh.abs("a.jsonl")).unwrap();
            wh.symlink("kept.jsonl", "a.jsonl");
        }),
        ("index is a FIFO", &|| {
            fs::remove_file(wh.abs("a.jsonl")).unwrap();
            fs::rename(wh.abs("kept.jsonl"), wh.abs("a.jsonl")).unwrap();
            fs::remove_file(&index).unwrap();
            wh.fifo(&index_name);
        }),
    ];
    for (what, swap) in swaps {
        swap();
        let (file, key) = (wh.abs("a.jsonl"), key.clone());
        let (looked, verified) = finishes_within(Duration::from_secs(20), move || {
            (
                lookup(&file, &key, &["r1".into()]).unwrap_err(),
                verify(&file, &key).unwrap_err(),
            )
        });
        assert_eq!(looked.code, ErrorCode::NotRegularFile, "{what}: {looked:?}");
        assert_eq!(
            verified.code,
            ErrorCode::NotRegularFile,
            "{what}: {verified:?}"
        );
    }
}
