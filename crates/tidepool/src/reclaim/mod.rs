//! Reclaim: how a pool gives back what its working set does not need.
//!
//! # The working set
//!
//! Every reclaim interval (default 15 s) the pool ends a period of
//! measurement. The depot knows the fewest idle objects it held during the
//! period that just ended and during the one before (its low-water marks);
//! LIFO reuse means those are its oldest objects, and nobody needed them for
//! two whole intervals:
//!
//! ```text
//!  depot idle
//!   ▲      spike
//!   │    ┌──────┐
//!   │    │      └──────────────┐
//!   │    │  lw1    lw2 = lw1   └────────────  reclaimed at the end of
//!   │────┘───────|───────|─────|──────────▶   interval 2: min(lw1, lw2)
//!          interval 1  interval 2
//! ```
//!
//! * idle through the whole last interval → **purged** (the manager's
//!   [`purge`](crate::Manage::purge): a stack gives its pages back and keeps
//!   its mapping);
//! * idle through the whole of the last two → **reclaimed** (destroyed),
//!   never below [`min_idle`](crate::Builder::min_idle);
//! * a thread cache whose owner did not touch the pool for a whole interval
//!   → **taken back** to the depot, where it ages like everything else;
//! * a busy thread cache that held objects through the last two intervals
//!   without needing them (its low-water mark never fell below them) →
//!   **trimmed**: its owner gives those back to the depot at its next
//!   access, idle, and keeps what it uses.
//!
//! A workload that keeps using its objects lowers the marks every interval,
//! so a steady load never destroys and re-creates (the Solaris kmem reaper's
//! rule; QEMU 2021 shrank to the interval's peak instead, which is the same
//! for a steady load but forgets a periodic one after one interval).
//!
//! # Who runs it
//!
//! The reclaimer thread is named `tidepool-reclaim` and starts with every
//! signal blocked but the fault signals (`os/thread.rs`): a process-directed signal the
//! application blocks in its own threads, to read it from a `signalfd` or
//! `sigwait`, is never delivered to it.
//!
//! There is no thread per pool. The first thread to visit the depot after
//! an interval boundary runs the pass (a clock read per depot visit, i.e.
//! per batch); the process-wide reclaimer thread runs it for pools nobody
//! touches, takes back idle thread caches, and delivers memory pressure
//! ([`crate::pressure`]). The reclaimer starts with the first pool that has
//! it on ([`background`](crate::Builder::background)), sleeps until the
//! earliest deadline of all its pools (with no timeout while no pool holds
//! anything beyond its reserve), and is restarted if it is ever missing
//! (after a `fork`, say): [`status`] tells.
//!
//! # Bounds
//!
//! With the reclaimer running on time, a thread that stops using a pool at
//! time `t` has its cache taken back by `t + 2 * interval` (the first pass
//! after `t` records its counters; the next, one interval later, sees them
//! unchanged). Objects idle in the depot are purged after one whole
//! interval and destroyed after two. Without the reclaimer, passes run only
//! when some thread visits the depot, and thread caches come back only when
//! their threads exit.
//!
//! # Taking a cache from a live thread
//!
//! A thread that never comes back to a pool may never run a flush itself, so
//! another thread must take its cache while the owner may wake at any moment,
//! without making the owner's fast path pay an atomic read-modify-write. The
//! owner starts each cache access by publishing its operation count
//! (`entered`) behind a compiler fence, and ends it with the counter bump
//! the statistics need anyway; the taker marks the slot as being revoked,
//! issues one process-wide barrier (`membarrier(2)`), and takes the cache
//! only if the owner is outside an access; otherwise it leaves a flush
//! request the owner honours at its next access. See the `cache::slot`
//! notes and the loom models.
//!
//! # Files
//!
//! * `clock.rs`: where the time comes from.
//! * `registry.rs`: the process-wide list of pools and sources.
//! * `scheduler.rs`: the reclaimer thread, its deadlines and its
//!   supervision.
//! * `fork.rs`: what survives `fork(2)`, and how.
//!
//! What a pressure signal is ([`Level`](crate::pressure::Level),
//! [`Source`](crate::pressure::Source)) is defined in `src/signal.rs`, below
//! both this module and [`crate::pressure`], whose sources feed this one.
//!
//! What a pass does to one pool is the pool's own business
//! (`shared/pass.rs`): this module never reaches into a pool's depot or
//! caches, it only asks the pool to tick.

mod clock;
pub(crate) mod fork;
pub(crate) mod registry;
pub(crate) mod scheduler;

pub use clock::{Clock, ManualClock, SystemClock};

/// What the process-wide reclaimer thread is doing, from [`status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReclaimerStatus {
    /// A reclaimer thread is alive in this process. `false` before the first
    /// background pool, and in a forked child until its first call that
    /// needs the reclaimer (which starts one).
    pub running: bool,
    /// Threads started after the first: after the thread could not be
    /// spawned or died, or in a forked child.
    pub restarts: u64,
    /// Rounds the reclaimer has run: one per wake-up, deadline or pressure
    /// signal.
    pub rounds: u64,
    /// Background pools it looks after.
    pub pools: usize,
    /// Panics it caught outside the pools' own callbacks (a user
    /// [`Clock`], say), each of which ended only that step; the first one
    /// is also reported with `log::warn!`. Panics in manager callbacks are
    /// counted per pool, in [`Stats::callback_panics`](crate::Stats::callback_panics).
    pub panics: u64,
}

/// What the process-wide reclaimer thread is doing: whether it runs, how
/// often it was restarted, how many rounds it ran.
///
/// ```
/// let pool = tidepool::Pool::new(|| vec![0u8; 64]); // background by default
/// let status = tidepool::reclaim::status();
/// assert!(status.running);
/// assert!(status.pools >= 1);
/// # drop(pool);
/// ```
pub fn status() -> ReclaimerStatus {
    scheduler::status()
}
