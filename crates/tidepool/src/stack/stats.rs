//! What a stack pool holds, in stacks, VMAs and bytes.

use crate::Stats;

/// A snapshot of a [`StackPool`](super::StackPool), from
/// [`StackPool::stats`](super::StackPool::stats).
///
/// Figures derived from the core [`Stats`] are exact when no thread is
/// inside the pool, and lag by at most one operation per thread otherwise
/// (see [`Stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StackStats {
    /// The pool's own counts (gets, hits, creates, idle, ...).
    pub pool: Stats,
    /// Stacks this pool has mapped and not unmapped: live plus idle
    /// ([`Stats::existing`]). Detached stacks belong to their owner and are
    /// not counted.
    pub mapped: u64,
    /// VMAs those stacks cost: `mapped * VMAS_PER_STACK`. An upper bound:
    /// the kernel may merge a stack's edge with a neighbouring mapping.
    pub vmas: u64,
    /// An upper bound on the RAM held by idle stacks, in bytes: every
    /// unpurged idle stack counted as fully resident, every purged one as
    /// its `keep_resident` top. The truth is lower by whatever the stacks'
    /// coroutines never touched. (Stacks purged in the depot and then moved
    /// to a thread cache count as unpurged.)
    pub idle_resident_max: u64,
    /// Idle stacks in the depot whose pages have been released
    /// ([`Stats::idle_purged`]).
    pub purged: u64,
    /// Gets that hit a kernel limit, reclaimed idle stacks from every stack
    /// pool, and tried again.
    pub reclaim_retries: u64,
    /// Purges whose `madvise` failed (the stack stayed resident, and
    /// usable): only a process that locked its memory sees these.
    pub purge_failures: u64,
    /// `munmap` calls that failed in this process, leaving a stack mapped.
    /// Process-wide, not per pool; unmapping a whole stack cannot need a new
    /// VMA, so this should stay 0.
    pub unmap_failures: u64,
}
