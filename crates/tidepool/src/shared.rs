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
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::SharedCounter;
use crate::{Config, Error, Manage, Stats};

type Panic = Box<dyn Any + Send>;

/// Everything a pool's threads share. [`Pool`](crate::Pool) is an `Arc` of
/// this; thread caches point back at it weakly for the thread-exit hand-off.
pub(crate) struct Shared<M: Manage> {
    pub(crate) manager: M,
    pub(crate) config: Config,
    slots: SlotTable<M::Item>,
    depot: Depot<M::Item>,
    /// Slow-path counters, on their own cache lines: they change only when
    /// objects are created or destroyed, never on a cache hit.
    counters: CachePadded<Counters>,
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
    pub(crate) fn new(manager: M, config: Config) -> Self {
        Self {
            depot: Depot::new(config.batch_size, config.max_idle),
            slots: SlotTable::new(),
            counters: CachePadded::default(),
            manager,
            config,
        }
    }

    /// This thread's cache, if it already has one in this pool.
    #[inline(always)]
    fn local(&self) -> Option<LocalSlot<'_, M::Item>> {
        let tid = thread::current_tid()?;
        LocalSlot::mine(self.slots.get(tid)?)
    }

    /// This thread's cache, claimed now if need be. `None` only while the
    /// thread's thread-locals are being destroyed.
    #[cold]
    fn claim_local(this: &Arc<Self>) -> Option<LocalSlot<'_, M::Item>> {
        let tid = thread::current_tid_or_register()?;
        let slot = this.slots.get_or_alloc(tid);
        if let Some(mine) = LocalSlot::mine(slot) {
            return Some(mine);
        }
        let me: Weak<dyn ThreadExit> = Arc::downgrade(this) as Weak<Self>;
        if !thread::watch(me) {
            return None;
        }
        Some(LocalSlot::claim(slot, this.config.batch_size))
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
        let Some(slot) = Self::claim_local(this) else {
            return this.get_slotless();
        };
        if let Some(item) = slot.pop() {
            return Ok(item);
        }
        if slot.with_cache(|cache| this.depot.refill(cache.loaded_mut())) {
            if let Some(item) = slot.pop() {
                return Ok(item);
            }
        }
        let item = this.create()?;
        slot.count_get();
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

    /// Runs the manager's `recycle`; destroys the object if it says no or
    /// panics (and then resumes the panic).
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
    /// depot (destroying it if the depot is at `max_idle`), then cache `item`.
    #[cold]
    #[inline(never)]
    fn put_slow(this: &Arc<Self>, item: M::Item) {
        let Some(slot) = Self::claim_local(this) else {
            return this.put_slotless(item);
        };
        let batch_size = this.config.batch_size;
        let Err(item) = slot.push(item, batch_size) else {
            return;
        };
        let full = slot.with_cache(|cache| cache.replace_spare(Vec::new()));
        let (empty, refused) = match this.depot.donate(full) {
            Ok(empty) => (empty, None),
            Err(refused) => (Vec::new(), Some(refused)),
        };
        // Put the cache back in order before any manager code runs.
        slot.with_cache(|cache| {
            cache.replace_spare(empty);
            cache.reserve(batch_size);
        });
        if let Err(item) = slot.push(item, batch_size) {
            // Not reached: the spare batch was just emptied and no user code
            // ran since. Stay correct all the same.
            this.put_slotless(item);
        }
        if let Some(refused) = refused {
            this.destroy(refused);
        }
    }

    #[cold]
    fn put_slotless(&self, item: M::Item) {
        self.counters.slotless_returns.add(1);
        if let Err(item) = self.depot.put_one(item) {
            self.destroy(Some(item));
        }
    }

    /// Ends a guard by destroying its object.
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
    fn destroy_quiet(&self, items: impl IntoIterator<Item = M::Item>) -> (usize, Option<Panic>) {
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
    fn destroy(&self, items: impl IntoIterator<Item = M::Item>) -> usize {
        let (n, panic) = self.destroy_quiet(items);
        if let Some(panic) = panic {
            if !std::thread::panicking() {
                resume_unwind(panic);
            }
        }
        n
    }

    // === reclaim ===

    /// Destroys the depot's batches that sat unused since the previous trim.
    pub(crate) fn trim(&self) -> usize {
        self.destroy(self.depot.trim().into_iter().flatten())
    }

    /// Destroys the depot's batches and this thread's cache.
    pub(crate) fn drain(&self) -> usize {
        let mut mine = Vec::new();
        if let Some(slot) = self.local() {
            slot.with_cache(|cache| cache.drain_into(&mut mine));
        }
        let depot = self.depot.take_all();
        self.destroy(mine.into_iter().chain(depot.into_iter().flatten()))
    }

    /// Purges the depot's not-yet-purged objects, oldest first, up to
    /// `limit`. Returns how many were purged.
    pub(crate) fn purge(&self, limit: usize) -> usize {
        let mut batches = self.depot.take_unpurged(limit);
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
        self.slots.for_each(|slot| {
            let (g, r) = slot.counts();
            gets += g;
            returns += r;
        });
        let misses = c.misses.read();
        let created = c.created.read();
        let depot = self.depot.counts();
        let live = gets.saturating_sub(returns + discarded + detached);
        let existing = created.saturating_sub(destroyed + detached);
        Stats {
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
        // is freed; if the slot is claimed, this thread claimed it.
        let Some(mine) = (unsafe { LocalSlot::exiting_owner(slot) }) else {
            return;
        };
        let refused: Vec<Vec<M::Item>> = mine
            .release()
            .into_iter()
            .filter(|batch| !batch.is_empty())
            .filter_map(|batch| self.depot.donate(batch).err())
            .collect();
        // A panic cannot leave a TLS destructor (it would abort); the objects
        // are destroyed and counted all the same.
        let _ = self.destroy_quiet(refused.into_iter().flatten());
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
        let depot = self.depot.take_all();
        self.destroy(items.into_iter().chain(depot.into_iter().flatten()));
    }
}
