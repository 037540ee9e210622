//! Regions: reserved address ranges whose accessible part starts at the
//! beginning and grows or shrinks in place, reset to zeros for their next
//! owner without being unmapped. The mapping behind a WebAssembly linear
//! memory (`tidepool-wasmtime`'s memory creator), pooled by a
//! [`Pool`](crate::Pool) of [`RegionManager`].
//!
//! ```text
//!  as_ptr()                 accessible()                               len()
//!  │ read-write, zeros for a new owner │ PROT_NONE (growth room, guard)   │
//!  └───────────────────────────────────┴──────────────────────────────────┘
//! ```
//!
//! A reset keeps the pages the last owner touched resident and clears them
//! in place, up to a bound (`keep_resident`): the next owner's first
//! touches then fault nothing in. Pages past the bound are released
//! (`MADV_DONTNEED`) and made inaccessible. Which pages were touched comes
//! from the kernel (`mincore`); the kept pages not in RAM are released
//! too, as a swapped-out page still holds its data. A pool's [`RegionManager`] asks in one reset in 32 and
//! records how deep from the bottom its owners reach; the other resets
//! clear that many pages with `memset` and release the rest of the kept
//! part in one call (`Region::reset_planned`). Linux and Android only,
//! where released private pages read back as zeros.

mod manager;

use std::fmt;
use std::io;
use std::ptr::NonNull;

pub use manager::{RegionManager, DEFAULT_KEEP_RESIDENT};

use crate::os;

/// A reserved range of address space, all of it `PROT_NONE` but a
/// read-write prefix ([`accessible`](Region::accessible)). Unmapped on drop.
///
/// ```
/// use tidepool::region::Region;
///
/// let mut region = Region::reserve(1 << 20)?;
/// region.set_accessible(64 * 1024)?;
/// // SAFETY: the first 64 KiB are ours and read-write.
/// unsafe { region.as_ptr().write(7) };
/// region.reset(usize::MAX)?; // zeros again, same mapping
/// // SAFETY: as above.
/// assert_eq!(unsafe { region.as_ptr().read() }, 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Region {
    start: NonNull<u8>,
    /// Reserved bytes: a whole number of pages.
    len: usize,
    /// Read-write bytes from `start`: a whole number of pages, `<= len`.
    accessible: usize,
    /// Bytes the last reset kept resident (cleared in place); 0 once
    /// released or reset again.
    kept: usize,
}

// SAFETY: a `Region` is an owned address range; nothing in it is tied to
// the thread that mapped it, and `munmap` may run on any thread.
unsafe impl Send for Region {}
// SAFETY: `&Region` only reads its bounds (and page tables, `mincore`);
// writing into it takes raw pointers and `unsafe` on the caller's side.
unsafe impl Sync for Region {}

impl Region {
    /// Reserves `len` bytes (rounded up to whole pages), all inaccessible.
    /// Costs address space only: no memory until pages are touched.
    ///
    /// # Errors
    ///
    /// `len` is 0 or overflows when rounded (`EINVAL`), or the kernel
    /// refused the mapping (`ENOMEM` at `vm.max_map_count` or out of
    /// address space).
    pub fn reserve(len: usize) -> io::Result<Self> {
        let len = round_up(len)
            .filter(|&n| n != 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let start = os::reserve(len, os::Access::None)?;
        Ok(Self {
            start,
            len,
            accessible: 0,
            kept: 0,
        })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.start.as_ptr()
    }

    /// Bytes reserved, accessible or not.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is reserved (never: a region holds at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes from the start that are readable and writable.
    pub fn accessible(&self) -> usize {
        self.accessible
    }

    /// Bytes the last [`reset`](Region::reset) kept resident, cleared in
    /// place (0 after a release of the accessible part or before any
    /// reset); the owner's own touches since are not counted.
    pub fn kept_resident(&self) -> usize {
        self.kept
    }

    /// Makes exactly the first `len` bytes (rounded up to whole pages)
    /// read-write and the rest inaccessible. Pages made accessible that
    /// were not before read as zeros; pages taken away are released first.
    ///
    /// # Errors
    ///
    /// `len` past the reservation (`EINVAL`), or the kernel refused
    /// (`ENOMEM`: the map count); the region is unchanged then.
    pub fn set_accessible(&mut self, len: usize) -> io::Result<()> {
        let len = round_up(len)
            .filter(|&n| n <= self.len)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        if len > self.accessible {
            // SAFETY: pages of our own reservation past the accessible part:
            // nobody holds references into them.
            unsafe { os::make_writable(self.page_at(self.accessible), len - self.accessible) }?;
        } else if len < self.accessible {
            self.release(len, self.accessible)?;
            self.kept = self.kept.min(len);
        }
        self.accessible = len;
        Ok(())
    }

    /// Readies the region for its next owner: every accessible byte reads
    /// zero afterwards. Of the accessible part, up to `keep_resident`
    /// bytes (rounded down to pages) stay accessible and their resident
    /// pages are cleared in place; the rest is released and made
    /// inaccessible, so `accessible()` is at most `keep_resident` after.
    /// A kept part of up to 16 pages is cleared whole with `memset`
    /// (cheaper than asking the kernel which of its pages are in RAM), and
    /// is then in RAM whole.
    ///
    /// # Errors
    ///
    /// The kernel refused a call; the region is then released and
    /// inaccessible from the first page on, or unchanged.
    pub fn reset(&mut self, keep_resident: usize) -> io::Result<()> {
        let page = os::page_size();
        let keep = self.shrink_to_kept(keep_resident)?;
        if keep == 0 {
            return Ok(());
        }
        if keep / page <= CLEAR_WHOLE_MAX_PAGES {
            // SAFETY: the accessible part: mapped read-write and ours alone
            // (the owner gave the region back).
            unsafe { self.start.as_ptr().write_bytes(0, keep) };
            self.kept = keep;
            return Ok(());
        }
        let mut map = Vec::new();
        // SAFETY: our reservation, mapped.
        if let Err(e) = unsafe { os::resident_pages(self.start, keep, &mut map) } {
            self.release(0, keep)?;
            self.accessible = 0;
            return Err(e);
        }
        if let Err(e) = self.clear_by_map(&map) {
            return Err(self.fail_reset(keep, e));
        }
        Ok(())
    }

    /// Clears the pages of the kept part that `map` (from `mincore`) says
    /// are in RAM, in place, and releases the others, in runs. A page not
    /// in RAM may still hold the last owner's data (swapped out), so it is
    /// released, not left: zeros either way, and not faulted in.
    fn clear_by_map(&mut self, map: &[u8]) -> io::Result<()> {
        let page = os::page_size();
        let mut i = 0;
        while i < map.len() {
            let resident = map[i] & 1 != 0;
            let mut j = i + 1;
            while j < map.len() && (map[j] & 1 != 0) == resident {
                j += 1;
            }
            let (at, len) = (self.page_at(i * page), (j - i) * page);
            if resident {
                // SAFETY: pages of the accessible part: mapped read-write
                // and ours alone (the owner gave the region back).
                unsafe { at.as_ptr().write_bytes(0, len) };
                self.kept += len;
            } else {
                // SAFETY: accessible pages of our reservation whose
                // contents nobody needs (being reset); they stay accessible.
                unsafe { os::release_pages(at, len)? };
            }
            i = j;
        }
        Ok(())
    }

    /// [`reset`](Self::reset) as its pool plans it (`RegionManager`, after
    /// the stacks' `ZeroDepth`): `None` asks `mincore`, clears the
    /// resident pages of the kept part in place, releases the others and
    /// returns how deep from the bottom the resident ones reach and how
    /// many there are, in pages;
    /// `Some(pages)` clears that many pages from the bottom with `memset`
    /// and releases the rest of the kept part in one call, asking nothing.
    /// A page touched past `pages` is released rather than cleared: zero
    /// either way, only faulted in again. Either way the kept part stays
    /// accessible.
    ///
    /// # Errors
    ///
    /// As for [`reset`](Self::reset).
    pub(crate) fn reset_planned(
        &mut self,
        keep_resident: usize,
        plan: Option<usize>,
    ) -> io::Result<Option<Touched>> {
        let page = os::page_size();
        let keep = self.shrink_to_kept(keep_resident)?;
        if keep == 0 {
            return Ok(None);
        }
        let cleared = match plan {
            Some(pages) => (pages * page).min(keep),
            None => {
                let mut map = Vec::new();
                // SAFETY: our reservation, mapped.
                if let Err(e) = unsafe { os::resident_pages(self.start, keep, &mut map) } {
                    return Err(self.fail_reset(keep, e));
                }
                let depth = map.iter().rposition(|&b| b & 1 != 0).map_or(0, |i| i + 1);
                if let Err(e) = self.clear_by_map(&map) {
                    return Err(self.fail_reset(keep, e));
                }
                return Ok(Some(Touched {
                    depth,
                    pages: self.kept / page,
                }));
            }
        };
        if cleared < keep {
            // SAFETY: accessible pages of our reservation whose contents
            // nobody needs (being reset); they stay accessible.
            if let Err(e) = unsafe { os::release_pages(self.page_at(cleared), keep - cleared) } {
                return Err(self.fail_reset(keep, e));
            }
        }
        // SAFETY: the first `cleared` bytes of the accessible part: mapped
        // read-write and ours alone (the owner gave the region back).
        unsafe { self.start.as_ptr().write_bytes(0, cleared) };
        self.kept = cleared;
        Ok(None)
    }

    /// The first step of a reset: what lies past `keep_resident` (rounded
    /// down to pages) is released and made inaccessible; returns the kept
    /// part's length, `kept` cleared.
    fn shrink_to_kept(&mut self, keep_resident: usize) -> io::Result<usize> {
        let page = os::page_size();
        let keep = self.accessible.min(keep_resident / page * page);
        self.kept = 0;
        if keep < self.accessible {
            self.release(keep, self.accessible)?;
            self.accessible = keep;
        }
        Ok(keep)
    }

    /// A reset failed with `e` on a kept part of `keep` bytes: the region is
    /// released and made inaccessible from the first page on (if the
    /// kernel allows), so nothing of the last owner's is left readable.
    fn fail_reset(&mut self, keep: usize, e: io::Error) -> io::Error {
        self.kept = 0;
        if self.release(0, keep).is_ok() {
            self.accessible = 0;
        }
        e
    }

    /// Bytes of the region resident in RAM now.
    ///
    /// # Errors
    ///
    /// `mincore` failed.
    pub fn resident_bytes(&self) -> io::Result<usize> {
        // SAFETY: our reservation, mapped.
        unsafe { os::resident_bytes(self.start, self.len) }
    }

    /// Releases `[from, to)` (page offsets) and makes it inaccessible.
    fn release(&mut self, from: usize, to: usize) -> io::Result<()> {
        let (start, len) = (self.page_at(from), to - from);
        // SAFETY: accessible pages of our reservation whose contents nobody
        // needs (taken away from the owner's view, or being reset).
        unsafe {
            os::release_pages(start, len)?;
            os::make_inaccessible(start, len)
        }
    }

    fn page_at(&self, offset: usize) -> NonNull<u8> {
        // SAFETY: `offset <= len`: inside the reservation or one past it.
        unsafe { NonNull::new_unchecked(self.start.as_ptr().add(offset)) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // The accessible pages go back a step at a time first, so that the
        // `munmap` frees none while it holds the address-space lock for
        // write (see `DEFAULT_RELEASE_STEP`). A failed step leaves its
        // pages to the `munmap`.
        let mut at = 0;
        while at < self.accessible {
            let len = crate::DEFAULT_RELEASE_STEP.min(self.accessible - at);
            // SAFETY: accessible pages of our reservation, whose owner is
            // gone.
            let _ = unsafe { os::release_pages(self.page_at(at), len) };
            at += len;
        }
        // SAFETY: our own reservation, unmapped once; nothing refers into it
        // (its owner is gone).
        if unsafe { os::unmap(self.start, self.len) }.is_err() {
            os::count_unmap_failure();
        }
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("start", &self.start)
            .field("len", &self.len)
            .field("accessible", &self.accessible)
            .finish()
    }
}

/// What an exact [`Region::reset_planned`] found of the kept part, in
/// pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Touched {
    /// One past the highest page in RAM, from the bottom.
    pub(crate) depth: usize,
    /// Pages in RAM.
    pub(crate) pages: usize,
}

/// The most pages of a kept part that [`Region::reset`] clears whole with
/// `memset`, rather than where `mincore` finds them in RAM: that system
/// call also takes and frees a page in the kernel, which costs about as
/// much as writing this many pages. A part this small is then in RAM
/// whole, which is what keeping it means.
const CLEAR_WHOLE_MAX_PAGES: usize = 16;

/// The OS page size: regions are reserved, opened and reset in whole
/// pages of it.
pub fn page_size() -> usize {
    os::page_size()
}

/// `len` rounded up to whole pages; `None` on overflow.
fn round_up(len: usize) -> Option<usize> {
    let page = os::page_size();
    len.checked_add(page - 1).map(|n| n / page * page)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn touch(region: &Region, pages: impl IntoIterator<Item = usize>) {
        let page = os::page_size();
        for p in pages {
            // SAFETY: accessible pages of a region this test owns.
            unsafe { region.as_ptr().add(p * page).write_bytes(0xa5, 16) };
        }
    }

    fn all_zero(region: &Region) -> bool {
        // SAFETY: the accessible part of a region this test owns.
        let bytes = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.accessible()) };
        bytes.iter().all(|&b| b == 0)
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore(2) is not emulated")]
    fn reset_zeroes_in_place_up_to_the_bound_and_releases_the_rest() {
        let page = os::page_size();
        let kept = 2 * CLEAR_WHOLE_MAX_PAGES;
        let mut region = Region::reserve(4 * kept * page).unwrap();
        region.set_accessible(2 * kept * page).unwrap();
        touch(&region, [0, 3, 2 * kept - 1]);
        assert_eq!(region.resident_bytes().unwrap(), 3 * page);
        region.reset(kept * page).unwrap();
        assert_eq!(region.accessible(), kept * page);
        // Pages 0 and 3 kept (cleared in place), the last page released.
        // (Checked before reading: a read maps the zero page, which counts
        // as resident.)
        assert_eq!(region.resident_bytes().unwrap(), 2 * page);
        assert_eq!(region.kept_resident(), 2 * page);
        assert!(all_zero(&region));
        // Grown again: the released pages read as zeros.
        region.set_accessible(2 * kept * page).unwrap();
        assert!(all_zero(&region));
    }

    /// The exact plan clears the resident pages of the kept part and
    /// reports how deep from the bottom they reach; a planned depth clears
    /// that many pages and releases the rest, a page touched past it
    /// included: zeros either way, and only the depth stays in RAM.
    #[test]
    #[cfg_attr(miri, ignore = "mincore(2) is not emulated")]
    fn a_planned_reset_clears_its_depth_and_releases_the_rest() {
        let page = os::page_size();
        let kept = 32;
        let mut region = Region::reserve(4 * kept * page).unwrap();
        region.set_accessible(2 * kept * page).unwrap();
        touch(&region, [0, 5, 2 * kept - 1]);
        let found = region.reset_planned(kept * page, None).unwrap();
        assert_eq!(found, Some(Touched { depth: 6, pages: 2 }));
        assert_eq!(region.accessible(), kept * page);
        assert_eq!(region.resident_bytes().unwrap(), 2 * page);
        assert_eq!(region.kept_resident(), 2 * page);
        assert!(all_zero(&region));
        touch(&region, [0, 1, 20]);
        assert_eq!(region.reset_planned(kept * page, Some(6)).unwrap(), None);
        // Pages 0 to 5 cleared and in RAM; page 20, past the depth,
        // released.
        assert_eq!(region.resident_bytes().unwrap(), 6 * page);
        assert_eq!(region.kept_resident(), 6 * page);
        assert!(all_zero(&region));
        // Grown again: every page past the kept part reads as zero.
        region.set_accessible(2 * kept * page).unwrap();
        assert!(all_zero(&region));
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore(2) is not emulated")]
    fn a_small_kept_part_is_cleared_whole_and_stays_in_ram_whole() {
        let page = os::page_size();
        let kept = CLEAR_WHOLE_MAX_PAGES;
        let mut region = Region::reserve(4 * kept * page).unwrap();
        region.set_accessible(2 * kept * page).unwrap();
        touch(&region, [0, 3, 2 * kept - 1]);
        region.reset(kept * page).unwrap();
        assert_eq!(region.accessible(), kept * page);
        // Every kept page is in RAM now (written with zeros), the one past
        // them released.
        assert_eq!(region.resident_bytes().unwrap(), kept * page);
        assert_eq!(region.kept_resident(), kept * page);
        assert!(all_zero(&region));
        region.set_accessible(2 * kept * page).unwrap();
        assert!(all_zero(&region));
    }

    #[test]
    #[cfg_attr(miri, ignore = "mincore(2) is not emulated")]
    fn shrinking_releases_and_bad_sizes_change_nothing() {
        let page = os::page_size();
        let mut region = Region::reserve(8 * page).unwrap();
        region.set_accessible(8 * page).unwrap();
        touch(&region, 0..8);
        region.set_accessible(2 * page).unwrap();
        assert_eq!(region.resident_bytes().unwrap(), 2 * page);
        assert_eq!(region.kept_resident(), 0);
        let e = region.set_accessible(9 * page).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(region.accessible(), 2 * page);
        region.reset(0).unwrap();
        assert_eq!(
            (region.accessible(), region.resident_bytes().unwrap()),
            (0, 0)
        );
        region.set_accessible(0).unwrap(); // a purge of a purged region
        region.set_accessible(1).unwrap();
        assert_eq!(region.accessible(), page);
        assert!(Region::reserve(0).is_err());
        assert!(Region::reserve(usize::MAX).is_err());
    }
}
