//! The daemon's error kinds, and the one place they become gRPC status codes.

use tonic::{Code, Status};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unimplemented(String),
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn internal(e: impl std::fmt::Display) -> Self {
        Error::Internal(e.to_string())
    }

    /// Prefixes the message with what was being done, keeping the kind.
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        let f = |m: String| format!("{what}: {m}");
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(f(m)),
            Error::NotFound(m) => Error::NotFound(f(m)),
            Error::AlreadyExists(m) => Error::AlreadyExists(f(m)),
            Error::FailedPrecondition(m) => Error::FailedPrecondition(f(m)),
            Error::Unimplemented(m) => Error::Unimplemented(f(m)),
            Error::DeadlineExceeded(m) => Error::DeadlineExceeded(f(m)),
            Error::Internal(m) => Error::Internal(f(m)),
        }
    }

    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::Internal(_) => Code::Internal,
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        let code = match &e {
            Error::Internal(m) if exhausted(m) => Code::ResourceExhausted,
            e => e.code(),
        };
        Status::new(code, e.to_string())
    }
}

/// Whether an internal error's message ends in the node running out of something: a
/// full filesystem or quota (ENOSPC, EDQUOT), no file descriptor to be had (EMFILE,
/// ENFILE), no process or thread (EAGAIN from fork and clone at a pid limit). Such a
/// failure is RESOURCE_EXHAUSTED, not a fault of crust's: the caller may retry once
/// the node has room. Every I/O error crust reports ends in the kernel's text and
/// `(os error N)` (nix's in `ENAME: text`), whatever the path that led to it.
fn exhausted(message: &str) -> bool {
    [
        libc::ENOSPC,
        libc::EDQUOT,
        libc::EMFILE,
        libc::ENFILE,
        libc::EAGAIN,
    ]
    .iter()
    .any(|n| message.contains(&format!("(os error {n})")))
        // nix's errors say their name instead.
        || ["ENOSPC: ", "EDQUOT: ", "EMFILE: ", "ENFILE: ", "EAGAIN: "]
            .iter()
            .any(|n| message.contains(n))
}

impl From<cni::CniError> for Error {
    fn from(e: cni::CniError) -> Self {
        Error::Internal(format!("CNI: {e}"))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_is_resource_exhausted() {
        let full = Error::Internal(
            "saving sandbox record x: No space left on device (os error 28)".into(),
        );
        assert_eq!(Status::from(full).code(), Code::ResourceExhausted);
        let fork = Error::Internal(
            "fork intermediate process: Resource temporarily unavailable (os error 11)".into(),
        );
        assert_eq!(Status::from(fork).code(), Code::ResourceExhausted);
        let pipe = Error::Internal("pipe: EMFILE: Too many open files".into());
        assert_eq!(Status::from(pipe).code(), Code::ResourceExhausted);
        let other = Error::Internal("mount: Invalid argument (os error 22)".into());
        assert_eq!(Status::from(other).code(), Code::Internal);
        let input = Error::InvalidArgument("(os error 28)".into());
        assert_eq!(Status::from(input).code(), Code::InvalidArgument);
    }
}
