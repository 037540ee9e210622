//! The calls every kind of pool answers: stats, the three tiers of giving
//! back (purge, reclaim, reclaim_unused), drain, pressure, prefill, destroy; and the
//! process-wide ones: pressure notification and thread exit.

use std::ffi::c_char;

use tidepool::pressure::Level;

use crate::config::{self, tidepool_config, Common};
use crate::handle::{self, tidepool_pool};
use crate::stats::tidepool_stats;
use crate::status::tidepool_status::{self, *};
use crate::status::{entry, Error, Result};

/// Memory-pressure level: reclaim down to the working set now, then purge
/// what the depot keeps.
pub const TIDEPOOL_PRESSURE_MEDIUM: i32 = 1;
/// Memory-pressure level: drain to `min_idle`, thread caches included, and
/// hold there for `pressure_hold_ms` (by default only while critical
/// signals persist).
pub const TIDEPOOL_PRESSURE_CRITICAL: i32 = 2;

fn level(level: i32) -> Result<Level> {
    match level {
        TIDEPOOL_PRESSURE_MEDIUM => Ok(Level::Medium),
        TIDEPOOL_PRESSURE_CRITICAL => Ok(Level::Critical),
        other => Err(Error::new(
            TIDEPOOL_ERR_INVALID_ARGUMENT,
            format_args!(
                "pressure level {other} is neither TIDEPOOL_PRESSURE_MEDIUM (1) nor \
                 TIDEPOOL_PRESSURE_CRITICAL (2)"
            ),
        )),
    }
}

/// The body of every `tidepool_*_pool_new`: reads `config` as a `kind`
/// pool's, builds the pool with `build` (given the pool's id) and stores it
/// in `*out`.
///
/// # Safety
///
/// `config` must point to a readable `tidepool_config` of at least the size
/// its `size` field says; `out` must be writable.
pub(super) unsafe fn new_into(
    config: *const tidepool_config,
    out: *mut *mut tidepool_pool,
    kind: config::Kind,
    build: impl FnOnce(&tidepool_config, &Common, u64) -> Result<handle::Kind>,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: the caller's promise.
        let (config, common) = unsafe { config::read(config, kind) }?;
        let pool = handle::new_pool(|id| build(&config, &common, id))?;
        // SAFETY: checked non-null; the caller's promise.
        unsafe { out.write(pool) };
        Ok(TIDEPOOL_OK)
    })
}

/// Runs `op` on a checked pool and stores its count in `*n` (if not NULL).
///
/// # Safety
///
/// As for [`handle::pool`]; `n` must be `NULL` or writable.
unsafe fn counted(
    pool: *mut tidepool_pool,
    n: *mut usize,
    op: impl FnOnce(&handle::Kind) -> Result<usize>,
) -> tidepool_status {
    entry(|| {
        if !n.is_null() {
            // SAFETY: the caller's promise.
            unsafe { n.write(0) };
        }
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        let count = op(&pool.kind)?;
        if !n.is_null() {
            // SAFETY: the caller's promise.
            unsafe { n.write(count) };
        }
        Ok(TIDEPOOL_OK)
    })
}

/// The major version of the header: the `0` of `0.1.0`. It, the minor and
/// the patch are the library's version when the header was made; compare
/// them with `tidepool_version()` to see which library a program runs on.
/// While the major is 0, a new minor may break the ABI (the shared
/// library's SONAME, `libtidepool.so.0.1`, changes with it); a new patch
/// never does.
pub const TIDEPOOL_VERSION_MAJOR: u32 = 0;
/// The minor version of the header: the `1` of `0.1.0`.
pub const TIDEPOOL_VERSION_MINOR: u32 = 1;
/// The patch version of the header: the last `0` of `0.1.0`.
pub const TIDEPOOL_VERSION_PATCH: u32 = 0;

// The header's version is the crate's.
const _: () = {
    const fn parse(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut n = 0;
        while i < b.len() {
            n = n * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    assert!(TIDEPOOL_VERSION_MAJOR == parse(env!("CARGO_PKG_VERSION_MAJOR")));
    assert!(TIDEPOOL_VERSION_MINOR == parse(env!("CARGO_PKG_VERSION_MINOR")));
    assert!(TIDEPOOL_VERSION_PATCH == parse(env!("CARGO_PKG_VERSION_PATCH")));
};

/// The library's version, e.g. `"0.1.0"`: the version of the library the
/// program runs on, where `TIDEPOOL_VERSION_*` are the header's it was
/// compiled with. The string is static.
#[no_mangle]
pub extern "C" fn tidepool_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// Destroys a pool: every idle object is unmade now (through the `destroy`
/// callback for object pools), and the handle is invalid afterwards. No
/// callback of the pool runs once this returns: if one of tidepool's own
/// threads (the reclaimer, a thread handing its cache back as it exits) is
/// looking at the pool, the call waits for it to let go (up to 10 s; past
/// that, logged, and the last destroys run on that thread).
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`; `TIDEPOOL_ERR_BUSY` if
/// any object is still out (handed out or adopted, not put back): the pool
/// is then left untouched and usable.
///
/// # Safety
///
/// `pool` must be `NULL` or a pool from `tidepool_*_pool_new` not yet
/// destroyed, and no other thread may be using it.
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_destroy(pool: *mut tidepool_pool) -> tidepool_status {
    // SAFETY: the caller's promise.
    entry(|| unsafe { handle::destroy(pool) })
}

/// Fills `*out` with the pool's counts. Set `out->size = sizeof *out`
/// first; see `tidepool_stats` for versions.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_STRUCT_SIZE` (`out->size` smaller than the first version).
///
/// # Safety
///
/// `pool` as for [`tidepool_pool_destroy`] (other threads may use it);
/// `out` must be writable for `out->size` bytes.
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_stats(
    pool: *const tidepool_pool,
    out: *mut tidepool_stats,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        // SAFETY: the caller's promise.
        unsafe { crate::sized::write_out(out, pool.kind.stats()) }?;
        Ok(TIDEPOOL_OK)
    })
}

/// Reclaims what sat unused: destroys the idle objects in the shared depot
/// that sat unused since the previous call (never below `min_idle`). The pool does this on
/// its own every reclaim interval; call it if you know better when. `*n`
/// (if not `NULL`) is how many were destroyed.
///
/// # Errors
///
/// `TIDEPOOL_ERR_INVALID_POOL`, `TIDEPOOL_ERR_NULL` (for `pool`).
///
/// # Safety
///
/// `pool` as for [`tidepool_pool_stats`]; `n` must be `NULL` or writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_reclaim_unused(
    pool: *mut tidepool_pool,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, n, |k| Ok(k.reclaim_unused())) }
}

/// *Reclaim*: runs the pool's reclaim pass if one is due by its clock (what
/// the reclaimer thread does for pools built without
/// `TIDEPOOL_NO_BACKGROUND`): destroys what sat idle two intervals, purges
/// what sat idle one, takes back idle thread caches. `*n` (if not `NULL`)
/// is how many objects were destroyed.
///
/// # Errors
///
/// As for [`tidepool_pool_reclaim_unused`].
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_reclaim(
    pool: *mut tidepool_pool,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, n, |k| Ok(k.reclaim())) }
}

/// *Purge*: releases what idle objects in the depot hold while keeping
/// them pooled — a stack's pages (`madvise`, keeping `keep_resident` bytes),
/// an object's through its `purge` callback; buffers have nothing to purge.
/// `*n` (if not `NULL`) is how many objects were purged.
///
/// # Errors
///
/// As for [`tidepool_pool_reclaim_unused`].
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_purge(
    pool: *mut tidepool_pool,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, n, |k| Ok(k.purge())) }
}

/// Destroys every idle object the pool can reach now: the depot (ignoring
/// `min_idle`), every thread cache whose thread is not inside this pool at
/// the moment, and adopted objects waiting for reuse. `*n` (if not `NULL`)
/// is how many were destroyed.
///
/// # Errors
///
/// As for [`tidepool_pool_reclaim_unused`].
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_drain(
    pool: *mut tidepool_pool,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, n, |k| Ok(k.drain())) }
}

/// Applies a memory-pressure level to this pool now:
/// `TIDEPOOL_PRESSURE_MEDIUM` or `TIDEPOOL_PRESSURE_CRITICAL`. `*n` (if not
/// `NULL`) is how many idle objects were destroyed.
///
/// # Errors
///
/// As for [`tidepool_pool_reclaim_unused`], and `TIDEPOOL_ERR_INVALID_ARGUMENT` for
/// another level.
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_pressure(
    pool: *mut tidepool_pool,
    level: i32,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, n, |k| Ok(k.pressure(self::level(level)?))) }
}

/// Makes objects into the depot until it holds `min_idle`: the reserve.
/// `*n` (if not `NULL`) is how many were made; those made before an error
/// stay.
///
/// # Errors
///
/// As for [`tidepool_pool_reclaim_unused`], and as the kind's `get` for making one.
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_prefill(
    pool: *mut tidepool_pool,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, n, handle::Kind::prefill) }
}

/// Delivers a memory-pressure level to every pool built without
/// `TIDEPOOL_NO_BACKGROUND`, from tidepool's reclaimer thread, within
/// milliseconds; returns at once. For applications with their own
/// low-memory signal (tidepool also watches Linux PSI and cgroup pressure
/// by itself).
///
/// # Errors
///
/// `TIDEPOOL_ERR_INVALID_ARGUMENT` for a level other than
/// `TIDEPOOL_PRESSURE_MEDIUM` and `TIDEPOOL_PRESSURE_CRITICAL`.
#[no_mangle]
pub extern "C" fn tidepool_pressure_notify(level: i32) -> tidepool_status {
    entry(|| {
        tidepool::pressure::notify(self::level(level)?);
        Ok(TIDEPOOL_OK)
    })
}

/// Hands the calling thread's cached objects in every pool back to that
/// pool's shared depot, now, where other threads reuse them (nothing is
/// destroyed unless a depot is full, past `max_idle`). Optional:
/// a thread's caches are handed back when it exits anyway (from its
/// thread-local destructors); call this where that moment is not good
/// enough, e.g. before a thread parks for good, or at the start of a
/// runtime's own thread-exit hook, while the callbacks' `ctx` is still
/// valid. The thread may use pools again afterwards.
#[no_mangle]
pub extern "C" fn tidepool_thread_exit() -> tidepool_status {
    entry(|| {
        for pool in handle::live_pools() {
            pool.kind.trim_local();
        }
        Ok(TIDEPOOL_OK)
    })
}

/// `tidepool_pool_thread_exit` flag: destroy the calling thread's cached
/// objects (QEMU's thread-exit notifier deletes its thread's coroutine
/// pool) instead of handing them to the pool's depot.
pub const TIDEPOOL_THREAD_EXIT_DESTROY: u32 = 1;

/// What one pool does at the calling thread's exit, now: hands the thread's
/// cached objects to the pool's depot (`flags` 0, as a thread's exit does
/// by itself), or destroys them (`TIDEPOOL_THREAD_EXIT_DESTROY`). Other
/// pools are left alone (see [`tidepool_thread_exit`] for all of them). The
/// thread may use the pool again afterwards. `*n` (if `n` is not `NULL`)
/// is how many objects left the cache.
///
/// ```c
/// static void coroutine_pool_thread_exit(Notifier *n, void *unused) {
///     tidepool_pool_thread_exit(coroutine_pool, TIDEPOOL_THREAD_EXIT_DESTROY, NULL);
/// }
/// ```
///
/// # Errors
///
/// `TIDEPOOL_ERR_INVALID_ARGUMENT` for unknown `flags` (nothing is done).
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_thread_exit(
    pool: *mut tidepool_pool,
    flags: u32,
    n: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe {
        counted(pool, n, |kind| match flags {
            0 => Ok(kind.trim_local()),
            TIDEPOOL_THREAD_EXIT_DESTROY => Ok(kind.destroy_local()),
            other => Err(Error::new(
                TIDEPOOL_ERR_INVALID_ARGUMENT,
                format_args!("unknown thread-exit flags {other:#x}"),
            )),
        })
    }
}

/// Adds `delta` (negative: takes away) to the pool's cap on idle objects
/// in its depot, `max_idle`, while the pool is in use, from any thread;
/// concurrent changes add up, as QEMU's `qemu_coroutine_inc_pool_size` /
/// `dec_pool_size` do. Lowering the cap destroys the oldest idle objects
/// above it at once. `*max_idle` (if not `NULL`) is the cap after the
/// change (also in `tidepool_stats.max_idle`).
///
/// ```c
/// tidepool_pool_adjust_max_idle(pool, 1024, NULL);   // a device with 1024 queue slots arrives
/// tidepool_pool_adjust_max_idle(pool, -1024, NULL);  // and goes
/// ```
///
/// # Errors
///
/// `TIDEPOOL_ERR_INVALID_ARGUMENT`, naming `max_idle`, for a change that
/// would take the cap below the pool's `batch_size` or `min_idle` (or
/// below zero, or past `SIZE_MAX`): the pool is unchanged.
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_adjust_max_idle(
    pool: *mut tidepool_pool,
    delta: isize,
    max_idle: *mut usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { counted(pool, max_idle, |kind| kind.resize_max_idle(Some(delta), 0)) }
}

/// Sets the pool's cap on idle objects in its depot, `max_idle`, while the
/// pool is in use (see [`tidepool_pool_adjust_max_idle`] for the additive
/// form).
///
/// # Errors
///
/// As for [`tidepool_pool_adjust_max_idle`].
///
/// # Safety
///
/// As for [`tidepool_pool_reclaim_unused`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_pool_set_max_idle(
    pool: *mut tidepool_pool,
    max_idle: usize,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe {
        counted(pool, std::ptr::null_mut(), |kind| {
            kind.resize_max_idle(None, max_idle)
        })
    }
}
