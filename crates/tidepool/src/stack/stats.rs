//! What a stack pool holds, in stacks, slabs, VMAs and bytes, and the
//! system calls it took.

use crate::Stats;

/// A snapshot of a [`StackPool`](super::StackPool), from
/// [`StackPool::stats`](super::StackPool::stats).
///
/// Figures derived from the core [`Stats`] are exact when no thread is
/// inside the pool, and lag by at most one operation per thread otherwise
/// (see [`Stats`]). The slab figures and the system-call counts are exact:
/// counted where the calls are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StackStats {
    /// The pool's own counts (gets, hits, creates, idle, ...).
    pub pool: Stats,
    /// Stacks this pool holds, live or idle ([`Stats::existing`]). Detached
    /// stacks belong to their owner and are not counted (their slots still
    /// are, in [`slots`](StackStats::slots)).
    pub mapped: u64,
    /// VMAs the pool's slabs are now. With guard markers, one per slab.
    /// With `PROT_NONE` guards, two per opened slot (its guard and its
    /// stack), the top slot's guard merging with the unopened rest of its
    /// slab. Freed slots stay counted until their slab is unmapped. An upper
    /// bound: the kernel may merge a slab's edge with a neighbouring
    /// mapping.
    pub vmas: u64,
    /// Slabs mapped now (see [Slabs](super#slabs)): each is unmapped with
    /// one `munmap` when its last stack is destroyed.
    pub slabs: u64,
    /// Stack slots in those slabs: the pool's stacks, detached stacks not
    /// yet dropped, and free slots.
    pub slots: u64,
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
    /// Stacks whose pages a `madvise` failed to release, in a purge or when
    /// a destroyed stack's slot was freed (the pages stayed resident; the
    /// stack or slot stayed usable): only a process that locked its memory
    /// sees these.
    pub purge_failures: u64,
    /// `munmap` calls that failed in this process, leaving a range mapped.
    /// Process-wide, not per pool; unmapping a whole slab or stack cannot
    /// need a new VMA, so this should stay 0.
    pub unmap_failures: u64,
    /// `mmap` calls made for this pool's stacks since it was built: one per
    /// slab (two if the first, for a whole slab, was refused).
    pub mmap_calls: u64,
    /// `mprotect` calls: with `PROT_NONE` guards
    /// ([`GuardMode::Protect`](super::GuardMode::Protect)), one per slot
    /// opened, the first time it is used; with markers, one per guard the
    /// kernel refused as a marker (0 normally).
    pub mprotect_calls: u64,
    /// `madvise(MADV_GUARD_INSTALL)` calls: with guard markers
    /// ([`GuardMode::Markers`](super::GuardMode::Markers)), one per slot
    /// opened, the first time it is used. Not in
    /// [`madvise_calls`](StackStats::madvise_calls).
    pub guard_calls: u64,
    /// `madvise` calls: purges, and freed slots of slabs that stay mapped;
    /// one per run of adjacent stacks.
    pub madvise_calls: u64,
    /// `munmap` calls: one per slab, when its last stack is destroyed.
    pub munmap_calls: u64,
}
