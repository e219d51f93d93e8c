//! pchronicle: a trajectory warehouse shown as a read-only filesystem.
//!
//! The crate is layered, and a module imports only modules of its own
//! layer or below, so each layer can be read, tested and changed knowing
//! nothing of those above it (lowest first):
//!
//! 0. [`error`] (the stable error codes), [`warehouse`] (every access below
//!    the root, through open directories, never following a symlink),
//!    [`atomic`] (replace-by-rename), [`logbudget`] (warnings logged within
//!    a budget a minute), [`terminal`] (text shown escaped, never
//!    interpreted by a terminal), [`records`] (record file formats and
//!    counting), `remote` (warehouses on S3-compatible object storage,
//!    behind the same directory surface), [`work`] (the budget and the
//!    cancel every file read of a request's work honours);
//! 1. [`sidecar`]: the point-lookup index of one record file;
//! 2. [`store`]: the physical leaf layouts (compact-jsonl on Lance,
//!    storyline) and the leaf manifest `chronicle.manifest`; [`shards`]:
//!    the sealed-shard writer;
//! 3. [`catalog`]: the core. Classification, `list`, `open`, `stats`, the
//!    refresh cache and the count cache; it knows nothing of FUSE or of
//!    the command line;
//! 4. [`extract`]: the records of a Snapshot out, as JSON Lines, filtered
//!    and resumable; [`query`]: SQL over a Snapshot's records and sources;
//!    `distributed`: the same reads and queries spread over workers;
//! 5. [`fs`] (the FUSE adapter), `web` (`pchronicle serve`: the JSON API
//!    and the pages), [`cli`] and [`demo`]: they translate calls into the
//!    layers below and present what those return.
//!
//! A unit test (`layering`, below) reads every source file and fails on
//! an import that points up.

pub mod atomic;
pub mod catalog;
pub mod cli;
pub mod demo;
#[cfg(feature = "distributed")]
pub mod distributed;
pub mod error;
pub mod extract;
pub mod fs;
pub mod heap;
pub mod logbudget;
pub mod logging;
pub mod query;
pub mod records;
#[cfg(feature = "remote")]
pub mod remote;
#[cfg(any(feature = "serve", feature = "distributed"))]
pub mod server;
pub mod shards;
pub mod sidecar;
pub mod store;
pub mod terminal;
pub mod warehouse;
#[cfg(feature = "serve")]
pub mod web;
pub mod work;

pub use error::{Error, ErrorCode, Result};

/// The layers above, enforced: every `crate::<module>` path in `src/`
/// (and every `super::` path that climbs to the crate root) must name a
/// module of the same layer as the file or a lower one.
#[cfg(test)]
mod layering {
    use std::path::{Path, PathBuf};

    /// Each top-level module and its layer, lowest first. A new module
    /// must be placed here, or the check fails.
    const LAYERS: &[(&str, u8)] = &[
        ("error", 0),
        ("warehouse", 0),
        ("atomic", 0),
        ("logbudget", 0),
        ("logging", 0),
        ("records", 0),
        ("terminal", 0),
        ("remote", 0),
        ("work", 0),
        ("heap", 0),
        ("server", 0),
        ("sidecar", 1),
        ("store", 2),
        ("shards", 2),
        ("catalog", 3),
        ("extract", 4),
        ("query", 4),
        ("distributed", 4),
        ("fs", 5),
        ("cli", 5),
        ("demo", 5),
        ("web", 5),
    ];

    fn layer_of(module: &str) -> Option<u8> {
        LAYERS
            .iter()
            .find(|(name, _)| *name == module)
            .map(|(_, layer)| *layer)
    }

    fn is_ident(c: char) -> bool {
        c.is_alphanumeric() || c == '_'
    }

    /// Whether the `r` at `chars[i]` starts a word, or follows a `b` that
    /// does (`br"…"`): then it may open a raw string.
    fn raw_prefix(chars: &[char], i: usize) -> bool {
        let starts_word = |at: usize| at == 0 || !is_ident(chars[at - 1]);
        starts_word(i) || (i > 0 && chars[i - 1] == 'b' && starts_word(i - 1))
    }

    /// The source with comments and the contents of string and character
    /// literals blanked (line breaks kept), so that only code is searched.
    fn code_only(source: &str) -> String {
        let chars: Vec<char> = source.chars().collect();
        let mut out = String::with_capacity(source.len());
        let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            if c == '/' && next == Some('/') {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            } else if c == '/' && next == Some('*') {
                // Block comments nest in Rust.
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, chars[i]);
                        i += 1;
                    }
                }
            } else if c == 'r' && raw_prefix(&chars, i) && matches!(next, Some('"' | '#')) {
                // A raw string: r"…", r#"…"#; ends at `"` and as many `#`.
                let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                if chars.get(i + 1 + hashes) != Some(&'"') {
                    out.push(c);
                    i += 1;
                    continue;
                }
                out.push(c);
                i += 2 + hashes;
                while i < chars.len() {
                    let closes = chars[i] == '"'
                        && chars[i + 1..].iter().take_while(|&&h| h == '#').count() >= hashes;
                    if closes {
                        i += 1 + hashes;
                        break;
                    }
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            } else if c == '"' {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    if let Some(&c) = chars.get(i) {
                        blank(&mut out, c);
                    }
                    i += 1;
                }
                i += 1;
            } else if c == '\'' && next == Some('\\') {
                // An escaped character literal: '\n', '\'', '\u{1e}'.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                // Code, a lifetime's quote included.
                out.push(c);
                i += 1;
            }
        }
        out
    }

    /// The first identifier of each path at the top level of a `{…}` group
    /// starting at `chars[at]`, or the identifier at `at`.
    fn first_idents(chars: &[char], mut at: usize) -> Vec<String> {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        let ident_at =
            |at: usize| -> String { chars[at..].iter().take_while(|&&c| is_ident(c)).collect() };
        if chars.get(at) != Some(&'{') {
            return vec![ident_at(at)];
        }
        let mut names = Vec::new();
        let (mut depth, mut expect_name) = (0, true);
        for (j, &c) in chars.iter().enumerate().skip(at) {
            match c {
                '{' => {
                    depth += 1;
                    expect_name = depth == 1;
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => expect_name = true,
                c if expect_name && is_ident(c) => {
                    names.push(ident_at(j));
                    expect_name = false;
                }
                c if expect_name && !c.is_whitespace() => expect_name = false,
                _ => {}
            }
        }
        names
    }

    /// The crate-root names that the code of a module at depth `depth`
    /// (`catalog` is 1, `catalog::counts` 2) refers to, with their lines.
    fn root_refs(code: &str, depth: usize) -> Vec<(usize, String)> {
        let chars: Vec<char> = code.chars().collect();
        let word_at = |i: usize, word: &str| {
            let n = word.chars().count();
            chars.len() >= i + n
                && chars[i..i + n].iter().copied().eq(word.chars())
                && (i == 0 || !is_ident(chars[i - 1]))
        };
        let mut refs = Vec::new();
        let mut line = 1;
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '\n' {
                line += 1;
            }
            let start = if word_at(i, "crate::") {
                Some(i + "crate::".len())
            } else if word_at(i, "super::") && (i < 2 || chars[i - 2..i] != [':', ':']) {
                // A chain of `super::` that climbs to the crate root.
                let mut at = i;
                let mut climbs = 0;
                while word_at(at, "super::") {
                    at += "super::".len();
                    climbs += 1;
                }
                (climbs >= depth).then_some(at)
            } else {
                None
            };
            if let Some(start) = start {
                for name in first_idents(&chars, start) {
                    refs.push((line, name));
                }
            }
            i += 1;
        }
        refs
    }

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_module_imports_a_higher_layer() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        files.sort();
        let mut violations = Vec::new();
        for file in &files {
            let rel = file.strip_prefix(&src).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            // The crate root and the binary declare modules; they import
            // none of the crate's own.
            if module == ["lib"] || module == ["main"] {
                continue;
            }
            let shown = Path::new("src").join(rel);
            let Some(own) = layer_of(&module[0]) else {
                violations.push(format!(
                    "{}: the module `{}` has no layer in LAYERS",
                    shown.display(),
                    module[0]
                ));
                continue;
            };
            let code = code_only(&std::fs::read_to_string(file).unwrap());
            for (line, name) in root_refs(&code, module.len()) {
                match layer_of(&name) {
                    Some(layer) if layer > own => violations.push(format!(
                        "{}:{line}: `{}` (layer {own}) imports `crate::{name}` (layer {layer})",
                        shown.display(),
                        module[0]
                    )),
                    _ => {}
                }
            }
        }
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }

    #[test]
    fn references_are_found_in_code_only() {
        let source = r##"use crate::{store::x, catalog};
            // crate::fs in a comment
            /* crate::cli /* nested */ crate::demo */
            let a = "crate::cli \" crate::fs"; let b = r#"crate::fs"#;
            let c = '"'; fn f<'a>(x: &'a str) { crate::sidecar::covers(x) }
            use super::super::records::X;
            use super::local;"##;
        let refs = root_refs(&code_only(source), 2);
        let names: Vec<(usize, &str)> = refs.iter().map(|(l, n)| (*l, n.as_str())).collect();
        assert_eq!(
            names,
            [(1, "store"), (1, "catalog"), (5, "sidecar"), (6, "records")]
        );
    }
}
