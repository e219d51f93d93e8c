//! `s3://BUCKET/PREFIX`: how a remote warehouse is named, and how the
//! names below it become object keys.

use std::path::Path;

use crate::error::{Error, ErrorCode, Result};

/// The scheme every remote warehouse is named with.
pub const SCHEME: &str = "s3://";

pub use crate::warehouse::is_remote_path as is_remote;

/// A bucket and a key prefix in it (no leading or trailing `/`, possibly
/// empty): the root of a remote warehouse, or a directory below it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    pub bucket: String,
    pub prefix: String,
}

impl Location {
    /// Reads `s3://BUCKET[/PREFIX][/]`. Every component of the prefix must
    /// be a plain name (no empty component, `.` or `..`), so that the
    /// prefix names exactly one directory of the warehouse.
    pub fn parse(text: &str) -> Result<Location> {
        let invalid = |why: &str| {
            Error::at(
                ErrorCode::RemoteLocationInvalid,
                text,
                format!("not an s3:// location: {why}"),
            )
        };
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| invalid("it does not start with s3://"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if !is_bucket_name(bucket) {
            return Err(invalid(
                "the bucket must be 3 to 63 lowercase letters, digits, dots and hyphens",
            ));
        }
        if !prefix.is_empty()
            && !prefix
                .split('/')
                .all(|c| crate::warehouse::is_plain_name(c.as_bytes()))
        {
            return Err(invalid("an empty, `.` or `..` component in the prefix"));
        }
        if prefix.bytes().any(|b| b.is_ascii_control()) {
            return Err(invalid("an ASCII control character in the prefix"));
        }
        Ok(Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// [`Location::parse`] of a path named from outside, which must be
    /// UTF-8 (every key is): never read with a replacement character for
    /// what it does not hold.
    pub fn parse_path(path: &Path) -> Result<Location> {
        let text = path.to_str().ok_or_else(|| {
            Error::at(
                ErrorCode::RemoteLocationInvalid,
                path,
                "not an s3:// location: it is not valid UTF-8",
            )
        })?;
        Location::parse(text)
    }

    /// The location as it is written: `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("{SCHEME}{}", self.bucket)
        } else {
            format!("{SCHEME}{}/{}", self.bucket, self.prefix)
        }
    }

    /// The location of the entry `name` below this one.
    pub fn join(&self, name: &str) -> Location {
        Location {
            bucket: self.bucket.clone(),
            prefix: join_key(&self.prefix, name),
        }
    }
}

/// `prefix/name`, or `name` below the bucket's root.
pub fn join_key(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// S3's rules for a bucket name (the DNS-compatible ones every S3-like
/// store accepts).
fn is_bucket_name(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    #[test]
    fn locations_are_read_strictly() {
        let l = Location::parse("s3://team-bucket/warehouses/main/").unwrap();
        assert_eq!(l.bucket, "team-bucket");
        assert_eq!(l.prefix, "warehouses/main");
        assert_eq!(l.url(), "s3://team-bucket/warehouses/main");
        assert_eq!(l.join("x").prefix, "warehouses/main/x");
        let root = Location::parse("s3://bucket").unwrap();
        assert_eq!(root.prefix, "");
        assert_eq!(root.join("x").prefix, "x");
        for bad in [
            "s3://",
            "s3://B",
            "s3://ab",
            "s3://bucket//x",
            "s3://bucket/a/../b",
            "s3://bucket/./b",
            "s3://-bucket/x",
            "s3://bucket/a\u{1}b",
            "s3://bucket/line\nbreak",
            "file:///x",
        ] {
            let e = Location::parse(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::RemoteLocationInvalid, "{bad}");
        }
        assert!(is_remote(Path::new("s3://bucket/x")));
        assert!(!is_remote(Path::new("./s3:/bucket")));
        // Other characters a listing shows are names too.
        assert!(Location::parse("s3://bucket/a\u{9b}b c").is_ok());
        let not_utf8 = std::ffi::OsStr::from_bytes(b"s3://bucket/a\xffb");
        assert_eq!(
            Location::parse_path(Path::new(not_utf8)).unwrap_err().code,
            ErrorCode::RemoteLocationInvalid
        );
    }
}
