//! FreeBSD's vnode allocation accounting, before and after seed 002,
//! transcribed from `vn_alloc`/`vn_alloc_hard` in `sys/kern/vfs_subr.c`.
//!
//! `numvnodes` counts every object in existence (in use or on the free
//! list, where it keeps its identity as a cache); allocation bumps it, and
//! over the limit (`desiredvnodes`) recycles the oldest free object under
//! the list lock (which destroys it: `numvnodes` falls by one) before it
//! counts the new one. Released objects reach the free list through a
//! per-thread batch of [`VDBATCH_SIZE`] (FreeBSD's per-CPU `vdbatch`).
//!
//! ```text
//! before (per allocation over the limit):
//!   fetch_add(numvnodes)          fast path, always
//!   fetch_sub(numvnodes)          back off: over the limit
//!   lock(list); load(numvnodes)   the hot counter read under the lock
//!   [fits: cyclecount = 0;        the write the patch removed, made when
//!    unlock; fetch_add; done]     the count fits after all (see below)
//!   pop oldest; fetch_sub         recycle (destroy one)
//!   unlock; fetch_add(numvnodes)  count the new one again
//! 2023:
//!   fetch_add(numvnodes)          kept ("bumped") while within the slop
//!   lock(list); pop; fetch_sub    recycle; cyclecount only read
//!   unlock
//! ```
//!
//! As in the kernel, `vn_alloc_cyclecount` is written only on the "fits"
//! branch (`numvnodes + 1 < desiredvnodes` under the lock). The kernel
//! enters `vn_alloc_hard` near the limit (`vnlru_under(.., vlowat)`) while
//! its `vnlru` daemon keeps the count just below it, so there that branch
//! was the usual one; this model has no daemon and enters only over the
//! limit, so the branch is taken only when another thread's back-off or
//! recycle left room — the model is, if anything, kind to "before".
//!
//! Every write to a shared line is counted per thread (plain local adds,
//! which cost the run nothing shared): [`Local::counter_writes`] (each
//! read-modify-write or store to `numvnodes` or `vn_alloc_cyclecount`)
//! and [`Local::locks`] (list-lock acquisitions: each writes the lock's
//! line twice, to take and to release it).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

use super::Obj;

/// `VNLRU_COUNT_SLOP`: how far the 2023 code lets `numvnodes` stay over
/// the limit instead of backing off.
pub const VNLRU_COUNT_SLOP: u64 = 100;

/// FreeBSD's `VDBATCH_SIZE`: released vnodes are queued per CPU and put
/// on the global list 8 at a time.
pub const VDBATCH_SIZE: usize = 8;

/// Which version of `vn_alloc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// stable/14 before cc2d62daa339.
    Before,
    /// After it.
    Slop2023,
}

/// The shared state: the counter, the cycle counter, the free list.
#[derive(Debug)]
pub struct Vnodes {
    version: Version,
    /// `desiredvnodes`.
    limit: u64,
    numvnodes: CachePadded<AtomicU64>,
    /// `vn_alloc_cyclecount`: read outside the lock by every allocation.
    cyclecount: CachePadded<AtomicU64>,
    /// `vnode_list` (free part), oldest first, under `vnode_list_mtx`.
    free: Mutex<VecDeque<Box<Obj>>>,
}

impl Vnodes {
    /// An empty cache with `limit` objects at most.
    pub fn new(version: Version, limit: u64) -> Self {
        Vnodes {
            version,
            limit,
            numvnodes: CachePadded::new(AtomicU64::new(0)),
            cyclecount: CachePadded::new(AtomicU64::new(0)),
            free: Mutex::new(VecDeque::new()),
        }
    }

    /// Objects in existence now.
    pub fn existing(&self) -> u64 {
        self.numvnodes.load(Ordering::Relaxed)
    }

    /// A thread's handle (its `vdbatch`).
    pub fn local(&self) -> Local<'_> {
        Local {
            shared: self,
            batch: Vec::with_capacity(VDBATCH_SIZE),
            created: 0,
            recycled: 0,
            counter_writes: 0,
            locks: 0,
        }
    }
}

/// One thread's view: its release batch and its counts.
#[derive(Debug)]
pub struct Local<'a> {
    shared: &'a Vnodes,
    // Boxed on purpose: each object is its own allocation, as a vnode is,
    // and moves between the batch and the list without being copied.
    #[allow(clippy::vec_box)]
    batch: Vec<Box<Obj>>,
    /// Objects this thread allocated fresh.
    pub created: u64,
    /// Objects this thread recycled off the free list.
    pub recycled: u64,
    /// Read-modify-writes and stores to `numvnodes` and
    /// `vn_alloc_cyclecount` made by this thread.
    pub counter_writes: u64,
    /// List-lock acquisitions by this thread.
    pub locks: u64,
}

impl Local<'_> {
    /// `vn_alloc`: an object for `key`.
    pub fn alloc(&mut self, key: u64) -> Box<Obj> {
        let s = self.shared;
        if s.cyclecount.load(Ordering::Relaxed) != 0 {
            return self.alloc_hard(key, 0, false);
        }
        let r = s.numvnodes.fetch_add(1, Ordering::Relaxed) + 1;
        self.counter_writes += 1;
        if r > s.limit {
            return match s.version {
                Version::Before => {
                    s.numvnodes.fetch_sub(1, Ordering::Relaxed);
                    self.counter_writes += 1;
                    self.alloc_hard(key, r, false)
                }
                Version::Slop2023 => self.alloc_hard(key, r, true),
            };
        }
        self.created += 1;
        Obj::boxed(key)
    }

    #[cold]
    fn alloc_hard(&mut self, key: u64, r: u64, mut bumped: bool) -> Box<Obj> {
        let s = self.shared;
        if bumped && r > s.limit + VNLRU_COUNT_SLOP {
            s.numvnodes.fetch_sub(1, Ordering::Relaxed);
            self.counter_writes += 1;
            bumped = false;
        }
        let mut free = s.free.lock().unwrap_or_else(|e| e.into_inner());
        self.locks += 1;
        let check = match s.version {
            Version::Before => true,
            Version::Slop2023 => s.cyclecount.load(Ordering::Relaxed) != 0,
        };
        if check {
            let rnum = s.numvnodes.load(Ordering::Relaxed);
            if rnum + 1 < s.limit {
                // The write the patch removed from the common case: read
                // by every allocation on every CPU.
                s.cyclecount.store(0, Ordering::Relaxed);
                self.counter_writes += 1;
                drop(free);
                return self.alloc_fresh(key, bumped);
            }
        }
        let old = free.pop_front();
        drop(free);
        // The free list is empty while every free object sits in some
        // thread's batch: then take one of ours, or (no more than 8 per
        // thread over the limit) make one, as FreeBSD does after its wait.
        match old.or_else(|| self.batch.pop()) {
            Some(obj) => self.recycle(obj, key, bumped),
            None => self.alloc_fresh(key, bumped),
        }
    }

    /// `vnlru_free_locked`: a free object loses its identity (and its
    /// count); the allocation reuses it.
    fn recycle(&mut self, mut obj: Box<Obj>, key: u64, bumped: bool) -> Box<Obj> {
        let s = self.shared;
        s.numvnodes.fetch_sub(1, Ordering::Relaxed);
        self.counter_writes += 1;
        if !bumped {
            s.numvnodes.fetch_add(1, Ordering::Relaxed);
            self.counter_writes += 1;
        }
        self.recycled += 1;
        obj.reset(key);
        obj
    }

    fn alloc_fresh(&mut self, key: u64, bumped: bool) -> Box<Obj> {
        if !bumped {
            self.shared.numvnodes.fetch_add(1, Ordering::Relaxed);
            self.counter_writes += 1;
        }
        self.created += 1;
        Obj::boxed(key)
    }

    /// `vput` to a use count of 0: onto the free list, through the batch.
    pub fn release(&mut self, obj: Box<Obj>) {
        self.batch.push(obj);
        if self.batch.len() >= VDBATCH_SIZE {
            self.flush();
        }
    }

    /// `vdbatch_process`: the batch onto the global list, under its lock.
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let mut free = self.shared.free.lock().unwrap_or_else(|e| e.into_inner());
        self.locks += 1;
        free.extend(self.batch.drain(..));
    }
}

impl Drop for Local<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(version: Version, limit: u64, keys: u64) -> (Vnodes, u64, u64) {
        let v = Vnodes::new(version, limit);
        let (created, recycled) = {
            let mut l = v.local();
            for k in 0..keys {
                let o = l.alloc(k);
                assert_eq!(o.key, k);
                l.release(o);
            }
            (l.created, l.recycled)
        };
        (v, created, recycled)
    }

    #[test]
    fn both_versions_stay_at_the_limit_and_recycle_the_rest() {
        for version in [Version::Before, Version::Slop2023] {
            let (v, created, recycled) = walk(version, 100, 1000);
            assert_eq!(created + recycled, 1000, "{version:?}");
            // Within the batch (and the slop) of the limit, and counted
            // exactly: every existing object is on the free list.
            assert!(
                created <= 100 + VDBATCH_SIZE as u64,
                "{version:?} {created}"
            );
            assert!(created >= 100, "{version:?} {created}");
            assert_eq!(v.existing(), v.free.lock().unwrap().len() as u64);
        }
    }

    #[test]
    fn shared_writes_are_counted_per_version() {
        // One thread, limit 100, 1000 keys, released at once: 100 creates
        // (one write each), then 900 recycles at the limit: before moves
        // numvnodes 4 times each (inc, dec to back off, dec for the
        // recycled one, inc), 2023 twice (inc kept within the slop, dec),
        // and neither writes vn_alloc_cyclecount (the count never fits).
        // Locks: one per recycle, one per batch of 8 releases.
        for (version, per_recycle) in [(Version::Before, 4), (Version::Slop2023, 2)] {
            let v = Vnodes::new(version, 100);
            let mut l = v.local();
            for k in 0..1000 {
                let o = l.alloc(k);
                l.release(o);
            }
            assert_eq!((l.created, l.recycled), (100, 900), "{version:?}");
            assert_eq!(l.counter_writes, 100 + 900 * per_recycle, "{version:?}");
            assert_eq!(l.locks, 900 + 1000 / VDBATCH_SIZE as u64, "{version:?}");
        }
    }

    #[test]
    fn under_the_limit_nothing_is_recycled() {
        let (v, created, recycled) = walk(Version::Before, 10_000, 1000);
        assert_eq!((created, recycled), (1000, 0));
        assert_eq!(v.existing(), 1000);
    }
}
