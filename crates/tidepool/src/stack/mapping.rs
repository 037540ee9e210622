//! One stack's memory: a mapping with a guard page below, unmapped on drop.

use std::fmt;
use std::io;
use std::ops::Range;
use std::ptr::NonNull;

use crate::os;
use crate::stack::StackError;

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
/// Owns its mapping, which it unmaps when dropped. It is the
/// [`Item`](crate::Manage::Item) of a [`StackPool`](super::StackPool); you
/// meet it through a [`PooledStack`](super::PooledStack), or own one outright
/// after [`PooledStack::detach`](super::PooledStack::detach).
///
/// Two words: the guard is always one page, so only the usable part is
/// stored. A pooled stack moves through a thread cache and a guard as one
/// 16-byte register on x86-64; a third word would travel as 16 + 8 bytes,
/// and reloading such a pair as one 16-byte value defeats the CPU's store
/// forwarding (a stall of ~10 cycles, several times per get + drop).
pub struct GuardedStack {
    /// The lowest usable address; the guard page lies just below.
    bottom: NonNull<u8>,
    usable_size: usize,
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
    /// (rounded up to whole pages, at least one) above a one-page guard.
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
    /// (and without the reclaim and retry).
    pub fn new(usable_size: usize) -> Result<Self, StackError> {
        let page = os::page_size();
        // A size too large to round is passed on unrounded, for `mmap` to
        // refuse with EINVAL.
        let usable = usable_size
            .max(1)
            .checked_next_multiple_of(page)
            .unwrap_or(usable_size);
        Self::map(usable)
    }

    /// Maps a new stack of `usable_size` bytes (a multiple of the page size:
    /// the pool rounds it) above a one-page guard.
    pub(crate) fn map(usable_size: usize) -> Result<Self, StackError> {
        let guard_size = os::page_size();
        match os::map_guarded(guard_size, usable_size) {
            Ok(start) => Ok(Self {
                // SAFETY: `guard_size` is within the mapping just made.
                bottom: unsafe { start.add(guard_size) },
                usable_size,
            }),
            Err(failure) => Err(StackError::from_map_failure(
                failure,
                guard_size.saturating_add(usable_size),
            )),
        }
    }

    /// The highest address, one past the last usable byte: where a stack
    /// pointer starts. Page-aligned.
    #[inline]
    pub fn top(&self) -> NonNull<u8> {
        // SAFETY: one past the end of the mapping, which is in bounds of the
        // same allocation for pointer arithmetic, and not null.
        unsafe { self.bottom.add(self.usable_size) }
    }

    /// The lowest usable address, just above the guard. Page-aligned.
    #[inline]
    pub fn bottom(&self) -> NonNull<u8> {
        self.bottom
    }

    /// The lowest address of the mapping, the guard included (corosensei's
    /// `limit`). Page-aligned.
    #[inline]
    pub fn limit(&self) -> NonNull<u8> {
        // SAFETY: the guard page below `bottom` is part of the mapping.
        unsafe { self.bottom.sub(self.guard_size()) }
    }

    /// Writable bytes between [`bottom`](GuardedStack::bottom) and
    /// [`top`](GuardedStack::top): a whole number of pages.
    pub fn usable_size(&self) -> usize {
        self.usable_size
    }

    /// Inaccessible bytes below [`bottom`](GuardedStack::bottom): one page.
    pub fn guard_size(&self) -> usize {
        os::page_size()
    }

    /// The usable addresses, `bottom..top`.
    pub fn usable(&self) -> Range<usize> {
        self.bottom().as_ptr() as usize..self.top().as_ptr() as usize
    }

    /// The guard's addresses, `limit..bottom`.
    pub fn guard(&self) -> Range<usize> {
        self.limit().as_ptr() as usize..self.bottom().as_ptr() as usize
    }

    /// Bytes of the usable part that are in RAM now (`mincore`); a
    /// snapshot, for diagnostics and tests.
    ///
    /// # Errors
    ///
    /// What `mincore` reported; not expected for a live mapping.
    pub fn resident_bytes(&self) -> io::Result<usize> {
        // SAFETY: the usable part is mapped until `self` drops.
        unsafe { os::resident_bytes(self.bottom(), self.usable_size) }
    }

    /// Releases the pages of the usable part except its top `keep` bytes
    /// (a whole number of pages): they read as zeros afterwards and cost no
    /// memory until touched again. `&mut self`: nothing can be running on
    /// the stack.
    pub(crate) fn release_below(&mut self, keep: usize) -> io::Result<()> {
        let release = self.usable_size.saturating_sub(keep);
        if release == 0 {
            return Ok(());
        }
        // SAFETY: `[bottom, bottom + release)` is writable memory of this
        // mapping; `&mut self` means no coroutine runs on it and nobody
        // holds a reference into it; stacks carry no contents across reuse.
        unsafe { os::release_pages(self.bottom(), release) }
    }
}

impl Drop for GuardedStack {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and, as we are dropped, unused.
        let result = unsafe { os::unmap(self.limit(), self.guard_size() + self.usable_size) };
        if result.is_err() {
            os::count_unmap_failure();
        }
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
