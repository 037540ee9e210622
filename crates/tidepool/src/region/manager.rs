//! [`RegionManager`]: how a [`Pool`](crate::Pool) makes, resets, purges and
//! unmaps [`Region`]s of one size.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::Region;
use crate::stack::zero_depth::ZeroDepth;
use crate::Manage;

/// Makes [`Region`]s of one reserved size for a [`Pool`](crate::Pool):
/// a region given back is reset for its next owner (as
/// [`Region::reset`], keeping up to [`keep_resident`](RegionManager::keep_resident)
/// bytes accessible: one reset in 32 asks the kernel which pages the owner
/// touched and records how deep from the bottom they reach, the others
/// clear that deep and release the rest), a purge releases all of its
/// pages (keeping the mapping), and a destroy unmaps it.
///
/// A region is two VMAs while part of it is accessible: build the pool with
/// [`maps_per_object(2)`](crate::Builder::maps_per_object) to derive its
/// caps from `vm.max_map_count`.
///
/// ```
/// use tidepool::region::RegionManager;
/// use tidepool::Pool;
///
/// let pool = Pool::builder(RegionManager::new(1 << 20).keep_resident(64 * 1024))
///     .maps_per_object(2)
///     .build()?;
/// let mut region = pool.get()?;
/// region.set_accessible(4096)?;
/// drop(region); // reset: zeros for the next owner, same mapping
/// assert_eq!(pool.get()?.accessible(), 4096);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RegionManager {
    len: usize,
    keep_resident: usize,
    reset_failures: AtomicU64,
    /// Bytes idle regions keep resident: added at each reset, taken away
    /// when a region is purged, destroyed or lent again (`lend`).
    idle_resident: AtomicUsize,
    /// How far from the bottom the pool's owners touch a kept part: one
    /// reset in 32 asks `mincore` and records it, the others clear that
    /// many pages and release the rest ([`Region::reset_planned`]).
    depth: ZeroDepth,
    /// The last exact reset found fewer than half the pages below the
    /// recorded depth in RAM: clearing that deep would write more than
    /// asking costs, so every reset asks (and looks at this again), but
    /// for a kept part small enough to clear whole. A heuristic: a stale
    /// value costs time, never zeros.
    sparse: AtomicBool,
}

/// The default [`keep_resident`](RegionManager::keep_resident): 1 MiB.
pub const DEFAULT_KEEP_RESIDENT: usize = 1 << 20;

impl RegionManager {
    /// Regions of `len` reserved bytes (rounded up to whole pages).
    pub fn new(len: usize) -> Self {
        Self {
            len,
            keep_resident: DEFAULT_KEEP_RESIDENT,
            reset_failures: AtomicU64::new(0),
            idle_resident: AtomicUsize::new(0),
            depth: ZeroDepth::new(),
            sparse: AtomicBool::new(false),
        }
    }

    /// How many bytes of a region given back stay accessible, their touched
    /// pages cleared in place rather than released (default
    /// [`DEFAULT_KEEP_RESIDENT`]). Only pages the pool's owners touch stay
    /// resident (those the last owner touched, in a reset that asks the
    /// kernel; in the others, the pages from the bottom as deep as those
    /// resets found them), so an idle region holds at most this much
    /// memory (and none once purged).
    pub fn keep_resident(mut self, bytes: usize) -> Self {
        self.keep_resident = bytes;
        self
    }

    /// The reserved size of each region.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether regions reserve nothing (never: at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bound on what a reset keeps resident.
    pub fn resident_bound(&self) -> usize {
        self.keep_resident
    }

    /// Bytes the idle regions keep resident: the pages their resets
    /// cleared in place below [`keep_resident`](RegionManager::keep_resident)
    /// (purged regions hold none). Exact when every region
    /// taken from the pool went through [`lend`](RegionManager::lend).
    pub fn idle_resident(&self) -> usize {
        self.idle_resident.load(Ordering::Relaxed)
    }

    /// Notes that `region`, just taken from the pool, is in use again: its
    /// kept pages leave [`idle_resident`](RegionManager::idle_resident).
    pub fn lend(&self, region: &mut Region) {
        self.forget_resident(std::mem::take(&mut region.kept));
    }

    /// `bytes` counted in `idle_resident` have stopped being idle or resident.
    fn forget_resident(&self, bytes: usize) {
        let _ = self
            .idle_resident
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(bytes))
            });
    }

    /// Regions whose reset failed (the kernel refused a call): each was
    /// destroyed instead of reused.
    pub fn reset_failures(&self) -> u64 {
        self.reset_failures.load(Ordering::Relaxed)
    }
}

impl Manage for RegionManager {
    type Item = Region;
    type Error = io::Error;

    fn create(&self) -> io::Result<Region> {
        Region::reserve(self.len)
    }

    fn recycle(&self, region: &mut Region) -> bool {
        let page = super::page_size();
        let keep_pages = region.accessible().min(self.keep_resident) / page;
        let plan =
            if keep_pages <= super::CLEAR_WHOLE_MAX_PAGES && self.sparse.load(Ordering::Relaxed) {
                // Sparse, but small enough that clearing it whole costs less
                // than asking.
                Some(keep_pages)
            } else if self.sparse.load(Ordering::Relaxed) {
                None
            } else {
                self.depth.plan(keep_pages)
            };
        let ok = match region.reset_planned(self.keep_resident, plan) {
            Ok(found) => {
                if let Some(touched) = found {
                    self.depth.record(touched.depth);
                    let deepest = self.depth.pages().min(keep_pages);
                    self.sparse
                        .store(2 * touched.pages < deepest, Ordering::Relaxed);
                }
                true
            }
            Err(_) => false,
        };
        if ok {
            self.idle_resident.fetch_add(region.kept, Ordering::Relaxed);
        } else {
            // Destroyed next: what a half-done reset kept was never counted.
            region.kept = 0;
            self.reset_failures.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    fn purge(&self, region: &mut Region) {
        let kept = region.kept;
        match region.set_accessible(0) {
            Ok(()) => self.forget_resident(kept),
            Err(_) => {
                self.reset_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn destroy(&self, region: Region) {
        self.forget_resident(region.kept);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::stack::zero_depth::EXACT_EVERY;

    /// One reset in `EXACT_EVERY` asks the kernel which pages the owner
    /// touched and records how deep they go; the others clear that deep
    /// and release the rest, unless the pages in RAM were too sparse for
    /// it (then every reset asks). Every region given back reads as zeros.
    #[test]
    #[cfg_attr(miri, ignore = "mincore(2) is not emulated")]
    fn one_reset_in_exact_every_measures_the_depth_the_others_use() {
        let page = super::super::page_size();
        let manager = RegionManager::new(64 * page).keep_resident(32 * page);
        let mut region = manager.create().unwrap();
        let zero = |r: &Region| {
            // SAFETY: the accessible part of a region this test owns.
            let bytes = unsafe { std::slice::from_raw_parts(r.as_ptr(), r.accessible()) };
            bytes.iter().all(|&b| b == 0)
        };
        let touch = |r: &Region, pages: &[usize]| {
            for &p in pages {
                // SAFETY: accessible pages of a region this test owns.
                unsafe { r.as_ptr().add(p * page).write(0x5a) };
            }
        };
        region.set_accessible(32 * page).unwrap();
        touch(&region, &[0, 2]);
        assert!(manager.recycle(&mut region), "the exact reset");
        assert_eq!(manager.idle_resident(), 2 * page);
        for round in 1..EXACT_EVERY {
            manager.lend(&mut region);
            touch(&region, &[0, 1, 2, 20]);
            assert!(manager.recycle(&mut region));
            // Pages 0 to 2 cleared in place, page 20 released. (Counted
            // before reading: a read maps the zero page, which counts as
            // resident.)
            assert_eq!(region.resident_bytes().unwrap(), 3 * page, "round {round}");
            assert_eq!(manager.idle_resident(), 3 * page);
            // Read back (which maps the zero page past the depth: the next
            // planned reset releases it again), but not before the exact
            // one, which would count those pages.
            if round + 1 < EXACT_EVERY {
                assert!(zero(&region), "round {round}");
            }
        }
        // The next exact reset finds page 20 in RAM too, and the depth
        // grows to 21 pages; 4 of them in RAM is too sparse to clear that
        // deep, so the resets after it ask as well, clearing what is in RAM.
        manager.lend(&mut region);
        touch(&region, &[20]);
        assert!(manager.recycle(&mut region));
        assert_eq!(region.resident_bytes().unwrap(), 4 * page);
        manager.lend(&mut region);
        touch(&region, &[25]);
        assert!(manager.recycle(&mut region));
        assert_eq!(region.resident_bytes().unwrap(), 5 * page, "asked: 25 kept");
        // Dense again (every page below 26 touched): the resets after the
        // next exact one clear 26 deep and release what lies past.
        manager.lend(&mut region);
        touch(&region, &(0..26).collect::<Vec<_>>());
        assert!(manager.recycle(&mut region));
        manager.lend(&mut region);
        touch(&region, &[30]);
        assert!(manager.recycle(&mut region));
        assert_eq!(
            region.resident_bytes().unwrap(),
            26 * page,
            "cleared 26 deep"
        );
        assert!(zero(&region));
        assert_eq!(manager.reset_failures(), 0);
        manager.destroy(region);
    }
}
