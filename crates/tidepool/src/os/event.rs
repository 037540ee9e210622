//! `eventfd(2)` and `poll(2)`: how the reclaimer thread sleeps until a
//! deadline, a pressure signal or a wake-up.
//!
//! pre: none; every failure is an `io::Error`. Nothing here knows what it is
//! waiting for: callers say which readiness they want ([`PollFor`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::sync::process::{AtomicI32, Ordering};

/// A counter the kernel makes pollable: `signal` makes it readable until
/// `drain`.
#[derive(Debug)]
pub(crate) struct EventFd(File);

/// A new non-blocking, close-on-exec eventfd at zero.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: `eventfd` takes two integers and returns a new descriptor
    // or -1; it touches no memory of ours.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor just returned to us and owned by
    // nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to the eventfd's counter.
fn signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local buffer to a borrowed (so
    // open) descriptor.
    let rc = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    if rc == one.len() as isize {
        Ok(())
    } else if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Err(io::Error::from(io::ErrorKind::WriteZero))
    }
}

/// Reads and resets the eventfd's counter; 0 if it was already zero.
fn drain(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live local buffer of 8 from a
    // borrowed (so open) descriptor.
    let rc = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc == buf.len() as isize {
        return Ok(u64::from_ne_bytes(buf));
    }
    if rc >= 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::WouldBlock {
        Ok(0)
    } else {
        Err(err)
    }
}

impl EventFd {
    /// A non-blocking, close-on-exec eventfd at zero.
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Self(File::from(eventfd()?)))
    }

    /// Adds one to the counter, waking a `poll` on it.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn signal(&self) -> io::Result<()> {
        signal(self.0.as_fd())
    }

    /// Reads and resets the counter; 0 if it was already zero.
    pub(crate) fn drain(&self) -> io::Result<u64> {
        drain(self.0.as_fd())
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// No descriptor.
const NONE: RawFd = -1;

/// A process-wide wake-up eventfd for a `static`, which a forked child can
/// drop: the parent's descriptor is shared with the child by `fork`, so a
/// child signalling it would wake the parent's sleeper.
///
/// The descriptor is opened once ([`open`](WakeFd::open)) and then stays
/// open for the life of the process, except that
/// [`forget_after_fork`](WakeFd::forget_after_fork) closes the child's copy
/// from the child's `pthread_atfork` handler, when no other thread exists.
#[derive(Debug)]
pub(crate) struct WakeFd(AtomicI32);

impl WakeFd {
    pub(crate) const fn new() -> Self {
        Self(AtomicI32::new(NONE))
    }

    /// Opens the eventfd unless it is open. Callers serialise calls to this
    /// (the reclaimer registry's lock).
    pub(crate) fn open(&self) -> io::Result<()> {
        if self.0.load(Ordering::Acquire) != NONE {
            return Ok(());
        }
        let fd = eventfd()?.into_raw_fd();
        self.0.store(fd, Ordering::Release);
        Ok(())
    }

    /// The descriptor, if open.
    fn get(&self) -> Option<BorrowedFd<'_>> {
        let fd = self.0.load(Ordering::Acquire);
        // SAFETY: a descriptor stored here is open and owned by `self` until
        // `forget_after_fork`, which runs only when no other thread of the
        // process exists, so it cannot close it under a borrow.
        (fd != NONE).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Wakes whoever polls the descriptor; nothing if it is not open.
    pub(crate) fn signal(&self) {
        if let Some(fd) = self.get() {
            let _ = signal(fd);
        }
    }

    /// Waits like [`poll`], with the wake-up descriptor first in the list
    /// (and its counter reset afterwards). `None` if it is not open.
    pub(crate) fn poll_with(
        &self,
        others: &[(BorrowedFd<'_>, PollFor)],
        timeout: Option<Duration>,
    ) -> Option<io::Result<Vec<Ready>>> {
        let fd = self.get()?;
        let mut fds = Vec::with_capacity(1 + others.len());
        fds.push((fd, PollFor::Readable));
        fds.extend_from_slice(others);
        let ready = poll(&fds, timeout);
        let _ = drain(fd);
        Some(ready)
    }

    /// In a forked child, from its `pthread_atfork` child handler (only the
    /// forking thread exists): closes the child's copy of the parent's
    /// descriptor, so the next [`open`](WakeFd::open) makes one of its own.
    /// Async-signal-safe (`close` only).
    pub(crate) fn forget_after_fork(&self) {
        let fd = self.0.swap(NONE, Ordering::AcqRel);
        if fd != NONE {
            // SAFETY: `fd` was ours (see `get`), and no borrow of it exists:
            // the threads that could hold one did not survive the fork.
            unsafe { libc::close(fd) };
        }
    }
}

/// What `poll` waits for on a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PollFor {
    /// `POLLIN`.
    Readable,
    /// `POLLPRI`.
    Priority,
}

/// What `poll` found on one descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    /// The interest is satisfied.
    pub(crate) ready: bool,
    /// The descriptor is broken or gone (`POLLERR`, `POLLHUP`, `POLLNVAL`).
    pub(crate) failed: bool,
}

/// Waits until one of `fds` is ready or `timeout` passes (`None`: forever).
/// Returns one [`Ready`] per descriptor; all clear on a timeout or `EINTR`.
pub(crate) fn poll(
    fds: &[(BorrowedFd<'_>, PollFor)],
    timeout: Option<Duration>,
) -> io::Result<Vec<Ready>> {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, what)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: match what {
                PollFor::Readable => libc::POLLIN,
                PollFor::Priority => libc::POLLPRI,
            },
            revents: 0,
        })
        .collect();
    let millis = timeout.map_or(-1, |t| {
        // Round up so a deadline is never missed by a partial millisecond.
        let ms = t.as_nanos().div_ceil(1_000_000);
        libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `raw` is a live, initialised array of `raw.len()` pollfds that
    // `poll` may write `revents` into; the descriptors are borrowed for the
    // duration of the call.
    let rc = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, millis) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![Ready::default(); raw.len()]);
        }
        return Err(err);
    }
    Ok(raw
        .iter()
        .map(|p| Ready {
            ready: p.revents & p.events != 0,
            failed: p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
        })
        .collect())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_signalled_eventfd_wakes_poll_until_drained() {
        let efd = EventFd::new().unwrap();
        let quiet = poll(&[(efd.as_fd(), PollFor::Readable)], Some(Duration::ZERO)).unwrap();
        assert!(!quiet[0].ready);
        efd.signal().unwrap();
        efd.signal().unwrap();
        let woken = poll(&[(efd.as_fd(), PollFor::Readable)], None).unwrap();
        assert!(woken[0].ready && !woken[0].failed);
        assert_eq!(efd.drain().unwrap(), 2);
        assert_eq!(efd.drain().unwrap(), 0);
    }

    #[test]
    fn a_wake_fd_opens_once_and_wakes_its_poll() {
        let wake = WakeFd::new();
        assert!(wake.poll_with(&[], Some(Duration::ZERO)).is_none());
        wake.signal(); // not open: nothing
        wake.open().unwrap();
        let fd = wake.0.load(Ordering::Relaxed);
        wake.open().unwrap();
        assert_eq!(wake.0.load(Ordering::Relaxed), fd, "opened once");
        let quiet = wake.poll_with(&[], Some(Duration::ZERO)).unwrap().unwrap();
        assert!(!quiet[0].ready);
        wake.signal();
        let woken = wake.poll_with(&[], None).unwrap().unwrap();
        assert!(woken[0].ready);
        let drained = wake.poll_with(&[], Some(Duration::ZERO)).unwrap().unwrap();
        assert!(!drained[0].ready, "the counter was reset");
        wake.forget_after_fork();
        assert!(wake.poll_with(&[], Some(Duration::ZERO)).is_none());
    }
}
