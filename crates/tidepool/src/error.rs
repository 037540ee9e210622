//! Why a `get` failed.

use std::fmt;

/// Why [`Pool::get`](crate::Pool::get) returned no object. The pool is
/// unchanged by a failed `get`: nothing was created and nothing counted.
///
/// # As a `std::error::Error`
///
/// `Error<E>` is a [`std::error::Error`] for every manager error `E` that
/// is `Debug + Display` — a `String`, an `anyhow::Error`, or a type of your
/// own — so `pool.get()?` works in any function returning
/// `Box<dyn std::error::Error>` or `anyhow::Result`.
///
/// It is a *leaf*: its [`Display`](fmt::Display) includes the manager's
/// message (`creating a pooled object failed: <E>`) and
/// [`source`](std::error::Error::source) returns `None`, so an error
/// reporter that walks the `source()` chain prints the manager's message
/// exactly once (the rule of the Rust API guidelines and of `thiserror`:
/// show an inner error *or* return it as the source, never both). Returning
/// `E` as the source would need `E: std::error::Error`, which `String` and
/// `anyhow::Error` are not, and stable Rust cannot pick between the two by
/// type. When `E` has a cause chain of its own, take `E` out with
/// [`create_error`](Error::create_error) or
/// [`into_create_error`](Error::into_create_error) (or match
/// [`Error::Create`]) and report it directly.
///
/// ```
/// // A manager whose errors are plain strings.
/// struct Flaky;
/// impl tidepool::Manage for Flaky {
///     type Item = u32;
///     type Error = String;
///     fn create(&self) -> Result<u32, String> {
///         Err("the device is gone".to_owned())
///     }
/// }
///
/// fn take(pool: &tidepool::Pool<Flaky>) -> Result<u32, Box<dyn std::error::Error>> {
///     Ok(*pool.get()?)
/// }
///
/// let err = take(&tidepool::Pool::new(Flaky)).unwrap_err();
/// assert_eq!(err.to_string(), "creating a pooled object failed: the device is gone");
/// assert!(err.source().is_none(), "the message is shown once, by Display");
/// ```
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error<E> {
    /// No idle object was at hand and the manager's `create` failed.
    Create(E),
    /// Creating an object would exceed
    /// [`max_live`](crate::Builder::max_live), and no idle object was left
    /// anywhere in the pool: before failing, `get` looks in the depot and
    /// takes another thread's cache (see the
    /// [`implementation`](crate::implementation) notes, *Limits*).
    Exhausted {
        /// The configured `max_live`.
        limit: usize,
    },
    /// [`get_timeout`](crate::Pool::get_timeout) waited its whole timeout
    /// at [`max_live`](crate::Builder::max_live) and was handed no object.
    Timeout {
        /// The configured `max_live`.
        limit: usize,
    },
}

impl<E> Error<E> {
    /// The manager's error, if that is what this is.
    pub fn into_create_error(self) -> Option<E> {
        match self {
            Error::Create(e) => Some(e),
            Error::Exhausted { .. } | Error::Timeout { .. } => None,
        }
    }

    /// The manager's error, by reference, if that is what this is: the way
    /// to reach its own `source()` chain (see [`Error`]).
    pub fn create_error(&self) -> Option<&E> {
        match self {
            Error::Create(e) => Some(e),
            Error::Exhausted { .. } | Error::Timeout { .. } => None,
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
            Error::Timeout { limit } => write!(
                f,
                "timed out waiting for one of the pool's {limit} objects (max_live)"
            ),
        }
    }
}

/// A leaf error: `Display` carries the manager's message, so `source()` is
/// `None` (see [`Error`]).
impl<E: fmt::Debug + fmt::Display> std::error::Error for Error<E> {}
