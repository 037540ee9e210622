//! How the C ABI is built on tidepool, and what its checks cost.
//!
//! This module holds no code.
//!
//! # Layers
//!
//! ```text
//!  C caller ──► abi/{stack,buf,obj,pool}.rs: extern "C" fn
//!                    │   status::entry (catch_unwind → status, message)
//!                    ▼
//!               handle.rs   tidepool_pool: magic check (is this a live pool?),
//!                    │      kind (stack │ buf │ obj, else WRONG_KIND), dispatch
//!                    ▼
//!          stack.rs / buf.rs / obj.rs ──► tidepool::Pool (thread cache → depot)
//!                    │
//!                    ▼
//!          config.rs, live.rs, stats.rs, sized.rs, status.rs
//! ```
//!
//! Imports go down this picture only: a kind never names the handle or the
//! entry points, and the handle never names an entry point.
//!
//! A handle is an `Arc<tidepool_pool>` given to C as a raw pointer; a weak
//! list of live pools serves `tidepool_thread_exit`.
//!
//! # Keeping the core guard while an object is out
//!
//! The core pool lends objects through guards that give them back when
//! dropped; C has no destructors, so the FFI keeps each guard until `put`:
//!
//! | kind | where the guard waits | how `put` finds it |
//! |---|---|---|
//! | buffer | a 32-byte header just below the buffer | pointer − 32 |
//! | stack | a 64-byte header at the top of the stack | `tidepool_stack.top` |
//! | object | the process-wide live set (`live.rs`) | the object's address |
//!
//! Buffer and object guards borrow their pool for `'static`
//! (`Pooled<'static, _>`): no reference count moves on `get` or `put`. That
//! is sound because `tidepool_pool_destroy` refuses (`TIDEPOOL_ERR_BUSY`)
//! while `live > 0`, and a pool is freed nowhere else. Stack guards are
//! `PooledStack`s, which keep their pool alive as the core's owned guards
//! do (no reference count: see the core's `lifetime` module).
//!
//! # Misuse, detected
//!
//! Each header has a magic, the pool id, and a state word moved LIVE → IDLE
//! by one compare-and-swap on `put`, so that of two racing puts of one
//! object exactly one wins:
//!
//! ```text
//! buffer put:  NULL? ─► aligned? ─► magic ─► pool id ─► CAS(state LIVE→IDLE) ─► drop guard
//!                 NULL    FOREIGN   FOREIGN  WRONG_POOL   DOUBLE_PUT
//! stack put:   NULL? ─► check word ─► magic ─► pool id ─► generation ─► CAS ─► drop guard
//!                 NULL    FOREIGN      FOREIGN WRONG_POOL DOUBLE_PUT    DOUBLE_PUT
//!                                      (0: purged since: DOUBLE_PUT)
//! object put:  NULL? ─► live set: absent ─► other pool ─► idle ─► mark idle ─► from_raw, drop
//! (checked)       NULL     FOREIGN          WRONG_POOL    DOUBLE_PUT
//!                          (ACCEPT_FOREIGN: adopt it)
//! object put:  NULL? ─► from_raw, drop                  (TIDEPOOL_OBJ_UNCHECKED: trusted)
//! ```
//!
//! * A stack's `tidepool_stack` carries a check word, a keyed hash of `top`
//!   and the lending's generation: a struct that `get` did not fill is
//!   refused before any memory is read. The generation also catches a stale
//!   copy of the struct after the stack was lent again.
//! * A buffer's checks read the 32 bytes below the pointer: a foreign pointer
//!   is caught if those are readable (any heap or stack address is). A put
//!   after the pool freed the buffer is undefined, as with `free`.
//! * Objects are never read: the live set decides. It also tells apart a
//!   wrong pool from a foreign pointer, which is why it is one set for all
//!   object pools, sharded 64 ways by address.
//!
//! # Object pools: adoption
//!
//! A lent object is the core pool's item taken out of its guard
//! (`Pooled::into_raw`): the core counts it live, and a put turns it back
//! (`Pooled::from_raw`) and drops the guard, the core's own put. An object
//! the caller made joins through the core's `Pool::adopt`, which counts it
//! created, adopted and live (a place under `max_live`): from then on it is
//! an ordinary member, reused, reclaimed, purged and destroyed like the
//! rest. `TIDEPOOL_GET_NO_CREATE` is the core's `Pool::try_get`, which never
//! creates and counts an empty get.
//!
//! A checked pool adopts a foreign object at its put (`TIDEPOOL_OBJ_ACCEPT_FOREIGN`),
//! since the live set tells it apart. An unchecked pool cannot, so it counts
//! the caller's object at the `TIDEPOOL_EMPTY` instead: the core adopts a
//! placeholder (never a real object, never pooled) and the put of the real
//! one is an ordinary put; `tidepool_obj_unreserve` detaches the
//! placeholder's count if no object comes. Counts are the core's, exact:
//!
//! ```text
//! created  = create callbacks + adopted          (adopted: adopt, foreign puts, reservations)
//! live + idle + destroying = created - destroyed - detached   (no thread inside the pool)
//! ```
//!
//! # Callbacks and locks
//!
//! The FFI's locks are the live-set shards and the list of pools. Each is held only around a lookup or a `Vec` operation:
//! callbacks run after it is released, and so does the drop of a core
//! guard (which may destroy objects, whose `destroy` removes them from the
//! live set). The core pool never calls a manager under its own locks.
//! `tests/c/api_test.c`'s `reentrant_callbacks` case has callbacks call
//! back into the same pool, which would deadlock otherwise.
