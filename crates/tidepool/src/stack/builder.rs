//! Settings of a [`StackPool`] and where their defaults come from.

use std::sync::Arc;

use crate::os::page_size;
use crate::stack::{registry, GuardMode, MapBudget, StackManager, StackPool};
use crate::{Builder, ConfigError, DEFAULT_BATCH_SIZE, DEFAULT_MAX_IDLE, DEFAULT_RELEASE_STEP};

/// Builds a [`StackPool`]; from [`StackPool::builder`]. It is the core
/// [`Builder`] over a [`StackSpec`]: the settings every pool has
/// ([`max_idle`](Builder::max_idle), [`min_idle`](Builder::min_idle),
/// [`reclaim_interval`](Builder::reclaim_interval),
/// [`purge_delay`](Builder::purge_delay), [`burst`](Builder::burst), ...)
/// are the core builder's own, with the defaults below; the ones here
/// ([`guard_mode`](Builder::guard_mode),
/// [`keep_resident`](Builder::keep_resident),
/// [`map_budget`](Builder::map_budget), [`unbounded`](Builder::unbounded))
/// are a stack pool's only.
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
/// | `release_step` | [`DEFAULT_RELEASE_STEP`]: a teardown releases pages a step at a time, then unmaps emptied slabs |
/// | `purge_delay` | [`DEFAULT_PURGE_DELAY`](crate::DEFAULT_PURGE_DELAY) |
/// | budget | Linux and Android: read from `/proc/sys/vm/max_map_count` when `build` runs (`MapBudget::from_os`); other systems have no map count, so none unless given ([`map_budget`](Builder::map_budget)) |
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
pub type StackPoolBuilder = Builder<StackSpec>;

/// What a [`StackPoolBuilder`] knows of the stacks themselves; it becomes
/// the pool's [`StackManager`] at [`build`](Builder::build).
#[derive(Clone, Debug)]
pub struct StackSpec {
    usable_size: usize,
    keep_resident: usize,
    budget: Option<MapBudget>,
    guard_mode: GuardMode,
    release_step: usize,
}

impl Builder<StackSpec> {
    pub(crate) fn stacks(usable_size: usize) -> Self {
        let mut builder = Builder::new(StackSpec {
            usable_size,
            keep_resident: 0,
            budget: None,
            guard_mode: GuardMode::Auto,
            release_step: DEFAULT_RELEASE_STEP,
        });
        builder.config.purge_delay = Some(crate::DEFAULT_PURGE_DELAY);
        builder
    }

    /// How guard pages are made (see [`GuardMode`]): by default markers
    /// where the kernel has them (Linux 6.13+), `PROT_NONE` pages
    /// elsewhere. [`GuardMode::Protect`] forces the classic way, e.g. to
    /// compare the two.
    pub fn guard_mode(mut self, mode: GuardMode) -> Self {
        self.manager.guard_mode = mode;
        self
    }

    /// Bytes at the top of each stack that a purge leaves resident, rounded
    /// up to whole pages (wasmtime's `async_stack_keep_resident`): the
    /// frames nearest the top are the ones every coroutine touches first,
    /// so keeping them saves a page fault or two on reuse. More than the
    /// stack keeps all of it (a purge then releases nothing).
    pub fn keep_resident(mut self, bytes: usize) -> Self {
        self.manager.keep_resident = bytes;
        self
    }

    /// The most bytes one system call releases when stacks are torn down
    /// (default [`DEFAULT_RELEASE_STEP`], rounded up to whole pages).
    ///
    /// A slab that loses its last stacks has their pages released this
    /// many bytes at a time (`madvise`), and then its emptied range
    /// unmapped; stacks freed from slabs that stay are released in the
    /// same steps. An `munmap` of resident memory holds the process's
    /// address-space lock for write until it has freed every page, and
    /// every other thread's `mmap`, `munmap` and `mprotect` waits behind
    /// it; a step holds it for read at most (on Linux 6.16+, only the
    /// area's own lock), so they wait for one step at most.
    ///
    /// `0` removes the bound: a slab is unmapped with its pages, one
    /// system call per slab, the fastest teardown for a process that has
    /// no other thread mapping memory meanwhile.
    pub fn release_step(mut self, bytes: usize) -> Self {
        self.manager.release_step = bytes;
        self
    }

    /// Turns both caps off: no `max_live`, no practical `max_idle`. The pool
    /// then maps stacks until the kernel refuses, which [`StackPool::get`]
    /// reports as [`StackError::MapCountReached`](super::StackError::MapCountReached)
    /// rather than aborting. For tests and for processes that budget VMAs
    /// themselves.
    pub fn unbounded(mut self) -> Self {
        self.config.max_live = None;
        self.max_live_given = true;
        // Half the range, not `usize::MAX`: no pool holds that many stacks
        // (the address space would not fit them), and sums with the thread
        // caches' share (`Config::idle_bound`) cannot overflow.
        self.config.max_idle = usize::MAX / 2;
        self.max_idle_given = true;
        self
    }

    /// Uses `budget` instead of reading the map count from the OS, e.g. to
    /// give this pool a share of the process's budget
    /// ([`MapBudget::with_max_map_count`]). On systems without a map count
    /// this is the only way to give a pool one.
    pub fn map_budget(mut self, budget: MapBudget) -> Self {
        self.manager.budget = Some(budget);
        self
    }

    /// Checks the settings, reads the map count if needed, and builds the
    /// pool.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting at fault: a `usable_size` of 0
    /// or too large to map, a map count that leaves no room for stacks
    /// (`max_live`, when it comes from the budget), `maps_per_object` (the
    /// guard mode decides it for stacks), or what the core
    /// [`build`](Builder::build) refuses.
    pub fn build(self) -> Result<StackPool, ConfigError> {
        let spec = self.manager.clone();
        let page = page_size();
        if spec.usable_size == 0 {
            return Err(ConfigError::new(
                "usable_size",
                "must be at least 1 byte (it is rounded up to whole pages)",
            ));
        }
        if self.maps_per_object.is_some() {
            return Err(ConfigError::new(
                "maps_per_object",
                "is decided by guard_mode for a stack pool; give the pool a share of \
                 the map count with map_budget instead",
            ));
        }
        let usable_size = spec
            .usable_size
            .checked_next_multiple_of(page)
            .filter(|&size| size <= isize::MAX as usize - page)
            .ok_or_else(|| {
                ConfigError::new(
                    "usable_size",
                    format!("is {}, too large to map", spec.usable_size),
                )
            })?;
        let keep_resident = spec.keep_resident.min(usable_size).next_multiple_of(page);

        let guard_mode = spec.guard_mode.resolve();
        if guard_mode == GuardMode::Markers && !GuardMode::markers_supported() {
            return Err(ConfigError::new(
                "guard_mode",
                "is Markers, but this kernel has no guard-page markers \
                 (MADV_GUARD_INSTALL, Linux 6.13+); use Auto or Protect",
            ));
        }
        // None where the OS has no map count (not Linux) and none was given.
        let budget = spec.budget.or_else(MapBudget::of_os);
        let Caps { max_live, max_idle } = self.caps(budget, guard_mode)?;

        let manager = StackManager::new(
            page,
            usable_size,
            keep_resident,
            budget,
            max_live,
            guard_mode == GuardMode::Markers,
            spec.release_step,
        );
        let mut builder = self.with_manager(manager);
        builder.config.max_live = max_live;
        builder.config.max_idle = max_idle;
        let pool = Arc::new(builder.build()?);
        // Before any stack is lent: lent stacks find their pool here.
        pool.manager()
            .slabs()
            .set_pool(pool.shared_ptr().cast(), pool.head_ptr().as_ptr().cast());
        registry::register(&pool);
        Ok(StackPool::from_pool(pool))
    }

    /// The caps, from the settings and the budget (`None` where the OS has
    /// no map count and none was given).
    fn caps(&self, budget: Option<MapBudget>, mode: GuardMode) -> Result<Caps, ConfigError> {
        let stacks = |b: MapBudget| b.stacks_with(mode);
        let max_live = match budget {
            _ if self.max_live_given => self.config.max_live,
            None => None,
            Some(budget) if stacks(budget) == 0 => {
                return Err(ConfigError::new(
                    "max_live",
                    format!(
                        "the map-count budget leaves no room for stacks ({budget}); \
                         set max_live and max_idle explicitly"
                    ),
                ))
            }
            Some(budget) => Some(stacks(budget)),
        };
        let max_idle = if self.max_idle_given {
            self.config.max_idle
        } else {
            let derived = max_live
                .or(budget.map(stacks))
                .unwrap_or(DEFAULT_MAX_IDLE)
                .max(1);
            let batch_size = self.batch_size.unwrap_or(DEFAULT_BATCH_SIZE.min(derived));
            // A cap above `max_live` is harmless (`max_live` bounds idle
            // stacks too) and keeps an explicit `batch_size` valid.
            derived.max(batch_size)
        };
        Ok(Caps { max_live, max_idle })
    }
}

/// What [`StackPoolBuilder::caps`] settles on.
#[derive(Debug, PartialEq, Eq)]
struct Caps {
    max_live: Option<usize>,
    max_idle: usize,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn caps_come_from_the_budget_when_there_is_one() {
        let b = StackPoolBuilder::stacks(4096);
        let budget = Some(MapBudget::with_max_map_count(65530));
        let caps = b.caps(budget, GuardMode::Protect).unwrap();
        assert_eq!(
            caps,
            Caps {
                max_live: Some(30265),
                max_idle: 30265,
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
        let b = StackPoolBuilder::stacks(4096);
        assert_eq!(
            b.caps(None, GuardMode::Protect).unwrap(),
            Caps {
                max_live: None,
                max_idle: DEFAULT_MAX_IDLE,
            }
        );
        let b = b.max_live(10).batch_size(2);
        assert_eq!(
            b.caps(None, GuardMode::Protect).unwrap(),
            Caps {
                max_live: Some(10),
                max_idle: 10,
            }
        );
    }
}
