//! How deep into a zeroed stack's kept top its pool's fibers reach: what
//! [`GuardedStack::zero`](super::GuardedStack::zero) clears with `memset`
//! without asking the kernel which pages are in RAM. A region pool's
//! manager keeps one too, counted from a region's bottom
//! (`RegionManager`, `Region::reset_planned`).
//!
//! Finding the touched pages exactly takes a `mincore`, a system call that
//! also takes and frees a page in the kernel: it costs about as much as
//! clearing a few dozen pages. Fibers of one pool reach about as deep each
//! time, so one zeroing in [`EXACT_EVERY`] is exact (clears the touched
//! pages of the kept top, releases the others) and records how deep the
//! deepest touched page was; the others clear that many pages from the top
//! and release every page below in the same call that releases the rest
//! of the stack. A page a fiber touched below the recorded depth is
//! released rather than cleared: zero either way, only faulted in again.
//! The depth only grows (the pages it covers are in RAM after every
//! zeroing, so an exact one sees them too), up to the kept top.

use crate::sync::atomic::{AtomicU64, Ordering};

/// One zeroing in this many asks `mincore` which pages are in RAM.
pub(crate) const EXACT_EVERY: u64 = 32;

/// A pool's recorded depth and its count of zeroings.
#[derive(Debug)]
pub(crate) struct ZeroDepth {
    /// Pages from the top (a region pool's: from the bottom) that the
    /// exact zeroings found touched, at most
    /// (deepest so far); 0 before the first.
    pages: AtomicU64,
    /// Zeroings so far; those at a multiple of [`EXACT_EVERY`] are exact.
    zeroings: AtomicU64,
}

impl ZeroDepth {
    pub(crate) fn new() -> Self {
        Self {
            pages: AtomicU64::new(0),
            zeroings: AtomicU64::new(0),
        }
    }

    /// How this zeroing clears a kept top of `keep_pages`: `None` for an
    /// exact one (then [`record`](Self::record) what it found), or the
    /// pages to clear from the top.
    pub(crate) fn plan(&self, keep_pages: usize) -> Option<usize> {
        let n = self.zeroings.fetch_add(1, Ordering::Relaxed);
        if n % EXACT_EVERY == 0 {
            return None;
        }
        let pages = self.pages.load(Ordering::Relaxed);
        Some(usize::try_from(pages).map_or(keep_pages, |p| p.min(keep_pages)))
    }

    /// An exact zeroing found pages touched down to `pages` from the top
    /// (a region's: up to `pages` from the bottom).
    pub(crate) fn record(&self, pages: usize) {
        self.pages.fetch_max(pages as u64, Ordering::Relaxed);
    }

    /// The recorded depth, in pages (a region pool's resets read it; its
    /// stacks' need only [`plan`](Self::plan)).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn pages(&self) -> usize {
        self.pages.load(Ordering::Relaxed) as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_zeroing_in_exact_every_is_exact_and_the_depth_only_grows() {
        let depth = ZeroDepth::new();
        assert_eq!(depth.plan(16), None, "the first is exact");
        depth.record(3);
        for _ in 1..EXACT_EVERY {
            assert_eq!(depth.plan(16), Some(3));
        }
        assert_eq!(depth.plan(16), None);
        depth.record(1);
        assert_eq!(depth.pages(), 3, "never shrinks");
        depth.record(40);
        assert_eq!(depth.plan(16), Some(16), "bounded by the kept top");
        assert_eq!(depth.plan(64), Some(40));
    }
}
