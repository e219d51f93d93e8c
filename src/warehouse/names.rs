//! A directory's names, sorted, in one allocation.
//!
//! The catalog keeps the listing of every directory it was asked about.
//! Held as one `String` each, 100,000 names of record files take some
//! 56 bytes apiece (the `String` and its own small heap block) and leave
//! the heap fragmented around them once a walk's short-lived buffers are
//! freed; packed, a name costs its bytes and four more.

/// Names sorted in `str` order, packed end to end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Names {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<u32>,
}

impl Names {
    /// The most bytes the names of one listing may take together.
    pub const MAX_BYTES: usize = u32::MAX as usize;

    /// `names`, sorted and packed. Names past [`Names::MAX_BYTES`] in all
    /// are left out; a caller bounding its listing checks with
    /// [`Names::fits`] as it collects them.
    pub fn sorted(mut names: Vec<String>) -> Names {
        names.sort_unstable();
        let total = names.iter().map(String::len).sum::<usize>();
        let mut packed = Names {
            text: String::with_capacity(total.min(Names::MAX_BYTES)),
            ends: Vec::with_capacity(names.len()),
        };
        for name in names {
            if !Names::fits(packed.text.len(), &name) {
                break;
            }
            packed.text.push_str(&name);
            packed.ends.push(packed.text.len() as u32);
        }
        packed
    }

    /// Whether `name` may join names of `bytes` bytes in all.
    pub fn fits(bytes: usize, name: &str) -> bool {
        bytes.saturating_add(name.len()) <= Names::MAX_BYTES
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th name in order.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = i
            .checked_sub(1)
            .map_or(0, |before| self.ends[before] as usize);
        Some(&self.text[start..end])
    }

    /// The names in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + DoubleEndedIterator + Clone {
        (0..self.len()).map(|i| self.get(i).expect("an index below the length"))
    }

    /// The names that begin with `prefix`, in order (found by bisection).
    pub fn starting_with<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if self.get(mid).is_some_and(|name| name < prefix) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        (low..self.len())
            .map_while(|i| self.get(i))
            .take_while(move |name| name.starts_with(prefix))
    }

    /// Whether `name` is among the names.
    pub fn contains(&self, name: &str) -> bool {
        self.starting_with(name).next() == Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_names_read_back_sorted() {
        let given = [
            "b.jsonl",
            "",
            "a",
            "é.jsonl",
            "a.jsonl",
            "a.jsonl.0123456789abcdef.idx",
        ];
        let names = Names::sorted(given.iter().map(|n| n.to_string()).collect());
        let mut want: Vec<&str> = given.to_vec();
        want.sort();
        assert_eq!(names.iter().collect::<Vec<_>>(), want);
        assert_eq!(names.iter().rev().count(), want.len());
        assert_eq!(names.get(want.len()), None);
        assert_eq!(
            names.starting_with("a.jsonl").collect::<Vec<_>>(),
            ["a.jsonl", "a.jsonl.0123456789abcdef.idx"]
        );
        assert_eq!(names.starting_with("c").count(), 0);
        assert_eq!(names.starting_with("").count(), want.len());
        assert!(names.contains("a") && names.contains("") && names.contains("é.jsonl"));
        assert!(!names.contains("a.json") && !names.contains("zz"));
        assert!(Names::default().is_empty());
    }

    #[test]
    fn a_name_past_the_bound_does_not_fit() {
        assert!(Names::fits(Names::MAX_BYTES - 3, "abc"));
        assert!(!Names::fits(Names::MAX_BYTES - 2, "abc"));
        assert!(!Names::fits(usize::MAX, "a"));
    }
}
