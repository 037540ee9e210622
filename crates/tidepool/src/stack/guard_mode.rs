//! How a stack's guard page is made: a page-table marker or a `PROT_NONE`
//! page.

use std::fmt;
use std::sync::OnceLock;

use crate::os;

/// How the guard page below each stack is made.
///
/// | mode | creating `k` stacks of a slab | VMAs per slab of `p` stacks | map-count budget per stack |
/// |---|---|---|---|
/// | [`Markers`](GuardMode::Markers) (Linux 6.13+) | 1 `mmap` (writable, `MAP_NORESERVE`), `k` `madvise(MADV_GUARD_INSTALL)` | 1 | 1 (a slab holds at least one stack) |
/// | [`Protect`](GuardMode::Protect) | 1 `mmap` (`PROT_NONE`), `k` `mprotect` | `2p` (each guard splits the VMA) | 2 ([`VMAS_PER_STACK`](super::VMAS_PER_STACK)) |
///
/// A guard marker (`MADV_GUARD_INSTALL`) lives in the page tables, not in
/// the VMA: the slab stays one VMA, so opening a stack does not split it
/// and `munmap` has one area to remove. A touch of the guard faults
/// (`SIGSEGV`) either way; `MADV_DONTNEED` (a purge, a freed slot) keeps
/// the markers, and a forked child inherits them with the mapping.
///
/// **Speed of the stacks themselves.** The lab's fio request loop runs
/// about as fast on stacks with markers as with `Protect` guards (the
/// figures are in [`performance`](crate::performance)); markers keep the map count down
/// (seed 000). To compare on your machine: `cargo run --release -p tidepool-lab
/// --example fio_ab -- qemu-2024 tidepool`, then again with
/// `TIDEPOOL_GUARD_MODE=protect`.
///
/// The kernel refuses markers on memory locked by `mlockall` (`EINVAL`):
/// then that guard is made `PROT_NONE` with `mprotect` instead, and the
/// pool's later slabs use [`Protect`](GuardMode::Protect) (logged once;
/// [`StackStats::mprotect_calls`](super::StackStats::mprotect_calls) shows
/// it).
///
/// ```
/// use tidepool::stack::{GuardMode, StackPool};
///
/// let pool = StackPool::builder(64 * 1024).guard_mode(GuardMode::Protect).build()?;
/// assert_eq!(pool.manager().guard_mode(), GuardMode::Protect);
/// drop(pool.get()?);
/// assert_eq!(pool.stats().vmas, 2, "a guard and a stack");
///
/// // The default: markers where the kernel has them.
/// let pool = StackPool::new(64 * 1024)?;
/// let mode = pool.manager().guard_mode();
/// assert_eq!(mode == GuardMode::Markers, GuardMode::markers_supported());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GuardMode {
    /// [`Markers`](GuardMode::Markers) if the kernel has them (probed once
    /// per process: [`GuardMode::markers_supported`]), otherwise
    /// [`Protect`](GuardMode::Protect). The default. The environment
    /// variable [`GUARD_MODE_ENV`] set to `protect` makes it `Protect`
    /// (for a process that cannot change its code, e.g. through the C
    /// API, or to compare).
    #[default]
    Auto,
    /// Guard-page markers, `madvise(MADV_GUARD_INSTALL)`: Linux 6.13 and
    /// later. Building a pool with it on a kernel without them is a
    /// [`ConfigError`](crate::ConfigError) naming `guard_mode`.
    Markers,
    /// `PROT_NONE` guard pages, one `mprotect` per stack: every Unix.
    Protect,
}

impl GuardMode {
    /// Whether this kernel has guard-page markers (`MADV_GUARD_INSTALL`,
    /// Linux 6.13+). Probed once per process (one `mmap`, `madvise` and
    /// `munmap` of a page), then remembered. `false` off Linux.
    pub fn markers_supported() -> bool {
        os::guard_markers_supported()
    }

    /// `Auto` resolved for this kernel (and [`GUARD_MODE_ENV`]); the
    /// others as they are.
    pub(crate) fn resolve(self) -> GuardMode {
        match self {
            GuardMode::Auto if env_wants_protect() => GuardMode::Protect,
            GuardMode::Auto if Self::markers_supported() => GuardMode::Markers,
            GuardMode::Auto => GuardMode::Protect,
            other => other,
        }
    }

    /// VMAs one stack costs at most, what the map-count budget counts:
    /// with markers a slab is one VMA and holds at least one stack; with
    /// `PROT_NONE` guards a stack is its guard and its writable part.
    pub fn vmas_per_stack(self) -> usize {
        match self.resolve() {
            GuardMode::Markers => 1,
            _ => super::VMAS_PER_STACK,
        }
    }
}

/// `TIDEPOOL_GUARD_MODE`: `protect` turns [`GuardMode::Auto`] into
/// [`GuardMode::Protect`] for the whole process (read once); any other
/// value, or none, leaves it `Auto`.
pub const GUARD_MODE_ENV: &str = "TIDEPOOL_GUARD_MODE";

fn env_wants_protect() -> bool {
    static PROTECT: OnceLock<bool> = OnceLock::new();
    *PROTECT.get_or_init(|| {
        std::env::var(GUARD_MODE_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("protect"))
    })
}

impl fmt::Display for GuardMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GuardMode::Auto => "auto",
            GuardMode::Markers => "markers (MADV_GUARD_INSTALL)",
            GuardMode::Protect => "protect (mprotect)",
        })
    }
}
