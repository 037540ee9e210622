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
//! # Design
//!
//! See [`implementation`] for the layers (thread cache → depot), their
//! invariants, and the prior art they come from.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks)]
// Under loom the reclaimer thread and the OS barrier are swapped out for the
// model's own primitives, leaving their code unused in that build only.
#![cfg_attr(loom, allow(dead_code))]
// Under miri the same goes for `poll(2)`/eventfd and `membarrier(2)`.
#![cfg_attr(miri, allow(dead_code))]

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
    DEFAULT_PRESSURE_HOLD, DEFAULT_PURGE_DELAY, DEFAULT_RECLAIM_INTERVAL, DEFAULT_TEARDOWN_CHUNK,
    DEFAULT_TEARDOWN_THREADS, MAX_BATCH_SIZE, MAX_CACHE_BYTES, MAX_PRESSURE_HOLD,
    MAX_RECLAIM_INTERVAL, MIN_RECLAIM_INTERVAL,
};
pub use error::Error;
pub use guard::{OwnedPooled, Pooled};
pub use manage::Manage;
pub use pool::{GetAsync, Pool};
pub use stats::Stats;
