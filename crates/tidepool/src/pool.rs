//! The front door: [`Pool`].

use std::fmt;
use std::sync::Arc;

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
}

impl<M: Manage> Pool<M> {
    /// A pool with the default settings ([`Config::default`]).
    pub fn new(manager: M) -> Self {
        Self::from_parts(manager, Config::default())
    }

    /// A builder to choose settings; see [`Builder`].
    pub fn builder(manager: M) -> Builder<M> {
        Builder::new(manager)
    }

    pub(crate) fn from_parts(manager: M, config: Config) -> Self {
        Self {
            shared: Arc::new(Shared::new(manager, config)),
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
        self.shared.stats()
    }

    /// Destroys the idle objects the depot does not need: the batches that
    /// sat in it, unused, since the previous `trim` (its low-water mark).
    /// Returns how many objects were destroyed.
    ///
    /// Called periodically this keeps the depot at the working set, the way
    /// the Solaris kmem reaper does; call [`drain`](Pool::drain) to drop
    /// everything now.
    pub fn trim(&self) -> usize {
        self.shared.trim()
    }

    /// Destroys every idle object this thread can reach: the whole depot and
    /// the calling thread's cache. Other threads' caches (at most
    /// `2 * batch_size` objects each) come back to the depot when those
    /// threads next visit it or exit. Returns how many objects were
    /// destroyed.
    pub fn drain(&self) -> usize {
        self.shared.drain()
    }

    /// Purges every idle object in the depot that has not been purged since
    /// it went idle ([`Manage::purge`]): the objects stay pooled, but give
    /// back what the manager's `purge` releases (for stacks: their memory
    /// pages). Returns how many objects were purged.
    ///
    /// Objects in thread caches are hot and are left alone.
    pub fn purge(&self) -> usize {
        self.shared.purge(usize::MAX)
    }

    /// The pool's settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The pool's manager.
    pub fn manager(&self) -> &M {
        &self.shared.manager
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
