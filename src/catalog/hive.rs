//! Hive-style path attributes: `key=value` directory segments.
//!
//! Every directory segment between an opened path and a source may carry
//! attributes: `date=2026-11-01`, or several joined by `__`
//! (`date=2026-11-01__agent=codex`). The source's own name is never parsed:
//! a file extension cannot be told apart from a value that ends in one.
//! Values are kept as text, never type-inferred. Keys starting with `_` are
//! reserved (so a segment cannot forge `_file_`) and parts without `=` or
//! with an empty key are ignored. A deeper segment overrides a shallower one
//! for the same key, since renaming the nearest directory is how a user
//! corrects metadata.

use std::collections::BTreeMap;

/// Adds the attributes of one directory segment to `attrs`.
pub fn merge_segment(attrs: &mut BTreeMap<String, String>, segment: &str) {
    for part in segment.split("__") {
        if let Some((key, value)) = part.split_once('=') {
            if !key.is_empty() && !key.starts_with('_') {
                attrs.insert(key.to_string(), value.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(segments: &[&str]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for s in segments {
            merge_segment(&mut out, s);
        }
        out
    }

    #[test]
    fn pairs_joined_by_double_underscore() {
        let a = attrs(&["date=2026-11-01__agent=codex"]);
        assert_eq!(a["date"], "2026-11-01");
        assert_eq!(a["agent"], "codex");
    }

    #[test]
    fn plain_reserved_and_empty_keys_are_ignored() {
        assert!(attrs(&["team", "_file_=x", "=v", "__"]).is_empty());
    }

    #[test]
    fn values_keep_dots_equals_and_deeper_wins() {
        let a = attrs(&["k=XX.R2D1..RAW", "expr=a=b", "k=deeper"]);
        assert_eq!(a["k"], "deeper");
        assert_eq!(a["expr"], "a=b");
        assert_eq!(attrs(&["v="])["v"], "");
    }
}
