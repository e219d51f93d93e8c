//! The docs say what the code does: every error code and fix-up appears in
//! docs/errors.md, and every JSON field the CLI prints is documented in
//! docs/cli.md.

use pchronicle::error::ErrorCode;

fn doc(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs")
            .join(name),
    )
    .unwrap()
}

#[test]
fn errors_doc_lists_every_code_with_its_fixup() {
    let text = doc("errors.md");
    for code in ErrorCode::ALL {
        assert!(
            text.contains(&format!("## `{code}`")),
            "{code} is not documented"
        );
        assert!(
            text.contains(code.fixup()),
            "the fix-up of {code} differs from docs/errors.md"
        );
    }
}

#[test]
fn cli_doc_names_every_json_field() {
    let text = doc("cli.md");
    let w = crate::support::Warehouse::new();
    w.file("d=1/a.jsonl", "{\"id\":1}\n")
        .storyline("s", 1)
        .file("bad\u{1}/x", "");
    pchronicle::sidecar::build_index(&w.abs("d=1/a.jsonl"), &["id".to_string()]).unwrap();
    let catalog = w.catalog();
    let path = std::path::Path::new(".");
    let mut values: Vec<serde_json::Value> = vec![
        serde_json::from_str(&catalog.list(path).unwrap().to_json()).unwrap(),
        serde_json::from_str(&catalog.stats(path).unwrap().to_json()).unwrap(),
    ];
    for line in catalog.open(path).unwrap().sources_jsonl().lines() {
        values.push(serde_json::from_str(line).unwrap());
    }
    // `runs --json`, with a run that carries usage.
    w.file(
        "u.jsonl",
        "{\"role\":\"assistant\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}\n",
    );
    let runs = crate::support::pchronicle(&["runs", w.path().to_str().unwrap(), "--json"]);
    values.push(serde_json::from_str(&crate::support::stdout(&runs)).unwrap());
    let mut keys = std::collections::BTreeSet::new();
    while let Some(value) = values.pop() {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    // Format names and path attribute keys are data, not fields.
                    if !k.contains('/') && !["jsonl", "d"].contains(&k.as_str()) {
                        keys.insert(k);
                    }
                    values.push(v);
                }
            }
            serde_json::Value::Array(items) => values.extend(items),
            _ => {}
        }
    }
    for key in keys {
        assert!(
            text.contains(&format!("`{key}`")),
            "docs/cli.md does not document the field `{key}`"
        );
    }
}

#[test]
fn completions_and_manual_pages_come_from_the_command_definition() {
    use crate::support::{pchronicle, stdout};
    let bash = stdout(&pchronicle(&["completions", "bash"]));
    assert!(bash.contains("complete -F _pchronicle"), "{bash}");
    for flag in ["refresh", "--attr-ttl", "--negative-ttl", "completions"] {
        assert!(bash.contains(flag), "bash completes {flag}");
    }
    // The script is valid bash and registers the completion.
    let registered = std::process::Command::new("bash")
        .arg("-c")
        .arg("source /dev/stdin && complete -p pchronicle")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(bash.as_bytes())?;
            child.wait_with_output()
        })
        .expect("bash runs");
    assert!(
        String::from_utf8_lossy(&registered.stdout).contains("_pchronicle"),
        "{registered:?}"
    );
    assert!(stdout(&pchronicle(&["completions", "zsh"])).starts_with("#compdef pchronicle"));
    assert!(stdout(&pchronicle(&["completions", "fish"])).contains("complete -c pchronicle"));
    assert_eq!(pchronicle(&["completions", "tcsh"]).status.code(), Some(2));

    let page = stdout(&pchronicle(&["man"]));
    assert!(page.contains(".TH pchronicle 1"), "{page}");
    assert!(page.contains("refresh"));
    let mount = stdout(&pchronicle(&["man", "mount"]));
    assert!(
        mount.contains(".TH pchronicle\\-mount 1") || mount.contains(".TH pchronicle-mount 1"),
        "{mount}"
    );
    assert!(
        mount.contains("negative\\-ttl") && mount.contains("pchronicle 0."),
        "{mount}"
    );
    assert_eq!(pchronicle(&["man", "nope"]).status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    stdout(&pchronicle(&["man", "--dir", dir.path().to_str().unwrap()]));
    for page in [
        "pchronicle.1",
        "pchronicle-mount.1",
        "pchronicle-index-build.1",
    ] {
        assert!(dir.path().join(page).is_file(), "{page}");
    }
}
