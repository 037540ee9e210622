//! The state all threads share, and the get and put paths through it.
//!
//! ```text
//!  get ─► this thread's LocalSlot ──hit──► object
//!            │ both batches empty (cold)
//!            ▼
//!         depot.refill ──► a full batch ──► object
//!            │ depot empty
//!            ▼
//!         manager.create (max_live checked first)
//! ```
//!
//! `put` runs the other way: recycle, push onto the local cache, donate the
//! spare batch when both are full, destroy the batch if the depot is at
//! `max_idle`. No manager method runs while a cache is borrowed or the depot
//! is locked, so managers may re-enter the pool.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};

use crossbeam_utils::CachePadded;

use crate::cache::{thread, LocalSlot, SlotTable, ThreadExit};
use crate::depot::Depot;
use crate::lifetime::Life;
use crate::reclaim::{Clock, ReclaimShared};
use crate::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::sync::SharedCounter;
use crate::{Config, Error, Manage, Stats};

type Panic = Box<dyn Any + Send>;

/// Everything a pool's threads share. [`Pool`](crate::Pool) is an `Arc` of
/// this; thread caches point back at it weakly for the thread-exit hand-off.
pub(crate) struct Shared<M: Manage> {
    pub(crate) manager: M,
    pub(crate) config: Config,
    pub(crate) slots: SlotTable<M::Item>,
    pub(crate) depot: Depot<M::Item>,
    /// Slow-path counters, on their own cache lines: they change only when
    /// objects are created or destroyed, never on a cache hit.
    counters: CachePadded<Counters>,
    /// Reclaim intervals, pressure holds and their counts (`reclaim/pass.rs`).
    pub(crate) reclaim: CachePadded<ReclaimShared>,
    /// How owned guards keep this alive past the handle (`lifetime.rs`);
    /// read on every owned guard's end, so on a line of its own.
    pub(crate) life: CachePadded<Life>,
}

/// Pool-wide counts. Per-thread `gets`/`returns` live in the slots.
///
/// Invariants, exact whenever no thread is inside the pool:
/// * `existing == created - destroyed - detached`
/// * `live == gets - returns - discarded - detached`
///   (`gets`, `returns` summed over every slot plus the slot-less ones)
/// * `live + idle == existing`, `idle == depot + sum(cache lengths)`
#[derive(Default)]
struct Counters {
    created: SharedCounter,
    destroyed: SharedCounter,
    detached: SharedCounter,
    /// Gets that had to create.
    misses: SharedCounter,
    /// Guards that ended by destroying their object (discard, refused by
    /// `recycle`, dropped while panicking).
    discarded: SharedCounter,
    /// Gets and returns by threads without a cache (exiting threads).
    slotless_gets: SharedCounter,
    slotless_returns: SharedCounter,
    /// Objects in existence; reserved before `create` so `max_live` holds
    /// exactly under contention, released after `destroy` returns.
    existing: AtomicUsize,
}

impl<M: Manage> Shared<M> {
    pub(crate) fn new(manager: M, config: Config, clock: Arc<dyn Clock>) -> Self {
        Self {
            depot: Depot::new(config.batch_size, config.max_idle),
            slots: SlotTable::new(),
            counters: CachePadded::default(),
            reclaim: CachePadded::new(ReclaimShared::new(clock, config.reclaim_interval)),
            life: CachePadded::default(),
            manager,
            config,
        }
    }

    /// Objects in existence, live or idle.
    pub(crate) fn existing(&self) -> u64 {
        self.counters.existing.load(Ordering::Relaxed) as u64
    }

    /// This thread's slot, if it has one in this pool. The slot may not be
    /// claimed (or may have been revoked): every access checks.
    #[inline(always)]
    fn local(&self) -> Option<LocalSlot<'_, M::Item>> {
        let tid = thread::current_tid()?;
        let slot = self.slots.get(tid)?;
        // SAFETY: `tid` is this thread's own id, which it has not released
        // (`current_tid` returns `None` from the moment it starts to).
        Some(unsafe { LocalSlot::new(slot) })
    }

    /// This thread's cache, claimed (or re-claimed after a revocation) now
    /// if need be. `None` while the thread's thread-locals are being
    /// destroyed.
    #[cold]
    fn claim_local(this: &Arc<Self>) -> Option<LocalSlot<'_, M::Item>> {
        // Lifts a critical-pressure hold that is over (a clock read only
        // while one is on).
        this.holding();
        let tid = thread::current_tid_or_register()?;
        let slot = this.slots.get_or_alloc(tid);
        // SAFETY: `tid` is this thread's own id, not released (we are not in
        // its exit: `current_tid_or_register` returned it).
        let local = unsafe { LocalSlot::new(slot) };
        if local.is_active() {
            return Some(local);
        }
        let me: Weak<dyn ThreadExit> = Arc::downgrade(this) as Weak<Self>;
        if !thread::watch(me) {
            return None;
        }
        let flushed = local.claim(this.config.batch_size);
        this.donate_or_destroy(flushed);
        Some(local)
    }

    /// Gives `batches` to the depot; destroys what it refuses.
    fn donate_or_destroy(&self, batches: Vec<Vec<M::Item>>) {
        self.destroy(self.donate_all(batches).into_iter().flatten());
    }

    /// Gives `batches` to the depot; returns the ones it refuses, for the
    /// caller to destroy outside the lock.
    pub(crate) fn donate_all(&self, batches: Vec<Vec<M::Item>>) -> Vec<Vec<M::Item>> {
        batches
            .into_iter()
            .filter(|batch| !batch.is_empty())
            .filter_map(|batch| self.depot.donate(batch).err())
            .collect()
    }

    // === get ===

    #[inline]
    pub(crate) fn get(this: &Arc<Self>) -> Result<M::Item, Error<M::Error>> {
        if let Some(slot) = this.local() {
            if let Some(item) = slot.pop() {
                return Ok(item);
            }
        }
        Self::get_slow(this)
    }

    /// Both batches empty, or no cache yet: refill from the depot or create.
    #[cold]
    #[inline(never)]
    fn get_slow(this: &Arc<Self>) -> Result<M::Item, Error<M::Error>> {
        let item = loop {
            let Some(slot) = Self::claim_local(this) else {
                return this.get_slotless();
            };
            let found = slot.with_cache(|cache| {
                cache.pop().or_else(|| {
                    this.depot
                        .refill(cache.loaded_mut())
                        .then(|| cache.pop())
                        .flatten()
                })
            });
            match found {
                Ok(Some(item)) => {
                    slot.count_get();
                    break item;
                }
                Ok(None) => {
                    let item = this.create()?;
                    slot.count_get();
                    break item;
                }
                // Revoked between the claim and the access: claim again.
                Err(_) => continue,
            }
        };
        this.pass_if_due();
        Ok(item)
    }

    #[cold]
    fn get_slotless(&self) -> Result<M::Item, Error<M::Error>> {
        let item = match self.depot.take_one() {
            Some(item) => item,
            None => self.create()?,
        };
        self.counters.slotless_gets.add(1);
        Ok(item)
    }

    /// Creates an object, within `max_live`.
    #[cold]
    fn create(&self) -> Result<M::Item, Error<M::Error>> {
        /// Gives back the place reserved under `max_live` unless disarmed:
        /// on error and on panic alike.
        struct Reservation<'a>(&'a AtomicUsize);
        impl Drop for Reservation<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }

        let existing = &self.counters.existing;
        let before = existing.fetch_add(1, Ordering::Relaxed);
        let reservation = Reservation(existing);
        if let Some(limit) = self.config.max_live {
            if before >= limit {
                return Err(Error::Exhausted { limit });
            }
        }
        let item = self.manager.create().map_err(Error::Create)?;
        std::mem::forget(reservation);
        self.counters.created.add(1);
        self.counters.misses.add(1);
        #[cfg(not(loom))]
        if self.config.background {
            crate::reclaim::reclaimer::wake_if_parked();
        }
        Ok(item)
    }

    // === put ===

    #[inline]
    pub(crate) fn put(this: &Arc<Self>, item: M::Item) {
        if std::thread::panicking() {
            return this.discard(item);
        }
        let Some(mut item) = this.recycle(item) else {
            return;
        };
        if let Some(slot) = this.local() {
            match slot.push(item, this.config.batch_size) {
                Ok(()) => return,
                Err(back) => item = back,
            }
        }
        Self::put_slow(this, item)
    }

    /// Runs the manager's `recycle`; destroys the object if it says no, or
    /// if it panics (the panic then continues).
    #[inline]
    fn recycle(&self, mut item: M::Item) -> Option<M::Item> {
        match catch_unwind(AssertUnwindSafe(|| self.manager.recycle(&mut item))) {
            Ok(true) => Some(item),
            Ok(false) => {
                self.discard(item);
                None
            }
            Err(panic) => {
                self.counters.discarded.add(1);
                let _ = self.destroy_quiet(Some(item));
                resume_unwind(panic)
            }
        }
    }

    /// Both batches full, or no cache yet: donate the spare batch to the
    /// depot (destroying it if the depot is at its cap), then cache `item`.
    #[cold]
    #[inline(never)]
    fn put_slow(this: &Arc<Self>, mut item: M::Item) {
        let batch_size = this.config.batch_size;
        // Batches the depot refused: destroyed once `item` is safely cached,
        // so a panicking `destroy` cannot lose it.
        let mut refused = Vec::new();
        loop {
            let Some(slot) = Self::claim_local(this) else {
                this.put_slotless(item);
                break;
            };
            item = match slot.push(item, batch_size) {
                Ok(()) => break,
                Err(back) => back,
            };
            // Both batches full (or revoked meanwhile: claim again).
            let Ok(full) = slot.with_cache(|cache| cache.replace_spare(Vec::new())) else {
                continue;
            };
            let empty = match this.depot.donate(full) {
                Ok(empty) => empty,
                Err(full) => {
                    refused.push(full);
                    Vec::new()
                }
            };
            // If the cache was revoked meanwhile, `empty` holds nothing to
            // lose.
            let _ = slot.with_cache(|cache| {
                cache.replace_spare(empty);
                cache.reserve(batch_size);
            });
        }
        this.destroy(refused.into_iter().flatten());
        this.pass_if_due();
    }

    #[cold]
    fn put_slotless(&self, item: M::Item) {
        self.counters.slotless_returns.add(1);
        if let Err(item) = self.depot.put_one(item) {
            self.destroy(Some(item));
        }
    }

    /// Ends a guard by destroying its object.
    #[cold]
    pub(crate) fn discard(&self, item: M::Item) {
        self.counters.discarded.add(1);
        self.destroy(Some(item));
    }

    /// Ends a guard by letting its object go.
    pub(crate) fn count_detach(&self) {
        self.counters.detached.add(1);
        self.counters.existing.fetch_sub(1, Ordering::Relaxed);
    }

    // === destroy ===

    /// Destroys every object in `items`, even if some `destroy` calls panic;
    /// returns how many, and the first panic.
    pub(crate) fn destroy_quiet(
        &self,
        items: impl IntoIterator<Item = M::Item>,
    ) -> (usize, Option<Panic>) {
        let mut n = 0;
        let mut first_panic = None;
        for item in items {
            let result = catch_unwind(AssertUnwindSafe(|| self.manager.destroy(item)));
            n += 1;
            self.counters.destroyed.add(1);
            // Only now is the resource gone: a `create` under `max_live` may
            // take its place.
            self.counters.existing.fetch_sub(1, Ordering::Relaxed);
            if let Err(panic) = result {
                first_panic.get_or_insert(panic);
            }
        }
        (n, first_panic)
    }

    /// [`destroy_quiet`](Self::destroy_quiet), then resumes the first panic
    /// unless this thread is already unwinding.
    pub(crate) fn destroy(&self, items: impl IntoIterator<Item = M::Item>) -> usize {
        let (n, panic) = self.destroy_quiet(items);
        if let Some(panic) = panic {
            if !std::thread::panicking() {
                resume_unwind(panic);
            }
        }
        n
    }

    // === reclaim ===

    /// Destroys the depot's objects that sat unused since the previous trim
    /// (never below `min_idle`).
    pub(crate) fn trim(&self) -> usize {
        let n = self.destroy(self.depot.trim(self.config.min_idle).into_iter().flatten());
        self.reclaim.reclaimed.add(n as u64);
        n
    }

    /// Destroys the depot's objects and every thread cache it can take.
    pub(crate) fn drain(&self) -> usize {
        let caches = self.take_caches_remote();
        let depot = self.depot.take_down_to(0);
        self.destroy(caches.into_iter().chain(depot).flatten())
    }

    /// Purges the depot's not-yet-purged objects, oldest first, up to
    /// `limit`. Returns how many were purged.
    pub(crate) fn purge(&self, limit: usize) -> usize {
        self.purge_batches(self.depot.take_unpurged(limit))
    }

    /// Purges `batches` (taken from the depot) outside every lock and hands
    /// them back; destroys any object whose purge panicked, and what no
    /// longer fits. Returns how many were purged.
    pub(crate) fn purge_batches(&self, mut batches: Vec<Vec<M::Item>>) -> usize {
        if batches.is_empty() {
            return 0;
        }
        let mut purged = 0;
        let mut broken = Vec::new();
        let mut first_panic = None;
        for batch in &mut batches {
            let mut i = 0;
            while i < batch.len() {
                let item = &mut batch[i];
                match catch_unwind(AssertUnwindSafe(|| self.manager.purge(item))) {
                    Ok(()) => {
                        purged += 1;
                        i += 1;
                    }
                    Err(panic) => {
                        // Half-purged: not fit for reuse.
                        broken.push(batch.swap_remove(i));
                        first_panic.get_or_insert(panic);
                    }
                }
            }
        }
        let refused = self.depot.restore_purged(batches);
        let (_, destroy_panic) =
            self.destroy_quiet(broken.into_iter().chain(refused.into_iter().flatten()));
        if let Some(panic) = first_panic.or(destroy_panic) {
            if !std::thread::panicking() {
                resume_unwind(panic);
            }
        }
        purged
    }

    /// Fills the depot up to `min_idle` with new objects. Returns how many
    /// were created.
    pub(crate) fn prefill(&self) -> Result<usize, Error<M::Error>> {
        let mut created = 0;
        while self.depot.counts().idle < self.config.min_idle {
            let item = self.create()?;
            created += 1;
            if let Err(item) = self.depot.put_one(item) {
                self.destroy(Some(item));
                break;
            }
        }
        Ok(created)
    }

    // === owned guards (lifetime.rs) ===

    /// Objects out of the pool, never less than the true figure: every end
    /// count is read before every start count, and the `Acquire` fence
    /// between pairs with the `Release` of each count, so a start that
    /// happened before an end seen here is seen too. Zero means every
    /// object handed out before the call has been given back, and every
    /// end seen has stopped counting.
    pub(crate) fn live_bound(&self) -> u64 {
        let c = &*self.counters;
        let mut ends = c.discarded.read() + c.detached.read() + c.slotless_returns.read();
        self.slots.for_each(|_, slot| ends += slot.counts().1);
        fence(Ordering::Acquire);
        let mut starts = c.slotless_gets.read();
        self.slots.for_each(|_, slot| starts += slot.counts().0);
        // More ends than starts would be a counting bug: then keep the pool
        // (a leak) rather than free it under a guard.
        starts.checked_sub(ends).unwrap_or(u64::MAX)
    }

    // === stats ===

    pub(crate) fn stats(&self) -> Stats {
        let c = &*self.counters;
        // Read the subtrahends before what they are subtracted from, so a
        // concurrent destroy cannot make a difference negative.
        let destroyed = c.destroyed.read();
        let detached = c.detached.read();
        let discarded = c.discarded.read();
        let mut returns = c.slotless_returns.read();
        let mut gets = c.slotless_gets.read();
        self.slots.for_each(|_, slot| {
            let (g, r) = slot.counts();
            gets += g;
            returns += r;
        });
        let misses = c.misses.read();
        let created = c.created.read();
        let depot = self.depot.counts();
        let live = gets.saturating_sub(returns + discarded + detached);
        let existing = created.saturating_sub(destroyed + detached);
        let r = &*self.reclaim;
        Stats {
            reclaimed: r.reclaimed.read(),
            reclaim_passes: r.passes.read(),
            pressure_medium: r.pressure_medium.read(),
            pressure_critical: r.pressure_critical.read(),
            caches_taken: r.caches_taken.read(),
            working_set: existing.saturating_sub(depot.idle_unused as u64),
            created,
            destroyed,
            detached,
            live,
            idle: existing.saturating_sub(live),
            idle_depot: depot.idle as u64,
            idle_purged: depot.purged as u64,
            hits: gets.saturating_sub(misses),
            misses,
            depot_exchanges: depot.exchanges,
        }
    }
}

impl<M: Manage> ThreadExit for Shared<M> {
    fn thread_exit(&self, tid: usize) {
        let Some(slot) = self.slots.get(tid) else {
            return;
        };
        // SAFETY: we run on thread `tid`, in its TLS destructor, before its id
        // is freed.
        let refused = self.donate_all(unsafe { LocalSlot::new(slot) }.release());
        // A panic cannot leave a TLS destructor (it would abort); the objects
        // are destroyed and counted all the same.
        let _ = self.destroy_quiet(refused.into_iter().flatten());
    }
}

#[cfg(not(loom))]
impl<M: Manage> crate::reclaim::reclaimer::Background for Shared<M> {
    fn background_tick(&self) -> Option<std::time::Duration> {
        Shared::background_tick(self)
    }

    fn background_pressure(&self, level: crate::pressure::Level) {
        self.pressure(level);
    }
}

impl<M: Manage> Drop for Shared<M> {
    fn drop(&mut self) {
        // Every thread cache, claimed or not: no thread can be using this
        // pool any more, and a thread that exits later finds its `Weak` dead
        // and leaves its (now freed) slot alone.
        let mut items = Vec::new();
        self.slots.for_each_mut(|slot| {
            for batch in slot.take_all_exclusive() {
                items.extend(batch);
            }
        });
        let depot = self.depot.take_down_to(0);
        self.destroy(items.into_iter().chain(depot.into_iter().flatten()));
    }
}
