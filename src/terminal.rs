//! Text shown to people, never interpreted by their terminal.
//!
//! Names, paths, record text and messages come from whoever writes the
//! warehouse or its bucket, and a terminal acts on some of the characters
//! they may hold: `ESC ] 0 ; … BEL` retitles the window, `ESC ] 52 ; c ; …`
//! writes the clipboard, a C1 `CSI` (U+009B) starts a control sequence on
//! terminals that read 8-bit controls, and the bidirectional overrides
//! (U+202E, …) show text in another order than it has. So what pchronicle
//! writes for people to a terminal, and every line it logs, shows such
//! characters as escapes instead, as GNU `ls -b` does:
//!
//! | character | shown as |
//! |---|---|
//! | tab, carriage return, BEL, backspace, vertical tab, form feed | `\t` `\r` `\a` `\b` `\v` `\f` |
//! | line feed (where it does not end a line of the output) | `\n` |
//! | ESC | `\e` |
//! | any other C0 control, DEL, a byte that is not UTF-8 | `\xHH` |
//! | a C1 control (U+0080–U+009F), a bidirectional control (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), the line and paragraph separators (U+2028, U+2029) | `\u{HHHH}` |
//!
//! Everything else, backslashes included, is shown as it is: the escapes
//! are for reading, not for copying back (`--json` gives the exact text).
//! [`Escaping`] does it to a byte stream, [`escaped`] to one value.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

/// Whether a line feed is shown as `\n` or kept (it ends a line of the
/// output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFeeds {
    Keep,
    Escape,
}

/// `text` with every character a terminal could act on escaped, line
/// feeds included: one line for a log or a terminal.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| needs_escape(c, LineFeeds::Escape)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_char(&mut out, c, LineFeeds::Escape);
    }
    Cow::Owned(out)
}

/// Whether `c` is shown as an escape.
fn needs_escape(c: char, line_feeds: LineFeeds) -> bool {
    match c {
        '\n' => line_feeds == LineFeeds::Escape,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            true
        }
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

fn push_char(out: &mut String, c: char, line_feeds: LineFeeds) {
    if !needs_escape(c, line_feeds) {
        out.push(c);
        return;
    }
    let _ = match c {
        '\t' => out.write_str("\\t"),
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\u{7}' => out.write_str("\\a"),
        '\u{8}' => out.write_str("\\b"),
        '\u{b}' => out.write_str("\\v"),
        '\u{c}' => out.write_str("\\f"),
        '\u{1b}' => out.write_str("\\e"),
        '\u{0}'..='\u{1f}' | '\u{7f}' => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:04x}}}", c as u32),
    };
}

/// Escapes the bytes of `input` onto `out`. A UTF-8 sequence cut short at
/// the end is left for the next call when `more` (its index is returned);
/// otherwise it is escaped byte by byte, like any byte that is not UTF-8.
fn escape_bytes(input: &[u8], out: &mut String, line_feeds: LineFeeds, more: bool) -> usize {
    let mut rest = input;
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                text.chars().for_each(|c| push_char(out, c, line_feeds));
                return input.len();
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                // Valid by the error's own account.
                let valid = std::str::from_utf8(valid).unwrap_or_default();
                valid.chars().for_each(|c| push_char(out, c, line_feeds));
                let bad = match e.error_len() {
                    Some(n) => n,
                    None if more => return input.len() - after.len(),
                    None => after.len(),
                };
                for byte in &after[..bad] {
                    let _ = write!(out, "\\x{byte:02x}");
                }
                rest = &after[bad..];
            }
        }
    }
}

/// A writer that shows what it is given with [`escaped`]'s escapes, line
/// feeds kept: the text of a table or a message, for a terminal. A
/// character split across two writes is escaped whole; one left
/// unfinished is escaped byte by byte when the writer is dropped.
#[derive(Debug)]
pub struct Escaping<W: Write> {
    inner: W,
    /// The start of a UTF-8 sequence the last write cut short.
    pending: Vec<u8>,
}

impl<W: Write> Escaping<W> {
    pub fn new(inner: W) -> Escaping<W> {
        Escaping {
            inner,
            pending: Vec::new(),
        }
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut input = std::mem::take(&mut self.pending);
        input.extend_from_slice(bytes);
        let mut shown = String::with_capacity(input.len());
        let done = escape_bytes(&input, &mut shown, LineFeeds::Keep, true);
        self.pending = input[done..].to_vec();
        self.inner.write_all(shown.as_bytes())?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for Escaping<W> {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let mut shown = String::new();
            escape_bytes(&self.pending, &mut shown, LineFeeds::Keep, false);
            let _ = self.inner.write_all(shown.as_bytes());
        }
        let _ = self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through_writer(chunks: &[&[u8]]) -> String {
        let mut out = Vec::new();
        {
            let mut writer = Escaping::new(&mut out);
            for chunk in chunks {
                writer.write_all(chunk).unwrap();
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn terminal_controls_are_shown_as_escapes() {
        assert_eq!(escaped("evil\u{1b}]0;x\u{7}.jsonl"), "evil\\e]0;x\\a.jsonl");
        assert_eq!(
            escaped("a\tb\nc\rd\u{8}\u{b}\u{c}\u{0}\u{7f}"),
            "a\\tb\\nc\\rd\\b\\v\\f\\x00\\x7f"
        );
        assert_eq!(escaped("csi\u{9b}2J"), "csi\\u{009b}2J");
        assert_eq!(escaped("gpj.\u{202e}exe"), "gpj.\\u{202e}exe");
        assert_eq!(escaped("a\u{2028}b\u{2066}c"), "a\\u{2028}b\\u{2066}c");
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        for text in ["team/codex_jsonl", "with space é ü 日本", "back\\slash", ""] {
            assert!(matches!(escaped(text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn the_writer_keeps_line_feeds_and_escapes_bytes_that_are_not_utf8() {
        assert_eq!(
            through_writer(&[b"NAME\n", b"evil\x1b]52;c;aGk=\x07\n", b"\xff\xc3("]),
            "NAME\nevil\\e]52;c;aGk=\\a\n\\xff\\xc3("
        );
    }

    #[test]
    fn a_character_split_across_writes_is_shown_whole() {
        let csi = "\u{9b}".as_bytes();
        let e_acute = "é".as_bytes();
        assert_eq!(
            through_writer(&[&csi[..1], &csi[1..], b"x", &e_acute[..1], &e_acute[1..]]),
            "\\u{009b}xé"
        );
        // Left unfinished: escaped byte by byte.
        assert_eq!(through_writer(&[b"ok", &csi[..1]]), "ok\\xc2");
    }
}
