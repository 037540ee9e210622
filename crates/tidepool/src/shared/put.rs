//! The put path: how an object given back reaches this thread's cache, a
//! waiter, the depot or its end.
//!
//! ```text
//!  guard drop / Pool::put
//!    │
//!  put ─► put_fast (inlined)   remembered cache, not panicking, recycle says
//!    │        │                yes, no waiter, room in `loaded`
//!    │        └──────────────► Done: cached, counted back
//!    ▼
//!  put_rest (inlined) ─ one cold call per case, each takes the object:
//!    │
//!    ├─ Refused             recycle said no ─► discard_from ─► discard
//!    ├─ Panicked            recycle panicked ─► recycle_panicked_from
//!    └─ Other { recycled }  ─► put_other_from ─► put_other
//!                                │ not recycled yet: panicking? ─► discard
//!                                │   known to have no cache ─► put_absent
//!                                │   no cache yet ─► put_cold
//!                                │   recycle (may destroy)
//!                                │   (put_absent, put_cold: the thread at
//!                                │    its fill of caches ─► put_slotless
//!                                │    at once)
//!                                ├─ waiters at max_live ─► hand_to_waiter
//!                                ▼
//!                       push_local_or_slow ─► `loaded`/`spare` swap
//!                                │ both full, or no cache
//!                                ▼
//!                             put_slow: claim the cache, donate the spare
//!                             batch to the depot (past max_idle: destroy
//!                             queue), cache the object
//!                                │ no cache can be had
//!                                ▼
//!                             put_slotless: into the depot directly
//! ```
//!
//! Why the split: the guard's drop inlines `put_fast`, so everything it
//! calls must be small. Every case but the common one leaves through one
//! cold call that takes the object out of the guard itself, so the inlined
//! code never copies the object to the stack to call out (see
//! `implementation`, thread cache; `bin/budget.sh` counts the
//! instructions).

use std::mem::ManuallyDrop;
use std::sync::Arc;

use super::head::{Head, HeadPtr};
use super::Shared;
use crate::cache::thread;
use crate::callbacks::{Caught, Site};
use crate::Manage;

/// What the put fast path left to do ([`Shared::put_fast`]).
pub(crate) enum PutRest {
    /// Nothing: the object is cached and counted back.
    Done,
    /// Not the common case: the rest of the put; `recycled` if `recycle`
    /// already ran (waiters at `max_live`, or the loaded batch full), else
    /// it has not.
    Other { recycled: bool },
    /// `recycle` said no: the object is to be destroyed.
    Refused,
    /// `recycle` panicked: the object is to be destroyed, the panic
    /// settled at the caller.
    Panicked(Caught),
}

impl<M: Manage> Shared<M> {
    /// Gives back the object in `item` (a guard's field):
    /// [`put_fast`](Self::put_fast), then [`put_rest`](Self::put_rest) for
    /// what it left.
    ///
    /// # Safety
    ///
    /// `item` holds an object of this pool that it counts as out; `put`
    /// takes it, exactly once, and the caller never touches `item` again.
    /// `head` points at this pool's head. It is passed as the pointer, not
    /// as a reference to the head, so that no reference into the pool
    /// outlives the count that may let another thread free it.
    #[inline(always)]
    pub(crate) unsafe fn put(
        this: &Arc<Self>,
        head: &HeadPtr<M::Item>,
        item: &mut ManuallyDrop<M::Item>,
    ) {
        let rest = if std::thread::panicking() {
            PutRest::Other { recycled: false }
        } else {
            // SAFETY: our caller's contract; the thread is not panicking.
            unsafe { Self::put_fast::<true>(this, head, item) }
        };
        // SAFETY: `rest` is what `put_fast` left on `item` (or it did not
        // run, and `item` is untouched).
        unsafe { Self::put_rest(this, head, item, rest) }
    }

    /// The fast path: the object recycled in place and cached in this
    /// thread's remembered cache (`Done`: taken from `item`, counted back
    /// as the very last touch of the pool), or what is left to do (`item`
    /// untouched, but maybe recycled). Calls nothing out of line: an owned
    /// guard's end may run this without its lifetime marker (`lifetime`,
    /// unmarked ends).
    ///
    /// `PANICKING_CHECKED` says the caller has checked
    /// `std::thread::panicking()` already; otherwise it is checked here,
    /// once the remembered slot is found. Out of line, checking first is
    /// cheaper (only the guard is in registers); inlined, checking here is.
    ///
    /// # Safety
    ///
    /// As for [`put`](Self::put), except that `item` is taken only on
    /// `Done`; with `PANICKING_CHECKED`, the thread is not panicking.
    #[inline(always)]
    pub(crate) unsafe fn put_fast<const PANICKING_CHECKED: bool>(
        this: &Arc<Self>,
        head: &HeadPtr<M::Item>,
        item: &mut ManuallyDrop<M::Item>,
    ) -> PutRest {
        // SAFETY: the pool counts `item` as out (our caller's contract),
        // so it and its head live until the push below counts it back;
        // this reference is not used after that.
        let head = unsafe { head.get() };
        debug_assert!(std::ptr::eq(head, this.head()), "this pool's head");
        let Some(slot) = this.local_remembered(head) else {
            return PutRest::Other { recycled: false };
        };
        if !PANICKING_CHECKED && std::thread::panicking() {
            return PutRest::Other { recycled: false };
        }
        match this.callbacks().try_recycle(item) {
            Ok(true) => {}
            Ok(false) => return PutRest::Refused,
            Err(caught) => return PutRest::Panicked(caught),
        }
        // After `recycle`, right before the push: a waiter that queued
        // while `recycle` ran looks for the object only once, as it queues
        // (`at_limit.rs`), so a put that checked before would strand it.
        if head.waiters.any() {
            return PutRest::Other { recycled: true };
        }
        // SAFETY: `item` holds an object this pool counts as out (our
        // caller's contract); `push_loaded_from` takes it only when it
        // returns `true`, and its last store (the count) ends its access.
        if unsafe { slot.push_loaded_from(item, head.batch()) } {
            return PutRest::Done;
        }
        PutRest::Other { recycled: true }
    }

    /// What [`put_fast`](Self::put_fast) left: nothing on `Done`, else one
    /// cold call per case, each passed scalars only: an enum passed whole
    /// is built in memory, which makes the guard's drop too big to inline.
    ///
    /// # Safety
    ///
    /// As for [`put`](Self::put), with `rest` from `put_fast` on `item`;
    /// unless `rest` is `Done`, the pool stays alive until this returns (a
    /// handle, a borrowed guard, or an owned guard's lifetime marker).
    #[inline(always)]
    pub(crate) unsafe fn put_rest(
        this: &Arc<Self>,
        head: &HeadPtr<M::Item>,
        item: &mut ManuallyDrop<M::Item>,
        rest: PutRest,
    ) {
        // Every arm but `Done`'s: `put_fast` left the object in `item`,
        // which our caller's contract makes ours to take, once.
        match rest {
            PutRest::Done => {}
            // SAFETY: see above.
            PutRest::Other { recycled } => unsafe {
                Self::put_other_from(this, head, item, recycled)
            },
            // SAFETY: see above.
            PutRest::Refused => unsafe { this.discard_from(item) },
            // SAFETY: see above.
            PutRest::Panicked(caught) => unsafe { this.recycle_panicked_from(item, caught) },
        }
    }

    /// The three ways out of the inlined code: each takes the object from
    /// `item` out of line, so the inlined caller never copies it.
    ///
    /// # Safety
    ///
    /// `item` holds an object this pool counts as out, ours to take, once;
    /// the pool stays alive until this returns (see
    /// [`put_rest`](Self::put_rest)).
    #[cold]
    #[inline(never)]
    unsafe fn put_other_from(
        this: &Arc<Self>,
        head: &HeadPtr<M::Item>,
        item: &mut ManuallyDrop<M::Item>,
        recycled: bool,
    ) {
        // SAFETY: the rest of a put touches the pool after giving the
        // object back, so every caller with a case left keeps the pool
        // alive throughout: a handle, a borrowed guard, or an owned guard's
        // lifetime marker (`OwnedPooled::drop_rest`).
        let head = unsafe { head.get() };
        // SAFETY: our caller's contract.
        Self::put_other(this, head, unsafe { ManuallyDrop::take(item) }, recycled);
    }

    /// `recycle` said no: the object is destroyed.
    ///
    /// # Safety
    ///
    /// As for [`put_other_from`](Self::put_other_from).
    #[cold]
    #[inline(never)]
    unsafe fn discard_from(&self, item: &mut ManuallyDrop<M::Item>) {
        // SAFETY: our caller's contract.
        self.discard(unsafe { ManuallyDrop::take(item) });
    }

    /// `recycle` panicked: see [`recycle_panicked`](Self::recycle_panicked).
    ///
    /// # Safety
    ///
    /// As for [`put_other_from`](Self::put_other_from).
    #[cold]
    #[inline(never)]
    unsafe fn recycle_panicked_from(&self, item: &mut ManuallyDrop<M::Item>, caught: Caught) {
        // SAFETY: our caller's contract.
        let item = unsafe { ManuallyDrop::take(item) };
        self.recycle_panicked(item, caught, Site::Caller);
    }

    /// A panicking thread, this thread's cache not the one remembered or
    /// none yet (`recycle` not run), waiters at `max_live` or the loaded
    /// batch full (`recycled`: it ran).
    fn put_other(this: &Arc<Self>, head: &Head<M::Item>, item: M::Item, recycled: bool) {
        let item = if recycled {
            item
        } else if std::thread::panicking() {
            // The object may be half-updated.
            return this.discard(item);
        } else if head.known_absent() {
            // A thread that knows it has no slot here is registered and not
            // exiting (`thread::surely_slotless`).
            return Self::put_absent(this, head, item);
        } else if this.local().is_none() {
            return Self::put_cold(this, item);
        } else {
            match this.recycle(item, Site::Caller) {
                Some(item) => item,
                None => return,
            }
        };
        // To the oldest waiter at `max_live` (if they left meanwhile, it is
        // cached as usual), else into the cache.
        if head.waiters.any() {
            if let Some(item) = this.hand_to_waiter(item) {
                Self::push_local_or_slow(this, item);
            }
            return;
        }
        Self::push_local_or_slow(this, item);
    }

    /// Caches a recycled object in this thread's cache (the swap with the
    /// spare, once a batch, is `push`'s), or, with both batches full or no
    /// cache, takes it to [`put_slow`](Self::put_slow).
    fn push_local_or_slow(this: &Arc<Self>, item: M::Item) {
        let item = match this.local() {
            Some(slot) => match slot.push(item, this.batch()) {
                Ok(()) => return,
                Err(back) => back,
            },
            None => item,
        };
        Self::put_slow(this, item, Site::Caller);
    }

    /// No cache yet, or this thread is exiting (its thread-locals are being
    /// destroyed, a destructor context: nothing may unwind).
    #[cold]
    #[inline(never)]
    fn put_cold(this: &Arc<Self>, item: M::Item) {
        let site = match thread::current_tid_or_register() {
            Some(_) => Site::Caller,
            None => Site::ThreadExit,
        };
        Self::put_uncached(this, this.head(), item, site);
    }

    /// A thread that knows it has no cache here (the put after a slot-less
    /// get): [`put_cold`](Self::put_cold) without its look at the thread's
    /// state.
    #[inline(always)]
    fn put_absent(this: &Arc<Self>, head: &Head<M::Item>, item: M::Item) {
        Self::put_uncached(this, head, item, Site::Caller);
    }

    /// The rest of [`put_cold`](Self::put_cold): recycled, the object goes
    /// to a waiter, the depot, or a cache claimed now.
    #[inline(always)]
    fn put_uncached(this: &Arc<Self>, head: &Head<M::Item>, item: M::Item, site: Site) {
        if let Some(item) = this.recycle(item, site) {
            // As in `put_other`: a waiter that queues after this look is
            // served by `put_slow`, which looks again after a fresh claim
            // of this thread's cache or after shelving the object.
            if head.waiters.any() {
                if let Some(item) = this.hand_to_waiter(item) {
                    Self::put_slow(this, item, site);
                }
                return;
            }
            // This thread at its fill of caches: to the depot, as the
            // claim in `put_slow` would decide.
            if thread::refuse_cheaply() {
                return this.put_slotless(head, item, site);
            }
            Self::put_slow(this, item, site);
        }
    }

    /// Runs the manager's `recycle`; destroys the object if it says no, or
    /// if it panics (the panic then continues at `site`).
    fn recycle(&self, mut item: M::Item, site: Site) -> Option<M::Item> {
        let mut caught = Caught::default();
        match self.callbacks().recycle(&mut item, &mut caught) {
            Some(true) => Some(item),
            Some(false) => {
                self.discard(item);
                None
            }
            None => {
                self.recycle_panicked(item, caught, site);
                None
            }
        }
    }

    /// `recycle` panicked: the object, maybe half-recycled, is destroyed,
    /// and the panic continues at `site`.
    #[cold]
    #[inline(never)]
    fn recycle_panicked(&self, item: M::Item, mut caught: Caught, site: Site) {
        self.counters.discarded.add(1);
        self.destroy_all([vec![item]], &mut caught);
        self.settle(caught, site);
    }

    /// Both batches full, or no cache yet: donate the spare batch to the
    /// depot (destroying it if the depot is at its cap), then cache `item`.
    #[cold]
    #[inline(never)]
    fn put_slow(this: &Arc<Self>, mut item: M::Item, site: Site) {
        let batch_size = this.batch();
        // Batches the depot refused: destroyed once `item` is safely cached,
        // so a panicking `destroy` cannot lose it.
        let mut refused = Vec::new();
        let mut window_due = false;
        loop {
            let Some(claimed) = Self::claim_local(this) else {
                this.put_slotless(this.head(), item, site);
                if !refused.is_empty() {
                    this.tear_down(refused, 1, site);
                }
                if window_due {
                    this.upkeep(true);
                }
                return;
            };
            let slot = claimed.slot;
            refused.extend(claimed.refused);
            // Claimed just now: our caller's last look at the waiters may
            // predate the cache's revocation by a waiter's one look
            // (`at_limit.rs`), and an object cached now would be out of its
            // sight. Look again. (A cache found active was not revoked.)
            if claimed.fresh && this.waiters_after_freeing() {
                match this.hand_to_waiter(item) {
                    None => break,
                    Some(back) => item = back,
                }
            }
            item = match slot.push(item, batch_size) {
                Ok(()) => break,
                Err(back) => back,
            };
            // Both batches full (or revoked meanwhile: claim again).
            let Ok(full) = slot.take_spare() else {
                continue;
            };
            let moved = full.len();
            let mut empty = match this.head().depot.donate(full) {
                Ok(empty) => {
                    window_due |= this.note_exchange(moved);
                    empty
                }
                Err(full) => {
                    refused.push(full);
                    Vec::new()
                }
            };
            // The new spare gets its room here, outside the bracket.
            empty.reserve_exact(batch_size);
            // If the cache was revoked meanwhile, `empty` holds nothing to
            // lose.
            let _ = slot.install_spare(empty);
        }
        // Past `max_idle`: to the destroy queue, one chunk of it here.
        this.tear_down(refused, 1, site);
        this.upkeep(window_due);
    }

    /// A put by a thread with no cache here (exiting, or at its fill of
    /// caches: `cache/thread.rs`): into the depot, one lock. The upkeep a
    /// cached put does once a batch is left to the reclaimer; without one,
    /// it runs here. Inlined where it is called, in frames that are out
    /// of line already: a call of its own would cost a frame on every
    /// slot-less put.
    #[inline(always)]
    fn put_slotless(&self, head: &Head<M::Item>, item: M::Item, site: Site) {
        if let Err(item) = self.shelve_lone(head, item) {
            self.tear_down(vec![vec![item]], 1, site);
        }
        if !head.background {
            self.upkeep(false);
        }
    }
}
