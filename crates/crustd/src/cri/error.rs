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
        Status::new(e.code(), e.to_string())
    }
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
