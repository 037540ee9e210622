//! One pool's reclaim: interval passes, pressure responses, and taking back
//! idle thread caches. The policy is described in the [module
//! docs](crate::reclaim).

use std::sync::Arc;
use std::time::Duration;

use crate::cache::Slot;
use crate::pressure::Level;
use crate::reclaim::Clock;
use crate::shared::Shared;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Mutex, SharedCounter};
use crate::Manage;

/// A pool's reclaim state: when the next pass is due, any pressure hold, and
/// the counts of what reclaim did.
pub(crate) struct ReclaimShared {
    pub(crate) clock: Arc<dyn Clock>,
    /// When the next interval pass is due, in clock nanoseconds.
    next_pass: AtomicU64,
    /// Until when critical pressure holds the depot at `min_idle`, in clock
    /// nanoseconds; 0 when there is no hold.
    hold_until: AtomicU64,
    /// Serialises passes, pressure responses and cache take-backs (two
    /// revokers must never work on one slot at once).
    lock: Mutex<PassState>,
    pub(crate) reclaimed: SharedCounter,
    pub(crate) passes: SharedCounter,
    pub(crate) pressure_medium: SharedCounter,
    pub(crate) pressure_critical: SharedCounter,
    pub(crate) caches_taken: SharedCounter,
}

/// What the passes remember about each thread cache, indexed by thread id.
#[derive(Default)]
struct PassState {
    /// The cache's operation count (gets + returns) at the last pass.
    seen_ops: Vec<u64>,
    /// The operation count at which the cache was last taken back: a cache
    /// still at that count is empty, and is left alone.
    taken_at: Vec<u64>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ReclaimShared {
    pub(crate) fn new(clock: Arc<dyn Clock>, interval: Duration) -> Self {
        let first = nanos(clock.now()).saturating_add(nanos(interval));
        Self {
            clock,
            next_pass: AtomicU64::new(first),
            hold_until: AtomicU64::new(0),
            lock: Mutex::new(PassState::default()),
            reclaimed: SharedCounter::default(),
            passes: SharedCounter::default(),
            pressure_medium: SharedCounter::default(),
            pressure_critical: SharedCounter::default(),
            caches_taken: SharedCounter::default(),
        }
    }

    fn now(&self) -> u64 {
        nanos(self.clock.now())
    }
}

impl<M: Manage> Shared<M> {
    /// Runs the interval pass if one is due. Called after depot visits (the
    /// lazy path) and by the reclaimer thread. Returns how many objects it
    /// destroyed.
    pub(crate) fn pass_if_due(&self) -> usize {
        let now = self.reclaim.now();
        if now < self.reclaim.next_pass.load(Ordering::Relaxed) {
            return 0;
        }
        self.pass(now)
    }

    #[cold]
    fn pass(&self, now: u64) -> usize {
        // Whoever holds the lock is already doing this (or a pressure
        // response, which is at least as thorough).
        let Some(mut state) = self.reclaim.lock.try_lock() else {
            return 0;
        };
        let due = self.reclaim.next_pass.load(Ordering::Relaxed);
        if now < due {
            return 0;
        }
        let interval = nanos(self.config.reclaim_interval).max(1);
        let intervals = 1 + (now - due) / interval;
        self.reclaim.next_pass.store(
            due.saturating_add(intervals.saturating_mul(interval)),
            Ordering::Relaxed,
        );
        self.end_hold_if_over(now);

        // Thread caches untouched since the last pass, a whole interval ago.
        let mut quiet = Vec::new();
        self.slots.for_each(|tid, slot| {
            if state.seen_ops.len() <= tid {
                state.seen_ops.resize(tid + 1, u64::MAX);
                state.taken_at.resize(tid + 1, u64::MAX);
            }
            let (gets, returns) = slot.counts();
            let ops = gets + returns;
            if slot.is_owned() && state.seen_ops[tid] == ops && state.taken_at[tid] != ops {
                quiet.push(slot);
                state.taken_at[tid] = ops;
            }
            state.seen_ops[tid] = ops;
        });
        self.reclaim.caches_taken.add(quiet.len() as u64);
        let taken = Slot::revoke_remote(quiet);
        let tick = self.depot.tick(intervals, self.config.min_idle);
        self.reclaim.passes.add(1);
        drop(state);

        // Outside every lock: managers run here.
        let refused = self.donate_all(taken);
        let reclaimed = self.destroy(tick.reclaim.into_iter().chain(refused).flatten());
        self.reclaim.reclaimed.add(reclaimed as u64);
        self.purge_batches(tick.purge);
        reclaimed
    }

    /// Applies a memory-pressure level to this pool (see [`crate::pressure`]).
    /// Returns how many idle objects were destroyed.
    pub(crate) fn pressure(&self, level: Level) -> usize {
        let floor = self.config.min_idle;
        let destroyed = match level {
            Level::Medium => {
                self.reclaim.pressure_medium.add(1);
                self.destroy(self.depot.reclaim_unused(floor).into_iter().flatten())
            }
            Level::Critical => {
                self.reclaim.pressure_critical.add(1);
                let state = self.reclaim.lock.lock();
                let until = self
                    .reclaim
                    .now()
                    .saturating_add(nanos(self.config.pressure_hold));
                self.reclaim
                    .hold_until
                    .store(until.max(1), Ordering::Relaxed);
                self.depot.set_cap(floor);
                let owned = self.owned_slots();
                self.reclaim.caches_taken.add(owned.len() as u64);
                let taken = Slot::revoke_remote(owned);
                drop(state);
                // The depot's cap is `min_idle` now: what does not fit goes.
                let refused = self.donate_all(taken);
                let rest = self.depot.take_down_to(floor);
                self.destroy(refused.into_iter().chain(rest).flatten())
            }
        };
        self.reclaim.reclaimed.add(destroyed as u64);
        destroyed
    }

    /// Whether a critical-pressure hold is on at `now` (ending it if it is
    /// over). Read on slow paths only.
    pub(crate) fn holding(&self) -> bool {
        if self.reclaim.hold_until.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let now = self.reclaim.now();
        if now < self.reclaim.hold_until.load(Ordering::Relaxed) {
            return true;
        }
        let _state = self.reclaim.lock.lock();
        self.end_hold_if_over(now);
        false
    }

    /// Lifts a hold that is over; under the reclaim lock, so a hold set by a
    /// concurrent critical signal is not lifted by mistake.
    fn end_hold_if_over(&self, now: u64) {
        let until = self.reclaim.hold_until.load(Ordering::Relaxed);
        if until != 0 && now >= until {
            self.reclaim.hold_until.store(0, Ordering::Relaxed);
            self.depot.set_cap(self.config.max_idle);
        }
    }

    /// Takes back every thread cache it can reach now (the caller's, and
    /// those of owners outside an access; busy owners are asked to flush).
    pub(crate) fn take_caches_remote(&self) -> Vec<Vec<M::Item>> {
        let _state = self.reclaim.lock.lock();
        Slot::revoke_remote(self.owned_slots())
    }

    /// Every thread cache that some thread owns right now.
    fn owned_slots(&self) -> Vec<&Slot<M::Item>> {
        let mut owned = Vec::new();
        self.slots.for_each(|_, slot| {
            if slot.is_owned() {
                owned.push(slot);
            }
        });
        owned
    }

    /// For the reclaimer thread: runs a due pass and says when to come back
    /// (`None`: this pool holds nothing to reclaim and no hold to lift).
    pub(crate) fn background_tick(&self) -> Option<Duration> {
        let holding = self.holding();
        if !holding && self.existing() <= self.config.min_idle as u64 {
            return None;
        }
        self.pass_if_due();
        let now = self.reclaim.now();
        let mut next = self.reclaim.next_pass.load(Ordering::Relaxed);
        let hold = self.reclaim.hold_until.load(Ordering::Relaxed);
        if hold != 0 {
            next = next.min(hold);
        }
        Some(Duration::from_nanos(next.saturating_sub(now)))
    }
}
