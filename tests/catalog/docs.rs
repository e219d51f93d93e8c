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
