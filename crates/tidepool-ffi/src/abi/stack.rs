//! The C entry points of stack pools: each checks its arguments, finds the
//! pool through [`crate::handle`] and calls [`crate::stack`].

use std::time::Duration;

use super::pool::new_into;
use crate::config::{self, tidepool_config};
use crate::handle;
use crate::stack::tidepool_stack;
use crate::status::tidepool_status::{self, *};
use crate::status::{entry, Error};

/// Builds a pool of guarded stacks with `config->object_size` usable
/// bytes each (rounded up to whole pages; 64 of them are tidepool's, at
/// the top). By default (on Linux and Android) the pool never holds more
/// stacks than the process's map-count budget allows; everywhere, a
/// kernel refusal is an error, never an abort. On success `*out` is the
/// new pool.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_STRUCT_SIZE`, `TIDEPOOL_ERR_CONFIG`
/// (naming the field), `TIDEPOOL_ERR_UNSUPPORTED` outside Unix.
///
/// # Safety
///
/// `config` must point to a readable `tidepool_config` of at least the
/// size its `size` field says; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_stack_pool_new(
    config: *const tidepool_config,
    out: *mut *mut crate::tidepool_pool,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe {
        new_into(config, out, config::Kind::Stack, |config, common, id| {
            #[cfg(unix)]
            {
                crate::stack::StackKind::build(config, common, id).map(handle::Kind::Stack)
            }
            #[cfg(not(unix))]
            {
                let _ = (config, common, id);
                Err(Error::new(
                    TIDEPOOL_ERR_UNSUPPORTED,
                    "stack pools need a Unix (mmap with a guard page)",
                ))
            }
        })
    }
}

/// Takes a stack from the pool (this thread's cache first; no syscall),
/// mapping a new one if none is idle, and describes it in `*out`.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`, `TIDEPOOL_ERR_EXHAUSTED` (`max_live`, by
/// default the map-count budget), and, after every stack pool gave back
/// its idle stacks and the mapping was tried again,
/// `TIDEPOOL_ERR_MAP_COUNT` or `TIDEPOOL_ERR_NO_MEMORY`;
/// `TIDEPOOL_ERR_OS` for other kernel refusals. `*out` is zeroed on
/// failure.
///
/// # Safety
///
/// `pool` must be `NULL` or a pool from `tidepool_*_pool_new` not yet
/// destroyed; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_stack_get(
    pool: *mut crate::tidepool_pool,
    out: *mut tidepool_stack,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, out, None) }
}

/// As [`tidepool_stack_get`], but at `max_live` it waits up to
/// `timeout_ns` nanoseconds for a stack to be given back (or a place to
/// free up under the limit), first come, first served: the oldest
/// waiter is handed the next stack put back on any thread, and one put
/// wakes one waiter. `timeout_ns == 0` does not wait:
/// `TIDEPOOL_ERR_TIMEOUT` at once when nothing is free.
///
/// ```c
/// tidepool_stack st;
/// tidepool_status s = tidepool_stack_get_timeout(pool, 10 * 1000 * 1000, &st); // 10 ms
/// if (s == TIDEPOOL_ERR_TIMEOUT) {
///     // max_live stacks still out after 10 ms
/// }
/// ```
///
/// # Errors
///
/// As [`tidepool_stack_get`], and `TIDEPOOL_ERR_TIMEOUT` if the wait
/// ran out.
///
/// # Safety
///
/// As [`tidepool_stack_get`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_stack_get_timeout(
    pool: *mut crate::tidepool_pool,
    timeout_ns: u64,
    out: *mut tidepool_stack,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, out, Some(Duration::from_nanos(timeout_ns))) }
}

/// The body of both stack gets.
///
/// # Safety
///
/// As [`tidepool_stack_get`].
unsafe fn get_into(
    pool: *mut crate::tidepool_pool,
    out: *mut tidepool_stack,
    timeout: Option<Duration>,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: checked non-null; the caller's promise.
        unsafe {
            out.write(tidepool_stack {
                base: std::ptr::null_mut(),
                top: std::ptr::null_mut(),
                size: 0,
                guard_size: 0,
                _gen: 0,
                _check: 0,
            })
        };
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        #[cfg(unix)]
        {
            let lent = pool.stack()?.get(timeout)?;
            // SAFETY: as above.
            unsafe { out.write(lent) };
            Ok(TIDEPOOL_OK)
        }
        #[cfg(not(unix))]
        {
            let _ = (pool, timeout);
            Err(Error::new(
                TIDEPOOL_ERR_UNSUPPORTED,
                "stack pools need a Unix (mmap with a guard page)",
            ))
        }
    })
}

/// Gives a stack back to its pool (this thread's cache), on any thread.
/// Nothing may run on it any more.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`; `TIDEPOOL_ERR_FOREIGN` if `*stack` was not
/// filled by `tidepool_stack_get` (checked without reading the stack) or
/// the header above its top was overwritten; `TIDEPOOL_ERR_WRONG_POOL`
/// if another pool lent it; `TIDEPOOL_ERR_DOUBLE_PUT` if it is already
/// back, or `*stack` is a stale copy from an earlier lending. The stack
/// is left as it was on every error.
///
/// # Safety
///
/// `pool` as for [`tidepool_stack_get`]; `stack` must be `NULL` or
/// readable. A stack put back and then unmapped by its pool (reclaim_unused,
/// reclaim, drain) must not be put again, as with `free`.
#[no_mangle]
pub unsafe extern "C" fn tidepool_stack_put(
    pool: *mut crate::tidepool_pool,
    stack: *const tidepool_stack,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        if stack.is_null() {
            return Err(Error::new(TIDEPOOL_ERR_NULL, "stack is NULL"));
        }
        // SAFETY: non-null and readable per the contract.
        let lent = unsafe { stack.read() };
        #[cfg(unix)]
        {
            // SAFETY: the caller's promise about unmapped stacks.
            unsafe { pool.stack()?.put(&lent) }
        }
        #[cfg(not(unix))]
        {
            let _ = (pool, lent);
            Err(Error::new(
                TIDEPOOL_ERR_UNSUPPORTED,
                "stack pools need a Unix (mmap with a guard page)",
            ))
        }
    })
}
