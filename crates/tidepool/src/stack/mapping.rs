//! One stack's memory: a writable range with a guard page below, a slot of
//! a slab shared with other stacks of its pool (or a slab of its own);
//! given back on drop.

use std::fmt;
use std::io;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::os;
use crate::stack::slab::Slabs;
use crate::stack::{GuardMode, StackError};

/// A stack's mapping: `guard_size` inaccessible bytes at the bottom, then
/// `usable_size` writable bytes up to [`top`](GuardedStack::top). Stacks grow
/// down, so running off the bottom of the usable part touches the guard and
/// the thread dies by `SIGSEGV` instead of scribbling over a neighbour.
///
/// ```text
///  limit()           bottom()                                top()
///    │ guard (PROT_NONE) │ usable (RW)  ... ◄── grows down ───  │
///    └───────────────────┴────────────────────────────────────┘
/// ```
///
/// Owns its memory, which stays mapped, guard and all, at least until it is
/// dropped. Every stack is carved from a *slab* (see
/// [the module notes](super#slabs)): a stack of a
/// [`StackPool`](super::StackPool) shares its slab with other stacks of the
/// same pool, and dropping it gives its slot back to the slab (its pages
/// released); the slab is unmapped with one `munmap` when its last stack
/// goes. A stack from [`GuardedStack::new`] is alone in a slab of one, so it
/// is unmapped on drop.
///
/// It is the [`Item`](crate::Manage::Item) of a
/// [`StackPool`](super::StackPool); you meet it through a
/// [`PooledStack`](super::PooledStack), or own one outright after
/// [`PooledStack::detach`](super::PooledStack::detach).
pub struct GuardedStack {
    /// The guard's first byte: the slot's start.
    start: NonNull<u8>,
    /// The slab set the slot belongs to, which knows the sizes and takes
    /// the slot back on drop. The `Arc` keeps the set (its counters, the
    /// slab's bookkeeping) alive as long as any of its stacks. Two words in
    /// all, which is all a `PooledStack` is: it must fit the C API's
    /// 64-byte stack header, and stay two words to move in registers.
    slabs: Arc<Slabs>,
}

// SAFETY: a `GuardedStack` is an owned address range; nothing in it is tied
// to the thread that mapped it, and `munmap` may run on any thread.
unsafe impl Send for GuardedStack {}
// SAFETY: `&GuardedStack` only reads the range's bounds (and `mincore`, which
// reads page tables); writing into the stack needs raw pointers and
// `unsafe` on the caller's side.
unsafe impl Sync for GuardedStack {}

impl GuardedStack {
    /// Maps a stack of its own, outside any pool: `usable_size` bytes
    /// (rounded up to whole pages, at least one) above a one-page guard, in
    /// a slab of one (one `mmap`, and one guard-marker `madvise` or one
    /// `mprotect` as [`GuardMode::Auto`] picks; unmapped on drop). To pick
    /// the guard yourself: [`with_guard_mode`](GuardedStack::with_guard_mode).
    ///
    /// ```
    /// let stack = tidepool::stack::GuardedStack::new(10_000)?;
    /// assert_eq!(stack.usable_size() % 4096, 0);
    /// assert!(stack.usable_size() >= 10_000);
    /// # Ok::<(), tidepool::stack::StackError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`StackPool::get`](super::StackPool::get), less `Exhausted`
    /// (and without the reclaim and retry). A size too large to map at all
    /// is [`StackError::Os`] with `EINVAL`.
    pub fn new(usable_size: usize) -> Result<Self, StackError> {
        Self::with_guard_mode(usable_size, GuardMode::Auto)
    }

    /// As [`new`](GuardedStack::new), with the guard made as `mode` says:
    /// [`GuardMode::Protect`] maps the stack `PROT_NONE` and opens its
    /// usable part with one `mprotect` (two VMAs, what a stack cost before
    /// guard markers); [`GuardMode::Markers`] installs a guard marker
    /// (one VMA), falling back to `mprotect` where the kernel refuses it.
    ///
    /// ```
    /// use tidepool::stack::{GuardMode, GuardedStack};
    ///
    /// let stack = GuardedStack::with_guard_mode(64 * 1024, GuardMode::Protect)?;
    /// assert_eq!(stack.usable_size(), 64 * 1024);
    /// # Ok::<(), tidepool::stack::StackError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`new`](GuardedStack::new); [`GuardMode::Markers`] on a
    /// kernel without them is [`StackError::Os`] from `madvise` only if
    /// the `mprotect` fallback fails too.
    pub fn with_guard_mode(usable_size: usize, mode: GuardMode) -> Result<Self, StackError> {
        let page = os::page_size();
        let Some(usable) = usable_size
            .max(1)
            .checked_next_multiple_of(page)
            .filter(|&u| u.checked_add(page).is_some())
        else {
            return Err(StackError::Os {
                call: "mmap",
                source: io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        let slabs = Arc::new(Slabs::new(
            page,
            usable,
            Some(1),
            mode.resolve() == GuardMode::Markers,
        ));
        slabs.carve(1)?.pop().ok_or_else(|| StackError::Os {
            call: "mmap",
            source: io::Error::other("no stack carved"),
        })
    }

    /// A stack in the slot at `start` of one of `slabs`'s slabs: the guard
    /// at `start`, already `PROT_NONE`, the usable part above it writable.
    /// The slab stays mapped while the stack holds the slot.
    pub(crate) fn in_slab(start: NonNull<u8>, slabs: Arc<Slabs>) -> Self {
        Self { start, slabs }
    }

    /// The slab set the stack belongs to.
    pub(crate) fn slabs(&self) -> &Arc<Slabs> {
        &self.slabs
    }

    /// Takes the stack apart without giving its slot back: its start and
    /// its set, for a batch teardown that gives many slots back in one go.
    pub(crate) fn into_parts(self) -> (NonNull<u8>, Arc<Slabs>) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the `Arc` is
        // moved out exactly once (no double drop, no leak of the count).
        let slabs = unsafe { std::ptr::read(&this.slabs) };
        (this.start, slabs)
    }

    /// The highest address, one past the last usable byte: where a stack
    /// pointer starts. Page-aligned.
    pub fn top(&self) -> NonNull<u8> {
        // SAFETY: one past the end of the mapping, which is in bounds of the
        // same allocation for pointer arithmetic, and not null.
        unsafe { self.start.add(self.slabs.stride()) }
    }

    /// The lowest usable address, just above the guard. Page-aligned.
    pub fn bottom(&self) -> NonNull<u8> {
        // SAFETY: the guard is within the mapping.
        unsafe { self.start.add(self.slabs.guard_size()) }
    }

    /// The lowest address of the mapping, the guard included (corosensei's
    /// `limit`). Page-aligned.
    pub fn limit(&self) -> NonNull<u8> {
        self.start
    }

    /// Writable bytes between [`bottom`](GuardedStack::bottom) and
    /// [`top`](GuardedStack::top): a whole number of pages.
    pub fn usable_size(&self) -> usize {
        self.slabs.usable_size()
    }

    /// Inaccessible bytes below [`bottom`](GuardedStack::bottom).
    pub fn guard_size(&self) -> usize {
        self.slabs.guard_size()
    }

    /// The usable addresses, `bottom..top`.
    pub fn usable(&self) -> Range<usize> {
        self.bottom().as_ptr() as usize..self.top().as_ptr() as usize
    }

    /// The guard's addresses, `limit..bottom`.
    pub fn guard(&self) -> Range<usize> {
        self.limit().as_ptr() as usize..self.bottom().as_ptr() as usize
    }

    /// Makes every usable byte read as zero, as on a fresh stack, at the
    /// cost of what its users touch: of the top `keep_resident` bytes
    /// (rounded down to pages), the pages they touch are cleared in place
    /// and stay in RAM, so the next fiber's first frames fault nothing in;
    /// every other page is released (`madvise`), whether it is in RAM,
    /// swapped out or never touched.
    ///
    /// Which pages were touched is asked of the kernel (`mincore`) once in
    /// 32 zeroings of a pool's stacks: those clear the pages in RAM and
    /// record how deep the deepest was. The others clear that many pages
    /// from the top with `memset` and release all below in one `madvise`,
    /// which costs less than the `mincore`; a page touched deeper is
    /// released, not cleared (zero either way, faulted in again when next
    /// touched). The depth only grows, up to `keep_resident`. The
    /// `madvise` calls are counted in
    /// [`StackStats::madvise_calls`](super::StackStats::madvise_calls).
    /// (wasmtime's `async_stack_zeroing`, for a stack reused from a pool.)
    ///
    /// Off Linux and Android, where released pages may keep their contents
    /// (`MADV_FREE`), the whole usable part is cleared in place.
    ///
    /// ```
    /// use tidepool::stack::GuardedStack;
    ///
    /// let mut stack = GuardedStack::new(64 * 1024)?;
    /// let top = stack.top().as_ptr();
    /// // SAFETY: the top bytes are writable and ours.
    /// unsafe { top.sub(100).write_bytes(7, 100) };
    /// stack.zero(4096)?;
    /// // SAFETY: as above.
    /// assert_eq!(unsafe { top.sub(1).read() }, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// What `mincore` or `madvise` reported (not expected for a live
    /// mapping); the stack is then cleared in place, whole.
    pub fn zero(&mut self, keep_resident: usize) -> io::Result<()> {
        let result = if cfg!(any(target_os = "linux", target_os = "android")) {
            self.zero_touched(keep_resident)
        } else {
            Ok(())
        };
        if result.is_err() || !cfg!(any(target_os = "linux", target_os = "android")) {
            // SAFETY: the usable part is writable and ours (`&mut self`).
            unsafe { self.bottom().as_ptr().write_bytes(0, self.usable_size()) };
        }
        result
    }

    /// [`zero`](Self::zero) where released pages read back as zeros.
    fn zero_touched(&mut self, keep_resident: usize) -> io::Result<()> {
        let page = os::page_size();
        let usable = self.usable_size();
        let keep = (keep_resident / page * page).min(usable);
        if keep == 0 {
            return self.zero_top(0);
        }
        if let Some(pages) = self.slabs.zero_depth().plan(keep / page) {
            return self.zero_top(pages * page);
        }
        let mut map = Vec::new();
        // SAFETY: the top `keep` bytes of the usable part: mapped.
        unsafe { os::resident_pages(self.page(usable - keep), keep, &mut map)? };
        let deepest = map.iter().position(|&b| b & 1 != 0);
        self.slabs
            .zero_depth()
            .record(deepest.map_or(0, |i| map.len() - i));
        // Pages from the bottom, in runs: released (not in RAM, or below
        // the kept top) or cleared (in RAM, in the kept top).
        let first_kept = (usable - keep) / page;
        let in_ram = |i: usize| i >= first_kept && map[i - first_kept] & 1 != 0;
        let pages = usable / page;
        let (mut i, mut calls) = (0, 0);
        while i < pages {
            let resident = in_ram(i);
            let mut j = i + 1;
            while j < pages && in_ram(j) == resident {
                j += 1;
            }
            let (at, len) = (self.page(i * page), (j - i) * page);
            if resident {
                // SAFETY: pages of the usable part: writable, ours.
                unsafe { at.as_ptr().write_bytes(0, len) };
            } else {
                calls += 1;
                // SAFETY: private anonymous pages of the usable part, ours
                // (`&mut self`), whose contents nobody needs.
                if let Err(e) = unsafe { os::release_pages(at, len) } {
                    self.slabs.count_releases(calls);
                    return Err(e);
                }
            }
            i = j;
        }
        self.slabs.count_releases(calls);
        Ok(())
    }

    /// [`zero`](Self::zero) without asking which pages are in RAM: the top
    /// `keep` bytes cleared whole, everything below them released in one
    /// call.
    fn zero_top(&mut self, keep: usize) -> io::Result<()> {
        let usable = self.usable_size();
        if keep < usable {
            // SAFETY: private anonymous pages of the usable part, ours
            // (`&mut self`), whose contents nobody needs.
            let released = unsafe { os::release_pages(self.page(0), usable - keep) };
            self.slabs.count_releases(1);
            released?;
        }
        // SAFETY: the top `keep` bytes of the usable part: writable, ours.
        unsafe { self.page(usable - keep).as_ptr().write_bytes(0, keep) };
        Ok(())
    }

    /// The address `offset` bytes above the usable part's bottom.
    fn page(&self, offset: usize) -> NonNull<u8> {
        debug_assert!(offset <= self.usable_size());
        // SAFETY: inside the usable part, or one past it.
        unsafe { self.bottom().add(offset) }
    }

    /// Bytes of the usable part that are in RAM now (`mincore`); a
    /// snapshot, for diagnostics and tests.
    ///
    /// # Errors
    ///
    /// What `mincore` reported; not expected for a live mapping.
    pub fn resident_bytes(&self) -> io::Result<usize> {
        // SAFETY: the usable part is mapped until `self` drops.
        unsafe { os::resident_bytes(self.bottom(), self.usable_size()) }
    }
}

impl Drop for GuardedStack {
    fn drop(&mut self) {
        self.slabs.free_one(self.start);
    }
}

impl fmt::Debug for GuardedStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedStack")
            .field("guard", &format_args!("{:#x?}", self.guard()))
            .field("usable", &format_args!("{:#x?}", self.usable()))
            .finish()
    }
}
