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
//! | `REVOKING` | `REVOKED` | remote | owner not busy after the barrier: cache taken |
//! | `REVOKING` | `FLUSH` | remote | owner busy, or no barrier available |
//! | `REVOKED`, `FLUSH` | `ACTIVE` | owner | its next access (`FLUSH`: it hands its batches to the depot) |
//! | any but `REVOKING` | `UNCLAIMED` | owner | thread exit ([`LocalSlot::release`]) |
//!
//! * `UNCLAIMED`: no live thread owns the slot; its cache is empty.
//! * `ACTIVE`: the thread whose id indexes the slot owns it; only it touches
//!   the cache.
//! * `REVOKING`: a remote thread is deciding whether it may take the cache;
//!   the owner keeps off and waits in its slow path.
//! * `REVOKED`: the cache was taken (it is empty); the owner re-claims it
//!   before its next access.
//! * `FLUSH`: the owner was busy when asked; it hands its cache to the depot
//!   at its next access.
//!
//! # The asymmetric fence
//!
//! Every owner access is bracketed: `busy = 1`, compiler fence, check
//! `state == ACTIVE`, touch the cache, `busy = 0` (`Release`). A remote
//! revoker stores `REVOKING`, runs one process-wide barrier
//! ([`heavy_fence`](crate::sync::heavy_fence), `membarrier(2)`), then reads
//! `busy`. The barrier guarantees that either the owner's check sees
//! `REVOKING`, or the revoker sees `busy == 1`; so the revoker takes the cache
//! only when the owner is outside its access and cannot start a new one. The
//! owner's fast path pays two plain stores and a compiler fence; no atomic
//! read-modify-write, no hardware fence.

use std::marker::PhantomData;

use super::local::LocalCache;
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::{heavy_fence, light_fence, yield_now, OwnerCounter, UnsafeCell};

const UNCLAIMED: u8 = 0;
const ACTIVE: u8 = 1;
const REVOKING: u8 = 2;
const REVOKED: u8 = 3;
const FLUSH: u8 = 4;

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
    /// 1 while the owner touches the cache; written only by the owner.
    busy: AtomicU8,
    cache: UnsafeCell<LocalCache<T>>,
    /// Objects handed out by this slot's owners (hits and misses).
    gets: OwnerCounter,
    /// Objects given back to the pool by this slot's owners.
    returns: OwnerCounter,
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
            busy: AtomicU8::new(0),
            cache: UnsafeCell::new(LocalCache::new()),
            gets: OwnerCounter::default(),
            returns: OwnerCounter::default(),
        }
    }
}

impl<T> Slot<T> {
    /// Objects handed out, given back: `(gets, returns)`. May lag the owner by
    /// the operation it is doing.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.gets.read(), self.returns.read())
    }

    /// Whether some thread owns the slot and may hold objects in it.
    pub(crate) fn is_owned(&self) -> bool {
        matches!(self.state.load(Ordering::Relaxed), ACTIVE | FLUSH)
    }

    /// Empties the cache; only with exclusive access (the pool is dropping).
    pub(crate) fn take_all_exclusive(&mut self) -> [Vec<T>; 2] {
        // SAFETY: `&mut self` means no other reference to the slot exists, so
        // nothing else can be touching the cache.
        self.cache.with_mut(|cache| unsafe { (*cache).take_all() })
    }

    /// Takes the caches of the owners of `slots` from this (other) thread.
    ///
    /// Returns the batches taken. A slot whose owner is inside an access, or
    /// every slot if the OS offers no process-wide barrier, is asked to
    /// flush instead (`FLUSH`): its owner hands its cache to the depot at its
    /// next access. Callers must not run two of these on one slot at once
    /// (the pool serialises them under its reclaim lock).
    pub(crate) fn revoke_remote<'a>(slots: impl IntoIterator<Item = &'a Self>) -> Vec<Vec<T>>
    where
        T: 'a,
    {
        let revoking: Vec<&Self> = slots
            .into_iter()
            .filter(|slot| {
                [ACTIVE, FLUSH].into_iter().any(|from| {
                    slot.state
                        .compare_exchange(from, REVOKING, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                })
            })
            .collect();
        if revoking.is_empty() {
            return Vec::new();
        }
        // One barrier for all of them: after it, an owner that was not busy
        // cannot start an access without seeing `REVOKING`.
        let fenced = heavy_fence();
        let mut taken = Vec::new();
        for slot in revoking {
            // Pairs with the owner's `Release` store of `busy = 0`: its
            // writes to the cache happen before our reads.
            if !fenced || slot.busy.load(Ordering::Acquire) != 0 {
                slot.state.store(FLUSH, Ordering::Release);
                continue;
            }
            // SAFETY: the state is `REVOKING` (we stored it), and after the
            // barrier the owner was not busy: it is outside `with_cache` and
            // any access it starts sees a state other than `ACTIVE` and keeps
            // off until we store `REVOKED`. Only one revoker runs per slot.
            let batches = slot.cache.with_mut(|cache| unsafe { (*cache).take_all() });
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

    /// Claims the slot for the calling thread (or re-claims it after a
    /// revocation) and makes room for a batch in each half of the cache.
    /// Returns the batches the owner was asked to flush, if any. The caller
    /// has arranged for [`release`](LocalSlot::release) to run at thread exit.
    #[cold]
    pub(crate) fn claim(&self, batch_size: usize) -> Vec<Vec<T>> {
        let mut flushed = Vec::new();
        loop {
            let state = self.slot.state.load(Ordering::Acquire);
            match state {
                ACTIVE => {}
                UNCLAIMED | REVOKED | FLUSH => {
                    // `Acquire` pairs with the `Release` of whoever stored
                    // `state` (a previous owner, a revoker): their writes to
                    // the cache happen before ours.
                    if self
                        .slot
                        .state
                        .compare_exchange(state, ACTIVE, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                }
                _ => {
                    // REVOKING: a revoker is deciding; it never waits for us.
                    yield_now();
                    continue;
                }
            }
            let done = self.with_cache(|cache| {
                if state == FLUSH {
                    flushed.extend(cache.take_all().into_iter().filter(|b| !b.is_empty()));
                }
                cache.reserve(batch_size);
            });
            if done.is_ok() {
                return flushed;
            }
        }
    }

    /// Runs `f` on the cache, unless the slot is not (or no longer) claimed
    /// by this thread. `f` must not call out to user code (managers, drops of
    /// pooled objects), which could re-enter the pool on this thread and
    /// borrow the cache a second time.
    #[inline(always)]
    pub(crate) fn with_cache<R>(
        &self,
        f: impl FnOnce(&mut LocalCache<T>) -> R,
    ) -> Result<R, Revoked> {
        self.with_cache_taking((), |cache, ()| f(cache))
            .map_err(|()| Revoked)
    }

    /// [`with_cache`](LocalSlot::with_cache) for a closure that consumes
    /// `arg`: if the slot was revoked, `arg` comes back untouched.
    #[inline(always)]
    pub(crate) fn with_cache_taking<A, R>(
        &self,
        arg: A,
        f: impl FnOnce(&mut LocalCache<T>, A) -> R,
    ) -> Result<R, A> {
        let slot = self.slot;
        slot.busy.store(1, Ordering::Relaxed);
        light_fence();
        if slot.state.load(Ordering::Relaxed) != ACTIVE {
            slot.busy.store(0, Ordering::Relaxed);
            return Err(arg);
        }
        // SAFETY:
        // * The state is `ACTIVE`, which only this thread stores (see `new`),
        //   and we are marked busy: a revoker that stores `REVOKING` from now
        //   on sees `busy == 1` after its barrier and keeps off; one that
        //   stored it before, we would have seen above. So no other thread
        //   touches the cache until `busy` is cleared.
        // * A `LocalSlot` cannot leave this thread, and `f` is crate code that
        //   does not call back into user code, so this thread cannot re-enter
        //   and alias the borrow while `f` runs.
        let out = slot.cache.with_mut(|cache| f(unsafe { &mut *cache }, arg));
        // Pairs with the revoker's `Acquire` load of `busy`.
        slot.busy.store(0, Ordering::Release);
        Ok(out)
    }

    /// Takes an idle object from the cache and counts a get.
    #[inline(always)]
    pub(crate) fn pop(&self) -> Option<T> {
        let item = self.with_cache(LocalCache::pop).ok().flatten()?;
        self.slot.gets.bump_local();
        Some(item)
    }

    /// Caches `item` and counts a return, or gives it back if both batches
    /// are full or the slot was revoked.
    #[inline(always)]
    pub(crate) fn push(&self, item: T, batch_size: usize) -> Result<(), T> {
        self.with_cache_taking(item, |cache, item| cache.push(item, batch_size))
            .and_then(|pushed| pushed)?;
        self.slot.returns.bump_local();
        Ok(())
    }

    /// Counts a get served without the cache (a fresh object, a slot-less
    /// path).
    pub(crate) fn count_get(&self) {
        self.slot.gets.bump_local();
    }

    /// Gives the slot up at thread exit: empties the cache and lets the next
    /// thread with this id claim it. Returns the cached batches.
    pub(crate) fn release(self) -> Vec<Vec<T>> {
        let mut batches = Vec::new();
        loop {
            let state = self.slot.state.load(Ordering::Acquire);
            match state {
                ACTIVE => {
                    if let Ok(taken) = self.with_cache(LocalCache::take_all) {
                        batches.extend(taken.into_iter().filter(|b| !b.is_empty()));
                    }
                }
                FLUSH => {
                    // Take it back first, then empty it as the owner.
                    let _ = self.slot.state.compare_exchange(
                        FLUSH,
                        ACTIVE,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    );
                    continue;
                }
                UNCLAIMED => return batches,
                REVOKED => {}
                _ => {
                    yield_now();
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
