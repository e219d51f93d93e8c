//! Why a filesystem operation failed.
//!
//! An [`FsError`] is what [`WarehouseFs`](super::WarehouseFs) returns: the
//! errno the kernel is answered with (kept raw, so a number this crate has
//! no name for still reaches the kernel as it was) and, when the failure
//! came from the catalog, the coded error behind it, so the protocol layer
//! can log it with its stable code. Errors are cheap to clone: readers
//! waiting for one render share its failure.

use std::fmt;
use std::sync::Arc;

use nix::errno::Errno;

use crate::error::{Error, ErrorCode};

/// A failed filesystem operation.
#[derive(Debug, Clone)]
pub struct FsError {
    raw: i32,
    cause: Option<Arc<Error>>,
}

impl FsError {
    /// The errno the kernel is answered with.
    pub fn errno(&self) -> Errno {
        Errno::from_raw(self.raw)
    }

    /// The errno as the raw number the kernel receives.
    pub fn raw_errno(&self) -> i32 {
        self.raw
    }

    /// The stable code of the catalog error behind the failure, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        self.cause.as_ref().map(|e| e.code)
    }

    /// True for answers that are part of normal use or that any user can
    /// cause at will (a name that is not there, a file the caller may not
    /// read, an attribute that is not kept, a retry the kernel makes on its
    /// own), as opposed to a failure of the daemon or the warehouse worth a
    /// warning. The first kind is logged at debug level only, so no user
    /// can fill the daemon's log.
    pub fn is_expected(&self) -> bool {
        let routine = [
            Errno::ENOENT,
            Errno::ENOTDIR,
            Errno::EACCES,
            Errno::EPERM,
            Errno::ESTALE,
            Errno::EROFS,
            Errno::EBADF,
            Errno::EISDIR,
            Errno::ENODATA,
            Errno::EOPNOTSUPP,
            Errno::ERANGE,
        ];
        routine.contains(&self.errno())
            || self.code().is_some_and(|code| {
                matches!(
                    code,
                    ErrorCode::PathNotFound
                        | ErrorCode::PathInvalid
                        | ErrorCode::NameNotUtf8
                        | ErrorCode::VersionNotFound
                        | ErrorCode::TagNotFound
                        | ErrorCode::TagInvalid
                        | ErrorCode::BeingCounted
                )
            })
    }
}

impl From<Errno> for FsError {
    fn from(errno: Errno) -> Self {
        FsError {
            raw: errno as i32,
            cause: None,
        }
    }
}

/// A failed system call answers with its own errno (`EIO` if it has none),
/// an object the store refuses to read `EACCES`. An object store that
/// could not be reached answers `EIO`, and keeps its code and what failed
/// for the log.
impl From<std::io::Error> for FsError {
    fn from(error: std::io::Error) -> Self {
        if crate::error::is_remote_failure(&error) {
            return FsError::from(Error::new(ErrorCode::RemoteUnavailable, error.to_string()));
        }
        FsError {
            raw: crate::error::os_error(&error).unwrap_or(Errno::EIO as i32),
            cause: None,
        }
    }
}

/// A catalog error is answered with the system error behind it when there
/// is one, `ENOENT` for paths that are not there (or not shown), and `EIO`
/// for everything else.
impl From<Error> for FsError {
    fn from(error: Error) -> Self {
        let raw = match (error.os_error, error.code) {
            (Some(raw), _) => raw,
            (
                None,
                ErrorCode::PathNotFound
                | ErrorCode::PathInvalid
                | ErrorCode::NameNotUtf8
                | ErrorCode::VersionNotFound
                | ErrorCode::TagNotFound
                | ErrorCode::TagInvalid,
            ) => Errno::ENOENT as i32,
            (None, ErrorCode::BeingCounted) => Errno::EAGAIN as i32,
            (None, ErrorCode::HandleLimit) => Errno::EMFILE as i32,
            (None, _) => Errno::EIO as i32,
        };
        FsError {
            raw,
            cause: Some(Arc::new(error)),
        }
    }
}

/// The cause's text with control characters escaped: a name in the
/// warehouse can hold a newline, and must not forge a log line.
impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Some(cause) => write!(f, "{} ({})", cause.render().escape_debug(), self.errno()),
            None => write!(f, "{}", self.errno()),
        }
    }
}
