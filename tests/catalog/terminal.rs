//! What the CLI writes to a terminal: names, paths, warnings and query
//! cells planted in the warehouse are shown escaped, never interpreted,
//! while pipes, `--json` and `--csv` get the exact bytes. The terminal is
//! a real pseudo-terminal, made by `script` (util-linux).

use std::path::Path;
use std::process::Command;

use crate::support::{Warehouse, jsonl};

/// A name that retitles a terminal's window when printed raw.
const EVIL_NAME: &str = "evil\u{1b}]0;x\u{7}.jsonl";
/// A leaf directory whose warnings name it.
const EVIL_DIR: &str = "dir\u{1b}[2J\u{9b}31m\u{202e}";
/// A failed record that writes a terminal's clipboard when printed raw.
const CLIPBOARD: &str = "{\"osc\":\"\u{1b}]52;c;aGVsbG8=\u{7}\"";

fn hostile() -> Warehouse {
    let wh = Warehouse::new();
    wh.file(EVIL_NAME, jsonl(2, 1_767_225_600));
    wh.file(
        "failed.jsonl",
        format!("{}{CLIPBOARD}\n", jsonl(1, 1_767_225_600)),
    );
    // A leaf whose manifest does not parse: a warning that names it.
    wh.storyline(EVIL_DIR, 1);
    wh.manifest(EVIL_DIR, "not = [toml");
    wh
}

/// `pchronicle ARGS` with its standard output and error on a terminal:
/// what the terminal was sent (`None` when `script` is missing).
fn on_terminal(args: &[&str]) -> Option<Vec<u8>> {
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_pchronicle"))
        .chain(args.iter().copied())
        .map(|arg| format!("'{}'", arg.replace('\'', r"'\''")))
        .collect();
    let ran = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .env("RUST_LOG", "warn")
        .output();
    match ran {
        Ok(output) => Some(output.stdout),
        Err(e) => {
            eprintln!("skipping: no `script` to make a terminal with ({e})");
            None
        }
    }
}

/// `pchronicle ARGS` into pipes: standard output and error.
fn piped(args: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let output = Command::new(env!("CARGO_BIN_EXE_pchronicle"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (output.stdout, output.stderr)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// No byte a terminal acts on reached it: no ESC, BEL, C1 control or
/// bidirectional override.
fn assert_inert(sent: &[u8], what: &str) {
    let text = String::from_utf8_lossy(sent);
    let active: Vec<char> = text
        .chars()
        .filter(|c| matches!(c, '\u{1b}' | '\u{7}' | '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}'))
        .collect();
    assert!(active.is_empty(), "{what} sent {active:?}:\n{text}");
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn names_warnings_and_query_cells_reach_a_terminal_escaped() {
    let wh = hostile();
    let root = path(wh.path());
    let Some(ls) = on_terminal(&["ls", root]) else {
        return;
    };
    assert_inert(&ls, "ls");
    let shown = String::from_utf8_lossy(&ls);
    assert!(shown.contains(r"evil\e]0;x\a.jsonl"), "{shown}");
    // The warning on standard error names the leaf, escaped too.
    assert!(shown.contains("PCHRONICLE_MANIFEST_PARSE"), "{shown}");
    assert!(shown.contains(r"dir\e[2J\u{009b}31m\u{202e}"), "{shown}");

    for args in [
        vec!["ls", "--sources", root],
        vec!["stats", root],
        vec![
            "query",
            root,
            "SELECT _file_, record FROM records WHERE failed",
        ],
    ] {
        let sent = on_terminal(&args).unwrap();
        assert_inert(&sent, &format!("{args:?}"));
    }
    let query = on_terminal(&["query", root, "SELECT record FROM records WHERE failed"]).unwrap();
    let shown = String::from_utf8_lossy(&query);
    assert!(shown.contains(r#"\e]52;c;aGVsbG8=\a"#), "{shown}");

    // An error naming a path goes to the terminal escaped as well.
    let missing = format!("{root}/{EVIL_NAME}-gone");
    let error = on_terminal(&["stats", &missing]).unwrap();
    assert_inert(&error, "an error");
    assert!(String::from_utf8_lossy(&error).contains("PCHRONICLE_PATH_NOT_FOUND"));
}

#[test]
fn pipes_json_and_csv_keep_the_exact_bytes() {
    let wh = hostile();
    let root = path(wh.path());
    let (ls, warnings) = piped(&["ls", root]);
    assert!(contains(&ls, EVIL_NAME.as_bytes()), "{ls:?}");
    assert!(contains(&warnings, EVIL_DIR.as_bytes()), "{warnings:?}");

    let (json, _) = piped(&["ls", "--json", root]);
    let listing: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&EVIL_NAME), "{names:?}");

    let sql = "SELECT record FROM records WHERE failed";
    for format in [None, Some("--csv")] {
        let mut args = vec!["query", root, sql];
        args.extend(format);
        let (out, _) = piped(&args);
        assert!(
            contains(&out, "\u{1b}]52;c;aGVsbG8=\u{7}".as_bytes()),
            "{format:?}: {}",
            String::from_utf8_lossy(&out)
        );
    }
    let (json, _) = piped(&["query", root, sql, "--json"]);
    let row: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(row["record"].as_str().unwrap(), CLIPBOARD);
}
