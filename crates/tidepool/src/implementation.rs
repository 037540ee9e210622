//! How tidepool works.
//!
//! This module holds no code; it is a page of design notes next to the code
//! they describe. The source folders follow the same layers:
//! `cache/` (thread caches) → `depot/` (the shared, bounded store) →
//! `reclaim/` and `pressure/` (sizing the pool over time) → `os/` (the
//! kernel: mmap for stacks, eventfd and poll for the reclaimer, membarrier).
//!
//! # Layers
//!
//! ```text
//!   thread A                 thread B                 thread C (exited)
//!  ┌──────────────────┐     ┌──────────────────┐
//!  │ loaded  [o o o ] │     │ loaded  [o     ] │     its batches went back
//!  │ spare   [o o o o]│     │ spare   [      ] │     to the depot at exit
//!  └───────┬──────────┘     └───────┬──────────┘
//!          │ whole batches, once per batch_size ops
//!          ▼                        ▼
//!  ┌──────────────────────────────────────────────┐
//!  │ depot (one lock)   [oooo][oooo][oo][oooo]    │  objects <= max_idle
//!  └──────────────────────┬───────────────────────┘
//!                         │ create when empty / destroy past max_idle,
//!                         ▼ always outside the lock
//!                  manager (mmap, connect, ...)
//! ```
//!
//! ## Thread cache (`cache/`)
//!
//! Each thread that uses a pool owns one *slot* in it: a pair of batches,
//! `loaded` and `spare` (Bonwick & Adams' magazines, 2001; FreeBSD UMA's
//! alloc and free buckets). A get pops from `loaded`, a put pushes onto it,
//! and the two swap when `loaded` runs empty or full. The thread visits the
//! depot only when both are empty (get) or both full (put), so it can always
//! do a whole batch of either between visits: there is no thrashing at a
//! batch boundary, which a single batch would suffer.
//!
//! Finding the slot: every thread gets a small id (recycled smallest first),
//! kept in a constant-initialised thread-local; a pool keeps its slots in
//! buckets of doubling size indexed by id (`SlotTable`). A hit is: read the
//! id, one leading-zeros count and one pointer load to find the slot, a plain
//! store marking the owner busy, one load to check the slot is still ours,
//! `Vec::pop`/`push`, a plain store clearing busy, and a single-writer
//! counter bump. No lock, no atomic read-modify-write, no allocation (each
//! batch is allocated once with room for `batch_size`). About 150
//! instructions for a whole get + put round trip, guard included
//! (`bin/callgrind.sh`).
//!
//! Owner-only state (`LocalCache`) is its own type behind a `LocalSlot`
//! handle, which is `!Send` and made only after checking that the slot is
//! claimed by the calling thread. That check is sound because ids are unique
//! among live threads and a slot's previous owner stores `UNCLAIMED` (with
//! `Release`) before its id is freed.
//!
//! ## Depot (`depot/`)
//!
//! One list of batches behind one lock, oldest first. Refills take the newest
//! batch (hot objects, LIFO); trimming takes the oldest. The depot is the only
//! place where idle objects are bounded globally:
//!
//! ```text
//! depot objects <= max_idle
//! idle          <= max_idle + threads * 2 * batch_size
//! ```
//!
//! A donation that would pass `max_idle` is refused whole and the donor
//! destroys that batch after unlocking (QEMU 2024's global pool does the same,
//! with 128-object batches and a cap derived from `vm.max_map_count`).
//!
//! ## Taking back a live thread's cache (`cache/slot.rs`)
//!
//! A thread that stops using a pool but lives on would keep its two batches
//! forever, and critical memory pressure wants every idle object now. So
//! another thread (the reclaimer, a pressure response, `drain`) may take a
//! cache from its live owner. A slot is in one of five states:
//!
//! ```text
//! UNCLAIMED ──claim──► ACTIVE ──revoke──► REVOKING ──owner idle──► REVOKED
//!                        ▲                    │ owner busy             │
//!                        │                    ▼                        │
//!                        └──── claim ───── FLUSH ◄─── (re-)claim ──────┘
//! ```
//!
//! The owner brackets each cache access with plain stores to its `busy`
//! flag and a compiler fence; the revoker stores `REVOKING`, runs one
//! `membarrier(2)` for all the slots it revokes, then reads `busy`. The
//! barrier forces, on every running thread, the full fence the owner
//! skipped, so either the owner sees `REVOKING` and keeps off, or the
//! revoker sees `busy` and leaves a `FLUSH` request for the owner's next
//! access instead of touching the cache (folly's asymmetric fences; the loom
//! models replace the pair with two `SeqCst` fences and fail if the owner's
//! is dropped). Without `membarrier` (non-Linux, seccomp), revokers only
//! leave flush requests.
//!
//! ## Reclaim and pressure (`reclaim/`, `pressure/`)
//!
//! The depot keeps the low-water marks of its idle count over the current
//! and the previous reclaim interval. At each boundary (run lazily by the
//! first thread to visit the depot after it, or by the process-wide
//! reclaimer thread for pools nobody touches) it purges what sat unused
//! through the last interval and destroys what sat unused through the last
//! two, never below `min_idle`; thread caches untouched for a whole interval
//! are taken back. Memory pressure (PSI triggers, cgroup v1 notifications,
//! `pressure::notify`) reaches pools through the reclaimer thread: `Medium`
//! reclaims to the working set now, `Critical` drains to `min_idle`, caches
//! included, and holds the depot's cap at `min_idle` for `pressure_hold`.
//! See the [`reclaim`](crate::reclaim) and [`pressure`](crate::pressure)
//! module docs.
//!
//! # Accounting
//!
//! Counts that change on every operation (`gets`, `returns`) are per slot,
//! written only by the slot's owner with a plain load and store, and summed by
//! `stats()`. Counts that change only on the slow path (`created`,
//! `destroyed`, `detached`, `misses`, `discarded`) are shared atomics on their
//! own cache lines (FreeBSD's lesson: a hot shared counter written on every
//! allocation costs more than the allocation). The invariants, exact when no
//! thread is inside the pool:
//!
//! ```text
//! existing == created - destroyed - detached
//! live     == gets - returns - discarded - detached
//! live + idle == existing
//! ```
//!
//! Accounting is by pool, never by thread: an object taken on one thread and
//! dropped on another is counted once out and once back, whichever threads
//! those are. (QEMU's 2021 resizing pool kept per-thread counts of live
//! coroutines; coroutines created on one thread and freed on another drove
//! them out of sync, and the patch was dropped.)
//!
//! # Lifetimes: thread exit and pool drop
//!
//! A pool is an `Arc` of its shared state. The first time a thread uses a
//! pool it registers a `Weak` reference to it in a thread-local guard. When
//! the thread exits, the guard:
//!
//! 1. clears the thread's id, so later calls from other TLS destructors take
//!    the slot-less path (single objects straight to or from the depot);
//! 2. for each pool still alive (`Weak::upgrade`), moves the thread's batches
//!    to the depot (destroying what passes `max_idle`) and marks the slot
//!    `UNCLAIMED`;
//! 3. frees the id.
//!
//! When the pool drops, it destroys the depot and *every* slot's batches,
//! including those of threads that are still alive. Both never happen at
//! once for the same slot: while an exiting thread flushes, it holds a strong
//! reference, so the drop waits for it (and then runs on that thread); once
//! the pool is gone, the exiting thread's `upgrade` fails and it touches
//! nothing. The reclaimer thread reaches a pool through a handle that the
//! pool's drop closes first, waiting out a pass in progress, so the
//! reclaimer never holds the last reference. No other thread can be in the
//! middle of a `get` or `put` when the shared state drops: a borrowed guard
//! borrows the pool handle, and owned guards keep the state alive past the
//! handle (next section). So every object is destroyed exactly once, and by
//! the time the last of {`drop(pool)`, the owned guards} returns (unless a
//! thread is exiting at that very moment).
//!
//! # Owned guards
//!
//! An owned guard ([`OwnedPooled`](crate::OwnedPooled), and every
//! `PooledStack`) holds an uncounted copy of the handle's pointer, not an
//! `Arc`: taking and dropping one touch no shared reference count. The
//! shared state lives until the last of {the handle, the owned guards} is
//! gone (`src/lifetime.rs`, after Linux's `percpu_ref` and liburcu's
//! `membarrier` RCU):
//!
//! ```text
//! end of an owned guard:   marker[this thread] = pool    (plain store)
//!                          put / discard / detach        (counts the end)
//!                          marker[this thread] = 0       (plain store)
//! handle drop:             closed = true
//!                          free now if  live == 0  and no marker == pool,
//!                          else park it; the last end out frees it
//! live = gets - returns - discarded - detached  (the pool's own counts,
//!        ends read before starts, so never below the truth)
//! ```
//!
//! Invariant: the state is freed only when `live == 0`, no counted end is in
//! flight and no marker names the pool, read in that order; an end that
//! has been counted stored its marker first, and clears it only once it no
//! longer touches the pool. Closers that must wait ask the markers in their
//! way to wake (two `membarrier(2)` calls, only then), so whoever is last
//! frees the pool, and destroys its objects, before its own call returns.
//!
//! # Panics
//!
//! No manager method runs while a cache is borrowed or the depot is locked,
//! and the pool's state is consistent before each call, so a panic from user
//! code leaves nothing half-done. Batches are destroyed one object at a time
//! under `catch_unwind`, so one panicking `destroy` does not leak the rest; the
//! first panic is resumed afterwards (or dropped, in a TLS destructor, where a
//! panic would abort). A guard dropped while its thread panics destroys its
//! object rather than recycling something a panic may have left half-updated.
//!
//! # Prior art
//!
//! * Bonwick & Adams, *Magazines and Vmem* (USENIX 2001), and illumos
//!   `kmem.c`: the two-magazine cache, the depot, the low-water working-set
//!   filter and its 15 s period.
//! * Linux `membarrier(2)`, folly's asymmetric fences: taking a cache from a
//!   live thread without slowing the thread down.
//! * Xen blkback (2019): shrink hard, for a short window, under pressure.
//! * QEMU `util/qemu-coroutine.c` (2024): batches, a global pool capped from
//!   `vm.max_map_count`, at most two batches per thread.
//! * FreeBSD UMA and `vfs_subr.c`: per-CPU buckets; counters kept off the hot
//!   path.
//! * `thread_local` and sharded-slab: recycled thread ids and doubling
//!   buckets of per-thread state.
