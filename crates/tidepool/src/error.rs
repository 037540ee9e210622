//! Why a `get` failed.

use std::fmt;

/// Why [`Pool::get`](crate::Pool::get) returned no object. The pool is
/// unchanged by a failed `get`: nothing was created and nothing counted.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error<E> {
    /// No idle object was at hand and the manager's `create` failed.
    Create(E),
    /// No idle object was at hand and creating one would exceed
    /// [`max_live`](crate::Builder::max_live).
    Exhausted {
        /// The configured `max_live`.
        limit: usize,
    },
}

impl<E> Error<E> {
    /// The manager's error, if that is what this is.
    pub fn into_create_error(self) -> Option<E> {
        match self {
            Error::Create(e) => Some(e),
            Error::Exhausted { .. } => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Create(e) => write!(f, "creating a pooled object failed: {e}"),
            Error::Exhausted { limit } => write!(
                f,
                "pool exhausted: {limit} objects exist (max_live) and none is idle"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Create(e) => Some(e),
            Error::Exhausted { .. } => None,
        }
    }
}
