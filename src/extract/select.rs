//! Which records a reader wants: the filters `cat`, `query`, `ls --sources`
//! and `stats` share, and how each prunes before anything is read.
//!
//! Every filter is checked twice. First against a source's path and what
//! is known of it without reading it (its hive attributes, its `_file_`,
//! the time range its count or manifest recorded), so a source that
//! cannot match is never opened. Then against each record that is read
//! (its timestamp, and for a leaf the `_file_` of the record inside it).

use std::collections::BTreeMap;

use crate::catalog::{Snapshot, Source};
use crate::error::{Error, ErrorCode, Result};
use crate::records::timestamp::{self, Micros};

/// The filters of one read, all of which a record must pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Hive path attributes: a source passes when, for every key named, its
    /// value is one of the values given for that key.
    pub attrs: BTreeMap<String, Vec<String>>,
    /// Records at or after this time.
    pub since: Option<Micros>,
    /// Records before this time.
    pub until: Option<Micros>,
    /// A glob over each record's `_file_`.
    pub file: Option<Glob>,
    /// Only records whose stored bytes hold this text.
    pub contains: Option<String>,
    /// At most this many records.
    pub limit: Option<u64>,
    /// Failed records are shown (as objects naming where they are).
    pub failed: bool,
    /// The leaf is read as it was at this version (a number or a tag).
    pub version: Option<String>,
    /// The path is read as it was at this time (`--as-of`): each leaf at
    /// its revision then, each record file's records stamped at or before
    /// it (see `Catalog::open_as_of`).
    pub as_of: Option<Micros>,
}

impl Selection {
    /// The selection the filters' texts name (`--where` as often as
    /// given, `--since`, `--until`, `--file`, `--contains`), as the CLI and
    /// the web API both take them.
    pub fn from_filters<'a>(
        wheres: impl IntoIterator<Item = &'a str>,
        since: Option<&str>,
        until: Option<&str>,
        file: Option<&str>,
        contains: Option<&str>,
    ) -> Result<Selection> {
        let mut selection = Selection::default();
        for text in wheres {
            selection.add_where(text)?;
        }
        if let Some(text) = since {
            selection.set_time(text, false)?;
        }
        if let Some(text) = until {
            selection.set_time(text, true)?;
        }
        if let Some(pattern) = file {
            selection.set_file(pattern)?;
        }
        if let Some(text) = contains {
            selection.set_contains(text)?;
        }
        if let (Some(since), Some(until)) = (selection.since, selection.until) {
            if since >= until {
                return Err(Error::new(
                    ErrorCode::FilterInvalid,
                    "--since must be earlier than --until",
                ));
            }
        }
        Ok(selection)
    }

    /// Adds one `--where KEY=VALUE`.
    pub fn add_where(&mut self, text: &str) -> Result<()> {
        let invalid =
            |why: &str| Error::new(ErrorCode::FilterInvalid, format!("--where {text:?}: {why}"));
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| invalid("expected KEY=VALUE"))?;
        if key.is_empty() || key.contains('/') {
            return Err(invalid("the key must be a hive attribute name"));
        }
        self.attrs
            .entry(key.to_string())
            .or_default()
            .push(value.to_string());
        Ok(())
    }

    /// Sets `--since` (`until` false) or `--until` from RFC 3339 text.
    pub fn set_time(&mut self, text: &str, until: bool) -> Result<()> {
        let flag = if until { "--until" } else { "--since" };
        let micros = timestamp::parse_rfc3339(text.trim()).ok_or_else(|| {
            Error::new(
                ErrorCode::FilterInvalid,
                format!("{flag} {text:?} is not an RFC 3339 time such as 2026-01-31T12:00:00Z"),
            )
        })?;
        if until {
            self.until = Some(micros);
        } else {
            self.since = Some(micros);
        }
        Ok(())
    }

    /// Sets `--as-of TIME` from RFC 3339 text.
    pub fn set_as_of(&mut self, text: &str) -> Result<()> {
        let micros = timestamp::parse_rfc3339(text.trim()).ok_or_else(|| {
            Error::new(
                ErrorCode::FilterInvalid,
                format!("--as-of {text:?} is not an RFC 3339 time such as 2026-01-31T12:00:00Z"),
            )
        })?;
        if self.version.is_some() {
            return Err(Error::new(
                ErrorCode::FilterInvalid,
                "--as-of and --version both say which past to read: give one",
            ));
        }
        self.as_of = Some(micros);
        Ok(())
    }

    /// Whether the path is read as it was in the past (`--version`,
    /// `--as-of`).
    pub fn reads_past(&self) -> bool {
        self.version.is_some() || self.as_of.is_some()
    }

    /// Whether a record of a record file at `ts` is inside the `--as-of`
    /// cut: stamped at or before it (a record without a time cannot be
    /// placed and is outside).
    pub fn before_cut(&self, ts: Option<Micros>) -> bool {
        self.as_of
            .is_none_or(|as_of| ts.is_some_and(|ts| ts <= as_of))
    }

    /// Sets `--file GLOB`.
    pub fn set_file(&mut self, pattern: &str) -> Result<()> {
        self.file = Some(Glob::new(pattern)?);
        Ok(())
    }

    /// Sets `--contains TEXT`.
    pub fn set_contains(&mut self, text: &str) -> Result<()> {
        if text.is_empty() {
            return Err(Error::new(
                ErrorCode::FilterInvalid,
                "--contains needs some text to look for",
            ));
        }
        self.contains = Some(text.to_string());
        Ok(())
    }

    /// Whether a record's stored bytes hold the `--contains` text.
    pub fn holds(&self, bytes: &[u8]) -> bool {
        self.contains
            .as_ref()
            .is_none_or(|text| memchr::memmem::find(bytes, text.as_bytes()).is_some())
    }

    /// What a store may leave out before reading (`bodies`: the records'
    /// bytes are needed; they always are to look into them).
    pub fn wanted(&self, bodies: bool, heads: bool) -> crate::records::read::Wanted {
        crate::records::read::Wanted {
            failed: self.failed,
            bodies: bodies || self.contains.is_some(),
            // The checks made again on every record read: the file glob,
            // the window, and a failed record's place in its output line.
            heads: heads || self.failed || self.file.is_some() || self.has_window(),
            since: self.since,
            until: self.until,
        }
    }

    /// Whether a time window was asked for.
    pub fn has_window(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    /// Whether anything narrows the sources (the limit and `--failed` do
    /// not).
    pub fn narrows(&self) -> bool {
        !self.attrs.is_empty() || self.has_window() || self.file.is_some()
    }

    /// Whether a record at `ts` is inside the window. With a window, a
    /// record without a timestamp is outside it.
    pub fn in_window(&self, ts: Option<Micros>) -> bool {
        if !self.has_window() {
            return true;
        }
        let Some(ts) = ts else {
            return false;
        };
        self.since.is_none_or(|since| ts >= since) && self.until.is_none_or(|until| ts < until)
    }

    /// Whether a record whose `_file_` is `file` passes the glob.
    pub fn file_matches(&self, file: &str) -> bool {
        self.file.as_ref().is_none_or(|glob| glob.matches(file))
    }

    /// Whether `source` may hold a record this selection wants, judged
    /// without reading it: its attributes, its path (a leaf's records
    /// have `_file_` below the leaf's path) and its known time range.
    pub fn may_match(&self, source: &Source) -> bool {
        for (key, values) in &self.attrs {
            match source.path_attrs.get(key) {
                Some(value) if values.contains(value) => {}
                _ => return false,
            }
        }
        if let Some(glob) = &self.file {
            let path_fits = match source.kind {
                crate::catalog::SourceKind::File => glob.matches(&source.file),
                crate::catalog::SourceKind::Dataset if source.file == "." => true,
                crate::catalog::SourceKind::Dataset => {
                    glob.may_match_below(&format!("{}/", source.file))
                }
            };
            if !path_fits {
                return false;
            }
        }
        if let (Some(as_of), crate::catalog::SourceKind::File, true) =
            (self.as_of, source.kind, source.trusted)
        {
            let counts = &source.counts;
            match (counts.min_timestamp, counts.max_timestamp) {
                // Counted, and its first record is after the cut.
                (Some(min), Some(_)) if min.0 > as_of => return false,
                // Counted, and no record carries a time.
                (None, None) if counts.record_count.is_some() => return false,
                _ => {}
            }
        }
        if self.has_window() && source.trusted {
            let counts = &source.counts;
            match (counts.min_timestamp, counts.max_timestamp) {
                // Counted, and the whole range is outside the window.
                (Some(min), Some(max))
                    if self.since.is_some_and(|since| max.0 < since)
                        || self.until.is_some_and(|until| min.0 >= until) =>
                {
                    return false;
                }
                // Counted, and no record carries a time: none is inside.
                (None, None) if counts.record_count.is_some() => return false,
                _ => {}
            }
        }
        true
    }

    /// `snapshot` with only the sources this selection may match, whole
    /// (what `ls --sources` and `stats` show under filters).
    pub fn narrow(&self, mut snapshot: Snapshot) -> Snapshot {
        snapshot.sources.retain(|source| self.may_match(source));
        snapshot
    }
}

/// A shell-style glob over `_file_` paths: `*` is any run of characters
/// but `/`, `**` any run including `/`, `?` one character but `/`,
/// `[abc]`/`[a-z]`/`[!a]` one character of a class; `\` quotes the next
/// character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
    /// The pattern as written (what travels to a worker).
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**`
    Stars,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob> {
        let invalid = |why: &str| {
            Error::new(
                ErrorCode::FilterInvalid,
                format!("--file {pattern:?}: {why}"),
            )
        };
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            tokens.push(match c {
                '\\' => Token::Literal(chars.next().ok_or_else(|| invalid("ends with `\\`"))?),
                '?' => Token::One,
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    while chars.peek() == Some(&'*') {
                        chars.next();
                    }
                    Token::Stars
                }
                '*' => Token::Star,
                '[' => {
                    let negated = matches!(chars.peek(), Some('!' | '^'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let c = chars.next().ok_or_else(|| invalid("a `[` is not closed"))?;
                        if c == ']' && !first {
                            break;
                        }
                        first = false;
                        let low = if c == '\\' {
                            chars.next().ok_or_else(|| invalid("ends with `\\`"))?
                        } else {
                            c
                        };
                        let mut ahead = chars.clone();
                        if ahead.next() == Some('-') && ahead.peek().is_some_and(|&h| h != ']') {
                            chars.next();
                            let high =
                                chars.next().ok_or_else(|| invalid("a `[` is not closed"))?;
                            ranges.push((low, high));
                        } else {
                            ranges.push((low, low));
                        }
                    }
                    Token::Class { negated, ranges }
                }
                c => Token::Literal(c),
            });
        }
        Ok(Glob {
            tokens,
            text: pattern.to_string(),
        })
    }

    /// The pattern as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        self.run(text, false)
    }

    /// Whether some path that starts with `prefix` could match: the walk
    /// prunes a leaf whose records (`_file_` below it) cannot.
    pub fn may_match_below(&self, prefix: &str) -> bool {
        self.run(prefix, true)
    }

    /// Matches by dynamic programming over (token, character), so time is
    /// the product of the two lengths whatever the pattern (no
    /// backtracking that a hostile path could make exponential). With
    /// `prefix`, consuming the whole text with any leading part of the
    /// pattern is a match: every rest of a glob matches some text.
    fn run(&self, text: &str, prefix: bool) -> bool {
        let text: Vec<char> = text.chars().collect();
        // reach[j]: the tokens so far can consume exactly text[..j].
        let mut reach = vec![false; text.len() + 1];
        reach[0] = true;
        let mut any_whole = reach[text.len()];
        for token in &self.tokens {
            let mut next = vec![false; text.len() + 1];
            match token {
                Token::Star | Token::Stars => {
                    let crosses = matches!(token, Token::Stars);
                    for j in 0..=text.len() {
                        next[j] =
                            reach[j] || (j > 0 && next[j - 1] && (crosses || text[j - 1] != '/'));
                    }
                }
                _ => {
                    for j in 1..=text.len() {
                        next[j] = reach[j - 1] && token.fits(text[j - 1]);
                    }
                }
            }
            reach = next;
            any_whole |= reach[text.len()];
        }
        if prefix { any_whole } else { reach[text.len()] }
    }
}

impl Token {
    /// Whether this one-character token takes `c`.
    fn fits(&self, c: char) -> bool {
        match self {
            Token::Literal(l) => c == *l,
            Token::One => c != '/',
            Token::Class { negated, ranges } => {
                c != '/' && ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
            Token::Star | Token::Stars => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> Glob {
        Glob::new(p).unwrap()
    }

    #[test]
    fn glob_star_stays_in_one_segment_and_double_star_crosses() {
        assert!(glob("*.jsonl").matches("a.jsonl"));
        assert!(!glob("*.jsonl").matches("team/a.jsonl"));
        assert!(glob("**.jsonl").matches("team/a.jsonl"));
        assert!(glob("team/**/x.jsonl").matches("team/a/b/x.jsonl"));
        assert!(glob("s?.json").matches("s1.json"));
        assert!(!glob("s?.json").matches("s/.json"));
        assert!(glob("[ab]*").matches("b.jsonl"));
        assert!(!glob("[!ab]*").matches("b.jsonl"));
        assert!(glob("[a-c]x").matches("bx"));
        assert!(glob(r"\*").matches("*"));
        assert!(!glob(r"\*").matches("a"));
        assert!(Glob::new("[ab").is_err());
        assert!(Glob::new("a\\").is_err());
    }

    #[test]
    fn glob_prefix_match_prunes_leaves_that_cannot_hold_a_match() {
        assert!(glob("team/*/a.jsonl").may_match_below("team/leaf/"));
        assert!(!glob("other/**").may_match_below("team/leaf/"));
        assert!(glob("**").may_match_below("anything/"));
        assert!(!glob("*.jsonl").may_match_below("team/"));
        assert!(glob("team/a.jsonl").may_match_below("team/"));
        assert!(!glob("team").may_match_below("team/"));
    }

    #[test]
    fn glob_time_stays_linear_in_hostile_paths() {
        let path = "a".repeat(4000);
        let started = std::time::Instant::now();
        for _ in 0..100 {
            assert!(!glob("**a**a**a**a**a**a**b").matches(&path));
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn window_is_half_open_and_excludes_untimed_records() {
        let mut s = Selection::default();
        assert!(s.in_window(None));
        s.set_time("2026-01-01T00:00:00Z", false).unwrap();
        s.set_time("2026-01-02T00:00:00Z", true).unwrap();
        let day = 86_400_000_000;
        let start = timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        assert!(s.in_window(Some(start)));
        assert!(s.in_window(Some(start + day - 1)));
        assert!(!s.in_window(Some(start + day)));
        assert!(!s.in_window(Some(start - 1)));
        assert!(!s.in_window(None));
        assert_eq!(
            s.set_time("yesterday", true).unwrap_err().code,
            ErrorCode::FilterInvalid
        );
    }

    #[test]
    fn where_needs_key_and_value() {
        let mut s = Selection::default();
        s.add_where("session=a=b").unwrap();
        assert_eq!(s.attrs["session"], vec!["a=b".to_string()]);
        assert!(s.add_where("novalue").is_err());
        assert!(s.add_where("=x").is_err());
    }
}
