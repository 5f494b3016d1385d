//! The image store's errors. Each message names the image (or path) and the cause;
//! `kind()` tells a server which status code to answer with.

/// What kind of failure an [`Error`] is, for mapping to a protocol's status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    InvalidArgument,
    AlreadyExists,
    Unauthenticated,
    Unavailable,
    FailedPrecondition,
    /// Content did not match its digest, or a layer could not be read.
    DataLoss,
    /// The store's filesystem is full (ENOSPC, EDQUOT).
    ResourceExhausted,
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such image, tag, manifest or blob (locally or in the registry).
    #[error("{0}")]
    NotFound(String),
    /// A malformed reference, archive, manifest or layer (including unsafe paths).
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// The registry refused the credentials (or wanted some).
    #[error("{0}")]
    Unauthenticated(String),
    /// The registry could not be reached or failed.
    #[error("{0}")]
    Unavailable(String),
    /// E.g. no manifest for this node's platform.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A digest mismatch or a truncated or corrupt blob.
    #[error("{0}")]
    DataLoss(String),
    /// No space left on the store's filesystem (ENOSPC) or over a quota (EDQUOT).
    #[error("{0}")]
    ResourceExhausted(String),
    /// Anything on the node: files, permissions, a full disk.
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::AlreadyExists(_) => ErrorKind::AlreadyExists,
            Error::Unauthenticated(_) => ErrorKind::Unauthenticated,
            Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::FailedPrecondition(_) => ErrorKind::FailedPrecondition,
            Error::DataLoss(_) => ErrorKind::DataLoss,
            Error::ResourceExhausted(_) => ErrorKind::ResourceExhausted,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }

    /// Prefixes the message with what was being done, keeping the kind.
    pub fn context(self, what: impl std::fmt::Display) -> Error {
        let f = |m: String| format!("{what}: {m}");
        match self {
            Error::NotFound(m) => Error::NotFound(f(m)),
            Error::InvalidArgument(m) => Error::InvalidArgument(f(m)),
            Error::AlreadyExists(m) => Error::AlreadyExists(f(m)),
            Error::Unauthenticated(m) => Error::Unauthenticated(f(m)),
            Error::Unavailable(m) => Error::Unavailable(f(m)),
            Error::FailedPrecondition(m) => Error::FailedPrecondition(f(m)),
            Error::DataLoss(m) => Error::DataLoss(f(m)),
            Error::ResourceExhausted(m) => Error::ResourceExhausted(f(m)),
            Error::Internal(m) => Error::Internal(f(m)),
        }
    }

    pub(crate) fn io(what: impl std::fmt::Display, e: std::io::Error) -> Error {
        let m = format!("{what}: {e}");
        if is_no_space(&e) {
            Error::ResourceExhausted(m)
        } else {
            Error::Internal(m)
        }
    }
}

/// ENOSPC or EDQUOT: the filesystem (or the quota) is full.
pub(crate) fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Adds "what was being done" to io results.
pub(crate) trait IoContext<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T> {
        self.map_err(|e| Error::io(what, e))
    }
}
