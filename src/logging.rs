//! The process's log: `env_logger` with one format for a terminal or a
//! file (`[time LEVEL target] message`) and, once a background daemon has
//! pointed its standard error at the system log, the syslog protocol's
//! (`<PRIORITY>pchronicle[PID]: LEVEL target: message`, one datagram per
//! line, facility `daemon`), so journald and syslog daemons file each line
//! under `pchronicle` with its severity.
//!
//! A message is written with its control characters escaped
//! ([`crate::terminal::escaped`]): what it quotes (a name, a key, a
//! server's answer) can neither forge another line nor act on the
//! terminal the log is read on.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static SYSLOG_FORMAT: AtomicBool = AtomicBool::new(false);

/// The syslog facility `daemon`, shifted as the priority wants it.
const FACILITY_DAEMON: u8 = 3 << 3;

/// Starts logging at `RUST_LOG`, or at `default_filter` when unset.
pub fn init(default_filter: &str) {
    // Lance warns that it guesses the store prefix of every s3:// dataset
    // opened on the remote backend's own store; the guess is right.
    let default_filter = format!("{default_filter},lance_io::object_store=error");
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_filter))
        .format(|buf, record| {
            let message = record.args().to_string();
            let message = crate::terminal::escaped(&message);
            if SYSLOG_FORMAT.load(Ordering::Relaxed) {
                writeln!(
                    buf,
                    "<{}>pchronicle[{}]: {} {}: {}",
                    FACILITY_DAEMON | severity(record.level()),
                    std::process::id(),
                    record.level(),
                    record.target(),
                    message
                )
            } else {
                writeln!(
                    buf,
                    "[{} {:5} {}] {}",
                    buf.timestamp(),
                    record.level(),
                    record.target(),
                    message
                )
            }
        })
        .init();
}

/// Writes every later line in the syslog protocol's format.
pub fn use_syslog_format() {
    SYSLOG_FORMAT.store(true, Ordering::Relaxed);
}

/// The syslog severity of a log level.
fn severity(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}
