//! Memory pressure: what a pool does when the system runs short, and where
//! the signal comes from.
//!
//! # Levels
//!
//! In the words of the [glossary](crate#glossary): *trim* returns objects
//! to the depot, *reclaim* destroys idle objects, *purge* releases an idle
//! object's pages and keeps the object (for a stack: `madvise`, the mapping
//! stays).
//!
//! * [`Level::Medium`]: each pool reclaims down to its working set at once,
//!   instead of waiting for the end of the interval (idle objects that sat
//!   unused through this interval and the last are destroyed), then purges
//!   what the depot keeps. Thread caches, the hot end, are left alone. The
//!   working set stays; reusing a purged object costs only the page faults
//!   of touching it again, never a create.
//! * [`Level::Critical`]: each pool drains to `min_idle`, thread caches
//!   included (a cache whose owner was inside an access at that moment is
//!   drained at the owner's next access, within the interval).
//!   Whether it then holds the depot there depends on the signal:
//!   with [`pressure_hold`](crate::Builder::pressure_hold) unset (the
//!   default), a single critical signal holds nothing, and one that follows
//!   another within the reclaim interval (pressure that persists) holds the
//!   depot at `min_idle` for 2/15 of the interval (2 s at the default 15 s),
//!   renewed by each further signal. A hold set explicitly applies to every
//!   signal. While a hold lasts, batches given back to the depot beyond
//!   `min_idle` are destroyed instead of kept. Threads go on caching what
//!   they use right now (at most two batches each, refilled only by their
//!   own gets), so the pool cannot grow back while throughput stays close to
//!   normal. Xen's blkback does the same ("aggressive shrinking" of the idle
//!   pool for a short window).
//!
//! # Why this reaction
//!
//! Each level asks for the cheapest step that frees what it must. Medium
//! keeps the working set and releases pages: reusing a purged object costs
//! page faults, never a create. Critical drains, because a caller who says
//! memory is critical asks for that; a hold on top frees no more memory
//! than the drain did (the working set comes back either way) but turns
//! every batch returned past `min_idle` into a destroy and a create, which
//! is why a single signal holds nothing by default. The lab's
//! `fio-pressure` scenario measures each reaction; the figures are in
//! [`performance`](crate::performance#memory-pressure).
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
//! permission, a kernel without PSI) is reported once (`log::warn!`) and
//! in [`sources`], and the pools keep working without it.
//!
//! The direction is one way: this module implements and feeds sources into
//! [`crate::reclaim`], which defines what a source is ([`Source`],
//! [`Level`]) and never names the sources themselves. Set the
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

#[cfg(target_os = "linux")]
mod cgroup_v1;
#[cfg(target_os = "linux")]
mod psi;

pub use crate::signal::{Interest, Level, Source, SourceStatus};
#[cfg(target_os = "linux")]
pub use cgroup_v1::CgroupV1Pressure;
#[cfg(target_os = "linux")]
pub use psi::{PsiTrigger, Stall};

use std::io;

/// Delivers `level` to every pool the reclaimer looks after (those built
/// with [`background`](crate::Builder::background) on, the default).
///
/// Returns at once; the reclaimer thread applies the level within
/// milliseconds (and is started again first, if it is not running: after a
/// `fork`, say).
///
/// ```
/// use tidepool::pressure::{self, Level};
///
/// // e.g. from a handler for the application's own low-memory signal:
/// pressure::notify(Level::Critical);
/// ```
pub fn notify(level: Level) {
    crate::reclaim::scheduler::notify(level);
}

/// Has the reclaimer thread watch `source` too.
///
/// Sources are not carried across `fork`: a forked child watches the
/// default sources again (its own descriptors), but not the ones given
/// here in the parent.
pub fn watch(source: Box<dyn Source>) {
    crate::reclaim::scheduler::watch(source);
}

/// Every source the reclaimer has tried, watched or not.
pub fn sources() -> Vec<SourceStatus> {
    crate::reclaim::scheduler::sources()
}

/// The sources the reclaimer watches from its start: PSI triggers on the
/// system and on this process's cgroup v2, cgroup v1 pressure listeners.
/// Given to the reclaimer by each background pool when it registers (so
/// that reclaim need not know about them).
pub(crate) fn default_sources() -> Vec<io::Result<Box<dyn Source>>> {
    // Under miri (bin/sanitize.sh) there is no /proc and no `poll(2)`: no
    // sources.
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        fn boxed<S: Source>(r: io::Result<S>) -> io::Result<Box<dyn Source>> {
            r.map(|s| Box::new(s) as Box<dyn Source>)
        }
        let mut all: Vec<_> = PsiTrigger::system_defaults()
            .into_iter()
            .map(boxed)
            .collect();
        // A process in no such cgroup simply has no such source: not an
        // error. Any other failure to find the cgroup (an unreadable
        // `/proc/self/cgroup`) is reported like a source that failed.
        match PsiTrigger::cgroup_defaults() {
            Ok(triggers) => all.extend(triggers.into_iter().map(boxed)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => all.push(Err(e)),
        }
        match CgroupV1Pressure::own_defaults() {
            Ok(listeners) => all.extend(listeners.into_iter().map(boxed)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => all.push(Err(e)),
        }
        all
    }
    // No memory-pressure notification reaches user space here (see "Per
    // OS" above).
    #[cfg(any(not(target_os = "linux"), miri))]
    Vec::new()
}
