//! A pool's thread caches, indexed by thread id, found without a lock.
//!
//! ```text
//!  first:  [·][·] ... [·]                 ids 0..=14, in the table itself
//!  buckets[4] ──► 16 slot pointers        ids 15..=30
//!  buckets[k] ──► 2^k slot pointers       ids 2^k-1 ..= 2^(k+1)-2
//!                  │
//!                  └──► slot (null until its thread first takes a cache here)
//! ```
//!
//! The ids of buckets 0 to 3 (the first 15 threads) have their pointers in
//! the table, next to its id: a thread with no cache in the pool (at its
//! fill of caches, `cache/thread.rs`) finds that out without a load from
//! another allocation, which counts when a process holds thousands of pools.
//! Buckets double in size, so the table grows with the highest thread id ever
//! seen, never moves a slot (a thread's `&Slot` stays valid), and finding a
//! slot past the inline ones is a leading-zeros count and two pointer loads. A bucket holds
//! pointers, and each slot is allocated when its own thread first takes a
//! cache: a pool that a thread in some id range uses pays for that thread's
//! slot, not for the range's (a process with thousands of pools and threads
//! moving among them would otherwise keep a bucket of slots per pool for
//! each range any thread of it ever touched). Thread ids are recycled
//! smallest-first, so the table stays about as big as the largest number of
//! threads that ever used the pool at once.
//!
//! A slot is freed at its thread's exit (`cache/thread.rs`: in the pools
//! the thread lists and in those a sweep dropped from its list), by that
//! thread only ([`retire`](SlotTable::retire)), and only while no other
//! thread walks the table: every walk holds `walkers` for reading
//! ([`Walk`]); the free takes it for writing and gives up at once if it
//! cannot (a walk in progress, or one that a fork left held in the child).
//! The free holds a share of the fork gate (`reclaim/fork.rs`), so a fork
//! never leaves the lock held for writing: the child's walks would wait
//! for a thread it does not have.
//! A slot not freed then stays for the next thread with that id, or until
//! the table drops.
//!
//! ```text
//!  walk:   walkers.read()  ⇒  no slot it sees is freed before it ends
//!  retire: walkers.try_write(), fold the counts, unpublish, unlock, free
//! ```

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use crossbeam_utils::CachePadded;

use super::slot::Slot;
use super::thread;
use crate::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::sync::process::{AtomicU64, Ordering as ProcessOrdering};
use crate::sync::{RwLock, RwLockReadGuard};

/// Buckets for ids `0..MAX_TIDS`: more threads than any system lets live
/// at once (ids are recycled smallest-first, so an id is below the number
/// of threads alive when it was handed out). A thread with a larger id
/// has no slot in any table and takes the slot-less path (`covers`). Not
/// one per bit of `usize`: the pointers are in every pool's shared state.
const BUCKETS: usize = 31;

/// One past the largest id a table holds a slot for.
const MAX_TIDS: usize = (1 << BUCKETS) - 1;

/// Buckets `0..INLINE_BUCKETS` live in [`SlotTable::first`]. One under
/// loom, whose models run a few threads: their ids then reach the buckets,
/// so that publishing a bucket is model-checked too.
const INLINE_BUCKETS: usize = if cfg!(loom) { 1 } else { 4 };

/// The ids whose slot pointers live in [`SlotTable::first`].
const INLINE: usize = (1 << INLINE_BUCKETS) - 1;

/// One slot, on cache lines of its own.
type Padded<T> = CachePadded<Slot<T>>;

/// Thread caches of one pool. `first[tid]` (`tid < INLINE`) and the entries
/// of `buckets[k]` (`k >= INLINE_BUCKETS`, null or `2^k` slot pointers) are
/// each null or a slot allocated by [`get_or_alloc`](Self::get_or_alloc).
/// `repr(C)`: the id and `first` lead, on the table's first lines.
#[repr(C)]
pub(crate) struct SlotTable<T> {
    /// This table's id: unique in the process and never reused, so a
    /// thread that remembers `(id, slot)` ([`thread::remembered`]) can
    /// trust a match for as long as the table lives (slots never move, and
    /// only their own thread frees them, forgetting the pair first).
    id: u64,
    first: [AtomicPtr<Padded<T>>; INLINE],
    /// `buckets[..INLINE_BUCKETS]` stay null.
    buckets: [AtomicPtr<AtomicPtr<Padded<T>>>; BUCKETS],
    /// One past the highest bucket ever published: walks stop there instead
    /// of loading all `BUCKETS` pointers.
    high: AtomicUsize,
    /// Held for reading by every walk over other threads' slots ([`Walk`]),
    /// for writing by an owner freeing its own ([`retire`](Self::retire)).
    walkers: RwLock<()>,
    /// The table owns the slots (and through them, cached objects).
    _owns: PhantomData<Box<Padded<T>>>,
}

/// Which bucket holds `tid`, and where in it.
#[inline(always)]
fn locate(tid: usize) -> (usize, usize) {
    let n = tid + 1;
    let bucket = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (bucket, n - (1 << bucket))
}

#[cfg(test)]
std::thread_local! {
    /// Lookups of the calling thread's slot in some table (`local_slow`)
    /// so far, for the tests that count the work of a slot-less get.
    static LOOKUPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread has looked its slot up in a table.
#[cfg(test)]
pub(crate) fn lookups() -> u64 {
    LOOKUPS.with(std::cell::Cell::get)
}

impl<T> SlotTable<T> {
    pub(crate) fn new() -> Self {
        // Ids are only compared, never ordered, and a u64 does not wrap.
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT_ID.fetch_add(1, ProcessOrdering::Relaxed),
            first: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            buckets: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            high: AtomicUsize::new(0),
            walkers: RwLock::new(()),
            _owns: PhantomData,
        }
    }

    /// The slot for `tid`, if it was allocated.
    ///
    /// # Safety
    ///
    /// `tid` is the calling thread's own id (only that thread frees the
    /// slot, [`retire`](Self::retire)), and the reference is not used after
    /// that thread frees it.
    #[inline(always)]
    pub(crate) unsafe fn get(&self, tid: usize) -> Option<&Slot<T>> {
        // SAFETY: `slot_ptr` points at a live, initialised slot, which
        // only its own thread (the caller, by the contract) frees.
        self.slot_ptr(tid).map(|slot| unsafe { &**slot })
    }

    /// Whether a table holds a slot for the thread with id `tid`
    /// (`tid < MAX_TIDS`); [`get_or_alloc`](Self::get_or_alloc) must not be
    /// asked for any other.
    #[inline(always)]
    pub(crate) fn covers(tid: usize) -> bool {
        tid < MAX_TIDS
    }

    /// The entry of `tid` in its bucket, if the bucket exists.
    #[inline(always)]
    fn entry(&self, tid: usize) -> Option<&AtomicPtr<Padded<T>>> {
        if tid < INLINE {
            return Some(&self.first[tid]);
        }
        if !Self::covers(tid) {
            return None;
        }
        let (bucket, index) = locate(tid);
        // Pairs with the `AcqRel` publication in `get_or_alloc`: the
        // bucket's entries are initialised before we read them.
        let base = self.buckets[bucket].load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a non-null bucket pointer always comes from
        // `get_or_alloc`, which stores a live allocation of exactly
        // `1 << bucket` entries; `index < 1 << bucket` by construction of
        // `locate`; buckets are freed only in `Drop`, which has `&mut self`.
        Some(unsafe { &*base.add(index) })
    }

    /// Where the slot for `tid` lives, if it was allocated: the raw pointer
    /// the allocation gave (no reference in between), so a copy kept
    /// across calls stays valid under the aliasing rules even after
    /// `for_each_mut` has handed out `&mut` to the slot in between.
    #[inline(always)]
    fn slot_ptr(&self, tid: usize) -> Option<*const Padded<T>> {
        // Pairs with the `AcqRel` publication of the slot in
        // `get_or_alloc`: it is initialised before we read it. A non-null
        // slot pointer comes from `Box::into_raw` and is freed only in
        // `Drop` (`&mut self`) or by its own thread in `retire`: it outlives
        // the owner's borrow, and a walk's (`walkers`).
        let slot = self.entry(tid)?.load(Ordering::Acquire);
        (!slot.is_null()).then_some(slot.cast_const())
    }

    /// This table's id (see `id`), which its owner keeps a copy of where
    /// its hot paths read it, and passes to [`local`](Self::local) and
    /// [`remembered`](Self::remembered).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The calling thread's slot, if it has an id and the slot exists:
    /// remembered from the last lookup in this table (the common case, two
    /// thread-local loads and a compare), else looked up and remembered.
    ///
    /// # Safety
    ///
    /// `id == self.id()`.
    #[inline(always)]
    pub(crate) unsafe fn local(&self, id: u64) -> Option<&Slot<T>> {
        // SAFETY: the caller's contract.
        unsafe { self.remembered(id) }.or_else(|| self.local_slow())
    }

    /// The calling thread's slot if it is the one remembered (see
    /// [`local`](Self::local)); `None` otherwise, without looking it up:
    /// the fast paths, which leave every other case to a cold path that
    /// calls `local`.
    ///
    /// # Safety
    ///
    /// `id == self.id()`: the owner's copy, read on its own hot line
    /// instead of this table's.
    #[inline(always)]
    pub(crate) unsafe fn remembered(&self, id: u64) -> Option<&Slot<T>> {
        debug_assert_eq!(id, self.id);
        let (table, slot) = thread::remembered();
        if table == id {
            // SAFETY: `remember` stored this pair in `local_slow` below:
            // `slot` came from `self.slot_ptr(tid)` for this thread's id, which
            // it has not released since (its release forgets the pair).
            // Ids are never reused, and `id` is this table's (the caller's
            // contract), so the match means this very table; its slots
            // never move, and this one is freed only by this thread, at its
            // exit, which forgets the pair first. A table's id is
            // never 0, so `slot` was stored with it (not the dangling
            // placeholder).
            return Some(unsafe { &**slot.cast::<Padded<T>>().as_ptr() });
        }
        None
    }

    #[cold]
    #[inline(never)]
    fn local_slow(&self) -> Option<&Slot<T>> {
        #[cfg(test)]
        LOOKUPS.with(|n| n.set(n.get() + 1));
        // The raw pointer, not one made from a `&Slot`: it is used again in
        // later calls, after other borrows of the slot came and went.
        let Some(slot) = self.slot_ptr(thread::current_tid()?) else {
            thread::note_absent(self.id);
            return None;
        };
        // Never null: `slot_ptr` returns only non-null slot pointers.
        thread::remember(self.id, NonNull::new(slot.cast_mut().cast())?);
        // SAFETY: as in `get`.
        Some(unsafe { &**slot })
    }

    /// The slot for `tid`, allocating it (and its bucket, if this is the
    /// first thread with an id in that range) if it does not exist yet.
    ///
    /// `tid` is one the table [`covers`](Self::covers) (panics otherwise).
    ///
    /// # Safety
    ///
    /// As for [`get`](Self::get).
    #[cold]
    pub(crate) unsafe fn get_or_alloc(&self, tid: usize) -> &Slot<T> {
        assert!(
            Self::covers(tid),
            "thread id {tid} past the table's buckets"
        );
        // SAFETY: the caller's contract.
        if let Some(slot) = unsafe { self.get(tid) } {
            return slot;
        }
        thread::forget_absent();
        let (bucket, _) = locate(tid);
        if tid >= INLINE && self.buckets[bucket].load(Ordering::Acquire).is_null() {
            let fresh: Box<[AtomicPtr<Padded<T>>]> = (0..1usize << bucket)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect();
            let fresh = Box::into_raw(fresh).cast::<AtomicPtr<Padded<T>>>();
            if let Err(_other) = self.buckets[bucket].compare_exchange(
                ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // Another thread in the same range won the race; use its
                // bucket.
                // SAFETY: `fresh` came from `Box::into_raw` of a slice of
                // `1 << bucket` entries just above and was never published.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, 1 << bucket)) });
            }
            self.high.fetch_max(bucket + 1, Ordering::AcqRel);
        }
        let entry = self.entry(tid).expect("bucket was just published");
        let fresh = Box::into_raw(Box::new(Padded::<T>::default()));
        if let Err(_other) =
            entry.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // Only the thread with id `tid` allocates its slot, so this is
            // not expected; should it happen, the published slot stays.
            // SAFETY: `fresh` came from `Box::into_raw` just above and was
            // never published.
            drop(unsafe { Box::from_raw(fresh) });
        }
        // SAFETY: the caller's contract.
        unsafe { self.get(tid) }.expect("slot was just published")
    }

    /// Runs `f` on every slot that exists, with its id, in id order: the
    /// raw pointers the allocations gave (see `slot_ptr`). Plain loops over
    /// the inline entries and the published buckets: the reclaimer walks
    /// every pool's table several times a pass, and a table nearly always
    /// holds a few slots or none.
    #[inline(always)]
    fn each_slot_ptr(&self, mut f: impl FnMut(usize, *mut Padded<T>)) {
        for (tid, entry) in self.first.iter().enumerate() {
            let slot = entry.load(Ordering::Acquire);
            if !slot.is_null() {
                f(tid, slot);
            }
        }
        let high = self.high.load(Ordering::Acquire);
        for bucket in INLINE_BUCKETS..high {
            let base = self.buckets[bucket].load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            let first_id = (1usize << bucket) - 1;
            for index in 0..1usize << bucket {
                // SAFETY: as in `entry`: a published bucket holds
                // `1 << bucket` initialised entries, freed only in `Drop`,
                // so they live as long as `&self`.
                let slot = unsafe { &*base.add(index) }.load(Ordering::Acquire);
                if !slot.is_null() {
                    f(first_id + index, slot);
                }
            }
        }
    }

    /// Every slot that exists, with the id it belongs to; no slot is freed
    /// while the walk runs.
    pub(crate) fn for_each(&self, f: impl FnMut(usize, &Slot<T>)) {
        self.walk().for_each(f);
    }

    /// A walk over the slots that may outlast one [`for_each`](Self::for_each)
    /// call: the slots it hands out stay allocated until it is dropped.
    pub(crate) fn walk(&self) -> Walk<'_, T> {
        Walk {
            table: self,
            _read: self.walkers.read(),
        }
    }

    /// Frees the calling thread's slot, if it has one and no walk is in
    /// progress, running `fold` on it first while no walk can start: the
    /// caller moves the slot's counts into the pool's there, so that every
    /// walk sees them in one place or the other, never both or neither.
    /// `false` (the slot stays) if a walk holds the table.
    ///
    /// # Safety
    ///
    /// `tid` is the calling thread's own id; the thread holds no reference
    /// to the slot, in this frame or any frame up its stack, and has
    /// forgotten it ([`thread::forget`]); the slot's cache holds no object
    /// (its drop would not run the manager's `destroy`).
    pub(crate) unsafe fn retire(&self, tid: usize, fold: impl FnOnce(&Slot<T>)) -> bool {
        let Some(entry) = self.entry(tid) else {
            return false;
        };
        #[cfg(not(loom))]
        let gate = crate::reclaim::fork::hold_at_exit();
        let Some(write) = self.walkers.try_write() else {
            return false;
        };
        let slot = entry.load(Ordering::Acquire);
        if slot.is_null() {
            return false;
        }
        // SAFETY: a non-null entry is a live slot (see `slot_ptr`).
        fold(unsafe { &**slot });
        // Only this thread publishes or unpublishes its entry, and no walk
        // runs (the write lock): nobody else can hold the slot now.
        entry.store(ptr::null_mut(), Ordering::Release);
        drop(write);
        #[cfg(not(loom))]
        drop(gate);
        // SAFETY: published by `get_or_alloc` from `Box::into_raw`, now
        // unpublished; the owner (the caller) holds no reference to it, and
        // a walk that starts from here on reads the null entry.
        drop(unsafe { Box::from_raw(slot) });
        true
    }

    /// How many slots exist now.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        let mut n = 0;
        self.for_each(|_, _| n += 1);
        n
    }

    /// Every slot, with exclusive access.
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut Slot<T>)) {
        self.each_slot_ptr(|_, slot| {
            // SAFETY: as in `for_each`, plus `&mut self` means no other
            // reference to any slot exists (slots are allocations of their
            // own, apart from the table the walk reads).
            f(unsafe { &mut **slot })
        });
    }
}

/// A walk over a table's slots ([`SlotTable::walk`]): while it lives, no
/// slot is freed.
pub(crate) struct Walk<'a, T> {
    table: &'a SlotTable<T>,
    _read: RwLockReadGuard<'a, ()>,
}

impl<T> Walk<'_, T> {
    /// Every slot that exists, with the id it belongs to.
    pub(crate) fn for_each<'w>(&'w self, mut f: impl FnMut(usize, &'w Slot<T>)) {
        self.table.each_slot_ptr(|tid, slot| {
            // SAFETY: a non-null entry is a live slot (see `slot_ptr`), and
            // stays one while `self` holds `walkers` for reading.
            f(tid, unsafe { &*slot })
        });
    }
}

impl<T> Drop for SlotTable<T> {
    fn drop(&mut self) {
        self.each_slot_ptr(|_, slot| {
            // SAFETY: `slot` was published by `get_or_alloc` from
            // `Box::into_raw`, and `&mut self` means nothing borrows it any
            // more; the walk reads the buckets, freed only below.
            drop(unsafe { Box::from_raw(slot) })
        });
        let high = self.high.load(Ordering::Acquire);
        for (bucket, ptr) in self.buckets[..high].iter().enumerate() {
            let base = ptr.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            // SAFETY: `base` was published by `get_or_alloc` from
            // `Box::into_raw` of a slice of `1 << bucket` entries, and
            // `&mut self` means nothing borrows it any more.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, 1 << bucket)) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `tid`'s slot in `table`. The tests free a slot only while they hold
    /// no reference to it.
    fn slot_of<T>(table: &SlotTable<T>, tid: usize) -> Option<&Slot<T>> {
        // SAFETY: see above; no other thread frees these slots.
        unsafe { table.get(tid) }
    }

    /// `tid`'s slot in `table`, allocated if need be (as `slot_of`).
    fn alloc<T>(table: &SlotTable<T>, tid: usize) -> &Slot<T> {
        // SAFETY: as in `slot_of`.
        unsafe { table.get_or_alloc(tid) }
    }

    /// The calling thread's slot in `table`, as its owner looks it up.
    fn local<T>(table: &SlotTable<T>) -> Option<&Slot<T>> {
        // SAFETY: the table's own id.
        unsafe { table.local(table.id()) }
    }

    #[test]
    fn ids_map_to_distinct_slots_in_doubling_buckets() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(1), (1, 0));
        assert_eq!(locate(2), (1, 1));
        assert_eq!(locate(3), (2, 0));
        assert_eq!(locate(6), (2, 3));
        assert_eq!(locate(7), (3, 0));
        assert_eq!(
            locate(MAX_TIDS - 1),
            (BUCKETS - 1, (1 << (BUCKETS - 1)) - 1)
        );
        assert_eq!(locate(MAX_TIDS).0, BUCKETS, "the first id past them");
    }

    #[test]
    fn ids_past_the_buckets_have_no_slot() {
        let table = SlotTable::<u32>::new();
        for tid in [MAX_TIDS, MAX_TIDS + 1, usize::MAX - 1] {
            assert!(!SlotTable::<u32>::covers(tid));
            assert!(slot_of(&table, tid).is_none(), "{tid}");
        }
        assert!(SlotTable::<u32>::covers(MAX_TIDS - 1));
        assert!(
            slot_of(&table, MAX_TIDS - 1).is_none(),
            "covered, not allocated"
        );
    }

    #[test]
    fn a_remembered_slot_is_found_only_in_its_own_table() {
        std::thread::spawn(|| {
            let tid = thread::current_tid_or_register().unwrap();
            let a = SlotTable::<u32>::new();
            assert!(local(&a).is_none(), "no bucket yet");
            let in_a: *const Slot<u32> = alloc(&a, tid);
            assert!(std::ptr::eq(local(&a).unwrap(), in_a));
            assert!(std::ptr::eq(local(&a).unwrap(), in_a), "remembered");
            // Another table, alive at once, and then one made after `a` is
            // gone (maybe at `a`'s address): each finds its own slot.
            let b = SlotTable::<u32>::new();
            let in_b: *const Slot<u32> = alloc(&b, tid);
            assert!(std::ptr::eq(local(&b).unwrap(), in_b));
            assert!(std::ptr::eq(local(&a).unwrap(), in_a));
            drop(a);
            let c = SlotTable::<u32>::new();
            assert!(local(&c).is_none(), "nothing of `a` leaks into `c`");
            let in_c: *const Slot<u32> = alloc(&c, tid);
            assert!(std::ptr::eq(local(&c).unwrap(), in_c));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn slots_are_allocated_on_demand_and_stable() {
        let table = SlotTable::<u32>::new();
        assert!(slot_of(&table, 5).is_none());
        let a = alloc(&table, 5) as *const Slot<u32>;
        let b = alloc(&table, 5) as *const Slot<u32>;
        assert_eq!(a, b);
        assert!(
            slot_of(&table, 3).is_none(),
            "its own slot only, not its bucket's"
        );
        assert!(slot_of(&table, 0).is_none());
        let c = alloc(&table, 3) as *const Slot<u32>;
        assert_ne!(a, c);
        let mut ids = Vec::new();
        table.for_each(|id, slot| {
            assert!(std::ptr::eq(slot, slot_of(&table, id).unwrap()));
            ids.push(id);
        });
        assert_eq!(ids, [3, 5]);
        assert_eq!(slot_of(&table, 5).map(|s| s as *const Slot<u32>), Some(a));
    }

    #[test]
    fn a_slot_is_freed_only_while_no_walk_holds_the_table() {
        let table = SlotTable::<u32>::new();
        for tid in [2, 40] {
            let _ = alloc(&table, tid);
        }
        let mut folded = Vec::new();
        {
            let walk = table.walk();
            let mut seen = 0;
            walk.for_each(|_, _| seen += 1);
            // SAFETY: no reference to the slot is held, and it caches
            // nothing (a `u32` table's slot is never filled here).
            assert!(!unsafe { table.retire(40, |_| folded.push(40)) });
            assert_eq!((seen, table.allocated()), (2, 2), "the walk's slots stay");
        }
        // SAFETY: as above.
        assert!(unsafe { table.retire(40, |_| folded.push(40)) });
        // SAFETY: as above; nothing is left to free.
        assert!(!unsafe { table.retire(40, |_| folded.push(40)) });
        // SAFETY: as above; an id that never had a slot.
        assert!(!unsafe { table.retire(7, |_| folded.push(7)) });
        assert_eq!(folded, [40], "folded once, by the free that happened");
        assert!(slot_of(&table, 40).is_none() && slot_of(&table, 2).is_some());
        assert_eq!(table.allocated(), 1);
        // The id's next owner gets a fresh slot.
        let _ = alloc(&table, 40);
        assert_eq!(table.allocated(), 2);
    }

    #[test]
    fn ids_past_the_inline_ones_live_in_buckets_and_every_walk_sees_both() {
        let mut table = SlotTable::<u32>::new();
        let ids = [0, INLINE - 1, INLINE, 40, 3];
        for id in ids {
            let _ = alloc(&table, id);
        }
        assert!(table.buckets[..INLINE_BUCKETS]
            .iter()
            .all(|b| b.load(Ordering::Relaxed).is_null()));
        assert!(!table.buckets[INLINE_BUCKETS]
            .load(Ordering::Relaxed)
            .is_null());
        let mut seen = Vec::new();
        table.for_each(|id, slot| {
            assert!(std::ptr::eq(slot, slot_of(&table, id).unwrap()));
            seen.push(id);
        });
        assert_eq!(seen, [0, 3, INLINE - 1, INLINE, 40]);
        let mut n = 0;
        table.for_each_mut(|_| n += 1);
        assert_eq!(n, ids.len());
        assert!(slot_of(&table, 1).is_none() && slot_of(&table, 41).is_none());
    }
}
