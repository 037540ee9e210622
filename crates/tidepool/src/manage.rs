//! How a pool makes, resets and unmakes its objects.

use std::convert::Infallible;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Creates, recycles and destroys the objects of a [`Pool`](crate::Pool).
///
/// # When and where the pool calls these
///
/// Never while it holds a lock of its own (its depot, its reclaim state, the
/// process-wide registry) and never while it has a thread cache borrowed:
/// it collects the work under the lock, releases it, then calls. So a
/// manager may itself use the pool (or other pools) freely from any method:
/// `get` and `put`, `reclaim_unused` or `drain`, drop the last handle of its own pool,
/// or build new pools. Every call site is in one file of the crate,
/// `callbacks.rs`.
///
/// `recycle` runs on the thread that drops the guard; `create` on the thread
/// that calls `get` or `prefill`; `purge` and `destroy` on whichever thread
/// does the work: the caller of an operation, a thread exiting, the thread
/// dropping the pool, or the process-wide reclaimer thread.
///
/// # Panics
///
/// A panic in any method leaves the pool consistent and its counts right
/// (`live + idle + destroying == created - destroyed - detached`):
///
/// * `create` panicking creates nothing and counts nothing; the panic reaches
///   the caller of [`Pool::get`](crate::Pool::get), and the `max_live` place
///   it had reserved is given back.
/// * `recycle`, `purge` and `destroy` run under `catch_unwind`, and the
///   operation they are part of finishes: every other object is destroyed,
///   purged or put back as it would have been. An object whose `recycle` or
///   `purge` panicked is destroyed (it may be half-updated); an object whose
///   `destroy` panicked is counted as destroyed (it was handed over). Either
///   way it is never handed out again, and the panic is counted in
///   [`Stats::callback_panics`](crate::Stats::callback_panics).
/// * Then the first panic is **resumed** where the caller can take it: from
///   the guard's drop, [`Pool::reclaim_unused`](crate::Pool::reclaim_unused),
///   [`drain`](crate::Pool::drain), [`purge`](crate::Pool::purge),
///   [`reclaim`](crate::Pool::reclaim), [`pressure`](crate::Pool::pressure),
///   [`prefill`](crate::Pool::prefill) (unless that thread is already
///   unwinding).
/// * It is **contained** where nobody can: on the reclaimer thread, in a
///   reclaim pass the pool runs by itself at the end of a `get` or `put`
///   slow path (the `get` or `put` succeeds), while a thread exits, and in
///   the pool's drop: counted, reported once per pool through the `log`
///   crate (`log::warn!`; no logger is needed), never resumed. A pool's drop
///   and a thread's exit never unwind, even from a thread-local destructor.
/// * `create_batch` panicking creates nothing and counts nothing, like
///   `create`; the default hands what it made before the panic to
///   `destroy_batch` first.
/// * `destroy_batch` panicking still counts every object of the `Vec` as
///   destroyed: the whole batch was handed over.
/// * `purge_batch` panicking leaves the pool unable to tell which objects
///   are half-purged, so it destroys the whole slice, then resumes the
///   panic.
///
/// The manager's own `Drop` runs in the pool's drop and is contained the
/// same way. One case is left to the manager: a guard dropped by a
/// thread-local destructor that runs before tidepool's own (the order of
/// thread-local destructors is not specified) is an ordinary put, and a
/// `recycle` panic there unwinds out of that destructor, which aborts.
///
/// # Batches
///
/// The pool moves objects between threads a batch at a time, and it makes
/// and unmakes them in batches too where it can: a refill on a miss asks
/// [`create_batch`](Manage::create_batch) for a batch, teardowns the pool
/// decides (reclaim, pressure, a depot at its cap, `drain`, dropping the
/// pool, a thread's exit) go to [`destroy_batch`](Manage::destroy_batch), and
/// purges to [`purge_batch`](Manage::purge_batch). The defaults loop over
/// the single-object methods, so a manager only overrides them when it can
/// share work between objects: [`StackManager`](crate::stack::StackManager)
/// carves a batch of stacks out of one mapping, unmaps a whole slab of them
/// with one `munmap`, and purges a run of neighbours with one `madvise`.
/// Single objects (a `get` that needs just one, a discarded guard) still go
/// through `create` and `destroy`, so both forms must agree.
///
/// A refill asks for a batch only when the pool is built with a
/// [`burst`](crate::Builder::burst) above 1 (the default creates one object
/// per miss). A panicking `destroy_batch` counts as one caught panic.
///
/// # Examples
///
/// A manager for byte buffers that are cleared before reuse and refused when
/// they have grown too big:
///
/// ```
/// use std::convert::Infallible;
/// use tidepool::{Manage, Pool};
///
/// struct Buffers;
///
/// impl Manage for Buffers {
///     type Item = Vec<u8>;
///     type Error = Infallible;
///
///     fn create(&self) -> Result<Vec<u8>, Infallible> {
///         Ok(Vec::with_capacity(4096))
///     }
///
///     fn recycle(&self, buf: &mut Vec<u8>) -> bool {
///         buf.clear();
///         buf.capacity() <= 64 * 1024
///     }
/// }
///
/// let pool = Pool::new(Buffers);
/// let mut buf = pool.get().unwrap();
/// buf.extend_from_slice(b"hello");
/// drop(buf); // cleared and cached for the next `get`
/// assert_eq!(pool.get().unwrap().len(), 0);
/// ```
pub trait Manage: Send + Sync + 'static {
    /// The pooled object.
    type Item: Send + 'static;
    /// Why [`create`](Manage::create) failed: anything that can be printed
    /// and sent, e.g. a `String`, an `anyhow::Error`, a `std::io::Error`, or
    /// an error enum of your own. [`Pool::get`](crate::Pool::get) returns it
    /// inside [`Error::Create`](crate::Error::Create).
    type Error: std::fmt::Debug + std::fmt::Display + Send + Sync + 'static;

    /// Makes a new object. Called only when no idle object is at hand.
    ///
    /// Every object is later destroyed exactly once ([`destroy`](Manage::destroy)),
    /// unless taken out with `detach`.
    fn create(&self) -> Result<Self::Item, Self::Error>;

    /// Resets `item` before it is reused. Returning `false` destroys it
    /// instead. Runs on the thread that drops the guard.
    fn recycle(&self, item: &mut Self::Item) -> bool {
        let _ = item;
        true
    }

    /// Releases what an idle object holds without unmaking it, e.g. gives
    /// its memory pages back to the OS while keeping the mapping
    /// (`madvise(MADV_DONTNEED)`). The object must stay usable: the next
    /// `get` may hand it out. Called at most once per idle period, on objects
    /// that sat in the depot, by [`Pool::purge`](crate::Pool::purge). The
    /// default does nothing.
    fn purge(&self, item: &mut Self::Item) {
        let _ = item;
    }

    /// Unmakes an object the pool lets go. The default drops it.
    fn destroy(&self, item: Self::Item) {
        drop(item)
    }

    /// Makes up to `n` new objects at once, for a pool refilling a whole
    /// batch (a thread cache) on a miss. The pool reserves `n` places under
    /// `max_live` before the call and gives back those it did not get.
    ///
    /// * `n == 0`: `Ok` with an empty `Vec`.
    /// * `Ok(items)` with `1 <= items.len() <= n`: fewer than asked is
    ///   fine, and how a manager reports a failure part-way: it returns
    ///   what it made and lets the error come back from the next call (the
    ///   default stops at the first error after the first object, and drops
    ///   that error). The pool counts every returned object as created.
    /// * `Err(e)`: nothing was made, nothing is left to destroy.
    ///
    /// The default calls [`create`](Manage::create) up to `n` times. If one
    /// panics, the objects made before it go to
    /// [`destroy_batch`](Manage::destroy_batch) and the panic is resumed: a
    /// panicking `create_batch` leaves nothing behind (unless
    /// `destroy_batch` panics too; its panic then replaces the first).
    fn create_batch(&self, n: usize) -> Result<Vec<Self::Item>, Self::Error> {
        // `n` is a pool's batch size in practice; a huge `n` from elsewhere
        // grows the `Vec` as objects come rather than reserving it all.
        let mut items = Vec::with_capacity(n.min(256));
        while items.len() < n {
            match catch_unwind(AssertUnwindSafe(|| self.create())) {
                Ok(Ok(item)) => items.push(item),
                Ok(Err(e)) if items.is_empty() => return Err(e),
                // Keep what was made; the next call meets the error again.
                Ok(Err(_)) => break,
                Err(panic) => {
                    if !items.is_empty() {
                        self.destroy_batch(items);
                    }
                    resume_unwind(panic)
                }
            }
        }
        Ok(items)
    }

    /// Unmakes every object of `items`, which the pool lets go: a
    /// batch of them at a time when the pool tears down many at once.
    ///
    /// Exactly once: the pool counts every object of `items` as destroyed
    /// when it hands the `Vec` over, whether this returns or panics, and
    /// never hands an object over twice or looks at it again. So an
    /// implementation must not leave objects behind on a panic: whatever
    /// is still in the `Vec` when a panic unwinds out of it is only
    /// dropped. `items` may be empty.
    ///
    /// The default calls [`destroy`](Manage::destroy) on each object in
    /// order, under `catch_unwind`: if some panic, the rest are destroyed
    /// all the same, then the first panic is resumed (unless this thread is
    /// already unwinding, where a second panic could abort the process; it
    /// is dropped then).
    fn destroy_batch(&self, items: Vec<Self::Item>) {
        let mut first_panic = None;
        for item in items {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.destroy(item))) {
                first_panic.get_or_insert(panic);
            }
        }
        if let Some(panic) = first_panic {
            if !std::thread::panicking() {
                resume_unwind(panic);
            }
        }
    }

    /// Purges several idle objects at once, each as
    /// [`purge`](Manage::purge) would: they must all stay usable. Lets a
    /// manager release neighbours together (one `madvise` over a run of
    /// adjacent stacks).
    ///
    /// The default calls `purge` on each in order, and lets the first
    /// panic out at once: the pool then destroys the whole slice (it cannot
    /// tell which objects a panic left half-purged).
    fn purge_batch(&self, items: &mut [Self::Item]) {
        for item in items {
            self.purge(item);
        }
    }
}

/// Any `Fn() -> T` is an infallible manager whose objects are reused as they
/// are returned.
///
/// ```
/// let pool = tidepool::Pool::new(|| vec![0u8; 1024]);
/// assert_eq!(pool.get().unwrap().len(), 1024);
/// ```
impl<T, F> Manage for F
where
    T: Send + 'static,
    F: Fn() -> T + Send + Sync + 'static,
{
    type Item = T;
    type Error = Infallible;

    #[inline]
    fn create(&self) -> Result<T, Infallible> {
        Ok(self())
    }
}
