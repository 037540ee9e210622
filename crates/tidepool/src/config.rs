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
/// pressure. Linux PSI triggers opened without `CAP_SYS_RESOURCE` use windows
/// that are multiples of 2 s and fire at most once per window, so a hold of
/// one window is renewed for as long as the pressure lasts, and a single
/// spike costs at most 2 s of reduced caching. (Xen's blkback picked 10 ms
/// for a signal that comes every 100 ms; the rule is the same: about one
/// signal period.)
pub const DEFAULT_PRESSURE_HOLD: Duration = Duration::from_secs(2);

/// The shortest reclaim interval accepted.
pub const MIN_RECLAIM_INTERVAL: Duration = Duration::from_millis(1);

/// The largest batch accepted: a batch is moved under the depot lock, and
/// bigger ones only make thread caches hoard more.
pub const MAX_BATCH_SIZE: usize = 1 << 16;

/// Validated settings of a pool (see [`Builder`] for what each one means).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub(crate) batch_size: usize,
    pub(crate) max_idle: usize,
    pub(crate) max_live: Option<usize>,
    pub(crate) min_idle: usize,
    pub(crate) reclaim_interval: Duration,
    pub(crate) pressure_hold: Duration,
    pub(crate) background: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_idle: DEFAULT_MAX_IDLE,
            max_live: None,
            min_idle: 0,
            reclaim_interval: DEFAULT_RECLAIM_INTERVAL,
            pressure_hold: DEFAULT_PRESSURE_HOLD,
            background: true,
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

    /// How long critical pressure holds idle objects at `min_idle`.
    pub fn pressure_hold(&self) -> Duration {
        self.pressure_hold
    }

    /// Whether the process-wide reclaimer thread looks after this pool.
    pub fn background(&self) -> bool {
        self.background
    }

    /// The most idle objects the pool can hold when `threads` threads use it:
    /// the depot's cap plus two batches per thread cache.
    pub fn idle_bound(&self, threads: usize) -> usize {
        threads
            .saturating_mul(2 * self.batch_size)
            .saturating_add(self.max_idle)
    }

    fn validate(self) -> Result<Self, ConfigError> {
        if self.batch_size == 0 {
            return Err(ConfigError::new("batch_size", "must be at least 1"));
        }
        if self.batch_size > MAX_BATCH_SIZE {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "is {}, the most allowed is {MAX_BATCH_SIZE}",
                    self.batch_size
                ),
            ));
        }
        if self.max_idle < self.batch_size {
            return Err(ConfigError::new(
                "max_idle",
                format!(
                    "is {} but must hold at least one batch (batch_size = {})",
                    self.max_idle, self.batch_size
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
        if self.reclaim_interval < MIN_RECLAIM_INTERVAL {
            return Err(ConfigError::new(
                "reclaim_interval",
                format!(
                    "is {:?}, the shortest allowed is {MIN_RECLAIM_INTERVAL:?}",
                    self.reclaim_interval
                ),
            ));
        }
        if self.max_live == Some(0) {
            return Err(ConfigError::new(
                "max_live",
                "must be at least 1 (leave it unset for no limit)",
            ));
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
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder<M> {
    manager: M,
    config: Config,
    clock: Arc<dyn Clock>,
}

impl<M: Manage> Builder<M> {
    pub(crate) fn new(manager: M) -> Self {
        Self {
            manager,
            config: Config::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Objects moved between a thread cache and the depot at a time
    /// (default [`DEFAULT_BATCH_SIZE`], at most [`MAX_BATCH_SIZE`]). Each
    /// thread caches at most two batches.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.config.batch_size = n;
        self
    }

    /// Hard cap on idle objects in the depot (default [`DEFAULT_MAX_IDLE`];
    /// at least `batch_size`). A batch donated beyond it is destroyed. Thread
    /// caches add at most `2 * batch_size` each on top
    /// ([`Config::idle_bound`]).
    pub fn max_idle(mut self, n: usize) -> Self {
        self.config.max_idle = n;
        self
    }

    /// Cap on objects in existence, live or idle (default: none). A `get` that
    /// would create one more fails with [`Error::Exhausted`](crate::Error::Exhausted)
    /// after destroying nothing; the caller decides whether to drain and retry.
    pub fn max_live(mut self, n: usize) -> Self {
        self.config.max_live = Some(n);
        self
    }

    /// A reserve of idle objects (default 0) that reclaim and memory
    /// pressure never go below, like the kernel's `mempool` `min_nr`; at most
    /// `max_idle`. Fill it with [`Pool::prefill`](crate::Pool::prefill).
    pub fn min_idle(mut self, n: usize) -> Self {
        self.config.min_idle = n;
        self
    }

    /// How often the pool measures its working set (default
    /// [`DEFAULT_RECLAIM_INTERVAL`], at least [`MIN_RECLAIM_INTERVAL`]).
    /// Idle objects that sat unused through two whole intervals are
    /// destroyed; ones unused through one are purged
    /// ([`Manage::purge`](crate::Manage::purge)); a thread cache unused for a
    /// whole interval is taken back to the depot.
    pub fn reclaim_interval(mut self, interval: Duration) -> Self {
        self.config.reclaim_interval = interval;
        self
    }

    /// How long critical memory pressure holds the depot at `min_idle`
    /// (default [`DEFAULT_PRESSURE_HOLD`]); thread caches keep working, at
    /// most two batches each.
    pub fn pressure_hold(mut self, hold: Duration) -> Self {
        self.config.pressure_hold = hold;
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

    /// The clock for reclaim intervals and pressure holds (default
    /// [`SystemClock`]); tests pass a
    /// [`ManualClock`](crate::reclaim::ManualClock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Checks the settings and builds the pool.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first field whose value cannot work.
    pub fn build(self) -> Result<Pool<M>, ConfigError> {
        let config = self.config.validate()?;
        Ok(Pool::from_parts(self.manager, config, self.clock))
    }
}

impl<M> fmt::Debug for Builder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
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
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> Self {
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
        c.validate()
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
    fn idle_bound_counts_two_batches_per_thread() {
        let c = Config {
            batch_size: 4,
            max_idle: 10,
            ..Config::default()
        };
        assert_eq!(c.idle_bound(0), 10);
        assert_eq!(c.idle_bound(3), 10 + 3 * 8);
    }
}
