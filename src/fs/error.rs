//! Why a filesystem operation failed.
//!
//! An [`FsError`] is what [`WarehouseFs`](super::WarehouseFs) returns: the
//! errno the kernel is answered with and, when the failure came from the
//! catalog, the coded error behind it, so the protocol layer can log it
//! with its stable code. Errors are cheap to clone: readers waiting for
//! one render share its failure.

use std::fmt;
use std::sync::Arc;

use nix::errno::Errno;

use crate::error::{Error, ErrorCode};

/// A failed filesystem operation.
#[derive(Debug, Clone)]
pub struct FsError {
    errno: Errno,
    cause: Option<Arc<Error>>,
}

impl FsError {
    /// The errno the kernel is answered with.
    pub fn errno(&self) -> Errno {
        self.errno
    }

    /// The stable code of the catalog error behind the failure, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        self.cause.as_ref().map(|e| e.code)
    }

    /// True for answers that are part of normal use (a name that does not
    /// exist, an attribute that is not kept, a retry the kernel makes on
    /// its own), as opposed to a failure worth a warning.
    pub fn is_expected(&self) -> bool {
        match self.code() {
            Some(code) => matches!(
                code,
                ErrorCode::PathNotFound | ErrorCode::PathInvalid | ErrorCode::NameNotUtf8
            ),
            None => true,
        }
    }
}

impl From<Errno> for FsError {
    fn from(errno: Errno) -> Self {
        FsError { errno, cause: None }
    }
}

/// A failed system call answers with its own errno (`EIO` if it has none).
impl From<std::io::Error> for FsError {
    fn from(error: std::io::Error) -> Self {
        Errno::from_raw(error.raw_os_error().unwrap_or(Errno::EIO as i32)).into()
    }
}

/// A catalog error is answered with the system error behind it when there
/// is one, `ENOENT` for paths that are not there (or not shown), and `EIO`
/// for everything else.
impl From<Error> for FsError {
    fn from(error: Error) -> Self {
        let errno = match (error.os_error, error.code) {
            (Some(raw), _) => Errno::from_raw(raw),
            (None, ErrorCode::PathNotFound | ErrorCode::PathInvalid | ErrorCode::NameNotUtf8) => {
                Errno::ENOENT
            }
            (None, _) => Errno::EIO,
        };
        FsError {
            errno,
            cause: Some(Arc::new(error)),
        }
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Some(cause) => write!(f, "{} ({})", cause.render(), self.errno),
            None => write!(f, "{}", self.errno),
        }
    }
}
