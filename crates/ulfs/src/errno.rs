//! `Errno`: the error type of every syscall-shaped call.
//!
//! ulfs promises Linux errno values (DESIGN.md guarantee 1), so the error is
//! just the number, wrapped so it prints as the name and converts into
//! `std::io::Error` for the std-like layer and into `-errno` for the C ABI.

use std::fmt;

/// A Linux errno value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(pub const $name: Errno = Errno(libc::$name);)*

            /// The symbolic name (`"ENOENT"`), or `None` for a number ulfs never returns.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(libc::$name => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    EIO,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EFAULT,
    EBUSY,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    EOVERFLOW,
    EOPNOTSUPP,
    EUCLEAN,
    ENXIO,
    ENOTBLK,
    // The server's and its clients' (ulfs serve): a connection that is
    // gone, refused, or speaks another protocol; lock records exhausted.
    ENOTCONN,
    ECONNREFUSED,
    EPROTO,
    EADDRINUSE,
    ENOLCK,
);

impl Errno {
    /// The raw errno number.
    pub fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The OS's message, without std's " (os error N)" suffix.
        let msg = std::io::Error::from_raw_os_error(self.0).to_string();
        let text = msg.find(" (os error").map_or(msg.as_str(), |i| &msg[..i]);
        f.write_str(text)
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// The result type of every syscall-shaped call.
pub type Result<T> = std::result::Result<T, Errno>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_io_conversion() {
        assert_eq!(format!("{:?}", Errno::ENOENT), "ENOENT");
        assert_eq!(Errno::ENOTEMPTY.raw(), 39);
        let io: std::io::Error = Errno::EEXIST.into();
        assert_eq!(io.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(Errno(9999).name(), None);
    }
}
