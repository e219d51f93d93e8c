//! `.records` through the kernel: the bytes of `pchronicle cat LEAF`, read
//! by the tools people use on JSON Lines.

use std::ffi::OsStr;
use std::os::unix::fs::FileExt;
use std::process::Command;

use crate::harness::{Mounted, run};
use crate::tree::demo_warehouse;

/// The dataset leaves of the demo warehouse this build reads records of,
/// by their `.sources`.
fn demo_leaves(wh: &std::path::Path) -> Vec<String> {
    let out = run(&[
        OsStr::new("ls"),
        OsStr::new("--sources"),
        OsStr::new("--json"),
        wh.as_os_str(),
    ]);
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|s| s["kind"] == "dataset")
        .filter(|s| s["format"] == "storyline/v1" || s["format"] == "compact-jsonl/v1")
        .map(|s| s["_file_"].as_str().unwrap().to_string())
        .collect()
}

fn shell(script: &str, file: &std::path::Path) -> Vec<u8> {
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn records_reads_as_cat_with_every_line_tool() {
    let wh = demo_warehouse();
    let Some(m) = Mounted::start(wh.path(), &[]) else {
        return;
    };
    let leaves = demo_leaves(wh.path());
    assert!(leaves.len() >= 2, "{leaves:?}");
    for leaf in leaves {
        let cat = run(&[OsStr::new("cat"), wh.path().join(&leaf).as_os_str()]);
        assert!(cat.status.success());
        let want = cat.stdout;
        assert!(!want.is_empty(), "{leaf}");
        let lines: Vec<&[u8]> = want.split_inclusive(|b| *b == b'\n').collect();
        let path = m.at(&format!("{leaf}/.records"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "{leaf}: size");
        assert!(std::fs::read(&path).unwrap() == want, "{leaf}: read");
        assert!(shell("cat \"$1\"", &path) == want, "{leaf}: cat");
        assert_eq!(
            shell("head -n 2 \"$1\"", &path),
            lines[..2.min(lines.len())].concat()
        );
        let tail_from = lines.len().saturating_sub(3);
        assert_eq!(
            shell("tail -n 3 \"$1\"", &path),
            lines[tail_from..].concat(),
            "{leaf}: tail"
        );
        assert_eq!(
            String::from_utf8(shell("wc -l < \"$1\"", &path))
                .unwrap()
                .trim(),
            lines.len().to_string()
        );
        let grep = shell("grep -c . \"$1\" || true", &path);
        assert_eq!(
            String::from_utf8(grep).unwrap().trim(),
            lines.len().to_string()
        );
        // jq parses every line; its compact output has one line each.
        let jq = shell("jq -c . \"$1\" | wc -l", &path);
        assert_eq!(
            String::from_utf8(jq).unwrap().trim(),
            lines.len().to_string()
        );
        let python = shell(
            "python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l) is not None))' \"$1\"",
            &path,
        );
        assert_eq!(
            String::from_utf8(python).unwrap().trim(),
            lines.len().to_string()
        );
        // Reads at any offset, through the kernel, equal slices of cat.
        let file = std::fs::File::open(&path).unwrap();
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let offset = (state % (want.len() as u64 + 100)) as usize;
            let mut buf = vec![0u8; 1 + (state >> 40) as usize % 70_000];
            let mut got = 0;
            while got < buf.len() {
                let n = file
                    .read_at(&mut buf[got..], (offset + got) as u64)
                    .unwrap();
                if n == 0 {
                    break;
                }
                got += n;
            }
            let start = offset.min(want.len());
            let end = (offset + buf.len()).min(want.len());
            assert!(buf[..got] == want[start..end], "{leaf}: pread at {offset}");
        }
    }
}
