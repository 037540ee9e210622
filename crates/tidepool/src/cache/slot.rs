//! One thread's cache in one pool: the owner-only [`LocalCache`] plus the few
//! fields other threads may read.

use std::marker::PhantomData;

use super::local::LocalCache;
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::{OwnerCounter, UnsafeCell};

/// No live thread owns the slot; its cache is empty.
const UNCLAIMED: u8 = 0;
/// The thread whose id indexes this slot owns it and alone touches the cache.
const ACTIVE: u8 = 1;

/// A thread cache. Slots live in a [`SlotTable`](super::SlotTable), each on
/// its own cache lines, indexed by thread id.
///
/// Ownership: while `state == ACTIVE`, only the thread that claimed the slot
/// reads or writes `cache` (through a [`LocalSlot`]). It gives the slot up at
/// thread exit by emptying the cache and storing `UNCLAIMED` with `Release`;
/// the next thread given the same id claims it after an `Acquire` load.
/// Whoever holds `&mut Slot` (the pool's `Drop`) may touch the cache too.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    state: AtomicU8,
    cache: UnsafeCell<LocalCache<T>>,
    /// Objects handed out by this slot's owners (hits and misses).
    gets: OwnerCounter,
    /// Objects given back to the pool by this slot's owners.
    returns: OwnerCounter,
}

// SAFETY: `Slot` is shared between threads only through `&Slot`, and the one
// field that is not already `Sync`, `cache`, is accessed only by the owning
// thread (enforced by `LocalSlot`, which is `!Send` and made only after the
// ownership check) or through `&mut Slot`. Objects move between threads
// through it, hence `T: Send`.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self {
            state: AtomicU8::new(UNCLAIMED),
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

    /// Whether the calling thread has already claimed the slot, given that
    /// the slot is the one indexed by the caller's own id: then `ACTIVE` can
    /// only have been stored by this thread (ids are unique among live
    /// threads, and the previous owner stored `UNCLAIMED` before its id was
    /// freed).
    #[inline(always)]
    fn is_mine(&self) -> bool {
        self.state.load(Ordering::Relaxed) == ACTIVE
    }

    /// Empties the cache; only with exclusive access (the pool is dropping).
    pub(crate) fn take_all_exclusive(&mut self) -> [Vec<T>; 2] {
        // SAFETY: `&mut self` means no other reference to the slot exists, so
        // nothing else can be touching the cache.
        self.cache.with_mut(|cache| unsafe { (*cache).take_all() })
    }
}

/// Proof that the current thread owns a slot: the only way to touch a cache
/// through a shared reference. `!Send`, so it cannot leave the thread.
pub(crate) struct LocalSlot<'a, T> {
    slot: &'a Slot<T>,
    _not_send: PhantomData<*const ()>,
}

impl<'a, T> LocalSlot<'a, T> {
    /// The slot, if the calling thread (whose id indexes `slot`) already owns
    /// it.
    #[inline(always)]
    pub(crate) fn mine(slot: &'a Slot<T>) -> Option<Self> {
        slot.is_mine().then_some(Self {
            slot,
            _not_send: PhantomData,
        })
    }

    /// Claims `slot` for the calling thread, whose id indexes it, and makes
    /// room for a batch in each half of the cache. The caller has arranged
    /// for [`release`](LocalSlot::release) to run when the thread exits.
    #[cold]
    pub(crate) fn claim(slot: &'a Slot<T>, batch_size: usize) -> Self {
        // Pairs with the previous owner's `Release` in `release`: its last
        // writes to the cache happen before ours.
        if slot.state.load(Ordering::Acquire) != ACTIVE {
            let me = Self {
                slot,
                _not_send: PhantomData,
            };
            me.with_cache(|cache| cache.reserve(batch_size));
            slot.state.store(ACTIVE, Ordering::Relaxed);
            return me;
        }
        Self {
            slot,
            _not_send: PhantomData,
        }
    }

    /// A slot whose owner is the calling thread but whose id this thread no
    /// longer advertises (its TLS is being destroyed).
    ///
    /// # Safety
    ///
    /// * The calling thread is the one that claimed `slot`, and has not yet
    ///   released it.
    pub(crate) unsafe fn exiting_owner(slot: &'a Slot<T>) -> Option<Self> {
        Self::mine(slot)
    }

    /// Runs `f` on the cache. `f` must not call out to user code (managers,
    /// drops of pooled objects), which could re-enter the pool on this thread
    /// and borrow the cache a second time.
    #[inline(always)]
    pub(crate) fn with_cache<R>(&self, f: impl FnOnce(&mut LocalCache<T>) -> R) -> R {
        // SAFETY:
        // * A `LocalSlot` exists only on the thread that owns the slot (checked
        //   in `mine`/`claim`, promised by `exiting_owner`'s caller) and cannot
        //   be sent elsewhere, so no other thread touches the cache now.
        // * `f` is crate code that does not call back into user code, so this
        //   thread cannot re-enter and alias the borrow while `f` runs.
        self.slot.cache.with_mut(|cache| f(unsafe { &mut *cache }))
    }

    /// Takes an idle object from the cache and counts a get.
    #[inline(always)]
    pub(crate) fn pop(&self) -> Option<T> {
        let item = self.with_cache(LocalCache::pop)?;
        self.slot.gets.bump_local();
        Some(item)
    }

    /// Caches `item` and counts a return, or gives it back if both batches
    /// are full.
    #[inline(always)]
    pub(crate) fn push(&self, item: T, batch_size: usize) -> Result<(), T> {
        self.with_cache(|cache| cache.push(item, batch_size))?;
        self.slot.returns.bump_local();
        Ok(())
    }

    /// Counts a get served without the cache (a fresh object).
    pub(crate) fn count_get(&self) {
        self.slot.gets.bump_local();
    }

    /// Gives the slot up: empties the cache and lets the next thread with
    /// this id claim it. Returns the cached batches.
    pub(crate) fn release(self) -> [Vec<T>; 2] {
        let batches = self.with_cache(LocalCache::take_all);
        self.slot.state.store(UNCLAIMED, Ordering::Release);
        batches
    }
}
