//! Pool settings, their defaults, and how bad ones are refused.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::reclaim::{Clock, SystemClock};
use crate::{Manage, Pool};

/// Objects moved between a thread cache and the depot at a time.
///
/// A thread caches at most two batches, so it can do `batch_size` gets or puts
/// in a row between depot trips whatever its pattern. 32 keeps one thread's
/// cache small (64 objects) while paying for the depot lock once per 32 ops.
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// Idle objects the depot keeps before it destroys donated batches.
pub const DEFAULT_MAX_IDLE: usize = 1024;

/// How often the working set is measured and what lay unused through two
/// whole intervals is reclaimed: the Solaris kmem reaper's period, and the
/// QEMU 2021 patch's.
pub const DEFAULT_RECLAIM_INTERVAL: Duration = Duration::from_secs(15);

/// How long idle objects are held at `min_idle` after critical memory
/// pressure that persists, at the default reclaim interval: by default the
/// hold is proportional to the interval (2/15 of it, this at 15 s), and only
/// a critical signal that follows another within one interval starts it
/// (see [`Builder::pressure_hold`]). Linux PSI triggers opened without
/// `CAP_SYS_RESOURCE` use windows that are multiples of 2 s and fire at most
/// once per window, so a hold of one window is renewed for as long as the
/// pressure lasts. (Xen's blkback picked 10 ms for a signal that comes every
/// 100 ms; the rule is the same: about one signal period.)
pub const DEFAULT_PRESSURE_HOLD: Duration = Duration::from_secs(2);

/// How far a pool's batch may grow on its own, as a multiple of the batch
/// it starts with: a default batch of 32 grows to at most 256 (see
/// [`Config::max_batch_size`]).
pub const BATCH_GROWTH: usize = 8;

/// The shortest reclaim interval accepted.
pub const MIN_RECLAIM_INTERVAL: Duration = Duration::from_millis(1);

/// The purge delay of a stack pool unless set
/// ([`Builder::purge_delay`]): an idle stack's pages go back to the OS
/// about a second after its last use, a few page faults' worth of work
/// against holding them for a whole reclaim interval.
pub const DEFAULT_PURGE_DELAY: Duration = Duration::from_secs(1);

/// Default most threads running a pool's destroy queue at once
/// ([`Builder::teardown_threads`]): no bound but the number of CPUs.
pub const DEFAULT_TEARDOWN_THREADS: usize = usize::MAX;

/// Default objects per chunk of a pool's destroy queue
/// ([`Builder::teardown_chunk`]).
pub const DEFAULT_TEARDOWN_CHUNK: usize = 256;

/// Default most bytes one system call releases when stacks or regions are
/// torn down (`StackPoolBuilder::release_step`): their pages go back
/// (`madvise`) this many bytes at a time before the emptied range is
/// unmapped, so that no `munmap` frees pages while it holds the process's
/// address-space lock for write. A step frees its pages under the lock
/// for read at most; on Linux 6.16+ under the area's own lock only.
pub const DEFAULT_RELEASE_STEP: usize = 4 << 20;

/// The largest batch accepted: a batch is moved under the depot lock, and
/// bigger ones only make thread caches hoard more.
pub const MAX_BATCH_SIZE: usize = 1 << 16;

/// The most memory one thread's cache in one pool reserves up front: room
/// for two batches of items, `2 * batch_size * size_of::<Item>()` bytes.
///
/// The default batch size shrinks for big items to stay within it (down to
/// 1), and an explicit [`batch_size`](Builder::batch_size) above 1 that would
/// pass it is refused: pool a `Box<T>` to keep big items in bigger batches
/// (only the pointers are reserved then).
pub const MAX_CACHE_BYTES: usize = 4 << 20;

/// The longest reclaim interval accepted (a year): longer ones overflow
/// deadlines, and mean "never", which [`background`](Builder::background)
/// off says better.
pub const MAX_RECLAIM_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest pressure hold accepted (a year): longer ones overflow
/// deadlines.
pub const MAX_PRESSURE_HOLD: Duration = Duration::from_secs(365 * 24 * 3600);

/// Under a `max_live` limit a default batch is at most this fraction of
/// it: two threads' caches, two batches each, then hold at most half of
/// what may exist, and a thread that only gives back (a consumer) never
/// holds so much that the threads that take must steal its cache.
const LIMIT_SHARE: usize = 8;

/// The largest default batch `max_live` leaves room for (see
/// [`LIMIT_SHARE`]).
fn limit_batch(max_live: Option<usize>) -> usize {
    max_live.map_or(usize::MAX, |n| n / LIMIT_SHARE)
}

/// The batch size a pool gets when none is asked for: [`DEFAULT_BATCH_SIZE`],
/// lowered so that two batches of `item_size`-byte items fit in
/// [`MAX_CACHE_BYTES`], to an eighth of `max_live`, and to `max_idle`
/// when they are smaller; at least 1.
fn default_batch_size(item_size: usize, max_live: Option<usize>, max_idle: usize) -> usize {
    let by_bytes = MAX_CACHE_BYTES
        .checked_div(2 * item_size)
        .unwrap_or(DEFAULT_BATCH_SIZE);
    DEFAULT_BATCH_SIZE
        .min(by_bytes)
        .min(limit_batch(max_live))
        .min(max_idle)
        .max(1)
}

/// The most a default batch may grow to (see [`Config::max_batch_size`]):
/// [`BATCH_GROWTH`] times the start, within [`MAX_CACHE_BYTES`] and an
/// eighth of `max_live`, and such that two batches fit in `max_idle`.
fn default_max_batch(
    item_size: usize,
    max_live: Option<usize>,
    max_idle: usize,
    start: usize,
) -> usize {
    let by_bytes = MAX_CACHE_BYTES
        .checked_div(2 * item_size)
        .unwrap_or(usize::MAX);
    (start * BATCH_GROWTH)
        .min(MAX_BATCH_SIZE)
        .min(by_bytes)
        .min(limit_batch(max_live))
        .min(max_idle / 2)
        .max(start)
}

/// Bytes as MiB with one decimal, for messages.
fn mib(bytes: u128) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Validated settings of a pool (see [`Builder`] for what each one means).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub(crate) batch_size: usize,
    /// The most the batch grows to under depot traffic; `batch_size` when
    /// the batch size was set explicitly (then it is fixed).
    pub(crate) max_batch: usize,
    /// The batch size was set explicitly: it never changes.
    pub(crate) batch_fixed: bool,
    pub(crate) max_idle: usize,
    pub(crate) max_live: Option<usize>,
    pub(crate) min_idle: usize,
    pub(crate) reclaim_interval: Duration,
    /// `None`: proportional to the signal (see [`Builder::pressure_hold`]).
    pub(crate) pressure_hold: Option<Duration>,
    pub(crate) background: bool,
    /// Objects a miss creates at once (`create_batch`), `1..=batch_size`.
    pub(crate) burst: usize,
    /// Most threads destroying at once (`teardown_threads`).
    pub(crate) teardown_threads: usize,
    /// Objects per teardown chunk.
    pub(crate) teardown_chunk: usize,
    /// VMAs each object holds (`maps_per_object`); 0: not given.
    pub(crate) maps_per_object: usize,
    /// Idle objects unused this long are purged (`purge_delay`).
    pub(crate) purge_delay: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_batch: DEFAULT_BATCH_SIZE * BATCH_GROWTH,
            batch_fixed: false,
            max_idle: DEFAULT_MAX_IDLE,
            max_live: None,
            min_idle: 0,
            reclaim_interval: DEFAULT_RECLAIM_INTERVAL,
            pressure_hold: None,
            background: true,
            burst: 1,
            teardown_threads: DEFAULT_TEARDOWN_THREADS,
            teardown_chunk: DEFAULT_TEARDOWN_CHUNK,
            maps_per_object: 0,
            purge_delay: None,
        }
    }
}

impl Config {
    /// Objects per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The cap on idle objects held by the depot.
    pub fn max_idle(&self) -> usize {
        self.max_idle
    }

    /// The cap on objects in existence (live or idle), if any.
    pub fn max_live(&self) -> Option<usize> {
        self.max_live
    }

    /// The reserve that reclaim and pressure never go below.
    pub fn min_idle(&self) -> usize {
        self.min_idle
    }

    /// The reclaim interval.
    pub fn reclaim_interval(&self) -> Duration {
        self.reclaim_interval
    }

    /// How long critical pressure holds idle objects at `min_idle`: the
    /// hold set with [`Builder::pressure_hold`], or by default the hold that
    /// persisting pressure gets, [`DEFAULT_PRESSURE_HOLD`] per
    /// [`DEFAULT_RECLAIM_INTERVAL`] of the reclaim interval (a single
    /// critical signal gets none; see [`Builder::pressure_hold`]).
    pub fn pressure_hold(&self) -> Duration {
        self.pressure_hold.unwrap_or_else(|| {
            self.reclaim_interval.mul_f64(
                DEFAULT_PRESSURE_HOLD.as_secs_f64() / DEFAULT_RECLAIM_INTERVAL.as_secs_f64(),
            )
        })
    }

    /// The hold set with [`Builder::pressure_hold`], if one was.
    pub(crate) fn fixed_pressure_hold(&self) -> Option<Duration> {
        self.pressure_hold
    }

    /// Whether the process-wide reclaimer thread looks after this pool.
    pub fn background(&self) -> bool {
        self.background
    }

    /// The most the batch grows to on its own: a pool whose threads visit
    /// the depot for a large share of their gets and puts doubles its batch
    /// (the kmem magazine layer's resizing; a one-way flow, gets on some
    /// threads and puts on others, only while a cache of two doubled
    /// batches is what it moves in 10 ms or less), and halves it
    /// again, down to [`batch_size`](Config::batch_size), when a pass finds
    /// idle objects unused through two intervals. Equal to `batch_size`
    /// (fixed) when [`Builder::batch_size`] was given; otherwise
    /// [`BATCH_GROWTH`] times it, within [`MAX_CACHE_BYTES`], an eighth of
    /// `max_live`, and half of `max_idle`. Under `max_live` the batch may
    /// also shrink below `batch_size` (to `burst` at least): see
    /// [`Builder::batch_size`].
    pub fn max_batch_size(&self) -> usize {
        self.max_batch
    }

    /// Objects a miss creates at once.
    pub fn burst(&self) -> usize {
        self.burst
    }

    /// Most threads that run the pool's destroy queue at once, as
    /// configured (the pool uses at most the number of CPUs of it).
    pub fn teardown_threads(&self) -> usize {
        self.teardown_threads
    }

    /// Most objects destroyed per chunk of the destroy queue.
    pub fn teardown_chunk(&self) -> usize {
        self.teardown_chunk
    }

    /// How long an idle object keeps what a purge releases, if set
    /// ([`Builder::purge_delay`]).
    pub fn purge_delay(&self) -> Option<Duration> {
        self.purge_delay
    }

    /// VMAs each object holds, as given to
    /// [`Builder::maps_per_object`]; 0 if not given.
    pub fn maps_per_object(&self) -> usize {
        self.maps_per_object
    }

    /// The most idle objects the pool can hold when `threads` threads use it:
    /// the depot's cap plus two batches (of the largest batch size) per
    /// thread cache.
    pub fn idle_bound(&self, threads: usize) -> usize {
        threads
            .saturating_mul(2 * self.max_batch)
            .saturating_add(self.max_idle)
    }

    /// Checks the settings for a pool of `item_size`-byte items.
    fn validate(self, item_size: usize) -> Result<Self, ConfigError> {
        let batch = self.batch_size;
        if batch == 0 {
            return Err(ConfigError::new("batch_size", "must be at least 1"));
        }
        if batch > MAX_BATCH_SIZE {
            return Err(ConfigError::new(
                "batch_size",
                format!("is {batch}, the most allowed is {MAX_BATCH_SIZE}"),
            ));
        }
        let reserve = 2 * batch as u128 * item_size as u128;
        if batch > 1 && reserve > MAX_CACHE_BYTES as u128 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "is {batch}: two batches of {batch} items of {item_size} bytes would \
                     reserve {} per thread, more than the {} allowed \
                     (MAX_CACHE_BYTES); use a smaller batch_size, or pool Box<T>",
                    mib(reserve),
                    mib(MAX_CACHE_BYTES as u128),
                ),
            ));
        }
        if self.teardown_threads == 0 {
            return Err(ConfigError::new("teardown_threads", "must be at least 1"));
        }
        if self.teardown_chunk == 0 {
            return Err(ConfigError::new("teardown_chunk", "must be at least 1"));
        }
        if self.burst == 0 || self.burst > batch {
            return Err(ConfigError::new(
                "burst",
                format!(
                    "is {} but must be between 1 and batch_size ({batch})",
                    self.burst
                ),
            ));
        }
        if self.max_idle < batch {
            return Err(ConfigError::new(
                "max_idle",
                format!(
                    "is {} but must hold at least one batch (batch_size = {batch})",
                    self.max_idle
                ),
            ));
        }
        if self.min_idle > self.max_idle {
            return Err(ConfigError::new(
                "min_idle",
                format!(
                    "is {} but the depot holds at most max_idle = {}",
                    self.min_idle, self.max_idle
                ),
            ));
        }
        if self.purge_delay.is_some_and(|d| d < MIN_RECLAIM_INTERVAL) {
            return Err(ConfigError::new(
                "purge_delay",
                format!(
                    "is {:?}, the shortest allowed is {MIN_RECLAIM_INTERVAL:?}",
                    self.purge_delay.unwrap_or_default()
                ),
            ));
        }
        if self.reclaim_interval < MIN_RECLAIM_INTERVAL {
            return Err(ConfigError::new(
                "reclaim_interval",
                format!(
                    "is {:?}, the shortest allowed is {MIN_RECLAIM_INTERVAL:?}",
                    self.reclaim_interval
                ),
            ));
        }
        if self.reclaim_interval > MAX_RECLAIM_INTERVAL {
            return Err(ConfigError::new(
                "reclaim_interval",
                format!(
                    "is {:?}, the longest allowed is {MAX_RECLAIM_INTERVAL:?} (turn \
                     background reclaim off instead)",
                    self.reclaim_interval
                ),
            ));
        }
        if let Some(hold) = self.pressure_hold.filter(|&h| h > MAX_PRESSURE_HOLD) {
            return Err(ConfigError::new(
                "pressure_hold",
                format!("is {hold:?}, the longest allowed is {MAX_PRESSURE_HOLD:?}"),
            ));
        }
        if let Some(limit) = self.max_live {
            if limit == 0 {
                return Err(ConfigError::new(
                    "max_live",
                    "must be at least 1 (leave it unset for no limit)",
                ));
            }
            if batch > limit {
                return Err(ConfigError::new(
                    "batch_size",
                    format!(
                        "is {batch} but at most max_live = {limit} objects can exist: a \
                         batch could never fill"
                    ),
                ));
            }
            if self.min_idle > limit {
                return Err(ConfigError::new(
                    "min_idle",
                    format!(
                        "is {} but at most max_live = {limit} objects can exist",
                        self.min_idle
                    ),
                ));
            }
        }
        Ok(self)
    }
}

/// Builds a [`Pool`] with settings other than the defaults.
///
/// ```
/// let pool = tidepool::Pool::builder(|| Vec::<u8>::with_capacity(1 << 16))
///     .batch_size(8)
///     .max_idle(256)
///     .build()
///     .expect("valid settings");
/// assert_eq!(pool.config().batch_size(), 8);
///
/// let err = tidepool::Pool::builder(|| 0u32).batch_size(0).build().unwrap_err();
/// assert_eq!(err.field(), "batch_size");
/// ```
///
/// Every kind of pool is built by this one type: a [`StackPool`]'s builder
/// is a `Builder` whose "manager" is the stacks' specification
/// ([`StackPoolBuilder`]), so each setting below is declared once.
///
/// [`StackPool`]: crate::stack::StackPool
/// [`StackPoolBuilder`]: crate::stack::StackPoolBuilder
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Clone)]
pub struct Builder<M> {
    /// What makes the objects: a [`Manage`] implementation, or a
    /// specification that becomes one at `build`.
    pub(crate) manager: M,
    pub(crate) config: Config,
    /// Asked for with `batch_size`; derived at `build` otherwise.
    pub(crate) batch_size: Option<usize>,
    /// `max_idle` and `max_live` were set: derived caps leave them.
    pub(crate) max_idle_given: bool,
    pub(crate) maps_per_object: Option<usize>,
    pub(crate) max_live_given: bool,
    pub(crate) clock: Arc<dyn Clock>,
}

impl<M> Builder<M> {
    pub(crate) fn new(manager: M) -> Self {
        Self {
            manager,
            config: Config::default(),
            batch_size: None,
            max_idle_given: false,
            maps_per_object: None,
            max_live_given: false,
            clock: Arc::new(SystemClock),
        }
    }

    /// Objects moved between a thread cache and the depot at a time, at
    /// most [`MAX_BATCH_SIZE`] and at most `max_live`. Each thread caches at
    /// most two batches, and reserves room for them up front: two batches
    /// of items may take at most [`MAX_CACHE_BYTES`] (a batch of 1 is always
    /// allowed).
    ///
    /// Default: [`DEFAULT_BATCH_SIZE`], lowered to fit big items in
    /// [`MAX_CACHE_BYTES`], to an eighth of `max_live`, and to `max_idle`
    /// when those are smaller. Under `max_live` a default batch also stays
    /// small enough for the caches of the threads using the pool to hold at
    /// most half of the limit, and halves whenever a `get` at the limit has
    /// to take another thread's cache. A batch set here is fixed.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = Some(n);
        self
    }

    /// Hard cap on idle objects in the depot (default [`DEFAULT_MAX_IDLE`];
    /// at least `batch_size`). A batch donated beyond it is destroyed. Thread
    /// caches add at most `2 * batch_size` each on top
    /// ([`Config::idle_bound`]).
    pub fn max_idle(mut self, n: usize) -> Self {
        self.config.max_idle = n;
        self.max_idle_given = true;
        self
    }

    /// Cap on objects in existence, live or idle (default: none). A `get` that
    /// would create one more fails with [`Error::Exhausted`](crate::Error::Exhausted)
    /// after destroying nothing; the caller decides whether to drain and retry.
    pub fn max_live(mut self, n: usize) -> Self {
        self.config.max_live = Some(n);
        self.max_live_given = true;
        self
    }

    /// Purges idle objects ([`Manage::purge`]: a
    /// stack's or a memory's pages released, the mapping kept) once they
    /// have sat unused for about `delay` (between one and two delays), in
    /// the depot and in thread caches untouched that long, instead of only
    /// at reclaim passes (default: none; a stack pool's default is
    /// [`DEFAULT_PURGE_DELAY`]). The objects themselves still go by the
    /// working set, over whole reclaim intervals; a purged object is reused
    /// like any other and pays its page faults again. At least
    /// [`MIN_RECLAIM_INTERVAL`]; `Duration::MAX` is the same as none.
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = tidepool::Pool::builder(|| vec![0u8; 1 << 20])
    ///     .purge_delay(Duration::from_secs(1))
    ///     .build()?;
    /// assert_eq!(pool.config().purge_delay(), Some(Duration::from_secs(1)));
    /// # Ok::<(), tidepool::ConfigError>(())
    /// ```
    pub fn purge_delay(mut self, delay: Duration) -> Self {
        self.config.purge_delay = Some(delay);
        self
    }

    /// Kernel memory areas (VMAs) each object holds, for objects that own
    /// mappings (a coroutine with a guarded stack holds two). On Linux and
    /// Android the pool then derives its caps from `vm.max_map_count`, as
    /// a stack pool does: `max_live` (unless set) and `max_idle` (at most)
    /// become `(vm.max_map_count - RESERVED_VMAS) / n`, so the pool never
    /// drives the process into the map count, where `mmap` fails. Elsewhere
    /// (no such count) it changes nothing. At least 1. A `max_idle` or
    /// `max_live` set explicitly is kept as given.
    ///
    /// ```
    /// let pool = tidepool::Pool::builder(|| 0u64).maps_per_object(2).build()?;
    /// if cfg!(target_os = "linux") {
    ///     assert!(pool.config().max_live().is_some());
    /// }
    /// # Ok::<(), tidepool::ConfigError>(())
    /// ```
    pub fn maps_per_object(mut self, n: usize) -> Self {
        self.maps_per_object = Some(n);
        self
    }

    /// A reserve of idle objects (default 0) that reclaim and memory
    /// pressure never go below, like the kernel's `mempool` `min_nr`; at most
    /// `max_idle` and at most `max_live`. Fill it with [`Pool::prefill`](crate::Pool::prefill).
    pub fn min_idle(mut self, n: usize) -> Self {
        self.config.min_idle = n;
        self
    }

    /// How often the pool measures its working set (default
    /// [`DEFAULT_RECLAIM_INTERVAL`], at least [`MIN_RECLAIM_INTERVAL`], at
    /// most [`MAX_RECLAIM_INTERVAL`]).
    /// Idle objects that sat unused through two whole intervals are
    /// destroyed; ones unused through one are purged
    /// ([`Manage::purge`]); a thread cache unused for a
    /// whole interval is taken back to the depot, where its objects, idle
    /// through that interval already, are destroyed at the next boundary if
    /// nothing uses them; a busy one gives back (trims) what it held
    /// through two intervals without needing it, and those go the same way.
    pub fn reclaim_interval(mut self, interval: Duration) -> Self {
        self.config.reclaim_interval = interval;
        self
    }

    /// How long critical memory pressure holds the depot at `min_idle`
    /// after each critical signal (at most [`MAX_PRESSURE_HOLD`]); thread
    /// caches keep working, at most two batches each.
    ///
    /// Unset (the default), the hold is proportional to the signal: a
    /// critical signal with no other in the reclaim interval before it
    /// drains the pool and holds nothing (the load re-creates its working
    /// set once, and the pool does not grow back beyond it: reclaim trims
    /// the rest); one that follows another within an interval, i.e. pressure
    /// that persists, holds for [`DEFAULT_PRESSURE_HOLD`] per
    /// [`DEFAULT_RECLAIM_INTERVAL`] of the interval (2 s at 15 s), renewed by
    /// each further signal. A hold makes every batch returned to the depot
    /// beyond `min_idle` a destroy, and every refill a create: measured in
    /// the lab's `fio-pressure`, a one-off signal with a hold re-created
    /// about five times as many stacks as one without.
    pub fn pressure_hold(mut self, hold: Duration) -> Self {
        self.config.pressure_hold = Some(hold);
        self
    }

    /// Whether the process-wide reclaimer thread looks after this pool
    /// (default `true`; the first pool with it on starts the thread): it
    /// runs the reclaim intervals of pools nobody touches, takes back idle
    /// thread caches, and delivers memory-pressure signals. With `false`
    /// no thread is started for this pool; reclaim runs when threads visit
    /// the depot and when you call [`Pool::reclaim`](crate::Pool::reclaim),
    /// and pressure only through [`Pool::pressure`](crate::Pool::pressure).
    /// This is the setting for programs that manage their own threads (see
    /// [`Pool::new`](crate::Pool::new)).
    pub fn background(mut self, on: bool) -> Self {
        self.config.background = on;
        self
    }

    /// Objects a miss creates at once (default 1, at most `batch_size`):
    /// with `n > 1`, a `get` that finds the thread cache and the depot
    /// empty asks the manager's [`create_batch`](crate::Manage::create_batch)
    /// for up to `n` objects (never more than `max_live` leaves room for),
    /// returns one and keeps the rest in the thread's cache: the seed's
    /// burst allocation (DragonFly's zone allocator grows 32 pages at a
    /// time). Pays when the manager shares work across a batch (one `mmap`
    /// and one lock for a burst of stacks); costs memory for objects made
    /// before they are needed. `misses` counts the `get`, `created` each
    /// object.
    pub fn burst(mut self, n: usize) -> Self {
        self.config.burst = n;
        self
    }

    /// Most threads that destroy this pool's objects at once (default
    /// [`DEFAULT_TEARDOWN_THREADS`]; the pool uses at most the number of
    /// CPUs). Teardowns the pool decides (reclaim, pressure, a donation
    /// past `max_idle`, [`drain`](crate::Pool::drain), a thread's exit, the
    /// pool's drop) go to a per-pool destroy queue, run in chunks outside
    /// every lock by at most this many threads; a thread that finds them
    /// all busy leaves its work queued and goes on, so a mass release
    /// never has every thread tearing down at once (DragonFly's 2017 fix
    /// for mass pipe teardown: at most `ncpus` at once, no wake-up storm).
    pub fn teardown_threads(mut self, n: usize) -> Self {
        self.config.teardown_threads = n;
        self
    }

    /// Most objects one chunk of the destroy queue holds (default
    /// [`DEFAULT_TEARDOWN_CHUNK`]; whole batches, so a chunk may hold one
    /// batch more than this): the most a [`drain`](crate::Pool::drain), a
    /// thread's exit or the pool's drop destroys before returning, the
    /// rest being left to the reclaimer thread or the next callers.
    pub fn teardown_chunk(mut self, n: usize) -> Self {
        self.config.teardown_chunk = n;
        self
    }

    /// The clock for reclaim intervals and pressure holds (default
    /// [`SystemClock`]); tests pass a
    /// [`ManualClock`](crate::reclaim::ManualClock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The same settings around another manager.
    pub(crate) fn with_manager<N>(self, manager: N) -> Builder<N> {
        Builder {
            manager,
            config: self.config,
            batch_size: self.batch_size,
            max_idle_given: self.max_idle_given,
            maps_per_object: self.maps_per_object,
            max_live_given: self.max_live_given,
            clock: self.clock,
        }
    }
}

impl<M: Manage> Builder<M> {
    /// Checks the settings and builds the pool.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first field whose value cannot work.
    pub fn build(self) -> Result<Pool<M>, ConfigError> {
        let item_size = std::mem::size_of::<M::Item>();
        let mut config = self.config;
        if config.purge_delay == Some(Duration::MAX) {
            config.purge_delay = None;
        }
        if let Some(maps) = self.maps_per_object {
            if maps == 0 {
                return Err(ConfigError::new("maps_per_object", "must be at least 1"));
            }
            config.maps_per_object = maps;
            #[cfg(unix)]
            if let Some(fit) = crate::os::map_count::objects_that_fit(maps) {
                if !self.max_live_given {
                    config.max_live = Some(fit);
                }
                if !self.max_idle_given {
                    config.max_idle = config.max_idle.min(fit);
                }
            }
        }
        // A default batch holds a burst (within `max_live`: a burst past it
        // is refused below, naming `burst`).
        let burst = config.burst.min(config.max_live.unwrap_or(usize::MAX));
        config.batch_size = self.batch_size.unwrap_or_else(|| {
            default_batch_size(item_size, config.max_live, config.max_idle).max(burst)
        });
        config.batch_fixed = self.batch_size.is_some();
        config.max_batch = match self.batch_size {
            Some(n) => n,
            None => default_max_batch(
                item_size,
                config.max_live,
                config.max_idle,
                config.batch_size,
            ),
        };
        let config = config.validate(item_size)?;
        Ok(Pool::from_parts(self.manager, config, self.clock))
    }
}

impl<M> fmt::Debug for Builder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

/// A setting that cannot work, found by [`Builder::build`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    reason: String,
}

impl ConfigError {
    /// An error naming `field` (a builder method or setting) and why it
    /// cannot work: for crates that build tidepool pools behind settings of
    /// their own and report them the same way.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }

    /// The builder method (and field) at fault, e.g. `"max_idle"`.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What is wrong with its value.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid tidepool setting `{}`: {}",
            self.field, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn build(c: Config) -> Result<Config, ConfigError> {
        c.validate(8)
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(build(Config::default()), Ok(Config::default()));
    }

    #[test]
    fn each_bad_field_is_named() {
        let zero_batch = Config {
            batch_size: 0,
            ..Config::default()
        };
        assert_eq!(build(zero_batch).unwrap_err().field(), "batch_size");

        let huge_batch = Config {
            batch_size: MAX_BATCH_SIZE + 1,
            max_idle: usize::MAX,
            ..Config::default()
        };
        assert_eq!(build(huge_batch).unwrap_err().field(), "batch_size");

        let small_idle = Config {
            batch_size: 16,
            max_idle: 15,
            ..Config::default()
        };
        let err = build(small_idle).unwrap_err();
        assert_eq!(err.field(), "max_idle");
        assert!(err.to_string().contains("`max_idle`"), "{err}");
        assert!(err.to_string().contains("15"), "{err}");

        let big_floor = Config {
            min_idle: DEFAULT_MAX_IDLE + 1,
            ..Config::default()
        };
        assert_eq!(build(big_floor).unwrap_err().field(), "min_idle");

        let zero_interval = Config {
            reclaim_interval: Duration::ZERO,
            ..Config::default()
        };
        assert_eq!(
            build(zero_interval).unwrap_err().field(),
            "reclaim_interval"
        );

        let zero_live = Config {
            max_live: Some(0),
            ..Config::default()
        };
        assert_eq!(build(zero_live).unwrap_err().field(), "max_live");
    }

    #[test]
    fn the_default_batch_fits_big_items_and_small_caps() {
        assert_eq!(default_batch_size(8, None, 1024), DEFAULT_BATCH_SIZE);
        assert_eq!(default_batch_size(0, None, 1024), DEFAULT_BATCH_SIZE);
        assert_eq!(default_batch_size(1 << 20, None, 1024), 2);
        assert_eq!(default_batch_size(64 << 20, None, 1024), 1);
        // An eighth of `max_live`, at least 1.
        assert_eq!(default_batch_size(8, Some(3), 1024), 1);
        assert_eq!(default_batch_size(8, Some(64), 1024), 8);
        assert_eq!(
            default_batch_size(8, Some(1 << 20), 1024),
            DEFAULT_BATCH_SIZE
        );
        assert_eq!(default_max_batch(8, Some(64), 1024, 8), 8);
        assert_eq!(default_max_batch(8, Some(1024), 1024, 32), 128);
        assert_eq!(default_batch_size(8, None, 5), 5);
        assert_eq!(default_batch_size(8, None, 0), 1);
        for size in [1, 100, 4096, 1 << 16, 1 << 20, 3 << 20] {
            let batch = default_batch_size(size, None, 1024);
            let c = Config {
                batch_size: batch,
                ..Config::default()
            };
            assert!(c.validate(size).is_ok(), "size {size}, batch {batch}");
        }
    }

    #[test]
    fn a_reserve_past_the_byte_bound_is_refused_but_a_batch_of_one_is_not() {
        let c = |batch_size| Config {
            batch_size,
            ..Config::default()
        };
        let err = c(3).validate(1 << 20).unwrap_err();
        assert_eq!(err.field(), "batch_size");
        assert!(err.reason().contains("6.0 MiB"), "{err}");
        assert!(c(2).validate(1 << 20).is_ok());
        assert!(c(1).validate(100 << 20).is_ok());
    }

    #[test]
    fn durations_past_a_year_are_refused() {
        let long = Config {
            reclaim_interval: MAX_RECLAIM_INTERVAL + Duration::from_nanos(1),
            ..Config::default()
        };
        assert_eq!(build(long).unwrap_err().field(), "reclaim_interval");
        let hold = Config {
            pressure_hold: Some(Duration::MAX),
            ..Config::default()
        };
        assert_eq!(build(hold).unwrap_err().field(), "pressure_hold");
        let edge = Config {
            reclaim_interval: MAX_RECLAIM_INTERVAL,
            pressure_hold: Some(MAX_PRESSURE_HOLD),
            ..Config::default()
        };
        assert!(build(edge).is_ok());
    }

    #[test]
    fn idle_bound_counts_two_batches_per_thread() {
        let c = Config {
            batch_size: 4,
            max_batch: 4,
            max_idle: 10,
            ..Config::default()
        };
        assert_eq!(c.idle_bound(0), 10);
        assert_eq!(c.idle_bound(3), 10 + 3 * 8);
    }

    #[test]
    fn idle_bound_counts_the_largest_batch_and_an_explicit_batch_is_fixed() {
        let pool = crate::Pool::builder(|| 0u64)
            .max_idle(1000)
            .build()
            .unwrap();
        let c = pool.config();
        assert_eq!(c.batch_size(), DEFAULT_BATCH_SIZE);
        assert_eq!(c.max_batch_size(), DEFAULT_BATCH_SIZE * BATCH_GROWTH);
        assert_eq!(c.idle_bound(2), 1000 + 2 * 2 * c.max_batch_size());
        // Two batches of the largest size fit in `max_idle`.
        let small = crate::Pool::builder(|| 0u64).max_idle(100).build().unwrap();
        assert_eq!(small.config().max_batch_size(), 50);
        let fixed = crate::Pool::builder(|| 0u64)
            .batch_size(16)
            .build()
            .unwrap();
        assert_eq!(fixed.config().max_batch_size(), 16);
    }
}
