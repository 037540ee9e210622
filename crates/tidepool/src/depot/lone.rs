//! The gets and returns of threads with no cache in a pool, which the depot
//! serves one object at a time ([`Depot::take_lone`](super::Depot::take_lone),
//! [`put_lone`](super::Depot::put_lone)).
//!
//! The depot counts them under its lock, which those calls take anyway, so
//! each count is a plain load and store, never a locked instruction. The
//! counts live outside the depot, on the first line of the pool's head
//! (`shared/head.rs`), beside what the same get and put read there: a
//! slot-less round trip then touches that line and the depot's, one pair
//! of lines, and writes no line that cached threads' gets and puts read
//! other than this one.
//!
//! ```text
//! gets, returns: written only by a holder of the depot's lock,
//!                read only by one (Depot::lone_counts, Depot::counts_with)
//! ```

use crate::sync::atomic::{AtomicU64, Ordering};

/// See the module docs. Atomics only so that a reader and a writer need no
/// `&mut`: every access holds the depot's lock, which orders them.
#[derive(Debug, Default)]
pub(crate) struct Lone {
    gets: AtomicU64,
    returns: AtomicU64,
}

impl Lone {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// One more get. The caller holds the depot's lock.
    #[inline(always)]
    pub(super) fn add_get_locked(&self) {
        let n = self.gets.load(Ordering::Relaxed);
        self.gets.store(n + 1, Ordering::Relaxed);
    }

    /// One more return. The caller holds the depot's lock.
    #[inline(always)]
    pub(super) fn add_return_locked(&self) {
        let n = self.returns.load(Ordering::Relaxed);
        self.returns.store(n + 1, Ordering::Relaxed);
    }

    /// `(gets, returns)`. The caller holds the depot's lock.
    pub(super) fn read_locked(&self) -> (u64, u64) {
        (
            self.gets.load(Ordering::Relaxed),
            self.returns.load(Ordering::Relaxed),
        )
    }
}
