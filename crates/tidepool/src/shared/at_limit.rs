//! What a `get` does when creating would pass `max_live`: it looks for an
//! idle object everywhere before it says [`Exhausted`](crate::Error::Exhausted).
//!
//! ```text
//!  create refused (max_live)
//!    1. the depot           another thread may have donated since we looked
//!    2. other threads' caches  steal one (the revocation protocol of
//!                           cache/slot.rs), its batches go to the depot
//!    3. pending destroys    `flush_pending_destroys` (destroy.rs)
//!    then the caller's get loop tries again; after ROUNDS fruitless
//!    rounds (or when nothing at all turned up) the answer is Exhausted
//! ```
//!
//! So a `get` never fails while an idle object sits in a cache or the depot
//! of its pool (FreeBSD UMA and vnlru recycle before they fail or sleep).
//! Without a process-wide barrier (`membarrier(2)`: non-Linux, seccomp)
//! another thread's cache cannot be taken while its owner runs; the owner
//! is asked to flush at its next operation, and until then the `get` fails.

use super::Shared;
use crate::callbacks::Site;
use crate::Manage;

/// How many times one `get` goes round the recycle-then-retry loop before
/// it gives up: other threads may take what a round freed.
pub(crate) const ROUNDS: usize = 4;

impl<M: Manage> Shared<M> {
    /// Called when `create` was refused for `max_live`. Brings idle objects
    /// where the caller's get loop will find them, or frees places under
    /// `max_live`: `true` if it did (or the depot has objects already), so
    /// the caller should try again; `false` if the pool truly holds no idle
    /// object it can reach, and the answer is `Exhausted`. `me` is the
    /// caller's thread id (its own cache is empty; it is not stolen from).
    #[cold]
    pub(crate) fn recycle_before_failing(&self, me: Option<usize>) -> bool {
        // 1. Donated to the depot since the caller looked.
        if self.depot.counts().idle > 0 {
            return true;
        }
        // 2. Another thread's cache: its batches go to the depot; what the
        // depot refuses (past `max_idle`) is destroyed, which frees places.
        let stolen = self.steal_cache(me);
        if !stolen.is_empty() {
            let refused = self.donate_all(stolen);
            // The caller holds nothing yet: a panic may reach it.
            self.destroy_batches(refused, Site::Caller);
            return true;
        }
        // 3. Destroys still under way.
        self.flush_pending_destroys()
    }
}
