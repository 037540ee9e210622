//! Reclaim: how a pool gives back what its working set no longer needs.
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
//!   → **taken back** to the depot, where it ages like everything else.
//!
//! A workload that keeps using its objects lowers the marks every interval,
//! so a steady load never destroys and re-creates (the Solaris kmem reaper's
//! rule; QEMU 2021 shrank to the interval's peak instead, which is the same
//! for a steady load but forgets a periodic one after one interval).
//!
//! # Who runs it
//!
//! There is no thread per pool. The first thread to visit the depot after
//! an interval boundary runs the pass (a clock read per depot visit, i.e.
//! per batch); the process-wide reclaimer thread runs it for
//! pools nobody touches, takes back idle thread caches, and delivers memory
//! pressure ([`crate::pressure`]). The reclaimer starts with the first pool
//! that has it on ([`background`](crate::Builder::background)) and sleeps,
//! with no timeout, while no pool holds anything beyond its reserve.
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
//! owner brackets each cache access with plain stores to a `busy` flag and
//! a compiler fence; the taker marks the slot as being revoked, issues one
//! process-wide barrier (`membarrier(2)`), and takes the cache only if the
//! owner is not busy; otherwise it leaves a flush request the owner honours
//! at its next access. See the `cache::slot` notes and the loom models.

mod clock;
mod pass;
pub(crate) mod reclaimer;

pub use clock::{Clock, ManualClock, SystemClock};
pub(crate) use pass::ReclaimShared;
