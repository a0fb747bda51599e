//! `Error`: the error of whole-image operations (mkfs, mount, fsck), which
//! need to say more than an errno: which image, and what is wrong with it.

use crate::errno::Errno;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub errno: Errno,
    pub message: String,
}

impl Error {
    pub fn new(errno: Errno, message: impl Into<String>) -> Error {
        Error {
            errno,
            message: message.into(),
        }
    }

    /// Wraps an OS error with what was being done.
    pub fn io(context: impl fmt::Display, e: std::io::Error) -> Error {
        match e.raw_os_error() {
            Some(n) => Error {
                errno: Errno(n),
                message: format!("{context}: {}", Errno(n)),
            },
            None => Error {
                errno: Errno::EIO,
                message: format!("{context}: {e}"),
            },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(e.errno.0).kind(),
            e.message,
        )
    }
}
