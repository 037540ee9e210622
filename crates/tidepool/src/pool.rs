//! The front door: [`Pool`].

use std::fmt;
use std::sync::Arc;

use crate::callbacks::Site;
use crate::pressure::Level;
use crate::reclaim::Clock;
#[cfg(not(loom))]
use crate::reclaim::{registry, scheduler};
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
    pub(crate) shared: Arc<Shared<M>>,
    /// The pool's place in the reclaimer's registry, if it has one.
    #[cfg(not(loom))]
    background: Option<registry::Ticket>,
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
        let background = background.then(|| {
            let weak: std::sync::Weak<dyn registry::Background> =
                Arc::downgrade(&shared) as std::sync::Weak<Shared<M>>;
            scheduler::register(weak, crate::pressure::default_sources)
        });
        #[cfg(loom)]
        let _ = background;
        Self {
            shared,
            #[cfg(not(loom))]
            background,
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
        let item = Shared::get(&self.shared)?;
        Ok(Pooled::new(self, item))
    }

    /// Like [`get`](Pool::get), but the guard holds an `Arc` of the pool, so
    /// it is `'static` and can be sent to and dropped on another thread.
    ///
    /// # Errors
    ///
    /// As for [`get`](Pool::get).
    #[inline]
    pub fn get_owned(self: &Arc<Self>) -> Result<OwnedPooled<M>, Error<M::Error>> {
        let item = Shared::get(&self.shared)?;
        Ok(OwnedPooled::new(Arc::clone(self), item))
    }

    /// Counts of what the pool has done and holds (see [`Stats`] for which
    /// figures are exact).
    pub fn stats(&self) -> Stats {
        self.shared.supervise();
        self.shared.stats()
    }

    /// Destroys the idle objects the depot does not need: those that sat in
    /// it, unused, since the previous `trim` (its low-water mark), never
    /// going below `min_idle`. Returns how many objects were destroyed.
    ///
    /// The pool already does this on its own every
    /// [`reclaim_interval`](crate::Builder::reclaim_interval), more gently
    /// (two intervals unused); `trim` is for callers that know better when
    /// to look. Call [`drain`](Pool::drain) to drop everything now.
    pub fn trim(&self) -> usize {
        self.shared.supervise();
        self.shared.trim()
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
    /// assert_eq!(pool.release_local(), 1);
    /// let s = pool.stats();
    /// assert_eq!((s.idle_cached(), s.idle_depot), (0, 1));
    /// # Ok::<(), tidepool::Error<std::convert::Infallible>>(())
    /// ```
    pub fn release_local(&self) -> usize {
        self.shared.supervise();
        self.shared.release_local()
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
    /// this thread, then helps until the destroy queue is empty (waiting,
    /// by yielding, for a place among the
    /// [`teardown_threads`](crate::Builder::teardown_threads) if need be).
    /// Returns how many objects it took, all destroyed by then.
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
        // Wait out a reclaim pass in progress on this pool on another
        // thread, so the last reference is ours and the objects are
        // destroyed right here. (On the reclaimer thread itself, from a
        // callback of that pass, this does not wait: the pool then finishes
        // dropping there, right after the pass.)
        #[cfg(not(loom))]
        if let Some(ticket) = &self.background {
            scheduler::close(ticket);
        }
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
