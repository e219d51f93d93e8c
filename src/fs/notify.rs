//! Readiness for service managers: the notification protocol of systemd's
//! `Type=notify` units (sd_notify(3)). A manager that wants it names a
//! datagram socket in `NOTIFY_SOCKET` (a path, or `@name` for an abstract
//! one); each notification is one datagram of `KEY=VALUE` lines.
//!
//! A foreground mount sends `READY=1` once its mount answers a `statfs`
//! (so a unit ordered after it finds the warehouse there) and `STOPPING=1`
//! when it starts to unmount. A background mount's starting command sends
//! `MAINPID=<daemon>` with `READY=1` once the daemon's mount answers, which
//! makes the daemon the unit's main process; the daemon sends `STOPPING=1`.

use std::ffi::OsString;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable that names the manager's socket.
pub const NOTIFY_SOCKET_VAR: &str = "NOTIFY_SOCKET";

/// The variable in which systemd (248 and later) names the process it
/// started for the unit. A `NOTIFY_SOCKET` seen in any other process was
/// inherited by accident (a mount started from a shell inside some
/// service) and is not this process's to use.
pub const EXEC_PID_VAR: &str = "SYSTEMD_EXEC_PID";

/// Where notifications go, if a manager asked for them.
#[derive(Debug)]
pub struct Notifier {
    address: SocketAddr,
    socket: UnixDatagram,
    stopping: AtomicBool,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` asks for; `None` when it is unset,
    /// empty or unusable (logged), or meant for another process: when
    /// `SYSTEMD_EXEC_PID` is set, it must name this process, or, for a
    /// daemon its starting command started (`started_by_parent`), that
    /// command.
    pub fn from_env(started_by_parent: bool) -> Option<Notifier> {
        let name = std::env::var_os(NOTIFY_SOCKET_VAR)?;
        if let Some(exec_pid) = std::env::var_os(EXEC_PID_VAR) {
            let exec_pid = exec_pid.to_str().and_then(|p| p.parse::<u32>().ok());
            let ours = std::process::id();
            let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32);
            let meant = exec_pid == Some(ours) || (started_by_parent && exec_pid == parent);
            if !meant {
                log::debug!(
                    "{NOTIFY_SOCKET_VAR} is for process {exec_pid:?}, not this one; not notifying"
                );
                return None;
            }
        }
        match Notifier::to(&name) {
            Ok(notifier) => Some(notifier),
            Err(e) => {
                log::warn!("{NOTIFY_SOCKET_VAR}={name:?} is not usable: {e}; not notifying");
                None
            }
        }
    }

    fn to(name: &OsString) -> std::io::Result<Notifier> {
        let bytes = name.as_bytes();
        let address = match bytes.strip_prefix(b"@") {
            Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name)?,
            None if bytes.starts_with(b"/") => SocketAddr::from_pathname(name)?,
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "neither an absolute path nor @name",
                ));
            }
        };
        Ok(Notifier {
            address,
            socket: UnixDatagram::unbound()?,
            stopping: AtomicBool::new(false),
        })
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines); a failure is
    /// logged, never fatal.
    pub fn send(&self, state: &str) {
        match self.socket.send_to_addr(state.as_bytes(), &self.address) {
            Ok(_) => log::debug!("notified the service manager: {state:?}"),
            Err(e) => log::warn!("could not notify the service manager ({state:?}): {e}"),
        }
    }

    /// `READY=1`, for the process `main` when another than this one
    /// serves the mount.
    pub fn ready(&self, main: Option<u32>, status: &str) {
        let main = main
            .map(|pid| format!("MAINPID={pid}\n"))
            .unwrap_or_default();
        self.send(&format!("{main}READY=1\nSTATUS={status}"));
    }

    /// `STOPPING=1`, once.
    pub fn stopping(&self) {
        if !self.stopping.swap(true, Ordering::Relaxed) {
            self.send("STOPPING=1");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_a_path_socket_and_stopping_is_sent_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let notifier = Notifier::to(&path.clone().into_os_string()).unwrap();
        notifier.ready(Some(42), "serving");
        notifier.stopping();
        notifier.stopping();
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"MAINPID=42\nREADY=1\nSTATUS=serving");
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        assert!(listener.recv(&mut buf).is_err(), "STOPPING=1 only once");
    }

    #[test]
    fn a_relative_name_is_refused() {
        assert!(Notifier::to(&"notify".into()).is_err());
        assert!(Notifier::to(&"@pchronicle-test-abstract".into()).is_ok());
    }
}
