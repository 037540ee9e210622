//! A C ABI for [tidepool]: pools of guarded coroutine stacks, of fixed-size
//! buffers, and of opaque C objects made by C callbacks, with the same
//! per-thread caches, bounded depot, reclaim and memory-pressure handling as
//! the Rust library. The header is `include/tidepool.h` (generated from this
//! crate by cbindgen; `tests/header.rs` fails when it is out of date).
//!
//! # Usage from C
//!
//! ```c
//! #include "tidepool.h"
//!
//! tidepool_config cfg = { .size = sizeof cfg, .object_size = 64 * 1024 };
//! tidepool_pool *pool;
//! if (tidepool_buf_pool_new(&cfg, &pool) != TIDEPOOL_OK)
//!     fprintf(stderr, "%s\n", tidepool_last_error());
//! void *buf;
//! tidepool_buf_get(pool, &buf);   /* this thread's cache first */
//! tidepool_buf_put(pool, buf);    /* on any thread */
//! tidepool_pool_destroy(pool);
//! ```
//!
//! Install with `bin/c-install.sh --prefix=DIR` (cargo-c: `libtidepool.so`
//! with SONAME `libtidepool.so.0.1`, `libtidepool.a`, `tidepool.pc`,
//! `tidepool.h`), then build with
//! `cc app.c $(pkg-config --cflags --libs tidepool)`.
//!
//! # The three kinds
//!
//! * **Stacks** (`tidepool_stack_pool_new`, every Unix): `tidepool_stack_get`
//!   fills a `tidepool_stack` (`base`, `top`, `size`) for `makecontext` or
//!   any fiber switch; a guard page sits below `base`. Backed by
//!   [`tidepool::stack::StackPool`]: caps derived from `vm.max_map_count`,
//!   map failures returned as errors, never aborts.
//! * **Buffers** (`tidepool_buf_pool_new`): `object_size` bytes, aligned as
//!   asked.
//! * **Objects** (`tidepool_obj_pool_new`): whatever the `create` callback
//!   makes; the drop-in for QEMU's coroutine pool. `TIDEPOOL_GET_NO_CREATE`
//!   and `tidepool_obj_adopt` let the caller build objects itself and still
//!   pool them.
//!
//! # Waiting at `max_live`
//!
//! With `max_live` set, `tidepool_*_get` fails fast with
//! `TIDEPOOL_ERR_EXHAUSTED` when every object is out (after looking for an
//! idle one in every thread's cache and the depot). `tidepool_buf_get_timeout`,
//! `tidepool_obj_get_timeout` and `tidepool_stack_get_timeout` wait instead,
//! up to a timeout in nanoseconds, first come first served: a put on any
//! thread hands its object straight to the oldest waiter, one put wakes one
//! waiter. If the time runs out they return `TIDEPOOL_ERR_TIMEOUT`.
//!
//! ```c
//! void *buf;
//! switch (tidepool_buf_get_timeout(pool, 100 * 1000 * 1000, &buf)) { // 100 ms
//! case TIDEPOOL_OK: break;
//! case TIDEPOOL_ERR_TIMEOUT: // every buffer still out after 100 ms
//! default: fprintf(stderr, "%s\n", tidepool_last_error());
//! }
//! ```
//!
//! # Errors
//!
//! Every call that can fail returns a [`tidepool_status`]: 0 for success,
//! negative for an error, and a thread-local message in
//! [`tidepool_last_error`] (or copied out by [`tidepool_last_error_copy`]).
//! Every entry point catches Rust panics (`TIDEPOOL_ERR_PANIC`): nothing
//! unwinds into C. Misuse that can be checked has its own code: `NULL`
//! arguments, a pointer that is not a pool, a call for the wrong kind of
//! pool, a struct size of no known version, a foreign pointer put back, a
//! double put, a put to the wrong pool, destroying a pool with objects out.
//! See [`implementation`] for how each is detected and what it costs.
//!
//! # Threads and callbacks
//!
//! Pools may be shared by any number of threads; objects may be put back on
//! any thread. Callbacks never run while tidepool holds a lock of its own,
//! so they may call tidepool. A thread's caches are handed back when it
//! exits; [`tidepool_thread_exit`] does it on demand.
//!
//! # Replacing QEMU's coroutine pool
//!
//! QEMU's pool seam (`coroutine_pool_get/put`, the thread-exit notifier,
//! `qemu_coroutine_inc/dec_pool_size`) maps onto tidepool in about 30
//! lines, and nothing outside it changes: a get may still return NULL (QEMU
//! then makes the coroutine and later puts it like any other), and puts
//! come from any thread. The whole seam, QEMU's create / enter / terminate
//! shape, a QEMU-style two-level pool to compare with, and the tests are in
//! `examples/c/qemu_coroutine_pool.c`:
//!
//! ```c
//! static tidepool_pool *coroutine_pool;
//!
//! __attribute__((constructor)) static void coroutine_pool_init(void) {
//!     tidepool_config cfg = {
//!         .size = sizeof cfg,
//!         .flags = TIDEPOOL_OBJ_UNCHECKED | TIDEPOOL_OBJ_ACCEPT_FOREIGN,
//!         .destroy = coroutine_pool_delete,   /* void (*)(void *ctx, void *co) */
//!         .maps_per_object = 2,               /* stack + guard: caps from vm.max_map_count */
//!     };
//!     tidepool_obj_pool_new(&cfg, &coroutine_pool);
//! }
//! static Coroutine *coroutine_pool_get(void) {
//!     void *co = NULL;
//!     tidepool_obj_get(coroutine_pool, TIDEPOOL_GET_NO_CREATE, &co);
//!     return co;                              /* NULL: the caller makes one */
//! }
//! static void coroutine_pool_put(Coroutine *co) { tidepool_obj_put(coroutine_pool, co); }
//! static void coroutine_pool_thread_exit(Notifier *n, void *unused) {
//!     tidepool_pool_thread_exit(coroutine_pool, TIDEPOOL_THREAD_EXIT_DESTROY, NULL);
//! }
//! void qemu_coroutine_inc_pool_size(unsigned int n) {
//!     tidepool_pool_adjust_max_idle(coroutine_pool, (intptr_t)n, NULL);
//! }
//! void qemu_coroutine_dec_pool_size(unsigned int n) {
//!     tidepool_pool_adjust_max_idle(coroutine_pool, -(intptr_t)n, NULL);
//! }
//! ```
//!
//! Objects the caller made (`TIDEPOOL_GET_NO_CREATE`, then
//! `tidepool_obj_adopt`, or a plain put to a pool built with
//! `TIDEPOOL_OBJ_ACCEPT_FOREIGN`) are ordinary members, reclaimed like the
//! rest. Caveats: an unchecked pool trusts its puts (a double put hands a
//! coroutine out twice, as QEMU's own pool would); it counts the coroutine
//! QEMU makes after a NULL get at that get, so a caller that then makes
//! none calls `tidepool_obj_unreserve`; tidepool's reclaimer thread blocks
//! every signal but the fault signals, so QEMU's signalfd keeps its
//! SIGALRM, SIGIO and SIGBUS. What the seam costs, against QEMU's pool, is
//! in [`tidepool::performance`].

#![warn(missing_docs, missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks)]
// The exported names are C's (`tidepool_pool`, `TIDEPOOL_OK`).
#![allow(non_camel_case_types)]

mod abi;
mod buf;
mod config;
mod handle;
pub mod implementation;
mod live;
mod obj;
mod sized;
mod stack;
mod stats;
mod status;

pub use abi::buf::{
    tidepool_buf_get, tidepool_buf_get_timeout, tidepool_buf_pool_new, tidepool_buf_put,
};
pub use abi::obj::{
    tidepool_obj_adopt, tidepool_obj_get, tidepool_obj_get_timeout, tidepool_obj_pool_new,
    tidepool_obj_put, tidepool_obj_unreserve,
};
pub use abi::pool::{
    tidepool_pool_adjust_max_idle, tidepool_pool_destroy, tidepool_pool_drain,
    tidepool_pool_prefill, tidepool_pool_pressure, tidepool_pool_purge, tidepool_pool_reclaim,
    tidepool_pool_reclaim_unused, tidepool_pool_set_max_idle, tidepool_pool_stats,
    tidepool_pool_thread_exit, tidepool_pressure_notify, tidepool_thread_exit, tidepool_version,
    TIDEPOOL_PRESSURE_CRITICAL, TIDEPOOL_PRESSURE_MEDIUM, TIDEPOOL_THREAD_EXIT_DESTROY,
    TIDEPOOL_VERSION_MAJOR, TIDEPOOL_VERSION_MINOR, TIDEPOOL_VERSION_PATCH,
};
pub use abi::stack::{
    tidepool_stack_get, tidepool_stack_get_timeout, tidepool_stack_pool_new, tidepool_stack_put,
};
pub use config::{
    tidepool_config, tidepool_create_fn, tidepool_destroy_fn, tidepool_purge_fn,
    TIDEPOOL_NO_BACKGROUND, TIDEPOOL_OBJ_ACCEPT_FOREIGN, TIDEPOOL_OBJ_UNCHECKED,
    TIDEPOOL_STACK_GUARD_PROTECT,
};
pub use handle::tidepool_pool;
pub use obj::TIDEPOOL_GET_NO_CREATE;
pub use stack::tidepool_stack;
pub use stats::tidepool_stats;
pub use status::{
    tidepool_last_error, tidepool_last_error_copy, tidepool_status, tidepool_status_name,
};

/// The size of the first version of [`tidepool_config`] (it ends after
/// `destroy`); the header defines `TIDEPOOL_CONFIG_SIZE_VER0` the same way.
pub const CONFIG_SIZE_VER0: usize = config::CONFIG_SIZE_VER0;
/// The size of the first version of [`tidepool_stats`] (it ends after
/// `adopted`); the header defines `TIDEPOOL_STATS_SIZE_VER0` the same way.
pub const STATS_SIZE_VER0: usize = stats::STATS_SIZE_VER0;
