//! Settings of a [`StackPool`] and where their defaults come from.

use std::sync::Arc;
use std::time::Duration;

use crate::os::page_size;
use crate::stack::{registry, GuardMode, MapBudget, StackManager, StackPool};
use crate::{ConfigError, Pool, DEFAULT_BATCH_SIZE, DEFAULT_MAX_IDLE};

/// A cap: the default (derived from the map-count budget), a number, or
/// none at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cap {
    FromBudget,
    At(usize),
    Off,
}

/// Builds a [`StackPool`]; from [`StackPool::builder`].
///
/// Defaults:
///
/// | setting | default |
/// |---|---|
/// | `max_live` | the map-count budget, [`MapBudget::stacks_with`] the guard mode: 60530 stacks for `vm.max_map_count` = 65530 with guard markers (one VMA per stack at worst), 30265 with `PROT_NONE` guards (two); none without a budget |
/// | `guard_mode` | [`GuardMode::Auto`]: markers on Linux 6.13+, `PROT_NONE` pages elsewhere |
/// | `max_idle` | `max_live` (as QEMU caps its global pool), or the budget if `max_live` is off; [`DEFAULT_MAX_IDLE`] without either |
/// | `batch_size` | [`DEFAULT_BATCH_SIZE`], lowered to `max_idle` or an eighth of `max_live` if smaller; grows with depot traffic up to [`Config::max_batch_size`](crate::Config::max_batch_size) unless set |
/// | `keep_resident` | 0: a purge releases every page |
/// | budget | Linux and Android: read from `/proc/sys/vm/max_map_count` when `build` runs (`MapBudget::from_os`); other systems have no map count, so none unless given ([`map_budget`](StackPoolBuilder::map_budget)) |
///
/// ```
/// use tidepool::stack::{GuardMode, MapBudget, StackPool};
///
/// let pool = StackPool::builder(60_000) // rounded up to 15 pages of 4 KiB
///     .keep_resident(8 * 1024)
///     .map_budget(MapBudget::with_max_map_count(7000))
///     .guard_mode(GuardMode::Protect) // two VMAs per stack
///     .build()?;
/// assert_eq!(pool.manager().usable_size() % 4096, 0);
/// assert_eq!(pool.config().max_live(), Some(1000)); // (7000 - 5000) / 2
///
/// let err = StackPool::builder(0).build().unwrap_err();
/// assert_eq!(err.field(), "usable_size");
/// # Ok::<(), tidepool::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct StackPoolBuilder {
    usable_size: usize,
    keep_resident: usize,
    batch_size: Option<usize>,
    max_idle: Cap,
    max_live: Cap,
    budget: Option<MapBudget>,
    min_idle: Option<usize>,
    reclaim_interval: Option<Duration>,
    pressure_hold: Option<Duration>,
    background: Option<bool>,
    burst: Option<usize>,
    teardown_threads: Option<usize>,
    teardown_chunk: Option<usize>,
    purge_delay: Duration,
    guard_mode: GuardMode,
}

impl StackPoolBuilder {
    pub(crate) fn new(usable_size: usize) -> Self {
        Self {
            usable_size,
            keep_resident: 0,
            batch_size: None,
            max_idle: Cap::FromBudget,
            max_live: Cap::FromBudget,
            budget: None,
            min_idle: None,
            reclaim_interval: None,
            pressure_hold: None,
            background: None,
            burst: None,
            teardown_threads: None,
            teardown_chunk: None,
            purge_delay: crate::DEFAULT_PURGE_DELAY,
            guard_mode: GuardMode::Auto,
        }
    }

    /// How guard pages are made (see [`GuardMode`]): by default markers
    /// where the kernel has them (Linux 6.13+), `PROT_NONE` pages
    /// elsewhere. [`GuardMode::Protect`] forces the classic way, e.g. to
    /// compare the two.
    pub fn guard_mode(mut self, mode: GuardMode) -> Self {
        self.guard_mode = mode;
        self
    }

    /// Stacks kept idle whatever reclaim and memory pressure say (see
    /// [`Builder::min_idle`](crate::Builder::min_idle)); fill them with
    /// [`StackPool::prefill`].
    pub fn min_idle(mut self, n: usize) -> Self {
        self.min_idle = Some(n);
        self
    }

    /// The reclaim interval (see
    /// [`Builder::reclaim_interval`](crate::Builder::reclaim_interval)):
    /// stacks idle in the depot for one interval are purged, for two are
    /// unmapped.
    pub fn reclaim_interval(mut self, interval: Duration) -> Self {
        self.reclaim_interval = Some(interval);
        self
    }

    /// How long an idle stack keeps its pages (see
    /// [`Builder::purge_delay`](crate::Builder::purge_delay); default
    /// [`DEFAULT_PURGE_DELAY`](crate::DEFAULT_PURGE_DELAY), and
    /// `Duration::MAX` purges at reclaim passes only).
    pub fn purge_delay(mut self, delay: Duration) -> Self {
        self.purge_delay = delay;
        self
    }

    /// How long critical memory pressure holds idle stacks at `min_idle`
    /// (see [`Builder::pressure_hold`](crate::Builder::pressure_hold)).
    pub fn pressure_hold(mut self, hold: Duration) -> Self {
        self.pressure_hold = Some(hold);
        self
    }

    /// Whether the process-wide reclaimer thread looks after this pool (see
    /// [`Builder::background`](crate::Builder::background)). With `false`,
    /// call [`StackPool::reclaim`] from a thread of your own.
    pub fn background(mut self, on: bool) -> Self {
        self.background = Some(on);
        self
    }

    /// Stacks a miss carves at once (see
    /// [`Builder::burst`](crate::Builder::burst); default 1, at most
    /// `batch_size`): one `create_batch` call, so one lock and, for a fresh
    /// slab, one `mmap` for the whole burst. Never past `max_live`, so a
    /// burst stays inside the map-count budget.
    pub fn burst(mut self, n: usize) -> Self {
        self.burst = Some(n);
        self
    }

    /// Most threads that unmap this pool's stacks at once (see
    /// [`Builder::teardown_threads`](crate::Builder::teardown_threads);
    /// default: the number of CPUs).
    pub fn teardown_threads(mut self, n: usize) -> Self {
        self.teardown_threads = Some(n);
        self
    }

    /// Most stacks one chunk of the destroy queue holds (see
    /// [`Builder::teardown_chunk`](crate::Builder::teardown_chunk)).
    pub fn teardown_chunk(mut self, n: usize) -> Self {
        self.teardown_chunk = Some(n);
        self
    }

    /// Bytes at the top of each stack that a purge leaves resident, rounded
    /// up to whole pages (wasmtime's `async_stack_keep_resident`): the
    /// frames nearest the top are the ones every coroutine touches first,
    /// so keeping them saves a page fault or two on reuse. More than the
    /// stack keeps all of it (a purge then releases nothing).
    pub fn keep_resident(mut self, bytes: usize) -> Self {
        self.keep_resident = bytes;
        self
    }

    /// Stacks moved between a thread cache and the depot at a time; each
    /// thread caches at most two batches.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = Some(n);
        self
    }

    /// Cap on idle stacks in the depot (see
    /// [`Builder::max_idle`](crate::Builder::max_idle)).
    pub fn max_idle(mut self, n: usize) -> Self {
        self.max_idle = Cap::At(n);
        self
    }

    /// Cap on stacks mapped by this pool, live or idle, instead of the
    /// map-count budget. Past it, [`StackPool::get`] fails with
    /// [`StackError::Exhausted`](super::StackError::Exhausted).
    pub fn max_live(mut self, n: usize) -> Self {
        self.max_live = Cap::At(n);
        self
    }

    /// Turns both caps off: no `max_live`, no practical `max_idle`. The pool
    /// then maps stacks until the kernel refuses, which [`StackPool::get`]
    /// reports as [`StackError::MapCountReached`](super::StackError::MapCountReached)
    /// rather than aborting. For tests and for processes that budget VMAs
    /// themselves.
    pub fn unbounded(mut self) -> Self {
        self.max_live = Cap::Off;
        // Half the range, not `usize::MAX`: no pool holds that many stacks
        // (the address space would not fit them), and sums with the thread
        // caches' share (`Config::idle_bound`) cannot overflow.
        self.max_idle = Cap::At(usize::MAX / 2);
        self
    }

    /// Uses `budget` instead of reading the map count from the OS, e.g. to
    /// give this pool a share of the process's budget
    /// ([`MapBudget::with_max_map_count`]). On systems without a map count
    /// this is the only way to give a pool one.
    pub fn map_budget(mut self, budget: MapBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Checks the settings, reads the map count if needed, and builds the
    /// pool.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting at fault: a `usable_size` of 0
    /// or too large to map, a map count that leaves no room for stacks
    /// (`max_live`, when it comes from the budget), or what
    /// [`Builder::build`](crate::Builder::build) refuses.
    pub fn build(self) -> Result<StackPool, ConfigError> {
        let page = page_size();
        if self.usable_size == 0 {
            return Err(ConfigError::new(
                "usable_size",
                "must be at least 1 byte (it is rounded up to whole pages)",
            ));
        }
        let usable_size = self
            .usable_size
            .checked_next_multiple_of(page)
            .filter(|&size| size <= isize::MAX as usize - page)
            .ok_or_else(|| {
                ConfigError::new(
                    "usable_size",
                    format!("is {}, too large to map", self.usable_size),
                )
            })?;
        let keep_resident = self.keep_resident.min(usable_size).next_multiple_of(page);

        let guard_mode = self.guard_mode.resolve();
        if guard_mode == GuardMode::Markers && !GuardMode::markers_supported() {
            return Err(ConfigError::new(
                "guard_mode",
                "is Markers, but this kernel has no guard-page markers \
                 (MADV_GUARD_INSTALL, Linux 6.13+); use Auto or Protect",
            ));
        }
        // None where the OS has no map count (not Linux) and none was given.
        let budget = self.budget.or_else(MapBudget::of_os);
        let Caps {
            max_live,
            max_idle,
            batch_size,
        } = self.caps(budget, guard_mode)?;

        let manager = StackManager::new(
            page,
            usable_size,
            keep_resident,
            budget,
            max_live,
            guard_mode == GuardMode::Markers,
        );
        let mut builder = Pool::builder(manager).max_idle(max_idle);
        // An explicit batch size is fixed; the default one (the same
        // figure) grows with depot traffic (`Config::max_batch_size`).
        if self.batch_size.is_some() {
            builder = builder.batch_size(batch_size);
        }
        if let Some(n) = max_live {
            builder = builder.max_live(n);
        }
        if let Some(n) = self.min_idle {
            builder = builder.min_idle(n);
        }
        if let Some(interval) = self.reclaim_interval {
            builder = builder.reclaim_interval(interval);
        }
        if let Some(hold) = self.pressure_hold {
            builder = builder.pressure_hold(hold);
        }
        if let Some(on) = self.background {
            builder = builder.background(on);
        }
        if let Some(n) = self.burst {
            builder = builder.burst(n);
        }
        if let Some(n) = self.teardown_threads {
            builder = builder.teardown_threads(n);
        }
        if let Some(n) = self.teardown_chunk {
            builder = builder.teardown_chunk(n);
        }
        if self.purge_delay != Duration::MAX {
            builder = builder.purge_delay(self.purge_delay);
        }
        let pool = Arc::new(builder.build()?);
        // Before any stack is lent: lent stacks find their pool here.
        pool.manager().slabs().set_pool(pool.shared_ptr().cast());
        registry::register(&pool);
        Ok(StackPool::from_pool(pool))
    }

    /// The caps and batch size, from the settings and the budget (`None`
    /// where the OS has no map count and none was given).
    fn caps(&self, budget: Option<MapBudget>, mode: GuardMode) -> Result<Caps, ConfigError> {
        let stacks = |b: MapBudget| b.stacks_with(mode);
        let max_live = match (self.max_live, budget) {
            (Cap::At(n), _) => Some(n),
            (Cap::Off, _) | (Cap::FromBudget, None) => None,
            (Cap::FromBudget, Some(budget)) if stacks(budget) == 0 => {
                return Err(ConfigError::new(
                    "max_live",
                    format!(
                        "the map-count budget leaves no room for stacks ({budget}); \
                         set max_live and max_idle explicitly"
                    ),
                ))
            }
            (Cap::FromBudget, Some(budget)) => Some(stacks(budget)),
        };
        let derived_idle = max_live
            .or(budget.map(stacks))
            .unwrap_or(DEFAULT_MAX_IDLE)
            .max(1);
        let batch_size = self
            .batch_size
            .unwrap_or(DEFAULT_BATCH_SIZE.min(derived_idle));
        let max_idle = match self.max_idle {
            Cap::At(n) => n,
            // A cap above `max_live` is harmless (`max_live` bounds idle
            // stacks too) and keeps an explicit `batch_size` valid.
            Cap::FromBudget | Cap::Off => derived_idle.max(batch_size),
        };
        Ok(Caps {
            max_live,
            max_idle,
            batch_size,
        })
    }
}

/// What [`StackPoolBuilder::caps`] settles on.
#[derive(Debug, PartialEq, Eq)]
struct Caps {
    max_live: Option<usize>,
    max_idle: usize,
    batch_size: usize,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn caps_come_from_the_budget_when_there_is_one() {
        let b = StackPoolBuilder::new(4096);
        let budget = Some(MapBudget::with_max_map_count(65530));
        let caps = b.caps(budget, GuardMode::Protect).unwrap();
        assert_eq!(
            caps,
            Caps {
                max_live: Some(30265),
                max_idle: 30265,
                batch_size: DEFAULT_BATCH_SIZE
            }
        );
        // One VMA per stack at worst with markers.
        let caps = b.caps(budget, GuardMode::Markers).unwrap();
        assert_eq!((caps.max_live, caps.max_idle), (Some(60530), 60530));
        for mode in [GuardMode::Protect, GuardMode::Markers] {
            let err = b
                .caps(Some(MapBudget::with_max_map_count(4000)), mode)
                .unwrap_err();
            assert_eq!(err.field(), "max_live");
        }
    }

    /// What every pool gets on systems without a map count (not Linux),
    /// checked here on any OS.
    #[test]
    fn without_a_budget_there_is_no_max_live_and_the_generic_max_idle() {
        let b = StackPoolBuilder::new(4096);
        assert_eq!(
            b.caps(None, GuardMode::Protect).unwrap(),
            Caps {
                max_live: None,
                max_idle: DEFAULT_MAX_IDLE,
                batch_size: DEFAULT_BATCH_SIZE
            }
        );
        let b = b.max_live(10).batch_size(2);
        assert_eq!(
            b.caps(None, GuardMode::Protect).unwrap(),
            Caps {
                max_live: Some(10),
                max_idle: 10,
                batch_size: 2
            }
        );
    }
}
