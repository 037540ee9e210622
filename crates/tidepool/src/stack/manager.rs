//! The [`Manage`] impl behind a [`StackPool`](super::StackPool): carves,
//! purges and frees guarded stacks in slabs.

use crate::sync::atomic::{AtomicU64, Ordering};
use std::fmt;
use std::io;
use std::sync::Arc;

use crate::stack::slab::{self, SlabCounts, Slabs};
use crate::stack::{GuardMode, GuardedStack, MapBudget, StackError};
use crate::Manage;

/// Makes the stacks of a [`StackPool`](super::StackPool), all of one size,
/// carved from slabs of this pool's own (see [Slabs](super#slabs)).
///
/// * `create` and `create_batch` take free slots of the pool's slabs
///   first (no syscall), then open new slots (one guard-marker `madvise`
///   or one `mprotect` each, per [`GuardMode`]), then
///   map a new slab (one `mmap` for up to
///   [`stacks_per_slab`](StackManager::stacks_per_slab) stacks); a failure
///   is explained by [`StackError`]. `create_batch(n)` carves a whole burst
///   at once.
/// * `purge` and `purge_batch` release the pages of idle stacks below their
///   top `keep_resident` bytes (`madvise`: `MADV_DONTNEED` on Linux,
///   `MADV_FREE` elsewhere), keeping the mapping; `purge_batch` uses one
///   call per run of adjacent stacks when `keep_resident` is 0.
/// * `destroy` frees a stack's slot (its pages released); `destroy_batch`
///   frees a batch, one `munmap` per slab whose last stacks it frees and
///   one `madvise` per run of adjacent stacks in the others.
///
/// Built by [`StackPoolBuilder`](super::StackPoolBuilder); reach it with
/// [`StackPool::manager`](super::StackPool::manager).
pub struct StackManager {
    keep_resident: usize,
    budget: Option<MapBudget>,
    slabs: Arc<Slabs>,
    reclaim_retries: AtomicU64,
}

impl StackManager {
    /// Stacks of `usable_size` bytes above `guard_size` bytes of guard (whole
    /// pages), in slabs holding at most `max_slots` stacks in all (the
    /// pool's `max_live`).
    pub(crate) fn new(
        guard_size: usize,
        usable_size: usize,
        keep_resident: usize,
        budget: Option<MapBudget>,
        max_slots: Option<usize>,
        markers: bool,
        release_step: usize,
    ) -> Self {
        Self {
            keep_resident,
            budget,
            slabs: Arc::new(
                Slabs::new(guard_size, usable_size, max_slots, markers)
                    .with_release_step(release_step),
            ),
            reclaim_retries: AtomicU64::new(0),
        }
    }

    /// The slab set the stacks come from.
    pub(crate) fn slabs(&self) -> &Slabs {
        &self.slabs
    }

    /// Usable bytes per stack (page-rounded).
    pub fn usable_size(&self) -> usize {
        self.slabs.usable_size()
    }

    /// Guard bytes below each stack (one page).
    pub fn guard_size(&self) -> usize {
        self.slabs.guard_size()
    }

    /// Bytes at the top of each stack that [`purge`](Manage::purge) leaves
    /// resident (page-rounded, at most `usable_size`).
    pub fn keep_resident(&self) -> usize {
        self.keep_resident
    }

    /// The most bytes one system call releases when stacks are torn down
    /// (page-rounded; 0: no bound). See
    /// [`StackPoolBuilder::release_step`](super::StackPoolBuilder::release_step).
    pub fn release_step(&self) -> usize {
        self.slabs.release_step()
    }

    /// Stacks a new slab holds: at most
    /// [`MAX_STACKS_PER_SLAB`](super::MAX_STACKS_PER_SLAB) and at most
    /// [`MAX_SLAB_BYTES`](super::MAX_SLAB_BYTES) of address space, guards
    /// included (fewer when `max_live` leaves less room).
    pub fn stacks_per_slab(&self) -> usize {
        self.slabs.per_slab()
    }

    /// How new stacks get their guard pages: [`GuardMode::Markers`] or
    /// [`GuardMode::Protect`] (never `Auto`). A pool built with markers
    /// reports `Protect` once the kernel has refused one (see
    /// [`GuardMode`]).
    pub fn guard_mode(&self) -> GuardMode {
        if self.slabs.markers() {
            GuardMode::Markers
        } else {
            GuardMode::Protect
        }
    }

    /// The map-count budget the pool's caps came from, if any.
    pub(crate) fn budget(&self) -> Option<MapBudget> {
        self.budget
    }

    /// What the slabs hold and the system calls made for them.
    pub(crate) fn slab_counts(&self) -> SlabCounts {
        self.slabs.counts()
    }

    /// RAM held by the slabs now (see `Slabs::resident_bytes`).
    pub(crate) fn resident_bytes(&self) -> std::io::Result<u64> {
        self.slabs.resident_bytes()
    }

    pub(crate) fn reclaim_retries(&self) -> u64 {
        self.reclaim_retries.load(Ordering::Relaxed)
    }

    pub(crate) fn count_reclaim_retry(&self) {
        self.reclaim_retries.fetch_add(1, Ordering::Relaxed);
    }
}

impl Manage for StackManager {
    type Item = GuardedStack;
    type Error = StackError;

    fn create(&self) -> Result<GuardedStack, StackError> {
        // `carve(1)` returns one stack or an error; never an empty `Ok`.
        self.slabs.carve(1)?.pop().ok_or_else(|| StackError::Os {
            call: "mmap",
            source: io::Error::other("no stack carved"),
        })
    }

    fn create_batch(&self, n: usize) -> Result<Vec<GuardedStack>, StackError> {
        self.slabs.carve(n)
    }

    fn purge(&self, stack: &mut GuardedStack) {
        self.purge_batch(std::slice::from_mut(stack));
    }

    /// `madvise` on our own private memory only fails if the process locked
    /// it (`mlockall`): then the stacks just stay resident, still whole and
    /// fit for reuse, and the failure is counted
    /// ([`StackStats::purge_failures`](super::StackStats::purge_failures)).
    fn purge_batch(&self, stacks: &mut [GuardedStack]) {
        slab::purge_stacks(stacks, self.keep_resident);
    }

    fn destroy_batch(&self, stacks: Vec<GuardedStack>) {
        slab::destroy_stacks(stacks);
    }
}

impl fmt::Debug for StackManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackManager")
            .field("usable_size", &self.usable_size())
            .field("guard_size", &self.guard_size())
            .field("keep_resident", &self.keep_resident)
            .field("stacks_per_slab", &self.stacks_per_slab())
            .finish_non_exhaustive()
    }
}
