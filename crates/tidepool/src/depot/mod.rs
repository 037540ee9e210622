//! The depot: one shared, bounded list of batches behind one lock.
//!
//! Threads touch the depot once per batch: to swap an empty batch for a full
//! one when both of their batches are empty, or to donate a full batch when
//! both are full. The lock is held for a few pointer moves and never while a
//! manager runs: the depot hands back what must be destroyed and the caller
//! destroys it after unlocking.
//!
//! ```text
//!            oldest                       newest
//!  full:   [ batch ][ batch ][ batch ][ batch ]  <- donate / refill (LIFO)
//!     ^ trim takes from here: these sat idle longest
//!  empty:  [ ][ ][ ]   emptied batches, reused so exchanges do not allocate
//! ```
//!
//! The hard cap: `objects <= max_idle`. A donation that would pass it is
//! refused whole, and the donor destroys the batch.

use std::mem;

use crate::sync::Mutex;

/// The shared, bounded store of idle batches.
#[derive(Debug)]
pub(crate) struct Depot<T> {
    shelves: Mutex<Shelves<T>>,
    batch_size: usize,
    max_idle: usize,
}

#[derive(Debug)]
struct Shelves<T> {
    /// Batches of 1..=`batch_size` idle objects, oldest first.
    full: Vec<Vec<T>>,
    /// Emptied batches with room for `batch_size` objects, for reuse.
    /// `empty.len() <= max_idle / batch_size`: enough to refill every full
    /// batch the depot may hold.
    empty: Vec<Vec<T>>,
    /// `objects == sum(full[i].len()) <= max_idle`.
    objects: usize,
    /// The fewest objects held since the last [`Depot::trim`]: that many sat
    /// unused the whole time (the kmem working-set filter).
    low_water: usize,
    /// Batches moved in or out (refills and donations).
    exchanges: u64,
}

impl<T> Depot<T> {
    pub(crate) fn new(batch_size: usize, max_idle: usize) -> Self {
        Self {
            shelves: Mutex::new(Shelves {
                full: Vec::new(),
                empty: Vec::new(),
                objects: 0,
                low_water: 0,
                exchanges: 0,
            }),
            batch_size,
            max_idle,
        }
    }

    fn max_empties(&self) -> usize {
        self.max_idle / self.batch_size
    }

    /// Swaps the caller's empty `batch` for the newest full one. Returns
    /// `false` (leaving `batch` as it was) if the depot has none.
    pub(crate) fn refill(&self, batch: &mut Vec<T>) -> bool {
        debug_assert!(batch.is_empty());
        let mut shelves = self.shelves.lock();
        let Some(full) = shelves.full.pop() else {
            return false;
        };
        shelves.take_objects(full.len());
        shelves.exchanges += 1;
        let empty = mem::replace(batch, full);
        if shelves.empty.len() < self.max_empties() && empty.capacity() >= self.batch_size {
            shelves.empty.push(empty);
        }
        true
    }

    /// Takes `batch` (non-empty) unless that would pass `max_idle`. On
    /// success returns an empty batch for the donor to reuse (unallocated if
    /// the depot had none spare); on refusal returns `batch` for the donor
    /// to destroy.
    pub(crate) fn donate(&self, batch: Vec<T>) -> Result<Vec<T>, Vec<T>> {
        debug_assert!(!batch.is_empty() && batch.len() <= self.batch_size);
        let mut shelves = self.shelves.lock();
        if shelves.objects + batch.len() > self.max_idle {
            return Err(batch);
        }
        shelves.objects += batch.len();
        shelves.exchanges += 1;
        shelves.full.push(batch);
        Ok(shelves.empty.pop().unwrap_or_default())
    }

    /// Takes one object: for threads with no cache (exiting ones).
    pub(crate) fn take_one(&self) -> Option<T> {
        let mut shelves = self.shelves.lock();
        let newest = shelves.full.last_mut()?;
        let item = newest.pop().expect("full batches are never empty");
        if newest.is_empty() {
            let empty = shelves.full.pop().expect("just seen");
            if shelves.empty.len() < self.max_empties() {
                shelves.empty.push(empty);
            }
        }
        shelves.take_objects(1);
        Some(item)
    }

    /// Stores one object unless the depot is at `max_idle`: for threads with
    /// no cache (exiting ones).
    pub(crate) fn put_one(&self, item: T) -> Result<(), T> {
        let mut shelves = self.shelves.lock();
        if shelves.objects >= self.max_idle {
            return Err(item);
        }
        shelves.objects += 1;
        match shelves.full.last_mut() {
            Some(newest) if newest.len() < self.batch_size => newest.push(item),
            _ => {
                let mut batch = shelves
                    .empty
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(self.batch_size));
                batch.push(item);
                shelves.full.push(batch);
            }
        }
        Ok(())
    }

    /// Removes the batches that sat unused since the previous trim (the
    /// low-water mark), oldest first, and starts a new period. The caller
    /// destroys what is returned.
    pub(crate) fn trim(&self) -> Vec<Vec<T>> {
        let mut shelves = self.shelves.lock();
        let mut budget = shelves.low_water;
        let mut n = 0;
        while let Some(batch) = shelves.full.get(n) {
            if batch.len() > budget {
                break;
            }
            budget -= batch.len();
            n += 1;
        }
        let taken: Vec<Vec<T>> = shelves.full.drain(..n).collect();
        let removed: usize = taken.iter().map(Vec::len).sum();
        shelves.objects -= removed;
        shelves.low_water = shelves.objects;
        taken
    }

    /// Removes every batch. The caller destroys what is returned.
    pub(crate) fn take_all(&self) -> Vec<Vec<T>> {
        let mut shelves = self.shelves.lock();
        shelves.objects = 0;
        shelves.low_water = 0;
        mem::take(&mut shelves.full)
    }

    /// `(idle objects, batch exchanges)`, exact at the moment of the call.
    pub(crate) fn counts(&self) -> (usize, u64) {
        let shelves = self.shelves.lock();
        (shelves.objects, shelves.exchanges)
    }
}

impl<T> Shelves<T> {
    fn take_objects(&mut self, n: usize) {
        self.objects -= n;
        self.low_water = self.low_water.min(self.objects);
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

    #[test]
    fn donations_past_max_idle_are_refused_whole() {
        let depot = Depot::new(4, 8);
        assert!(depot.donate(batch(0..4)).is_ok());
        assert!(depot.donate(batch(4..8)).is_ok());
        assert_eq!(depot.donate(batch(8..12)), Err(batch(8..12)));
        assert_eq!(depot.counts(), (8, 2));
        assert_eq!(depot.put_one(99), Err(99));
    }

    #[test]
    fn refill_is_lifo_and_recycles_empties() {
        let depot = Depot::new(4, 8);
        depot.donate(batch(0..4)).unwrap();
        depot.donate(batch(4..8)).unwrap();
        let mut mine = Vec::with_capacity(4);
        assert!(depot.refill(&mut mine));
        assert_eq!(mine, batch(4..8));
        // The empty batch we handed in comes back on the next donation.
        let empty = depot.donate(mine).unwrap();
        assert!(empty.is_empty() && empty.capacity() >= 4);
        assert_eq!(depot.counts().0, 8);
    }

    #[test]
    fn trim_takes_only_what_sat_idle_the_whole_period() {
        let depot = Depot::new(2, 8);
        for i in 0..4 {
            depot.donate(batch(i * 2..i * 2 + 2)).unwrap();
        }
        // Low water is still 0 (the depot started empty): nothing sat idle
        // for a whole period yet.
        assert!(depot.trim().is_empty());
        // One batch is used during the next period: 3 batches sat idle.
        let mut mine = Vec::with_capacity(2);
        assert!(depot.refill(&mut mine));
        let trimmed = depot.trim();
        assert_eq!(trimmed.len(), 3);
        assert_eq!(trimmed[0], batch(0..2), "oldest first");
        assert_eq!(depot.counts().0, 0);
    }

    #[test]
    fn single_objects_fill_partial_batches() {
        let depot = Depot::new(3, 6);
        for i in 0..6 {
            depot.put_one(i).unwrap();
        }
        assert_eq!(depot.put_one(6), Err(6));
        assert_eq!(depot.take_one(), Some(5));
        let all = depot.take_all();
        assert_eq!(all.iter().map(Vec::len).sum::<usize>(), 5);
        assert_eq!(depot.take_one(), None);
    }
}
