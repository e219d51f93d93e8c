//! Shell tools read the mount as a user expects: `cat`, `head -c`,
//! `wc -c`, `python3`, `jq`, `ls -la`, `find`, `du`, and `mmap`.

use std::ffi::OsStr;
use std::process::Command;

use crate::harness::{Mapping, Mounted, run};
use crate::tree::{demo_warehouse, mount_tree};

fn sh(program: &str, args: &[&OsStr]) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn shell_tools_read_synthetic_files_in_full() {
    let wh = demo_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    for rel in [
        ".stats",
        ".sources",
        "team/.stats",
        "team/codex_jsonl/.sources",
        "sessions/.stats",
    ] {
        let path = m.at(rel);
        let p = path.as_os_str();
        let expected = if rel.ends_with(".stats") {
            run(&[
                OsStr::new("stats"),
                OsStr::new("--json"),
                wh.path().join(rel).parent().unwrap().as_os_str(),
            ])
            .stdout
        } else {
            run(&[
                OsStr::new("ls"),
                OsStr::new("--sources"),
                OsStr::new("--json"),
                wh.path().join(rel).parent().unwrap().as_os_str(),
            ])
            .stdout
        };
        assert!(!expected.is_empty());
        assert_eq!(sh("cat", &[p]), expected, "cat {rel}");
        assert_eq!(
            sh("head", &[OsStr::new("-c"), OsStr::new("7"), p]),
            expected[..7],
            "head -c {rel}"
        );
        let wc = String::from_utf8(sh("wc", &[OsStr::new("-c"), p])).unwrap();
        assert_eq!(
            wc.split_whitespace().next().unwrap(),
            expected.len().to_string(),
            "wc -c {rel}"
        );
        let py = sh(
            "python3",
            &[
                OsStr::new("-c"),
                OsStr::new("import sys; sys.stdout.write(open(sys.argv[1]).read())"),
                p,
            ],
        );
        assert_eq!(py, expected, "python3 read() {rel}");
        if rel.ends_with(".stats") {
            let count = sh("jq", &[OsStr::new(".record_count"), p]);
            assert!(
                String::from_utf8(count)
                    .unwrap()
                    .trim()
                    .parse::<u64>()
                    .is_ok(),
                "jq {rel}"
            );
        } else {
            sh("jq", &[OsStr::new("-c"), OsStr::new("._file_"), p]);
        }
        assert_eq!(Mapping::of(&path).bytes(), expected, "mmap {rel}");
    }
}

#[test]
fn ls_find_and_du_walk_the_mount() {
    let wh = demo_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let ls = String::from_utf8(sh("ls", &[OsStr::new("-la"), m.mnt.as_os_str()])).unwrap();
    for name in [
        ".stats",
        ".sources",
        "team",
        "runs",
        "sessions",
        "README.txt",
    ] {
        assert!(
            ls.lines().any(|l| l.ends_with(&format!(" {name}"))),
            "ls -la shows {name}:\n{ls}"
        );
    }
    let leaf = String::from_utf8(sh(
        "ls",
        &[OsStr::new("-la"), m.at("team/codex_jsonl").as_os_str()],
    ))
    .unwrap();
    assert!(
        !leaf.contains("_versions") && !leaf.contains("data"),
        "{leaf}"
    );
    let found: std::collections::BTreeSet<String> =
        String::from_utf8(sh("find", &[m.mnt.as_os_str()]))
            .unwrap()
            .lines()
            .filter_map(|l| {
                l.strip_prefix(&format!("{}/", m.mnt.display()))
                    .map(str::to_string)
            })
            .collect();
    assert_eq!(found, mount_tree(&m.mnt), "find sees what read_dir sees");
    let du = String::from_utf8(sh("du", &[OsStr::new("-sh"), m.mnt.as_os_str()])).unwrap();
    assert!(du.trim().ends_with(&m.mnt.display().to_string()), "{du}");
}
