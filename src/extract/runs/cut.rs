//! Caps on the lists a writer decides the length of.
//!
//! Roles come from record contents, facet keys and values from directory
//! names, histogram buckets from timestamps: a writer can make any of them
//! as long as it likes, and one answer drawn by a page must not grow with
//! it (runs, as many as a writer makes files, are answered a page at a
//! time instead: [`super::page`]). Each is
//! cut at a count, keeping the largest counts (ties: the earlier in the
//! list's own order, so an answer is the same on every read), and what was
//! cut is summed into one [`Other`], which a client reads beside the list,
//! never inside it (a real role may be named `other`). A value that is a
//! key (a role, a facet key or value) is cut at a length too, so one
//! megabyte-long role cannot make a megabyte answer; cut keys that then
//! read the same count together.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;

/// Roles, facet keys, and the values of one facet kept at most.
pub const VALUES_AT_MOST: usize = 100;
/// Histogram buckets kept at most (83 days of hours, 5 years of days).
pub const BUCKETS_AT_MOST: usize = 2_000;
/// Characters of a role, facet key or facet value kept; a longer one is
/// cut to these and ends in [`CUT_MARK`].
pub const KEY_CHARS_AT_MOST: usize = 200;
/// What a cut key ends in.
pub const CUT_MARK: char = '…';

/// What a cut list left out: how many entries, and their counts summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Other {
    /// Entries left out.
    pub values: u64,
    /// Their records.
    pub records: u64,
    /// Their failed records (buckets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
}

/// `text`, cut to [`KEY_CHARS_AT_MOST`] characters and [`CUT_MARK`] when
/// longer.
pub fn key(text: &str) -> Cow<'_, str> {
    // A character is at most four bytes: most keys are known short here.
    if text.len() <= KEY_CHARS_AT_MOST {
        return Cow::Borrowed(text);
    }
    match text.char_indices().nth(KEY_CHARS_AT_MOST) {
        None => Cow::Borrowed(text),
        Some((end, _)) => {
            let mut cut = String::with_capacity(end + CUT_MARK.len_utf8());
            cut.push_str(&text[..end]);
            cut.push(CUT_MARK);
            Cow::Owned(cut)
        }
    }
}

/// Keeps the `at_most` items of `items` with the largest `count`, ties
/// going to the earlier, in their order; answers the items left out.
pub fn keep_largest<T>(items: &mut Vec<T>, at_most: usize, count: impl Fn(&T) -> u64) -> Vec<T> {
    if items.len() <= at_most {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    // Stable: equal counts keep their order.
    order.sort_by_key(|&i| std::cmp::Reverse(count(&items[i])));
    let mut kept = vec![false; items.len()];
    for &i in &order[..at_most] {
        kept[i] = true;
    }
    let (keep, left_out): (Vec<_>, Vec<_>) = std::mem::take(items)
        .into_iter()
        .enumerate()
        .partition(|(i, _)| kept[*i]);
    *items = keep.into_iter().map(|(_, item)| item).collect();
    left_out.into_iter().map(|(_, item)| item).collect()
}

/// Keeps the `at_most` largest of `counts` (ties: the smaller key);
/// answers what the others add up to, `None` when none was left out.
pub fn keep_largest_counts(counts: &mut BTreeMap<String, u64>, at_most: usize) -> Option<Other> {
    if counts.len() <= at_most {
        return None;
    }
    let mut entries: Vec<(String, u64)> = std::mem::take(counts).into_iter().collect();
    let left_out = keep_largest(&mut entries, at_most, |e| e.1);
    *counts = entries.into_iter().collect();
    Some(Other {
        values: left_out.len() as u64,
        records: left_out.iter().map(|e| e.1).sum(),
        failed: None,
    })
}

/// What the lists of a runs answer left out: each member is there only
/// when its list was cut.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunsOther {
    /// Roles left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Other>,
    /// Per facet key whose values were cut: the values left out.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub facets: BTreeMap<String, Other>,
    /// Facet keys left out, `records` summing all their values' counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facet_keys: Option<Other>,
    /// The values of `model`, `agent` or `stop` left out (their
    /// `records` count runs).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reviewed: BTreeMap<&'static str, Other>,
}

impl RunsOther {
    /// Cuts the facets and roles of a runs summary (the runs themselves
    /// are answered a page at a time, never cut).
    pub fn cut(
        facets: &mut BTreeMap<String, BTreeMap<String, u64>>,
        roles: &mut BTreeMap<String, u64>,
    ) -> RunsOther {
        let mut other = RunsOther {
            roles: keep_largest_counts(roles, VALUES_AT_MOST),
            ..RunsOther::default()
        };
        for (key, values) in facets.iter_mut() {
            if let Some(cut) = keep_largest_counts(values, VALUES_AT_MOST) {
                other.facets.insert(key.clone(), cut);
            }
        }
        if facets.len() > VALUES_AT_MOST {
            let total = |key: &str, values: &BTreeMap<String, u64>| {
                values.values().sum::<u64>() + other.facets.get(key).map_or(0, |o| o.records)
            };
            let mut keys: Vec<(String, u64)> = facets
                .iter()
                .map(|(key, values)| (key.clone(), total(key, values)))
                .collect();
            let left_out = keep_largest(&mut keys, VALUES_AT_MOST, |k| k.1);
            for (key, _) in &left_out {
                facets.remove(key);
                other.facets.remove(key);
            }
            other.facet_keys = Some(Other {
                values: left_out.len() as u64,
                records: left_out.iter().map(|k| k.1).sum(),
                failed: None,
            });
        }
        other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_cut_at_a_character_and_marked() {
        assert_eq!(key("user"), "user");
        let exact = "é".repeat(KEY_CHARS_AT_MOST);
        assert_eq!(key(&exact), exact, "as long as allowed: kept whole");
        let long = "é".repeat(KEY_CHARS_AT_MOST + 1);
        let cut = key(&long);
        assert_eq!(cut.chars().count(), KEY_CHARS_AT_MOST + 1);
        assert!(cut.ends_with(CUT_MARK));
        assert!(cut.starts_with(&exact));
    }

    #[test]
    fn the_largest_counts_are_kept_ties_to_the_smaller_key() {
        let mut counts: BTreeMap<String, u64> = [("a", 1), ("b", 5), ("c", 1), ("d", 3), ("e", 1)]
            .into_iter()
            .map(|(k, n)| (k.to_string(), n))
            .collect();
        let other = keep_largest_counts(&mut counts, 3);
        let kept: Vec<(&str, u64)> = counts.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(kept, [("a", 1), ("b", 5), ("d", 3)]);
        assert_eq!(
            other,
            Some(Other {
                values: 2,
                records: 2,
                failed: None
            })
        );
        assert_eq!(
            keep_largest_counts(&mut counts, 3),
            None,
            "nothing more to cut"
        );
    }
}
