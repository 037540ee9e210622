//! The front door: [`Pool`].

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;

use crate::callbacks::Site;
use crate::pressure::Level;
use crate::reclaim::Clock;
#[cfg(not(loom))]
use crate::reclaim::{registry, scheduler};
use crate::shared::head::{Head, HeadPtr};
use crate::shared::Shared;
use crate::{Builder, Config, Error, Manage, OwnedPooled, Pooled, Stats};

/// A pool of reusable objects made by a [`Manage`]r.
///
/// `get` and `put` (dropping a guard) touch only the calling thread's cache
/// of at most two batches: no lock, no atomic read-modify-write, no
/// allocation. A thread visits the shared depot once per batch, and the depot
/// never holds more than `max_idle` objects. See the
/// [`implementation`](crate::implementation) notes for the design.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tidepool::Pool;
///
/// let pool = Arc::new(Pool::new(|| Vec::<u8>::with_capacity(64 * 1024)));
/// let workers: Vec<_> = (0..4)
///     .map(|_| {
///         let pool = Arc::clone(&pool);
///         std::thread::spawn(move || {
///             for _ in 0..1000 {
///                 let mut buf = pool.get().unwrap();
///                 buf.clear();
///                 buf.extend_from_slice(b"payload");
///             }
///         })
///     })
///     .collect();
/// for w in workers {
///     w.join().unwrap();
/// }
/// let stats = pool.stats();
/// assert_eq!(stats.live, 0);
/// assert!(stats.created <= 4, "each thread reuses its own object");
/// ```
pub struct Pool<M: Manage> {
    /// The handle's reference to the shared state: released by `drop`.
    /// The last handle releases it through
    /// [`lifetime::close`](crate::shared::lifetime), which keeps the state until
    /// the last owned guard has ended. Owned guards hold an uncounted copy
    /// of this pointer and the head's ([`Pool::alias`]). The handle is
    /// these two pointers (the reclaimer's ticket lives in `Shared::life`),
    /// so the copy is two words.
    pub(crate) shared: ManuallyDrop<Arc<Shared<M>>>,
    /// The pool's head (`shared/head.rs`), owned by the shared state: a
    /// get and a put reach it without reading the rest of that state.
    head: HeadPtr<M::Item>,
}

impl<M: Manage> Pool<M> {
    /// A pool with the default settings ([`Config::default`], with the
    /// batch size lowered for big items: see
    /// [`Builder::batch_size`](crate::Builder::batch_size)).
    ///
    /// # The reclaimer thread
    ///
    /// The defaults have [`background`](Builder::background) on, so the
    /// first such pool in the process **starts a thread**,
    /// `tidepool-reclaim`, one for every pool in the process. It runs the
    /// reclaim passes of pools nobody touches, takes back the caches of
    /// threads that stopped using a pool, and delivers memory pressure (on
    /// Linux it opens the default pressure sources: see
    /// [`pressure`](crate::pressure)). It sleeps with no timeout while no
    /// pool holds anything beyond its reserve, and is never stopped.
    ///
    /// The thread is supervised: if it is missing (in a forked child, whose
    /// copy of the process has no such thread), the next registration,
    /// [`notify`](crate::pressure::notify), or operation on a background
    /// pool other than a cache hit starts a new one
    /// ([`reclaim::status`](crate::reclaim::status) tells).
    ///
    /// Programs that manage their own threads — embedded runtimes,
    /// sandboxes that forbid spawning — build their pools with
    /// `background(false)`, which
    /// starts nothing, and drive reclaim themselves: [`reclaim`](Pool::reclaim)
    /// from their own timer or event loop (it runs a pass only when one is
    /// due, so calling it often is cheap), and [`pressure`](Pool::pressure)
    /// when they learn of memory pressure. Without either, passes still run
    /// when threads visit the depot, and a thread's cache comes back when the
    /// thread exits.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = tidepool::Pool::builder(|| vec![0u8; 4096])
    ///     .background(false) // no thread is started for this pool
    ///     .reclaim_interval(Duration::from_secs(15))
    ///     .build()?;
    /// drop(pool.get()?);
    /// // From your own loop, e.g. once a second:
    /// pool.reclaim(); // a pass when one is due, else nothing
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Many pools
    ///
    /// A process may hold any number of pools. Building one makes no
    /// system call, and the reclaimer visits only the pools whose deadline
    /// has come. A thread keeps a cache in at
    /// most 1,024 pools at once: in the pools past those it gets and puts
    /// through the pool's shared depot (one lock), and caches the reclaimer
    /// takes back for sitting idle make room for the pools it keeps using.
    pub fn new(manager: M) -> Self {
        Self::builder(manager)
            .build()
            .expect("the default settings are valid for every item type")
    }

    /// A builder to choose settings; see [`Builder`].
    pub fn builder(manager: M) -> Builder<M> {
        Builder::new(manager)
    }

    pub(crate) fn from_parts(manager: M, config: Config, clock: Arc<dyn Clock>) -> Self {
        let background = config.background;
        let shared = Arc::new(Shared::new(manager, config, clock));
        #[cfg(not(loom))]
        if background {
            let weak: std::sync::Weak<dyn registry::Background> =
                Arc::downgrade(&shared) as std::sync::Weak<Shared<M>>;
            shared
                .life
                .set_ticket(scheduler::register(weak, crate::pressure::default_sources));
        }
        #[cfg(loom)]
        let _ = background;
        Self {
            head: shared.head_ptr(),
            shared: ManuallyDrop::new(shared),
        }
    }

    /// The pointer to the pool's head, for the put paths, which must not
    /// hold a reference into the pool past the count that may free it.
    #[inline(always)]
    pub(crate) fn head_ptr(&self) -> &HeadPtr<M::Item> {
        &self.head
    }

    /// The pool's head. For an alias (an owned guard's), the borrow may
    /// outlive the head: use it only while the guard's object is counted
    /// out, or inside its lifetime marker.
    #[inline(always)]
    pub(crate) fn head(&self) -> &Head<M::Item> {
        // SAFETY: the head is owned by the shared state, which this
        // handle's `Arc` (or, for an alias, `lifetime`) keeps alive while
        // the handle is used.
        unsafe { self.head.get() }
    }

    /// An uncounted copy of this handle, for an owned guard: never dropped,
    /// valid while the shared state lives, which `lifetime` guarantees for
    /// as long as the pool counts the guard's object as out.
    #[inline(always)]
    fn alias(&self) -> ManuallyDrop<Pool<M>> {
        // SAFETY: this handle's own shared state, alive now, and an `Arc`'s
        // pointer; the `Arc` made here is never dropped (`ManuallyDrop`),
        // and the alias is only dereferenced while the state lives (see
        // `lifetime`).
        let shared = unsafe { Arc::from_raw(Arc::as_ptr(&self.shared)) };
        ManuallyDrop::new(Pool {
            shared: ManuallyDrop::new(shared),
            head: self.head,
        })
    }

    /// The address of this pool's shared state, which
    /// [`alias_of`](Self::alias_of) turns back into a handle.
    #[cfg(unix)]
    pub(crate) fn shared_ptr(&self) -> *const Shared<M> {
        Arc::as_ptr(&self.shared)
    }

    /// An uncounted handle on the pool whose shared state is at `shared`
    /// and head at `head`: what [`alias`](Self::alias) makes, and what a
    /// stack handle, which finds its pool by address (`stack::PooledStack`),
    /// rebuilds without reading the shared state.
    ///
    /// # Safety
    ///
    /// `shared` is `Arc::as_ptr` of a pool's shared state
    /// ([`shared_ptr`](Self::shared_ptr)) and `head` that pool's
    /// [`head_ptr`](Self::head_ptr), alive for as long as the handle is
    /// used (the pool counts an object out to the caller: see `lifetime`).
    #[cfg(unix)]
    #[inline(always)]
    pub(crate) unsafe fn alias_of(
        shared: *const Shared<M>,
        head: *const Head<M::Item>,
    ) -> ManuallyDrop<Pool<M>> {
        // SAFETY: `shared` is an `Arc`'s pointer (`shared_ptr`: `as_ptr`,
        // the pointer `into_raw` gives) whose allocation is alive (our
        // caller's promise); the `Arc` made here is never dropped
        // (`ManuallyDrop`), so the count stays as it is.
        let shared = unsafe { Arc::from_raw(shared) };
        // SAFETY: our caller's promise: the head of that live pool.
        let head = unsafe { HeadPtr::from_raw(head) };
        debug_assert!(std::ptr::eq(head.as_ptr(), shared.head_ptr().as_ptr()));
        ManuallyDrop::new(Pool {
            head,
            shared: ManuallyDrop::new(shared),
        })
    }

    /// A new counted handle on this pool, for an owned guard's holder that
    /// wants one ([`PooledStack::pool`](crate::stack::PooledStack::pool)).
    /// The pool closes when its last handle drops.
    #[cfg(unix)]
    pub(crate) fn new_handle(&self) -> Pool<M> {
        self.shared.life.acquire_handle();
        Pool {
            shared: ManuallyDrop::new(Arc::clone(&self.shared)),
            head: self.shared.head_ptr(),
        }
    }

    /// Takes an idle object, or creates one if none is at hand.
    ///
    /// # Errors
    ///
    /// [`Error::Create`] if the manager's `create` failed, and
    /// [`Error::Exhausted`] if creating would pass `max_live`. The pool is
    /// unchanged either way.
    #[inline]
    pub fn get(&self) -> Result<Pooled<'_, M>, Error<M::Error>> {
        let item = Shared::get(&self.shared, self.head())?;
        Ok(Pooled::new(self, item))
    }

    /// An idle object if one is at hand, in this thread's cache or the
    /// depot; never creates one. `None` is counted in
    /// [`Stats::empty_gets`] (and `misses`). For callers that make objects
    /// their own way when the pool has none, and hand them over with
    /// [`adopt`](Pool::adopt).
    ///
    /// ```
    /// let pool = tidepool::Pool::new(|| vec![0u8; 64]);
    /// assert!(pool.try_get().is_none());
    /// drop(pool.get()?);
    /// assert!(pool.try_get().is_some());
    /// assert_eq!(pool.stats().empty_gets, 1);
    /// # Ok::<(), tidepool::Error<std::convert::Infallible>>(())
    /// ```
    #[inline]
    pub fn try_get(&self) -> Option<Pooled<'_, M>> {
        let item = Shared::try_get(&self.shared, self.head())?;
        Some(Pooled::new(self, item))
    }

    /// Takes in an object made elsewhere, lent to the caller: from now on
    /// it is one of the pool's objects, counted as created
    /// ([`Stats::adopted`]) and live, reused like the others, and handed
    /// to the manager's `destroy` when reclaim, pressure or a drain lets
    /// it go.
    ///
    /// # Errors
    ///
    /// At [`max_live`](Builder::max_live) the object is handed back
    /// untouched.
    ///
    /// ```
    /// let pool = tidepool::Pool::new(|| vec![0u8; 64]);
    /// let made_here = vec![1u8; 64];
    /// drop(pool.adopt(made_here).unwrap());
    /// let s = pool.stats();
    /// assert_eq!((s.created, s.adopted, s.idle), (1, 1, 1));
    /// assert_eq!(pool.get().unwrap()[0], 1);
    /// ```
    pub fn adopt(&self, item: M::Item) -> Result<Pooled<'_, M>, M::Item> {
        self.shared.supervise();
        if self.shared.adopt() {
            Ok(Pooled::new(self, item))
        } else {
            Err(item)
        }
    }

    /// Like [`get`](Pool::get), but the guard is `'static`: it can be sent
    /// to and dropped on another thread, and may outlive every `Arc` of the
    /// pool (the pool's objects and state then go when the last such guard
    /// does). Taking and dropping it touch no shared reference count.
    ///
    /// # Errors
    ///
    /// As for [`get`](Pool::get).
    #[inline(always)]
    pub fn get_owned(self: &Arc<Self>) -> Result<OwnedPooled<M>, Error<M::Error>> {
        let item = Shared::get(&self.shared, self.head())?;
        self.shared.life.note_owned();
        // SAFETY: `item` was just counted out of this pool.
        Ok(unsafe { OwnedPooled::new(self.alias(), item) })
    }

    /// Like [`get`](Pool::get), but at [`max_live`](Builder::max_live)
    /// waits up to `timeout` for another thread to give an object back (or
    /// for one to be destroyed, making room to create one).
    ///
    /// Waiters are served first come, first served: while any wait, a
    /// thread that drops a guard hands its object straight to the oldest
    /// waiter instead of its own cache, and each object wakes exactly one
    /// waiter. A plain `get` never waits; it fails fast with
    /// [`Error::Exhausted`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if nothing was handed over in time (a `timeout` of
    /// zero still queues once: an object given back meanwhile is taken);
    /// [`Error::Create`] as for `get`. Never `Exhausted`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tidepool::{Error, Pool};
    ///
    /// let pool = Arc::new(Pool::builder(|| vec![0u8; 1024]).max_live(1).build()?);
    /// let only = pool.get_owned()?;
    /// // At the limit: a plain get fails at once, a timed one waits.
    /// assert!(matches!(pool.get(), Err(Error::Exhausted { limit: 1 })));
    /// assert!(matches!(
    ///     pool.get_timeout(Duration::from_millis(1)),
    ///     Err(Error::Timeout { limit: 1 })
    /// ));
    /// // Another thread gives it back while we wait: handed straight to us.
    /// let giver = std::thread::spawn(move || {
    ///     std::thread::sleep(Duration::from_millis(10));
    ///     drop(only);
    /// });
    /// let buf = pool.get_timeout(Duration::from_secs(60))?;
    /// assert_eq!(buf.len(), 1024);
    /// giver.join().unwrap();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_timeout(&self, timeout: Duration) -> Result<Pooled<'_, M>, Error<M::Error>> {
        let item = Shared::get_timeout(&self.shared, timeout)?;
        Ok(Pooled::new(self, item))
    }

    /// An object, waiting for one asynchronously at `max_live`: a future
    /// that does what [`get_timeout`](Pool::get_timeout) does, but instead
    /// of sleeping it queues its task's waker in the same first-come,
    /// first-served queue and returns `Pending`; an object given back on
    /// any thread is handed to the oldest waiter, thread or task, and wakes
    /// it alone. It works with any executor (it needs nothing but the
    /// `Waker`). Below the limit it is ready at its first poll.
    ///
    /// Cancel-safe: dropping the future (a timeout of the caller's runtime,
    /// a `select!` that went the other way) takes it out of the queue, and
    /// an object handed to it in the meantime goes on to the next waiter,
    /// or back to the pool. Polling it again after it completed starts a
    /// new get.
    ///
    /// # Errors
    ///
    /// [`Error::Create`] if the manager fails (below the limit, or with a
    /// place freed for it). No timeout: compose it with your runtime's.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    ///
    /// struct Flag(std::sync::atomic::AtomicBool);
    /// impl Wake for Flag {
    ///     fn wake(self: Arc<Self>) {
    ///         self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    ///     }
    /// }
    ///
    /// let pool = tidepool::Pool::builder(|| vec![0u8; 64]).max_live(1).build()?;
    /// let only = pool.get()?;
    /// let flag = Arc::new(Flag(Default::default()));
    /// let waker = Waker::from(Arc::clone(&flag));
    /// let mut cx = Context::from_waker(&waker);
    /// let mut fut = pin!(pool.get_async());
    /// assert!(fut.as_mut().poll(&mut cx).is_pending()); // queued at the limit
    /// drop(only);                                         // handed to the future
    /// assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst)); // and woken
    /// let Poll::Ready(buf) = fut.as_mut().poll(&mut cx) else { unreachable!() };
    /// assert_eq!(buf?.len(), 64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_async(&self) -> GetAsync<'_, M> {
        GetAsync {
            pool: self,
            ticket: None,
        }
    }

    /// [`get_timeout`](Pool::get_timeout) with an owned guard, as
    /// [`get_owned`](Pool::get_owned).
    ///
    /// # Errors
    ///
    /// As for [`get_timeout`](Pool::get_timeout).
    pub fn get_owned_timeout(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> Result<OwnedPooled<M>, Error<M::Error>> {
        let item = Shared::get_timeout(&self.shared, timeout)?;
        self.shared.life.note_owned();
        // SAFETY: `item` was just counted out of this pool.
        Ok(unsafe { OwnedPooled::new(self.alias(), item) })
    }

    /// Counts of what the pool has done and holds (see [`Stats`] for which
    /// figures are exact).
    pub fn stats(&self) -> Stats {
        self.shared.supervise();
        self.shared.stats()
    }

    /// Destroys the idle objects the depot does not need: those that sat in
    /// it, unused, since the previous call (its low-water mark), never
    /// going below `min_idle`. Returns how many objects were destroyed.
    ///
    /// The pool already does this on its own every
    /// [`reclaim_interval`](crate::Builder::reclaim_interval), more gently
    /// (two intervals unused); `reclaim_unused` is for callers that know
    /// better when to look. Call [`drain`](Pool::drain) to drop everything
    /// now. (In tidepool's words this *reclaims*: objects are destroyed.
    /// Handing a thread's cache back to the depot, a *trim*, is
    /// [`trim_local`](Pool::trim_local).)
    pub fn reclaim_unused(&self) -> usize {
        self.shared.supervise();
        self.shared.reclaim_unused()
    }

    /// Hands the calling thread's cached objects back to the depot now,
    /// where every thread can reuse them, and gives up the thread's cache
    /// (its next `get` or `put` of this pool takes a new one). Returns how
    /// many objects left the cache.
    ///
    /// A thread's cache goes back on its own when the thread exits; call
    /// this where that moment is too late: before a thread parks for good,
    /// or in a runtime's own thread-exit hook while what the manager needs
    /// is still there. Nothing is destroyed unless the depot is full
    /// ([`max_idle`](crate::Builder::max_idle)).
    ///
    /// ```
    /// let pool = tidepool::Pool::new(|| vec![0u8; 64]);
    /// drop(pool.get()?);
    /// assert_eq!(pool.stats().idle_cached(), 1);
    /// assert_eq!(pool.trim_local(), 1);
    /// let s = pool.stats();
    /// assert_eq!((s.idle_cached(), s.idle_depot), (0, 1));
    /// # Ok::<(), tidepool::Error<std::convert::Infallible>>(())
    /// ```
    pub fn trim_local(&self) -> usize {
        self.shared.supervise();
        self.shared.trim_local()
    }

    /// Destroys the calling thread's cached objects now and gives up the
    /// thread's cache: what a coroutine pool's thread-exit notifier does
    /// (QEMU's deletes its thread's pool), where
    /// [`trim_local`](Pool::trim_local) hands them to the depot.
    /// Returns how many were destroyed.
    ///
    /// ```
    /// let pool = tidepool::Pool::new(|| vec![0u8; 64]);
    /// drop(pool.get()?);
    /// assert_eq!(pool.destroy_local(), 1);
    /// assert_eq!((pool.stats().idle, pool.stats().destroyed), (0, 1));
    /// # Ok::<(), tidepool::Error<std::convert::Infallible>>(())
    /// ```
    pub fn destroy_local(&self) -> usize {
        self.shared.supervise();
        self.shared.destroy_local()
    }

    /// The cap on idle objects in the depot now: the configured
    /// [`max_idle`](Builder::max_idle) until
    /// [`set_max_idle`](Pool::set_max_idle) changes it.
    pub fn max_idle(&self) -> usize {
        self.head().depot.max_idle()
    }

    /// Changes the cap on idle objects in the depot while the pool is in
    /// use, from any thread. Lowering it destroys the oldest idle objects
    /// above the new cap at once (returned: how many); raising it lets
    /// the depot keep more from now on.
    ///
    /// # Errors
    ///
    /// A cap below the configured `batch_size` or `min_idle` is refused,
    /// naming `max_idle`; the pool is unchanged.
    ///
    /// ```
    /// let pool = tidepool::Pool::builder(|| 0u64).batch_size(4).build()?;
    /// pool.set_max_idle(64)?;
    /// assert_eq!(pool.max_idle(), 64);
    /// assert!(pool.set_max_idle(2).is_err());
    /// # Ok::<(), tidepool::ConfigError>(())
    /// ```
    pub fn set_max_idle(&self, max_idle: usize) -> Result<usize, crate::ConfigError> {
        self.resize_max_idle(|_| Some(max_idle))
    }

    /// Adds `delta` (negative: takes it away) to the cap on idle objects,
    /// atomically with respect to other changes: the additive form of
    /// [`set_max_idle`](Pool::set_max_idle), as QEMU's
    /// `qemu_coroutine_inc_pool_size` / `dec_pool_size` pair does it.
    /// Returns how many idle objects the change destroyed.
    ///
    /// # Errors
    ///
    /// As for `set_max_idle`, and a change that would take the cap below
    /// zero or past `usize::MAX`; the pool is unchanged.
    pub fn adjust_max_idle(&self, delta: isize) -> Result<usize, crate::ConfigError> {
        self.resize_max_idle(|now| now.checked_add_signed(delta))
    }

    fn resize_max_idle(
        &self,
        to: impl FnOnce(usize) -> Option<usize>,
    ) -> Result<usize, crate::ConfigError> {
        self.shared.supervise();
        self.shared.resize_max_idle(to)
    }

    /// Tears down every idle object it can reach: the whole depot (ignoring
    /// `min_idle`) and every thread cache whose owner is not inside a `get`
    /// or `put` of this pool right now; a busy owner is asked to hand its
    /// cache to the depot at its next operation instead. Returns how many
    /// objects it took.
    ///
    /// They go to the pool's destroy queue (see
    /// [`Builder::teardown_threads`](crate::Builder::teardown_threads)),
    /// and this call destroys at most one chunk of it
    /// ([`Builder::teardown_chunk`](crate::Builder::teardown_chunk)) before
    /// returning; the rest is finished by the reclaimer thread or by the
    /// next callers, and shows in [`Stats::destroying`] until then. Call
    /// [`drain_blocking`](Pool::drain_blocking) to have them all destroyed
    /// on return.
    ///
    /// On systems without a process-wide barrier (`membarrier(2)`), other
    /// threads' caches are only asked to flush.
    pub fn drain(&self) -> usize {
        self.shared.supervise();
        self.shared.drain()
    }

    /// Like [`drain`](Pool::drain), but destroys everything it takes on
    /// this thread, then helps until the destroy queue is empty. Both in a
    /// *turn*, one of the
    /// [`teardown_threads`](crate::Builder::teardown_threads) allowed at
    /// once: if all are taken it waits, asleep, in a first-come-first-served
    /// line, and a turn given back wakes only the first in line. Returns how many
    /// objects it took, all destroyed by then.
    pub fn drain_blocking(&self) -> usize {
        self.shared.supervise();
        self.shared.drain_blocking()
    }

    /// Runs the reclaim pass if one is due by the pool's clock, as the
    /// first depot visit after an interval boundary or the reclaimer thread
    /// would. Returns how many idle objects it destroyed. With a
    /// [`ManualClock`](crate::reclaim::ManualClock) this drives reclaim
    /// deterministically.
    ///
    /// For a pool built with [`background(false)`](Builder::background),
    /// call this from a thread of your own at least once per
    /// [`reclaim_interval`](Builder::reclaim_interval) (see
    /// [`Pool::new`]).
    pub fn reclaim(&self) -> usize {
        self.shared.supervise();
        self.shared.pass_if_due(Site::Caller)
    }

    /// Applies a memory-pressure level to this pool now (see
    /// [`crate::pressure`]); the reclaimer thread does this for every pool
    /// when a source fires. Returns how many idle objects were destroyed.
    pub fn pressure(&self, level: Level) -> usize {
        self.shared.supervise();
        self.shared.pressure(level, Site::Caller)
    }

    /// Creates objects into the depot until it holds `min_idle`: the
    /// reserve a `mempool` preallocates. Returns how many were created.
    ///
    /// # Errors
    ///
    /// As for [`get`](Pool::get); the objects created before the error stay.
    pub fn prefill(&self) -> Result<usize, Error<M::Error>> {
        self.shared.supervise();
        self.shared.prefill()
    }

    /// Purges every idle object in the depot that has not been purged since
    /// it went idle ([`Manage::purge`]): the objects stay pooled, but give
    /// back what the manager's `purge` releases (for stacks: their memory
    /// pages). Returns how many objects were purged.
    ///
    /// Objects in thread caches are hot and are left alone.
    pub fn purge(&self) -> usize {
        self.shared.supervise();
        self.shared.purge(usize::MAX)
    }

    /// Drops this handle, destroying the pool's idle objects before it
    /// returns even if one of tidepool's own threads (the reclaimer, a
    /// thread handing its cache back as it exits) is looking at the pool at
    /// that moment: everything idle is drained first, then the call waits,
    /// up to `timeout`, for those threads to let go. After it returns
    /// `true`, no callback of the pool's manager runs again; a plain drop
    /// may leave the last destroys to such a thread, moments later. `false`
    /// if some other reference still held the pool at the timeout (another
    /// handle: it is then dropped as usual).
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = tidepool::Pool::new(|| vec![0u8; 64]);
    /// drop(pool.get()?);
    /// assert!(pool.close(Duration::from_secs(10)));
    /// # Ok::<(), tidepool::Error<std::convert::Infallible>>(())
    /// ```
    pub fn close(self, timeout: Duration) -> bool {
        self.drain_blocking();
        let deadline = std::time::Instant::now() + timeout;
        let mut round = 0u32;
        while Arc::strong_count(&self.shared) > 1 {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            // Whoever holds it does a bounded piece of work: yield first,
            // then sleep briefly.
            if round < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
            round += 1;
        }
        drop(self);
        true
    }

    /// The pool's settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The pool's manager.
    pub fn manager(&self) -> &M {
        self.shared.manager()
    }
}

impl<M: Manage> Drop for Pool<M> {
    fn drop(&mut self) {
        // Another handle (from `PooledStack::pool`) still holds the pool:
        // it closes it.
        if !self.shared.life.release_handle() {
            // SAFETY: taken once, here; `self` is not used again.
            drop(unsafe { ManuallyDrop::take(&mut self.shared) });
            return;
        }
        // Wait out a reclaim pass in progress on this pool on another
        // thread, so the last reference is ours and the objects are
        // destroyed right here (or by the last owned guard). (On the
        // reclaimer thread itself, from a callback of that pass, this does
        // not wait: the pool then finishes dropping there, right after the
        // pass.)
        #[cfg(not(loom))]
        if let Some(ticket) = self.shared.life.ticket() {
            scheduler::close(ticket);
        }
        // SAFETY: taken once, here; `self` is not used again.
        let shared = unsafe { ManuallyDrop::take(&mut self.shared) };
        crate::shared::lifetime::close(shared);
    }
}

impl<M: Manage> fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("config", self.config())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The future of [`Pool::get_async`].
#[must_use = "a future does nothing unless polled"]
pub struct GetAsync<'a, M: Manage> {
    pool: &'a Pool<M>,
    /// Its position in the waiters' queue, once it has one.
    ticket: Option<crate::shared::waiters::TaskTicket>,
}

impl<M: Manage> std::fmt::Debug for GetAsync<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetAsync")
            .field("queued", &self.ticket.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a, M: Manage> std::future::Future for GetAsync<'a, M> {
    type Output = Result<Pooled<'a, M>, Error<M::Error>>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // `GetAsync` is `Unpin`: a reference and an id.
        let this = self.get_mut();
        let pool = this.pool;
        Shared::poll_get(&pool.shared, &mut this.ticket, cx)
            .map(|got| got.map(|item| Pooled::new(pool, item)))
    }
}

impl<M: Manage> Drop for GetAsync<'_, M> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.pool.shared.cancel_get(ticket);
        }
    }
}
