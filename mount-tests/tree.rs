//! What the mount shows through the kernel: RFC parity test 6, a
//! differential walk against `list`, inode numbers, big directories,
//! statfs, EROFS and `getfattr`. What the filesystem answers without a
//! kernel (RFC test 7, every operation's results) is in `tests/fs/`.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use pchronicle::catalog::{Catalog, CatalogOptions, NodeKind};
use serde_json::Value;

use crate::harness::{Mounted, errno_of, getxattr, run};
use crate::support::{Warehouse, jsonl};

const SYNTHETIC: [&str; 2] = [".stats", ".sources"];
/// The synthetic file of dataset leaves only.
const RECORDS: &str = ".records";

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// The demo warehouse, read once so every missing manifest is repaired
/// before the mount and the CLI are compared.
pub fn demo_warehouse() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    pchronicle::demo::build(dir.path()).unwrap();
    let out = run(&[OsStr::new("stats"), dir.path().as_os_str()]);
    assert!(out.status.success());
    dir
}

/// Every path the mount shows, relative to the mount point, found with
/// plain `read_dir` (descending into every directory, leaves included).
pub fn mount_tree(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        for entry in
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().expect("UTF-8 names only");
            let path = join(&rel, &name);
            if entry.file_type().unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.insert(path);
        }
    }
    out
}

/// Every path the mount should show, from `list` alone: each directory's
/// children and two synthetic files, each leaf's three synthetic files.
fn expected_tree(catalog: &Catalog) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        for name in SYNTHETIC {
            out.insert(join(&rel, name));
        }
        let listing = catalog.list(Path::new(&rel)).unwrap();
        if listing.kind == NodeKind::Dataset {
            out.insert(join(&rel, RECORDS));
            // Its past (`.versions`, `.tags`): directories of revisions,
            // each a dataset of its own without a past.
            for (name, _) in catalog.past_names(Path::new(&rel)).unwrap_or_default() {
                let path = join(&rel, name);
                out.insert(path.clone());
                stack.push(path);
            }
            continue;
        }
        for entry in &listing.entries {
            let path = join(&rel, entry.name());
            if entry.kind() != NodeKind::File {
                stack.push(path.clone());
            }
            out.insert(path);
        }
    }
    out
}

/// Directories and datasets of the tree (where synthetic files live).
fn nodes_with_synthetics(tree: &BTreeSet<String>) -> Vec<String> {
    let mut out = vec![String::new()];
    out.extend(
        tree.iter()
            .filter_map(|p| p.strip_suffix("/.stats").map(str::to_string)),
    );
    out
}

fn cli(args: &[&str], path: &Path) -> Vec<u8> {
    let mut full: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    full.push(path.as_os_str());
    let out = run(&full);
    assert!(
        out.status.success(),
        "pchronicle {args:?} {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn warehouse_path(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

#[test]
fn rfc6_mount_children_match_ls_for_every_prefix() {
    let wh = demo_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let tree = mount_tree(&m.mnt);
    let mut checked = 0;
    for rel in nodes_with_synthetics(&tree) {
        let listing: Value =
            serde_json::from_slice(&cli(&["ls", "--json"], &warehouse_path(wh.path(), &rel)))
                .unwrap();
        if listing["kind"] == "dataset" {
            let names: BTreeSet<String> = fs::read_dir(m.at(&rel))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            // A leaf shows its past where the command line reads one.
            let past = [".versions", ".tags"].into_iter().filter(|name| {
                let path = warehouse_path(wh.path(), &rel).join(name);
                run(&[OsStr::new("ls"), OsStr::new("--json"), path.as_os_str()])
                    .status
                    .success()
            });
            assert_eq!(
                names,
                SYNTHETIC
                    .iter()
                    .copied()
                    .chain([RECORDS])
                    .chain(past)
                    .map(str::to_string)
                    .collect(),
                "leaf {rel}"
            );
            let preview = &listing["entries"][0];
            assert_eq!(
                getxattr(&m.at(&rel), "user.pchronicle.kind").unwrap(),
                "dataset"
            );
            assert_eq!(
                getxattr(&m.at(&rel), "user.pchronicle.format").unwrap(),
                preview["format"].as_str().unwrap()
            );
            continue;
        }
        let mut shown: HashMap<String, fs::FileType> = fs::read_dir(m.at(&rel))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), e.file_type().unwrap())
            })
            .collect();
        for name in SYNTHETIC {
            assert!(shown.remove(name).unwrap().is_file(), "{rel}/{name}");
        }
        let entries = listing["entries"].as_array().unwrap();
        assert_eq!(shown.len(), entries.len(), "children of {rel:?}");
        for entry in entries {
            let name = entry["name"].as_str().unwrap();
            let kind = entry["kind"].as_str().unwrap();
            let file_type = shown
                .get(name)
                .unwrap_or_else(|| panic!("{rel}/{name} not shown"));
            let path = m.at(&join(&rel, name));
            assert_eq!(
                getxattr(&path, "user.pchronicle.kind").unwrap(),
                kind,
                "{rel}/{name}"
            );
            match kind {
                "directory" => assert!(file_type.is_dir()),
                "dataset" => {
                    assert!(file_type.is_dir());
                    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o555);
                    assert_eq!(
                        getxattr(&path, "user.pchronicle.format").unwrap(),
                        entry["format"].as_str().unwrap()
                    );
                    match entry["record_count"].as_u64() {
                        Some(n) => assert_eq!(
                            getxattr(&path, "user.pchronicle.record_count").unwrap(),
                            n.to_string()
                        ),
                        None => assert_eq!(
                            getxattr(&path, "user.pchronicle.record_count"),
                            Err(libc::ENODATA)
                        ),
                    }
                }
                "file" => {
                    assert!(file_type.is_file());
                    assert_eq!(
                        fs::metadata(&path).unwrap().len(),
                        entry["size"].as_u64().unwrap()
                    );
                }
                other => panic!("unknown kind {other}"),
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 15,
        "the demo should exercise many entries, checked {checked}"
    );
}

/// Sidecar index files pass through as plain files, a lookup through the
/// mount is served (the mount keeps the record file's size and mtime), and
/// the directory's `.stats` lists the index as fresh.
#[test]
fn sidecar_indexes_are_regular_files_and_listed_in_stats() {
    let wh = demo_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let dir = "runs/date=2026-11-01__agent=codex";
    let key = ["role".to_string()];
    let cohort = format!("{dir}/s-0001.jsonl");
    let index = pchronicle::sidecar::build::index_path(Path::new(&cohort), &key);
    let index = index.to_str().unwrap();
    for rel in [index, &format!("{cohort}.indexes.json")] {
        let native = wh.path().join(rel);
        let meta = fs::symlink_metadata(m.at(rel)).unwrap();
        assert!(meta.is_file(), "{rel}");
        assert_eq!(meta.len(), fs::metadata(&native).unwrap().len(), "{rel}");
        assert_eq!(fs::read(m.at(rel)).unwrap(), fs::read(&native).unwrap());
        assert_eq!(
            getxattr(&m.at(rel), "user.pchronicle.kind").unwrap(),
            "file"
        );
        assert_eq!(
            getxattr(&m.at(rel), "user.pchronicle.format"),
            Err(libc::ENODATA),
            "an index is not a record file"
        );
    }
    let through_mount = cli(&["lookup", "--key", "role=tool"], &m.at(&cohort));
    let native = cli(&["lookup", "--key", "role=tool"], &wh.path().join(&cohort));
    assert_eq!(through_mount, native);
    assert_eq!(String::from_utf8_lossy(&native).lines().count(), 4);
    let stats: Value = serde_json::from_slice(&fs::read(m.at("runs/.stats")).unwrap()).unwrap();
    assert_eq!(
        stats["indexes"],
        serde_json::json!([{
            "file": "date=2026-11-01__agent=codex/s-0001.jsonl",
            "index": index.strip_prefix("runs/").unwrap(),
            "key": ["role"], "types": ["string"], "rows": 12, "state": "fresh"
        }])
    );
}

/// A generated warehouse holding every layout and every thing a mount
/// must not show.
fn generated_warehouse() -> Warehouse {
    let wh = Warehouse::new();
    for day in 1..=3 {
        for agent in ["a", "b"] {
            let dir = format!("runs/date=2026-11-0{day}/agent={agent}");
            wh.file(
                &format!("{dir}/s{day}.jsonl"),
                jsonl(day * 3, 1_790_000_000),
            );
            wh.file(&format!("{dir}/notes.txt"), "not records\n");
        }
    }
    wh.storyline("team/planner", 7);
    wh.storyline("team/nested/deeper/leaf", 4);
    // A nested manifest inside a leaf is interior, never a node.
    wh.file(
        "team/planner/generations/g1/chronicle.manifest",
        "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n",
    );
    wh.branch("team");
    wh.file("exports/all.json", "[{\"id\":1},{\"id\":2}]");
    wh.file("exports/packed.jsonseq", "\u{1e}{\"id\":1}\u{1e}{\"id\":2}");
    wh.file("README.txt", "hello\n");
    wh.file(".pchronicle/state.json", "{}");
    wh.file("shadow/.stats", "a real file named like a synthetic one\n");
    wh.file("shadow/real.jsonl", jsonl(2, 1_790_000_000));
    wh.symlink("runs", "runs-link");
    wh.symlink("README.txt", "readme-link");
    let fifo = std::ffi::CString::new(wh.abs("exports/pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    fs::write(
        wh.abs("exports")
            .join(OsStr::from_bytes(b"bad\xffname.jsonl")),
        "{}\n",
    )
    .unwrap();
    wh.dir("empty/dir");
    wh
}

#[test]
fn differential_walk_shows_exactly_what_list_says() {
    let wh = generated_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let catalog = Catalog::new(wh.path(), CatalogOptions::default()).unwrap();
    let shown = mount_tree(&m.mnt);
    let expected = expected_tree(&catalog);
    let missing: Vec<_> = expected.difference(&shown).collect();
    let extra: Vec<_> = shown.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    for hidden in [
        ".pchronicle",
        "runs-link",
        "readme-link",
        "exports/pipe",
        "team/planner/CURRENT",
        "team/planner/generations",
    ] {
        assert_eq!(
            errno_of(fs::symlink_metadata(m.at(hidden))),
            libc::ENOENT,
            "{hidden}"
        );
    }
    // Every regular file reads as the file underneath, byte for byte.
    let mut files = 0;
    for rel in &shown {
        let name = rel.rsplit('/').next().unwrap();
        let meta = fs::metadata(m.at(rel)).unwrap();
        if meta.is_file() && !SYNTHETIC.contains(&name) && name != RECORDS {
            assert_eq!(
                fs::read(m.at(rel)).unwrap(),
                fs::read(wh.abs(rel)).unwrap(),
                "{rel}"
            );
            assert_eq!(meta.len(), fs::metadata(wh.abs(rel)).unwrap().len());
            files += 1;
        }
    }
    assert!(files >= 15, "{files}");
    // The shadowed real file is not what `.stats` serves.
    let stats = fs::read_to_string(m.at("shadow/.stats")).unwrap();
    assert!(stats.starts_with('{'), "{stats}");
}

#[test]
fn a_directory_of_100000_entries_lists_each_once() {
    let wh = Warehouse::new();
    let dir = wh.abs("big");
    fs::create_dir(&dir).unwrap();
    for i in 0..100_000 {
        fs::File::create(dir.join(format!("f{i:06}.txt"))).unwrap();
    }
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let mut names = Vec::with_capacity(100_002);
    for entry in fs::read_dir(m.at("big")).unwrap() {
        names.push(entry.unwrap().file_name().into_string().unwrap());
    }
    assert_eq!(
        names.len(),
        100_002,
        "100,000 files and two synthetic files"
    );
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "an entry was listed twice");
    assert!(unique.contains(&"f099999.txt".to_string()));
    // `ls -f` (no sorting) agrees, through getdents with its own buffers.
    let out = std::process::Command::new("ls")
        .arg("-f")
        .arg(m.at("big"))
        .output()
        .unwrap();
    assert_eq!(
        out.stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        100_004
    );
}

#[test]
fn inode_numbers_are_stable_while_the_kernel_holds_them() {
    let wh = generated_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let paths = [
        "",
        "runs",
        "team/planner",
        "team/planner/.stats",
        "README.txt",
        "exports/all.json",
    ];
    let first: Vec<u64> = paths
        .iter()
        .map(|p| fs::metadata(m.at(p)).unwrap().ino())
        .collect();
    let unique: BTreeSet<u64> = first.iter().copied().collect();
    assert_eq!(
        unique.len(),
        paths.len(),
        "distinct paths have distinct numbers"
    );
    // Make the kernel forget what it can (root only; harmless otherwise):
    // a number lives while the kernel holds its inode, here through an open
    // file each, so these keep theirs.
    let held: Vec<fs::File> = paths
        .iter()
        .map(|p| fs::File::open(m.at(p)).unwrap())
        .collect();
    let _ = fs::write("/proc/sys/vm/drop_caches", "2");
    let _ = mount_tree(&m.mnt);
    let again: Vec<u64> = paths
        .iter()
        .map(|p| fs::metadata(m.at(p)).unwrap().ino())
        .collect();
    assert_eq!(first, again);
    drop(held);
    // Attributes otherwise come from the file underneath.
    let under = fs::metadata(wh.abs("README.txt")).unwrap();
    let shown = fs::metadata(m.at("README.txt")).unwrap();
    assert_eq!(
        (shown.len(), shown.mtime(), shown.mtime_nsec()),
        (under.len(), under.mtime(), under.mtime_nsec())
    );
    assert_eq!(
        (shown.uid(), shown.gid(), shown.mode()),
        (under.uid(), under.gid(), under.mode())
    );
}

fn statvfs(path: &Path) -> libc::statvfs {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut out = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a valid path and a buffer for one statvfs.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), out.as_mut_ptr()) }, 0);
    // SAFETY: the call succeeded.
    unsafe { out.assume_init() }
}

#[test]
fn statfs_passes_through_and_the_mount_is_read_only() {
    let wh = generated_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let (under, shown) = (statvfs(wh.path()), statvfs(&m.mnt));
    assert_eq!(
        (shown.f_blocks, shown.f_bsize, shown.f_files),
        (under.f_blocks, under.f_bsize, under.f_files)
    );
    assert_ne!(shown.f_flag & libc::ST_RDONLY, 0);
}

#[test]
fn every_write_type_call_is_refused_with_erofs() {
    use std::os::unix::fs::PermissionsExt;
    let wh = generated_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let file = m.at("README.txt");
    let stats = m.at(".stats");
    let attempts: Vec<(&str, std::io::Result<()>)> = vec![
        ("create", fs::File::create(m.at("new.jsonl")).map(drop)),
        (
            "open for write",
            fs::OpenOptions::new().write(true).open(&file).map(drop),
        ),
        (
            "open for append",
            fs::OpenOptions::new().append(true).open(&file).map(drop),
        ),
        (
            "truncate .stats",
            fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&stats)
                .map(drop),
        ),
        ("mkdir", fs::create_dir(m.at("newdir"))),
        ("mkdir in a leaf", fs::create_dir(m.at("team/planner/x"))),
        ("unlink", fs::remove_file(&file)),
        ("unlink .stats", fs::remove_file(&stats)),
        ("rmdir", fs::remove_dir(m.at("empty/dir"))),
        ("rename", fs::rename(&file, m.at("moved.txt"))),
        ("link", fs::hard_link(&file, m.at("linked.txt"))),
        (
            "symlink",
            std::os::unix::fs::symlink("README.txt", m.at("sym")),
        ),
        (
            "chmod",
            fs::set_permissions(&file, fs::Permissions::from_mode(0o600)),
        ),
        ("chown", std::os::unix::fs::chown(&file, Some(0), Some(0))),
        (
            "utimes",
            fs::File::open(&file).and_then(|f| f.set_modified(std::time::SystemTime::now())),
        ),
        ("setxattr", setxattr(&file)),
        ("removexattr", removexattr(&file)),
        ("mknod", mkfifo_at(&m.at("fifo"))),
    ];
    for (what, result) in attempts {
        assert_eq!(errno_of(result), libc::EROFS, "{what}");
    }
    assert_eq!(fs::read_to_string(wh.abs("README.txt")).unwrap(), "hello\n");
}

fn removexattr(path: &Path) -> std::io::Result<()> {
    rustix::fs::removexattr(path, "user.note").map_err(std::io::Error::from)
}

fn mkfifo_at(path: &Path) -> std::io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .map_err(std::io::Error::from)
}

fn setxattr(path: &Path) -> std::io::Result<()> {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new("user.note").unwrap();
    // SAFETY: valid NUL-terminated strings and a one-byte value.
    let rc = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), b"x".as_ptr().cast(), 1, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The attributes themselves are pinned without a kernel
/// (`tests/fs/`); here `getfattr -d` dumps them through the mount.
#[test]
fn getfattr_dumps_the_extended_attributes() {
    let wh = generated_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let leaf = &m.at("team/planner");
    // getfattr -d dumps them as a user expects.
    let out = std::process::Command::new("getfattr")
        .arg("-d")
        .arg(leaf)
        .output()
        .expect("getfattr is installed (package attr)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("user.pchronicle.kind=\"dataset\""), "{text}");
    assert!(
        text.contains("user.pchronicle.format=\"storyline/v1\""),
        "{text}"
    );
}
