//! Pooled coroutine and fiber stacks: mappings with a guard page, kept
//! within the process's map-count budget, purgeable while idle.
//!
//! Mapping a stack costs an `mmap` and an `mprotect` (a few µs) plus page
//! faults on first touch, and two of the process's `vm.max_map_count` VMAs.
//! QEMU's coroutine pools hit both problems: too small, and creating stacks
//! was the bottleneck (2021); unbounded per thread, and the process ran into
//! the map count and aborted with "failed to allocate memory for stack"
//! (2024). A [`StackPool`] is a [`Pool`](crate::Pool) of [`GuardedStack`]s
//! made by a [`StackManager`]:
//!
//! * **Reuse is cheap**: a `get` served from this thread's cache is a few
//!   pointer moves: no syscall, no lock, no shared reference count.
//! * **Bounded by the map count**: by default `max_live` and `max_idle` are
//!   the [`MapBudget`], `(vm.max_map_count - 5000) / 2` stacks read from
//!   `/proc/sys/vm/max_map_count` (30265 for the usual 65530; the kernel
//!   default if the file cannot be read). Past it `get` returns
//!   [`StackError::Exhausted`].
//! * **Never aborts**: if the kernel refuses a mapping (`ENOMEM`), every
//!   stack pool in the process drains its idle stacks and the mapping is
//!   tried once more; if it still fails, [`StackError`] says which limit was
//!   hit: [`MapCountReached`](StackError::MapCountReached) with the VMA
//!   counts, or [`OutOfMemory`](StackError::OutOfMemory). A half-built
//!   stack (mapped, guard not set up) is unmapped.
//! * **Three tiers of giving back**, in the crate's words: *trim* (thread
//!   caches return batches to the depot; the core does this), *purge* (an
//!   idle stack releases its pages but keeps its mapping:
//!   [`StackPool::purge`], keeping the top `keep_resident` bytes), *reclaim*
//!   (idle stacks are unmapped: [`StackPool::drain`], or the pool's own
//!   reclaim for the stacks its working set no longer needs).
//!
//! ```
//! use tidepool::stack::StackPool;
//!
//! let pool = StackPool::builder(128 * 1024).keep_resident(16 * 1024).build()?;
//! let stack = pool.get()?;
//! // Run a coroutine or fiber between `stack.bottom()` and `stack.top()`.
//! assert!(stack.guard().end == stack.usable().start);
//! drop(stack);
//! let stats = pool.stats();
//! assert_eq!((stats.mapped, stats.vmas), (1, 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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
//! # Linux only
//!
//! The module reads `/proc` and uses Linux's `madvise(MADV_DONTNEED)`
//! semantics (released pages read back as zeros), so it is built on Linux
//! only.

mod budget;
mod builder;
#[cfg(feature = "corosensei")]
mod corosensei;
mod error;
mod manager;
mod mapping;
mod pool;
mod registry;
mod stats;

pub use budget::{
    mapped_vmas, BudgetSource, MapBudget, FALLBACK_MAX_MAP_COUNT, MAX_MAP_COUNT_PATH,
    RESERVED_VMAS, VMAS_PER_STACK,
};
pub use builder::StackPoolBuilder;
pub use error::StackError;
pub use manager::StackManager;
pub use mapping::GuardedStack;
pub use pool::{PooledStack, StackPool};
pub use stats::StackStats;
