//! The trait a memory-pressure signal implements.

use std::io;
#[cfg(unix)]
use std::os::fd::BorrowedFd;

use super::Level;

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
/// descriptor reports an error, or whose `on_ready` fails, is reported once
/// and dropped.
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
