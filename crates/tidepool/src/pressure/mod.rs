//! Memory pressure: what a pool does when the system runs short, and where
//! the signal comes from.
//!
//! # Levels
//!
//! * [`Level::Medium`]: each pool reclaims down to its working set at once,
//!   instead of waiting for the end of the interval: idle objects that sat
//!   unused through this interval and the last are destroyed.
//! * [`Level::Critical`]: each pool drains to `min_idle`, thread caches
//!   included, and holds the depot there for
//!   [`pressure_hold`](crate::Builder::pressure_hold): while the hold lasts,
//!   batches given back to the depot beyond `min_idle` are destroyed instead
//!   of kept. Threads go on caching what they use right now (at most two
//!   batches each, refilled only by their own gets), so the pool cannot grow
//!   back while throughput stays close to normal. Xen's blkback does the
//!   same ("aggressive shrinking" of the idle pool for a short window): with
//!   it, swap traffic under pressure fell from 185k to 3k pages with no I/O
//!   cost.
//!
//! # Sources
//!
//! Signals reach pools through the process-wide reclaimer thread, never on a
//! `get`/`put` path. On Linux it watches, from its start:
//!
//! * the system's PSI file `/proc/pressure/memory` and this process's cgroup
//!   v2 `memory.pressure` ([`PsiTrigger`]);
//! * this process's cgroup v1 `memory.pressure_level` ([`CgroupV1Pressure`]);
//!
//! and, on every Unix, any [`Source`] given to [`watch`] (anything with a
//! descriptor `poll(2)` can wait on). Applications with their own signal
//! call [`notify`]. A source that cannot be opened (no such file, no
//! permission, a kernel without PSI) is reported once on standard error and
//! in [`sources`], and the pools keep working without it. Set the
//! environment variable `TIDEPOOL_PRESSURE=manual` before the first pool is
//! built to watch no default source.
//!
//! # Per OS
//!
//! | OS | default sources | what you can add |
//! |---|---|---|
//! | Linux | PSI (system and cgroup v2), cgroup v1 `memory.pressure_level` | [`notify`], [`watch`] |
//! | macOS, iOS | none | [`notify`] from a `DISPATCH_SOURCE_TYPE_MEMORYPRESSURE` handler (libdispatch's public memory-pressure signal); [`watch`] |
//! | FreeBSD, the other BSDs, illumos | none: no memory-pressure notification reaches user space | [`notify`] from your own measure (e.g. free pages read with `sysctl`); [`watch`] |
//!
//! `PsiTrigger` and `CgroupV1Pressure` exist only on Linux. Everywhere, the
//! reclaim interval still trims every pool to its working set; pressure
//! only makes that happen sooner and harder.
//!
//! To apply a level to one pool directly (in tests, say), call
//! [`Pool::pressure`](crate::Pool::pressure).

mod source;

#[cfg(target_os = "linux")]
mod cgroup_v1;
#[cfg(target_os = "linux")]
mod psi;

#[cfg(target_os = "linux")]
pub use cgroup_v1::CgroupV1Pressure;
#[cfg(target_os = "linux")]
pub use psi::{PsiTrigger, Stall};
pub use source::{Interest, Source};

use std::fmt;

/// How short of memory the system is, as far as pools care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Reclaim down to the working set now.
    Medium,
    /// Drain to `min_idle`, thread caches included, and hold there.
    Critical,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Medium => "medium",
            Level::Critical => "critical",
        })
    }
}

/// Delivers `level` to every pool the reclaimer looks after (those built
/// with [`background`](crate::Builder::background) on, the default).
///
/// Returns at once; the reclaimer thread applies the level within
/// milliseconds.
///
/// ```
/// use tidepool::pressure::{self, Level};
///
/// // e.g. from a handler for the application's own low-memory signal:
/// pressure::notify(Level::Critical);
/// ```
pub fn notify(level: Level) {
    crate::reclaim::reclaimer::notify(level);
}

/// Has the reclaimer thread watch `source` too.
pub fn watch(source: Box<dyn Source>) {
    crate::reclaim::reclaimer::watch(source);
}

/// What became of a pressure source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceStatus {
    /// The source's [`name`](Source::name).
    pub name: String,
    /// `None` while it is watched; why it is not, otherwise.
    pub error: Option<String>,
    /// Signals received from it.
    pub events: u64,
}

/// Every source the reclaimer has tried, watched or not.
pub fn sources() -> Vec<SourceStatus> {
    crate::reclaim::reclaimer::sources()
}
