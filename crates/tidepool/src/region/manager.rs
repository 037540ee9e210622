//! [`RegionManager`]: how a [`Pool`](crate::Pool) makes, resets, purges and
//! unmaps [`Region`]s of one size.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::Region;
use crate::Manage;

/// Makes [`Region`]s of one reserved size for a [`Pool`](crate::Pool):
/// a region given back is reset for its next owner
/// ([`Region::reset`], keeping up to [`keep_resident`](RegionManager::keep_resident)
/// bytes resident), a purge releases all of its pages (keeping the
/// mapping), and a destroy unmaps it.
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
        }
    }

    /// How many bytes of a region given back stay accessible, their touched
    /// pages cleared in place rather than released (default
    /// [`DEFAULT_KEEP_RESIDENT`]). Only pages the last owner touched stay
    /// resident, so an idle region holds at most this much memory (and
    /// none once purged).
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

    /// Bytes the idle regions keep resident: the pages their last owners
    /// touched below [`keep_resident`](RegionManager::keep_resident),
    /// cleared in place (purged regions hold none). Exact when every region
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
        let ok = region.reset(self.keep_resident).is_ok();
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
