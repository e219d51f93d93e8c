//! A slow `.stats` (rendered on a worker) does not hold up `ls`
//! elsewhere.

use std::fs;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::harness::Mounted;
use crate::support::Warehouse;

#[test]
fn a_slow_stats_does_not_block_listing_elsewhere() {
    let wh = Warehouse::new();
    // A few hundred MiB of records: counting them takes a while.
    let line = "{\"id\":\"x\",\"ts\":\"2026-11-30T00:00:00Z\",\"text\":\"a record long enough to take some time to validate\"}\n";
    let block = line.repeat(16_384);
    let mut big = fs::File::create({
        fs::create_dir_all(wh.abs("slow")).unwrap();
        wh.abs("slow/big.jsonl")
    })
    .unwrap();
    while big.metadata().unwrap().len() < 384 << 20 {
        big.write_all(block.as_bytes()).unwrap();
    }
    drop(big);
    wh.file("fast/a.jsonl", "{}\n");
    // Counted by the render itself (not in the background), so it is slow.
    let Some(m) = Mounted::start(wh.path(), &["--count-in-background-mib", "4096"]) else {
        return;
    };
    let slow_path = m.at("slow/.stats");
    let slow_done = Arc::new(AtomicBool::new(false));
    let slow = std::thread::spawn({
        let done = Arc::clone(&slow_done);
        move || {
            let text = fs::read_to_string(slow_path).unwrap();
            done.store(true, Ordering::SeqCst);
            text
        }
    });
    // Let the slow request reach the daemon, then list elsewhere, again
    // and again: with one request thread, the first listing would wait
    // for the slow .stats, and none would finish while it runs.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut blocked = 0;
    for _ in 0..20 {
        let names: Vec<_> = fs::read_dir(m.at("fast"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3);
        if slow_done.load(Ordering::SeqCst) {
            blocked += 1;
        }
    }
    let text = slow.join().unwrap();
    assert!(text.contains("\"record_count\""));
    assert_eq!(
        blocked, 0,
        "{blocked} of 20 listings finished only after the slow .stats did"
    );
}
