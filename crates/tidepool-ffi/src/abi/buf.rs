//! The C entry points of buffer pools: each checks its arguments, finds the
//! pool through [`crate::handle`] and calls [`crate::buf`].

use super::pool::new_into;
use crate::buf::BufKind;
use crate::config::{self, tidepool_config};
use crate::handle::{self, Kind as PoolKind};
use crate::status::entry;
use crate::status::tidepool_status::{self, *};
use std::ffi::c_void;
use std::time::Duration;

/// Builds a pool of buffers of `config->object_size` bytes, each aligned to
/// `config->align` (at least 16). On success `*out` is the new pool.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_STRUCT_SIZE`, `TIDEPOOL_ERR_CONFIG`
/// (naming the field).
///
/// # Safety
///
/// `config` must point to a readable `tidepool_config` of at least the size
/// its `size` field says; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_buf_pool_new(
    config: *const tidepool_config,
    out: *mut *mut crate::tidepool_pool,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe {
        new_into(config, out, config::Kind::Buf, |config, common, id| {
            BufKind::build(config, common, id).map(PoolKind::Buf)
        })
    }
}

/// Takes a buffer from the pool (this thread's cache first), allocating one
/// if none is idle. On success `*out` is the buffer: `object_size` bytes,
/// aligned as configured, contents left as the last user left them.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`, `TIDEPOOL_ERR_EXHAUSTED` (`max_live`),
/// `TIDEPOOL_ERR_NO_MEMORY`. `*out` is set to `NULL` on failure.
///
/// # Safety
///
/// `pool` must be `NULL` or a pool from `tidepool_*_pool_new` not yet
/// destroyed; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_buf_get(
    pool: *mut crate::tidepool_pool,
    out: *mut *mut c_void,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, out, None) }
}

/// As [`tidepool_buf_get`], but at `max_live` it waits up to `timeout_ns`
/// nanoseconds for a buffer to be given back (or a place to free up under
/// the limit), first come, first served: the oldest waiter is handed the
/// next buffer put back on any thread, and one put wakes one waiter.
/// `timeout_ns == 0` does not wait: `TIDEPOOL_ERR_TIMEOUT` at once when
/// nothing is free (where `tidepool_buf_get` says `TIDEPOOL_ERR_EXHAUSTED`).
///
/// ```c
/// void *buf;
/// tidepool_status s = tidepool_buf_get_timeout(pool, 50 * 1000 * 1000, &buf); // 50 ms
/// if (s == TIDEPOOL_ERR_TIMEOUT) {
///     // still max_live buffers out after 50 ms
/// }
/// ```
///
/// # Errors
///
/// As [`tidepool_buf_get`], and `TIDEPOOL_ERR_TIMEOUT` if the wait ran out.
///
/// # Safety
///
/// As [`tidepool_buf_get`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_buf_get_timeout(
    pool: *mut crate::tidepool_pool,
    timeout_ns: u64,
    out: *mut *mut c_void,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, out, Some(Duration::from_nanos(timeout_ns))) }
}

/// The body of both buffer gets.
///
/// # Safety
///
/// As [`tidepool_buf_get`].
unsafe fn get_into(
    pool: *mut crate::tidepool_pool,
    out: *mut *mut c_void,
    timeout: Option<Duration>,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: checked non-null; the caller's promise.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        let buf = pool.buf()?.get(timeout)?;
        // SAFETY: as above.
        unsafe { out.write(buf.as_ptr()) };
        Ok(TIDEPOOL_OK)
    })
}

/// Gives a buffer back to its pool (this thread's cache), on any thread.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`; `TIDEPOOL_ERR_FOREIGN` if `buf` did not come
/// from a buffer pool, `TIDEPOOL_ERR_WRONG_POOL` if it came from another
/// one, `TIDEPOOL_ERR_DOUBLE_PUT` if it is already back. The buffer is left
/// as it was on every error.
///
/// # Safety
///
/// `pool` as for [`tidepool_buf_get`]. `buf` must be `NULL` or a pointer
/// whose 32 bytes below are readable (true of any buffer from a buffer
/// pool, put back or not, as long as its pool has not freed it); a buffer
/// put back and then freed by its pool (reclaim, reclaim_unused, drain) must not be
/// put again, as with `free`.
#[no_mangle]
pub unsafe extern "C" fn tidepool_buf_put(
    pool: *mut crate::tidepool_pool,
    buf: *mut c_void,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        // SAFETY: the caller's promise about `buf`.
        unsafe { pool.buf()?.put(buf) }
    })
}
