//! `tidepool_stats`: a pool's counts, as a sized C struct.

use std::mem::offset_of;

use crate::sized::SizedStruct;

/// A snapshot of a pool's counts, from `tidepool_pool_stats`. Set `size` to
/// `sizeof` it before the call; the library fills what fits and sets `size`
/// to the bytes it wrote.
///
/// `hits`, `live` and `idle` add up per-thread counters and may lag by one
/// operation per thread that is inside the pool during the call; when no
/// thread is, every figure is exact and
/// `live + idle + destroying == created - destroyed` (`created` counts
/// adopted objects too).
///
/// Versions: `TIDEPOOL_STATS_SIZE_VER0` ends after `adopted`;
/// `TIDEPOOL_STATS_SIZE_VER1` adds the stack figures;
/// `TIDEPOOL_STATS_SIZE_VER2` adds `trimmed`; `TIDEPOOL_STATS_SIZE_VER3`
/// adds `empty_gets`, `idle_cached` and `max_idle`;
/// `TIDEPOOL_STATS_SIZE_VER4` adds `destroying`; `TIDEPOOL_STATS_SIZE_VER5`
/// adds the stack pools' system-call counts (`mmap_calls` to
/// `munmap_calls`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tidepool_stats {
    /// In: `sizeof(tidepool_stats)` as the caller was compiled. Out: bytes
    /// written.
    pub size: usize,
    /// Objects made: stacks mapped, buffers allocated, or (object pools)
    /// `create` callbacks that succeeded and objects adopted.
    pub created: u64,
    /// Objects unmade (unmapped, freed, `destroy` callbacks).
    pub destroyed: u64,
    /// Objects handed out and not yet put back (adopted ones included).
    pub live: u64,
    /// Objects waiting for reuse: in the depot (`idle_depot`) or in thread
    /// caches (`idle_cached`).
    pub idle: u64,
    /// The part of `idle` in the shared depot.
    pub idle_depot: u64,
    /// The part of `idle_depot` purged since it went idle.
    pub idle_purged: u64,
    /// Gets served with an idle object.
    pub hits: u64,
    /// Gets that found no idle object: those that made one, and (object
    /// pools) those with `TIDEPOOL_GET_NO_CREATE` that came back empty
    /// (`empty_gets`). Gets that failed are not counted.
    pub misses: u64,
    /// Batches moved between thread caches and the depot.
    pub depot_exchanges: u64,
    /// Idle objects destroyed to fit the working set (reclaim, reclaim_unused,
    /// pressure; not drain).
    pub reclaimed: u64,
    /// Reclaim passes run.
    pub reclaim_passes: u64,
    /// Medium memory-pressure signals applied, each counted once its
    /// response is done.
    pub pressure_medium: u64,
    /// Critical memory-pressure signals applied, each counted once its
    /// response is done.
    pub pressure_critical: u64,
    /// Thread caches taken back from their threads.
    pub caches_taken: u64,
    /// The working-set estimate, in objects.
    pub working_set: u64,
    /// Object pools: objects the caller made and gave to the pool
    /// (`tidepool_obj_adopt`, or a put to a pool that accepts foreign
    /// objects); part of `created`. 0 for the other kinds.
    pub adopted: u64,
    /// Stack pools: stacks mapped, live or idle. Since version 1.
    pub mapped: u64,
    /// Stack pools: memory mappings (VMAs) those stacks cost, at most.
    pub vmas: u64,
    /// Stack pools: an upper bound on the RAM idle stacks hold, in bytes.
    pub idle_resident_max: u64,
    /// Stack pools: gets that hit a kernel limit, made every stack pool
    /// give back its idle stacks, and tried again.
    pub reclaim_retries: u64,
    /// Stack pools: purges whose `madvise` failed.
    pub purge_failures: u64,
    /// Stack pools: `munmap` calls that failed, process-wide.
    pub unmap_failures: u64,
    /// Objects busy thread caches gave back to the depot because they sat
    /// unused in the cache through two reclaim intervals (a trim). Since
    /// version 2.
    pub trimmed: u64,
    /// Gets with `TIDEPOOL_GET_NO_CREATE` that found no idle object (part
    /// of `misses`). Since version 3.
    pub empty_gets: u64,
    /// The part of `idle` in thread caches (the rest is `idle_depot`).
    /// Since version 3.
    pub idle_cached: u64,
    /// The cap on idle objects in the depot now (`max_idle`, as changed by
    /// `tidepool_pool_adjust_max_idle`). Since version 3.
    pub max_idle: u64,
    /// Objects the pool decided to destroy and has not destroyed yet: in
    /// its destroy queue or in a `destroy` call now, neither live nor idle. A pool without a reclaimer
    /// (`TIDEPOOL_NO_BACKGROUND`) may keep some queued until a later call
    /// runs the queue. Since version 4.
    pub destroying: u64,
    /// Stack pools: `mmap` calls made for this pool's stacks since it was
    /// built, one per slab. Since version 5.
    pub mmap_calls: u64,
    /// Stack pools: `mprotect` calls: with `PROT_NONE` guards, one per
    /// slot opened; with guard markers, one per marker the kernel refused.
    pub mprotect_calls: u64,
    /// Stack pools: guard-marker `madvise(MADV_GUARD_INSTALL)` calls, one
    /// per slot opened (not in `madvise_calls`).
    pub guard_calls: u64,
    /// Stack pools: `madvise` calls releasing pages: purges, freed stacks
    /// of slabs that stay, and a torn-down slab's pages released a
    /// `release_step` at a time before its `munmap`.
    pub madvise_calls: u64,
    /// Stack pools: `munmap` calls, one per slab, when its last stack is
    /// destroyed.
    pub munmap_calls: u64,
}

/// The size of the first version of [`tidepool_stats`] (up to `adopted`).
pub(crate) const STATS_SIZE_VER0: usize = offset_of!(tidepool_stats, mapped);

/// The size of the second version (up to `unmap_failures`).
pub(crate) const STATS_SIZE_VER1: usize = offset_of!(tidepool_stats, trimmed);

/// The size of version 2 (up to `trimmed`).
pub(crate) const STATS_SIZE_VER2: usize = offset_of!(tidepool_stats, empty_gets);

/// The size of version 3 (up to `max_idle`).
pub(crate) const STATS_SIZE_VER3: usize = offset_of!(tidepool_stats, destroying);

/// The size of version 4 (up to `destroying`).
pub(crate) const STATS_SIZE_VER4: usize = offset_of!(tidepool_stats, mmap_calls);

// SAFETY: `#[repr(C)]`, `size: usize` first, integers only.
unsafe impl SizedStruct for tidepool_stats {
    const NAME: &'static str = "tidepool_stats";
    const VERSIONS: &'static [usize] = &[
        STATS_SIZE_VER0,
        STATS_SIZE_VER1,
        STATS_SIZE_VER2,
        STATS_SIZE_VER3,
        STATS_SIZE_VER4,
    ];
}

impl tidepool_stats {
    /// The figures the core pool keeps.
    pub(crate) fn from_core(s: &tidepool::Stats) -> Self {
        Self {
            size: 0,
            created: s.created,
            destroyed: s.destroyed,
            live: s.live,
            idle: s.idle,
            idle_depot: s.idle_depot,
            idle_purged: s.idle_purged,
            hits: s.hits,
            misses: s.misses,
            depot_exchanges: s.depot_exchanges,
            reclaimed: s.reclaimed,
            reclaim_passes: s.reclaim_passes,
            pressure_medium: s.pressure_medium,
            pressure_critical: s.pressure_critical,
            caches_taken: s.caches_taken,
            working_set: s.working_set,
            trimmed: s.trimmed,
            empty_gets: s.empty_gets,
            idle_cached: s.idle_cached(),
            destroying: s.destroying,
            ..Self::default()
        }
    }
}
