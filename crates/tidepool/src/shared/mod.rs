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
//!            │ at max_live
//!            ▼
//!         recycle before failing (at_limit.rs): depot, steal another
//!         thread's cache, the destroy queue; then Exhausted
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
//! * this one: the shared state, `get`, `stats`, thread exit, drop;
//! * `head.rs`: the pool's head, what every get and put reads, apart from
//!   the rest (the handle points at it);
//! * `arena.rs`: the dense store the heads live in;
//! * `put.rs`: the put path, every case of it, with a map at its top;
//! * `destroy.rs`: the one path by which objects end, with its accounting;
//! * `pass.rs`: everything reclaim does to this pool (interval passes,
//!   pressure, holds, taking caches back, reclaim_unused, drain, purge), and the tick
//!   the process-wide reclaimer calls;
//! * `at_limit.rs`: what `get` does at `max_live` before it fails (recycle:
//!   depot, other threads' caches, pending destroys), and `get_timeout`;
//! * `waiters.rs`: the FIFO queue of `get_timeout` callers;
//! * `places.rs`: the `max_live` budget, lent to threads in chunks.

pub(crate) mod arena;
mod at_limit;
mod destroy;
pub(crate) mod head;
pub(crate) mod lifetime;
mod pass;
pub(crate) mod places;
mod put;
pub(crate) mod teardown;
pub(crate) mod waiters;

use std::mem::ManuallyDrop;
use std::sync::{Arc, Weak};

use crossbeam_utils::CachePadded;

use crate::cache::credit::Credit;
use crate::cache::{thread, LocalSlot, SlotTable, ThreadExit, Walk};
use crate::callbacks::{self, Callbacks, Caught, PanicRecord, Site};
use crate::depot::Depot;
use crate::reclaim::Clock;
use crate::sync::atomic::{fence, Ordering};
use crate::sync::SharedCounter;
use crate::{Config, ConfigError, Error, Manage, Stats};
use head::{Head, HeadCell, HeadPtr};
use lifetime::Life;
use places::Places;
use teardown::Teardown;
use waiters::Handoff;

pub(crate) use put::PutRest;

pub(crate) use pass::ReclaimShared;

/// This thread's cache, as [`Shared::claim_local`] returns it.
struct Claimed<'a, T> {
    slot: LocalSlot<'a, T>,
    /// The batches of a flush or trim request the depot refused.
    refused: Vec<Vec<T>>,
    /// Claimed just now (first use, or after a revocation), not found
    /// active.
    fresh: bool,
}

/// Everything a pool's threads share. [`Pool`](crate::Pool) is an `Arc` of
/// this and a pointer to its head; thread caches point back at it weakly for the thread-exit hand-off.
///
/// What every get and put reads is not here but in the pool's [`Head`],
/// which this owns and the handle points at: with thousands of pools,
/// the heads sit side by side in few pages, and a get and a put by a
/// thread with no cache in the pool touch its head and the object, not
/// this (`implementation`, many pools per thread).
#[repr(C)]
pub(crate) struct Shared<M: Manage> {
    /// What every get and put reads, and all a slot-less get and put
    /// touch but the object (`head.rs`): in the heads' dense store, and
    /// reached by the handle without reading this.
    head: HeadCell<M::Item>,
    pub(crate) slots: SlotTable<M::Item>,
    /// Gets by threads with no cache here that had to create (or adopted):
    /// starts of [`live_bound`](Self::live_bound) like the slots' counts.
    /// Those the depot served, and every return by such a thread, are
    /// [`Head::lone`]'s.
    slotless: Slotless,
    pub(crate) config: Config,
    /// Dropped by hand (and contained) in `Drop`: its `Drop` is user code.
    manager: ManuallyDrop<M>,
    /// Batches the pool decided to destroy, run in chunks by a bounded
    /// number of threads (`teardown.rs`).
    pub(crate) teardown: Teardown<M::Item>,
    /// Panics caught from the manager's callbacks.
    panics: PanicRecord,
    /// The `max_live` budget (`places.rs`); `None` without a limit. Boxed:
    /// its shared line is cache-padded, and a pool without a limit (most)
    /// should not carry those lines in its own allocation.
    places: Option<Box<Places>>,
    // The cache-padded ones last: padding in the middle would grow the
    // pool.
    /// Slow-path counters, on their own cache lines: they change only when
    /// objects are created or destroyed, never on a cache hit.
    counters: CachePadded<Counters>,
    /// Reclaim intervals, pressure holds and their counts (`pass.rs`).
    pub(crate) reclaim: CachePadded<ReclaimShared>,
    /// How owned guards keep this alive past the handle (`shared/lifetime.rs`);
    /// read on every owned guard's end, so on a line of its own.
    pub(crate) life: CachePadded<Life>,
}

/// Gets that passed no thread cache and no depot.
#[derive(Default)]
struct Slotless {
    gets: SharedCounter,
}

/// Pool-wide counts. Per-thread `gets`/`returns`/`created`/`destroyed`
/// live in the slots; the slot-less threads' gets and returns in
/// [`Lone`](crate::depot::Lone) ([`Depot::lone_counts`]), but for the gets that created or
/// adopted, in [`Slotless`]; these are the slow-path counts.
///
/// Invariants, exact whenever no thread is inside the pool (each count
/// summed over every slot plus this):
/// * `existing == created - destroyed - detached <= max_live`
/// * `live == gets - returns - discarded - detached`
///   (`gets`, `returns` summed over every slot plus the slot-less ones,
///   plus `retired_gets`, `retired_returns`)
///
/// A slot freed at its thread's exit (`retire_local`)
/// leaves its counts in `created`, `destroyed`, `misses`,
/// `retired_gets` and `retired_returns`, moved there while no walk of
/// the slots runs, so a reader that walks them sees each count once.
/// * `live + idle + destroying == existing`,
///   `idle == depot + sum(cache lengths)`,
///   `destroying == teardown.destroying()` (queued or being destroyed)
#[derive(Default)]
struct Counters {
    created: SharedCounter,
    destroyed: SharedCounter,
    /// Gets (and prefills) that had to create: one per burst.
    misses: SharedCounter,
    detached: SharedCounter,
    /// Guards that ended by destroying their object (discard, refused by
    /// `recycle`, dropped while panicking).
    discarded: SharedCounter,
    /// Objects handed to waiters (each a get), and the part of them given
    /// straight from a guard's drop (each a return too).
    waiter_gets: SharedCounter,
    waiter_returns: SharedCounter,
    /// `try_get`s that found no idle object.
    empty_gets: SharedCounter,
    /// Objects made elsewhere and adopted (each also a create and a get).
    adopted: SharedCounter,
    /// The gets and returns of freed slots (`retire_local`).
    retired_gets: SharedCounter,
    retired_returns: SharedCounter,
    /// The part of them no reclaim pass saw while the slots lived
    /// (`Slot::unseen_by_pass`): to the passes, the use those threads made
    /// of the pool before they exited, not the exits themselves.
    retired_unseen: SharedCounter,
}

impl<M: Manage> Shared<M> {
    pub(crate) fn new(manager: M, config: Config, clock: Arc<dyn Clock>) -> Self {
        let slots = SlotTable::new();
        let depot = Depot::new(config.batch_size, config.max_idle).growing_to(config.max_batch);
        Self {
            head: HeadCell::new(Head::new(
                config.batch_size,
                slots.id(),
                config.background,
                config.max_live.is_some(),
                depot,
            )),
            teardown: Teardown::new(teardown_limit(&config), config.teardown_chunk),
            slots,
            counters: CachePadded::default(),
            reclaim: CachePadded::new(ReclaimShared::new(
                clock,
                config.reclaim_interval,
                config.purge_delay,
            )),
            life: CachePadded::default(),
            slotless: Slotless::default(),
            panics: PanicRecord::new::<M>(),
            places: config.max_live.map(|limit| {
                Box::new(Places::new(
                    limit,
                    Places::chunk_for(limit, config.batch_size),
                ))
            }),
            manager: ManuallyDrop::new(manager),
            config,
        }
    }

    /// The pool's head (`head.rs`), read through this state: for the
    /// paths that reach the rest of it anyway. The handle's get and put
    /// have the head's pointer at hand and pass it.
    #[inline(always)]
    pub(crate) fn head(&self) -> &Head<M::Item> {
        self.head.get()
    }

    /// A pointer to the head, for the pool's handle.
    pub(crate) fn head_ptr(&self) -> HeadPtr<M::Item> {
        self.head.ptr()
    }

    /// The batch size now (see `Head::batch`).
    #[inline(always)]
    pub(crate) fn batch(&self) -> usize {
        self.head().batch()
    }

    /// Sets the batch size (a reclaim pass, under the reclaim lock).
    pub(crate) fn set_batch(&self, n: usize) {
        self.head().set_batch(n);
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
        let (created, destroyed) = self.lifetime_counts();
        created.saturating_sub(destroyed + self.counters.detached.read())
    }

    /// Objects created and destroyed: every slot's share plus the
    /// slot-less one. Destroyed is read first, so that a concurrent
    /// destroy cannot make `created - destroyed` negative.
    pub(crate) fn lifetime_counts(&self) -> (u64, u64) {
        self.lifetime_counts_in(&self.slots.walk())
    }

    /// [`lifetime_counts`](Self::lifetime_counts) within `walk`: one walk for
    /// both sums, so no slot's counts move into the pool's between them.
    fn lifetime_counts_in(&self, walk: &Walk<'_, M::Item>) -> (u64, u64) {
        let mut destroyed = self.counters.destroyed.read();
        walk.for_each(|_, slot| destroyed += slot.lifetime_counts().1);
        let mut created = self.counters.created.read();
        walk.for_each(|_, slot| created += slot.lifetime_counts().0);
        (created, destroyed)
    }

    /// Frees this thread's slot at its exit (from the pools it lists and
    /// those a sweep dropped from its list), moving the slot's counts into
    /// the pool's; a slot some walk holds stays (`SlotTable::retire`).
    /// Then a thread that used thousands of pools leaves no memory in
    /// them. Runs on thread `tid`, in its exit (nothing up its stack holds
    /// a slot), with the slot unclaimed and its cache empty (released).
    fn retire_local(&self, tid: usize) {
        thread::forget(self.head().table_id);
        let c = &*self.counters;
        // SAFETY: `tid` is the calling thread's id (its exit runs on it),
        // which holds no reference to its slot past this call (nothing up
        // the stack of a thread exit does), and the remembered pair is
        // forgotten just above; the slot's cache is empty (released), so
        // freeing it drops no object.
        let _ = unsafe {
            self.slots.retire(tid, |slot| {
                debug_assert_eq!(slot.credit().held(), 0, "recalled first");
                let (gets, returns) = slot.counts();
                let (created, destroyed) = slot.lifetime_counts();
                c.retired_gets.add(gets);
                c.retired_returns.add(returns);
                c.retired_unseen.add(slot.unseen_by_pass());
                c.created.add(created);
                c.destroyed.add(destroyed);
                c.misses.add(slot.misses());
            })
        };
    }

    /// Settles the panics one operation caught (see `callbacks.rs`).
    pub(crate) fn settle(&self, caught: Caught, site: Site) {
        caught.settle(site, &self.panics);
    }

    /// This thread's slot, if it has one in this pool. The slot may not be
    /// claimed (or may have been revoked): every access checks.
    #[inline(always)]
    fn local(&self) -> Option<LocalSlot<'_, M::Item>> {
        // SAFETY: `table_id == slots.id()` (set from it in `new`, never
        // changed).
        let slot = unsafe { self.slots.local(self.head().table_id) }?;
        // SAFETY: the slot of this thread's own id, which it has not
        // released (`current_tid` returns `None`, and the remembered slot is
        // forgotten, from the moment it starts to).
        Some(unsafe { LocalSlot::new(slot) })
    }

    /// This thread's slot if it is the one remembered (the fast paths; see
    /// [`SlotTable::remembered`]); `head` is this pool's.
    #[inline(always)]
    fn local_remembered<'a>(&'a self, head: &Head<M::Item>) -> Option<LocalSlot<'a, M::Item>> {
        // SAFETY: as in `local` (`head.table_id == slots.id()`).
        let slot = unsafe { self.slots.remembered(head.table_id) }?;
        // SAFETY: the slot of this thread's own id, which it has not
        // released (`current_tid` returns `None`, and the remembered slot is
        // forgotten, from the moment it starts to).
        Some(unsafe { LocalSlot::new(slot) })
    }

    /// This thread's cache, claimed (or re-claimed after a revocation) now
    /// if need be, and the batches of a flush or trim request the depot
    /// refused (for the caller to destroy once it is safe to). `None` while
    /// the thread's thread-locals are being destroyed, or for an id past
    /// every table's (`SlotTable::covers`): the slot-less path then.
    #[cold]
    fn claim_local(this: &Arc<Self>) -> Option<Claimed<'_, M::Item>> {
        let tid = thread::current_tid_or_register()?;
        if !SlotTable::<M::Item>::covers(tid) {
            return None;
        }
        // SAFETY: `tid` is this thread's own id, not released (we are not in
        // its exit: `current_tid_or_register` returned it), so only this
        // thread frees the slot, at its exit.
        let found = unsafe { this.slots.get(tid) }.map(|slot| unsafe { LocalSlot::new(slot) });
        // A claimed cache, or a re-claim (after the reclaimer took the
        // cache back, or a `trim_local`), is already watched: no list work,
        // however many pools this thread uses. A new cache must be admitted
        // first (at most `thread::MAX_CACHES` per thread); refused, this get
        // or put takes the slot-less path at once, touching nothing of the
        // pool but the depot, and no slot is allocated for it.
        let admitted = found.as_ref().is_some_and(|local| local.is_watched())
            || (!thread::refuse_cheaply() && thread::watch(|| Arc::downgrade(this) as Weak<Self>));
        if !admitted {
            return None;
        }
        // Lifts a critical-pressure hold that is over (a clock read only
        // while one is on).
        this.holding();
        let local = match found {
            Some(local) if local.is_active() => {
                return Some(Claimed {
                    slot: local,
                    refused: Vec::new(),
                    fresh: false,
                });
            }
            Some(local) if local.is_watched() => local,
            _ => {
                // SAFETY: as above.
                let local = unsafe { LocalSlot::new(this.slots.get_or_alloc(tid)) };
                // Only this thread sets its bit, after its slot exists (see
                // `slotted`); it reads its own write back.
                this.head()
                    .slotted
                    .fetch_or(thread::slot_bit(tid), Ordering::Relaxed);
                local.set_watched(true);
                local
            }
        };
        let batch = this.batch();
        let (flushed, trimmed) = local.claim(batch);
        let mut refused = if !flushed.is_empty() && this.drains_late_flushes() {
            // Busy when a critical signal drained the pool (its owner was
            // inside an access, so it was asked to flush): drained now, as
            // the other caches were then. Destroyed by our caller, outside
            // every lock.
            this.reclaim
                .reclaimed
                .add(flushed.iter().map(|b| b.len() as u64).sum());
            flushed
        } else {
            this.donate_all(flushed)
        };
        if !trimmed.is_empty() {
            refused.extend(this.donate_trimmed(trimmed, batch));
        }
        Some(Claimed {
            slot: local,
            refused,
            fresh: true,
        })
    }

    /// Gives the objects a busy cache did not need through two periods (a
    /// trim, `Slot::request_trim`) to the depot, in batches of at most
    /// `batch`, as new idle objects: the depot reclaims them once they sit
    /// unused there through its window, like any other. Returns the batches
    /// the depot refused.
    #[cold]
    fn donate_trimmed(&self, mut trimmed: Vec<M::Item>, batch: usize) -> Vec<Vec<M::Item>> {
        self.reclaim.trimmed.add(trimmed.len() as u64);
        let mut batches = Vec::new();
        while trimmed.len() > batch {
            let rest = trimmed.split_off(batch);
            batches.push(std::mem::replace(&mut trimmed, rest));
        }
        batches.push(trimmed);
        self.donate_all(batches)
    }

    /// Gives the batches of thread caches that sat untouched through the
    /// interval that just ended to the depot as idle ones
    /// ([`Depot::donate_idle`]); otherwise as [`donate_all`](Self::donate_all).
    pub(crate) fn donate_all_idle(&self, batches: Vec<Vec<M::Item>>) -> Vec<Vec<M::Item>> {
        self.donate_each(batches, true)
    }

    /// Gives `batches` to the depot; returns the ones it refuses, for the
    /// caller to destroy outside the lock.
    /// Waiters at `max_live` are served from the depot first.
    pub(crate) fn donate_all(&self, batches: Vec<Vec<M::Item>>) -> Vec<Vec<M::Item>> {
        self.donate_each(batches, false)
    }

    fn donate_each(&self, batches: Vec<Vec<M::Item>>, idle: bool) -> Vec<Vec<M::Item>> {
        let refused = batches
            .into_iter()
            .filter(|batch| !batch.is_empty())
            .filter_map(|batch| {
                let donated = if idle {
                    self.head().depot.donate_idle(batch)
                } else {
                    self.head().depot.donate(batch)
                };
                donated.err()
            })
            .collect();
        if self.head().waiters.any() {
            self.serve_waiters_from_depot();
        }
        refused
    }

    // === get ===

    /// `head` is this pool's (`Pool::head`, or [`head`](Self::head)).
    #[inline]
    pub(crate) fn get(this: &Arc<Self>, head: &Head<M::Item>) -> Result<M::Item, Error<M::Error>> {
        debug_assert!(std::ptr::eq(head, this.head()), "this pool's head");
        if let Some(slot) = this.local_remembered(head) {
            if let Some(item) = slot.pop_loaded() {
                return Ok(item);
            }
        }
        Self::get_slow(this, head)
    }

    /// An idle object if one is at hand (this thread's cache, then the
    /// depot); never creates. `None` is counted as an empty get.
    #[inline]
    pub(crate) fn try_get(this: &Arc<Self>, head: &Head<M::Item>) -> Option<M::Item> {
        debug_assert!(std::ptr::eq(head, this.head()), "this pool's head");
        if let Some(slot) = this.local_remembered(head) {
            if let Some(item) = slot.pop_loaded() {
                return Some(item);
            }
        }
        Self::try_get_slow(this, head)
    }

    /// The loaded batch empty, or no cache yet: swap in the spare batch, or,
    /// both empty, refill from the depot or create.
    #[cold]
    #[inline(never)]
    fn get_slow(this: &Arc<Self>, head: &Head<M::Item>) -> Result<M::Item, Error<M::Error>> {
        // With thousands of pools, most gets: no cache here, and this
        // thread at its fill of them. Straight to the depot, in a frame
        // that holds nothing of the refill below, and touching nothing of
        // the pool but its head.
        if head.known_absent() && thread::refuse_cheaply() {
            head.prefetch_depot();
            return this.get_slotless(head);
        }
        Self::get_refill(this, head)
    }

    #[inline(never)]
    fn get_refill(this: &Arc<Self>, head: &Head<M::Item>) -> Result<M::Item, Error<M::Error>> {
        match Self::refill::<true>(this, head) {
            Ok(Some(item)) => Ok(item),
            Ok(None) => unreachable!("a get that may create always ends with an object"),
            Err(e) => Err(e),
        }
    }

    /// [`try_get`](Self::try_get)'s slow path: [`refill`](Self::refill)
    /// without creating.
    #[cold]
    #[inline(never)]
    fn try_get_slow(this: &Arc<Self>, head: &Head<M::Item>) -> Option<M::Item> {
        let got = Self::refill::<false>(this, head).ok().flatten();
        if got.is_none() {
            this.counters.empty_gets.add(1);
        }
        got
    }

    /// The body of both slow gets: the spare batch, a batch from the
    /// depot, or (`CREATE`) new objects; without `CREATE`, `None` where a
    /// get would create.
    #[inline(always)]
    fn refill<const CREATE: bool>(
        this: &Arc<Self>,
        head: &Head<M::Item>,
    ) -> Result<Option<M::Item>, Error<M::Error>> {
        // No cache here (as the get that came here just found), and this
        // thread at its fill of them: straight to the depot, as the claim
        // below would decide.
        if head.known_absent() && thread::refuse_cheaply() {
            return this.get_unclaimed::<CREATE>(head);
        }
        // Once a batch: the spare has objects (the swap `pop` does), found
        // without the claim below.
        match this.local() {
            Some(slot) => {
                if let Some(item) = slot.pop() {
                    return Ok(Some(item));
                }
            }
            // No cache here, and this thread at its fill of them: straight
            // to the depot, as the claim below would decide.
            None if thread::refuse_cheaply() => return this.get_unclaimed::<CREATE>(head),
            None => {}
        }
        let batch_size = head.batch();
        // Times round the recycle-before-failing loop (`at_limit.rs`).
        let mut rounds = 0;
        let mut window_due = false;
        let item = loop {
            let Some(Claimed { slot, refused, .. }) = Self::claim_local(this) else {
                return this.get_unclaimed::<CREATE>(head);
            };
            // Nothing in hand yet: a panic here may reach the caller.
            this.destroy_batches(refused, Site::Caller);
            if let Some(item) = slot.pop() {
                break item;
            }
            if !slot.is_active() {
                continue; // revoked meanwhile: claim again
            }
            slot.note_empty();
            if let Some(mut batch) = head.depot.take_full() {
                window_due |= this.note_exchange(batch.len());
                // Room for a whole batch, made here, outside the bracket (a
                // batch split by reclaim may be short of it).
                batch.reserve_exact(batch_size.saturating_sub(batch.len()));
                let item = batch.pop().expect("full batches are never empty");
                probe!(Refill);
                match slot.install_loaded(batch) {
                    Ok(empty) => head.depot.keep_empty(empty),
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
            if !CREATE {
                return Ok(None);
            }
            let burst = this.config.burst;
            // One object, or a burst: the one to hand out and the rest (no
            // `Vec` for a lone object: it may be a big one).
            let created = if burst == 1 {
                this.create().map(|item| (item, Vec::new()))
            } else {
                this.create_burst(burst).map(|mut made| {
                    let item = made.pop().expect("a burst is never empty");
                    (item, made)
                })
            };
            let (item, mut made) = match created {
                Ok(created) => created,
                Err(Error::Exhausted { .. })
                    if rounds < at_limit::ROUNDS
                        && this.recycle_before_failing(thread::current_tid()) =>
                {
                    rounds += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !made.is_empty() {
                // The rest of the burst becomes this cache's loaded batch
                // (room for a whole batch made here, outside the bracket).
                made.reserve_exact(batch_size - made.len());
                probe!(Refill);
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
        Ok(Some(this.upkeep_holding(item, window_due)))
    }

    /// A get with no cache to use: the depot's newest object, or
    /// (`CREATE`) a new one; without `CREATE`, `None` where a get would
    /// create.
    #[inline(always)]
    fn get_unclaimed<const CREATE: bool>(
        &self,
        head: &Head<M::Item>,
    ) -> Result<Option<M::Item>, Error<M::Error>> {
        if !CREATE {
            return Ok(head.depot.take_lone(&head.lone));
        }
        self.get_slotless(head).map(Some)
    }

    /// `head` is this pool's.
    #[inline(always)]
    fn get_slotless(&self, head: &Head<M::Item>) -> Result<M::Item, Error<M::Error>> {
        match head.depot.take_lone(&head.lone) {
            Some(item) => Ok(item),
            None => self.get_slotless_create(),
        }
    }

    /// [`get_slotless`](Self::get_slotless) with the depot empty: create,
    /// or at `max_live` recycle and look in the depot again.
    #[cold]
    #[inline(never)]
    fn get_slotless_create(&self) -> Result<M::Item, Error<M::Error>> {
        let mut rounds = 0;
        let item = loop {
            match self.create() {
                Ok(item) => break item,
                Err(Error::Exhausted { .. })
                    if rounds < at_limit::ROUNDS && self.recycle_before_failing(None) =>
                {
                    rounds += 1;
                    if let Some(item) = self.head().depot.take_lone(&self.head().lone) {
                        return Ok(item);
                    }
                }
                Err(e) => return Err(e),
            }
        };
        self.slotless.gets.add(1);
        Ok(item)
    }

    /// Creates one object, within `max_live`.
    #[cold]
    fn create(&self) -> Result<M::Item, Error<M::Error>> {
        let reservation = self.reserve(1)?;
        self.create_reserved(reservation)
    }

    /// Creates one object in a place under `max_live` reserved for it
    /// (given back if `create` fails or panics).
    #[cold]
    pub(crate) fn create_reserved(
        &self,
        reservation: Reservation<'_, M>,
    ) -> Result<M::Item, Error<M::Error>> {
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
        // Outside the contract too: more than asked. Counted as made and
        // destroyed at once; they never held a place, so none is given back.
        let surplus = items.split_off(items.len().min(n));
        reservation.fill(items.len());
        if !surplus.is_empty() {
            let k = surplus.len() as u64;
            let mut caught = Caught::default();
            self.callbacks().destroy_batch(surplus, &mut caught);
            self.counters.created.add(k);
            self.counters.destroyed.add(k);
            self.settle(caught, Site::Upkeep);
        }
        self.count_created(items.len());
        Ok(items)
    }

    /// Reserves between 1 and `want` places under `max_live`
    /// (`places.rs`: from this thread's credits in the common case), given
    /// back by the [`Reservation`] unless filled. At the limit, the destroy
    /// queue is finished first: objects on their way out still hold places
    /// (wasmtime's pooling allocator flushes its decommit queue the same
    /// way).
    fn reserve(&self, want: usize) -> Result<Reservation<'_, M>, Error<M::Error>> {
        let Some(places) = &self.places else {
            // No limit, no accounting: the count is for the burst size.
            return Ok(Reservation(self, want));
        };
        loop {
            let local = self.local();
            let (mut got, mut recalled) = (0, 0);
            while got < want {
                match places.reserve(local.as_ref().map(LocalSlot::credit), self.credits()) {
                    Ok(n) => recalled += n,
                    Err(_) => break,
                }
                got += 1;
            }
            if got > 0 {
                self.places_freed(places, recalled.saturating_sub(got));
                return Ok(Reservation(self, got));
            }
            if self.teardown.destroying() == 0 {
                return Err(Error::Exhausted {
                    limit: places.limit(),
                });
            }
            let seen = self.teardown.progress();
            if self.flush_teardown(Site::Caller) == 0 {
                // Other runners hold the last of them: sleep until one
                // finishes a chunk (no spinning).
                self.teardown.wait_for_progress(seen);
            }
        }
    }

    /// Counts `n` objects created by one get (or prefill): one miss.
    fn count_created(&self, n: usize) {
        match self.local() {
            Some(slot) => slot.count_created(n as u64),
            None => {
                self.counters.created.add(n as u64);
                self.counters.misses.add(1);
            }
        }
        // The pool may have just gained its first object beyond its
        // reserve: the reclaimer must know (its next deadline may be ours).
        self.arm_background();
    }

    /// Counts an object made elsewhere as one of this pool's, out with the
    /// caller: a place under `max_live` (`false`, nothing counted, at the
    /// limit), a create and a get, but no miss.
    pub(crate) fn adopt(&self) -> bool {
        let Ok(reservation) = self.reserve(1) else {
            return false;
        };
        reservation.fill(1);
        match self.local() {
            Some(slot) => slot.count_adopted(),
            None => {
                self.counters.created.add(1);
                self.slotless.gets.add(1);
            }
        }
        self.counters.adopted.add(1);
        self.arm_background();
        true
    }

    /// Gives back the place of an object that is gone (destroyed, detached,
    /// or never created): to the oldest waiter at `max_live` if there is
    /// one (it creates in it), else to the count.
    pub(crate) fn release_place(&self) {
        let Some(places) = &self.places else {
            return;
        };
        if self.head().waiters.any() && self.head().waiters.serve(Handoff::Place).is_ok() {
            return;
        }
        probe!(ReleasePlace);
        places.release(self.local().as_ref().map(LocalSlot::credit));
        self.places_freed(places, 1);
    }

    /// `n` places came free (released, or recalled from threads' credits
    /// to the count): a waiter that queued since whoever freed them looked
    /// at the queue looked for a place before they were free.
    fn places_freed(&self, places: &Places, n: usize) {
        if n > 0 && self.waiters_after_freeing() {
            self.serve_waiters_places(places);
        }
    }

    /// Free places go to the waiters, oldest first: one taken back from the
    /// count for each, while there are both.
    #[cold]
    fn serve_waiters_places(&self, places: &Places) {
        while self.head().waiters.any() {
            let local = self.local();
            let credit = local.as_ref().map(LocalSlot::credit);
            if places.reserve(credit, self.credits()).is_err() {
                return;
            }
            if self.head().waiters.serve(Handoff::Place).is_err() {
                // They left meanwhile: back to the count, and round again
                // (one may have queued since).
                places.release(credit);
            }
        }
    }

    /// Returns every thread's unused places under `max_live` to the global
    /// count (`reclaim_unused`, `drain`).
    pub(crate) fn recall_credits(&self) {
        if let Some(places) = &self.places {
            let n = places.recall(self.credits());
            self.places_freed(places, n);
        }
    }

    /// Every slot's credits, for [`Places`] to recall.
    fn credits(&self) -> impl Fn(&mut dyn FnMut(&Credit)) + '_ {
        |visit| self.slots.for_each(|_, slot| visit(slot.credit()))
    }

    // === owned guards (shared/lifetime.rs) ===

    /// Objects out of the pool, never less than the true figure: every end
    /// count is read before every start count, and the `Acquire` fence
    /// between pairs with the `Release` of each count, so a start that
    /// happened before an end seen here is seen too. Zero means every
    /// object handed out before the call has been given back, and every
    /// end seen has stopped counting.
    pub(crate) fn live_bound(&self) -> u64 {
        let c = &*self.counters;
        // Objects handed straight to a waiter at `max_live` (`at_limit.rs`)
        // are ends of the giver's guard and starts of the waiter's.
        // The depot's lone counts under its lock, once among the ends and
        // once after the fence among the starts (the lock orders them as
        // the fence does the atomics).
        // One walk for both: no freed slot's counts move between them.
        let walk = self.slots.walk();
        let mut ends = c.discarded.read()
            + c.detached.read()
            + self.head().depot.lone_counts(&self.head().lone).1
            + c.waiter_returns.read()
            + c.retired_returns.read();
        walk.for_each(|_, slot| ends += slot.counts().1);
        fence(Ordering::Acquire);
        let mut starts = self.slotless.gets.read()
            + self.head().depot.lone_counts(&self.head().lone).0
            + c.waiter_gets.read()
            + c.retired_gets.read();
        walk.for_each(|_, slot| starts += slot.counts().0);
        drop(walk);
        // More ends than starts would be a counting bug: then keep the pool
        // (a leak) rather than free it under a guard.
        starts.checked_sub(ends).unwrap_or(u64::MAX)
    }

    // === stats ===

    pub(crate) fn stats(&self) -> Stats {
        let c = &*self.counters;
        // The signals first, then the fence: what their responses did
        // (reclaimed, queued, destroyed) is in every count read after.
        let r = &*self.reclaim;
        let (pressure_medium, pressure_critical) =
            (r.pressure_medium.read(), r.pressure_critical.read());
        fence(Ordering::Acquire);
        // Read the subtrahends before what they are subtracted from, so a
        // concurrent destroy cannot make a difference negative.
        // One walk for every sum over the slots: a slot freed meanwhile
        // has its counts in the pool's before or after all of them.
        let walk = self.slots.walk();
        let detached = c.detached.read();
        let discarded = c.discarded.read();
        let mut returns = c.waiter_returns.read() + c.retired_returns.read();
        let mut gets = self.slotless.gets.read() + c.waiter_gets.read() + c.retired_gets.read();
        walk.for_each(|_, slot| {
            let (g, r) = slot.counts();
            gets += g;
            returns += r;
        });
        // Every create is a miss: a get, a prefill, a waiter's create.
        let (created, destroyed) = self.lifetime_counts_in(&walk);
        let mut misses = c.misses.read();
        walk.for_each(|_, slot| misses += slot.misses());
        drop(walk);
        let empty_gets = c.empty_gets.read();
        // The depot's counts, its slot-less gets and returns with them, in
        // one look under its lock, after the slots' (as a pass moves
        // objects from caches into it).
        let (depot, (lone_gets, lone_returns)) = self.head().depot.counts_with(&self.head().lone);
        returns += lone_returns;
        gets += lone_gets;
        let live = gets.saturating_sub(returns + discarded + detached);
        let existing = created.saturating_sub(destroyed + detached);
        let destroying = self.teardown.destroying() as u64;
        Stats {
            reclaimed: r.reclaimed.read(),
            reclaim_passes: r.passes.read(),
            pressure_medium,
            pressure_critical,
            caches_taken: r.caches_taken.read(),
            trimmed: r.trimmed.read(),
            working_set: existing.saturating_sub(depot.idle_unused as u64),
            callback_panics: self.panics.count(),
            waiting: self.head().waiters.len() as u64,
            limit_folds: self.places.as_deref().map_or(0, Places::folds),
            created,
            destroyed,
            detached,
            live,
            idle: existing.saturating_sub(live + destroying),
            destroying,
            idle_depot: depot.idle as u64,
            idle_purged: depot.purged as u64,
            hits: gets.saturating_sub(misses + c.adopted.read()),
            misses: misses + empty_gets,
            empty_gets,
            adopted: c.adopted.read(),
            depot_exchanges: depot.exchanges,
            batch_size: self.batch(),
        }
    }
}

/// Places reserved under `max_live` for objects being created; those not
/// filled are given back when it drops (on error and on panic too).
pub(crate) struct Reservation<'a, M: Manage>(&'a Shared<M>, usize);

impl<M: Manage> Reservation<'_, M> {
    /// `made` of the places hold objects now; the rest are given back.
    fn fill(mut self, made: usize) {
        self.1 -= made.min(self.1);
    }
}

impl<M: Manage> Drop for Reservation<'_, M> {
    /// Gives back the places not filled: on error and on panic alike.
    fn drop(&mut self) {
        for _ in 0..self.1 {
            self.0.release_place();
        }
    }
}

impl<M: Manage> Shared<M> {
    /// Hands this thread's cache to the depot now, as its exit would, and
    /// gives the slot up (the next operation re-claims it). Returns how
    /// many objects left the cache; those the full depot refused are
    /// destroyed (a panic there reaches the caller, see [`Site::Caller`]).
    pub(crate) fn trim_local(&self) -> usize {
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

impl<M: Manage> Shared<M> {
    /// Destroys this thread's cached objects and gives the slot up (the
    /// next operation re-claims it). Returns how many were destroyed.
    pub(crate) fn destroy_local(&self) -> usize {
        let Some(slot) = self.local() else {
            return 0;
        };
        let batches = slot.release();
        self.destroy_batches(batches, Site::Caller)
    }

    /// Sets the depot's `max_idle` to `to(now)` (`None`: the change would
    /// overflow) and destroys what a lowered cap leaves over. Refuses a
    /// cap no batch or `min_idle` fits in, as the builder does.
    pub(crate) fn resize_max_idle(
        &self,
        to: impl FnOnce(usize) -> Option<usize>,
    ) -> Result<usize, ConfigError> {
        let floor = self.config.batch_size.max(self.config.min_idle);
        let over = self.head().depot.resize_max_idle(|now| {
            let new = to(now).ok_or_else(|| {
                ConfigError::new(
                    "max_idle",
                    format!("is {now}; the change would take it below 0 or past usize::MAX"),
                )
            })?;
            if new < floor {
                return Err(ConfigError::new(
                    "max_idle",
                    format!(
                        "cannot go to {new}: it must hold a batch ({}) and min_idle ({})",
                        self.config.batch_size, self.config.min_idle
                    ),
                ));
            }
            Ok(new)
        })?;
        Ok(self.destroy_batches(over, Site::Caller))
    }
}

impl<M: Manage> ThreadExit for Shared<M> {
    fn still_cached(&self, tid: usize) -> bool {
        // SAFETY: we run on thread `tid` (a sweep of its own list), which
        // frees its slot only at its exit.
        let Some(slot) = (unsafe { self.slots.get(tid) }) else {
            return false;
        };
        // SAFETY: we run on thread `tid` (a sweep of its own list), which
        // has not released its id.
        let local = unsafe { LocalSlot::new(slot) };
        if !local.give_up_if_revoked() {
            return true;
        }
        local.set_watched(false);
        // Its unused places under `max_live` go back to everyone, as at
        // thread exit.
        if let Some(places) = &self.places {
            let n = places.recall(|visit| visit(slot.credit()));
            self.places_freed(places, n);
        }
        // Its slot stays until the thread exits: a caller up the stack (a
        // user callback inside this pool's own get or put) may hold it.
        false
    }

    fn thread_exit(&self, tid: usize) {
        probe!(ThreadExit);
        // SAFETY: we run on thread `tid`, which frees the slot below, after
        // its last use.
        let Some(slot) = (unsafe { self.slots.get(tid) }) else {
            return;
        };
        // SAFETY: we run on thread `tid`, in its TLS destructor, before its id
        // is freed.
        let local = unsafe { LocalSlot::new(slot) };
        // The next thread with this id watches the pool afresh.
        local.set_watched(false);
        let refused = self.donate_all(local.release());
        // A TLS destructor: nothing may unwind. Threads exiting en masse
        // must not all tear down at once, nor wait: this one runs the queue
        // (its own work and the others') only while it holds one of the
        // `min(ncpus, teardown_threads)` permits, and goes at once if none
        // is free. So a mass exit tears down on `ncpus` threads, as
        // DragonFly's fix does, not on the reclaimer alone after the
        // exits (lab `mass-teardown`: that was up to 2x slower).
        self.tear_down(refused, usize::MAX, Site::ThreadExit);
        // Its unused places under `max_live` go back to everyone.
        if let Some(places) = &self.places {
            let n = places.recall(|visit| visit(slot.credit()));
            self.places_freed(places, n);
        }
        // The next thread with this id allocates its own, if it comes.
        self.retire_local(tid);
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
        batches.extend(self.head().depot.take_down_to(0));
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
    let cpus = crate::os::thread::cpus();
    #[cfg(loom)]
    let cpus = usize::MAX;
    config.teardown_threads.min(cpus)
}

#[cfg(all(test, not(loom)))]
mod layout_tests {
    use std::mem::offset_of;

    use super::*;
    use crate::depot::Lone;

    /// A slot freed at its thread's exit leaves its counts in the pool's,
    /// and, for the passes, only the use no pass saw while it lived: an
    /// exit is not a use of the pool.
    #[test]
    fn an_exit_leaves_the_counts_and_only_the_use_no_pass_saw() {
        let pool = std::sync::Arc::new(
            crate::Pool::builder(|| Box::new(0u64))
                .background(false)
                .build()
                .unwrap(),
        );
        let used = std::sync::Arc::clone(&pool);
        std::thread::spawn(move || {
            for _ in 0..3 {
                drop(used.get().unwrap());
            }
            // What a pass records of each slot it walks.
            used.shared.slots.for_each(|_, slot| {
                let (gets, returns) = slot.counts();
                slot.note_pass_seen(gets + returns);
            });
            for _ in 0..2 {
                drop(used.get().unwrap());
            }
        })
        .join()
        .unwrap();
        assert_eq!(pool.shared.slots.allocated(), 0, "freed at the exit");
        let c = &*pool.shared.counters;
        assert_eq!((c.retired_gets.read(), c.retired_returns.read()), (5, 5));
        assert_eq!(c.retired_unseen.read(), 4, "the round trips after the pass");
        let s = pool.stats();
        assert_eq!((s.hits + s.misses, s.live, s.created), (5, 0, 1), "{s:?}");
    }

    /// A process may hold thousands of pools, each this state at least:
    /// what a pool without `max_live` does not use (the budget's padded
    /// lines) is boxed, and the table holds bucket pointers for the ids any
    /// system can have alive, not one per bit of `usize`.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_pools_shared_state_fits_in_2048_bytes() {
        type S = Shared<fn() -> Box<[u8; 256]>>;
        assert!(size_of::<S>() <= 2048, "{} bytes", size_of::<S>());
    }

    /// A get and a put by a thread with no cache here (with thousands of
    /// pools, most of them) touch two lines of the pool's head, one aligned
    /// pair: the first (the waiters' count, the batch size, the table's
    /// id, `slotted`, `background`, `limited`, which every get and put
    /// reads, and the lone counts) and the depot's (its lock, loose
    /// object and marks; see `depot::tests`). Each line is a likely cache
    /// miss when the pools outnumber the caches.
    #[test]
    fn a_slotless_get_and_put_touch_one_pair_of_lines_of_the_pool() {
        type H = Head<Box<[u8; 256]>>;
        let line = |offset: usize| offset / 64;
        let first = [
            // `Waiters` is `repr(C)` with its count first.
            offset_of!(H, waiters),
            offset_of!(H, batch),
            offset_of!(H, table_id),
            offset_of!(H, lone),
            offset_of!(H, lone) + size_of::<Lone>() - 1,
            offset_of!(H, slotted),
            offset_of!(H, background),
            offset_of!(H, limited),
        ];
        assert!(first.iter().all(|&o| line(o) == 0), "{first:?}");
        assert_eq!(offset_of!(H, depot), 64, "the depot's hot line second");
        // Alignment keeps the lines where the offsets say; a cell of the
        // arena holds a head, and keeps the two lines in one 128-byte pair.
        assert_eq!(std::mem::align_of::<H>() % 64, 0);
        assert!(size_of::<H>() <= arena::CELL, "{} bytes", size_of::<H>());
        assert_eq!(arena::CELL % 128, 0);
        assert_eq!(arena::CELL_ALIGN % 128, 0);
    }

    /// Only a pool with `max_live` can have a get wait, so only its frees
    /// fence and look for waiters (`Head::waiters_after_freeing`); a pool
    /// without one answers no at once, and its gets never queue, even
    /// `get_timeout`'s when `create` fails.
    #[test]
    fn only_a_pool_with_max_live_looks_for_waiters_after_a_free() {
        struct Failing;
        impl crate::Manage for Failing {
            type Item = u8;
            type Error = &'static str;
            fn create(&self) -> Result<u8, Self::Error> {
                Err("no")
            }
        }
        let unlimited = crate::Pool::builder(Failing)
            .background(false)
            .build()
            .unwrap();
        assert!(!unlimited.head().limited);
        // A get that queued would time out, and fail the match.
        let got = unlimited.get_timeout(std::time::Duration::from_secs(1));
        assert!(
            matches!(got, Err(crate::Error::Create("no"))),
            "{:?}",
            got.err()
        );
        assert_eq!(unlimited.head().waiters.len(), 0);
        assert!(!unlimited.head().waiters_after_freeing());
        let limited = crate::Pool::builder(Failing)
            .background(false)
            .max_live(1)
            .build()
            .unwrap();
        assert!(limited.head().limited);
    }

    /// With thousands of pools, the heads a get and a put touch sit in the
    /// arena's cells (side by side: `arena.rs` carves them in order), not
    /// in the pools' own allocations a whole shared state apart, and the
    /// handle points there.
    #[test]
    fn the_heads_of_many_pools_sit_in_the_arena() {
        type Make = fn() -> Box<[u8; 256]>;
        let n = if cfg!(miri) { 40 } else { 1000 };
        let pools: Vec<crate::Pool<Make>> = (0..n)
            .map(|_| {
                crate::Pool::builder((|| Box::new([0u8; 256])) as Make)
                    .background(false)
                    .build()
                    .unwrap()
            })
            .collect();
        let shared_size = size_of::<Shared<Make>>();
        for p in &pools {
            let head = std::ptr::from_ref(p.head()) as usize;
            assert_eq!(head, std::ptr::from_ref(p.shared.head()) as usize);
            assert!(p.shared.head.in_arena());
            assert_eq!(head % arena::CELL_ALIGN, 0);
            let shared = Arc::as_ptr(&p.shared) as usize;
            assert!(
                head + size_of::<Head<Box<[u8; 256]>>>() <= shared || head >= shared + shared_size,
                "the head is apart from the shared state"
            );
        }
        assert!(shared_size > 2 * arena::CELL, "{shared_size}");
    }
}
