//! `errors`, `demo`, `completions` and `man`: the error-code reference, a
//! sample warehouse to try every other command on, and the shell
//! completions and manual pages made from the command definition itself.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::out::{self, note, say};
use super::table;
use crate::error::{Error, ErrorCode, Result};

// The flags of `errors`.
#[derive(Args, Debug)]
pub(super) struct ErrorsArgs {
    /// A code such as PCHRONICLE_MANIFEST_PARSE.
    code: Option<String>,
}

impl ErrorsArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        match self.code {
            None => {
                out::say_text(&table::error_codes(ErrorCode::ALL));
                Ok(ExitCode::SUCCESS)
            }
            Some(text) => match ErrorCode::parse(&text) {
                Some(code) => {
                    out::say_text(&table::error_codes(&[code]));
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    let code = ErrorCode::UnknownCode;
                    note!("error[{code}]: no error code {text:?}");
                    note!("  fix: {}", code.fixup());
                    Ok(ExitCode::from(2))
                }
            },
        }
    }
}

// The flags of `demo`.
#[derive(Args, Debug)]
pub(super) struct DemoArgs {
    #[arg(default_value = "pchronicle-demo")]
    dir: PathBuf,
}

impl DemoArgs {
    pub(super) fn run(self) -> Result<ExitCode> {
        let dir = self.dir;
        let summary = crate::demo::build(&dir)?;
        say!("built the demo warehouse in {}", dir.display());
        say!("  {summary}");
        say!(
            "try: pchronicle ls {0}  |  pchronicle stats {0}",
            dir.display()
        );
        Ok(ExitCode::SUCCESS)
    }
}

// The flags of `completions`.
#[derive(Args, Debug)]
pub(super) struct CompletionsArgs {
    /// The shell to complete for.
    shell: clap_complete::Shell,
}

impl CompletionsArgs {
    pub(super) fn run(self, mut command: clap::Command) -> Result<ExitCode> {
        let mut out = Vec::new();
        clap_complete::generate(self.shell, &mut command, "pchronicle", &mut out);
        write_stdout(&out)?;
        Ok(ExitCode::SUCCESS)
    }
}

// The flags of `man`.
#[derive(Args, Debug)]
pub(super) struct ManArgs {
    /// The command whose page to print (`mount` prints pchronicle-mount(1));
    /// pchronicle(1) when left out.
    command: Option<String>,
    /// Write every page (pchronicle.1, pchronicle-mount.1, ...) into DIR
    /// instead, e.g. /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    dir: Option<PathBuf>,
}

impl ManArgs {
    pub(super) fn run(self, command: clap::Command) -> Result<ExitCode> {
        let mut command = command.disable_help_subcommand(true);
        command.build();
        if let Some(dir) = self.dir {
            write_pages(&command, &dir).map_err(|e| Error::io(&dir, &e))?;
            say!("wrote the manual pages into {}", dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        let page = match &self.command {
            None => command,
            Some(name) => match command.find_subcommand(name) {
                Some(sub) => sub.clone(),
                None => {
                    // Bad usage, as clap reports it: exit 2.
                    note!("error: no command {name:?}; `pchronicle --help` lists them");
                    return Ok(ExitCode::from(2));
                }
            },
        };
        let mut out = Vec::new();
        page_of(page)
            .render(&mut out)
            .map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
        write_stdout(&out)?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The manual page of `command`, which names the release it documents.
fn page_of(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command)
        .source(format!("pchronicle {}", super::VERSION))
        .manual("pchronicle manual")
}

/// Writes the page of `command` and of each of its commands, all the way
/// down, into `dir` (`pchronicle-index-build.1` and so on). A page is
/// never written through a symlink (`man --dir` is often run as root).
fn write_pages(command: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let page = page_of(command.clone());
    let mut text = Vec::new();
    page.render(&mut text)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(page.get_filename()))?
        .write_all(&text)
}

/// Writes `bytes` to standard output; a closed pipe (`| head`) is no error.
fn write_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    match out::exact_stdout().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::new(ErrorCode::Io, format!("standard output: {e}")))
        }
        _ => Ok(()),
    }
}
