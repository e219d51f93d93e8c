//! Reading warehouse files through the mount: by the kernel itself (FUSE
//! passthrough, where the kernel offers it and the daemon runs as root)
//! and by the daemon (`--no-passthrough`, and kernels without it). Both
//! must return the native bytes for every way of reading.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::time::Duration;

use crate::harness::{Mapping, Mounted};
use crate::support::{Warehouse, jsonl};

/// Logs every request the daemon receives, and its own info lines.
const REQUESTS: &str = "warn,pchronicle=info,fuser::request=debug";

/// Files of awkward sizes: empty, one byte, one page, and one just past
/// a megabyte (a read-ahead window and a partial page).
fn files(wh: &Warehouse) -> Vec<(&'static str, Vec<u8>)> {
    let big = jsonl(6_000, 1_790_000_000);
    let files = vec![
        ("empty.jsonl", Vec::new()),
        ("one.jsonl", b"\n".to_vec()),
        ("page.jsonl", vec![b' '; 4096]),
        ("runs/big.jsonl", big.into_bytes()),
    ];
    for (name, bytes) in &files {
        wh.file(name, bytes.as_slice());
    }
    files
}

/// Reads each file through the mount every way a program does (whole,
/// in small pieces, from an offset, mapped) and compares with `want`.
fn read_every_way(m: &Mounted, files: &[(&str, Vec<u8>)]) {
    for (name, want) in files {
        let path = m.at(name);
        assert_eq!(&fs::read(&path).unwrap(), want, "{name}: whole");
        let mut file = fs::File::open(&path).unwrap();
        let mut pieces = Vec::new();
        let mut buf = [0u8; 1000];
        loop {
            let n = file.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            pieces.extend_from_slice(&buf[..n]);
        }
        assert_eq!(&pieces, want, "{name}: 1,000-byte reads");
        let from = want.len() / 3;
        let mut tail = vec![0u8; want.len() - from];
        file.read_exact_at(&mut tail, from as u64).unwrap();
        assert_eq!(tail, want[from..], "{name}: pread from {from}");
        file.seek(SeekFrom::End(0)).unwrap();
        assert_eq!(file.read(&mut buf).unwrap(), 0, "{name}: at the end");
        if !want.is_empty() {
            assert_eq!(&Mapping::of(&path).bytes(), want, "{name}: mmap");
        }
    }
}

/// How many read requests reached the daemon, from its request log.
fn reads_served(log: &str) -> usize {
    log.lines().filter(|l| l.contains(" READ fh ")).count()
}

/// Whether this kernel offers passthrough to this process: Linux 6.9 or
/// later, and root (registering a file needs `CAP_SYS_ADMIN`).
fn passthrough_expected() -> bool {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: geteuid has no preconditions.
    (major, minor) >= (6, 9) && unsafe { libc::geteuid() } == 0
}

#[test]
fn warehouse_files_are_read_by_the_kernel_where_it_offers_passthrough() {
    let wh = Warehouse::new();
    let files = files(&wh);
    let Some(m) = Mounted::start_logging(wh.path(), &[], REQUESTS) else {
        return;
    };
    read_every_way(&m, &files);
    let log = m.log();
    if !passthrough_expected() {
        eprintln!(
            "note: no passthrough here (before Linux 6.9, or not root); checked the reads only"
        );
        return;
    }
    assert!(log.contains("kernel passthrough on"), "{log}");
    assert!(log.contains(" OPEN "), "the opens were logged: {log}");
    assert_eq!(
        reads_served(&log),
        0,
        "no read of a warehouse file reached the daemon"
    );
}

#[test]
fn the_daemon_reads_every_way_when_passthrough_is_off() {
    let wh = Warehouse::new();
    let files = files(&wh);
    let Some(m) = Mounted::start_logging(wh.path(), &["--no-passthrough"], REQUESTS) else {
        return;
    };
    read_every_way(&m, &files);
    let log = m.log();
    assert!(log.contains("kernel passthrough off"), "{log}");
    assert!(
        reads_served(&log) > 0,
        "the reads went through the daemon: {log}"
    );
}

#[test]
fn a_replaced_file_is_read_new_while_a_handle_still_reads_the_old_one() {
    for extra in [&[][..], &["--no-passthrough"][..]] {
        let wh = Warehouse::new();
        wh.file("r.jsonl", "{\"old\":1}\n".repeat(1000));
        let mut args = vec!["--attr-ttl", "100"];
        args.extend_from_slice(extra);
        let Some(m) = Mounted::start(wh.path(), &args) else {
            return;
        };
        let old = fs::File::open(m.at("r.jsonl")).unwrap();
        let mut first = vec![0u8; 10];
        old.read_exact_at(&mut first, 0).unwrap();
        assert_eq!(first, b"{\"old\":1}\n");
        // Replaced by rename while `old` is open: the name gets a new
        // inode, and with passthrough the old one reads through the old
        // file, so the new open must not use it.
        let new = "{\"new\":22}\n".repeat(700);
        fs::write(wh.abs("r.tmp"), &new).unwrap();
        fs::rename(wh.abs("r.tmp"), wh.abs("r.jsonl")).unwrap();
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            fs::read_to_string(m.at("r.jsonl")).unwrap(),
            new,
            "{extra:?}: a new open reads the new file whole"
        );
        // After the TTL, `fstat` of the old handle still describes it.
        assert_eq!(old.metadata().unwrap().len(), 10_000, "{extra:?}");
        let mut rest = Vec::new();
        (&old).read_to_end(&mut rest).unwrap();
        assert_eq!(
            rest.len(),
            10_000,
            "{extra:?}: the old handle reads the old file"
        );
        assert!(rest.chunks(10).all(|c| c == b"{\"old\":1}\n"), "{extra:?}");
        assert_eq!(
            fs::metadata(m.at("r.jsonl")).unwrap().len(),
            new.len() as u64
        );
    }
}

#[test]
fn an_unchanged_stats_is_read_from_the_page_cache_and_a_changed_one_anew() {
    let wh = Warehouse::new();
    wh.file("runs/a.jsonl", jsonl(3, 1_790_000_000));
    let Some(m) = Mounted::start_logging(wh.path(), &["--attr-ttl", "300"], REQUESTS) else {
        return;
    };
    let stats = m.at("runs/.stats");
    let first = fs::read(&stats).unwrap();
    let read_once = reads_served(&m.log());
    assert!(read_once > 0, "the first read is the daemon's");
    // Again, within and after the TTL: the same bytes, from the cache.
    assert_eq!(fs::read(&stats).unwrap(), first);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(fs::read(&stats).unwrap(), first);
    assert_eq!(
        reads_served(&m.log()),
        read_once,
        "an unchanged .stats is not read from the daemon again"
    );
    // A change underneath shows within the TTL, whole.
    wh.file("runs/b.jsonl", jsonl(4, 1_790_000_000));
    std::thread::sleep(Duration::from_millis(400));
    let text = fs::read_to_string(&stats).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["record_count"], 7, "{text}");
    assert_eq!(fs::metadata(&stats).unwrap().len(), text.len() as u64);
}
