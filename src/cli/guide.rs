//! `errors` and `demo`: the error-code reference, and a sample warehouse
//! to try every other command on.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::table;
use crate::error::{ErrorCode, Result};

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
                print!("{}", table::error_codes(ErrorCode::ALL));
                Ok(ExitCode::SUCCESS)
            }
            Some(text) => match ErrorCode::parse(&text) {
                Some(code) => {
                    print!("{}", table::error_codes(&[code]));
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    let code = ErrorCode::UnknownCode;
                    eprintln!("error[{code}]: no error code {text:?}");
                    eprintln!("  fix: {}", code.fixup());
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
        println!("built the demo warehouse in {}", dir.display());
        println!("  {summary}");
        println!(
            "try: pchronicle ls {0}  |  pchronicle stats {0}",
            dir.display()
        );
        Ok(ExitCode::SUCCESS)
    }
}
