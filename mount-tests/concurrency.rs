//! Several request threads: a slow `.stats` does not hold up `ls`
//! elsewhere.

use std::fs;
use std::io::Write;
use std::time::Instant;

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
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let slow_path = m.at("slow/.stats");
    let slow = std::thread::spawn(move || {
        let started = Instant::now();
        let text = fs::read_to_string(slow_path).unwrap();
        (started.elapsed(), text)
    });
    // Let the slow request reach the daemon, then list elsewhere.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let started = Instant::now();
    let names: Vec<_> = fs::read_dir(m.at("fast"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let listing = started.elapsed();
    let (stats, text) = slow.join().unwrap();
    assert_eq!(names.len(), 3);
    assert!(text.contains("\"record_count\""));
    // With a single request thread the listing queues behind the slow
    // .stats and takes nearly as long (checked: 417 ms against 470 ms).
    assert!(
        listing * 4 < stats,
        "the listing took {listing:?} while a .stats took {stats:?}"
    );
}
