use super::collect::KeyFinder;
use super::*;
use crate::records::structural::{Level, Structural};
use crate::sidecar::format::KeyValue;

/// What a record's key is by way of `serde_json::Value`: the
/// reference the scanner-based reading must agree with.
fn by_serde(text: &[u8], key: &[&str]) -> std::result::Result<Option<Vec<KeyValue>>, String> {
    use serde_json::Value;
    let Ok(value) = serde_json::from_slice::<Value>(text) else {
        return Err("failed".into());
    };
    let Some(object) = value.as_object() else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for name in key {
        let v = match object.get(*name).unwrap_or(&Value::Null) {
            Value::Null => return Ok(None),
            Value::String(s) => KeyValue::String(s.clone()),
            Value::Bool(b) => KeyValue::Boolean(*b),
            Value::Number(n) => match n.as_i64() {
                Some(n) => KeyValue::Integer(n),
                None => return Err(format!("unkeyable {name}")),
            },
            _ => return Err(format!("unkeyable {name}")),
        };
        out.push(v);
    }
    Ok(Some(out))
}

fn by_scanner(text: &[u8], key: &[&str]) -> std::result::Result<Option<Vec<KeyValue>>, String> {
    let mut finder = KeyFinder::new(key.len());
    match finder.find(key, text) {
        None => return Err("failed".into()),
        Some(false) => return Ok(None),
        Some(true) => {}
    }
    let mut out = Vec::new();
    for (i, name) in key.iter().enumerate() {
        match finder.value(i, text) {
            Ok(Some(v)) => out.push(v.into_owned()),
            Ok(None) => return Ok(None),
            Err(_) => return Err(format!("unkeyable {name}")),
        }
    }
    Ok(Some(out))
}

#[test]
fn ranges_collected_on_threads_merge_into_the_serial_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let mut text = String::new();
    for i in 0..5_000 {
        match i % 97 {
            0 => text.push_str("{\"torn\":\n"),
            1 => text.push_str("[1,2]\u{1e}"),
            2 => text.push_str("{\"k\":null}\n"),
            _ => {}
        }
        text.push_str(&format!("{{\"k\":\"s-{}\",\"n\":{}}}\n", i % 37, i % 5));
    }
    std::fs::write(&path, &text).unwrap();
    let file = Blob::Local(File::open(&path).unwrap());
    let size = text.len() as u64;
    let key = vec!["k".to_string(), "n".to_string()];
    let (serial, digest, len) = collect_serial(file.reader_at(0), size, &key, &path).unwrap();
    for threads in [2, 3, 7] {
        let (parallel, pdigest, plen) = collect_parallel(&file, size, threads, &key, &path)
            .unwrap()
            .expect("nothing refuses this build");
        assert_eq!((pdigest, plen), (digest, len));
        assert_eq!(parallel.locators, serial.locators, "{threads} threads");
        assert_eq!(
            parallel.keyed.into_entries(),
            serial.keyed.clone().into_entries()
        );
        assert_eq!(parallel.types, serial.types);
        assert_eq!(
            (parallel.indexed, parallel.unkeyed, parallel.failed),
            (serial.indexed, serial.unkeyed, serial.failed)
        );
    }
    // A key field whose type changes, and an unkeyable value: the
    // threads hand over to the serial pass, which names the record.
    for (bad, why) in [
        ("{\"k\":7,\"n\":1}\n", "Integer"),
        ("{\"k\":[1],\"n\":1}\n", "an array"),
    ] {
        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, format!("{text}{bad}")).unwrap();
        let file = Blob::Local(File::open(&path).unwrap());
        let size = file.size().unwrap();
        assert!(
            collect_parallel(&file, size, 3, &key, &path)
                .unwrap()
                .is_none()
        );
        let err = build(&path, &key).unwrap_err();
        assert_eq!(err.code, ErrorCode::IndexKeyUnkeyable);
        assert!(
            err.message.contains(why)
                && err
                    .message
                    .contains(&format!("record {}", serial.locators.len() + 1)),
            "{}",
            err.message
        );
    }
}

#[test]
fn key_fields_read_by_the_scanner_agree_with_serde_json() {
    let key = ["k", "n"];
    let values = [
        r#""a""#,
        r#""a,b""#,
        r#""\u00e9\"x""#,
        r#""é""#,
        "0",
        "-0",
        "-1",
        "12",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "1.0",
        "1e2",
        "1E-2",
        "true",
        "false",
        "null",
        "[]",
        "[1]",
        "{}",
        r#"{"k":1}"#,
    ];
    let mut cases: Vec<String> = Vec::new();
    for k in values {
        for n in values {
            cases.push(format!(r#"{{"k":{k},"n":{n}}}"#));
            cases.push(format!(r#"{{ "n" : {n} , "other":[{k}], "k" : {k} }}"#));
        }
        cases.push(format!(r#"{{"k":{k}}}"#));
        cases.push(format!(r#"{{"k":1,"n":2,"k":{k}}}"#));
        cases.push(format!(r#"{{"\u006b":{k},"n":3}}"#));
        cases.push(format!(r#"[{{"k":{k},"n":1}}]"#));
        cases.push(format!(r#"{{"k":{k},"n":1"#));
        cases.push(format!(r#"{{"x":{{"k":{k},"n":1}}}}"#));
    }
    cases.extend(["", "1", "\"s\"", "{}", "{\"k\":\"\u{7}\"}", "{\"k\":1,}"].map(String::from));
    for case in &cases {
        assert_eq!(
            by_scanner(case.as_bytes(), &key),
            by_serde(case.as_bytes(), &key),
            "{case}"
        );
    }
    let invalid_utf8 = b"{\"k\":\"\xff\",\"n\":1}";
    assert_eq!(by_scanner(invalid_utf8, &key), by_serde(invalid_utf8, &key));
}

#[test]
fn a_record_too_large_to_buffer_is_located_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let cohort = dir.path().join("big.jsonl");
    let big = format!("{{\"id\":2,\"pad\":\"{}\"}}", "x".repeat(17 << 20));
    let text = format!(" {{\"id\":1}}\n{big}\u{1e}{{\"id\":3}}\n{{\"id\":\n");
    std::fs::write(&cohort, &text).unwrap();
    let key = vec!["id".to_string()];
    let report = build(&cohort, &key).unwrap();
    assert_eq!((report.rows, report.indexed, report.failed), (4, 3, 1));
    let found = |id: &str| super::super::lookup::lookup(&cohort, &key, &[id.to_string()]).unwrap();
    assert_eq!(found("1"), vec![b"{\"id\":1}".to_vec()]);
    assert_eq!(found("2"), vec![big.into_bytes()]);
    assert_eq!(found("3"), vec![b"{\"id\":3}".to_vec()]);
}

/// Everything an index is built from, as one collector made it, or the
/// message of the refusal that stopped it.
type Collected = std::result::Result<
    (
        Vec<crate::sidecar::format::Locator>,
        Vec<(Vec<u8>, Vec<u64>)>,
        Vec<Option<KeyType>>,
        [u64; 3],
    ),
    String,
>;

/// What a collector makes of `text` through the segment splitter, with
/// the vector walk at `level` or (`None`) the byte scanner alone.
fn collected(text: &[u8], key: &[String], level: Option<Level>) -> Collected {
    let path = Path::new("c.jsonl");
    let mut collector = Collector::new(key, path, 0);
    collector.structural = level.map(|level| Box::new(Structural::at_level(level)));
    match for_each_segment_sized(text, text.len(), &mut collector) {
        Ok(()) => Ok((
            collector.locators,
            collector.keyed.into_entries().sorted(),
            collector.types,
            [collector.indexed, collector.unkeyed, collector.failed],
        )),
        Err(e) => Err(collector
            .refusal
            .map_or_else(|| e.to_string(), |refusal| refusal.message)),
    }
}

/// Records of many kinds whose `k` fields hold one of `values` (so of
/// one type, unless `values` mixes them): repeated shapes, reordered and
/// repeated keys, escaped keys, non-objects, torn and invalid records,
/// blank and padded segments, both separators, and one record longer
/// than the vector walk's window.
fn cohort_of(values: &[&str]) -> Vec<u8> {
    let mut text = String::new();
    for (i, v) in values.iter().cycle().take(values.len() * 6).enumerate() {
        let n = i % 5;
        let record = match i % 11 {
            0 => format!(r#"{{ "n" : {n} , "other":[{v}], "k" : {v} }}"#),
            1 => format!(r#"{{"\u006b":{v},"n":{n}}}"#),
            2 => format!(r#"{{"k":{v},"n":2,"k":{v}}}"#),
            3 => format!(r#"[{{"k":{v},"n":{n}}}]"#),
            4 => format!(r#"{{"k":{v},"n":{n}"#),
            5 => format!(r#"{{"x":{{"k":{v}}},"n":{n}}}"#),
            6 => format!("\u{c} {{\"k\":{v},\"n\":{n}}}\u{c}"),
            7 => format!("{{\"k\":{v},\"n\":{n},\"s\":\"\u{7}\"}}"),
            8 => format!(r#"{{"k":{v},"n":{n},"t":"é\"\\"}}"#),
            _ => format!(r#"{{"k":{v},"n":{n},"ts":"2026-11-30T10:00:00Z"}}"#),
        };
        text.push_str(&record);
        text.push_str(match i % 7 {
            0 => "\u{1e}",
            1 => "\n  \r\n",
            _ => "\n",
        });
        if i == values.len() * 3 {
            let pad = "p".repeat(70 << 10);
            text.push_str(&format!("{{\"pad\":\"{pad}\",\"k\":{v},\"n\":1}}\n"));
        }
    }
    text.into_bytes()
}

#[test]
fn the_vector_walk_collects_what_the_byte_scanner_does() {
    let levels = Level::here();
    if levels.is_empty() {
        eprintln!("this CPU has no vector walk: only the byte scanner is checked");
    }
    let key = vec!["k".to_string(), "n".to_string()];
    let strings = [r#""a""#, r#""a,b""#, r#""\u00e9\"x""#, r#""é""#, r#""s-1""#];
    let integers = [
        "0",
        "-1",
        "12",
        "9223372036854775807",
        "-9223372036854775808",
    ];
    let booleans = ["true", "false", "null"];
    let refusing = [
        "1.0",
        "1e2",
        "-0",
        "9223372036854775808",
        "[]",
        "{}",
        r#"{"k":1}"#,
    ];
    let mut cohorts: Vec<Vec<u8>> = [&strings[..], &integers, &booleans]
        .iter()
        .map(|values| cohort_of(values))
        .collect();
    cohorts.push(cohort_of(&["1", r#""a""#]));
    for bad in refusing {
        cohorts.push(cohort_of(&["1", "2", bad]));
    }
    let base = cohort_of(&strings);
    let mut next = crate::records::structural::tests::xorshift(0x9e37_79b9_7f4a_7c15);
    let bytes = b"\"\\{}[],:\n\x1e0 x\xffe-.\x0c\r\t\xc3\xa9";
    for _ in 0..400 {
        let mut mutated = base.clone();
        for _ in 0..1 + next() % 3 {
            let at = (next() % mutated.len() as u64) as usize;
            mutated[at] = bytes[(next() % bytes.len() as u64) as usize];
        }
        cohorts.push(mutated);
    }
    let (mut refused, mut kept) = (0, 0);
    for text in &cohorts {
        let by_bytes = collected(text, &key, None);
        match &by_bytes {
            Ok((_, entries, _, [indexed, _, failed])) => {
                assert!(*indexed > 0 && !entries.is_empty() && *failed > 0);
                kept += 1;
            }
            Err(_) => refused += 1,
        }
        for &level in &levels {
            assert_eq!(
                collected(text, &key, Some(level)),
                by_bytes,
                "{level:?}: {}",
                String::from_utf8_lossy(text)
            );
        }
    }
    assert!(
        kept > 100 && refused > refusing.len(),
        "{kept} kept, {refused} refused"
    );
}
