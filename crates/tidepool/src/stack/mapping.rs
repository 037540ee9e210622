//! One stack's memory: a writable range with a guard page below, in a slab
//! shared with other stacks of its pool or in a mapping of its own; given
//! back on drop.

use std::fmt;
use std::io;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::os;
use crate::stack::slab::Slabs;
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
/// Owns its memory, which stays mapped, guard and all, at least until it is
/// dropped. A stack of a [`StackPool`](super::StackPool) is carved from a
/// *slab* shared with other stacks of the same pool: dropping it gives its
/// slot back to the slab (its pages released), and the slab is unmapped with
/// one `munmap` when its last stack goes (see [the module notes](super#slabs)).
/// A stack from [`GuardedStack::new`] has a mapping of its own, unmapped on
/// drop.
///
/// It is the [`Item`](crate::Manage::Item) of a
/// [`StackPool`](super::StackPool); you meet it through a
/// [`PooledStack`](super::PooledStack), or own one outright after
/// [`PooledStack::detach`](super::PooledStack::detach).
pub struct GuardedStack {
    start: NonNull<u8>,
    guard_size: usize,
    usable_size: usize,
    /// Bytes at the top of the usable part that may hold pages: the whole
    /// stack once it has been lent out, `keep_resident` after a purge, 0
    /// for a slot never touched or whose pages were released. What a purge
    /// or a teardown has left to release (`madvise` is skipped at 0).
    dirty: usize,
    /// Who gives the memory back on drop; `None` once a batch teardown
    /// (`slab::destroy_stacks`) has given it back already.
    home: Option<Home>,
}

/// Where a [`GuardedStack`]'s memory came from, and so how it goes back.
pub(crate) enum Home {
    /// A mapping of its own ([`GuardedStack::new`]): unmapped on drop.
    Own,
    /// A slot of the slab at address `slab` in `slabs`: freed into it on
    /// drop. The `Arc` keeps the set (and so its counters and the slab's
    /// bookkeeping) alive as long as any of its stacks.
    Slab { slabs: Arc<Slabs>, slab: usize },
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
        Self::map(page, usable)
    }

    /// Maps a new stack. Sizes are multiples of the page size (the pool
    /// rounds them).
    pub(crate) fn map(guard_size: usize, usable_size: usize) -> Result<Self, StackError> {
        match os::map_guarded(guard_size, usable_size) {
            Ok(start) => Ok(Self {
                start,
                guard_size,
                usable_size,
                // Fresh pages: nothing resident until touched.
                dirty: 0,
                home: Some(Home::Own),
            }),
            Err(failure) => Err(StackError::from_map_failure(
                failure,
                guard_size.saturating_add(usable_size),
            )),
        }
    }

    /// The highest address, one past the last usable byte: where a stack
    /// pointer starts. Page-aligned.
    pub fn top(&self) -> NonNull<u8> {
        // SAFETY: one past the end of the mapping, which is in bounds of the
        // same allocation for pointer arithmetic, and not null.
        unsafe { self.start.add(self.guard_size + self.usable_size) }
    }

    /// The lowest usable address, just above the guard. Page-aligned.
    pub fn bottom(&self) -> NonNull<u8> {
        // SAFETY: `guard_size` is within the mapping.
        unsafe { self.start.add(self.guard_size) }
    }

    /// The lowest address of the mapping, the guard included (corosensei's
    /// `limit`). Page-aligned.
    pub fn limit(&self) -> NonNull<u8> {
        self.start
    }

    /// Writable bytes between [`bottom`](GuardedStack::bottom) and
    /// [`top`](GuardedStack::top): a whole number of pages.
    pub fn usable_size(&self) -> usize {
        self.usable_size
    }

    /// Inaccessible bytes below [`bottom`](GuardedStack::bottom).
    pub fn guard_size(&self) -> usize {
        self.guard_size
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

    /// A stack in slot `start` of a slab: `guard_size` bytes of guard at
    /// `start`, already `PROT_NONE`, and `usable_size` writable bytes above.
    /// The slab stays mapped while `home` holds the slot.
    pub(crate) fn in_slab(
        start: NonNull<u8>,
        guard_size: usize,
        usable_size: usize,
        dirty: usize,
        slabs: Arc<Slabs>,
        slab: usize,
    ) -> Self {
        Self {
            start,
            guard_size,
            usable_size,
            dirty,
            home: Some(Home::Slab { slabs, slab }),
        }
    }

    /// Notes that the stack is being lent out: whatever runs on it may
    /// touch every page.
    #[inline]
    pub(crate) fn mark_lent(&mut self) {
        self.dirty = self.usable_size;
    }

    /// Bytes at the top that may hold pages (see the field).
    pub(crate) fn dirty(&self) -> usize {
        self.dirty
    }

    /// Records that only the top `dirty` bytes may hold pages now.
    pub(crate) fn set_dirty(&mut self, dirty: usize) {
        self.dirty = dirty.min(self.usable_size);
    }

    /// Where the memory goes back to.
    pub(crate) fn home(&self) -> Option<&Home> {
        self.home.as_ref()
    }

    /// Takes the duty of giving the memory back: afterwards dropping the
    /// stack does nothing. For batch teardowns, which give back many
    /// stacks in one go.
    pub(crate) fn take_home(&mut self) -> Option<Home> {
        self.home.take()
    }
}

impl Drop for GuardedStack {
    fn drop(&mut self) {
        match self.home.take() {
            Some(Home::Own) => {
                // SAFETY: the mapping is ours alone and, as we are dropped,
                // unused.
                let result = unsafe { os::unmap(self.start, self.guard_size + self.usable_size) };
                if result.is_err() {
                    os::count_unmap_failure();
                }
            }
            Some(Home::Slab { slabs, slab }) => slabs.free_one(slab, self.start, self.dirty),
            None => {}
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
