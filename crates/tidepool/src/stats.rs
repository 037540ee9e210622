//! What a pool has done and holds, as numbers.

/// A snapshot of a pool's counts, from [`Pool::stats`](crate::Pool::stats).
///
/// # Exact and lagging figures
///
/// * `created`, `destroyed`, `detached`, `misses`, `idle_depot`,
///   `idle_purged`, `depot_exchanges` and the reclaim counts are exact at the moment each is read: each is one
///   atomic counter or is read under the depot lock.
/// * `hits`, `live` and `idle` add up per-thread counters that each thread
///   bumps without synchronising with the reader (that is what keeps `get`
///   and `put` free of atomic read-modify-writes). Each thread's share lags
///   by at most the one operation it is in the middle of, so with `T` threads
///   inside `get`/`put` these figures are off by at most `T`. When no thread
///   is inside the pool they are exact, and
///   `live + idle + destroying == created - destroyed - detached`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Objects the manager created.
    pub created: u64,
    /// Objects handed to the manager's `destroy`.
    pub destroyed: u64,
    /// Objects taken out of the pool with `detach`.
    pub detached: u64,
    /// Objects handed out and not yet given back.
    pub live: u64,
    /// Objects waiting for reuse: in the depot or in a thread cache.
    pub idle: u64,
    /// Objects the pool decided to destroy that are not destroyed yet: in
    /// its destroy queue or being destroyed. Neither live nor idle:
    /// `live + idle + destroying == created - destroyed - detached`.
    pub destroying: u64,
    /// The part of `idle` that is in the depot.
    pub idle_depot: u64,
    /// The part of `idle_depot` that has been purged
    /// ([`Manage::purge`](crate::Manage::purge)) since it went idle.
    pub idle_purged: u64,
    /// Gets served with an existing object.
    pub hits: u64,
    /// Gets that found no idle object: those that created one (one per
    /// burst) and [`try_get`](crate::Pool::try_get)s that came back empty.
    pub misses: u64,
    /// The part of `misses` that were `try_get`s that came back empty.
    pub empty_gets: u64,
    /// Objects made elsewhere and taken in with
    /// [`Pool::adopt`](crate::Pool::adopt); each is counted in `created`
    /// too, and from then on is an ordinary member of the pool.
    pub adopted: u64,
    /// Batches moved between thread caches and the depot.
    pub depot_exchanges: u64,
    /// The batch size now: it grows with depot traffic and shrinks back
    /// when idle objects go unused ([`Config::max_batch_size`](crate::Config::max_batch_size)).
    pub batch_size: usize,
    /// Idle objects destroyed to fit the working set: by reclaim passes,
    /// [`reclaim_unused`](crate::Pool::reclaim_unused) and a memory-pressure
    /// signal's own drain. Not counted here: [`drain`](crate::Pool::drain),
    /// and batches a full depot refuses when a thread gives them back (past
    /// [`max_idle`](crate::Builder::max_idle), or past the cap a critical
    /// hold sets); those are in `destroyed` only.
    pub reclaimed: u64,
    /// Reclaim passes run (one per interval boundary).
    pub reclaim_passes: u64,
    /// Medium memory-pressure signals applied to this pool, each counted
    /// once its response is done: a `Stats` that counts one shows what it
    /// reclaimed (in `reclaimed`, and in `destroying` until destroyed).
    pub pressure_medium: u64,
    /// Critical memory-pressure signals applied to this pool, counted as
    /// `pressure_medium` is.
    pub pressure_critical: u64,
    /// Thread caches taken back from their owners: idle ones and, at each
    /// pass, those that only gave back (their objects go where the threads
    /// that take find them); all of them under critical pressure; and one
    /// each time a `get` at `max_live` took another thread's cache.
    pub caches_taken: u64,
    /// Objects busy thread caches gave back to the depot because they sat
    /// unused in the cache through two reclaim intervals (a trim: the cache
    /// keeps what its thread used).
    pub trimmed: u64,
    /// The working-set estimate: objects in existence less those that sat
    /// idle in the depot through this reclaim interval and the last.
    pub working_set: u64,
    /// Panics caught from the manager's `recycle`, `purge` and `destroy`
    /// (and its own `Drop`). Those on the caller's own path were resumed on
    /// it; those on the reclaimer thread, in a lazy reclaim pass, at thread
    /// exit or in the pool's drop were contained (the first one of the pool
    /// is reported with `log::warn!`). Either way the object was counted as
    /// destroyed. See [`Manage`](crate::Manage)'s panic notes.
    pub callback_panics: u64,
    /// [`get_timeout`](crate::Pool::get_timeout) callers waiting at
    /// `max_live` right now.
    pub waiting: u64,
    /// Writes (read-modify-writes) of the pool's one global `max_live`
    /// count, the only cache line every thread's creates and destroys
    /// share: a chunk of places taken or given back, a single place near
    /// the limit, credits recalled. Creates and destroys in between spend
    /// and refill their thread's own credits. 0 without `max_live`. Exact.
    pub limit_folds: u64,
}

impl Stats {
    /// Objects in existence, live or idle: `created - destroyed - detached`.
    pub fn existing(&self) -> u64 {
        self.created
            .saturating_sub(self.destroyed)
            .saturating_sub(self.detached)
    }

    /// The part of `idle` held in thread caches.
    pub fn idle_cached(&self) -> u64 {
        self.idle.saturating_sub(self.idle_depot)
    }
}
