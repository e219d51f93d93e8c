use std::process::ExitCode;

fn main() -> ExitCode {
    pchronicle::cli::run()
}
