//! `max_live`, exact and scalable: the global count of places under the
//! limit, handed to threads in chunks of credits (`cache/credit.rs`).
//!
//! ```text
//!  reserved == existing + sum(slot credits) + places in flight     <= limit
//!               │              │                 │
//!               │              │                 └ a create under way, or a
//!               │              │                   place handed to a waiter
//!               │              └ spent by the slot's creates, refilled by
//!               │                its destroys; recalled by anyone
//!               └ objects live or idle
//! ```
//!
//! `reserved` only ever grows by a compare-and-swap that keeps it within
//! the limit, so `max_live` is never passed, not even for an instant (the
//! FreeBSD "before" pattern, an increment then a decrement to back off,
//! passes it transiently and writes the shared line three times). A create
//! spends a credit of its own slot (a read-modify-write on the slot's own
//! cache line); only when its slot has none does it take a chunk from
//! `reserved`: one shared write per `chunk` creates. A destroy gives its
//! place back to its own slot (up to two chunks), so a thread that destroys
//! and creates in turn never touches `reserved` at all.
//!
//! Near the limit (fewer than `NEAR * chunk` places left) nobody takes or
//! keeps more than one place, so the count is as exact as a single counter
//! there; and a reservation that finds `reserved` full recalls every
//! slot's credits before it says no. Credits also come back at `reclaim_unused`,
//! `drain` and thread exit. Stats do not read any of this: they sum the
//! per-slot `created` and `destroyed` counts, which are exact.

use crossbeam_utils::CachePadded;

use crate::cache::credit::Credit;
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::yield_now;

/// Within `NEAR * chunk` places of the limit, places move one at a time.
const NEAR: usize = 4;

/// Recall-and-retry rounds of a reservation that finds the count full.
const RECALL_ROUNDS: usize = 3;

/// The global side of a `max_live` budget.
#[derive(Debug)]
pub(crate) struct Places {
    limit: usize,
    chunk: usize,
    /// Places left below which they move one at a time: `NEAR * chunk`.
    near: usize,
    /// See the module docs: never above `limit`.
    global: CachePadded<Global>,
}

/// The shared line: the count, and how often it was written.
#[derive(Debug, Default)]
struct Global {
    reserved: AtomicUsize,
    /// Read-modify-writes of `reserved` (chunks and single places taken,
    /// places and recalled credits given back): the cross-thread writes
    /// `max_live` costs, [`Stats::limit_folds`](crate::Stats::limit_folds).
    /// On `reserved`'s own line, written right after it (the line is held
    /// already): counting adds no traffic of its own.
    folds: AtomicU64,
}

/// A reservation found no place: every credit recalled, `reserved` full.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

impl Places {
    /// A budget of `limit` places, lent to threads `chunk` at a time.
    pub(crate) fn new(limit: usize, chunk: usize) -> Self {
        let chunk = chunk.max(1);
        Self::with_near(limit, chunk, NEAR * chunk)
    }

    /// As [`new`](Places::new), with the places-left threshold set (the
    /// loom model's small budgets need chunks right up to the limit).
    pub(crate) fn with_near(limit: usize, chunk: usize, near: usize) -> Self {
        Self {
            limit,
            chunk: chunk.max(1),
            near,
            global: CachePadded::default(),
        }
    }

    /// The chunk for a pool: small against the limit (so credits parked in
    /// threads stay a small part of it), at most a batch.
    pub(crate) fn chunk_for(limit: usize, batch_size: usize) -> usize {
        (limit / 64).clamp(1, batch_size.max(1))
    }

    /// Reserves one place for a create: from `local` (the caller's slot's
    /// credits) if it has one, else a chunk from the global count (keeping
    /// the rest in `local`), else, with the count full, after recalling
    /// every slot's credits (`all` visits them). Returns how many credits
    /// it recalled to the count on the way (places freed, as far as other
    /// threads can tell, that waiters may want).
    pub(crate) fn reserve(
        &self,
        local: Option<&Credit>,
        all: impl Fn(&mut dyn FnMut(&Credit)),
    ) -> Result<usize, Full> {
        if local.is_some_and(Credit::take_one) {
            return Ok(0);
        }
        if self.take_global(local) {
            return Ok(0);
        }
        // Full: bring back what other threads hold unused, and try again.
        // More than once, yielding between: another thread may be in the
        // middle of a recall (credits swapped out, not yet returned) or of
        // taking a chunk; both finish in a few instructions.
        let mut recalled = 0;
        for _ in 0..RECALL_ROUNDS {
            recalled += self.recall(&all);
            if self.take_global(local) {
                return Ok(recalled);
            }
            yield_now();
        }
        Err(Full)
    }

    /// Takes places from the global count: one for the caller, and (far
    /// from the limit) the rest of a chunk for `local`.
    fn take_global(&self, local: Option<&Credit>) -> bool {
        let mut r = self.global.reserved.load(Ordering::Relaxed);
        loop {
            let free = self.limit - r;
            if free == 0 {
                return false;
            }
            let k = match local {
                Some(_) if free >= self.near => self.chunk.min(free),
                _ => 1,
            };
            // `Acquire`: a place given back with `Release` by a destroy is
            // free before it is reused.
            match self.global.reserved.compare_exchange_weak(
                r,
                r + k,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.global.folds.fetch_add(1, Ordering::Relaxed);
                    if let (Some(local), true) = (local, k > 1) {
                        local.give(k - 1);
                    }
                    return true;
                }
                Err(now) => r = now,
            }
        }
    }

    /// Gives back the place of an object that is gone: to `local` (the
    /// caller's slot) while it holds under two chunks and the limit is not
    /// near, else to the global count.
    pub(crate) fn release(&self, local: Option<&Credit>) {
        if let Some(local) = local {
            if local.held() < 2 * self.chunk
                && self.limit - self.global.reserved.load(Ordering::Relaxed) >= self.near
            {
                local.give(1);
                return;
            }
        }
        self.global.reserved.fetch_sub(1, Ordering::Release);
        self.global.folds.fetch_add(1, Ordering::Relaxed);
    }

    /// Returns the credits of the slots `all` visits to the global count
    /// (every slot: `reclaim_unused`, `drain`, a reservation at the limit;
    /// one: its thread's exit). Returns how many.
    pub(crate) fn recall(&self, all: impl Fn(&mut dyn FnMut(&Credit))) -> usize {
        let mut n = 0;
        all(&mut |credit| n += credit.recall());
        probe!(ReturnCredits);
        self.return_credits(n);
        n
    }

    /// Returns `n` recalled credits to the count.
    fn return_credits(&self, n: usize) {
        if n > 0 {
            self.global.reserved.fetch_sub(n, Ordering::Release);
            self.global.folds.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes of the global count so far (`Stats::limit_folds`).
    pub(crate) fn folds(&self) -> u64 {
        self.global.folds.load(Ordering::Relaxed)
    }

    /// The limit, `max_live`.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Places reserved now: objects, credits and places in flight.
    #[cfg(any(test, loom))]
    pub(crate) fn reserved(&self) -> usize {
        self.global.reserved.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn each<'a>(credits: &'a [Credit]) -> impl Fn(&mut dyn FnMut(&Credit)) + 'a {
        move |visit| credits.iter().for_each(&mut *visit)
    }

    #[test]
    fn chunks_far_from_the_limit_single_places_near_it() {
        let credits = [Credit::default(), Credit::default()];
        let p = Places::new(64, 4); // near = 16
        p.reserve(Some(&credits[0]), each(&credits)).unwrap();
        assert_eq!((p.reserved(), credits[0].held()), (4, 3), "a chunk");
        for _ in 0..3 {
            p.reserve(Some(&credits[0]), each(&credits)).unwrap();
        }
        assert_eq!(
            (p.reserved(), credits[0].held()),
            (4, 0),
            "credits spent first"
        );
        // Near the limit: one at a time, nothing parked.
        while p.reserved() < 64 {
            p.reserve(Some(&credits[1]), each(&credits)).unwrap();
            assert!(credits[1].held() <= 3);
        }
        assert_eq!(credits[1].held(), 0);
        assert_eq!(p.reserve(Some(&credits[1]), each(&credits)), Err(Full));
        assert_eq!(p.reserved(), 64, "never past the limit");
        // One write of the shared count per chunk or single place, none
        // per credit spent: thread 0's chunk, thread 1's chunks while 16 or
        // more places were left (reserved 4 → 52: 12 chunks), then the
        // last 12 places one by one.
        assert_eq!(p.folds(), 1 + 12 + 12);
    }

    #[test]
    fn a_reservation_at_the_limit_recalls_other_threads_credits() {
        let credits = [Credit::default(), Credit::default()];
        let p = Places::with_near(8, 4, 0);
        p.reserve(Some(&credits[0]), each(&credits)).unwrap(); // 1 used, 3 parked
        for _ in 0..4 {
            p.reserve(Some(&credits[1]), each(&credits)).unwrap(); // a chunk of 4
        }
        assert_eq!((p.reserved(), credits[0].held()), (8, 3));
        // Full, but thread 0 parks 3: recalled, and spent.
        for _ in 0..3 {
            p.reserve(Some(&credits[1]), each(&credits)).unwrap();
        }
        assert_eq!(credits[0].held(), 0);
        assert_eq!(p.reserve(Some(&credits[1]), each(&credits)), Err(Full));
        // Releases go to the releasing thread's credits far from the limit
        // (never here: near is 0 places, so always) and come back on recall.
        p.release(Some(&credits[1]));
        assert_eq!((p.reserved(), credits[1].held()), (8, 1));
        assert_eq!(p.recall(each(&credits)), 1);
        assert_eq!(p.reserved(), 7);
        p.release(None);
        assert_eq!(p.reserved(), 6);
    }
}
