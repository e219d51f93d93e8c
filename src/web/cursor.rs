//! `after=` of `/api/records` and `/api/runs`: where a page ended, as
//! text a client hands back unchanged.

use sha2::{Digest, Sha256};

use super::state::Served;
use crate::catalog::Fingerprint;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::runs::page::After;
use crate::extract::{Plan, Position};
use crate::records::read::Resume;

/// `SOURCE.PART.OFFSET.LINE.TAG`. The tag signs, with a key of this
/// process, the position, the request's path and filters (`asked`),
/// the source's `_file_` and, for a leaf, its fingerprint (a leaf's
/// offsets count rows of one version); for a record file, its identity
/// (device, inode, and a digest of the bytes before the position; see
/// [`identity`]): a cursor for other filters, into a leaf that changed,
/// into a file replaced or rewritten before the position, or not
/// handed out here (made up, edited, from before a restart) is refused,
/// never read from. A record file that only grew keeps its cursors.
pub fn format(at: Position, plan: &Plan, key: &str, asked: &str, identity: &str) -> String {
    let Resume { part, offset, line } = at.within;
    let position = format!("{}.{part}.{offset}.{line}", at.source);
    let tag = tag(plan, at.source, &position, key, asked, identity);
    format!("{position}.{tag}")
}

pub fn parse(
    text: &str,
    plan: &Plan,
    key: &str,
    asked: &str,
    identity: &dyn Fn(Position) -> String,
) -> Result<Position> {
    let bad = || {
        Error::new(
            ErrorCode::CursorInvalid,
            format!(
                "the cursor {text:?} is not one this server handed out for this path and these filters, or the file it points into was replaced or rewritten since"
            ),
        )
    };
    let (position, given) = text.rsplit_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = position.split('.').collect();
    let [source, part, offset, line] = parts.as_slice() else {
        return Err(bad());
    };
    let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let source = usize::try_from(number(source)?).map_err(|_| bad())?;
    if source >= plan.sources().len() {
        return Err(bad());
    }
    let at = Position {
        source,
        within: Resume {
            part: number(part)?,
            offset: number(offset)?,
            line: number(line)?,
        },
    };
    if tag(plan, source, position, key, asked, &identity(at)) != given {
        return Err(bad());
    }
    Ok(at)
}

/// What a record file is at a position: its device and inode, and the
/// SHA-256 of the (up to) 4 KiB before the position. The same for a
/// file that only grew; another for a file moved into its place or
/// rewritten before the position. Empty for a leaf (its fingerprint is
/// signed instead) and for a file that cannot be opened (the read
/// after fails on its own).
pub fn identity(served: &Served, rel: &std::path::Path, plan: &Plan, at: Position) -> String {
    let Some(source) = plan.sources().get(at.source) else {
        return String::new();
    };
    if source.kind != crate::catalog::SourceKind::File {
        return String::new();
    }
    let path = if source.file == "." {
        rel.to_path_buf()
    } else {
        rel.join(&source.file)
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return String::new();
    };
    let parent = if parent.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        parent
    };
    let opened = served
        .catalog
        .root_dir()
        .resolve_dir(parent)
        .and_then(|dir| dir.open_file(name));
    let Ok((blob, stat)) = opened else {
        return String::new();
    };
    let end = at.within.offset.min(stat.size);
    let start = end.saturating_sub(4096);
    let mut before = vec![0u8; (end - start) as usize];
    if blob.read_exact_at(&mut before, start).is_err() {
        return String::new();
    }
    let digest = Sha256::digest(&before);
    format!(
        "{}:{}:{}",
        stat.dev,
        stat.ino,
        crate::warehouse::hex(&digest[..16])
    )
}

fn tag(
    plan: &Plan,
    source: usize,
    position: &str,
    key: &str,
    asked: &str,
    identity: &str,
) -> String {
    let found = plan.sources().get(source);
    let file = found.map_or("", |s| s.file.as_str());
    let version = match found {
        Some(s) if s.kind == crate::catalog::SourceKind::Dataset => {
            s.fingerprint.as_ref().map(Fingerprint::text)
        }
        _ => None,
    };
    let version = version.as_deref().unwrap_or("");
    let mut digest = Sha256::new();
    for piece in [key, asked, file, version, identity, position] {
        digest.update((piece.len() as u64).to_le_bytes());
        digest.update(piece.as_bytes());
    }
    crate::warehouse::hex(&digest.finalize()[..12])
}

/// `FIGURE.NAME.TAG` of `/api/runs`: the last run's figure (the bits of
/// its `f64` in hex, `-` for none) and name (hex), signed with the
/// server's key and the request it answers (`asked`: path, filters and
/// sort). A run's place names no file, so nothing else needs checking.
pub fn format_after(after: &After, key: &str, asked: &str) -> String {
    let figure = after
        .figure
        .map_or_else(|| "-".to_string(), |f| format!("{:x}", f.to_bits()));
    let place = format!("{figure}.{}", crate::warehouse::hex(after.name.as_bytes()));
    let tag = runs_tag(&place, key, asked);
    format!("{place}.{tag}")
}

/// The place a [`format_after`] cursor names, if this server handed it
/// out for `asked`.
pub fn parse_after(text: &str, key: &str, asked: &str) -> Result<After> {
    let bad = || {
        Error::new(
            ErrorCode::CursorInvalid,
            format!(
                "the cursor {text:?} is not one this server handed out for this path, these filters and this sort"
            ),
        )
    };
    let (place, given) = text.rsplit_once('.').ok_or_else(bad)?;
    if runs_tag(place, key, asked) != given {
        return Err(bad());
    }
    let (figure, name) = place.split_once('.').ok_or_else(bad)?;
    let figure = match figure {
        "-" => None,
        bits => Some(f64::from_bits(
            u64::from_str_radix(bits, 16).map_err(|_| bad())?,
        )),
    };
    let name = unhex(name).and_then(|b| String::from_utf8(b).ok());
    Ok(After {
        figure,
        name: name.ok_or_else(bad)?,
    })
}

fn runs_tag(place: &str, key: &str, asked: &str) -> String {
    let mut digest = Sha256::new();
    for piece in ["runs", key, asked, place] {
        digest.update((piece.len() as u64).to_le_bytes());
        digest.update(piece.as_bytes());
    }
    crate::warehouse::hex(&digest.finalize()[..12])
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_cursor_reads_back_only_for_the_request_it_was_made_for() {
        for figure in [None, Some(0.0), Some(-1.5), Some(1.7e15)] {
            let after = After {
                figure,
                name: "a/b.c/é\u{202e}.jsonl".into(),
            };
            let text = format_after(&after, "k", "path=a&sort=newest");
            assert_eq!(
                parse_after(&text, "k", "path=a&sort=newest").unwrap(),
                after
            );
            assert!(parse_after(&text, "k", "path=a&sort=tokens").is_err());
            assert!(parse_after(&text, "other key", "path=a&sort=newest").is_err());
        }
        let text = format_after(
            &After {
                figure: Some(3.0),
                name: "x".into(),
            },
            "k",
            "q",
        );
        let forged = text.replacen("78", "79", 1);
        assert!(parse_after(&forged, "k", "q").is_err());
        for junk in ["", ".", "..", "-.zz.", "-.7.abc"] {
            assert!(parse_after(junk, "k", "q").is_err(), "{junk:?}");
        }
    }
}
