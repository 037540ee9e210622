//! The depot: one shared, bounded list of batches behind one lock.
//!
//! Threads touch the depot once per batch: to take a full batch when both of
//! their batches are empty (handing back their emptied one), or to donate a
//! full batch when both are full. The lock is held for a few pointer moves and never while a
//! manager runs: the depot hands back what must be destroyed or purged and
//! the caller does that after unlocking.
//!
//! ```text
//!            oldest                       newest
//!  full:   [ batch ][ batch ][ batch ][ batch ]  <- donate / refill (LIFO)
//!     ^ reclaim and purge take from here: these sat idle longest
//!  empty:  [ ][ ][ ]   emptied batches, reused so exchanges do not allocate
//!  loose:  [·]          the newest object, put by a thread with no cache
//! ```
//!
//! A thread with no cache (exiting, or at its fill of caches) puts and takes
//! one object at a time. The newest such object sits in `loose`, next to the
//! lock, so a pool that such threads use one object at a time is served
//! without reaching a batch's buffer: with thousands of pools, those are
//! cache and TLB misses. Every other operation first moves it onto the
//! newest batch (`spill_loose`), so it is, for them, the newest object.
//!
//! The hard cap: `objects <= cap`, where `cap` is `max_idle` (or `min_idle`
//! while a critical-pressure hold lasts). A donation that would pass it is
//! refused whole, and the donor destroys the batch.
//!
//! # Working set
//!
//! LIFO reuse means the oldest objects are the ones nobody needed. The depot
//! keeps the fewest objects it held during the current reclaim interval
//! (`lw_cur`) and during each of the [`MAX_WINDOW`]` - 1` before it
//! (`lw_past`), the low-water marks of the Solaris kmem reaper: the minimum
//! over the last `window` intervals is what sat unused through all of them,
//! and only that is reclaimed at an interval boundary. A workload that keeps
//! needing its objects never sees them destroyed. The window is 2 intervals
//! (kmem's) unless the pool has seen what it reclaimed being made again
//! (`shared/pass.rs`): then it spans the distance from the reclaim to the
//! new demand, so a load whose need recurs every few intervals keeps it,
//! and back to 2 for a pool nobody has used for longer than it ever paused
//! (`tick_window`).

mod lone;
mod loose;

use std::mem;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::Mutex;
pub(crate) use lone::Lone;
use loose::Loose;

/// The longest working-set window, in reclaim intervals, and the number of
/// low-water marks the depot keeps.
pub(crate) const MAX_WINDOW: usize = 16;

/// The shared, bounded store of idle batches. `repr(C)`, on a line of its
/// own: its lock and the first line of [`Shelves`] lead, and
/// the pool's [`Head`](crate::shared::head::Head) puts the depot on its
/// second line, after the one that holds the [`Lone`] counts.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Depot<T> {
    shelves: Mutex<Shelves<T>>,
    /// The batch size the pool starts with: room given to new and kept
    /// empty batches.
    batch_size: usize,
    /// The largest batch the pool's (adaptive) batch size allows.
    max_batch: usize,
    /// The cap on idle objects outside a critical-pressure hold: the
    /// configured `max_idle` until `Pool::set_max_idle` changes it
    /// (under the lock; read without it for the empties' bound).
    max_idle: AtomicUsize,
}

/// A locked depot, and (on the reclaimer thread) its share of the fork
/// gate, released after the lock.
type Locked<'a, S> = crate::reclaim::fork::Gated<crate::sync::MutexGuard<'a, S>>;

#[derive(Debug)]
/// `repr(C)`, in this order: the lock, the loose object and what a
/// one-object take or put updates share the depot's first line.
#[repr(C)]
struct Shelves<T> {
    /// The newest idle object, when a thread with no cache put it last
    /// and it fits in a word (counted in `objects`, never purged).
    loose: Loose<T>,
    /// `objects == sum(full[i].items.len()) + (loose holds one) <= cap`.
    objects: usize,
    /// `max_idle`, or `min_idle` while a critical-pressure hold lasts.
    cap: usize,
    /// Objects taken out to be purged and not yet restored: still idle, so
    /// they count toward the low-water marks.
    in_purge: usize,
    /// The fewest objects held since the last [`Depot::take_unused_since_mark`].
    lw_mark: usize,
    /// The fewest objects held since the current reclaim interval began.
    lw_cur: usize,
    /// The fewest objects held since the last purge tick (`purge_delay`).
    lw_purge: usize,
    /// `purged == sum(full[i].items.len() where full[i].purged) <= objects`.
    purged: usize,
    /// Batches of 1..=`batch_size` idle objects, oldest first; purged ones
    /// (oldest of all) at the front.
    full: Vec<Shelf<T>>,
    /// Emptied batches with room for `batch_size` objects, for reuse.
    /// `empty.len() <= max_idle / batch_size`.
    empty: Vec<Vec<T>>,
    /// The fewest emptied batches kept since the current reclaim interval
    /// began: that many at the bottom of `empty` sat unused through it,
    /// and a tick frees them, as it reclaims idle objects, so a pool
    /// nobody uses keeps no memory for exchanges that do not come.
    /// `lw_empty <= empty.len()`.
    lw_empty: usize,
    /// The fewest held during each earlier interval, the latest first, less
    /// what was reclaimed since: `lw_past[0]` is the previous interval's.
    lw_past: [usize; MAX_WINDOW - 1],
    /// Batches moved in or out (refills and donations).
    exchanges: u64,
}

/// A batch in the depot.
#[derive(Debug)]
struct Shelf<T> {
    items: Vec<T>,
    /// Every object in it has been purged ([`Manage::purge`](crate::Manage::purge)).
    purged: bool,
}

/// What an interval boundary asks of the caller.
#[derive(Debug)]
pub(crate) struct Tick<T> {
    /// Objects idle through the whole window: destroy them.
    pub(crate) reclaim: Vec<Vec<T>>,
    /// Objects idle through the last interval, not yet purged: purge them and
    /// hand them back with [`Depot::restore_purged`].
    pub(crate) purge: Vec<Vec<T>>,
}

/// What the depot holds and has done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DepotCounts {
    pub(crate) idle: usize,
    pub(crate) purged: usize,
    pub(crate) exchanges: u64,
    /// Idle objects that sat unused through the last two intervals so far.
    pub(crate) idle_unused: usize,
}

impl<T> Depot<T> {
    pub(crate) fn new(batch_size: usize, max_idle: usize) -> Self {
        Self {
            shelves: Mutex::new(Shelves {
                loose: Loose::new(),
                full: Vec::new(),
                empty: Vec::new(),
                lw_empty: 0,
                objects: 0,
                purged: 0,
                in_purge: 0,
                cap: max_idle,
                lw_mark: 0,
                lw_cur: 0,
                lw_purge: 0,
                lw_past: [0; MAX_WINDOW - 1],
                exchanges: 0,
            }),
            batch_size,
            max_batch: batch_size,
            max_idle: AtomicUsize::new(max_idle),
        }
    }

    /// Accepts batches of up to `max_batch` objects (the pool's batch size
    /// grows up to it).
    pub(crate) fn growing_to(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(self.batch_size);
        self
    }

    fn max_empties(&self) -> usize {
        self.max_idle() / self.batch_size
    }

    /// The cap on idle objects outside a critical-pressure hold.
    pub(crate) fn max_idle(&self) -> usize {
        self.max_idle.load(Ordering::Relaxed)
    }

    /// Changes the cap outside a hold to `to(now)` (refused, unchanged, if
    /// that is `Err`); returns the oldest batches above a lowered cap, for
    /// the caller to destroy. During a hold the lower of the two caps
    /// stays in force.
    pub(crate) fn resize_max_idle<E>(
        &self,
        to: impl FnOnce(usize) -> Result<usize, E>,
    ) -> Result<Vec<Vec<T>>, E> {
        let mut shelves = self.lock_spilled();
        let old = self.max_idle();
        let new = to(old)?;
        self.max_idle.store(new, Ordering::Relaxed);
        shelves.cap = if shelves.cap < old {
            shelves.cap.min(new)
        } else {
            new
        };
        let over = shelves.objects.saturating_sub(shelves.cap);
        let taken = shelves.take_oldest(over, |_| true);
        shelves.forget_reclaimed(taken.iter().map(Vec::len).sum());
        Ok(taken)
    }

    /// The depot's lock. On the reclaimer thread it is taken under the
    /// fork gate (`reclaim/fork.rs`), so that a fork never finds the
    /// reclaimer holding it.
    fn lock(&self) -> Locked<'_, Shelves<T>> {
        crate::reclaim::fork::gated(|| self.shelves.lock())
    }

    /// The depot's lock, with the loose object moved onto the newest batch:
    /// for every operation but the one-object ones.
    fn lock_spilled(&self) -> Locked<'_, Shelves<T>> {
        let mut shelves = self.lock();
        shelves.spill_loose(self.batch_size);
        shelves
    }

    /// Takes the newest full batch (hot objects, LIFO), if any.
    pub(crate) fn take_full(&self) -> Option<Vec<T>> {
        let mut shelves = self.lock_spilled();
        let full = shelves.full.pop()?;
        shelves.remove(full.items.len(), full.purged);
        shelves.note_demand();
        shelves.exchanges += 1;
        Some(full.items)
    }

    /// Keeps an emptied batch for a later donor, if it has room for a whole
    /// batch and the depot keeps fewer than it could use.
    pub(crate) fn keep_empty(&self, empty: Vec<T>) {
        debug_assert!(empty.is_empty());
        if empty.capacity() < self.batch_size {
            return;
        }
        let mut shelves = self.lock();
        if shelves.empty.len() < self.max_empties() {
            shelves.empty.push(empty);
        }
    }

    /// Takes `batch` (non-empty) unless that would pass the cap. On success
    /// returns an empty batch for the donor to reuse (unallocated if the
    /// depot had none spare); on refusal returns `batch` for the donor to
    /// destroy.
    pub(crate) fn donate(&self, batch: Vec<T>) -> Result<Vec<T>, Vec<T>> {
        self.shelve(batch, false)
    }

    /// Like [`donate`](Depot::donate), for a batch of a thread cache that sat
    /// untouched through the interval that just ended (a reclaim pass took
    /// it): it goes in as the oldest and counts toward the last two
    /// low-water marks, since its objects sat unused through that interval
    /// (in the cache) and, until a thread takes them, through this one. So
    /// a tick reclaims them once they sat unused through the window in all,
    /// as any idle object (the next tick, at a window of two), instead of
    /// a whole window more spent in the depot.
    pub(crate) fn donate_idle(&self, batch: Vec<T>) -> Result<Vec<T>, Vec<T>> {
        self.shelve(batch, true)
    }

    fn shelve(&self, batch: Vec<T>, idle: bool) -> Result<Vec<T>, Vec<T>> {
        debug_assert!(!batch.is_empty() && batch.len() <= self.max_batch);
        let mut shelves = self.lock_spilled();
        let n = batch.len();
        if shelves.objects + n > shelves.cap {
            return Err(batch);
        }
        shelves.objects += n;
        shelves.exchanges += 1;
        let shelf = Shelf {
            items: batch,
            purged: false,
        };
        if idle {
            // Oldest: LIFO takes reach it last, so the objects the marks
            // count as unused stay the oldest ones, which a tick takes
            // first. Purged batches may now sit behind it; `tick` purges the
            // oldest unpurged objects up to (idle through the interval −
            // purged), which is then at most the unpurged objects among the
            // idle ones: it may purge fewer than it could, never one in use.
            shelves.full.insert(0, shelf);
            shelves.lw_past[0] += n;
            shelves.lw_cur += n;
            shelves.lw_purge += n;
        } else {
            shelves.full.push(shelf);
        }
        Ok(shelves.take_empty().unwrap_or_default())
    }

    /// [`take_one`](Self::take_one) for a get by a thread with no cache
    /// in the pool: counted in [`lone_counts`](Self::lone_counts).
    pub(crate) fn take_lone(&self, lone: &Lone) -> Option<T> {
        self.take_one_counted(Some(lone))
    }

    /// [`put_one`](Self::put_one) for a return by a thread with no cache
    /// in the pool: counted in [`lone_counts`](Self::lone_counts), refused
    /// or not (a refused object is still given back, then destroyed).
    pub(crate) fn put_lone(&self, item: T, lone: &Lone) -> Result<(), T> {
        self.put_one_counted(item, Some(lone))
    }

    /// The gets and returns counted in `lone` by [`take_lone`](Self::take_lone)
    /// and [`put_lone`](Self::put_lone) so far, `(gets, returns)`: read
    /// under the lock they were written under.
    pub(crate) fn lone_counts(&self, lone: &Lone) -> (u64, u64) {
        let _shelves = self.lock();
        lone.read_locked()
    }

    /// Takes one object, the newest, uncounted: for the pool's own moves
    /// (serving waiters, recycling at `max_live`); a get by a thread with
    /// no cache takes [`take_lone`](Self::take_lone).
    pub(crate) fn take_one(&self) -> Option<T> {
        self.take_one_counted(None)
    }

    #[inline(always)]
    fn take_one_counted(&self, lone: Option<&Lone>) -> Option<T> {
        let mut shelves = self.lock();
        let (item, purged) = match shelves.loose.take() {
            Some(item) => (item, false),
            None => {
                let newest = shelves.full.last_mut()?;
                let item = newest.items.pop().expect("full batches are never empty");
                let purged = newest.purged;
                if newest.items.is_empty() {
                    let empty = shelves.full.pop().expect("just seen").items;
                    if shelves.empty.len() < self.max_empties() {
                        shelves.empty.push(empty);
                    }
                }
                (item, purged)
            }
        };
        shelves.remove(1, purged);
        shelves.note_demand();
        if let Some(lone) = lone {
            lone.add_get_locked();
        }
        Some(item)
    }

    /// Stores one object unless the depot is at its cap, uncounted: for the
    /// pool's own moves (a hand-off passed on, a prefill, a purge's
    /// return); a return by a thread with no cache is
    /// [`put_lone`](Self::put_lone). It becomes the loose one (if it fits
    /// there); the one it displaces goes onto the newest batch.
    pub(crate) fn put_one(&self, item: T) -> Result<(), T> {
        self.put_one_counted(item, None)
    }

    #[inline(always)]
    fn put_one_counted(&self, item: T, lone: Option<&Lone>) -> Result<(), T> {
        let mut shelves = self.lock();
        if let Some(lone) = lone {
            lone.add_return_locked();
        }
        if shelves.objects >= shelves.cap {
            return Err(item);
        }
        shelves.objects += 1;
        // The one displaced, or `item` itself if it is too big to hold
        // beside the lock: on a batch.
        if let Ok(Some(item)) | Err(item) = shelves.loose.replace(item) {
            shelves.push_newest(item, self.batch_size);
        }
        Ok(())
    }

    /// Removes the objects that sat unused since the previous mark (its
    /// low-water mark), oldest first, and starts a new period. The
    /// caller destroys what is returned.
    pub(crate) fn take_unused_since_mark(&self, floor: usize) -> Vec<Vec<T>> {
        let mut shelves = self.lock_spilled();
        let limit = shelves.lw_mark.min(shelves.objects.saturating_sub(floor));
        let taken = shelves.take_oldest(limit, |_| true);
        shelves.forget_reclaimed(taken.iter().map(Vec::len).sum());
        shelves.lw_mark = shelves.objects;
        taken
    }

    /// Ends `intervals` (at least one) reclaim intervals: takes what sat
    /// unused through the last `window` (2 to [`MAX_WINDOW`]; down to
    /// `floor` objects) for the caller to destroy, and what sat unused
    /// through the last one for it to purge.
    pub(crate) fn tick(&self, intervals: u64, floor: usize, window: usize) -> Tick<T> {
        debug_assert!(intervals >= 1);
        let window = window.clamp(2, MAX_WINDOW);
        // The loose object stays by the lock unless the reclaim or the
        // purge below reaches it (it is the newest): a tick that takes
        // nothing, as nearly every tick of a pool in use does, moves no
        // object and makes no batch for it.
        let mut shelves = self.lock();
        // Every depot visit checks for a due tick, so when more than one
        // interval has passed, nothing used the depot after the first of
        // them: `lw_cur` (the low water since the last tick) is then a safe
        // bound for each of them.
        let spanned = usize::try_from(intervals).unwrap_or(usize::MAX);
        let last = shelves.lw_cur;
        let earlier = window.saturating_sub(spanned);
        let unused = shelves.lw_past[..earlier]
            .iter()
            .fold(last, |low, &mark| low.min(mark));
        let limit = unused.min(shelves.objects.saturating_sub(floor));
        if limit > shelves.batched() {
            shelves.spill_loose(self.batch_size);
        }
        let reclaim = shelves.take_oldest(limit, |_| true);
        let reclaimed: usize = reclaim.iter().map(Vec::len).sum();
        let idle_all_interval = last - reclaimed;
        let objects = shelves.objects;
        // The reclaimed objects were the oldest, counted in every mark.
        for mark in &mut shelves.lw_past {
            *mark = mark.saturating_sub(reclaimed).min(objects);
        }
        let ended = spanned.min(MAX_WINDOW - 1);
        shelves.lw_past.rotate_right(ended);
        shelves.lw_past[..ended].fill(idle_all_interval);
        shelves.lw_cur = objects;
        shelves.lw_mark = shelves.lw_mark.saturating_sub(reclaimed).min(objects);
        shelves.lw_purge = shelves.lw_purge.saturating_sub(reclaimed).min(objects);
        // Purged batches are the oldest, so the oldest `idle_all_interval`
        // objects are the purged ones plus these.
        let unpurged = idle_all_interval.saturating_sub(shelves.purged);
        if unpurged > shelves.batched() - shelves.purged {
            shelves.spill_loose(self.batch_size);
        }
        let purge = shelves.take_oldest(unpurged, |shelf| !shelf.purged);
        shelves.in_purge += purge.iter().map(Vec::len).sum::<usize>();
        // The emptied batches no exchange took through the last interval
        // (they hold no object: freeing them runs no user code).
        let unused_empties = shelves.lw_empty.min(shelves.empty.len());
        shelves.empty.drain(..unused_empties);
        shelves.lw_empty = shelves.empty.len();
        // A depot left with nothing lets the lists' own buffers go too.
        if shelves.full.is_empty() {
            shelves.full = Vec::new();
        }
        if shelves.empty.is_empty() {
            shelves.empty = Vec::new();
        }
        Tick { reclaim, purge }
    }

    /// A purge tick (`purge_delay`): takes the not-yet-purged objects that
    /// sat unused since the last tick, oldest first, for the caller to purge
    /// and hand back with [`restore_purged`](Depot::restore_purged), and
    /// starts a new period.
    pub(crate) fn purge_tick(&self) -> Vec<Vec<T>> {
        let mut shelves = self.lock_spilled();
        // Purged batches are the oldest, so the oldest `lw_purge` objects
        // are the purged ones plus these.
        let unpurged = shelves
            .lw_purge
            .min(shelves.objects)
            .saturating_sub(shelves.purged);
        let purge = shelves.take_oldest(unpurged, |shelf| !shelf.purged);
        shelves.in_purge += purge.iter().map(Vec::len).sum::<usize>();
        shelves.lw_purge = shelves.objects + shelves.in_purge;
        purge
    }

    /// Takes what sat unused through this interval and the last, down to
    /// `floor` objects, without ending the interval (medium pressure).
    pub(crate) fn reclaim_unused(&self, floor: usize) -> Vec<Vec<T>> {
        let mut shelves = self.lock_spilled();
        let limit = shelves.unused().min(shelves.objects.saturating_sub(floor));
        let taken = shelves.take_oldest(limit, |_| true);
        shelves.forget_reclaimed(taken.iter().map(Vec::len).sum());
        taken
    }

    /// Takes everything above `floor` objects (critical pressure; `floor`
    /// 0 drains).
    pub(crate) fn take_down_to(&self, floor: usize) -> Vec<Vec<T>> {
        let mut shelves = self.lock_spilled();
        let limit = shelves.objects.saturating_sub(floor);
        let taken = shelves.take_oldest(limit, |_| true);
        shelves.forget_reclaimed(taken.iter().map(Vec::len).sum());
        taken
    }

    /// Sets the cap on idle objects: `min_idle` during a critical-pressure
    /// hold, `max_idle` otherwise.
    pub(crate) fn set_cap(&self, cap: usize) {
        self.lock().cap = cap.min(self.max_idle());
    }

    /// Removes the oldest not-yet-purged batches, up to `limit` objects, so
    /// the caller can purge them outside the lock and hand them back with
    /// [`restore_purged`](Depot::restore_purged).
    pub(crate) fn take_unpurged(&self, limit: usize) -> Vec<Vec<T>> {
        let mut shelves = self.lock_spilled();
        let taken = shelves.take_oldest(limit, |shelf| !shelf.purged);
        shelves.in_purge += taken.iter().map(Vec::len).sum::<usize>();
        taken
    }

    /// Puts purged batches back at the old end, as far as the cap allows
    /// (donations may have filled the depot meanwhile). Returns the batches
    /// that did not fit, for the caller to destroy.
    pub(crate) fn restore_purged(&self, batches: Vec<Vec<T>>) -> Vec<Vec<T>> {
        let mut shelves = self.lock();
        let mut back = Vec::with_capacity(batches.len());
        let mut refused = Vec::new();
        let returning: usize = batches.iter().map(Vec::len).sum();
        shelves.in_purge = shelves.in_purge.saturating_sub(returning);
        for items in batches {
            if items.is_empty() {
                continue;
            }
            if shelves.objects + items.len() > shelves.cap {
                refused.push(items);
                continue;
            }
            shelves.objects += items.len();
            shelves.purged += items.len();
            back.push(Shelf {
                items,
                purged: true,
            });
        }
        // They sat idle longer than anything donated meanwhile, but not as
        // long as the batches purged before them.
        let at = shelves.full.iter().take_while(|shelf| shelf.purged).count();
        shelves.full.splice(at..at, back);
        refused
    }

    /// Counts, exact at the moment of the call.
    pub(crate) fn counts(&self) -> DepotCounts {
        Self::counts_locked(&self.lock())
    }

    /// [`counts`](Self::counts) and [`lone_counts`](Self::lone_counts), at
    /// the same moment (one lock).
    pub(crate) fn counts_with(&self, lone: &Lone) -> (DepotCounts, (u64, u64)) {
        let shelves = self.lock();
        (Self::counts_locked(&shelves), lone.read_locked())
    }

    fn counts_locked(shelves: &Shelves<T>) -> DepotCounts {
        DepotCounts {
            idle: shelves.objects,
            purged: shelves.purged,
            exchanges: shelves.exchanges,
            idle_unused: shelves.unused(),
        }
    }
}

impl<T> Shelves<T> {
    /// Objects on batches: all but the loose one.
    fn batched(&mut self) -> usize {
        self.objects - usize::from(self.loose.is_some())
    }

    /// Moves the loose object onto the newest batch (see the module docs).
    fn spill_loose(&mut self, batch_size: usize) {
        if let Some(item) = self.loose.take() {
            self.push_newest(item, batch_size);
        }
    }

    /// Puts one object, already counted, on top of the newest batch, or on
    /// a batch of its own if that one is full or purged.
    fn push_newest(&mut self, item: T, batch_size: usize) {
        match self.full.last_mut() {
            Some(newest) if newest.items.len() < batch_size && !newest.purged => {
                newest.items.push(item)
            }
            _ => {
                let mut items = self
                    .take_empty()
                    .unwrap_or_else(|| Vec::with_capacity(batch_size));
                items.push(item);
                self.full.push(Shelf {
                    items,
                    purged: false,
                });
            }
        }
    }

    /// The newest emptied batch, if any, lowering its low-water mark.
    fn take_empty(&mut self) -> Option<Vec<T>> {
        let empty = self.empty.pop()?;
        self.lw_empty = self.lw_empty.min(self.empty.len());
        Some(empty)
    }

    /// Accounts for `n` objects leaving.
    fn remove(&mut self, n: usize, purged: bool) {
        self.objects -= n;
        if purged {
            self.purged -= n;
        }
    }

    /// A thread took objects: lower the low-water marks.
    fn note_demand(&mut self) {
        let idle = self.objects + self.in_purge;
        self.lw_mark = self.lw_mark.min(idle);
        self.lw_cur = self.lw_cur.min(idle);
        self.lw_purge = self.lw_purge.min(idle);
    }

    /// Objects that sat unused through the previous interval and this one.
    fn unused(&self) -> usize {
        self.lw_past[0].min(self.lw_cur).min(self.objects)
    }

    /// `removed` objects were taken for destruction, oldest first: they are
    /// the ones the low-water marks counted as unused, so each mark drops
    /// by as much (the objects left were used, and must not be counted as
    /// unused in their place).
    fn forget_reclaimed(&mut self, removed: usize) {
        let objects = self.objects;
        for mark in [&mut self.lw_mark, &mut self.lw_cur, &mut self.lw_purge]
            .into_iter()
            .chain(&mut self.lw_past)
        {
            *mark = mark.saturating_sub(removed).min(objects);
        }
    }

    /// Removes objects from batches matching `pick`, oldest first, up to
    /// `limit` objects, splitting a batch to take exactly `limit` if need
    /// be. Leaves the low-water marks to the caller.
    fn take_oldest(&mut self, limit: usize, pick: impl Fn(&Shelf<T>) -> bool) -> Vec<Vec<T>> {
        // Every pass's tick asks twice (reclaim, purge), most often for
        // nothing: no allocation and no walk then.
        let taken = if limit == 0 || self.full.is_empty() {
            Vec::new()
        } else {
            self.take_oldest_in_place(limit, pick)
        };
        // The list's buffer follows what it holds: a burst's spare room
        // goes once the list is below half of it.
        if self.full.capacity() > 2 * self.full.len().max(4) {
            self.full.shrink_to_fit();
        }
        taken
    }

    /// [`take_oldest`](Self::take_oldest)'s work, in the list itself: the
    /// kept batches stay in their order.
    fn take_oldest_in_place(
        &mut self,
        limit: usize,
        pick: impl Fn(&Shelf<T>) -> bool,
    ) -> Vec<Vec<T>> {
        let mut budget = limit;
        let mut taken = Vec::new();
        let (mut removed, mut removed_purged) = (0, 0);
        self.full.retain_mut(|shelf| {
            if budget == 0 || !pick(shelf) {
                return true;
            }
            let n = shelf.items.len().min(budget);
            budget -= n;
            removed += n;
            if shelf.purged {
                removed_purged += n;
            }
            if n == shelf.items.len() {
                taken.push(mem::take(&mut shelf.items));
                false
            } else {
                // The oldest objects of a batch are at its bottom.
                taken.push(shelf.items.drain(..n).collect());
                true
            }
        });
        self.remove(removed - removed_purged, false);
        self.remove(removed_purged, true);
        taken
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn batch(range: std::ops::Range<u32>) -> Vec<u32> {
        let mut b = Vec::with_capacity(4);
        b.extend(range);
        b
    }

    /// A thread whose batches are both empty: swaps `mine` for the newest
    /// full batch, handing its empty one back.
    fn refill(depot: &Depot<u32>, mine: &mut Vec<u32>) -> bool {
        match depot.take_full() {
            Some(full) => {
                let empty = mem::replace(mine, full);
                depot.keep_empty(empty);
                true
            }
            None => false,
        }
    }

    fn lens(batches: &[Vec<u32>]) -> usize {
        batches.iter().map(Vec::len).sum()
    }

    #[test]
    fn donations_past_max_idle_are_refused_whole() {
        let depot = Depot::new(4, 8);
        assert!(depot.donate(batch(0..4)).is_ok());
        assert!(depot.donate(batch(4..8)).is_ok());
        assert_eq!(depot.donate(batch(8..12)), Err(batch(8..12)));
        let c = depot.counts();
        assert_eq!((c.idle, c.exchanges), (8, 2));
        assert_eq!(depot.put_one(99), Err(99));
    }

    #[test]
    fn refill_is_lifo_and_recycles_empties() {
        let depot = Depot::new(4, 8);
        depot.donate(batch(0..4)).unwrap();
        depot.donate(batch(4..8)).unwrap();
        let mut mine = Vec::with_capacity(4);
        assert!(refill(&depot, &mut mine));
        assert_eq!(mine, batch(4..8));
        // The empty batch we handed in comes back on the next donation.
        let empty = depot.donate(mine).unwrap();
        assert!(empty.is_empty() && empty.capacity() >= 4);
        assert_eq!(depot.counts().idle, 8);
    }

    /// Each tick asks twice for the oldest objects, most often for none:
    /// the list of batches is then left as it is, and a take works in it,
    /// keeping the order and the counts.
    #[test]
    fn taking_the_oldest_works_in_place_and_not_at_all_for_none() {
        let depot = Depot::new(4, 16);
        for i in 0..3 {
            depot.donate(batch(i * 4..i * 4 + 4)).unwrap();
        }
        let mut shelves = depot.lock();
        // The two oldest batches purged.
        shelves.full[0].purged = true;
        shelves.full[1].purged = true;
        shelves.purged = 8;
        let list = shelves.full.as_ptr();
        assert!(shelves.take_oldest(0, |_| true).is_empty());
        assert_eq!(shelves.full.as_ptr(), list, "nothing taken: the list stays");
        assert_eq!((shelves.objects, shelves.purged), (12, 8));
        // The six oldest: the first batch whole, the bottom of the second.
        let taken = shelves.take_oldest(6, |_| true);
        assert_eq!(taken, vec![batch(0..4), vec![4, 5]]);
        assert_eq!(shelves.full.as_ptr(), list, "taken in place");
        let left: Vec<(Vec<u32>, bool)> = shelves
            .full
            .iter()
            .map(|s| (s.items.clone(), s.purged))
            .collect();
        assert_eq!(left, vec![(vec![6, 7], true), (batch(8..12), false)]);
        assert_eq!((shelves.objects, shelves.purged), (6, 2));
        // Only the batches `pick` allows.
        let taken = shelves.take_oldest(8, |shelf| !shelf.purged);
        assert_eq!(taken, vec![batch(8..12)]);
        assert_eq!((shelves.objects, shelves.purged), (2, 2));
        let taken = shelves.take_oldest(8, |_| true);
        assert_eq!(taken, vec![vec![6, 7]]);
        assert_eq!((shelves.objects, shelves.purged), (0, 0));
        assert!(shelves.take_oldest(8, |_| true).is_empty(), "none left");
    }

    /// How many emptied batches the depot keeps.
    fn empties(depot: &Depot<u32>) -> usize {
        depot.lock().empty.len()
    }

    #[test]
    fn emptied_batches_unused_through_an_interval_are_freed_at_its_tick() {
        let depot = Depot::new(4, 16);
        for i in 0..3 {
            depot.donate(batch(i * 4..i * 4 + 4)).unwrap();
        }
        // Three threads refill, each handing its empty batch in.
        let mut threads = [Vec::new(), Vec::new(), Vec::new()];
        for mine in &mut threads {
            *mine = Vec::with_capacity(4);
            assert!(refill(&depot, mine));
        }
        assert_eq!(empties(&depot), 3);
        // They were kept during this interval, not through a whole one.
        let _ = depot.tick(1, 0, 2);
        assert_eq!(empties(&depot), 3);
        // One donation takes one back during the next interval: the two
        // that nobody took go at its tick, and the taken one's place stays
        // for the batch the donor hands in next.
        let [first, ..] = &mut threads;
        let empty = depot.donate(mem::take(first)).unwrap();
        assert!(empty.capacity() >= 4, "an emptied batch, reused");
        let _ = depot.tick(1, 0, 2);
        assert_eq!(empties(&depot), 0);
        // A pool nobody uses keeps none: an empty handed in now is freed
        // at the tick after the next.
        depot.keep_empty(empty);
        let _ = depot.tick(1, 0, 2);
        assert_eq!(empties(&depot), 1, "kept through part of an interval");
        let _ = depot.tick(1, 0, 2);
        assert_eq!(empties(&depot), 0);
    }

    #[test]
    fn trim_takes_only_what_sat_idle_the_whole_period() {
        let depot = Depot::new(2, 8);
        for i in 0..4 {
            depot.donate(batch(i * 2..i * 2 + 2)).unwrap();
        }
        // Low water is still 0 (the depot started empty): nothing sat idle
        // for a whole period yet.
        assert!(depot.take_unused_since_mark(0).is_empty());
        // One batch is used during the next period: 3 batches sat idle.
        let mut mine = Vec::with_capacity(2);
        assert!(refill(&depot, &mut mine));
        let trimmed = depot.take_unused_since_mark(0);
        assert_eq!(trimmed.len(), 3);
        assert_eq!(trimmed[0], batch(0..2), "oldest first");
        assert_eq!(depot.counts().idle, 0);
    }

    #[test]
    fn ticks_reclaim_only_what_sat_unused_two_intervals() {
        let depot = Depot::new(2, 16);
        for i in 0..4 {
            depot.donate(batch(i * 2..i * 2 + 2)).unwrap();
        }
        // Interval 1 ends: it started empty, so nothing sat unused through it.
        let t = depot.tick(1, 0, 2);
        assert!(t.reclaim.is_empty() && t.purge.is_empty());
        // Interval 2: one batch is taken and given back; 6 objects sat idle.
        let mut mine = Vec::with_capacity(2);
        assert!(refill(&depot, &mut mine));
        depot.donate(mine).unwrap();
        let t = depot.tick(1, 0, 2);
        assert!(t.reclaim.is_empty(), "the interval before was not idle");
        assert_eq!(lens(&t.purge), 6, "idle a whole interval: purge");
        assert_eq!(t.purge[0], batch(0..2), "oldest first");
        assert!(depot.restore_purged(t.purge).is_empty());
        // Interval 3: untouched. The 6 sat idle through intervals 2 and 3.
        let t = depot.tick(1, 0, 2);
        assert_eq!(lens(&t.reclaim), 6);
        assert_eq!(depot.counts().purged, 0, "the purged ones were reclaimed");
        assert_eq!(
            lens(&t.purge),
            2,
            "the last batch sat idle through interval 3"
        );
        assert!(depot.restore_purged(t.purge).is_empty());
        assert_eq!(depot.counts().idle, 2);
    }

    #[test]
    fn a_longer_window_reclaims_only_what_sat_unused_through_all_of_it() {
        let depot = Depot::new(2, 16);
        for i in 0..3 {
            depot.donate(batch(i * 2..i * 2 + 2)).unwrap();
        }
        // Interval 1 started empty; intervals 2 and 3 leave all 6 unused.
        let tick = |intervals| {
            let t = depot.tick(intervals, 0, 3);
            assert!(depot.restore_purged(t.purge).is_empty());
            lens(&t.reclaim)
        };
        assert_eq!(tick(1), 0);
        assert_eq!(tick(1), 0, "two of three");
        assert_eq!(tick(1), 0, "interval 1 is in the window");
        // Interval 4 takes a batch and gives it back: 4 unused through 2-4.
        let mut mine = Vec::with_capacity(2);
        assert!(refill(&depot, &mut mine));
        depot.donate(mine).unwrap();
        assert_eq!(tick(1), 4);
        // Several intervals at once count as unused through each of them.
        assert_eq!(tick(3), 2);
        assert_eq!(depot.counts().idle, 0);
    }

    #[test]
    fn a_quiet_cache_donated_idle_is_reclaimed_at_the_next_tick() {
        // A plain donation waits two ticks; an idle one (a cache untouched
        // through the interval that just ended) waits one.
        let plain = Depot::new(2, 16);
        plain.donate(batch(0..2)).unwrap();
        assert!(plain.tick(1, 0, 2).reclaim.is_empty());
        let idle = Depot::new(2, 16);
        idle.donate_idle(batch(0..2)).unwrap();
        assert_eq!(lens(&idle.tick(1, 0, 2).reclaim), 2);
        assert_eq!(idle.counts().idle, 0);
    }

    #[test]
    fn an_idle_donation_that_is_needed_is_kept_and_used_objects_are_not_taken_for_it() {
        let depot = Depot::new(2, 16);
        // Two batches in the depot through interval 1; in interval 2 a thread
        // takes one and gives it back twice (the same one: refills are LIFO).
        depot.donate(batch(0..2)).unwrap();
        depot.donate(batch(2..4)).unwrap();
        depot.tick(1, 0, 2);
        depot.donate_idle(batch(10..12)).unwrap();
        let mut mine = Vec::with_capacity(2);
        for _ in 0..2 {
            assert!(refill(&depot, &mut mine));
            depot.donate(std::mem::take(&mut mine)).unwrap();
            mine.reserve(2);
        }
        // Only the idle batch sat unused through both intervals: it alone is
        // reclaimed, and it is the batch taken (the oldest), not one in use.
        let t = depot.tick(1, 0, 2);
        assert_eq!(t.reclaim, vec![batch(10..12)]);
        // The batch untouched in interval 2 only is purged, not reclaimed.
        assert_eq!(t.purge, vec![batch(0..2)]);
        assert!(depot.restore_purged(t.purge).is_empty());
        assert_eq!(
            depot.counts().idle,
            4,
            "the batches of the depot's own stay"
        );
    }

    #[test]
    fn an_idle_donation_past_the_cap_is_refused() {
        let depot = Depot::new(2, 16);
        depot.set_cap(2);
        depot.donate(batch(0..2)).unwrap();
        assert_eq!(depot.donate_idle(batch(2..4)), Err(batch(2..4)));
        assert_eq!(depot.counts().idle, 2);
    }

    #[test]
    fn steady_demand_is_never_reclaimed() {
        let depot = Depot::new(2, 16);
        let mut mine = Vec::with_capacity(2);
        for _ in 0..3 {
            depot.donate(batch(0..2)).unwrap();
        }
        for _ in 0..10 {
            // Each interval, all three batches are used once.
            let mut taken = Vec::new();
            for _ in 0..3 {
                assert!(refill(&depot, &mut mine));
                taken.push(mem::replace(&mut mine, Vec::with_capacity(2)));
            }
            for b in taken {
                depot.donate(b).unwrap();
            }
            let t = depot.tick(1, 0, 2);
            assert!(t.reclaim.is_empty() && t.purge.is_empty());
        }
        assert_eq!(depot.counts().idle, 6);
    }

    #[test]
    fn reclaim_respects_the_floor_exactly() {
        let depot = Depot::new(4, 16);
        for i in 0..3 {
            depot.donate(batch(i * 4..i * 4 + 4)).unwrap();
        }
        // Critical: down to a floor of 5, splitting the oldest batches.
        let taken = depot.take_down_to(5);
        assert_eq!(lens(&taken), 7);
        assert_eq!(depot.counts().idle, 5);
        assert_eq!(taken[0], batch(0..4));
        assert_eq!(taken[1], batch(4..7));
        // A tick never goes below the floor either.
        depot.tick(3, 5, 2);
        assert_eq!(depot.counts().idle, 5);
        // A hold caps donations at the floor.
        depot.set_cap(5);
        assert!(depot.donate(batch(20..21)).is_err());
        depot.set_cap(usize::MAX);
        assert!(depot.donate(batch(20..21)).is_ok());
    }

    #[test]
    fn purged_batches_go_back_oldest_and_are_not_purged_twice() {
        let depot = Depot::new(2, 6);
        for i in 0..3 {
            depot.donate(batch(i * 2..i * 2 + 2)).unwrap();
        }
        let out = depot.take_unpurged(4);
        assert_eq!(out, vec![batch(0..2), batch(2..4)]);
        assert_eq!(depot.counts().idle, 2);
        // A donation lands meanwhile; only one purged batch still fits.
        depot.donate(batch(10..12)).unwrap();
        let refused = depot.restore_purged(out);
        assert_eq!(refused, vec![batch(2..4)]);
        let c = depot.counts();
        assert_eq!((c.idle, c.purged), (6, 2));
        // Nothing unpurged is taken twice: only the two fresh batches.
        let again = depot.take_unpurged(usize::MAX);
        assert_eq!(again, vec![batch(4..6), batch(10..12)]);
        assert!(depot.restore_purged(again).is_empty());
        assert_eq!(depot.counts().purged, 6);
        // Refills hand out purged batches and account for them.
        let mut mine = Vec::with_capacity(2);
        assert!(refill(&depot, &mut mine));
        assert_eq!(depot.counts().purged, 4);
    }

    #[test]
    fn purging_does_not_count_as_demand() {
        let depot = Depot::new(2, 8);
        for i in 0..3 {
            depot.donate(batch(i * 2..i * 2 + 2)).unwrap();
        }
        assert!(depot.take_unused_since_mark(0).is_empty());
        let out = depot.take_unpurged(4);
        // A thread takes the newest batch while the oldest two are out
        // being purged, and gives it back.
        let mut mine = Vec::with_capacity(2);
        assert!(refill(&depot, &mut mine));
        depot.donate(mine).unwrap();
        assert!(depot.restore_purged(out).is_empty());
        // The two purged batches sat unused since the last mark.
        assert_eq!(
            depot.take_unused_since_mark(0),
            vec![batch(0..2), batch(2..4)]
        );
    }

    #[test]
    fn a_lone_object_stays_by_the_lock_and_is_the_newest() {
        let depot = Depot::new(3, 8);
        depot.put_one(1).unwrap();
        {
            let mut shelves = depot.lock();
            assert!(shelves.loose.is_some());
            assert!(shelves.full.is_empty(), "no batch for a lone object");
            // The lock and what a one-object take or put reads and writes
            // share the depot's first line.
            let base = &depot as *const Depot<u32> as usize;
            let end = &shelves.lw_purge as *const usize as usize + size_of::<usize>();
            assert!(end - base <= 64, "{}", end - base);
            assert_eq!(std::mem::align_of::<Depot<u32>>(), 64, "a line of its own");
        }
        assert_eq!(depot.take_one(), Some(1));
        assert_eq!(depot.take_one(), None);
        // The newest stays loose; the one it displaces goes onto a batch.
        depot.put_one(1).unwrap();
        depot.put_one(2).unwrap();
        {
            let mut shelves = depot.lock();
            assert!(shelves.loose.is_some());
            assert_eq!(shelves.full.len(), 1);
            assert_eq!(shelves.full[0].items, [1]);
        }
        assert_eq!(depot.counts().idle, 2);
        // A donation is newer than the loose object: a refill takes the
        // loose one with it, on top of the older batch, and the donation
        // first.
        depot.donate(batch(10..12)).unwrap();
        assert_eq!(depot.take_full(), Some(batch(10..12)));
        assert_eq!(depot.take_full(), Some(vec![1, 2]));
        assert_eq!(depot.counts().idle, 0);
    }

    /// A tick leaves the loose object by the lock, with no batch made for
    /// it, unless what it reclaims or purges reaches it (it is the newest).
    #[test]
    fn a_tick_moves_the_loose_object_only_when_it_takes_it() {
        let depot = Depot::new(3, 8);
        depot.put_one(1).unwrap();
        let loose_only = |depot: &Depot<u32>| {
            let mut shelves = depot.lock();
            shelves.loose.is_some() && shelves.full.is_empty() && shelves.empty.is_empty()
        };
        // In use through the interval (taken and given back): nothing to
        // reclaim or purge.
        assert_eq!(depot.take_one(), Some(1));
        depot.put_one(1).unwrap();
        let tick = depot.tick(1, 0, 2);
        assert!(tick.reclaim.is_empty() && tick.purge.is_empty());
        assert!(loose_only(&depot), "the tick left it loose");
        // Unused through a whole interval: purged (the loose one too, on a
        // batch), and with another interval unused, reclaimed.
        let tick = depot.tick(1, 0, 2);
        assert_eq!(tick.purge, vec![vec![1]]);
        assert!(depot.restore_purged(tick.purge).is_empty());
        let tick = depot.tick(1, 0, 2);
        assert_eq!(tick.reclaim, vec![vec![1]]);
        assert_eq!(depot.counts().idle, 0);
        // An older batch unused while the loose object is in use: the
        // batch is purged, then reclaimed; the loose one stays loose.
        depot.donate(batch(10..12)).unwrap();
        depot.put_one(1).unwrap();
        let mut reclaimed = Vec::new();
        for _ in 0..4 {
            assert_eq!(depot.take_one(), Some(1));
            depot.put_one(1).unwrap();
            let tick = depot.tick(1, 0, 2);
            assert!(
                depot.lock().loose.is_some(),
                "the object in use stays loose"
            );
            assert!(depot.restore_purged(tick.purge).is_empty());
            reclaimed.extend(tick.reclaim);
        }
        assert_eq!(reclaimed, vec![batch(10..12)]);
        assert!(loose_only(&depot));
    }

    /// Slot-less gets and returns are counted by the depot, under its
    /// lock: a return refused at the cap counts too (the object was given
    /// back), a take that found nothing does not, and the uncounted
    /// one-object paths (recycling at `max_live`, purges) leave the counts
    /// alone.
    #[test]
    fn lone_gets_and_returns_are_counted_under_the_lock() {
        let depot = Depot::new(2, 2);
        let lone = Lone::new();
        assert_eq!(depot.take_lone(&lone), None);
        depot.put_lone(1, &lone).unwrap();
        depot.put_lone(2, &lone).unwrap();
        assert_eq!(depot.put_lone(3, &lone), Err(3), "at the cap");
        assert_eq!(depot.lone_counts(&lone), (0, 3));
        assert_eq!(depot.take_lone(&lone), Some(2));
        assert_eq!(depot.lone_counts(&lone), (1, 3));
        depot.put_one(4).unwrap();
        assert_eq!(depot.take_one(), Some(4));
        assert_eq!(depot.lone_counts(&lone), (1, 3), "uncounted paths");
        let (counts, lone_counts) = depot.counts_with(&lone);
        assert_eq!((counts.idle, lone_counts), (1, (1, 3)));
    }

    #[test]
    fn a_loose_object_is_counted_by_the_marks_and_reclaimed_last() {
        let depot = Depot::new(2, 8);
        depot.donate(batch(0..2)).unwrap();
        depot.put_one(7).unwrap();
        // Interval 1 started empty; through intervals 2 and 3 nothing is
        // used.
        for _ in 0..2 {
            let t = depot.tick(1, 0, 2);
            assert!(t.reclaim.is_empty());
            assert!(depot.restore_purged(t.purge).is_empty());
        }
        let t = depot.tick(1, 0, 2);
        assert_eq!(t.reclaim, vec![batch(0..2), vec![7]], "oldest first");
        assert_eq!(depot.counts().idle, 0);
        // A floor keeps the newest: the loose one.
        depot.donate(batch(0..2)).unwrap();
        depot.put_one(7).unwrap();
        assert_eq!(lens(&depot.take_down_to(1)), 2);
        assert_eq!(depot.take_one(), Some(7));
        // The cap counts it.
        depot.set_cap(1);
        depot.put_one(8).unwrap();
        assert_eq!(depot.put_one(9), Err(9));
    }

    #[test]
    fn an_object_too_big_for_the_loose_place_goes_on_a_batch() {
        let depot = Depot::<[u64; 4]>::new(2, 8);
        depot.put_one([1; 4]).unwrap();
        depot.put_one([2; 4]).unwrap();
        assert_eq!(depot.lock().full.len(), 1);
        assert_eq!(depot.take_one(), Some([2; 4]), "LIFO");
        assert_eq!(depot.counts().idle, 1);
        assert_eq!(depot.take_down_to(0), vec![vec![[1; 4]]]);
    }

    #[test]
    fn single_objects_fill_partial_batches() {
        let depot = Depot::new(3, 6);
        for i in 0..6 {
            depot.put_one(i).unwrap();
        }
        assert_eq!(depot.put_one(6), Err(6));
        assert_eq!(depot.take_one(), Some(5));
        let all = depot.take_down_to(0);
        assert_eq!(lens(&all), 5);
        assert_eq!(depot.take_one(), None);
    }
}
