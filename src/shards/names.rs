//! Shard names and session ids: `<session>.<token>.jsonl|jsonseq`, the
//! token being 8 random lowercase hex digits, and the legacy
//! `<session>.jsonl` with none. The session is validated before it becomes
//! part of a file name, so a name never escapes the store or hides.

use std::io;

use serde::Serialize;

use super::{MAX_SESSION_BYTES, PACKED_ENV};
use crate::error::{Error, ErrorCode, Result};

/// The two shard layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardFormat {
    /// `.jsonl`: each record followed by `\n`.
    Line,
    /// `.jsonseq`: U+001E first, then each record followed by U+001E.
    Packed,
}

impl ShardFormat {
    /// Packed when asked, or when `PCHRONICLE_PACKED_RECORDS=1`.
    pub fn choose(packed: bool) -> ShardFormat {
        if packed || std::env::var(PACKED_ENV).is_ok_and(|v| v == "1") {
            ShardFormat::Packed
        } else {
            ShardFormat::Line
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ShardFormat::Line => "jsonl",
            ShardFormat::Packed => "jsonseq",
        }
    }
}

/// A validated session id: not empty, at most [`MAX_SESSION_BYTES`], no
/// `/` or NUL, not starting with a dot. Dots elsewhere are allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionId(String);

impl SessionId {
    pub fn parse(text: &str) -> Result<SessionId> {
        let why = if text.is_empty() {
            Some("it is empty")
        } else if text.len() > MAX_SESSION_BYTES {
            Some("it is longer than 200 bytes")
        } else if text.contains('/') || text.contains('\0') {
            Some("it contains `/` or NUL")
        } else if text.starts_with('.') {
            Some("it starts with a dot")
        } else if text.chars().any(char::is_control) {
            Some("it contains a control character")
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::new(
                ErrorCode::SessionInvalid,
                format!("session id {text:?} is not usable: {why}"),
            )),
            None => Ok(SessionId(text.to_string())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A shard's file name, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardName {
    pub session: String,
    /// `None` for a legacy `<session>.jsonl`.
    pub token: Option<String>,
    pub format: ShardFormat,
}

impl ShardName {
    /// Parses `<session>.<token>.jsonl|jsonseq` or a legacy
    /// `<session>.jsonl`. The session is the name minus its last two
    /// dot-separated parts when the second-to-last is a token, else minus
    /// the extension.
    pub fn parse(name: &str) -> Option<ShardName> {
        let (stem, format) = if let Some(stem) = name.strip_suffix(".jsonl") {
            (stem, ShardFormat::Line)
        } else if let Some(stem) = name.strip_suffix(".jsonseq") {
            (stem, ShardFormat::Packed)
        } else {
            return None;
        };
        let (session, token) = match stem.rsplit_once('.') {
            Some((session, token)) if is_token(token) => (session, Some(token.to_string())),
            _ => (stem, None),
        };
        SessionId::parse(session).ok()?;
        Some(ShardName {
            session: session.to_string(),
            token,
            format,
        })
    }

    pub fn file_name(&self) -> String {
        match &self.token {
            Some(token) => format!("{}.{token}.{}", self.session, self.format.extension()),
            None => format!("{}.{}", self.session, self.format.extension()),
        }
    }
}

fn is_token(text: &str) -> bool {
    text.len() == 8
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A fresh token: 8 random lowercase hex digits.
pub(super) fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 4];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(crate::warehouse::hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_round_trip_and_yield_their_session() {
        let n = ShardName::parse("s-1.0a1b2c3d.jsonl").unwrap();
        assert_eq!(
            (n.session.as_str(), n.token.as_deref(), n.format),
            ("s-1", Some("0a1b2c3d"), ShardFormat::Line)
        );
        assert_eq!(n.file_name(), "s-1.0a1b2c3d.jsonl");
        let dotted = ShardName::parse("run.2026.11.deadbeef.jsonseq").unwrap();
        assert_eq!(dotted.session, "run.2026.11");
        assert_eq!(dotted.format, ShardFormat::Packed);
        let legacy = ShardName::parse("agent-old.jsonl").unwrap();
        assert_eq!((legacy.session.as_str(), legacy.token), ("agent-old", None));
        // A second-to-last part that is not a token belongs to the session.
        assert_eq!(
            ShardName::parse("a.DEADBEEF.jsonl").unwrap().session,
            "a.DEADBEEF"
        );
        assert_eq!(
            ShardName::parse("a.0a1b2c3.jsonl").unwrap().session,
            "a.0a1b2c3"
        );
        assert!(ShardName::parse("a.txt").is_none());
        assert!(ShardName::parse(".jsonl").is_none());
    }

    #[test]
    fn session_ids_are_validated() {
        for good in ["s", "019a-claude", "run.2026.11", &"x".repeat(200)] {
            assert!(SessionId::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a/b",
            "a\0b",
            ".hidden",
            "..",
            "tab\there",
            &"x".repeat(201),
        ] {
            assert_eq!(
                SessionId::parse(bad).unwrap_err().code,
                ErrorCode::SessionInvalid,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tokens_are_eight_lowercase_hex_digits() {
        let a = new_token().unwrap();
        assert!(is_token(&a), "{a}");
        assert_ne!(a, new_token().unwrap());
    }
}
