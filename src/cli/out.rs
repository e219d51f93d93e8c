//! Where the command line writes, and the one place it decides how.
//!
//! Text for people (tables, notes, warnings, errors, query tables) goes
//! through [`for_people`] and [`say!`]/[`note!`]: on a terminal it is
//! shown with control characters escaped ([`crate::terminal`]), so a name
//! or a record planted in the warehouse cannot act on the terminal; into a
//! pipe or a file it is written as it is. Machine output (`--json`,
//! `--csv`, records) goes through [`exact`] and [`exact_stdout`] and is
//! never changed, wherever it goes.
//!
//! A reader that goes away (`| head`) is not an error for people's text:
//! what is left is dropped.

use std::fmt;
use std::io::{self, IsTerminal, Write};

use crate::terminal::Escaping;

/// Standard output for people's text: escaped when it is a terminal.
pub(super) fn for_people() -> Box<dyn Write> {
    let stdout = io::stdout();
    if stdout.is_terminal() {
        Box::new(Escaping::new(stdout.lock()))
    } else {
        Box::new(stdout.lock())
    }
}

/// Standard error for people's text: escaped when it is a terminal.
fn errors_for_people() -> Box<dyn Write> {
    let stderr = io::stderr();
    if stderr.is_terminal() {
        Box::new(Escaping::new(stderr.lock()))
    } else {
        Box::new(stderr.lock())
    }
}

/// Standard output for bytes that must arrive exactly as they are.
pub(super) fn exact_stdout() -> io::StdoutLock<'static> {
    io::stdout().lock()
}

/// Writes `text` for people on standard output.
pub(super) fn say_text(text: &str) {
    quietly(for_people().write_all(text.as_bytes()));
}

/// Writes `args` and a line feed for people on standard output.
pub(super) fn say_line(args: fmt::Arguments) {
    quietly(writeln!(for_people(), "{args}"));
}

/// Writes `args` and a line feed for people on standard error.
pub(super) fn note_line(args: fmt::Arguments) {
    let _ = writeln!(errors_for_people(), "{args}");
}

/// Writes `text` on standard output exactly (JSON, CSV).
pub(super) fn exact(text: &str) {
    quietly(exact_stdout().write_all(text.as_bytes()));
}

/// A write to standard output whose reader may have gone: only other
/// failures are said, on standard error.
fn quietly(written: io::Result<()>) {
    match written {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let _ = writeln!(io::stderr(), "pchronicle: writing the answer failed: {e}");
        }
        _ => {}
    }
}

/// `println!` for people: escaped on a terminal (see [`for_people`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::out::say_line(format_args!($($arg)*))
    };
}

/// `eprintln!` for people: escaped on a terminal.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::cli::out::note_line(format_args!($($arg)*))
    };
}

pub(super) use {note, say};
