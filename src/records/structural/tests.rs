use super::classify::{NIBBLE_CLASSES, OPERATOR, SEPARATOR, WHITESPACE};
use super::*;
use crate::records::count::RecordStats;
use crate::records::scan::RecordScanner;

/// The byte scanner's count of `run`, segment by segment: the
/// reference the vector pass must match exactly.
fn by_segments(run: &[u8]) -> RecordStats {
    let mut stats = RecordStats::default();
    let mut scanner = RecordScanner::default();
    for segment in run.split(|&b| is_separator(b)) {
        let segment = segment.trim_ascii();
        if segment.is_empty() {
            continue;
        }
        match scanner.scan(segment) {
            Some(ts) => stats.add_record(ts),
            None => stats.add_failed(),
        }
    }
    stats
}

/// `serde_json`'s verdict on one segment, as counting reads it.
fn serde_count(run: &[u8]) -> (u64, u64) {
    let (mut records, mut failed) = (0, 0);
    for segment in run.split(|&b| is_separator(b)) {
        let segment = segment.trim_ascii();
        if segment.is_empty() {
            continue;
        }
        records += 1;
        // Ignoring a string, serde_json does not check its UTF-8.
        let valid = std::str::from_utf8(segment).is_ok()
            && serde_json::from_slice::<serde::de::IgnoredAny>(segment).is_ok();
        if !valid {
            failed += 1;
        }
    }
    (records, failed)
}

/// A reproducible stream of pseudo-random numbers from `seed`, for the
/// tests of every module.
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// The levels this CPU runs (the best one first).
fn levels() -> Vec<Level> {
    Level::here()
}

fn vector_at(level: Level, run: &[u8]) -> RecordStats {
    let mut stats = RecordStats::default();
    Structural::at_level(level).count_run(run, &mut stats, &mut RecordScanner::default());
    stats
}

fn vector(run: &[u8]) -> RecordStats {
    vector_at(levels()[0], run)
}

/// Whether this CPU lacks the vector passes (said on stderr: the test
/// then checks nothing; the byte scanner's own tests still run).
fn no_vectors() -> bool {
    if !available() {
        eprintln!("skipped: this CPU has no AVX2, the vector passes are never taken here");
    }
    !available()
}

/// Checks one run (ended by a separator) on every level this CPU runs
/// against the byte scanner, and the byte scanner against `serde_json`.
fn agree(run: &[u8]) {
    let expected = by_segments(run);
    for level in levels() {
        assert_eq!(
            vector_at(level, run),
            expected,
            "{level:?} {:?}",
            String::from_utf8_lossy(run)
        );
    }
    let serde = serde_count(run);
    assert_eq!(
        (expected.record_count, expected.failed_count),
        serde,
        "serde_json disagrees on {:?}",
        String::from_utf8_lossy(run)
    );
}

#[test]
fn both_classifiers_give_the_byte_masks() {
    if no_vectors() {
        return;
    }
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut blocks: Vec<[u8; 64]> = (0..=255u8).map(|b| [b; 64]).collect();
    for _ in 0..2_000 {
        let mut block = [0u8; 64];
        for byte in &mut block {
            *byte = (next() >> 24) as u8;
        }
        blocks.push(block);
    }
    for block in &blocks {
        let expected = classify::Block::by_bytes(block);
        for level in levels() {
            // SAFETY: `levels()` holds only what this CPU runs.
            let got = unsafe {
                match level {
                    Level::Avx512 => classify_avx512(block),
                    Level::Avx2 => classify_avx2(block),
                }
            };
            assert_eq!(got, expected, "{level:?} {block:?}");
        }
    }
}

#[target_feature(enable = "avx2")]
unsafe fn classify_avx2(block: &[u8; 64]) -> classify::Block {
    classify::avx2::classify(block)
}

#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn classify_avx512(block: &[u8; 64]) -> classify::Block {
    classify::avx512::classify(block)
}

#[test]
fn nibble_classes_are_exactly_the_byte_classes() {
    let class = |byte: u8| {
        NIBBLE_CLASSES.low[usize::from(byte & 15)] & NIBBLE_CLASSES.high[usize::from(byte >> 4)]
    };
    for byte in 0..=255u8 {
        let expect = |members: &[u8]| members.contains(&byte);
        assert_eq!(class(byte) & OPERATOR != 0, expect(b",:[]{}"), "{byte:#x}");
        assert_eq!(class(byte) & SEPARATOR != 0, expect(b"\n\x1e"), "{byte:#x}");
        assert_eq!(class(byte) & WHITESPACE != 0, expect(b" \t\r"), "{byte:#x}");
    }
}

#[test]
fn counts_like_the_byte_scanner() {
    if no_vectors() {
        return;
    }
    for run in [
        &b"{\"a\":1}\n"[..],
        b"{\"a\":1}\x1e[1,2]\n\n  \r\n\"s\"\x1e",
        b"{\"a\":\n{\"a\":3}\n",
        b"{\"ts\":1767225600,\"id\":\"x\"}\n{\"timestamp\":\"2026-01-02T00:00:00Z\"}\n",
        b"{\"t\\u0073\":5}\n{\"ts\":\"2026-01-0\\u0031T00:00:00Z\"}\n",
        b"\"unterminated\n{\"after\":\"a torn string\"}\n",
        b"\"h\xc3\xa9llo \xe2\x82\xac\"\n\"\xff\"\n[\"\xc3\"]\n\xc3\xa9\n",
        b"\"tab\tinside\"\n\"bad \\x escape\"\n\"\\u12g4\"\n\"ok \\\" \\\\ \\/ \\b\"\n",
        b"\x0c{}\x0c\n\x0c\n1\x0c\n1\x0cx\n\x0c \x0c[]\r\x0c\n[1\x0c]\n",
        b"12x\ntruee\nnull\nnul\n-\n-0\n01\n1.5e3\n{\"a\":tru}\n",
        b"{} {}\n1 2\n{\"a\" 1}\n{\"a\":1,}\n[1,]\n[}\n{]\n",
        b"\\\n\\\"\n\"a\"b\n\"a\"1\n",
    ] {
        agree(run);
    }
}

#[test]
fn strings_and_escapes_across_block_edges() {
    if no_vectors() {
        return;
    }
    // A string crossing the 64-byte edge at every offset, with an
    // escape, a non-ASCII character or a torn end placed on the edge.
    for pad in 0..130 {
        let p = "p".repeat(pad);
        for body in [
            format!("{{\"k\":\"{p}\\\"q\\\\\"}}\n"),
            format!("{{\"k\":\"{p}é€\"}}\n"),
            format!("[\"{p}\\\\\",\"\\u00e9\"]\n"),
            format!("{{\"k\":\"{p}\n{{\"n\":1}}\n"),
            format!("{{\"k\":\"{p}\\\n\"x\"\n"),
            format!("{p}\n{{\"ts\":\"2026-01-01T00:00:00Z\"}}\n"),
        ] {
            agree(body.as_bytes());
        }
    }
}

#[test]
fn agrees_on_mutated_runs_of_records() {
    if no_vectors() {
        return;
    }
    let seeds: [&[u8]; 5] = [
        br#"{"id":"r-1","ts":"2026-01-01T00:00:00Z","content":"a \"quoted\" \\ word","n":[1,-2.5e3,true,null,{"k":false}]}"#,
        br#"[{"a":{}},[],"\u00e9",0,-0.0,1E9]"#,
        br#"{"deep":[[[[{"x":[[[]]]}]]]],"timestamp":1767225600123}"#,
        "{\"text\":\"naïve café — 東京\",\"ts\":\"2026-03-04T05:06:07.5+01:00\"}".as_bytes(),
        b"{\"role\":\"tool\",\"content\":\"line one\\nline two\\ttabbed \\u2028\"}",
    ];
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let alphabet: &[u8] =
        b"{}[],:\"\\ 0123456789.-+eEtrufalsn\n\x1e\x0c\t\r\x01\x80\xc3\xa9\xe2\xff";
    let mut runs = 0;
    for _ in 0..20_000 {
        let mut run = Vec::new();
        for _ in 0..1 + next() % 6 {
            let mut record = seeds[(next() % seeds.len() as u64) as usize].to_vec();
            for _ in 0..next() % 4 {
                let pos = (next() as usize) % record.len();
                let byte = alphabet[(next() as usize) % alphabet.len()];
                match next() % 3 {
                    0 => record[pos] = byte,
                    1 => {
                        record.remove(pos);
                    }
                    _ => record.insert(pos, byte),
                }
                if record.is_empty() {
                    break;
                }
            }
            run.extend_from_slice(&record);
            run.push(if next() % 4 == 0 {
                RECORD_SEPARATOR
            } else {
                b'\n'
            });
        }
        agree(&run);
        runs += 1;
    }
    assert_eq!(runs, 20_000);
}

#[test]
fn agrees_on_random_token_sequences() {
    if no_vectors() {
        return;
    }
    // Sequences of tokens with no regard for the grammar, valid by
    // chance now and then: every rule of the walk is met, one at a time.
    let pieces: [&[u8]; 22] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b"\"k\"",
        b"\"ts\"",
        b"\"t\"",
        b"\"\"",
        b"1",
        b"-2.5",
        b"true",
        b"null",
        b" ",
        b"\t",
        b"\n",
        b"\x1e",
        b"\"2026-01-01T00:00:00Z\"",
        b"{\"a\":1}",
        b"[]",
        b"\"x\\\"y\"",
    ];
    let mut next = xorshift(0x1234_5678_9abc_def1);
    let mut valid = 0;
    for _ in 0..50_000 {
        let mut run = Vec::new();
        for _ in 0..1 + next() % 14 {
            run.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
        }
        run.push(b'\n');
        agree(&run);
        valid += usize::from(by_segments(&run).failed_count == 0);
    }
    // Enough valid runs that acceptance is tested, not only refusal.
    assert!(valid > 1_000, "{valid} of the runs were valid");
}

#[test]
fn runs_longer_than_a_window() {
    if no_vectors() {
        return;
    }
    let mut run = Vec::new();
    let mut i = 0;
    while run.len() < 3 * WINDOW + 1000 {
        if i == 700 {
            // A record longer than a window, amid others.
            run.extend_from_slice(
                format!("{{\"big\":\"{}\"}}\n", "b".repeat(WINDOW + 7)).as_bytes(),
            );
        }
        let line = match i % 5 {
            0 => format!("{{\"id\":{i},\"ts\":{}}}\n", 1_767_225_600 + i),
            1 => format!(
                "{{\"id\":\"{i}\",\"content\":\"{}\"}}\n",
                "w".repeat(i % 300)
            ),
            2 => format!("{{\"torn\":\"{}\n", "t".repeat(i % 70)),
            3 => "\n\x1e  \n".to_string(),
            _ => format!("[{i},\"{}\\n\"]\x1e", "é".repeat(i % 40)),
        };
        run.extend_from_slice(line.as_bytes());
        i += 1;
    }
    // One record much larger than a window, too.
    run.extend_from_slice(format!("{{\"big\":\"{}\"}}\n", "b".repeat(3 * WINDOW)).as_bytes());
    agree(&run);
    assert!(vector(&run).record_count > 1000);
}

#[test]
fn records_of_a_known_shape_agree_whatever_their_numbers_literals_and_keys() {
    if no_vectors() {
        return;
    }
    // A few shapes, repeated with values that keep the shape's tokens but
    // may be malformed (a number's first byte is its token, a literal's
    // first letter), keys that may or may not name a timestamp (escaped
    // or not), timestamps of their own (so one read from the wrong place
    // shows), and now and then a byte changed anywhere.
    let numbers = [
        "0", "-1", "12.5", "1e3", "-0.0e-1", "01", "1.", "-", "1x", "2e", "1.e3", "-a", "7",
    ];
    // Each literal slot keeps its first letter, so its token.
    let trues = ["true", "tru", "truex", "t", "trUe"];
    let nulls = ["null", "nul", "nullx", "n"];
    let falses = ["false", "fals", "f", "falsex"];
    let keys = [
        "ts",
        "tz",
        "t\\u0073",
        "timestamp",
        "timestamq",
        "id",
        "t\\s",
    ];
    let alphabet: &[u8] = b"{}[],:\"\\ 0123456789.-eEtrufalsnx\n\x1e\x0c\t\x01\x80\xc3\xa9";
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut roll = move |n: usize| (next() % n as u64) as usize;
    let pick = |roll: &mut dyn FnMut(usize) -> usize, list: &[&'static str]| list[roll(list.len())];
    // A string now and then malformed or escaped, a number now and then
    // (a shape of its own), every one a time of its own.
    let stamp = |roll: &mut dyn FnMut(usize) -> usize, i: u32| match roll(10) {
        0 => format!("{}", 1_767_225_600 + i),
        1 => "\"garbage\"".to_string(),
        2 => format!("\"2026-02-30T10:{:02}:00Z\"", i % 60),
        3 => format!("\"2026-11-\\u00305T10:{:02}:{:02}Z\"", i % 60, i % 61),
        _ => format!(
            "\"20{:02}-{:02}-{:02}T{:02}:{:02}:{:02}.25+01:00\"",
            i % 100,
            1 + i % 12,
            1 + i % 28,
            i % 24,
            i % 60,
            i % 61
        ),
    };
    let mut records = Vec::new();
    for i in 0..30_000u32 {
        let record = match i % 3 {
            0 => format!(
                "{{\"id\":{},\"{}\":{},\"role\":\"user\",\"n\":[{},{},{}],\"o\":{{\"k\":{}}},\"s\":\"a \\\"b\\\" c\"}}",
                pick(&mut roll, &numbers),
                pick(&mut roll, &keys),
                stamp(&mut roll, i),
                pick(&mut roll, &numbers),
                pick(&mut roll, &trues),
                pick(&mut roll, &nulls),
                pick(&mut roll, &numbers),
            ),
            1 => format!(
                "[{},{{\"a\":{}}},\"x\"]",
                pick(&mut roll, &numbers),
                pick(&mut roll, &falses)
            ),
            // A nested `ts` that is not the record's.
            _ => format!(
                "{{\"{}\":{},\"t\":{},\"nested\":{{\"ts\":{}}}}}",
                pick(&mut roll, &keys),
                stamp(&mut roll, i),
                pick(&mut roll, &trues),
                stamp(&mut roll, i + 7_777),
            ),
        };
        let mut record = record.into_bytes();
        if i % 11 == 0 {
            let pos = (i as usize * 7919) % record.len();
            record[pos] = alphabet[i as usize % alphabet.len()];
        }
        record.push(if i % 5 == 0 { RECORD_SEPARATOR } else { b'\n' });
        records.push(record);
    }
    for level in levels() {
        // Counted a few records at a time by one pass that keeps the
        // shapes it learnt, each run held to the byte scanner: a
        // timestamp read from the wrong place moves its run's span.
        let mut structural = Structural::at_level(level);
        let (mut valid, mut failed) = (0, 0);
        for run in records.chunks(4).map(|run| run.concat()) {
            let mut stats = RecordStats::default();
            structural.count_run(&run, &mut stats, &mut RecordScanner::default());
            let expected = by_segments(&run);
            assert_eq!(
                stats,
                expected,
                "{level:?} {:?}",
                String::from_utf8_lossy(&run)
            );
            failed += expected.failed_count;
            valid += expected.record_count - expected.failed_count;
        }
        assert!(
            failed > 1_000 && valid > 1_000,
            "{valid} valid, {failed} failed"
        );
        // Most records were taken by their shape, not walked.
        assert!(
            structural.shapes.matched > 10_000,
            "{level:?}: {} records matched a shape",
            structural.shapes.matched
        );
    }
}

#[test]
fn shapes_rest_while_records_repeat_none_and_come_back_when_they_do() {
    if no_vectors() {
        return;
    }
    // 300 records of shapes all different (arrays of 1 to 300 numbers),
    // then 1,000 of one shape.
    let mut run = Vec::new();
    for i in 1..=300 {
        let numbers = vec!["1"; i].join(",");
        run.extend_from_slice(format!("{{\"n\":[{numbers}]}}\n").as_bytes());
    }
    for i in 0..1_000 {
        run.extend_from_slice(format!("{{\"id\":{i},\"ts\":{}}}\n", 1_767_225_600 + i).as_bytes());
    }
    for level in levels() {
        let mut structural = Structural::at_level(level);
        let mut stats = RecordStats::default();
        structural.count_run(&run, &mut stats, &mut RecordScanner::default());
        assert_eq!(stats, by_segments(&run), "{level:?}");
        // Tried again within a few dozen records of the repeating ones.
        assert!(
            structural.shapes.matched > 900,
            "{level:?}: {} matched",
            structural.shapes.matched
        );
    }
}
