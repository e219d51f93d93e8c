//! A request's query string taken apart: the path (always inside the
//! served root), the filters the CLI shares, and each endpoint's own.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, ErrorCode, Result};
use crate::extract::Selection;

/// Parameters every endpoint may be given; anything else is refused (a
/// misspelt filter must not pass for no filter).
const FILTERS: &[&str] = &[
    "where", "since", "until", "file", "contains", "version", "as_of",
];

/// The decoded `key=value` pairs of a query string, in order.
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn parse(query: Option<&str>) -> Params {
        // The token was checked by the guard; it is no parameter of any
        // endpoint.
        let pairs = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .filter(|(k, _)| k != "token")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Params { pairs }
    }

    /// From a JSON body's fields (`POST /api/query`): strings, or for
    /// `where` an array of strings.
    pub fn from_json(body: &serde_json::Map<String, serde_json::Value>) -> Result<Params> {
        let mut pairs = Vec::new();
        for (key, value) in body {
            let mut push = |v: &serde_json::Value| match v {
                serde_json::Value::String(s) => {
                    pairs.push((key.clone(), s.clone()));
                    Ok(())
                }
                _ => Err(invalid(format!("`{key}` must be a string"))),
            };
            match value {
                serde_json::Value::Array(items) => items.iter().try_for_each(&mut push)?,
                other => push(other)?,
            }
        }
        Ok(Params { pairs })
    }

    /// The one value of `key`, if given (given twice: refused).
    pub fn one(&self, key: &str) -> Result<Option<&str>> {
        let mut values = self.pairs.iter().filter(|(k, _)| k == key);
        let first = values.next().map(|(_, v)| v.as_str());
        if values.next().is_some() {
            return Err(invalid(format!("`{key}` is given more than once")));
        }
        Ok(first)
    }

    /// Refuses any parameter not in `FILTERS` or `own`.
    pub fn only(&self, own: &[&str]) -> Result<()> {
        match self
            .pairs
            .iter()
            .find(|(k, _)| !FILTERS.contains(&k.as_str()) && !own.contains(&k.as_str()))
        {
            Some((key, _)) => Err(invalid(format!("unknown parameter `{key}`"))),
            None => Ok(()),
        }
    }

    /// Whether any filter is given.
    pub fn has_filters(&self) -> bool {
        self.pairs
            .iter()
            .any(|(k, _)| FILTERS.contains(&k.as_str()))
    }

    /// Refuses the filters (for an endpoint that takes none).
    pub fn no_filters(&self) -> Result<()> {
        match self
            .pairs
            .iter()
            .find(|(k, _)| FILTERS.contains(&k.as_str()))
        {
            Some((key, _)) => Err(invalid(format!(
                "`{key}` selects sources: a listing is one level, unfiltered"
            ))),
            None => Ok(()),
        }
    }

    /// `path`, relative to the served root: never absolute, never with
    /// `..`; empty or left out is the root. Symbolic links below the root
    /// are never followed by the catalog, so this is all it takes to stay
    /// inside.
    /// Every pair but those named in `leave_out`, sorted: what a request
    /// asked for, whatever the order it was written in.
    pub fn canonical(&self, leave_out: &[&str]) -> String {
        let mut pairs: Vec<&(String, String)> = self
            .pairs
            .iter()
            .filter(|(k, _)| !leave_out.contains(&k.as_str()))
            .collect();
        pairs.sort();
        pairs
            .iter()
            .map(|(k, v)| format!("{}={}\0", k.len(), k) + &format!("{}:{v}\0", v.len()))
            .collect()
    }

    pub fn path(&self) -> Result<PathBuf> {
        let text = self.one("path")?.unwrap_or("");
        inside_root(text)
    }

    /// The filters, as `cat --where/--since/--until/--file/--contains`
    /// and `--version`/`--as-of` read them.
    pub fn selection(&self) -> Result<Selection> {
        let wheres = self.pairs.iter().filter(|(k, _)| k == "where");
        let mut selection = Selection::from_filters(
            wheres.map(|(_, v)| v.as_str()),
            self.one("since")?,
            self.one("until")?,
            self.one("file")?,
            self.one("contains")?,
        )?;
        selection.version = self.one("version")?.map(str::to_string);
        if let Some(text) = self.one("as_of")? {
            selection.set_as_of(text)?;
        }
        Ok(selection)
    }

    /// A flag: `1`/`true` on, `0`/`false`/left out off.
    pub fn flag(&self, key: &str) -> Result<bool> {
        match self.one(key)? {
            None | Some("0" | "false") => Ok(false),
            Some("" | "1" | "true") => Ok(true),
            Some(other) => Err(invalid(format!("`{key}={other}`: expected 1 or 0"))),
        }
    }

    /// A number in `1..=max`, `default` when left out.
    pub fn number(&self, key: &str, default: u64, max: u64) -> Result<u64> {
        match self.one(key)? {
            None => Ok(default),
            Some(text) => match text.parse::<u64>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(invalid(format!(
                    "`{key}={text}`: expected a number from 1 to {max}"
                ))),
            },
        }
    }
}

/// `text` as a path inside the served root.
pub fn inside_root(text: &str) -> Result<PathBuf> {
    let trimmed = text.trim_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok(PathBuf::from("."));
    }
    if text.starts_with('/') || text.contains('\0') {
        return Err(outside(text));
    }
    let mut rel = PathBuf::new();
    for component in Path::new(trimmed).components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            _ => return Err(outside(text)),
        }
    }
    if rel.as_os_str().is_empty() {
        return Ok(PathBuf::from("."));
    }
    Ok(rel)
}

fn outside(text: &str) -> Error {
    Error::new(
        ErrorCode::PathInvalid,
        format!("path {text:?} is not inside the served warehouse (no `..`, no leading `/`)"),
    )
}

pub fn invalid(message: String) -> Error {
    Error::new(ErrorCode::ServeRequestInvalid, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_root() {
        assert_eq!(inside_root("").unwrap(), PathBuf::from("."));
        assert_eq!(inside_root("team/a/").unwrap(), PathBuf::from("team/a"));
        assert_eq!(inside_root("./team").unwrap(), PathBuf::from("team"));
        assert_eq!(inside_root("a\\b").unwrap(), PathBuf::from("a\\b"));
        for bad in ["..", "a/../..", "/etc", "a/..", "a\0b"] {
            assert!(inside_root(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn encoded_values_decode_once_and_unknown_keys_are_refused() {
        let p = Params::parse(Some("path=a%2F..%2F..&where=k%3Dv&where=k%3Dw"));
        assert!(p.path().is_err(), "an encoded `..` is still `..`");
        let selection = p.selection().unwrap();
        assert_eq!(selection.attrs["k"], vec!["v".to_string(), "w".to_string()]);
        assert!(Params::parse(Some("wher=k=v")).only(&[]).is_err());
        assert!(Params::parse(Some("path=a&path=b")).path().is_err());
        assert_eq!(
            Params::parse(Some("limit=0")).number("limit", 5, 10).ok(),
            None
        );
    }
}
