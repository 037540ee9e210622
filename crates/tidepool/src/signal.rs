//! What memory pressure is: a [`Level`], and the [`Source`] trait a signal
//! implements so that the reclaimer can wait on it. The vocabulary shared
//! by [`crate::reclaim`], which consumes signals, and [`crate::pressure`],
//! whose sources (PSI, cgroup v1) feed it and which re-exports these types;
//! reclaim never names the sources themselves.

use std::fmt;
use std::io;
#[cfg(unix)]
use std::os::fd::BorrowedFd;

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

/// What the reclaimer waits for on a source's descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// The descriptor becomes readable (`POLLIN`): an eventfd, a pipe.
    Readable,
    /// Priority data (`POLLPRI`): a PSI trigger.
    Priority,
}

/// A memory-pressure signal the reclaimer thread can wait on.
///
/// The reclaimer polls [`fd`](Source::fd) for [`interest`](Source::interest)
/// and calls [`on_ready`](Source::on_ready) when it fires. A source whose
/// descriptor reports an error, whose `on_ready` fails, or any of whose
/// methods panics, is reported once (`log::warn!` and
/// [`sources`](crate::pressure::sources)) and dropped. No method is called
/// while tidepool holds a lock of its own.
pub trait Source: Send + 'static {
    /// A short description for reports, e.g. `psi /proc/pressure/memory`.
    fn name(&self) -> String;

    /// The descriptor to wait on.
    #[cfg(unix)]
    fn fd(&self) -> BorrowedFd<'_>;

    /// What to wait for on it.
    fn interest(&self) -> Interest;

    /// The descriptor fired: consume the event and say which level it
    /// signals (`None` to ignore it).
    fn on_ready(&mut self) -> io::Result<Option<Level>>;
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
