//! Guards: a pooled object on loan, given back when the guard drops.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::shared::{PutRest, Shared};
use crate::{Manage, Pool};

/// An object borrowed from a [`Pool`]; returned to it on drop.
///
/// On drop the object is recycled ([`Manage::recycle`]) and cached for the
/// next `get` on this thread, unless the thread is panicking: then it is
/// destroyed, since a panic may have left it half-updated.
///
/// ```
/// let pool = tidepool::Pool::new(String::new);
/// let mut s = pool.get().unwrap();
/// s.push_str("scratch");
/// assert_eq!(&*s, "scratch");
/// ```
pub struct Pooled<'a, M: Manage> {
    pool: &'a Pool<M>,
    item: ManuallyDrop<M::Item>,
}

/// An object taken from an `Arc<Pool>` with [`Pool::get_owned`]; `Send` and
/// `'static`, so it can be dropped on any thread, where it joins that
/// thread's cache. It may outlive every `Arc` of its pool: the pool then
/// lasts until its last owned guard is gone. It holds no reference count
/// (see [`implementation`](crate::implementation#owned-guards)).
///
/// ```
/// use std::sync::Arc;
/// let pool = Arc::new(tidepool::Pool::new(|| vec![0u8; 4096]));
/// let buf = pool.get_owned().unwrap();
/// std::thread::spawn(move || drop(buf)).join().unwrap();
/// assert_eq!(pool.stats().live, 0);
/// ```
pub struct OwnedPooled<M: Manage> {
    /// An uncounted copy of the pool handle (`Pool::alias`, or
    /// `Pool::alias_of` for a stack handle's guard): valid while
    /// the pool counts `item` as out, which it does until this guard ends
    /// (`OwnedPooled`'s drop, `discard` or `detach`; `lifetime`).
    pool: ManuallyDrop<Pool<M>>,
    item: ManuallyDrop<M::Item>,
}

/// Implements the guard API once for both guard types.
macro_rules! guard_impl {
    ($guard:ident $(<$lt:lifetime>)?) => {
        impl<$($lt,)? M: Manage> $guard<$($lt,)? M> {
            /// Destroys the object ([`Manage::destroy`]) instead of recycling it.
            pub fn discard(self) {
                let (pool, item) = self.into_parts();
                Self::end(&pool, || pool.shared.discard(item));
            }

            /// Takes the object out of the pool: it stops being counted as
            /// live, and the pool will never destroy it.
            pub fn detach(self) -> M::Item {
                let (pool, item) = self.into_parts();
                Self::end(&pool, || pool.shared.count_detach());
                item
            }

            /// The pool this object came from.
            pub fn pool(&self) -> &Pool<M> {
                &self.pool
            }
        }

        impl<$($lt,)? M: Manage> Deref for $guard<$($lt,)? M> {
            type Target = M::Item;

            #[inline]
            fn deref(&self) -> &M::Item {
                &self.item
            }
        }

        impl<$($lt,)? M: Manage> DerefMut for $guard<$($lt,)? M> {
            #[inline]
            fn deref_mut(&mut self) -> &mut M::Item {
                &mut self.item
            }
        }

        impl<$($lt,)? M: Manage> AsRef<M::Item> for $guard<$($lt,)? M> {
            fn as_ref(&self) -> &M::Item {
                &self.item
            }
        }

        impl<$($lt,)? M: Manage> AsMut<M::Item> for $guard<$($lt,)? M> {
            fn as_mut(&mut self) -> &mut M::Item {
                &mut self.item
            }
        }

        impl<$($lt,)? M: Manage> fmt::Debug for $guard<$($lt,)? M>
        where
            M::Item: fmt::Debug,
        {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($guard)).field(&*self.item).finish()
            }
        }

    };
}

impl<M: Manage> Drop for Pooled<'_, M> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the pool counts `item` as out until this guard ends, and
        // `put` takes it exactly once: here, or `into_parts` does, which
        // forgets the guard so this never runs. The borrow of the handle
        // keeps the pool alive throughout.
        unsafe { Shared::put(&self.pool.shared, self.pool.head_ptr(), &mut self.item) }
    }
}

impl<M: Manage> Drop for OwnedPooled<M> {
    #[inline]
    fn drop(&mut self) {
        // Out of line in most callers (the drop glue is over LLVM's inline
        // threshold), so `panicking` goes first: see `Shared::put_fast`.
        // SAFETY: this is the guard's drop, its end; `into_parts` forgets
        // the guard, so this runs at most once.
        unsafe { self.end_dropped::<true>() }
    }
}

impl<M: Manage> OwnedPooled<M> {
    /// The end of a guard given back by dropping it. `PANICKING_FIRST`
    /// checks whether the thread is panicking before anything else, for an
    /// end that is not inlined into its caller; without it, `put_fast`
    /// checks, which is faster inlined (see `Shared::put_fast`).
    ///
    /// # Safety
    ///
    /// This is the guard's end: called once, and the guard is not used or
    /// dropped afterwards (it is being dropped, or is `ManuallyDrop`).
    #[inline(always)]
    pub(crate) unsafe fn end_dropped<const PANICKING_FIRST: bool>(&mut self) {
        if (PANICKING_FIRST && std::thread::panicking())
            || !crate::shared::lifetime::may_end_unmarked()
        {
            return self.drop_other(false);
        }
        let shared = &self.pool.shared;
        // Taken now, as a number, without a reference: once `put_fast`
        // has counted the object back, the pool may be freed.
        let address = Arc::as_ptr(shared) as usize;
        // SAFETY: the pool counts `item` as out until this guard ends (so
        // it is alive now), and `put_fast` takes it only on `Done`, whose
        // last touch of the pool is the count of its return; this is the
        // guard's only end (our caller's promise). `PANICKING_FIRST`: the
        // thread was found not panicking above.
        let done = match unsafe {
            Shared::put_fast::<PANICKING_FIRST>(shared, self.pool.head_ptr(), &mut self.item)
        } {
            PutRest::Done => None,
            PutRest::Other { recycled } => Some(recycled),
            rest => return self.drop_rest(rest),
        };
        // Matched with the `PutRest` gone: nothing left to drop if this
        // unwinds (a landing pad here doubled the drop's inline cost).
        match done {
            None => crate::shared::lifetime::after_unmarked_end(address),
            Some(recycled) => self.drop_other(recycled),
        }
    }
}

guard_impl!(Pooled<'a>);
guard_impl!(OwnedPooled);

impl<'a, M: Manage> Pooled<'a, M> {
    #[inline]
    pub(crate) fn new(pool: &'a Pool<M>, item: M::Item) -> Self {
        Self {
            pool,
            item: ManuallyDrop::new(item),
        }
    }

    fn into_parts(self) -> (&'a Pool<M>, M::Item) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so `item` is taken exactly once.
        let item = unsafe { ManuallyDrop::take(&mut this.item) };
        (this.pool, item)
    }

    /// Takes the object out of its guard, still lent: the pool counts it
    /// as live until it is given back through
    /// [`Pooled::from_raw`]. For callers
    /// that hand out bare objects, such as a C API. An object never given
    /// back stays counted as live (the pool's state is then kept until the
    /// process ends).
    ///
    /// ```
    /// let pool = tidepool::Pool::new(|| vec![0u8; 64]);
    /// let raw = pool.get()?.into_raw();
    /// assert_eq!(pool.stats().live, 1);
    /// // SAFETY: taken from this pool with `into_raw`, turned back once.
    /// drop(unsafe { tidepool::Pooled::from_raw(&pool, raw) });
    /// assert_eq!(pool.stats().idle, 1);
    /// # Ok::<(), tidepool::Error<std::convert::Infallible>>(())
    /// ```
    #[inline(always)]
    pub fn into_raw(self) -> M::Item {
        self.into_parts().1
    }

    /// Puts an object taken out of its guard with [`into_raw`](Pooled::into_raw)
    /// back in a guard of `pool`, to give it back (drop), discard or
    /// detach it.
    ///
    /// # Safety
    ///
    /// `item` was lent by `pool` (a get or [`Pool::adopt`]) and turned into
    /// a bare object with `into_raw`, and is turned back once: the pool's
    /// count of objects out is what keeps its state alive for owned
    /// guards, so ending a guard it never lent could free that state under
    /// them.
    #[inline(always)]
    pub unsafe fn from_raw(pool: &'a Pool<M>, item: M::Item) -> Self {
        Self::new(pool, item)
    }

    /// Runs the guard's end (put, discard or detach): the borrow of the
    /// handle keeps the pool alive throughout.
    #[inline(always)]
    fn end<R>(_pool: &Pool<M>, end: impl FnOnce() -> R) -> R {
        end()
    }
}

impl<M: Manage> Pool<M> {
    /// Gives an owned guard's object back through this handle: what
    /// dropping the guard does, minus the work of keeping the pool alive
    /// through it. A dropped owned guard may be the last thing holding its
    /// pool, so its end looks for parked pools afterwards, or, except in
    /// the common case, is bracketed by this thread's lifetime marker (see
    /// [`implementation`](crate::implementation#owned-guards)); here the
    /// caller's handle keeps the pool alive, so nothing is needed. For
    /// callers that hold the pool anyway and give objects back often, as an
    /// event loop does with its coroutine stacks. A guard of another pool
    /// is dropped as usual.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let pool = Arc::new(tidepool::Pool::new(|| vec![0u8; 4096]));
    /// let buf = pool.get_owned().unwrap();
    /// pool.put(buf);
    /// assert_eq!((pool.stats().live, pool.stats().idle), (0, 1));
    /// ```
    #[inline(always)]
    pub fn put(&self, guard: OwnedPooled<M>) {
        if !std::ptr::eq(&**guard.pool.shared, &**self.shared) {
            return Self::put_as_drop(guard);
        }
        let mut guard = ManuallyDrop::new(guard);
        // SAFETY: the guard's object is counted out of this pool (the same
        // shared state: checked above), and is handed on exactly once,
        // here, as the guard's drop would: the guard is never dropped, and
        // its pool field, an uncounted alias, owns nothing. The state stays
        // alive throughout: `self` is a handle on it, which holds an `Arc`,
        // or an alias of another guard of this pool, which cannot end while
        // it is borrowed (and so the live count stays above zero). If the
        // pool was closed before `self` was taken from a guard, its parked
        // orphan is freed when `self`, now its last handle, closes it again
        // (`lifetime::close`): no marker is needed for that either.
        unsafe { Shared::put(&self.shared, self.head_ptr(), &mut guard.item) }
    }

    /// A guard of another pool: it ends as if dropped. Out of line, so the
    /// guard's drop glue keeps the callers it had (with one more inlined
    /// here, the compiler stops inlining it into them, which the budget
    /// `stack_get_drop` would show).
    #[cold]
    #[inline(never)]
    fn put_as_drop(guard: OwnedPooled<M>) {
        drop(guard);
    }
}

impl<M: Manage> OwnedPooled<M> {
    /// # Safety
    ///
    /// `item` has just been counted out of the pool `pool` aliases.
    #[inline]
    pub(crate) unsafe fn new(pool: ManuallyDrop<Pool<M>>, item: M::Item) -> Self {
        Self {
            pool,
            item: ManuallyDrop::new(item),
        }
    }

    pub(crate) fn into_parts(self) -> (ManuallyDrop<Pool<M>>, M::Item) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so each field is moved out exactly
        // once: `item` by `take`, `pool` by `read` of a field that nothing
        // reads again (and that, being `ManuallyDrop`, owns nothing).
        unsafe {
            let item = ManuallyDrop::take(&mut this.item);
            let pool = std::ptr::read(&this.pool);
            (pool, item)
        }
    }

    /// The drop in every case but the common one, inside the lifetime
    /// marker: the thread is panicking (the object is destroyed), it
    /// cannot end unmarked, or its fast path did not cache the object
    /// (`recycled`: after `recycle` ran).
    /// A `bool`, not a `PutRest`, so that the inlined drop does not build
    /// one in memory.
    #[cold]
    #[inline(never)]
    fn drop_other(&mut self, recycled: bool) {
        self.drop_rest(PutRest::Other { recycled });
    }

    /// The rest of a drop whose fast path did not cache the object (`item`
    /// is still ours, maybe recycled): inside the lifetime marker, since it
    /// may touch the pool after counting the object back.
    #[cold]
    #[inline(never)]
    fn drop_rest(&mut self, rest: PutRest) {
        let shared = &self.pool.shared;
        let head = self.pool.head_ptr();
        let item = &mut self.item;
        // SAFETY: as in `drop`; `rest` is what `put_fast` left on `item`,
        // which `put_rest` takes exactly once.
        Self::end(&self.pool, || unsafe {
            Shared::put_rest(shared, head, item, rest)
        });
    }

    /// Runs the guard's end (put, discard or detach) so that the pool
    /// outlives it even if its last handle is dropped meanwhile.
    #[inline(always)]
    fn end<R>(pool: &Pool<M>, end: impl FnOnce() -> R) -> R {
        let shared: NonNull<Shared<M>> = NonNull::from(&**pool.shared);
        // SAFETY: the guard's object is counted out of this pool until `end`
        // gives it back, so the pool is alive now (`Pool::alias`); the
        // `Ending` is dropped right after `end`, this guard's only end.
        let _ending = unsafe { crate::shared::lifetime::Ending::begin(shared) };
        end()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn assert_send_static<T: Send + 'static>() {}
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn owned_guards_are_send_and_static_and_pools_are_shareable() {
        assert_send_static::<OwnedPooled<fn() -> Vec<u8>>>();
        assert_send_sync::<OwnedPooled<fn() -> Vec<u8>>>();
        assert_send_sync::<Pool<fn() -> Vec<u8>>>();
        assert_send_sync::<Pooled<'static, fn() -> Vec<u8>>>();
    }
}
