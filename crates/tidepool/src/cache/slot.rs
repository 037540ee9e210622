//! One thread's cache in one pool: the owner-only [`LocalCache`] plus the few
//! fields other threads may touch, and the protocol by which another thread
//! takes the cache of an owner that has gone quiet.
//!
//! # States
//!
//! | from | to | by | when |
//! |---|---|---|---|
//! | `UNCLAIMED` | `ACTIVE` | owner | first use ([`LocalSlot::claim`]) |
//! | `ACTIVE`, `FLUSH` | `REVOKING` | remote | [`Slot::revoke_remote`] |
//! | `REVOKING` | `REVOKED` | remote | owner outside an access after the barrier (or waited out of it: [`IfBusy::WaitOut`]): cache taken |
//! | `REVOKING` | `FLUSH` | remote | owner inside an access ([`IfBusy::Flush`]), or no barrier available |
//! | `REVOKED`, `FLUSH` | `ACTIVE` | owner | its next access (`FLUSH`: it hands its batches to the depot) |
//! | `ACTIVE` | `TRIM` | remote | [`Slot::request_trim`]: a pass ends the busy cache's period, asking for what sat unused through two (maybe nothing) |
//! | `TRIM` | `REVOKING` | remote | [`Slot::revoke_remote`] |
//! | `TRIM` | `ACTIVE` | owner | its next access: it hands the oldest `trim` objects to the depot and begins a new period |
//! | any but `REVOKING` | `UNCLAIMED` | owner | thread exit ([`LocalSlot::release`]) |
//!
//! * `UNCLAIMED`: no live thread owns the slot; its cache is empty.
//! * `ACTIVE`: the thread whose id indexes the slot owns it; only it touches
//!   the cache.
//! * `REVOKING`: a remote thread is deciding whether it may take the cache;
//!   the owner keeps off and waits in its slow path.
//! * `REVOKED`: the cache was taken (it is empty); the owner re-claims it
//!   before its next access.
//! * `FLUSH`: the owner was inside an access when asked; it hands its cache to the depot
//!   at its next access.
//! * `TRIM`: a pass has read the cache's working-set counts (`low`,
//!   `removed`, below) and asks the owner to start a new period; and, if
//!   the cache held objects it did not need through two periods, to give
//!   that many, the oldest, to the depot. The owner does both at its next
//!   access. The remote side only stores the count and the state: it never
//!   touches the cache, so no barrier is needed.
//!
//! # What sat unused: `low` and `removed`
//!
//! A period begins when the owner serves a pass's `TRIM` request (its cache
//! then holds `a` objects) and ends at the next pass's read. Gets and puts
//! work at the top of the cache; donations and trims take from the bottom
//! (the spare batch, then the bottom of the loaded one: what came in
//! first). The objects that sat untouched through the period are the ones
//! of the first `a` that no get reached and no donation took:
//!
//! ```text
//! unused = max(0, min over the period (len + removed) − removed at its end)
//! ```
//!
//! The owner keeps it as it goes, in `low`, with the bottom removals in
//! `removed`:
//!
//! ```text
//! period begins (TRIM served):  low = len,  removed = 0
//! get leaving len objects:      low = min(low, len)
//! k taken from the bottom:      removed += k,  low = max(0, low − k)
//! cache emptied (flush, take):  low = 0
//! ```
//!
//! A put changes neither: the objects it adds sit above the unused ones. So
//! a cache that only puts, and donates what its puts fill, reads as holding
//! nothing unused, however full it is: it turned over. The count is exact;
//! which objects a trim then takes is the cache's oldest by its own order
//! (`LocalCache::take_oldest`), which a swap of the halves can reorder. The
//! objects unused through two periods are those of the earlier period's
//! `low`, less what its trim took, that the later period neither reached
//! nor removed: `min(low₁ − trimmed₁ − removed₂, low₂)`. The owner clamps a
//! request when it serves it, to what it removed since the pass read its
//! counts and to its `low` then: a race can make a trim smaller, never
//! larger.
//!
//! # The asymmetric fence
//!
//! Every owner access is bracketed. On entry the owner stores its operation
//! count (`gets + returns`) into `entered`, runs a compiler fence, and checks
//! `state == ACTIVE`; every access ends by bumping `gets` or `returns`
//! (`Release`), or, if it counts nothing, by storing `OUTSIDE` into
//! `entered`. So the owner is inside an access exactly when
//! `entered == gets + returns`, and the end of an access costs nothing
//! beyond the counter bump the statistics need anyway.
//!
//! A remote revoker stores `REVOKING`, runs one process-wide barrier
//! ([`heavy_fence`], `membarrier(2)`), then reads
//! `entered` and the counters (`Acquire`). The barrier guarantees that either
//! the owner's check sees `REVOKING`, or the revoker sees the owner's entry;
//! so the revoker takes the cache only when the owner is outside its access
//! and cannot start a new one. The owner's fast path pays one plain store,
//! a compiler fence and the counter bump; no atomic read-modify-write, no
//! hardware fence.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use super::credit::Credit;
use super::local::LocalCache;
use super::thread;
use crate::fence::{heavy_fence, light_fence};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use crate::sync::process::{AtomicU64 as ProcessU64, Ordering as ProcessOrdering};
use crate::sync::{back_off, OwnerCounter, UnsafeCell};

const UNCLAIMED: u8 = 0;
const ACTIVE: u8 = 1;
const REVOKING: u8 = 2;
const REVOKED: u8 = 3;
const FLUSH: u8 = 4;
const TRIM: u8 = 5;

/// `entered` after an access that counted nothing: the owner is outside.
const OUTSIDE: u64 = u64::MAX;

/// What an access counts when it ends; the count is also what tells a
/// revoker the owner is out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tally {
    /// An object handed out.
    Get,
    /// An object given back.
    Return,
    /// Neither (slow-path bookkeeping).
    Nothing,
}

/// What a revoker does about an owner it finds inside an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfBusy {
    /// Leaves it a flush request (`FLUSH`): reclaim, pressure and drains,
    /// which must not wait on a busy thread and lose nothing by it (the
    /// owner hands its cache over at its next access).
    Flush,
    /// Waits until the access ends, then takes the cache: a `get` at
    /// `max_live`, whose answer may not wait for the owner's next access
    /// (that access may never come: a waiter queued behind this `get`
    /// would sleep beside the object the owner was caching). An access is
    /// a few instructions with no lock, call-out or allocation in it, so it
    /// ends as soon as its thread runs. Only an owner that claimed its
    /// slot since the process's last fork is waited for (in a forked
    /// child, a parent's thread inside an access is inside it for good: it
    /// does not exist there); any other is asked to flush.
    WaitOut,
}

/// The cache was revoked by another thread while the owner was not looking;
/// the owner must re-claim it ([`LocalSlot::claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Revoked;

/// A thread cache. Slots live in a [`SlotTable`](super::SlotTable), each on
/// its own cache lines, indexed by thread id.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    /// One of the states above.
    state: AtomicU8,
    /// `gets + returns` when the owner last entered an access, or `OUTSIDE`;
    /// written only by the owner. Inside an access iff
    /// `entered == gets + returns`.
    entered: AtomicU64,
    cache: UnsafeCell<LocalCache<T>>,
    /// Objects handed out by this slot's owners (hits and misses).
    gets: OwnerCounter,
    /// Objects given back to the pool by this slot's owners.
    returns: OwnerCounter,
    /// [`thread::fork_generation`] when the owner last claimed the slot
    /// (see [`IfBusy::WaitOut`]).
    claimed_in: AtomicU64,
    /// Objects created and destroyed by this slot's owners: the pool's
    /// `created` and `destroyed` are these summed, plus the slot-less ones,
    /// so no create or destroy writes a shared counter.
    created: OwnerCounter,
    destroyed: OwnerCounter,
    /// Gets of this slot's owners that had to create (one per burst).
    misses: OwnerCounter,
    /// Unused places under `max_live` lent to this slot.
    credit: Credit,
    /// The objects at the bottom of the cache that sat untouched since the
    /// period began (see the module docs); written by the owner only (and
    /// zeroed by a revoker that took the cache), read by the pass.
    low: AtomicUsize,
    /// Objects donated or trimmed from the bottom of the cache since the
    /// period began; written by the owner only, read by the pass. Stored
    /// before `low` is lowered for them (`Release`), so a pass that reads
    /// `low` after a removal (`Acquire`) also reads the removal: it never
    /// sees the objects gone from `low` and still counted as present.
    removed: AtomicUsize,
    /// Objects a `TRIM` request asks the owner to give back.
    trim: AtomicUsize,
    /// `removed` as the pass read it for that request: what the owner
    /// removed since has left the cache: it cannot be given back.
    trim_removed: AtomicUsize,
    /// The thread whose id indexes the slot has the pool in its list of
    /// pools to hand caches back to at exit ([`thread::watch`]). Touched
    /// only by that thread (set at its first claim, cleared at its exit);
    /// the id registry's lock orders one owner's last access before the
    /// next owner's first.
    watched: AtomicBool,
    /// Unique in the process, never reused: a slot freed at its thread's
    /// exit and the one the id's next owner allocates (maybe at the same
    /// address) are told apart by it (the passes' per-id records).
    serial: u64,
    /// `gets + returns` as the last reclaim pass saw them: what the owner
    /// did after it, the pass has yet to see (a slot freed at its thread's
    /// exit leaves that much use for the next pass, `Shared::retire_local`).
    /// Written by the pass only, under the table's walk lock.
    pass_seen: AtomicU64,
}

// SAFETY: `Slot` is shared between threads only through `&Slot`, and the one
// field that is not already `Sync`, `cache`, is accessed only by the owning
// thread (through a `LocalSlot`, which is `!Send` and made only by the
// owner), by a revoker that has won the protocol above (`revoke_remote`), or
// through `&mut Slot`. Objects move between threads through it, hence
// `T: Send`.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            state: AtomicU8::new(UNCLAIMED),
            entered: AtomicU64::new(OUTSIDE),
            cache: UnsafeCell::new(LocalCache::new()),
            gets: OwnerCounter::default(),
            returns: OwnerCounter::default(),
            claimed_in: AtomicU64::new(0),
            created: OwnerCounter::default(),
            destroyed: OwnerCounter::default(),
            misses: OwnerCounter::default(),
            credit: Credit::default(),
            low: AtomicUsize::new(0),
            removed: AtomicUsize::new(0),
            trim: AtomicUsize::new(0),
            trim_removed: AtomicUsize::new(0),
            watched: AtomicBool::new(false),
            serial: {
                static NEXT: ProcessU64 = ProcessU64::new(0);
                NEXT.fetch_add(1, ProcessOrdering::Relaxed)
            },
            pass_seen: AtomicU64::new(0),
        }
    }
}

impl<T> Slot<T> {
    /// Objects handed out, given back: `(gets, returns)`. May lag the owner by
    /// the operation it is doing.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.gets.read(), self.returns.read())
    }

    /// This slot's serial (see the field).
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// Notes that a pass saw `ops` gets and returns.
    pub(crate) fn note_pass_seen(&self, ops: u64) {
        self.pass_seen.store(ops, Ordering::Relaxed);
    }

    /// The gets and returns no pass has seen yet.
    pub(crate) fn unseen_by_pass(&self) -> u64 {
        let (gets, returns) = self.counts();
        (gets + returns).saturating_sub(self.pass_seen.load(Ordering::Relaxed))
    }

    /// Objects created, destroyed by this slot's owners:
    /// `(created, destroyed)`.
    pub(crate) fn lifetime_counts(&self) -> (u64, u64) {
        (self.created.read(), self.destroyed.read())
    }

    /// Gets of this slot's owners that had to create.
    pub(crate) fn misses(&self) -> u64 {
        self.misses.read()
    }

    /// The slot's unused places under `max_live`, for any thread to recall.
    pub(crate) fn credit(&self) -> &Credit {
        &self.credit
    }

    /// Whether some thread owns the slot and may hold objects in it.
    pub(crate) fn is_owned(&self) -> bool {
        matches!(self.state.load(Ordering::Relaxed), ACTIVE | FLUSH | TRIM)
    }

    /// The period's working-set counts: `(low, removed)`, the objects that
    /// sat unused since it began and those taken from the bottom meanwhile
    /// (see the module docs). For the pass, which then ends the period with
    /// [`request_trim`](Self::request_trim).
    pub(crate) fn period(&self) -> (usize, usize) {
        let low = self.low.load(Ordering::Acquire);
        (low, self.removed.load(Ordering::Relaxed))
    }

    /// Asks the owner to begin a new period at its next access and to give
    /// its `n` oldest objects to the depot then (`TRIM`; `n` may be 0);
    /// nothing if the slot is not `ACTIVE` (a flush or a take empties the
    /// cache, and so begins the period at 0 anyway). For the pass, under
    /// its lock.
    /// `removed` is the count the pass read with [`period`](Self::period).
    pub(crate) fn request_trim(&self, n: usize, removed: usize) {
        self.trim.store(n, Ordering::Relaxed);
        self.trim_removed.store(removed, Ordering::Relaxed);
        // `Release`: the owner's `Acquire` in `claim` sees the count.
        let _ = self
            .state
            .compare_exchange(ACTIVE, TRIM, Ordering::Release, Ordering::Relaxed);
    }

    /// Counts every object of the cache as unused this period, as if a
    /// pass had found it so: for models that ask for trims without running
    /// the periods that lead to them.
    #[cfg(all(test, loom))]
    pub(crate) fn all_unused_for_test(&self) {
        self.low.store(usize::MAX, Ordering::Release);
    }

    /// Empties the cache; only with exclusive access (the pool is dropping).
    pub(crate) fn take_all_exclusive(&mut self) -> [Vec<T>; 2] {
        // SAFETY: `&mut self` means no other reference to the slot exists, so
        // nothing else can be touching the cache.
        self.cache.with_mut(|cache| unsafe { (*cache).take_all() })
    }

    /// Whether the owner is inside an access, as far as a revoker past its
    /// barrier can tell. `entered` first: if it shows an entry, the
    /// counters it was computed from are visible too (the owner stores it
    /// `Release`). The `Acquire` loads pair with the owner's `Release` ends
    /// of access: once this says no, its writes to the cache happen before
    /// our reads.
    fn owner_inside(&self) -> bool {
        let entered = self.entered.load(Ordering::Acquire);
        let ops = self.gets.read_acquire() + self.returns.read_acquire();
        entered == ops
    }

    /// For a revoker past its barrier that found the owner inside an
    /// access: waits until the access ends if `if_busy` says so and the
    /// owner claimed the slot in this process (`true`), else leaves it
    /// (`false`: the caller asks for a flush). A stamp read stale can only
    /// be an older generation: then the owner is asked to flush, as before
    /// this wait existed.
    fn waited_out(&self, if_busy: IfBusy) -> bool {
        if if_busy != IfBusy::WaitOut
            || self.claimed_in.load(Ordering::Relaxed) != thread::fork_generation()
        {
            return false;
        }
        probe!(waited_out);
        // The access under way ends without waiting on us; any it starts
        // after our barrier sees `REVOKING` and backs out (storing
        // `OUTSIDE`), so this loop ends when it does.
        let mut round = 0;
        while self.owner_inside() {
            back_off(&mut round);
        }
        true
    }

    /// Takes the caches of the owners of `slots` from this (other) thread.
    ///
    /// Returns the batches taken. A slot whose owner is inside an access is
    /// asked to flush (`FLUSH`: its owner hands its cache to the depot at its
    /// next access) or waited out, as `if_busy` says; every slot is asked to
    /// flush if the OS offers no process-wide barrier. Callers must not run
    /// two of these on one slot at once (the pool serialises them under its
    /// reclaim lock).
    pub(crate) fn revoke_remote<'a>(
        slots: impl IntoIterator<Item = &'a Self>,
        if_busy: IfBusy,
    ) -> Vec<Vec<T>>
    where
        T: 'a,
    {
        let revoking: Vec<&Self> = slots
            .into_iter()
            .filter(|slot| {
                [ACTIVE, FLUSH, TRIM].into_iter().any(|from| {
                    slot.state
                        .compare_exchange(from, REVOKING, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                })
            })
            .collect();
        if revoking.is_empty() {
            return Vec::new();
        }
        // One barrier for all of them: after it, an owner that was not inside an access
        // cannot start an access without seeing `REVOKING`.
        let fenced = heavy_fence();
        let mut taken = Vec::new();
        for slot in revoking {
            if !fenced || (slot.owner_inside() && !slot.waited_out(if_busy)) {
                slot.state.store(FLUSH, Ordering::Release);
                continue;
            }
            // SAFETY: the state is `REVOKING` (we stored it), and after the
            // barrier the owner was not inside an access (or we waited until
            // it left the one under way): any access it starts sees a state
            // other than `ACTIVE` and keeps off until we store `REVOKED`.
            // Only one revoker runs per slot.
            let batches = slot.cache.with_mut(|cache| unsafe { (*cache).take_all() });
            slot.low.store(0, Ordering::Relaxed);
            // Pairs with the owner's `Acquire` in `claim`: our writes to the
            // cache happen before its next access.
            slot.state.store(REVOKED, Ordering::Release);
            taken.extend(batches.into_iter().filter(|batch| !batch.is_empty()));
        }
        taken
    }
}

/// Proof that the current thread owns a slot: the only way to touch a cache
/// through a shared reference. `!Send`, so it cannot leave the thread.
pub(crate) struct LocalSlot<'a, T> {
    slot: &'a Slot<T>,
    _not_send: PhantomData<*const ()>,
}

impl<'a, T> LocalSlot<'a, T> {
    /// The slot, as seen by the thread whose id indexes it.
    ///
    /// # Safety
    ///
    /// * The calling thread's id indexes `slot` in its table, and the thread
    ///   has not released the id. (Only that thread can ever store `ACTIVE`
    ///   into the slot, so every access checked against `ACTIVE` is its own.)
    #[inline(always)]
    pub(crate) unsafe fn new(slot: &'a Slot<T>) -> Self {
        Self {
            slot,
            _not_send: PhantomData,
        }
    }

    /// Whether this thread has claimed the slot and it has not been revoked
    /// since (a hint: a revocation may follow at once).
    #[inline(always)]
    pub(crate) fn is_active(&self) -> bool {
        self.slot.state.load(Ordering::Relaxed) == ACTIVE
    }

    /// Whether this thread's exit already hands the slot's cache back
    /// ([`thread::watch`] was asked for the slot's pool).
    #[inline]
    pub(crate) fn is_watched(&self) -> bool {
        self.slot.watched.load(Ordering::Relaxed)
    }

    /// Records whether this thread's exit hands the slot's cache back: set
    /// once the pool is watched, cleared at thread exit, so the next
    /// thread with this id watches it again.
    #[inline]
    pub(crate) fn set_watched(&self, on: bool) {
        self.slot.watched.store(on, Ordering::Relaxed);
    }

    /// Claims the slot for the calling thread (or re-claims it after a
    /// revocation) and gives each half of the cache room for a batch,
    /// allocated outside the access bracket. Returns the batches the owner
    /// was asked to flush, if any, and the objects a trim request asked it
    /// to give back (the cache keeps the rest). The caller has arranged for
    /// [`release`](LocalSlot::release) to run at thread exit.
    #[cold]
    pub(crate) fn claim(&self, batch_size: usize) -> (Vec<Vec<T>>, Vec<T>) {
        self.slot
            .claimed_in
            .store(thread::fork_generation(), Ordering::Relaxed);
        let mut flushed = Vec::new();
        let mut trimmed = Vec::new();
        let mut waited = 0;
        loop {
            let state = self.slot.state.load(Ordering::Acquire);
            match state {
                ACTIVE => {}
                UNCLAIMED | REVOKED | FLUSH | TRIM => {
                    // `Acquire` pairs with the `Release` of whoever stored
                    // `state` (a previous owner, a revoker, `request_trim`):
                    // their writes (to the cache, the trim count) happen
                    // before ours.
                    if self
                        .slot
                        .state
                        .compare_exchange(state, ACTIVE, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                    if state == TRIM {
                        match self.trim_oldest(&mut trimmed) {
                            Ok(true) => return (flushed, trimmed),
                            // The request came between a take and its
                            // refill (a claim's, or a donation's new
                            // spare): install both halves afresh below.
                            Ok(false) => {}
                            // Revoked meanwhile: the revoker took the rest.
                            Err(Revoked) => continue,
                        }
                    }
                }
                _ => {
                    // REVOKING: a revoker is deciding. It never waits for us
                    // here: at most for an access under way, and we are
                    // outside one.
                    back_off(&mut waited);
                    continue;
                }
            }
            // Empty the cache as its owner (a flush request's batches go to
            // the caller; a revoked or released cache is already empty).
            let Ok(taken) = self.access((), |cache, ()| (cache.take_all(), Tally::Nothing)) else {
                continue;
            };
            let mut reuse = Vec::new();
            for batch in taken {
                if !batch.is_empty() {
                    flushed.push(batch);
                } else if batch.capacity() >= batch_size {
                    reuse.push(batch);
                }
            }
            // Outside the bracket: room for a batch in each half.
            let mut fresh = || {
                reuse
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(batch_size))
            };
            let halves = (fresh(), fresh());
            match self.access(halves, |cache, (loaded, spare)| {
                (cache.install(loaded, spare), Tally::Nothing)
            }) {
                // The replaced halves are unallocated: dropping them is free.
                // Emptied: nothing in it sat unused through this period.
                Ok(_) => {
                    self.note_low(0);
                    return (flushed, trimmed);
                }
                // Revoked meanwhile: claim again (the fresh halves go).
                Err(_) => continue,
            }
        }
    }

    /// Serves a trim request: moves the cache's oldest `trim` objects into
    /// `out` and begins a new period with what is left. `Ok(true)` if the
    /// cache still has both its halves, `Ok(false)` if it needs them
    /// installed, `Err` if it was revoked meanwhile.
    fn trim_oldest(&self, out: &mut Vec<T>) -> Result<bool, Revoked> {
        // The pass asked from counts it read a moment ago (and `low` and
        // `removed` are not read as one): what the owner removed from the
        // bottom since, or took down to, is not among the unused now.
        // Owner-only fields, read by their writer.
        let slot = self.slot;
        let removed_since = slot
            .removed
            .load(Ordering::Relaxed)
            .saturating_sub(slot.trim_removed.load(Ordering::Relaxed));
        let n = slot
            .trim
            .swap(0, Ordering::Relaxed)
            .saturating_sub(removed_since)
            .min(slot.low.load(Ordering::Relaxed));
        // Room made here, outside the bracket.
        out.reserve(n);
        let (left, installed) = self
            .access(out, |cache, out| {
                cache.take_oldest(n, out);
                ((cache.len(), cache.is_installed()), Tally::Nothing)
            })
            .map_err(|_| Revoked)?;
        // The pass read the last period's counts before it asked.
        self.slot.removed.store(0, Ordering::Relaxed);
        self.slot.low.store(left, Ordering::Release);
        Ok(installed)
    }

    /// Installs `batch` (a full batch from the depot, with room for a whole
    /// batch) as this cache's loaded batch, if both halves are empty;
    /// returns the emptied batch it replaces. Gives `batch` back if the
    /// cache is not empty or was revoked.
    pub(crate) fn install_loaded(&self, batch: Vec<T>) -> Result<Vec<T>, Vec<T>> {
        self.access(batch, |cache, batch| {
            (cache.install_loaded(batch), Tally::Nothing)
        })?
    }

    /// Takes the full spare batch out (to donate it); `Err` if revoked.
    /// The spare is the bottom of the cache: what it takes is counted as
    /// removed, not as a get (see the module docs).
    pub(crate) fn take_spare(&self) -> Result<Vec<T>, Revoked> {
        let spare = self
            .access((), |cache, ()| (cache.take_spare(), Tally::Nothing))
            .map_err(|()| Revoked)?;
        self.note_removed(spare.len());
        Ok(spare)
    }

    /// `k` objects left the bottom of the cache: counted as removed, and
    /// taken out of the unused. Owner only; `removed` first (see the
    /// field).
    fn note_removed(&self, k: usize) {
        let slot = self.slot;
        let removed = slot.removed.load(Ordering::Relaxed);
        slot.removed
            .store(removed.saturating_add(k), Ordering::Relaxed);
        let low = slot.low.load(Ordering::Relaxed);
        slot.low.store(low.saturating_sub(k), Ordering::Release);
    }

    /// The cache is empty (a get found nothing in it): its low-water mark
    /// is 0.
    pub(crate) fn note_empty(&self) {
        self.note_low(0);
    }

    /// The cache holds `left` objects now (a get took from the top): lowers
    /// the unused count the pass reads (`Slot::period`) to it. A plain load
    /// in the common case; a store only at a new low.
    #[inline(always)]
    fn note_low(&self, left: usize) {
        if left < self.slot.low.load(Ordering::Relaxed) {
            self.slot.low.store(left, Ordering::Relaxed);
        }
    }

    /// Installs an empty batch with room for a whole batch as the spare;
    /// gives it back if the cache was revoked meanwhile.
    pub(crate) fn install_spare(&self, empty: Vec<T>) -> Result<(), Vec<T>> {
        let replaced = self.access(empty, |cache, empty| {
            (cache.install_spare(empty), Tally::Nothing)
        })?;
        // Unallocated (see `take_spare`); dropped outside the bracket anyway.
        drop(replaced);
        Ok(())
    }

    /// The start of a bracketed access (see the module docs): publishes the
    /// entry, then checks the state. `false` (and the owner is outside
    /// again) if the slot is not claimed by this thread.
    #[inline(always)]
    fn enter(&self) -> bool {
        probe!(BeforeAccess);
        let slot = self.slot;
        // `Release`: a revoker that reads this entry also sees the counter
        // values it was computed from.
        let ops = slot.gets.read() + slot.returns.read();
        slot.entered.store(ops, Ordering::Release);
        light_fence();
        if slot.state.load(Ordering::Relaxed) != ACTIVE {
            // `Release` so that a revoker reading this sees our last access.
            slot.entered.store(OUTSIDE, Ordering::Release);
            return false;
        }
        probe!(inside = true);
        probe!(InsideAccess);
        true
    }

    /// The end of a bracketed access, `Release`: pairs with the revoker's
    /// `Acquire` loads, so our writes to the cache happen before its reads.
    #[inline(always)]
    fn leave(&self, tally: Tally) {
        probe!(inside = false);
        let slot = self.slot;
        match tally {
            Tally::Get => slot.gets.bump_release(),
            Tally::Return => slot.returns.bump_release(),
            Tally::Nothing => slot.entered.store(OUTSIDE, Ordering::Release),
        }
    }

    /// One bracketed access: runs `f` on the cache and ends by counting what
    /// `f` says. If the slot was revoked, `f` does not run and `arg` comes
    /// back untouched.
    #[inline(always)]
    fn access<A, R>(
        &self,
        arg: A,
        f: impl FnOnce(&mut LocalCache<T>, A) -> (R, Tally),
    ) -> Result<R, A> {
        if !self.enter() {
            return Err(arg);
        }
        // SAFETY: entered just above; left just below.
        let (out, tally) = unsafe { self.in_access(|cache| f(cache, arg)) };
        self.leave(tally);
        Ok(out)
    }

    /// Runs `f` on the cache.
    ///
    /// # Safety
    ///
    /// Only between an [`enter`](Self::enter) that returned `true` and the
    /// matching [`leave`](Self::leave).
    #[inline(always)]
    unsafe fn in_access<R>(&self, f: impl FnOnce(&mut LocalCache<T>) -> R) -> R {
        // SAFETY: the caller has entered (see `enter`), so:
        // * The state is `ACTIVE`, which only this thread stores (see `new`),
        //   and our entry is published: a revoker that stores `REVOKING` from
        //   now on sees `entered == gets + returns` after its barrier and
        //   keeps off; one that stored it before, `enter` saw.
        //   So no other thread touches the cache until the access ends.
        // * A `LocalSlot` cannot leave this thread, and `f` is crate code that
        //   does not call back into user code (nor allocate), so this thread
        //   cannot re-enter and alias the borrow while `f` runs.
        self.slot.cache.with_mut(|cache| f(unsafe { &mut *cache }))
    }

    // `pop`/`pop_loaded` and `push`/`push_loaded_from` (the latter of each
    // pair is the inlined fast path) spell the bracket out instead of going
    // through `access`: moving the object through `access`'s
    // `Result<(R, Tally), A>` layers keeps it in memory as a 24-byte blob,
    // which LLVM copies as 8 + 16 bytes. On the put side that 16-byte load of
    // the guard's `ptr, len` straddles the caller's fresh 8-byte store of
    // `len` (a store-forwarding stall); on the get side it adds a stack hop
    // (tidepool-bench `core_roundtrip` shows the difference).

    /// Takes an idle object from the cache and counts a get.
    #[inline(always)]
    pub(crate) fn pop(&self) -> Option<T> {
        self.pop_with(LocalCache::pop)
    }

    /// [`pop`](Self::pop) from the loaded batch only (the inlined fast path:
    /// see [`LocalCache::pop_loaded`]).
    #[inline(always)]
    pub(crate) fn pop_loaded(&self) -> Option<T> {
        self.pop_with(LocalCache::pop_loaded)
    }

    #[inline(always)]
    fn pop_with(&self, pop: impl FnOnce(&mut LocalCache<T>) -> Option<T>) -> Option<T> {
        if !self.enter() {
            return None;
        }
        // SAFETY: entered just above; left just below.
        let popped = unsafe {
            self.in_access(|cache| {
                let item = pop(cache)?;
                Some((item, cache.len()))
            })
        };
        match popped {
            Some((item, left)) => {
                self.leave(Tally::Get);
                self.note_low(left);
                Some(item)
            }
            // The caller's slow path notes the empty cache (`note_empty`).
            None => {
                self.leave(Tally::Nothing);
                None
            }
        }
    }

    /// Caches `item` and counts a return, or gives it back if both batches
    /// are full or the slot was revoked.
    #[inline(always)]
    pub(crate) fn push(&self, item: T, batch_size: usize) -> Result<(), T> {
        if !self.enter() {
            return Err(item);
        }
        // SAFETY: entered just above; left just below.
        let pushed = unsafe { self.in_access(|cache| cache.push(item, batch_size)) };
        self.leave(if pushed.is_ok() {
            Tally::Return
        } else {
            Tally::Nothing
        });
        pushed
    }

    /// Moves the object out of `item` into the loaded batch and counts a
    /// return; `false`, leaving `item` as it is, if that batch is full (see
    /// [`LocalCache::push_loaded_from`]) or the slot was revoked.
    ///
    /// # Safety
    ///
    /// `item` holds an object; once this returns `true` it has been taken,
    /// and the caller must not touch it again.
    #[inline(always)]
    pub(crate) unsafe fn push_loaded_from(
        &self,
        item: &mut ManuallyDrop<T>,
        batch_size: usize,
    ) -> bool {
        if !self.enter() {
            return false;
        }
        // SAFETY: entered just above, left just below; `item`: forwarded
        // from our caller.
        let pushed = unsafe { self.in_access(|cache| cache.push_loaded_from(item, batch_size)) };
        self.leave(if pushed {
            Tally::Return
        } else {
            Tally::Nothing
        });
        pushed
    }

    /// Counts a get served without the cache (a fresh object). `Release`,
    /// like every change of the counters: a revoker that sees it must also
    /// see the accesses before it.
    pub(crate) fn count_get(&self) {
        self.slot.gets.bump_release();
    }

    /// This slot's places under `max_live`, as its owner sees them.
    #[inline]
    pub(crate) fn credit(&self) -> &'a Credit {
        &self.slot.credit
    }

    /// Counts `n` objects created by this thread for one get: one miss.
    pub(crate) fn count_created(&self, n: u64) {
        self.slot.created.add_release(n);
        self.slot.misses.bump_release();
    }

    /// Counts an object made elsewhere that this thread adopted: a create
    /// and a get, no miss.
    pub(crate) fn count_adopted(&self) {
        self.slot.created.add_release(1);
        self.slot.gets.bump_release();
    }

    /// Counts `n` objects destroyed by this thread (the owner's counter:
    /// one load and one store).
    pub(crate) fn count_destroyed(&self, n: u64) {
        self.slot.destroyed.add_release(n);
    }

    /// Gives the slot up if a revoker took its cache (`REVOKED`: it holds
    /// nothing) or it was never claimed; `true` if it is given up
    /// (`UNCLAIMED`). A cache still claimed, or asked to flush or trim
    /// (it holds objects its owner hands over at its next access), is
    /// kept.
    pub(crate) fn give_up_if_revoked(&self) -> bool {
        let state = self.slot.state.load(Ordering::Acquire);
        state == UNCLAIMED
            || (state == REVOKED
                && self
                    .slot
                    .state
                    .compare_exchange(REVOKED, UNCLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok())
    }

    /// Gives the slot up at thread exit: empties the cache and lets the next
    /// thread with this id claim it. Returns the cached batches.
    pub(crate) fn release(self) -> Vec<Vec<T>> {
        let mut batches = Vec::new();
        let mut waited = 0;
        loop {
            let state = self.slot.state.load(Ordering::Acquire);
            match state {
                ACTIVE => {
                    if let Ok(taken) =
                        self.access((), |cache, ()| (cache.take_all(), Tally::Nothing))
                    {
                        batches.extend(taken.into_iter().filter(|b| !b.is_empty()));
                    }
                }
                FLUSH | TRIM => {
                    // Take it back first, then empty it as the owner.
                    let _ = self.slot.state.compare_exchange(
                        state,
                        ACTIVE,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    );
                    continue;
                }
                UNCLAIMED => return batches,
                REVOKED => {}
                _ => {
                    // REVOKING: as in `claim`.
                    back_off(&mut waited);
                    continue;
                }
            }
            // The cache is empty now (we emptied it, or a revoker did). A
            // revoker may still have slipped in; then try again.
            let from = if state == REVOKED { REVOKED } else { ACTIVE };
            if self
                .slot
                .state
                .compare_exchange(from, UNCLAIMED, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return batches;
            }
        }
    }
}
