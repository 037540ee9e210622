//! Pooled coroutine and fiber stacks: guarded stacks carved from slabs,
//! kept within the process's map-count budget, purgeable while idle.
//!
//! Mapping a stack on its own costs an `mmap` and an `mprotect` (a few µs),
//! an `munmap` (and its TLB shootdown) to undo, plus page faults on first
//! touch, and two of the process's `vm.max_map_count` VMAs.
//! QEMU's coroutine pools hit both problems: too small, and creating stacks
//! was the bottleneck (2021); unbounded per thread, and the process ran into
//! the map count and aborted with "failed to allocate memory for stack"
//! (2024). A [`StackPool`] is a [`Pool`](crate::Pool) of [`GuardedStack`]s
//! made by a [`StackManager`]:
//!
//! * **Reuse is cheap**: a `get` served from this thread's cache is a few
//!   pointer moves: no syscall, no lock, no shared reference count.
//! * **Made and unmade in bulk**: stacks are carved from [slabs](#slabs) of
//!   up to 32, one `mmap` per slab and one guard call per stack (a
//!   page-table marker, `madvise(MADV_GUARD_INSTALL)`, on Linux 6.13+; an
//!   `mprotect` elsewhere: [`GuardMode`]), and a slab goes with one
//!   `munmap` once its last stack is destroyed.
//! * **Bounded by the map count** (Linux): by default `max_live` and
//!   `max_idle` are the [`MapBudget`] read from
//!   `/proc/sys/vm/max_map_count` (the kernel default if the file cannot
//!   be read): `(vm.max_map_count - 5000) / v` stacks, `v` the VMAs a
//!   stack costs at most, 1 with guard markers (a slab is one VMA), 2 with
//!   `PROT_NONE` guards (60530 or 30265 for the usual 65530). Past it `get` returns
//!   [`StackError::Exhausted`]. Other systems have no map count (see
//!   [Per OS](#per-os)).
//! * **Never aborts**: if the kernel refuses a mapping (`ENOMEM`), every
//!   stack pool in the process drains its idle stacks and the mapping is
//!   tried once more; if it still fails, [`StackError`] says which limit was
//!   hit: [`MapCountReached`](StackError::MapCountReached) with the VMA
//!   counts, or [`OutOfMemory`](StackError::OutOfMemory). Nothing is left
//!   half-built: a slot whose `mprotect` failed goes back to its slab, and a
//!   slab left without stacks is unmapped.
//! * **Three tiers of giving back**, in the crate's words: *trim* (thread
//!   caches return batches to the depot; the core does this), *purge* (an
//!   idle stack releases its pages but keeps its mapping:
//!   [`StackPool::purge`], keeping the top `keep_resident` bytes), *reclaim*
//!   (idle stacks are destroyed: [`StackPool::drain`], or the pool's own
//!   reclaim for the stacks its working set does not need; a destroyed
//!   stack's pages are released at once, its slab unmapped with its last
//!   stack).
//!
//! ```
//! use tidepool::stack::StackPool;
//!
//! use tidepool::stack::GuardMode;
//!
//! let pool = StackPool::builder(128 * 1024).keep_resident(16 * 1024).build()?;
//! let stack = pool.get()?;
//! // Run a coroutine or fiber between `stack.bottom()` and `stack.top()`.
//! assert!(stack.guard().end == stack.usable().start);
//! drop(stack);
//! let stats = pool.stats();
//! assert_eq!((stats.mapped, stats.slabs, stats.mmap_calls), (1, 1, 1));
//! if pool.manager().guard_mode() == GuardMode::Markers {
//!     // Linux 6.13+: the guard is a page-table marker, the slab one VMA.
//!     assert_eq!((stats.vmas, stats.guard_calls, stats.mprotect_calls), (1, 1, 0));
//! } else {
//!     // A PROT_NONE guard page splits it: guard and stack, two VMAs.
//!     assert_eq!((stats.vmas, stats.guard_calls, stats.mprotect_calls), (2, 0, 1));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Slabs
//!
//! A pool's stacks live in slabs of its own (stacks of two pools never
//! share one). A slab is one reservation of `k` slots, each a guard page
//! with a stack right above it:
//!
//! ```text
//!  low addresses                                              high addresses
//!  │ guard │ stack 0 │ guard │ stack 1 │ guard │ stack 2 │ ... │ guard │ stack k-1 │
//!  └──────────────────────────── one mmap, one munmap ──────────────────────────┘
//!  markers: └ madvise ┘         └ madvise ┘         └ madvise ┘     └ madvise ┘      one VMA
//!  PROT_NONE:        └ mprotect ┘        └ mprotect ┘        └ mprotect ┘   └ mprotect ┘  2 VMAs per stack
//! ```
//!
//! * **Creating**, with guard markers ([`GuardMode::Markers`], the default
//!   on Linux 6.13+): the slab is mapped whole, writable and
//!   `MAP_NORESERVE` (no memory until touched, no overcommit charge unless
//!   `vm.overcommit_memory` is 2), and each slot's guard becomes a marker
//!   (`madvise(MADV_GUARD_INSTALL)`) the first time the slot is used. A
//!   marker lives in the page tables: the slab stays one VMA, so no call
//!   splits it and its `munmap` has one area to remove. With `PROT_NONE`
//!   guards ([`GuardMode::Protect`], other systems and older kernels): the
//!   slab is mapped `PROT_NONE` (no memory, no overcommit charge) and each
//!   slot's stack is opened (`mprotect`) the first time it is used, top
//!   slot first. Either way `k` stacks cost `1 + k` calls instead of `2k`,
//!   and markers make each call cheaper (no VMA split; [`performance`](crate::performance#stacks)
//!   gives the measured refill times).
//!   [`Manage::create_batch`](crate::Manage::create_batch)
//!   carves a whole burst at once, the seed 004 way (DragonFly grew its
//!   zone allocator 32 pages at a time, not 4).
//! * **Size**: `k` is [`StackManager::stacks_per_slab`]: at most
//!   [`MAX_STACKS_PER_SLAB`] (32) stacks and [`MAX_SLAB_BYTES`] (8 MiB) of
//!   address space, so 64 KiB stacks come 32 to a slab, 1 MiB ones 7, and
//!   stacks of 4 MiB or more one to a slab. Never more slots than
//!   `max_live` leaves room for: a burst near the budget is shrunk.
//! * **VMAs**: with markers a slab is one VMA whatever it holds, and the
//!   map-count budget counts one VMA per stack (the worst case: slabs of
//!   one stack). `PROT_NONE` guards split a slab into one VMA per guard and
//!   per stack, so a slab of `p` opened stacks is `2p` VMAs (the unopened
//!   rest merges with the lowest guard), what `p` separate stacks cost, and
//!   the budget counts two per stack. A destroyed stack's slot keeps its
//!   VMAs until the slab is unmapped ([`StackStats::vmas`]); new stacks
//!   reuse free slots first, so slots never outgrow `max_live`.
//! * **Destroying**: a stack's slot is freed and its pages released
//!   (`madvise`); the slab is unmapped with one `munmap`, exactly once,
//!   when its last stack goes, after its last stacks' pages were released
//!   the same way.
//!   [`Manage::destroy_batch`](crate::Manage::destroy_batch) frees a whole
//!   batch with one `munmap` per slab it empties and one `madvise` per run
//!   of adjacent stacks, at most a [release step](#teardown-and-the-rest-of-the-process)
//!   each; the `munmap`s drop to one per `k` stacks torn down.
//! * **Reusing a freed slot** costs no syscall (its guard is still in
//!   place, a marker too: `MADV_DONTNEED` keeps markers; and its pages
//!   read as zeros on Linux).
//! * **Purging**: [`Manage::purge_batch`](crate::Manage::purge_batch)
//!   releases a run of adjacent idle stacks with one `madvise` (on Linux,
//!   when `keep_resident` is 0: a kept top separates two stacks).
//! * A stack stays mapped, guard and all, at least as long as it lives: a
//!   [`PooledStack`], or a [`GuardedStack`] detached from the pool (which
//!   keeps its slab mapped until it is dropped).
//!
//! * **Across `fork`**: the child gets the parent's stacks with their
//!   guards (markers are copied with the page tables; tested).
//!
//! [`StackStats`] counts slabs, slots and every `mmap`, `mprotect`,
//! guard-marker `madvise`, other `madvise` and `munmap` made for a pool's
//! stacks.
//!
//! # Teardown and the rest of the process
//!
//! Freeing memory costs the other threads of a process more than the CPU
//! time it takes. An `munmap` holds the process's address-space lock for
//! write while it frees every resident page of the range, and every other
//! thread's `mmap`, `munmap` and `mprotect` (thread creation, `malloc`
//! growing its heap, another pool's slab) waits behind it: an 8 MiB slab
//! of touched stacks is milliseconds of that. So a stack pool tears down in
//! two moves:
//!
//! 1. **Release, a step at a time.** The pages of the stacks going away
//!    are released with `madvise`, at most
//!    [`release_step`](crate::Builder::release_step) bytes per call
//!    (default [`DEFAULT_RELEASE_STEP`](crate::DEFAULT_RELEASE_STEP), 4 MiB).
//!    A release takes the lock for read only, and on Linux 6.16+ not at
//!    all (the area's own lock instead), so another thread's `mmap` waits
//!    for one step at most, or not at all.
//! 2. **Unmap the emptied slab.** Its `munmap` then frees no page: it
//!    removes the area and its page tables, and is short.
//!
//! Who does the work is the pool's destroy queue: at most
//! [`teardown_threads`](crate::Builder::teardown_threads) threads at once
//! (default: the number of CPUs), [`teardown_chunk`](crate::Builder::teardown_chunk)
//! stacks per turn, a thread that finds every permit taken leaving its work
//! to the permit holders and the reclaimer. A drop, a thread's exit, a
//! `drain`, memory pressure and the pool's own drop all go this way; so do
//! a [`Region`](crate::region::Region)'s pages when it is dropped.
//!
//! What a user can set, and what it costs:
//!
//! | setting | effect |
//! |---|---|
//! | `release_step(0)` | no release step: one `munmap` per slab, pages and all. The fastest teardown, and the one that stalls every other thread's `mmap` longest. For a process that maps nothing else while it tears down (a batch job at exit). |
//! | a larger `release_step` | fewer calls (each also flushes the TLBs of the other CPUs running the process); a longer wait for others on kernels before 6.16 |
//! | a smaller `release_step` | on kernels before 6.16, a shorter wait for others' `mmap`; more calls, a slower teardown |
//! | `teardown_threads(n)` | fewer threads freeing memory at once leave more CPUs to the rest, and fewer CPUs in the kernel freeing pages (a CPU freeing pages answers other threads' TLB-flush requests late) |
//!
//! The lab's `mass-teardown` and `mass-teardown-full` scenarios, and the
//! `teardown_paths` bench (a pool's drop, critical pressure, regions),
//! measure both sides: the teardown's wall time, and the p99 of another
//! thread's `mmap` + `munmap` and of its get + put during the teardown
//! against its p99 at rest (see the [performance page](crate::performance#mass-teardown)).
//!
//! # corosensei
//!
//! With the `corosensei` feature, [`PooledStack`] implements
//! `corosensei::stack::Stack` (`base` = top, `limit` = bottom of the guard),
//! so `Coroutine::with_stack(pool.get()?, f)` runs a coroutine on a pooled
//! stack and returns the stack to the pool when the coroutine is dropped.
//! See `examples/coroutines.rs`.
//!
//! # wasmtime
//!
//! wasmtime's on-demand allocator takes fiber stacks from a
//! `StackCreator` (`Config::with_host_stack`) and drops the returned
//! `StackMemory` when the fiber is done. A pool sits behind them directly:
//! `new_stack` is [`StackPool::get`] and the `StackMemory` is the
//! [`PooledStack`], whose drop returns it. Requests for another size (or,
//! for simplicity, a `zeroed` stack) fall back to a fresh one. The sketch
//! below compiles against look-alike traits, since tidepool does not depend
//! on wasmtime:
//!
//! ```
//! # use std::ops::Range;
//! # use std::sync::Arc;
//! # type Error = Box<dyn std::error::Error + Send + Sync>;
//! # // wasmtime's traits, as in `wasmtime::{StackCreator, StackMemory}`.
//! # unsafe trait StackCreator: Send + Sync {
//! #     fn new_stack(&self, size: usize, zeroed: bool) -> Result<Box<dyn StackMemory>, Error>;
//! # }
//! # unsafe trait StackMemory: Send + Sync {
//! #     fn top(&self) -> *mut u8;
//! #     fn range(&self) -> Range<usize>;
//! #     fn guard_range(&self) -> Range<*mut u8>;
//! # }
//! use tidepool::stack::{GuardedStack, PooledStack, StackPool};
//!
//! struct PooledStacks(StackPool);
//!
//! // SAFETY (for wasmtime): the memory is page-aligned, has a guard page at
//! // the bottom, and stays mapped until the `StackMemory` is dropped.
//! unsafe impl StackCreator for PooledStacks {
//!     fn new_stack(&self, size: usize, zeroed: bool) -> Result<Box<dyn StackMemory>, Error> {
//!         if size <= self.0.manager().usable_size() && !zeroed {
//!             return Ok(Box::new(Lent(self.0.get()?)));
//!         }
//!         // Another size or a zeroed stack: a fresh mapping of its own
//!         // (fresh pages are zero), unmapped on drop.
//!         Ok(Box::new(Owned(GuardedStack::new(size)?)))
//!     }
//! }
//!
//! struct Lent(PooledStack); // dropped by wasmtime = back to the pool
//! struct Owned(GuardedStack);
//!
//! fn memory(s: &GuardedStack) -> (*mut u8, Range<usize>, Range<*mut u8>) {
//!     let guard = s.limit().as_ptr()..s.bottom().as_ptr();
//!     (s.top().as_ptr(), s.usable(), guard)
//! }
//! // SAFETY (for wasmtime): as above.
//! unsafe impl StackMemory for Lent {
//!     fn top(&self) -> *mut u8 { memory(&self.0).0 }
//!     fn range(&self) -> Range<usize> { memory(&self.0).1 }
//!     fn guard_range(&self) -> Range<*mut u8> { memory(&self.0).2 }
//! }
//! // SAFETY (for wasmtime): as above.
//! unsafe impl StackMemory for Owned {
//!     fn top(&self) -> *mut u8 { memory(&self.0).0 }
//!     fn range(&self) -> Range<usize> { memory(&self.0).1 }
//!     fn guard_range(&self) -> Range<*mut u8> { memory(&self.0).2 }
//! }
//!
//! let creator: Arc<dyn StackCreator> = Arc::new(PooledStacks(StackPool::new(256 * 1024)?));
//! // wasmtime: `config.with_host_stack(creator)`, then per fiber:
//! let stack = creator.new_stack(200 * 1024, false)?;
//! assert!(stack.range().len() >= 200 * 1024);
//! assert_eq!(stack.guard_range().end as usize, stack.range().start);
//! drop(stack); // back to the pool
//! # Ok::<(), Error>(())
//! ```
//!
//! `StackMemory` must be `Sync`: `PooledStack` and `GuardedStack` are.
//! wasmtime's pooling allocator keeps its own stack slots and does not call
//! a `StackCreator`.
//!
//! # Per OS
//!
//! The module is built on every Unix: `mmap`, `mprotect`, `madvise` and
//! `munmap` are POSIX. What differs:
//!
//! | | Linux (and Android) | macOS, FreeBSD, the other BSDs, illumos |
//! |---|---|---|
//! | guard page | a page-table marker (`MADV_GUARD_INSTALL`, Linux 6.13+; older kernels: `mprotect`) | `mprotect(PROT_NONE)` |
//! | map-count budget | `vm.max_map_count`, read from `/proc` ([`MapBudget`]); [`StackError::MapCountReached`] names it | none: the kernel has no per-process count of mappings, only memory and address-space limits (`RLIMIT_AS`, FreeBSD's `RLIMIT_VMEM`); no `max_live` by default, `max_idle` is [`DEFAULT_MAX_IDLE`](crate::DEFAULT_MAX_IDLE); a refused mapping is [`StackError::OutOfMemory`]; [`StackPoolBuilder::map_budget`] still gives a pool a budget of your choosing |
//! | purge | `madvise(MADV_DONTNEED)`: pages freed at once, read back as zeros | `madvise(MADV_FREE)`: pages freed when the kernel needs memory; until then they may keep old contents (stacks carry nothing across reuse) |
//! | `MAP_STACK` | passed (a hint; keeps transparent huge pages off stacks) | passed on OpenBSD, which requires it; not elsewhere |
//! | touching a guard | `SIGSEGV` | `SIGSEGV` or `SIGBUS` (macOS) |
//! | memory pressure | PSI and cgroup sources by default ([`crate::pressure`]) | [`pressure::notify`](crate::pressure::notify) and [`pressure::watch`](crate::pressure::watch) only |
//!
//! The test suite runs on Linux; CI checks the module for
//! `x86_64-unknown-freebsd` and `x86_64-apple-darwin` with clippy.
mod budget;
mod builder;
#[cfg(feature = "corosensei")]
mod corosensei;
mod error;
mod guard_mode;
mod manager;
mod mapping;
mod pool;
mod registry;
mod slab;
mod stats;
pub(crate) mod zero_depth;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use budget::{mapped_vmas, MAX_MAP_COUNT_PATH};
pub use budget::{BudgetSource, MapBudget, FALLBACK_MAX_MAP_COUNT, RESERVED_VMAS, VMAS_PER_STACK};
pub use builder::{StackPoolBuilder, StackSpec};
pub use error::StackError;
pub use guard_mode::{GuardMode, GUARD_MODE_ENV};
pub use manager::StackManager;
pub use mapping::GuardedStack;
pub use pool::{PooledStack, StackPool};
pub use slab::{MAX_SLAB_BYTES, MAX_STACKS_PER_SLAB};
pub use stats::StackStats;
