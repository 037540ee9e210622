//! The state all threads share, and the get and put paths through it.
//!
//! ```text
//!  get ─► this thread's LocalSlot ──hit──► object
//!            │ both batches empty (cold)
//!            ▼
//!         depot.take_full ──► a full batch ──► object   (room reserved
//!            │ depot empty                               outside the bracket)
//!            ▼
//!         manager.create, or create_batch for a burst
//!         (max_live places reserved first)
//! ```
//!
//! `put` runs the other way: recycle, push onto the local cache, donate the
//! spare batch when both are full, destroy the batch if the depot is at
//! `max_idle`. No manager method runs while a cache's access bracket is open
//! or a lock is held, and nothing allocates inside a bracket, so managers
//! may re-enter the pool.
//!
//! The files of this folder:
//!
//! * this one: the shared state, `get`, `put`, `stats`, thread exit, drop;
//! * `destroy.rs`: the one path by which objects end, with its accounting;
//! * `pass.rs`: everything reclaim does to this pool (interval passes,
//!   pressure, holds, taking caches back, trim, drain, purge), and the tick
//!   the process-wide reclaimer calls.

mod destroy;
mod pass;
pub(crate) mod teardown;

use std::mem::ManuallyDrop;
use std::sync::{Arc, Weak};

use crossbeam_utils::CachePadded;

use crate::cache::{thread, LocalSlot, SlotTable, ThreadExit};
use crate::callbacks::{self, Callbacks, Caught, PanicRecord, Site};
use crate::depot::Depot;
use crate::reclaim::Clock;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::SharedCounter;
use crate::{Config, Error, Manage, Stats};
use teardown::Teardown;

pub(crate) use pass::ReclaimShared;

/// This thread's cache, and the batches of a flush request the depot
/// refused.
type Claimed<'a, T> = (LocalSlot<'a, T>, Vec<Vec<T>>);

/// Everything a pool's threads share. [`Pool`](crate::Pool) is an `Arc` of
/// this; thread caches point back at it weakly for the thread-exit hand-off.
pub(crate) struct Shared<M: Manage> {
    /// Dropped by hand (and contained) in `Drop`: its `Drop` is user code.
    manager: ManuallyDrop<M>,
    pub(crate) config: Config,
    pub(crate) slots: SlotTable<M::Item>,
    pub(crate) depot: Depot<M::Item>,
    /// Batches the pool decided to destroy, run in chunks by a bounded
    /// number of threads (`teardown.rs`).
    pub(crate) teardown: Teardown<M::Item>,
    /// Slow-path counters, on their own cache lines: they change only when
    /// objects are created or destroyed, never on a cache hit.
    counters: CachePadded<Counters>,
    /// Reclaim intervals, pressure holds and their counts (`pass.rs`).
    pub(crate) reclaim: CachePadded<ReclaimShared>,
    /// Panics caught from the manager's callbacks.
    panics: PanicRecord,
}

/// Pool-wide counts. Per-thread `gets`/`returns` live in the slots.
///
/// Invariants, exact whenever no thread is inside the pool:
/// * `existing == created - destroyed - detached`
/// * `live == gets - returns - discarded - detached`
///   (`gets`, `returns` summed over every slot plus the slot-less ones)
/// * `live + idle + destroying == existing`,
///   `idle == depot + sum(cache lengths)`,
///   `destroying == teardown.destroying()` (queued or being destroyed)
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
    /// exactly under contention, released after `destroy` returns (or
    /// unwinds).
    existing: AtomicUsize,
}

impl<M: Manage> Shared<M> {
    pub(crate) fn new(manager: M, config: Config, clock: Arc<dyn Clock>) -> Self {
        Self {
            depot: Depot::new(config.batch_size, config.max_idle),
            teardown: Teardown::new(teardown_limit(&config), config.teardown_chunk),
            slots: SlotTable::new(),
            counters: CachePadded::default(),
            reclaim: CachePadded::new(ReclaimShared::new(clock, config.reclaim_interval)),
            panics: PanicRecord::new::<M>(),
            manager: ManuallyDrop::new(manager),
            config,
        }
    }

    /// The manager.
    pub(crate) fn manager(&self) -> &M {
        &self.manager
    }

    /// The manager's callbacks (see `callbacks.rs`).
    #[inline]
    fn callbacks(&self) -> Callbacks<'_, M> {
        Callbacks::new(&self.manager)
    }

    /// Objects in existence, live or idle.
    pub(crate) fn existing(&self) -> u64 {
        self.counters.existing.load(Ordering::Relaxed) as u64
    }

    /// Settles the panics one operation caught (see `callbacks.rs`).
    pub(crate) fn settle(&self, caught: Caught, site: Site) {
        caught.settle(site, &self.panics);
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
    /// if need be, and the batches of a flush request the depot refused
    /// (for the caller to destroy once it is safe to). `None` while the
    /// thread's thread-locals are being destroyed.
    #[cold]
    fn claim_local(this: &Arc<Self>) -> Option<Claimed<'_, M::Item>> {
        // Lifts a critical-pressure hold that is over (a clock read only
        // while one is on).
        this.holding();
        let tid = thread::current_tid_or_register()?;
        let slot = this.slots.get_or_alloc(tid);
        // SAFETY: `tid` is this thread's own id, not released (we are not in
        // its exit: `current_tid_or_register` returned it).
        let local = unsafe { LocalSlot::new(slot) };
        if local.is_active() {
            return Some((local, Vec::new()));
        }
        let me: Weak<dyn ThreadExit> = Arc::downgrade(this) as Weak<Self>;
        if !thread::watch(me) {
            return None;
        }
        let flushed = local.claim(this.config.batch_size);
        let refused = this.donate_all(flushed);
        Some((local, refused))
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
        let batch_size = this.config.batch_size;
        let item = loop {
            let Some((slot, refused)) = Self::claim_local(this) else {
                return this.get_slotless();
            };
            // Nothing in hand yet: a panic here may reach the caller.
            this.destroy_batches(refused, Site::Caller);
            if let Some(item) = slot.pop() {
                break item;
            }
            if !slot.is_active() {
                continue; // revoked meanwhile: claim again
            }
            if let Some(mut batch) = this.depot.take_full() {
                // Room for a whole batch, made here, outside the bracket (a
                // batch split by reclaim may be short of it).
                batch.reserve_exact(batch_size.saturating_sub(batch.len()));
                let item = batch.pop().expect("full batches are never empty");
                match slot.install_loaded(batch) {
                    Ok(empty) => this.depot.keep_empty(empty),
                    // Revoked meanwhile: the rest goes back.
                    Err(batch) => {
                        let refused = this.donate_all(vec![batch]);
                        // `item` is in hand: contained.
                        this.destroy_batches(refused, Site::Upkeep);
                    }
                }
                slot.count_get();
                break item;
            }
            let burst = this.config.burst;
            if burst == 1 {
                let item = this.create()?;
                slot.count_get();
                break item;
            }
            let mut made = this.create_burst(burst)?;
            let item = made.pop().expect("a burst is never empty");
            if !made.is_empty() {
                // The rest of the burst becomes this cache's loaded batch
                // (room for a whole batch made here, outside the bracket).
                made.reserve_exact(batch_size - made.len());
                if let Err(made) = slot.install_loaded(made) {
                    // Revoked meanwhile: the rest goes to the depot.
                    let refused = this.donate_all(vec![made]);
                    // `item` is in hand: contained.
                    this.destroy_batches(refused, Site::Upkeep);
                }
            }
            slot.count_get();
            break item;
        };
        this.pass_lazily();
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

    /// Creates one object, within `max_live`.
    #[cold]
    fn create(&self) -> Result<M::Item, Error<M::Error>> {
        let reservation = self.reserve(1)?;
        let item = self.callbacks().create().map_err(Error::Create)?;
        reservation.fill(1);
        self.count_created(1);
        Ok(item)
    }

    /// Creates between 1 and `want` (at least 2) objects with one
    /// `create_batch` call (a refill's burst), within `max_live`.
    #[cold]
    fn create_burst(&self, want: usize) -> Result<Vec<M::Item>, Error<M::Error>> {
        let reservation = self.reserve(want)?;
        let n = reservation.1;
        let mut items = if n == 1 {
            vec![self.callbacks().create().map_err(Error::Create)?]
        } else {
            self.callbacks().create_batch(n).map_err(Error::Create)?
        };
        if items.is_empty() {
            // Outside the contract (`Ok` is never empty): one the ordinary
            // way.
            items.push(self.callbacks().create().map_err(Error::Create)?);
        }
        // Outside the contract too: more than asked. Counted as made, then
        // destroyed, so `max_live` holds.
        let surplus = items.split_off(items.len().min(n));
        reservation.fill(items.len());
        if !surplus.is_empty() {
            self.counters
                .existing
                .fetch_add(surplus.len(), Ordering::Relaxed);
            self.counters.created.add(surplus.len() as u64);
            self.destroy_batches(vec![surplus], Site::Upkeep);
        }
        self.count_created(items.len());
        Ok(items)
    }

    /// Reserves between 1 and `want` places under `max_live` (exact under
    /// contention: only the room left), given back by the [`Reservation`]
    /// unless filled.
    fn reserve(&self, want: usize) -> Result<Reservation<'_>, Error<M::Error>> {
        let existing = &self.counters.existing;
        let Some(limit) = self.config.max_live else {
            existing.fetch_add(want, Ordering::Relaxed);
            return Ok(Reservation(existing, want));
        };
        loop {
            if let Ok(now) = existing.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now < limit).then(|| now + want.min(limit - now))
            }) {
                return Ok(Reservation(existing, want.min(limit - now)));
            }
            // At the limit: objects on their way out still hold places.
            // Finish them before failing (wasmtime's pooling allocator
            // flushes its decommit queue the same way).
            if self.teardown.destroying() == 0 {
                return Err(Error::Exhausted { limit });
            }
            if self.flush_teardown(Site::Caller) == 0 {
                // Other threads hold the last of them: let them finish.
                crate::sync::yield_now();
            }
        }
    }

    fn count_created(&self, n: usize) {
        self.counters.created.add(n as u64);
        self.counters.misses.add(1);
        // The pool may have just gained its first object beyond its
        // reserve: the reclaimer must know (its next deadline may be ours).
        self.arm_background();
    }

    // === put ===

    #[inline]
    pub(crate) fn put(this: &Arc<Self>, item: M::Item) {
        if std::thread::panicking() {
            return this.discard(item);
        }
        if let Some(slot) = this.local() {
            let Some(item) = this.recycle(item, Site::Caller) else {
                return;
            };
            if let Err(item) = slot.push(item, this.config.batch_size) {
                Self::put_slow(this, item, Site::Caller);
            }
            return;
        }
        Self::put_cold(this, item);
    }

    /// No cache yet, or this thread is exiting (its thread-locals are being
    /// destroyed, a destructor context: nothing may unwind).
    #[cold]
    #[inline(never)]
    fn put_cold(this: &Arc<Self>, item: M::Item) {
        let site = match thread::current_tid_or_register() {
            Some(_) => Site::Caller,
            None => Site::ThreadExit,
        };
        if let Some(item) = this.recycle(item, site) {
            Self::put_slow(this, item, site);
        }
    }

    /// Runs the manager's `recycle`; destroys the object if it says no, or
    /// if it panics (the panic then continues at [`Site::Caller`]).
    #[inline]
    fn recycle(&self, mut item: M::Item, site: Site) -> Option<M::Item> {
        let mut caught = Caught::default();
        match self.callbacks().recycle(&mut item, &mut caught) {
            Some(true) => Some(item),
            Some(false) => {
                self.discard(item);
                None
            }
            None => {
                self.counters.discarded.add(1);
                self.destroy_all([vec![item]], &mut caught);
                self.settle(caught, site);
                None
            }
        }
    }

    /// Both batches full, or no cache yet: donate the spare batch to the
    /// depot (destroying it if the depot is at its cap), then cache `item`.
    #[cold]
    #[inline(never)]
    fn put_slow(this: &Arc<Self>, mut item: M::Item, site: Site) {
        let batch_size = this.config.batch_size;
        // Batches the depot refused: destroyed once `item` is safely cached,
        // so a panicking `destroy` cannot lose it.
        let mut refused = Vec::new();
        loop {
            let Some((slot, flushed)) = Self::claim_local(this) else {
                this.put_slotless(item, site);
                break;
            };
            refused.extend(flushed);
            item = match slot.push(item, batch_size) {
                Ok(()) => break,
                Err(back) => back,
            };
            // Both batches full (or revoked meanwhile: claim again).
            let Ok(full) = slot.take_spare() else {
                continue;
            };
            let mut empty = match this.depot.donate(full) {
                Ok(empty) => empty,
                Err(full) => {
                    refused.push(full);
                    Vec::new()
                }
            };
            // The new spare gets its room here, outside the bracket.
            empty.reserve_exact(batch_size);
            // If the cache was revoked meanwhile, `empty` holds nothing to
            // lose.
            let _ = slot.install_spare(empty);
        }
        // Past `max_idle`: to the destroy queue, one chunk of it here.
        this.tear_down(refused, 1, site);
        this.pass_lazily();
    }

    #[cold]
    fn put_slotless(&self, item: M::Item, site: Site) {
        self.counters.slotless_returns.add(1);
        if let Err(item) = self.depot.put_one(item) {
            self.tear_down(vec![vec![item]], 1, site);
        }
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
        let destroying = self.teardown.destroying() as u64;
        let r = &*self.reclaim;
        Stats {
            reclaimed: r.reclaimed.read(),
            reclaim_passes: r.passes.read(),
            pressure_medium: r.pressure_medium.read(),
            pressure_critical: r.pressure_critical.read(),
            caches_taken: r.caches_taken.read(),
            working_set: existing.saturating_sub(depot.idle_unused as u64),
            callback_panics: self.panics.count(),
            created,
            destroyed,
            detached,
            live,
            idle: existing.saturating_sub(live + destroying),
            destroying,
            idle_depot: depot.idle as u64,
            idle_purged: depot.purged as u64,
            hits: gets.saturating_sub(misses),
            misses,
            depot_exchanges: depot.exchanges,
        }
    }
}

/// Places reserved under `max_live` for objects being created; those not
/// filled are given back when it drops (on error and on panic too).
struct Reservation<'a>(&'a AtomicUsize, usize);

impl Reservation<'_> {
    /// `made` of the places hold objects now; the rest are given back.
    fn fill(mut self, made: usize) {
        self.1 -= made.min(self.1);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.1 > 0 {
            self.0.fetch_sub(self.1, Ordering::Relaxed);
        }
    }
}

impl<M: Manage> Shared<M> {
    /// Hands this thread's cache to the depot now, as its exit would, and
    /// gives the slot up (the next operation re-claims it). Returns how
    /// many objects left the cache; those the full depot refused are
    /// destroyed (a panic there reaches the caller, see [`Site::Caller`]).
    pub(crate) fn release_local(&self) -> usize {
        let Some(slot) = self.local() else {
            return 0;
        };
        // No access bracket is open on this thread: brackets never run user
        // code, so this cannot be called from inside one.
        let batches = slot.release();
        let n = batches.iter().map(Vec::len).sum();
        let refused = self.donate_all(batches);
        self.destroy_batches(refused, Site::Caller);
        n
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
        // A TLS destructor: nothing may unwind. One chunk at most here:
        // threads exiting en masse must not all tear down at once.
        self.tear_down(refused, 1, Site::ThreadExit);
    }
}

impl<M: Manage> Drop for Shared<M> {
    fn drop(&mut self) {
        // Every thread cache, claimed or not: no thread can be using this
        // pool any more, and a thread that exits later finds its `Weak` dead
        // and leaves its (now freed) slot alone.
        let mut batches = Vec::new();
        self.slots.for_each_mut(|slot| {
            batches.extend(slot.take_all_exclusive());
        });
        batches.extend(self.depot.take_down_to(0));
        // A destructor (maybe a thread-local one): nothing may unwind. One
        // chunk here; the rest goes to the reclaimer with the manager.
        self.tear_down(batches, 1, Site::PoolDrop);
        let rest = self.teardown.take_all();
        #[cfg(not(loom))]
        if !rest.is_empty() && self.config.background {
            // SAFETY: the manager is taken once, here, and this drop
            // touches it no more (it skips `drop_manager` below).
            let manager = unsafe { ManuallyDrop::take(&mut self.manager) };
            crate::reclaim::scheduler::adopt(Box::new(move || {
                callbacks::finish_orphan(manager, rest);
            }));
            return;
        }
        // No reclaimer to hand it to: finished here.
        self.destroy_batches(rest, Site::PoolDrop);
        callbacks::drop_manager(&mut self.manager, Site::PoolDrop, &self.panics);
    }
}

/// Threads that may run a pool's destroy queue at once:
/// `min(ncpus, teardown_threads)`.
fn teardown_limit(config: &Config) -> usize {
    #[cfg(not(loom))]
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    #[cfg(loom)]
    let cpus = usize::MAX;
    config.teardown_threads.min(cpus)
}
