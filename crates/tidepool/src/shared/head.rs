//! A pool's head: what every get and put reads, and all that a get and a
//! put by a thread with no cache in the pool touch but the object. It sits
//! apart from the rest of the shared state, in a cell of the heads' dense
//! store (`arena.rs`), and the pool's handle points at it beside its `Arc`:
//! a get and a put on a pool reach the head without reading the rest.
//!
//! ```text
//!  Pool { shared ─┬─────────────────► Shared (slots, config, counters, ...)
//!         head ───┼─► Head ─ line 0: waiters' count, batch, table id,
//!                 │          lone counts, slotted, background, limited
//!                 │        ─ line 1: the depot's lock, loose object, marks
//!                 └── owns it (HeadCell): dropped with the Shared
//! ```
//!
//! With thousands of pools, their heads sit side by side, and the pages a
//! process's threads touch to move between pools are the heads' few
//! instead of one per pool (`implementation`, many pools per thread).

use std::ptr::NonNull;

use super::arena::{self, CELL, CELL_ALIGN};
use super::waiters::Waiters;
use crate::cache::thread;
use crate::depot::{Depot, Lone};
use crate::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// See the module docs. `repr(C)`, in this order: the first line holds what
/// every get and put reads and the slot-less counts; the depot (aligned to
/// a line) fills the second and the lines after it.
#[repr(C)]
pub(crate) struct Head<T> {
    /// `get_timeout` callers waiting at `max_live` (`waiters.rs`); its
    /// count is read on every put, and written only when one comes or goes.
    pub(crate) waiters: Waiters<T>,
    /// The batch size now: `config.burst <= batch <= config.max_batch`
    /// (below `config.batch_size` only under `max_live`, see `pass.rs`),
    /// changed only under the reclaim lock (`pass.rs`, `adapt_batch`) and
    /// read on every put.
    pub(super) batch: AtomicUsize,
    /// `table_id == slots.id()`, never changed: the id every get and put
    /// compares with the thread's remembered and absent tables, here so
    /// that they need not reach the table's line.
    pub(crate) table_id: u64,
    /// Gets served and returns taken by the depot for threads with no
    /// cache here, counted under the depot's lock (`depot/lone.rs`).
    pub(crate) lone: Lone,
    /// Which threads have a slot in the pool's table: bit `t`
    /// (`thread::slot_bit`) set by thread `t` when it allocates its slot,
    /// never cleared (a set bit says only that a slot may exist: the
    /// thread's exit frees it). A thread whose bit is clear knows it has no
    /// cache here without looking in the table:
    /// `slotted & slot_bit(t) == 0  ⇒  slots has no slot for t`.
    pub(crate) slotted: AtomicU64,
    /// `config.background`: a put by a thread with no cache reads it.
    pub(crate) background: bool,
    /// `config.max_live` is set: only then can a get wait (`Exhausted`
    /// comes only from the limit), so only then does a path that frees an
    /// object or a place fence and look for waiters
    /// ([`waiters_after_freeing`](Self::waiters_after_freeing)).
    /// `!limited  ⇒  waiters.len() == 0` always.
    pub(crate) limited: bool,
    /// `repr(C, align(64))`: the second line starts here.
    pub(crate) depot: Depot<T>,
}

impl<T> Head<T> {
    pub(crate) fn new(
        batch: usize,
        table_id: u64,
        background: bool,
        limited: bool,
        depot: Depot<T>,
    ) -> Self {
        Self {
            waiters: Waiters::new(),
            batch: AtomicUsize::new(batch),
            table_id,
            lone: Lone::new(),
            slotted: AtomicU64::new(0),
            background,
            limited,
            depot,
        }
    }

    /// The batch size now (see `batch`).
    #[inline(always)]
    pub(crate) fn batch(&self) -> usize {
        self.batch.load(Ordering::Relaxed)
    }

    /// Sets the batch size (a reclaim pass, under the reclaim lock).
    pub(crate) fn set_batch(&self, n: usize) {
        self.batch.store(n, Ordering::Relaxed);
    }

    /// Whether this thread surely has no slot in the pool: its last lookup
    /// in the pool's table found none, or its bit in `slotted` is clear (see
    /// [`thread::surely_slotless`]). One thread-local access and the head's
    /// first line; the table itself is not touched.
    #[inline(always)]
    pub(crate) fn known_absent(&self) -> bool {
        thread::surely_slotless(self.table_id, self.slotted.load(Ordering::Relaxed))
    }

    /// Starts bringing the depot's first line into the cache, for a get
    /// that will take the depot's lock: run speculatively while the first
    /// line's miss is resolving (the branch that leads here predicted), the
    /// two misses overlap instead of following each other (a locked
    /// instruction waits for every load before it).
    #[inline(always)]
    pub(crate) fn prefetch_depot(&self) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: a prefetch is a hint: it reads nothing and cannot fault,
        // and SSE is part of x86-64. (Newer toolchains make the intrinsic
        // safe, hence the `allow`.)
        #[allow(unused_unsafe)]
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(&self.depot).cast());
        }
    }

    /// Whether anyone waits, asked by a path that has just made an object
    /// or a place available: the `SeqCst` fence pairs with the one a
    /// waiter runs between queueing and its one look (`Waiters::push`), so
    /// either that look finds what we made available or we see the waiter.
    /// A pool without `max_live` has no waiters, and skips the fence.
    #[inline(always)]
    pub(crate) fn waiters_after_freeing(&self) -> bool {
        if !self.limited {
            debug_assert!(!self.waiters.any(), "waiters only at max_live");
            return false;
        }
        fence(Ordering::SeqCst);
        self.waiters.any()
    }
}

/// The owner of a pool's [`Head`]: in a cell of the arena, or boxed where
/// it does not fit one (or under loom, whose atomics are larger), and
/// dropped with the pool's shared state.
pub(crate) struct HeadCell<T> {
    head: NonNull<Head<T>>,
    in_arena: bool,
}

// SAFETY: a `HeadCell` owns its `Head` as a `Box` would.
unsafe impl<T> Send for HeadCell<T> where Head<T>: Send {}
// SAFETY: as above: shared access to the cell is shared access to the head.
unsafe impl<T> Sync for HeadCell<T> where Head<T>: Sync {}

impl<T> HeadCell<T> {
    /// Whether a `Head<T>` fits in a cell, size and alignment.
    const FITS: bool =
        size_of::<Head<T>>() <= CELL && CELL_ALIGN % align_of::<Head<T>>() == 0 && !cfg!(loom);

    pub(crate) fn new(head: Head<T>) -> Self {
        if Self::FITS {
            if let Some(cell) = arena::alloc() {
                let ptr = cell.cast::<Head<T>>();
                // SAFETY: the cell is ours, uninitialised, `CELL` bytes
                // aligned to `CELL_ALIGN`: room and alignment for a `Head<T>`
                // (`FITS`).
                unsafe { ptr.as_ptr().write(head) };
                return Self {
                    head: ptr,
                    in_arena: true,
                };
            }
        }
        Self {
            head: NonNull::from(Box::leak(Box::new(head))),
            in_arena: false,
        }
    }

    /// A pointer to the head, valid as long as this cell lives.
    pub(crate) fn ptr(&self) -> HeadPtr<T> {
        HeadPtr(self.head)
    }

    /// Whether the head is in a cell of the arena (not boxed).
    #[cfg(test)]
    pub(crate) fn in_arena(&self) -> bool {
        self.in_arena
    }

    #[inline(always)]
    pub(crate) fn get(&self) -> &Head<T> {
        // SAFETY: initialised in `new`, dropped only in `drop`.
        unsafe { self.head.as_ref() }
    }
}

impl<T> Drop for HeadCell<T> {
    fn drop(&mut self) {
        if self.in_arena {
            // SAFETY: written in `new`, dropped once, here; the cell came
            // from `arena::alloc` and nothing touches it after this.
            unsafe {
                self.head.as_ptr().drop_in_place();
                arena::free(self.head.cast());
            }
        } else {
            // SAFETY: leaked from a `Box` in `new`, taken back once, here.
            drop(unsafe { Box::from_raw(self.head.as_ptr()) });
        }
    }
}

/// A copy of a [`HeadCell`]'s pointer, for the pool's handle: valid while
/// the shared state that owns the cell lives, which the handle's `Arc`
/// guarantees.
pub(crate) struct HeadPtr<T>(NonNull<Head<T>>);

// SAFETY: a shared reference to a `Head<T>` may go to or be used from
// another thread when `Head<T>` is `Sync`.
unsafe impl<T> Send for HeadPtr<T> where Head<T>: Sync {}
// SAFETY: as above.
unsafe impl<T> Sync for HeadPtr<T> where Head<T>: Sync {}

impl<T> Clone for HeadPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for HeadPtr<T> {}

impl<T> HeadPtr<T> {
    /// The pointer, to record elsewhere (a stack pool's slab set) and turn
    /// back with [`from_raw`](Self::from_raw).
    #[cfg(unix)]
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const Head<T> {
        self.0.as_ptr()
    }

    /// The pointer [`as_ptr`](Self::as_ptr) gave.
    ///
    /// # Safety
    ///
    /// `ptr` came from `as_ptr` of a `HeadPtr` (so it is not null); using
    /// the result is subject to [`get`](Self::get)'s contract.
    #[cfg(unix)]
    #[inline(always)]
    pub(crate) unsafe fn from_raw(ptr: *const Head<T>) -> Self {
        // SAFETY: our caller's contract: a `NonNull`'s pointer.
        Self(unsafe { NonNull::new_unchecked(ptr.cast_mut()) })
    }

    /// The head.
    ///
    /// # Safety
    ///
    /// The [`HeadCell`] this came from is alive for `'a`.
    #[inline(always)]
    pub(crate) unsafe fn get<'a>(&self) -> &'a Head<T> {
        // SAFETY: the caller's contract: the cell, so the head, lives.
        unsafe { self.0.as_ref() }
    }
}
