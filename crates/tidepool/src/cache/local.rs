//! The owner-only half of a thread cache: two batches, `loaded` and `spare`.
//!
//! This is Bonwick's pair of magazines. Gets pop from `loaded`; when it is
//! empty and `spare` is not, the two swap. Puts push onto `loaded`; when it is
//! full and `spare` has room, the two swap. Only when both are empty (get) or
//! both are full (put) does the thread visit the depot, so a thread can always
//! do a whole batch of gets or puts between depot trips, whatever its pattern:
//! no thrashing at a batch boundary.
//!
//! Every batch is a `Vec` allocated (outside the access bracket) with room
//! for `batch_size` objects, so `push` and `pop` never allocate.

use std::mem::{self, ManuallyDrop};

use super::words;

/// Two batches of idle objects, touched only by the owning thread.
///
/// Invariants: `loaded.len() <= loaded.capacity()`, likewise `spare`, and
/// `push` fills a batch only up to its capacity (and the pool's batch size
/// now), so it never allocates. The batch size adapts (`Head::batch`):
/// a batch holds at most the largest batch size, `Config::max_batch`. Every batch put in here
/// gets its room beforehand, outside the access bracket: nothing allocates
/// (or frees) inside one.
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
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.loaded.len() + self.spare.len()
    }

    /// Whether both halves have their room (a claim gave it; a revocation
    /// or a donation in progress takes it away until the next claim or
    /// `install_spare`).
    pub(crate) fn is_installed(&self) -> bool {
        self.loaded.capacity() > 0 && self.spare.capacity() > 0
    }

    /// Takes an idle object, if either batch has one.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.loaded.is_empty() {
            if self.spare.is_empty() {
                return None;
            }
            mem::swap(&mut self.loaded, &mut self.spare);
        }
        let len = self.loaded.len() - 1;
        // SAFETY: `len` was the last initialised element; shortening the
        // batch first hands its ownership to us.
        unsafe {
            self.loaded.set_len(len);
            Some(words::read(self.loaded.as_ptr().add(len)))
        }
    }

    /// Takes an idle object from `loaded` only: the fast path, inlined
    /// into every get. An empty `loaded` (once a batch: the swap with
    /// `spare`, or a depot visit) is left to [`pop`](Self::pop), out of line,
    /// which keeps the inlined code small enough to stay inlined.
    #[inline(always)]
    pub(crate) fn pop_loaded(&mut self) -> Option<T> {
        let len = self.loaded.len().checked_sub(1)?;
        // SAFETY: `len` was the last initialised element; shortening the
        // batch first hands its ownership to us.
        unsafe {
            self.loaded.set_len(len);
            Some(words::read(self.loaded.as_ptr().add(len)))
        }
    }

    /// Caches `item`, or gives it back if both batches are full. A batch
    /// is full at `batch_size` (the pool's batch size now) or at its
    /// capacity, whichever comes first: the batch size may have grown since
    /// the batch got its room, and `push` never allocates (see the type's
    /// invariants). Batches get room for the new size at their next depot
    /// visit.
    #[inline(always)]
    pub(crate) fn push(&mut self, item: T, batch_size: usize) -> Result<(), T> {
        if !self.make_room(batch_size) {
            return Err(item);
        }
        // SAFETY: `make_room` made room in `loaded`.
        unsafe { self.push_unchecked(item) };
        Ok(())
    }

    /// [`push`](Self::push), moving the object out of `item`, and only into
    /// `loaded`: `false`, and `item` left as it is, when `loaded` is full,
    /// even if `spare` has room (the swap, once a batch, is `push`'s, out of
    /// line; see [`pop_loaded`](Self::pop_loaded)).
    ///
    /// # Safety
    ///
    /// `item` holds an object; once this returns `true` it has been taken,
    /// and the caller must not touch it again.
    #[inline(always)]
    pub(crate) unsafe fn push_loaded_from(
        &mut self,
        item: &mut ManuallyDrop<T>,
        batch_size: usize,
    ) -> bool {
        let len = self.loaded.len();
        if len >= batch_size.min(self.loaded.capacity()) {
            return false;
        }
        // SAFETY: `len` is below `loaded`'s capacity (checked above), so the
        // slot at `len` is allocated and unused; `item` holds an object (our
        // caller's promise), which moves into that slot and is then counted
        // in.
        unsafe {
            words::move_to(&**item, self.loaded.as_mut_ptr().add(len));
            self.loaded.set_len(len + 1);
        }
        true
    }

    /// Pushes onto `loaded` without `Vec::push`'s capacity check (which
    /// `make_room` has made, but the optimiser loses track of across the
    /// swap).
    ///
    /// # Safety
    ///
    /// `loaded.len() < loaded.capacity()`.
    #[inline(always)]
    unsafe fn push_unchecked(&mut self, item: T) {
        let len = self.loaded.len();
        // SAFETY: `len < capacity` (our caller's promise), so the slot at
        // `len` is allocated and unused; `len + 1 <= capacity`, and the
        // new element is initialised.
        unsafe {
            self.loaded.as_mut_ptr().add(len).write(item);
            self.loaded.set_len(len + 1);
        }
    }

    /// Makes `loaded` a batch with room for one more object, swapping in
    /// `spare` if need be; `false` if both are full.
    #[inline(always)]
    fn make_room(&mut self, batch_size: usize) -> bool {
        if self.loaded.len() < batch_size.min(self.loaded.capacity()) {
            return true;
        }
        if self.spare.len() < batch_size.min(self.spare.capacity()) {
            mem::swap(&mut self.loaded, &mut self.spare);
            return true;
        }
        false
    }

    /// Installs `batch` (with room for a whole batch) as `loaded` when both
    /// batches are empty; returns the emptied one. Gives `batch` back
    /// otherwise.
    pub(crate) fn install_loaded(&mut self, batch: Vec<T>) -> Result<Vec<T>, Vec<T>> {
        if !self.loaded.is_empty() || !self.spare.is_empty() {
            return Err(batch);
        }
        Ok(mem::replace(&mut self.loaded, batch))
    }

    /// Takes the `spare` batch (to donate it), leaving an unallocated one in
    /// its place until [`install_spare`](Self::install_spare).
    pub(crate) fn take_spare(&mut self) -> Vec<T> {
        mem::take(&mut self.spare)
    }

    /// Installs an empty batch with room for a whole batch as `spare`;
    /// returns the one it replaces (unallocated after `take_spare`), to be
    /// dropped outside the access.
    pub(crate) fn install_spare(&mut self, empty: Vec<T>) -> Vec<T> {
        debug_assert!(empty.is_empty() && self.spare.is_empty());
        mem::replace(&mut self.spare, empty)
    }

    /// Installs two empty batches with room for a whole batch each (a claim);
    /// returns the ones they replace, to be dropped outside the access.
    pub(crate) fn install(&mut self, loaded: Vec<T>, spare: Vec<T>) -> [Vec<T>; 2] {
        [
            mem::replace(&mut self.loaded, loaded),
            mem::replace(&mut self.spare, spare),
        ]
    }

    /// Takes both batches, leaving the cache empty and unallocated.
    pub(crate) fn take_all(&mut self) -> [Vec<T>; 2] {
        [mem::take(&mut self.loaded), mem::take(&mut self.spare)]
    }

    /// Moves up to `n` objects into `out`, the oldest first: the bottom of
    /// `spare`, then the bottom of `loaded` (pops and pushes work at the
    /// top, so the bottoms are what sat longest). Allocates nothing if `out`
    /// has room for `n` more.
    pub(crate) fn take_oldest(&mut self, n: usize, out: &mut Vec<T>) {
        let mut left = n;
        for batch in [&mut self.spare, &mut self.loaded] {
            let k = left.min(batch.len());
            out.extend(batch.drain(..k));
            left -= k;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn claimed(batch_size: usize) -> LocalCache<u32> {
        let mut cache = LocalCache::new();
        let old = cache.install(
            Vec::with_capacity(batch_size),
            Vec::with_capacity(batch_size),
        );
        assert!(old.iter().all(|b| b.capacity() == 0));
        cache
    }

    #[test]
    fn a_whole_batch_of_either_op_fits_between_depot_trips() {
        let mut cache = claimed(3);
        // Fill both batches: 6 pushes succeed, the 7th needs the depot.
        for i in 0..6 {
            assert_eq!(cache.push(i, 3), Ok(()));
        }
        assert_eq!(cache.push(6, 3), Err(6));
        assert_eq!(cache.len(), 6);
        // Right after a full depot trip (spare donated), a batch of pushes fits.
        let donated = cache.take_spare();
        assert_eq!(donated.len(), 3);
        assert_eq!(cache.install_spare(Vec::with_capacity(3)).capacity(), 0);
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
    fn the_fast_paths_touch_the_loaded_batch_only() {
        let mut cache = claimed(2);
        let mut item = ManuallyDrop::new(0);
        for i in 0..2 {
            *item = i;
            // SAFETY: `item` holds a `u32`, not touched once taken.
            assert!(unsafe { cache.push_loaded_from(&mut item, 2) });
        }
        // `loaded` full: no swap with the empty spare here (that is
        // `push`'s, out of line), and `item` stays the caller's.
        *item = 7;
        // SAFETY: as above.
        assert!(!unsafe { cache.push_loaded_from(&mut item, 2) });
        assert_eq!((*item, cache.loaded.len(), cache.spare.len()), (7, 2, 0));
        assert_eq!(cache.push(7, 2), Ok(()));
        assert_eq!((cache.loaded.len(), cache.spare.len()), (1, 2));
        // A smaller batch size caps `loaded` below its capacity.
        *item = 8;
        // SAFETY: as above.
        assert!(!unsafe { cache.push_loaded_from(&mut item, 1) });
        // `loaded` emptied: no swap with the full spare either.
        assert_eq!(cache.pop_loaded(), Some(7));
        assert_eq!(cache.pop_loaded(), None);
        assert_eq!(cache.pop(), Some(1));
        assert_eq!(cache.pop_loaded(), Some(0));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn push_never_reallocates() {
        let mut cache = claimed(4);
        let ptr = cache.loaded.as_ptr();
        for i in 0..4 {
            cache.push(i, 4).unwrap();
        }
        assert_eq!(cache.loaded.as_ptr(), ptr);
        let [a, b] = cache.take_all();
        assert_eq!(a.len() + b.len(), 4);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn take_oldest_takes_the_bottoms_spare_first() {
        let mut cache = claimed(3);
        for i in 0..5 {
            cache.push(i, 3).unwrap();
        }
        // loaded = [3, 4] on top of spare = [0, 1, 2] (swapped when full).
        let mut out = Vec::with_capacity(4);
        cache.take_oldest(4, &mut out);
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.pop(), Some(4));
        // More than it holds: what there is.
        let mut out = Vec::with_capacity(2);
        cache.take_oldest(2, &mut out);
        assert!(out.is_empty() && cache.len() == 0);
    }

    #[test]
    fn a_refill_is_installed_only_into_an_empty_cache() {
        let mut cache = claimed(2);
        let emptied = cache.install_loaded(vec![1, 2]).unwrap();
        assert!(emptied.is_empty() && emptied.capacity() == 2);
        assert_eq!(cache.install_loaded(vec![3]), Err(vec![3]));
        assert_eq!(cache.pop(), Some(2));
    }
}
