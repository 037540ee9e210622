//! One thread's share of a pool's `max_live` budget: places under the limit
//! reserved in a chunk from the global count and spent one per create, so
//! that creates and destroys touch their own cache line, not a shared one
//! (Linux's `percpu_counter` batch, FreeBSD's `VNLRU_COUNT_SLOP`). The
//! budget itself, and the rules for when a chunk is taken and given back,
//! are in `shared/places.rs`.

use crate::sync::atomic::{AtomicUsize, Ordering};

/// Places under `max_live` held by one slot, unused. Any thread may recall
/// them (a `get` at the limit, `reclaim_unused`, thread exit); so the owner spends and
/// adds them with read-modify-writes on its own slot's line, never a plain
/// store that could bring back what was recalled.
#[derive(Debug, Default)]
pub(crate) struct Credit(AtomicUsize);

impl Credit {
    /// Spends one place, if the slot holds any.
    #[inline]
    pub(crate) fn take_one(&self) -> bool {
        // `Acquire`: the destroy that freed this place (whose thread gave
        // it here with `Release`) is over before the create it pays for.
        self.0
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Adds `n` places.
    #[inline]
    pub(crate) fn give(&self, n: usize) {
        self.0.fetch_add(n, Ordering::Release);
    }

    /// Takes every place the slot holds.
    #[inline]
    pub(crate) fn recall(&self) -> usize {
        if self.0.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.0.swap(0, Ordering::AcqRel)
    }

    /// Places held now (a hint).
    #[inline]
    pub(crate) fn held(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}
