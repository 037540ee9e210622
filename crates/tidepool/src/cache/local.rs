//! The owner-only half of a thread cache: two batches, `loaded` and `spare`.
//!
//! This is Bonwick's pair of magazines. Gets pop from `loaded`; when it is
//! empty and `spare` is not, the two swap. Puts push onto `loaded`; when it is
//! full and `spare` has room, the two swap. Only when both are empty (get) or
//! both are full (put) does the thread visit the depot, so a thread can always
//! do a whole batch of gets or puts between depot trips, whatever its pattern:
//! no thrashing at a batch boundary.
//!
//! Every batch is a `Vec` allocated once with room for `batch_size` objects,
//! so `push` and `pop` never allocate.

use std::mem;

/// Two batches of idle objects, touched only by the owning thread.
///
/// Invariants: `loaded.len() <= batch_size`, `spare.len() <= batch_size`, and
/// once [`reserve`](LocalCache::reserve)d, both have capacity for
/// `batch_size` objects.
#[derive(Debug)]
pub(crate) struct LocalCache<T> {
    loaded: Vec<T>,
    spare: Vec<T>,
}

impl<T> LocalCache<T> {
    pub(crate) const fn new() -> Self {
        Self {
            loaded: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Idle objects held.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.loaded.len() + self.spare.len()
    }

    /// Makes sure neither batch allocates on `push`.
    pub(crate) fn reserve(&mut self, batch_size: usize) {
        for batch in [&mut self.loaded, &mut self.spare] {
            batch.reserve_exact(batch_size.saturating_sub(batch.len()));
        }
    }

    /// Takes an idle object, if either batch has one.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if let Some(item) = self.loaded.pop() {
            return Some(item);
        }
        if self.spare.is_empty() {
            return None;
        }
        mem::swap(&mut self.loaded, &mut self.spare);
        self.loaded.pop()
    }

    /// Caches `item`, or gives it back if both batches are full.
    #[inline(always)]
    pub(crate) fn push(&mut self, item: T, batch_size: usize) -> Result<(), T> {
        if self.loaded.len() < batch_size {
            self.loaded.push(item);
            return Ok(());
        }
        if self.spare.len() < batch_size {
            mem::swap(&mut self.loaded, &mut self.spare);
            self.loaded.push(item);
            return Ok(());
        }
        Err(item)
    }

    /// The batch to refill from the depot once both are empty.
    pub(crate) fn loaded_mut(&mut self) -> &mut Vec<T> {
        &mut self.loaded
    }

    /// Takes the `spare` batch (to donate it), leaving `empty` in its place.
    pub(crate) fn replace_spare(&mut self, empty: Vec<T>) -> Vec<T> {
        mem::replace(&mut self.spare, empty)
    }

    /// Takes both batches, leaving the cache empty and unallocated.
    pub(crate) fn take_all(&mut self) -> [Vec<T>; 2] {
        [mem::take(&mut self.loaded), mem::take(&mut self.spare)]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_whole_batch_of_either_op_fits_between_depot_trips() {
        let mut cache = LocalCache::new();
        cache.reserve(3);
        // Fill both batches: 6 pushes succeed, the 7th needs the depot.
        for i in 0..6 {
            assert_eq!(cache.push(i, 3), Ok(()));
        }
        assert_eq!(cache.push(6, 3), Err(6));
        assert_eq!(cache.len(), 6);
        // Right after a full depot trip (spare donated), a batch of pushes fits.
        let donated = cache.replace_spare(Vec::with_capacity(3));
        assert_eq!(donated.len(), 3);
        for i in 0..3 {
            assert_eq!(cache.push(10 + i, 3), Ok(()));
        }
        // Pops come back LIFO and drain both batches.
        let mut popped = Vec::new();
        while let Some(x) = cache.pop() {
            popped.push(x);
        }
        assert_eq!(popped.len(), 6);
        assert_eq!(popped[0], 12);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn push_never_reallocates_after_reserve() {
        let mut cache = LocalCache::new();
        cache.reserve(4);
        let ptr = cache.loaded.as_ptr();
        for i in 0..4 {
            cache.push(i, 4).unwrap();
        }
        assert_eq!(cache.loaded.as_ptr(), ptr);
        let [a, b] = cache.take_all();
        assert_eq!(a.len() + b.len(), 4);
        assert_eq!(cache.len(), 0);
    }
}
