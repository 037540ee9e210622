//! What every entry point returns, the thread-local message behind a failure,
//! and the wrapper that keeps panics on the Rust side of the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every `tidepool_*` call that can fail.
///
/// `TIDEPOOL_OK` (0) is success and `TIDEPOOL_EMPTY` (1) a success that
/// found nothing; every error is negative. After an error,
/// [`tidepool_last_error`] says what went wrong in words (on the calling
/// thread, until its next failing call).
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum tidepool_status {
    /// Success.
    TIDEPOOL_OK = 0,
    /// `tidepool_obj_get` with `TIDEPOOL_GET_NO_CREATE` found no idle object
    /// and made none; the out-pointer is set to `NULL`. Not an error.
    TIDEPOOL_EMPTY = 1,
    /// A pointer argument that must not be `NULL` was.
    TIDEPOOL_ERR_NULL = -1,
    /// The pool pointer is not a live pool: never made by a
    /// `tidepool_*_pool_new`, or already destroyed (checked by a magic word;
    /// a pointer to freed or unreadable memory is undefined behaviour).
    TIDEPOOL_ERR_INVALID_POOL = -2,
    /// A call for one kind of pool on another, e.g. `tidepool_buf_get` on a
    /// stack pool.
    TIDEPOOL_ERR_WRONG_KIND = -3,
    /// A sized struct's `size` field is not one this library accepts: below
    /// the first version, between two versions, or larger than this
    /// library's struct with non-zero bytes past its end.
    TIDEPOOL_ERR_STRUCT_SIZE = -4,
    /// A setting cannot work; the message names the field.
    TIDEPOOL_ERR_CONFIG = -5,
    /// An argument is out of range: unknown flag bits, an unknown pressure
    /// level.
    TIDEPOOL_ERR_INVALID_ARGUMENT = -6,
    /// The pointer given to `put` was not handed out by any pool of this
    /// kind.
    TIDEPOOL_ERR_FOREIGN = -7,
    /// The object was already given back (and not handed out again since).
    TIDEPOOL_ERR_DOUBLE_PUT = -8,
    /// The object belongs to another pool of the same kind.
    TIDEPOOL_ERR_WRONG_POOL = -9,
    /// `tidepool_obj_adopt` of an object some pool already tracks.
    TIDEPOOL_ERR_ALREADY_POOLED = -10,
    /// The object pool's `create` callback failed (returned non-zero, or
    /// gave back `NULL` or an object already pooled).
    TIDEPOOL_ERR_CREATE = -11,
    /// No idle object was at hand and the pool holds `max_live` objects.
    TIDEPOOL_ERR_EXHAUSTED = -12,
    /// Memory ran out: a buffer allocation failed, or the kernel refused a
    /// stack mapping with `ENOMEM` well below the map count.
    TIDEPOOL_ERR_NO_MEMORY = -13,
    /// The process has as many memory mappings as `vm.max_map_count`
    /// allows, so no stack can be mapped (after every stack pool gave back
    /// its idle stacks and the mapping was tried again).
    TIDEPOOL_ERR_MAP_COUNT = -14,
    /// Another operating-system failure; the message has the details.
    TIDEPOOL_ERR_OS = -15,
    /// `tidepool_pool_destroy` of a pool whose objects are not all back.
    /// The pool is left as it was.
    TIDEPOOL_ERR_BUSY = -16,
    /// Not available on this platform (stack pools outside Unix).
    TIDEPOOL_ERR_UNSUPPORTED = -17,
    /// A bug in tidepool: Rust code panicked. The panic was caught at the
    /// boundary; the message has it. The pool's counts stay exact.
    TIDEPOOL_ERR_PANIC = -18,
    /// A `*_get_timeout` waited its whole timeout at `max_live` and no
    /// object was given back to it (nor a place freed under the limit).
    TIDEPOOL_ERR_TIMEOUT = -19,
}

use tidepool_status::*;

impl tidepool_status {
    /// The constant's name, e.g. `"TIDEPOOL_ERR_DOUBLE_PUT"`.
    pub fn name(self) -> &'static CStr {
        match self {
            TIDEPOOL_OK => c"TIDEPOOL_OK",
            TIDEPOOL_EMPTY => c"TIDEPOOL_EMPTY",
            TIDEPOOL_ERR_NULL => c"TIDEPOOL_ERR_NULL",
            TIDEPOOL_ERR_INVALID_POOL => c"TIDEPOOL_ERR_INVALID_POOL",
            TIDEPOOL_ERR_WRONG_KIND => c"TIDEPOOL_ERR_WRONG_KIND",
            TIDEPOOL_ERR_STRUCT_SIZE => c"TIDEPOOL_ERR_STRUCT_SIZE",
            TIDEPOOL_ERR_CONFIG => c"TIDEPOOL_ERR_CONFIG",
            TIDEPOOL_ERR_INVALID_ARGUMENT => c"TIDEPOOL_ERR_INVALID_ARGUMENT",
            TIDEPOOL_ERR_FOREIGN => c"TIDEPOOL_ERR_FOREIGN",
            TIDEPOOL_ERR_DOUBLE_PUT => c"TIDEPOOL_ERR_DOUBLE_PUT",
            TIDEPOOL_ERR_WRONG_POOL => c"TIDEPOOL_ERR_WRONG_POOL",
            TIDEPOOL_ERR_ALREADY_POOLED => c"TIDEPOOL_ERR_ALREADY_POOLED",
            TIDEPOOL_ERR_CREATE => c"TIDEPOOL_ERR_CREATE",
            TIDEPOOL_ERR_EXHAUSTED => c"TIDEPOOL_ERR_EXHAUSTED",
            TIDEPOOL_ERR_NO_MEMORY => c"TIDEPOOL_ERR_NO_MEMORY",
            TIDEPOOL_ERR_MAP_COUNT => c"TIDEPOOL_ERR_MAP_COUNT",
            TIDEPOOL_ERR_OS => c"TIDEPOOL_ERR_OS",
            TIDEPOOL_ERR_BUSY => c"TIDEPOOL_ERR_BUSY",
            TIDEPOOL_ERR_UNSUPPORTED => c"TIDEPOOL_ERR_UNSUPPORTED",
            TIDEPOOL_ERR_PANIC => c"TIDEPOOL_ERR_PANIC",
            TIDEPOOL_ERR_TIMEOUT => c"TIDEPOOL_ERR_TIMEOUT",
        }
    }

    /// Every status, in declaration order.
    pub const ALL: [tidepool_status; 21] = [
        TIDEPOOL_OK,
        TIDEPOOL_EMPTY,
        TIDEPOOL_ERR_NULL,
        TIDEPOOL_ERR_INVALID_POOL,
        TIDEPOOL_ERR_WRONG_KIND,
        TIDEPOOL_ERR_STRUCT_SIZE,
        TIDEPOOL_ERR_CONFIG,
        TIDEPOOL_ERR_INVALID_ARGUMENT,
        TIDEPOOL_ERR_FOREIGN,
        TIDEPOOL_ERR_DOUBLE_PUT,
        TIDEPOOL_ERR_WRONG_POOL,
        TIDEPOOL_ERR_ALREADY_POOLED,
        TIDEPOOL_ERR_CREATE,
        TIDEPOOL_ERR_EXHAUSTED,
        TIDEPOOL_ERR_NO_MEMORY,
        TIDEPOOL_ERR_MAP_COUNT,
        TIDEPOOL_ERR_OS,
        TIDEPOOL_ERR_BUSY,
        TIDEPOOL_ERR_UNSUPPORTED,
        TIDEPOOL_ERR_PANIC,
        TIDEPOOL_ERR_TIMEOUT,
    ];
}

/// A failed call: the status to return and the message for
/// [`tidepool_last_error`].
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) status: tidepool_status,
    pub(crate) message: String,
}

impl Error {
    pub(crate) fn new(status: tidepool_status, message: impl fmt::Display) -> Self {
        debug_assert!((status as i32) < 0, "{status:?} is not an error");
        Self {
            status,
            message: message.to_string(),
        }
    }
}

pub(crate) type Result<T = tidepool_status> = std::result::Result<T, Error>;

/// The status of a core error that is not the manager's own: `max_live`
/// reached (at once, or after a `*_get_timeout`'s whole wait).
pub(crate) fn limit_error<E: fmt::Display>(e: tidepool::Error<E>) -> Error {
    let status = match e {
        tidepool::Error::Timeout { .. } => TIDEPOOL_ERR_TIMEOUT,
        _ => TIDEPOOL_ERR_EXHAUSTED,
    };
    Error::new(status, e)
}

std::thread_local! {
    /// The last failure on this thread, as a C string.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `message` as this thread's last error. A message with an
/// interior NUL is cut there; a thread whose thread-locals are being
/// destroyed keeps no message (the status still says what failed).
fn set_last_error(status: tidepool_status, message: &str) {
    let text = format!("{}: {message}", status.name().to_string_lossy());
    let bytes: Vec<u8> = text.bytes().take_while(|&b| b != 0).collect();
    // No NUL is left in `bytes`, so this cannot fail.
    let c = CString::new(bytes).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = Some(c));
}

/// Runs the body of an entry point: turns its error into a status (keeping
/// the message for [`tidepool_last_error`]) and a panic into
/// `TIDEPOOL_ERR_PANIC`, so nothing unwinds into C.
#[inline]
pub(crate) fn entry(body: impl FnOnce() -> Result) -> tidepool_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            set_last_error(e.status, &e.message);
            e.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic with a non-string payload");
            let message = format!("tidepool panicked: {what}");
            set_last_error(TIDEPOOL_ERR_PANIC, &message);
            // A payload whose drop panics must not unwind out of here either.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(panic)));
            TIDEPOOL_ERR_PANIC
        }
    }
}

/// The message of the last failed `tidepool_*` call on the calling thread,
/// prefixed by its status name, e.g. `"TIDEPOOL_ERR_CONFIG: invalid tidepool
/// setting `max_idle`: ..."`; an empty string if no call has failed on this
/// thread.
///
/// Successful calls leave the message alone (as with `errno`). The pointer
/// stays valid until the next failing call on this thread; copy the text to
/// keep it (or use [`tidepool_last_error_copy`]).
#[no_mangle]
pub extern "C" fn tidepool_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|last| last.borrow().as_ref().map(|c| c.as_ptr()))
        .ok()
        .flatten()
        .unwrap_or(c"".as_ptr())
}

/// Copies the calling thread's last error message (see
/// [`tidepool_last_error`]) into `buf`, NUL-terminated and cut to fit
/// `len` bytes. Returns the length of the whole message, not counting the
/// NUL, as `snprintf` does: a result `>= len` means it was cut. `buf` may be
/// `NULL` when `len` is 0, to ask for the length.
///
/// # Safety
///
/// `buf` must be valid for writes of `len` bytes (or `len` must be 0).
#[no_mangle]
pub unsafe extern "C" fn tidepool_last_error_copy(buf: *mut c_char, len: usize) -> usize {
    let copy = |last: &RefCell<Option<CString>>| {
        let last = last.borrow();
        let text = last.as_ref().map_or(&[][..], |c| c.as_bytes());
        if len > 0 && !buf.is_null() {
            let n = text.len().min(len - 1);
            // SAFETY: the caller gives `len` writable bytes at `buf`; we write
            // `n + 1 <= len` of them, from a buffer that cannot overlap
            // (ours is a Rust allocation the caller never saw).
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        text.len()
    };
    catch_unwind(AssertUnwindSafe(|| LAST_ERROR.try_with(copy).unwrap_or(0))).unwrap_or(0)
}

/// The name of a status code, e.g. `"TIDEPOOL_ERR_DOUBLE_PUT"`; `"unknown"`
/// for a value that is none of them. The string is static.
#[no_mangle]
pub extern "C" fn tidepool_status_name(status: i32) -> *const c_char {
    tidepool_status::ALL
        .iter()
        .find(|s| **s as i32 == status)
        .map_or(c"unknown".as_ptr(), |s| s.name().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: `tidepool_last_error` returns a NUL-terminated string that
        // stays valid until this thread's next failing call.
        unsafe { CStr::from_ptr(tidepool_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = entry(|| panic!("boom {}", 42));
        assert_eq!(status, TIDEPOOL_ERR_PANIC);
        assert_eq!(last(), "TIDEPOOL_ERR_PANIC: tidepool panicked: boom 42");
    }

    #[test]
    fn errors_set_the_message_and_successes_keep_it() {
        let status = entry(|| Err(Error::new(TIDEPOOL_ERR_BUSY, "3 objects are out")));
        assert_eq!(status, TIDEPOOL_ERR_BUSY);
        assert_eq!(last(), "TIDEPOOL_ERR_BUSY: 3 objects are out");
        assert_eq!(entry(|| Ok(TIDEPOOL_OK)), TIDEPOOL_OK);
        assert_eq!(last(), "TIDEPOOL_ERR_BUSY: 3 objects are out");
    }

    #[test]
    fn copy_cuts_like_snprintf() {
        entry(|| Err(Error::new(TIDEPOOL_ERR_OS, "x\0hidden")));
        let full = "TIDEPOOL_ERR_OS: x";
        let mut buf = [0x7f as c_char; 8];
        // SAFETY: `buf` has 8 writable bytes.
        let n = unsafe { tidepool_last_error_copy(buf.as_mut_ptr(), buf.len()) };
        assert_eq!(n, full.len());
        // SAFETY: the copy is NUL-terminated within `buf`.
        let got = unsafe { CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(got.to_bytes(), &full.as_bytes()[..7]);
        // SAFETY: a length query writes nothing.
        let len = unsafe { tidepool_last_error_copy(std::ptr::null_mut(), 0) };
        assert_eq!(len, full.len());
    }

    #[test]
    fn every_status_has_a_distinct_name() {
        let mut names: Vec<_> = tidepool_status::ALL.iter().map(|s| s.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), tidepool_status::ALL.len());
        for s in tidepool_status::ALL {
            // SAFETY: a static C string.
            let name = unsafe { CStr::from_ptr(tidepool_status_name(s as i32)) };
            assert_eq!(name, s.name());
        }
        // SAFETY: a static C string.
        let unknown = unsafe { CStr::from_ptr(tidepool_status_name(-999)) };
        assert_eq!(unknown, c"unknown");
    }
}
