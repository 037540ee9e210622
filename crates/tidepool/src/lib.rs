//! tidepool pools expensive, reusable resources — coroutine stacks, page
//! buffers, anything whose creation costs a syscall or a lock — and keeps the
//! pool the right size on its own.
//!
//! * **Fast**: `get` and `put` touch only the calling thread's cache of at
//!   most two batches; no lock, no atomic read-modify-write, no allocation.
//! * **Bounded**: threads exchange whole batches with one shared depot that
//!   never holds more than `max_idle` objects; each thread caches at most two
//!   batches, and gives them back when it exits.
//! * **Correct across threads**: an object may be dropped on any thread; the
//!   counts stay right (the QEMU 2021 pool was dropped for getting this
//!   wrong), and every object is destroyed exactly once.
//!
//! # Usage
//!
//! ```
//! use tidepool::Pool;
//!
//! // Any `Fn() -> T` is a manager; implement `Manage` for fallible creation,
//! // reset-on-reuse and custom destruction.
//! let pool = Pool::builder(|| Vec::<u8>::with_capacity(1 << 20))
//!     .batch_size(16)
//!     .max_idle(256)
//!     .build()?;
//!
//! {
//!     let mut buf = pool.get()?; // created: the pool was empty
//!     buf.extend_from_slice(b"request");
//! } // back to this thread's cache
//!
//! let buf = pool.get()?; // reused
//! assert_eq!(buf.capacity(), 1 << 20);
//! drop(buf);
//! let stats = pool.stats();
//! assert_eq!((stats.created, stats.hits, stats.misses), (1, 1, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Glossary
//!
//! One word per meaning, in the code, these docs and the C names:
//!
//! | word | meaning |
//! |---|---|
//! | *manager* | what makes, resets and unmakes a pool's objects ([`Manage`]) |
//! | *live* / *idle* | an object lent out / one waiting in the pool to be reused |
//! | *thread cache* | one thread's two batches of idle objects (`loaded`, `spare`): what `get` and `put` touch |
//! | *batch* | the objects moved between a thread cache and the depot at once |
//! | *depot* | the one shared, bounded store of batches (at most `max_idle` objects) |
//! | *working set* | the idle objects a pool needed over its last reclaim intervals |
//! | *trim* | return objects from a thread cache to the depot (nothing is destroyed) |
//! | *reclaim* | destroy idle objects the working set does not need |
//! | *purge* | release an idle object's pages and keep the object (a stack keeps its mapping) |
//! | *drain* | destroy every idle object the pool can reach, down to `min_idle` or to none |
//! | *destroy queue* | objects a pool decided to destroy, run in chunks outside every lock |
//! | *turn* | the right to run the destroy queue: at most `teardown_threads` at once |
//! | *place* | room under `max_live` for one object, live or idle |
//! | *burst* | objects one miss creates at once ([`Manage::create_batch`]) |
//! | *pressure* | the system running short of memory ([`pressure::Level`]); a *hold* keeps the depot at `min_idle` for a while after a critical signal |
//! | *adopt* / *detach* | an object made elsewhere joins the pool / a lent object leaves it for good |
//!
//! Which call gives back what:
//!
//! | call | takes | from | then | when to call it |
//! |---|---|---|---|---|
//! | [`Pool::trim_local`] | this thread's cache | this thread | to the depot | before a thread parks for good |
//! | [`Pool::destroy_local`] | this thread's cache | this thread | destroyed | a thread-exit hook that frees its pool (QEMU's) |
//! | [`Pool::purge`] | idle objects' pages | the depot | objects kept | memory is short but the objects will be needed |
//! | [`Pool::reclaim_unused`] | idle objects unused since the last call | the depot | destroyed | you know better than the interval when to look |
//! | [`Pool::reclaim`] | what the working set does not need | depot and caches | destroyed, purged | `background(false)` pools, once per interval |
//! | [`Pool::pressure`] | as the level says | depot and caches | destroyed, purged | your own memory-pressure signal, for one pool |
//! | [`Pool::drain`] | every idle object it can reach | depot and caches | destroy queue, one chunk now | shedding everything, without waiting |
//! | [`Pool::drain_blocking`] | the same | depot and caches | destroyed on return | shedding everything, before you go on |
//! | [`Pool::close`] | everything, and the pool | the whole pool | destroyed on return | shutting down: no callback runs after it |
//!
//! # Features, MSRV and platforms
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `corosensei` | off | `PooledStack` and `GuardedStack` implement `corosensei::stack::Stack` |
//! | `metrics` | off | `Stats::export_metrics` / `StackStats::export_metrics`: gauges and counters through the [`metrics`](https://docs.rs/metrics) facade (no exporter is pulled in) |
//! | `fault-injection` | off | test only: `fault` fails the Nth kernel call |
//!
//! The library builds on Rust 1.85 with every feature (`cargo +1.85 check
//! -p tidepool --all-features`); the workspace's tests, benches and lab need
//! 1.88.
//!
//! | | [`Pool`] | `stack::StackPool` | map-count budget | pressure sources | checked |
//! |---|---|---|---|---|---|
//! | Linux | yes | yes | `vm.max_map_count` | PSI, cgroup v2, cgroup v1, manual | the whole test suite |
//! | macOS, FreeBSD, other Unix | yes | yes | none: these kernels have no per-process mapping count | manual ([`pressure::notify`], [`pressure::watch`]) | `cargo clippy -D warnings` for `x86_64-apple-darwin` and `x86_64-unknown-freebsd` in `.ci/run`; tests not run |
//!
//! Purged idle stacks give their pages back with `MADV_DONTNEED` on Linux
//! and with `MADV_FREE` elsewhere (the kernel takes them when it needs
//! memory). On macOS, forward a `DISPATCH_SOURCE_TYPE_MEMORYPRESSURE` event
//! to [`pressure::notify`]; FreeBSD has no memory-pressure notification for
//! user space. Taking an idle cache away from a live thread needs a
//! process-wide barrier (`membarrier(2)`, Linux only); elsewhere that thread
//! is asked to hand its cache back at its next operation, and a thread's
//! cache always comes back when the thread exits.
//!
//! # Reclaim and pressure
//!
//! All optional (defaults shown):
//!
//! ```
//! use std::time::Duration;
//!
//! let pool = tidepool::Pool::builder(|| vec![0u8; 4096])
//!     .reclaim_interval(Duration::from_secs(15)) // working-set period
//!     .min_idle(0)                               // reserve never reclaimed
//!     // .pressure_hold(d): hold at min_idle for d after every critical signal;
//!     // default: none for a single signal, 2/15 of the interval while they persist
//!     .build()?;
//! tidepool::pressure::notify(tidepool::pressure::Level::Critical); // your own signal, if you have one
//! # drop(pool);
//! # Ok::<(), tidepool::ConfigError>(())
//! ```
//!
//! [`Pool::new`] and [`Builder::build`] start one process-wide reclaimer
//! thread (`tidepool-reclaim`, shared by every pool) that reclaims idle
//! objects and delivers memory pressure; a forked child gets one of its
//! own. It blocks every signal but the fault signals (SIGSEGV, SIGILL,
//! SIGFPE, SIGTRAP), so a signal your threads block to read from a
//! `signalfd` or `sigwait` stays yours. Programs that manage their own
//! threads (embedded runtimes, sandboxes that forbid spawning) turn it off
//! and call [`Pool::reclaim`] themselves:
//!
//! ```
//! let pool = tidepool::Pool::builder(|| vec![0u8; 4096])
//!     .background(false) // no thread is started
//!     .build()?;
//! // ... then, from your own timer or event loop, about once a second:
//! pool.reclaim(); // runs a pass when one is due, else returns at once
//! # Ok::<(), tidepool::ConfigError>(())
//! ```
//!
//! # Mass teardown
//!
//! What the pool decides to destroy (reclaim, pressure, a return past
//! `max_idle`, `drain`, a thread's exit, the pool's drop) goes to a
//! per-pool destroy queue, run in chunks outside every lock by at most
//! `teardown_threads` threads (default: the number of CPUs); a thread that
//! finds them all busy leaves its work queued and goes on, and the
//! reclaimer thread or the next callers finish it. [`Stats::destroying`]
//! counts what is queued. `burst(n)` makes a miss create `n` objects with
//! one [`Manage::create_batch`] call (for stacks: one `mmap` for a slab of
//! them):
//!
//! ```
//! # #[cfg(unix)]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tidepool::stack::StackPool;
//!
//! let stacks = StackPool::builder(64 * 1024)
//!     .burst(32)           // a miss carves 32 stacks from one slab: one mmap
//!     .teardown_threads(2) // at most 2 threads unmap at once
//!     .teardown_chunk(256) // the most one drain, thread exit or drop destroys inline
//!     .build()?;
//! let held = (0..100).map(|_| stacks.get()).collect::<Result<Vec<_>, _>>()?;
//! drop(held);              // back to this thread's cache and the depot
//! stacks.drain();          // to the destroy queue; one chunk destroyed here
//! stacks.drain_blocking(); // or: everything destroyed before it returns
//! assert_eq!(stacks.stats().pool.destroying, 0);
//! # Ok(())
//! # }
//! # #[cfg(not(unix))]
//! # fn main() {}
//! ```
//!
//! # A live limit
//!
//! `max_live(n)` caps objects in existence (live and idle). At the limit
//! [`Pool::get`] first recycles whatever idle object it can reach (the
//! depot, other threads' caches, pending destroys) and only then says
//! [`Error::Exhausted`]; [`Pool::get_timeout`] waits instead, first come
//! first served, each object given back handed straight to the oldest
//! waiter, and [`Pool::get_async`] waits in the same queue (any executor;
//! dropping the future leaves the queue, losing nothing):
//!
//! ```
//! use std::time::Duration;
//!
//! let pool = std::sync::Arc::new(
//!     tidepool::Pool::builder(|| vec![0u8; 4096]).max_live(2).build()?,
//! );
//! let (a, b) = (pool.get_owned()?, pool.get_owned()?);
//! assert!(pool.get().is_err());                      // Exhausted, at once
//! std::thread::spawn(move || drop(a));               // given back elsewhere
//! let c = pool.get_timeout(Duration::from_secs(5))?; // waits, then gets it
//! drop((b, c));
//! assert_eq!(pool.stats().existing(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Bad settings are refused by `build()` with a [`ConfigError`] naming the
//! field (`batch_size` 0, `max_idle` below one batch, `min_idle` above
//! `max_idle`, ...).
//!
//! # Safety and correctness
//!
//! **Never hang, never die, never abort.** Every call into user code (a
//! manager's `create`, `recycle`, `purge`, `destroy`, its `Drop`; a pressure
//! `Source`) goes through one file, `src/callbacks.rs`, under one contract:
//!
//! * No callback runs while tidepool holds a lock of its own or has a
//!   thread cache borrowed (work is collected under the lock, the lock
//!   released, then the callbacks run), so a manager may re-enter its pool,
//!   drop it, or build new pools, even from a callback the reclaimer runs.
//! * `recycle`, `purge` and `destroy` run under `catch_unwind` and the
//!   operation finishes (every object destroyed or put back, counts exact);
//!   the first panic is then resumed on the caller's own path (`get`, a
//!   guard's drop, `reclaim_unused`, `drain`, `purge`, `reclaim`,
//!   `pressure`, `prefill`) and contained everywhere else: on the reclaimer
//!   thread, in a lazy reclaim pass, at thread exit, in the pool's drop
//!   (counted in [`Stats::callback_panics`], reported once per pool with
//!   `log::warn!`; destructors never unwind). The object is treated as
//!   destroyed.
//! * The reclaimer thread survives panicking callbacks, clocks and sources,
//!   and is restarted if missing (after a `fork`, say) by the next
//!   registration, `notify`, or operation on a background pool other than a
//!   cache hit; [`reclaim::status`] tells whether it runs and how often it
//!   was restarted.
//! * `fork()` is supported at any moment: `pthread_atfork` handlers keep
//!   tidepool's process-wide locks consistent in the child, which gets its
//!   own reclaimer and wake-up descriptor (`src/reclaim/fork.rs`).
//! * Guard pages fault, tested in a child process that must die by
//!   `SIGSEGV` for both guard modes: at either edge of a slab, in a freed
//!   slot carved again, in a run of purged stacks, in a forked child, and
//!   after a refused marker fell back to `mprotect` (`tests/stack_guard.rs`).
//! * Accounting is panic-safe: `live + idle + destroying == created -
//!   destroyed - detached` after any panic, asserted by the tests. Each failure that
//!   would be a hang or an abort is tested in a child process with a
//!   timeout (`tests/robust.rs`).
//! * The kernel saying no: with the test-only `fault-injection` feature,
//!   `tests/faults.rs` makes each of the first six `mmap`, `mprotect`,
//!   `madvise`, `munmap` and `mincore` calls fail with `ENOMEM`, `EAGAIN`,
//!   `EPERM` and `EINVAL` in turn, and the reclaimer's spawn, its wake-up
//!   descriptor and `poll`, `membarrier`, `pthread_atfork` and the
//!   pressure sources' file reads and writes fail in child processes: errors reach the caller or the work degrades as documented,
//!   nothing panics, counts stay exact, nothing is unmapped twice. The table
//!   of what each failure does is in `src/os/fault.rs`.
//! * No waiter at `max_live` sleeps while an idle object sits where it
//!   could have been handed one: each interleaving in which an object
//!   becomes idle (or a place frees) just after a waiter's one look is
//!   forced by a test hook that holds a thread at that point
//!   (`src/tests/limit_races.rs`).
//! * A counting test manager checks everywhere that every object is
//!   destroyed exactly once; a proptest model checks every [`Stats`] figure
//!   after every operation; a stress test passes objects between threads
//!   that come and go; a test allocator checks that nothing allocates
//!   inside a thread cache's access bracket.
//!
//! **Bad input gets a clear error.** Invalid settings are refused at build
//! with a [`ConfigError`] naming the field, for `StackPool` too. Memory
//! reserved up front is bounded in bytes: a thread's cache reserves at most
//! [`MAX_CACHE_BYTES`] per pool; the default batch shrinks for big items
//! and a bigger explicit one is refused.
//!
//! **`unsafe`** lives in a few modules, each block with a `// SAFETY:`
//! comment (`clippy::undocumented_unsafe_blocks` is denied), each `unsafe
//! fn` with a `# Safety` section: `cache/` (the slot table, the thread
//! cache's access protocol, word moves in `cache/words.rs`) and the
//! `LocalSlot` proofs of ownership in `shared/mod.rs`; `guard.rs` and
//! `pool.rs` (moving the object out of a guard, an uncounted handle on the
//! pool); `callbacks.rs` (dropping the manager by hand, so its `Drop` is
//! contained); `os/` (every kernel call; a workspace `clippy.toml` keeps the
//! memory calls there); `stack/` (slabs, raw stack pointers).
//!
//! **Models and sanitizers.** All atomics and cells come from one facade
//! (`src/sync.rs`) that swaps in loom under `cfg(loom)`; `bin/loom.sh`
//! model-checks the cache ↔ depot exchange, thread exit, cross-thread
//! frees, the take-back of a live thread's cache (and fails if the owner's
//! fence is removed) and the destroy queue's hand-offs.
//! `bin/sanitize.sh miri` runs the unit tests and the `reentrant`, `panics`
//! and `pressure_background` suites under miri (undefined behaviour,
//! Stacked Borrows, data races, weak memory, leaks), with `cfg(miri)` shims
//! for the OS calls; tests that need the kernel itself are ignored there
//! with the reason. `bin/sanitize.sh tsan` runs the unit tests and the
//! concurrency suites under ThreadSanitizer with `std` rebuilt under it
//! (`-Zbuild-std`), on the real kernel calls; only the `fork` tests are
//! skipped. Not covered by either: the stack suites (coroutine switches are
//! inline assembly miri cannot run), `tidepool-ffi`, `tidepool-wasmtime`.
//! `.ci/run` runs both.
//!
//! **Fuzzing and soak.** `fuzz/` drives the C ABI from two threads at once
//! with libFuzzer and AddressSanitizer, misuse included (`bin/fuzz.sh`).
//! `bin/soak.sh MINUTES` runs a mixed load (threads starting and exiting,
//! cross-thread flow, a live limit with timed waits, large teardowns,
//! forked children, critical pressure) and checks at every cycle that every
//! object was made and destroyed exactly once, that idle objects and the
//! process's mappings return to their floor, and that the reclaimer is
//! alive. The figures are in the README.
//!
//! # Design and measurements
//!
//! See [`implementation`] for the layers (thread cache → depot), their
//! invariants, and the prior art they come from, and [`performance`] for
//! every measurement with the command behind it.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks)]
// Under loom the reclaimer thread and the OS barrier are swapped out for the
// model's own primitives, leaving their code unused in that build only.
#![cfg_attr(loom, allow(dead_code))]
// Under miri the same goes for `poll(2)`/eventfd and `membarrier(2)`.
#![cfg_attr(miri, allow(dead_code))]

/// A test hook, one line at its call site, that compiles to nothing outside
/// the library's own unit tests (and under loom): `probe!(Point)` holds
/// this thread there if a test armed it (`probe::arm`);
/// `probe!(inside = bool)` marks a thread cache access for the allocation
/// check; `probe!(waited_out)` counts a revoker that waited out an owner.
macro_rules! probe {
    (inside = $inside:expr) => {
        #[cfg(all(test, not(loom)))]
        $crate::probe::INSIDE.set($inside);
    };
    (waited_out) => {
        #[cfg(all(test, not(loom)))]
        $crate::probe::WAITED_OUT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    };
    ($point:ident) => {
        #[cfg(all(test, not(loom)))]
        $crate::probe::pause($crate::probe::Point::$point);
    };
}

mod cache;
mod callbacks;
mod config;
mod depot;
mod error;
#[cfg(feature = "metrics")]
mod export;
mod fence;
mod guard;
pub mod implementation;
mod manage;
#[cfg(unix)]
mod os;
pub mod performance;
mod pool;
pub mod pressure;
#[cfg(all(test, not(loom)))]
mod probe;
pub mod reclaim;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod region;
mod shared;
mod signal;
#[cfg(unix)]
pub mod stack;

/// Injected failures of tidepool's kernel calls, for tests (feature
/// `fault-injection`, off by default): see [`fail_nth`](fault::fail_nth).
#[cfg(all(unix, feature = "fault-injection", not(loom)))]
pub mod fault {
    pub use crate::os::fault::{disarm_all, double_unmaps, fail_nth, injected, Call, CALLS};
}
mod stats;
mod sync;

#[cfg(test)]
mod tests;

/// The README's Rust snippets, compiled and run as doctests, so the README
/// cannot drift from the API (its other blocks are marked `sh`, `toml`, `c`
/// or `text`). They use both features and the `stack` module.
#[cfg(all(doctest, unix, feature = "corosensei", feature = "metrics"))]
#[doc = include_str!("../../../README.md")]
mod readme {}

pub use config::{
    Builder, Config, ConfigError, BATCH_GROWTH, DEFAULT_BATCH_SIZE, DEFAULT_MAX_IDLE,
    DEFAULT_PRESSURE_HOLD, DEFAULT_PURGE_DELAY, DEFAULT_RECLAIM_INTERVAL, DEFAULT_RELEASE_STEP,
    DEFAULT_TEARDOWN_CHUNK, DEFAULT_TEARDOWN_THREADS, MAX_BATCH_SIZE, MAX_CACHE_BYTES,
    MAX_PRESSURE_HOLD, MAX_RECLAIM_INTERVAL, MIN_RECLAIM_INTERVAL,
};
pub use error::Error;
pub use guard::{OwnedPooled, Pooled};
pub use manage::Manage;
pub use pool::{GetAsync, Pool};
pub use stats::Stats;
