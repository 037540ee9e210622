//! The C entry points of object pools: each checks its arguments, finds the
//! pool through [`crate::handle`] and calls [`crate::obj`].

use super::pool::new_into;
use crate::config::{self, tidepool_config};
use crate::handle::{self, Kind as PoolKind};
use crate::obj::ObjKind;
use crate::status::entry;
use crate::status::tidepool_status::{self, *};
use std::ffi::c_void;
use std::time::Duration;

/// Builds a pool of C objects made by `config->create` and unmade by
/// `config->destroy` (required), with `config->ctx` passed to each call.
/// On success `*out` is the new pool.
///
/// `create` may be `NULL` for a pool whose objects the caller makes itself
/// (every get with `TIDEPOOL_GET_NO_CREATE`; a get without it, or a
/// prefill, then fails with `TIDEPOOL_ERR_CREATE`). The object-pool flags
/// in `config->flags`:
///
/// * `TIDEPOOL_OBJ_ACCEPT_FOREIGN`: a put may give the pool an object it
///   never handed out (made after `TIDEPOOL_EMPTY`); it joins the pool.
/// * `TIDEPOOL_OBJ_UNCHECKED`: no tracking of objects, so no detection of
///   foreign pointers, double puts or wrong pools: the fastest get and put
///   (see the costs in `tidepool_obj_get`), for callers that never get
///   those wrong.
///
/// The callbacks may be called from any thread, concurrently (see
/// `tidepool_destroy_fn` for which), never while tidepool holds a lock of
/// its own, so they may call tidepool themselves. They must not unwind
/// (C++ exceptions, `longjmp` out).
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_STRUCT_SIZE`, `TIDEPOOL_ERR_CONFIG`
/// (naming the field).
///
/// # Safety
///
/// `config` must point to a readable `tidepool_config` of at least the size
/// its `size` field says; `out` must be writable; the callbacks must be
/// valid functions of the declared types, safe to call as described above
/// for as long as the pool lives.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_pool_new(
    config: *const tidepool_config,
    out: *mut *mut crate::tidepool_pool,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe {
        new_into(config, out, config::Kind::Obj, |config, common, id| {
            ObjKind::build(config, common, id).map(PoolKind::Obj)
        })
    }
}

/// Takes an idle object (this thread's cache first), or makes one with the
/// `create` callback — unless `flags` has `TIDEPOOL_GET_NO_CREATE`: then,
/// with no idle object at hand, it returns `TIDEPOOL_EMPTY` and
/// `*out == NULL` (counted in `misses` and `empty_gets`), and the caller
/// may make the object itself and hand it over with
/// [`tidepool_obj_adopt`], or, in a pool built with
/// `TIDEPOOL_OBJ_ACCEPT_FOREIGN`, put it when done with it.
///
/// An unchecked pool that accepts foreign objects counts that object out
/// at the `TIDEPOOL_EMPTY` (it cannot tell it from its own at the put), so
/// under `max_live` it answers `TIDEPOOL_ERR_EXHAUSTED` rather than
/// `TIDEPOOL_EMPTY` when no room is left; a caller that then makes no
/// object gives the place back with [`tidepool_obj_unreserve`].
///
/// Cost: a get and a put of an object in this thread's cache are the core
/// pool's fast paths and a little entry code in an unchecked pool; a
/// checked pool (the default) adds two lookups in the process-wide set of
/// objects, one lock and one hash each (`bin/budget.sh` measures both).
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`, `TIDEPOOL_ERR_INVALID_ARGUMENT` (unknown
/// flags), `TIDEPOOL_ERR_CREATE` (the callback failed),
/// `TIDEPOOL_ERR_EXHAUSTED` (`max_live`). `*out` is `NULL` on failure.
///
/// # Safety
///
/// `pool` must be `NULL` or a pool from `tidepool_*_pool_new` not yet
/// destroyed; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_get(
    pool: *mut crate::tidepool_pool,
    flags: u32,
    out: *mut *mut c_void,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, flags, out, None) }
}

/// As [`tidepool_obj_get`], but at `max_live` it waits up to `timeout_ns`
/// nanoseconds for an object to be given back (or a place to free up under
/// the limit), first come, first served: the oldest waiter is handed the
/// next object put back on any thread, and one put wakes one waiter.
/// `timeout_ns == 0` does not wait: `TIDEPOOL_ERR_TIMEOUT` at once when
/// nothing is free (where `tidepool_obj_get` says `TIDEPOOL_ERR_EXHAUSTED`).
///
/// ```c
/// void *conn;
/// tidepool_status s = tidepool_obj_get_timeout(pool, 0, 2000000000ull, &conn); // 2 s
/// if (s == TIDEPOOL_ERR_TIMEOUT) {
///     // every connection still out after 2 s
/// }
/// ```
///
/// # Errors
///
/// As [`tidepool_obj_get`], and `TIDEPOOL_ERR_TIMEOUT` if the wait ran out.
///
/// # Safety
///
/// As [`tidepool_obj_get`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_get_timeout(
    pool: *mut crate::tidepool_pool,
    flags: u32,
    timeout_ns: u64,
    out: *mut *mut c_void,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, flags, out, Some(Duration::from_nanos(timeout_ns))) }
}

/// The body of both object gets.
///
/// # Safety
///
/// As [`tidepool_obj_get`].
unsafe fn get_into(
    pool: *mut crate::tidepool_pool,
    flags: u32,
    out: *mut *mut c_void,
    timeout: Option<Duration>,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: checked non-null; the caller's promise.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        let obj = pool.obj()?.get(flags, timeout)?;
        // SAFETY: as above.
        unsafe { out.write(obj) };
        Ok(if obj.is_null() {
            TIDEPOOL_EMPTY
        } else {
            TIDEPOOL_OK
        })
    })
}

/// Hands an object the caller made itself to the pool: it is now one of the
/// pool's objects, out with the caller (counted in `created`, `adopted` and
/// `live`, and under `max_live`). Put it back with [`tidepool_obj_put`]
/// like any other; the pool reuses, purges and reclaims it like one it
/// made and, when it lets it go, unmakes it with the `destroy` callback.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`, `TIDEPOOL_ERR_ALREADY_POOLED` (a checked
/// pool: some object pool already tracks this address),
/// `TIDEPOOL_ERR_EXHAUSTED` (`max_live` objects exist). On error the
/// object stays the caller's.
///
/// # Safety
///
/// `pool` as for [`tidepool_obj_get`]; `obj` must be fit to pass to the
/// pool's callbacks.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_adopt(
    pool: *mut crate::tidepool_pool,
    obj: *mut c_void,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        pool.obj()?.adopt(obj)
    })
}

/// Gives an object back to its pool, on any thread. In a pool built with
/// `TIDEPOOL_OBJ_ACCEPT_FOREIGN`, an object the pool never handed out
/// joins it here (as [`tidepool_obj_adopt`] would have taken it in); at
/// `max_live` such an object is destroyed instead (a put never fails for
/// want of room, as one past `max_idle` is destroyed too).
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`; in a checked pool (the default),
/// `TIDEPOOL_ERR_FOREIGN` if no object pool handed it out or adopted it
/// (and the pool does not accept foreign objects),
/// `TIDEPOOL_ERR_WRONG_POOL` if another one did, `TIDEPOOL_ERR_DOUBLE_PUT`
/// if it is already back. tidepool never reads the object, so none of
/// these checks can crash; the object stays the caller's.
///
/// # Safety
///
/// `pool` as for [`tidepool_obj_get`]. In an unchecked pool, `obj` must be
/// an object the pool lent (or adopted, or made after a `TIDEPOOL_EMPTY`
/// if the pool accepts foreign objects) and not yet put back: the put is
/// not checked, and a wrong one corrupts the pool's counts and hands the
/// object out twice.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_put(
    pool: *mut crate::tidepool_pool,
    obj: *mut c_void,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        pool.obj()?.put(obj)
    })
}

/// Gives back the place a `TIDEPOOL_EMPTY` reserved, for a caller that made
/// no object after it after all. Only pools built with both
/// `TIDEPOOL_OBJ_UNCHECKED` and `TIDEPOOL_OBJ_ACCEPT_FOREIGN` reserve one
/// (see [`tidepool_obj_get`]).
///
/// # Errors
///
/// `TIDEPOOL_ERR_INVALID_ARGUMENT` for any other pool, or when no object of
/// the pool is out.
///
/// # Safety
///
/// `pool` as for [`tidepool_obj_get`]; a `TIDEPOOL_EMPTY` of this pool was
/// answered and nothing was put (or unreserved) for it.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_unreserve(
    pool: *mut crate::tidepool_pool,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        pool.obj()?.unreserve()
    })
}
