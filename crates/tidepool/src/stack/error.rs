//! Why a stack could not be had, with the limit that was hit.

use std::fmt;
use std::io;

use crate::os::{MapFailure, MapStep};
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::stack::budget::{mapped_vmas, MapBudget, VMAS_PER_STACK};
use crate::Error;

/// VMAs of slack when deciding that an `ENOMEM` was the map count: other
/// threads map and unmap between the failure and the count, and
/// `/proc/self/maps` lists `[vsyscall]`, which the kernel does not count.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MAP_COUNT_SLACK: usize = 64;

/// Why [`StackPool::get`](super::StackPool::get) returned no stack.
///
/// Every variant is a recoverable error: the pool is unchanged and nothing
/// is left mapped. `MapCountReached` and `OutOfMemory` are returned only
/// after the pool has reclaimed idle stacks and tried once more.
#[derive(Debug)]
#[non_exhaustive]
pub enum StackError {
    /// The process has as many VMAs as `vm.max_map_count` allows, so the
    /// kernel refused a new one (QEMU aborted here with "failed to allocate
    /// memory for stack" / "failed to set up stack guard page"). Linux and
    /// Android only: other systems have no map count.
    MapCountReached {
        /// VMAs the process had mapped when the failure was examined.
        vmas: usize,
        /// The limit, read from the OS after the failure.
        max_map_count: usize,
        /// Which step failed: `"mmap"` (reserving) or `"mprotect"` (the
        /// split that sets up the guard page).
        call: &'static str,
    },
    /// `mmap` or `mprotect` said `ENOMEM` well below the map count: memory
    /// (overcommit accounting, a cgroup limit) or `RLIMIT_AS` ran out. On
    /// systems without a map count (not Linux or Android) every `ENOMEM` is
    /// this, and `vmas` and `max_map_count` are 0.
    OutOfMemory {
        /// Bytes being mapped (guard included).
        bytes: usize,
        /// VMAs mapped at the time, to show it was not the map count (0
        /// where the OS has no map count, or `/proc/self/maps` could not be
        /// read).
        vmas: usize,
        /// The map count limit at the time (0 where the OS has none).
        max_map_count: usize,
        /// `"mmap"` or `"mprotect"`.
        call: &'static str,
    },
    /// The pool already holds its `max_live` stacks (by default the
    /// map-count budget, [`MapBudget::stacks`]) and none is idle here.
    Exhausted {
        /// The pool's `max_live`.
        limit: usize,
    },
    /// [`StackPool::get_timeout`](super::StackPool::get_timeout) waited its
    /// whole timeout at `max_live` and was handed no stack.
    Timeout {
        /// The pool's `max_live`.
        limit: usize,
    },
    /// Any other failure of `mmap`, `mprotect` or the `madvise` that
    /// installs a guard marker.
    Os {
        /// `"mmap"`, `"mprotect"` or `"madvise"`.
        call: &'static str,
        /// What the OS said.
        source: io::Error,
    },
}

impl StackError {
    /// Is this the kind of failure that reclaiming idle stacks can cure?
    pub fn is_resource_limit(&self) -> bool {
        matches!(
            self,
            StackError::MapCountReached { .. } | StackError::OutOfMemory { .. }
        )
    }

    /// Explains a failed mapping: the map count, memory, or something else.
    /// On Linux, reads `/proc` only on `ENOMEM`, without allocating much
    /// (see `mapped_vmas`).
    pub(crate) fn from_map_failure(failure: MapFailure, bytes: usize) -> Self {
        let call = match failure.step {
            MapStep::Reserve => "mmap",
            MapStep::Protect => "mprotect",
            MapStep::Guard => "madvise",
        };
        if failure.error.raw_os_error() != Some(libc::ENOMEM) {
            return StackError::Os {
                call,
                source: failure.error,
            };
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let (vmas, max_map_count) = {
            let max_map_count = MapBudget::from_os().max_map_count();
            let vmas = mapped_vmas().unwrap_or(0);
            if vmas + VMAS_PER_STACK + MAP_COUNT_SLACK >= max_map_count {
                return StackError::MapCountReached {
                    vmas,
                    max_map_count,
                    call,
                };
            }
            (vmas, max_map_count)
        };
        // No map count here: ENOMEM is memory or address space.
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let (vmas, max_map_count) = (0, 0);
        StackError::OutOfMemory {
            bytes,
            vmas,
            max_map_count,
            call,
        }
    }
}

impl From<Error<StackError>> for StackError {
    fn from(e: Error<StackError>) -> Self {
        match e {
            Error::Create(e) => e,
            Error::Exhausted { limit } => StackError::Exhausted { limit },
            Error::Timeout { limit } => StackError::Timeout { limit },
        }
    }
}

impl fmt::Display for StackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StackError::MapCountReached {
                vmas,
                max_map_count,
                call,
            } => write!(
                f,
                "vm.max_map_count reached ({vmas} VMAs mapped of {max_map_count}): \
                 {call} of a stack failed with ENOMEM"
            ),
            StackError::OutOfMemory {
                bytes,
                vmas,
                max_map_count,
                call,
            } if *max_map_count > 0 => write!(
                f,
                "out of memory: {call} of a {bytes}-byte stack failed with ENOMEM \
                 ({vmas} VMAs mapped of {max_map_count}, so not the map count)"
            ),
            StackError::OutOfMemory { bytes, call, .. } => write!(
                f,
                "out of memory: {call} of a {bytes}-byte stack failed with ENOMEM"
            ),
            StackError::Exhausted { limit } => write!(
                f,
                "stack pool exhausted: {limit} stacks exist (max_live) and none is idle"
            ),
            StackError::Timeout { limit } => write!(
                f,
                "timed out waiting for one of the stack pool's {limit} stacks (max_live)"
            ),
            StackError::Os { call, source } => write!(f, "{call} of a stack failed: {source}"),
        }
    }
}

impl std::error::Error for StackError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StackError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}
