//! [`RegionManager`]: how a [`Pool`](crate::Pool) makes, resets, purges and
//! unmaps [`Region`]s of one size.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

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
        if !ok {
            self.reset_failures.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    fn purge(&self, region: &mut Region) {
        if region.set_accessible(0).is_err() {
            self.reset_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}
