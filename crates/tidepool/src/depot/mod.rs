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
    full: Vec<Shelf<T>>,
    /// Emptied batches with room for `batch_size` objects, for reuse.
    /// `empty.len() <= max_idle / batch_size`: enough to refill every full
    /// batch the depot may hold.
    empty: Vec<Vec<T>>,
    /// `objects == sum(full[i].items.len()) <= max_idle`.
    objects: usize,
    /// `purged == sum(full[i].items.len() where full[i].purged) <= objects`.
    purged: usize,
    /// The fewest objects held since the last [`Depot::trim`]: that many sat
    /// unused the whole time (the kmem working-set filter).
    low_water: usize,
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

impl<T> Depot<T> {
    pub(crate) fn new(batch_size: usize, max_idle: usize) -> Self {
        Self {
            shelves: Mutex::new(Shelves {
                full: Vec::new(),
                empty: Vec::new(),
                objects: 0,
                purged: 0,
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
        shelves.take_shelf(&full);
        shelves.exchanges += 1;
        let empty = mem::replace(batch, full.items);
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
        shelves.full.push(Shelf {
            items: batch,
            purged: false,
        });
        Ok(shelves.empty.pop().unwrap_or_default())
    }

    /// Takes one object: for threads with no cache (exiting ones).
    pub(crate) fn take_one(&self) -> Option<T> {
        let mut shelves = self.shelves.lock();
        let newest = shelves.full.last_mut()?;
        let item = newest.items.pop().expect("full batches are never empty");
        let purged = newest.purged;
        if newest.items.is_empty() {
            let empty = shelves.full.pop().expect("just seen").items;
            if shelves.empty.len() < self.max_empties() {
                shelves.empty.push(empty);
            }
        }
        shelves.objects -= 1;
        shelves.purged -= usize::from(purged);
        shelves.low_water = shelves.low_water.min(shelves.objects);
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
            Some(newest) if newest.items.len() < self.batch_size && !newest.purged => {
                newest.items.push(item)
            }
            _ => {
                let mut items = shelves
                    .empty
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(self.batch_size));
                items.push(item);
                shelves.full.push(Shelf {
                    items,
                    purged: false,
                });
            }
        }
        Ok(())
    }

    /// Removes the batches that sat unused since the previous trim (the
    /// low-water mark), oldest first, and starts a new period. The caller
    /// destroys what is returned.
    pub(crate) fn trim(&self) -> Vec<Vec<T>> {
        let mut shelves = self.shelves.lock();
        let limit = shelves.low_water;
        let taken = shelves.take_oldest(limit, |_| true);
        shelves.low_water = shelves.objects;
        taken
    }

    /// Removes every batch. The caller destroys what is returned.
    pub(crate) fn take_all(&self) -> Vec<Vec<T>> {
        let mut shelves = self.shelves.lock();
        shelves.take_oldest(usize::MAX, |_| true)
    }

    /// Removes the oldest not-yet-purged batches, up to `limit` objects, so
    /// the caller can purge them outside the lock and hand them back with
    /// [`restore_purged`](Depot::restore_purged).
    pub(crate) fn take_unpurged(&self, limit: usize) -> Vec<Vec<T>> {
        let mut shelves = self.shelves.lock();
        shelves.take_oldest(limit, |shelf| !shelf.purged)
    }

    /// Puts purged batches back at the old end, as far as `max_idle` allows
    /// (donations may have filled the depot meanwhile). Returns the batches
    /// that did not fit, for the caller to destroy.
    pub(crate) fn restore_purged(&self, batches: Vec<Vec<T>>) -> Vec<Vec<T>> {
        let mut shelves = self.shelves.lock();
        let mut back = Vec::with_capacity(batches.len());
        let mut refused = Vec::new();
        for items in batches {
            if items.is_empty() {
                continue;
            }
            if shelves.objects + items.len() > self.max_idle {
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
        let shelves = self.shelves.lock();
        DepotCounts {
            idle: shelves.objects,
            purged: shelves.purged,
            exchanges: shelves.exchanges,
        }
    }
}

/// What the depot holds and has done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DepotCounts {
    pub(crate) idle: usize,
    pub(crate) purged: usize,
    pub(crate) exchanges: u64,
}

impl<T> Shelves<T> {
    /// Accounts for `shelf` leaving (a refill).
    fn take_shelf(&mut self, shelf: &Shelf<T>) {
        self.objects -= shelf.items.len();
        if shelf.purged {
            self.purged -= shelf.items.len();
        }
        self.low_water = self.low_water.min(self.objects);
    }

    /// Removes whole batches matching `pick`, oldest first, while they fit in
    /// `limit` objects. Does not move the low-water mark: these objects were
    /// not wanted by a thread.
    fn take_oldest(&mut self, limit: usize, pick: impl Fn(&Shelf<T>) -> bool) -> Vec<Vec<T>> {
        let mut budget = limit;
        let mut taken = Vec::new();
        let mut kept = Vec::with_capacity(self.full.len());
        let mut full = mem::take(&mut self.full).into_iter();
        for shelf in full.by_ref() {
            if !pick(&shelf) {
                kept.push(shelf);
                continue;
            }
            if shelf.items.len() > budget {
                kept.push(shelf);
                break;
            }
            budget -= shelf.items.len();
            self.objects -= shelf.items.len();
            if shelf.purged {
                self.purged -= shelf.items.len();
            }
            taken.push(shelf.items);
        }
        kept.extend(full);
        self.full = kept;
        self.low_water = self.low_water.min(self.objects);
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

    #[test]
    fn donations_past_max_idle_are_refused_whole() {
        let depot = Depot::new(4, 8);
        assert!(depot.donate(batch(0..4)).is_ok());
        assert!(depot.donate(batch(4..8)).is_ok());
        assert_eq!(depot.donate(batch(8..12)), Err(batch(8..12)));
        assert_eq!((depot.counts().idle, depot.counts().exchanges), (8, 2));
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
        assert_eq!(depot.counts().idle, 8);
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
        assert_eq!(depot.counts().idle, 0);
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
        assert!(depot.refill(&mut mine));
        assert_eq!(depot.counts().purged, 4);
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
