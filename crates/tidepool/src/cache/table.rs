//! A pool's thread caches, indexed by thread id, found without a lock.
//!
//! ```text
//!  buckets[0] ──► [slot 0]                      ids 0
//!  buckets[1] ──► [slot 1][slot 2]              ids 1..=2
//!  buckets[2] ──► [slot 3][slot 4][slot 5][..]  ids 3..=6
//!  buckets[k] ──► 2^k slots                     ids 2^k-1 ..= 2^(k+1)-2
//!  (null until a thread with an id in that range first uses the pool)
//! ```
//!
//! Buckets double in size, so the table grows with the highest thread id ever
//! seen, never moves a slot (a thread's `&Slot` stays valid), and finding a
//! slot is a leading-zeros count plus one pointer load. Thread ids are
//! recycled smallest-first, so the table stays about as big as the largest
//! number of threads that ever used the pool at once.

use std::marker::PhantomData;
use std::ptr;

use crossbeam_utils::CachePadded;

use super::slot::Slot;
use crate::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Enough buckets for every id below `usize::MAX`.
const BUCKETS: usize = usize::BITS as usize;

/// Thread caches of one pool. `buckets[k]` is null or points to `2^k` slots.
pub(crate) struct SlotTable<T> {
    buckets: [AtomicPtr<CachePadded<Slot<T>>>; BUCKETS],
    /// One past the highest bucket ever published: walks stop there instead
    /// of loading all 64 pointers.
    high: AtomicUsize,
    /// The table owns the slots (and through them, cached objects).
    _owns: PhantomData<Box<[CachePadded<Slot<T>>]>>,
}

/// Which bucket holds `tid`, and where in it.
#[inline(always)]
fn locate(tid: usize) -> (usize, usize) {
    let n = tid + 1;
    let bucket = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (bucket, n - (1 << bucket))
}

impl<T> SlotTable<T> {
    pub(crate) fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            high: AtomicUsize::new(0),
            _owns: PhantomData,
        }
    }

    /// The slot for `tid`, if its bucket exists.
    #[inline(always)]
    pub(crate) fn get(&self, tid: usize) -> Option<&Slot<T>> {
        let (bucket, index) = locate(tid);
        // Pairs with the `AcqRel` publication in `get_or_alloc`: the slots are
        // initialised before we read them.
        let base = self.buckets[bucket].load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY:
        // * A non-null bucket pointer always comes from `get_or_alloc`, which
        //   stores a live allocation of exactly `1 << bucket` slots.
        // * `index < 1 << bucket` by construction of `locate`.
        // * Buckets are freed only in `Drop`, which has `&mut self`, so the
        //   slot outlives the returned `&self` borrow.
        Some(unsafe { &**base.add(index) })
    }

    /// The slot for `tid`, allocating its bucket if this is the first thread
    /// with an id in that range.
    #[cold]
    pub(crate) fn get_or_alloc(&self, tid: usize) -> &Slot<T> {
        if let Some(slot) = self.get(tid) {
            return slot;
        }
        let (bucket, _) = locate(tid);
        let fresh: Box<[CachePadded<Slot<T>>]> = (0..1usize << bucket)
            .map(|_| CachePadded::default())
            .collect();
        let fresh = Box::into_raw(fresh).cast::<CachePadded<Slot<T>>>();
        if let Err(_other) = self.buckets[bucket].compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // Another thread in the same range won the race; use its bucket.
            // SAFETY: `fresh` came from `Box::into_raw` of a slice of
            // `1 << bucket` slots just above and was never published.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, 1 << bucket)) });
        }
        self.high.fetch_max(bucket + 1, Ordering::AcqRel);
        self.get(tid).expect("bucket was just published")
    }

    /// Every slot that exists, with the id it belongs to.
    pub(crate) fn for_each<'a>(&'a self, mut f: impl FnMut(usize, &'a Slot<T>)) {
        let high = self.high.load(Ordering::Acquire);
        for (bucket, ptr) in self.buckets[..high].iter().enumerate() {
            let base = ptr.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            let first_id = (1usize << bucket) - 1;
            for index in 0..1usize << bucket {
                // SAFETY: as in `get`: a published bucket holds `1 << bucket`
                // initialised slots that live as long as `self`.
                f(first_id + index, unsafe { &**base.add(index) });
            }
        }
    }

    /// Every slot, with exclusive access.
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(&mut Slot<T>)) {
        let high = self.high.load(Ordering::Acquire);
        for (bucket, ptr) in self.buckets[..high].iter().enumerate() {
            let base = ptr.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            for index in 0..1usize << bucket {
                // SAFETY: as in `get`, plus `&mut self` means no other
                // reference to any slot exists.
                f(unsafe { &mut **base.add(index) });
            }
        }
    }
}

impl<T> Drop for SlotTable<T> {
    fn drop(&mut self) {
        let high = self.high.load(Ordering::Acquire);
        for (bucket, ptr) in self.buckets[..high].iter().enumerate() {
            let base = ptr.load(Ordering::Acquire);
            if !base.is_null() {
                // SAFETY: `base` was published by `get_or_alloc` from
                // `Box::into_raw` of a slice of `1 << bucket` slots, and
                // `&mut self` means nothing borrows it any more.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, 1 << bucket)) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_distinct_slots_in_doubling_buckets() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(1), (1, 0));
        assert_eq!(locate(2), (1, 1));
        assert_eq!(locate(3), (2, 0));
        assert_eq!(locate(6), (2, 3));
        assert_eq!(locate(7), (3, 0));
        assert_eq!(
            locate(usize::MAX - 1),
            (BUCKETS - 1, (1 << (BUCKETS - 1)) - 1)
        );
    }

    #[test]
    fn slots_are_allocated_on_demand_and_stable() {
        let table = SlotTable::<u32>::new();
        assert!(table.get(5).is_none());
        let a = table.get_or_alloc(5) as *const Slot<u32>;
        let b = table.get_or_alloc(5) as *const Slot<u32>;
        assert_eq!(a, b);
        assert!(table.get(3).is_some(), "same bucket as 5");
        assert!(table.get(0).is_none());
        let mut ids = Vec::new();
        table.for_each(|id, slot| {
            assert!(std::ptr::eq(slot, table.get(id).unwrap()));
            ids.push(id);
        });
        assert_eq!(ids, [3, 4, 5, 6]);
    }
}
