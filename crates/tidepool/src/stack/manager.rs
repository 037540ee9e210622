//! The [`Manage`] impl behind a [`StackPool`](super::StackPool): maps,
//! purges and unmaps guarded stacks.

use crate::sync::atomic::{AtomicU64, Ordering};
use std::fmt;

use crate::stack::{GuardedStack, StackError};
use crate::Manage;

/// Makes the stacks of a [`StackPool`](super::StackPool), all of one size.
///
/// * `create` maps `guard_size + usable_size` bytes and protects the guard
///   ([`GuardedStack`]); a failure is explained by [`StackError`].
/// * `purge` releases the pages of an idle stack below its top
///   `keep_resident` bytes (`madvise(MADV_DONTNEED)`), keeping the mapping.
/// * `destroy` unmaps it.
///
/// Built by [`StackPoolBuilder`](super::StackPoolBuilder); reach it with
/// [`StackPool::manager`](super::StackPool::manager).
pub struct StackManager {
    guard_size: usize,
    usable_size: usize,
    keep_resident: usize,
    purge_failures: AtomicU64,
    reclaim_retries: AtomicU64,
}

impl StackManager {
    pub(crate) fn new(guard_size: usize, usable_size: usize, keep_resident: usize) -> Self {
        Self {
            guard_size,
            usable_size,
            keep_resident,
            purge_failures: AtomicU64::new(0),
            reclaim_retries: AtomicU64::new(0),
        }
    }

    /// Usable bytes per stack (page-rounded).
    pub fn usable_size(&self) -> usize {
        self.usable_size
    }

    /// Guard bytes below each stack (one page).
    pub fn guard_size(&self) -> usize {
        self.guard_size
    }

    /// Bytes at the top of each stack that [`purge`](Manage::purge) leaves
    /// resident (page-rounded, at most `usable_size`).
    pub fn keep_resident(&self) -> usize {
        self.keep_resident
    }

    /// Purges whose `madvise` failed (the stack stayed resident, and
    /// usable).
    pub(crate) fn purge_failures(&self) -> u64 {
        self.purge_failures.load(Ordering::Relaxed)
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
        GuardedStack::map(self.usable_size)
    }

    fn purge(&self, stack: &mut GuardedStack) {
        // `madvise(MADV_DONTNEED)` on our own writable private memory only
        // fails if the process locked it (`mlockall`): then the stack just
        // stays resident. It is still whole and fit for reuse.
        if stack.release_below(self.keep_resident).is_err() {
            self.purge_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl fmt::Debug for StackManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackManager")
            .field("usable_size", &self.usable_size)
            .field("guard_size", &self.guard_size)
            .field("keep_resident", &self.keep_resident)
            .finish_non_exhaustive()
    }
}
