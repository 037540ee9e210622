//! The map-count budget: how many guarded stacks a process can afford
//! before `mmap` and `mprotect` start failing at `vm.max_map_count`.
//!
//! # Per OS
//!
//! * **Linux** (and Android, the same kernel) caps the memory areas (VMAs)
//!   of one process at `vm.max_map_count`, 65530 by default; past it `mmap`
//!   and the `mprotect` that splits off a guard page fail with `ENOMEM`. A
//!   stack pool's default caps come from this budget, read from
//!   [`MAX_MAP_COUNT_PATH`].
//! * **FreeBSD, macOS and the other BSDs** have no per-process count of
//!   mappings. A mapping fails only when memory or address space runs out:
//!   the address-space resource limit (`RLIMIT_AS`; `RLIMIT_VMEM` on
//!   FreeBSD) where the kernel enforces one, or the kernel's own memory for
//!   map entries. There a stack pool has no budget unless given one
//!   ([`StackPoolBuilder::map_budget`](super::StackPoolBuilder::map_budget)),
//!   `max_live` is unset and `max_idle` is the generic
//!   [`DEFAULT_MAX_IDLE`](crate::DEFAULT_MAX_IDLE); a refused mapping is
//!   reported as [`StackError::OutOfMemory`](super::StackError::OutOfMemory).

use std::fmt;
use std::path::Path;

/// VMAs (kernel memory areas) one guarded stack costs: its `PROT_NONE`
/// guard and its writable part. An upper bound: the kernel may merge an edge
/// of a stack with a neighbouring mapping of the same kind.
pub const VMAS_PER_STACK: usize = 2;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use crate::os::map_count::{mapped_vmas, MAX_MAP_COUNT_PATH};
pub use crate::os::map_count::{FALLBACK_MAX_MAP_COUNT, RESERVED_VMAS};

/// Where a [`MapBudget`]'s `max_map_count` came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetSource {
    /// Read from `/proc/sys/vm/max_map_count` (or the file given to
    /// [`MapBudget::read_from`]).
    Os,
    /// The file was missing, unreadable or not a number:
    /// [`FALLBACK_MAX_MAP_COUNT`].
    Fallback,
    /// Given by the caller ([`MapBudget::with_max_map_count`]).
    Given,
}

/// How many guarded stacks fit under `vm.max_map_count`, QEMU's way:
/// `(max_map_count - RESERVED_VMAS) / VMAS_PER_STACK`.
///
/// With the usual 65530 that is 30265 stacks. It is a budget for the whole
/// process: a [`StackPool`](super::StackPool) built with the defaults takes
/// all of it as its `max_live` (and its `max_idle`), so a process with
/// several stack pools should split it between them (their
/// [`max_live`](super::StackPoolBuilder::max_live)s adding up to at most
/// [`stacks`](MapBudget::stacks)).
///
/// ```
/// use tidepool::stack::{BudgetSource, MapBudget};
///
/// let budget = MapBudget::with_max_map_count(65530);
/// assert_eq!(budget.stacks(), 30265);
///
/// let missing = MapBudget::read_from("/nonexistent/max_map_count");
/// assert_eq!(missing.source(), BudgetSource::Fallback);
/// assert_eq!(missing.max_map_count(), 65530);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapBudget {
    max_map_count: usize,
    source: BudgetSource,
}

impl MapBudget {
    /// Reads `/proc/sys/vm/max_map_count` now (a sysctl can change it at any
    /// time), falling back to [`FALLBACK_MAX_MAP_COUNT`]. Linux and Android
    /// only: other systems have no such limit (see the module notes).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn from_os() -> Self {
        Self::read_from(MAX_MAP_COUNT_PATH)
    }

    /// The budget this OS imposes, if it has a map count: [`from_os`] on
    /// Linux and Android, `None` elsewhere.
    ///
    /// [`from_os`]: MapBudget::from_os
    pub(crate) fn of_os() -> Option<Self> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        return Some(Self::from_os());
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        return None;
    }

    /// Reads the map count from `path`, falling back to
    /// [`FALLBACK_MAX_MAP_COUNT`] if it is missing, unreadable or not a
    /// number.
    pub fn read_from(path: impl AsRef<Path>) -> Self {
        match crate::os::map_count::read_count(path.as_ref()) {
            Some(max_map_count) => Self {
                max_map_count,
                source: BudgetSource::Os,
            },
            None => Self {
                max_map_count: FALLBACK_MAX_MAP_COUNT,
                source: BudgetSource::Fallback,
            },
        }
    }

    /// The budget for a map count given by the caller.
    pub fn with_max_map_count(max_map_count: usize) -> Self {
        Self {
            max_map_count,
            source: BudgetSource::Given,
        }
    }

    /// The process's VMA limit this budget is for.
    pub fn max_map_count(&self) -> usize {
        self.max_map_count
    }

    /// Where [`max_map_count`](MapBudget::max_map_count) came from.
    pub fn source(&self) -> BudgetSource {
        self.source
    }

    /// Stacks that fit with `PROT_NONE` guard pages
    /// ([`GuardMode::Protect`](super::GuardMode::Protect)):
    /// `(max_map_count - RESERVED_VMAS) / VMAS_PER_STACK`, 0 if the map
    /// count is no bigger than the reserve.
    pub fn stacks(&self) -> usize {
        self.max_map_count.saturating_sub(RESERVED_VMAS) / VMAS_PER_STACK
    }

    /// Stacks that fit with guards made the `mode` way: `(max_map_count -
    /// RESERVED_VMAS) / mode.vmas_per_stack()`. With guard markers a slab
    /// is one VMA whatever it holds, so one VMA per stack is the worst
    /// case (slabs of one stack each); the pool's real count is
    /// [`StackStats::vmas`](super::StackStats::vmas).
    ///
    /// ```
    /// use tidepool::stack::{GuardMode, MapBudget};
    ///
    /// let budget = MapBudget::with_max_map_count(65530);
    /// assert_eq!(budget.stacks_with(GuardMode::Protect), 30265);
    /// assert_eq!(budget.stacks_with(GuardMode::Markers), 60530);
    /// ```
    pub fn stacks_with(&self, mode: super::GuardMode) -> usize {
        self.max_map_count.saturating_sub(RESERVED_VMAS) / mode.vmas_per_stack()
    }
}

impl fmt::Display for MapBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = match self.source {
            BudgetSource::Os => "read from the OS",
            BudgetSource::Fallback => "the kernel default, as the OS value could not be read",
            BudgetSource::Given => "given",
        };
        write!(
            f,
            "{} stacks: (vm.max_map_count {} ({from}) - {RESERVED_VMAS} reserved) / {VMAS_PER_STACK} VMAs each",
            self.stacks(),
            self.max_map_count
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn qemu_formula() {
        assert_eq!(MapBudget::with_max_map_count(65530).stacks(), 30265);
        assert_eq!(MapBudget::with_max_map_count(5000).stacks(), 0);
        assert_eq!(MapBudget::with_max_map_count(10).stacks(), 0);
        assert_eq!(MapBudget::with_max_map_count(5003).stacks(), 1);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "writes host files; miri runs isolated (and the code is safe parsing)"
    )]
    fn unreadable_or_garbage_falls_back() {
        let dir = std::env::temp_dir().join(format!("tidepool-budget-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage");
        std::fs::write(&garbage, "lots\n").unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "12000\n").unwrap();

        let b = MapBudget::read_from(&garbage);
        assert_eq!(b.source(), BudgetSource::Fallback);
        assert_eq!(b.max_map_count(), FALLBACK_MAX_MAP_COUNT);
        assert!(b.to_string().contains("could not be read"), "{b}");

        let b = MapBudget::read_from(&good);
        assert_eq!(
            (b.source(), b.max_map_count(), b.stacks()),
            (BudgetSource::Os, 12000, 3500)
        );

        let b = MapBudget::read_from(dir.join("missing"));
        assert_eq!(b.source(), BudgetSource::Fallback);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[cfg_attr(miri, ignore = "reads /proc/self/maps from the kernel")]
    fn this_process_has_some_vmas() {
        let n = mapped_vmas().unwrap();
        assert!(n > 5, "{n}");
    }
}
