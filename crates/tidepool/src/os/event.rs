//! `eventfd(2)` and `poll(2)`: how the reclaimer thread sleeps until a
//! deadline, a pressure signal or a wake-up.
//!
//! pre: none; every failure is an `io::Error`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::pressure::Interest;

/// A counter the kernel makes pollable: `signal` makes it readable until
/// `drain`.
#[derive(Debug)]
pub(crate) struct EventFd(File);

impl EventFd {
    /// A non-blocking, close-on-exec eventfd at zero.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: `eventfd` takes two integers and returns a new descriptor
        // or -1; it touches no memory of ours.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor just returned to us and owned by
        // nothing else.
        Ok(Self(File::from(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Adds one to the counter, waking a `poll` on it.
    pub(crate) fn signal(&self) -> io::Result<()> {
        (&self.0).write_all(&1u64.to_ne_bytes())
    }

    /// Reads and resets the counter; 0 if it was already zero.
    pub(crate) fn drain(&self) -> io::Result<u64> {
        let mut buf = [0u8; 8];
        match (&self.0).read(&mut buf) {
            Ok(8) => Ok(u64::from_ne_bytes(buf)),
            Ok(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
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
    fds: &[(BorrowedFd<'_>, Interest)],
    timeout: Option<Duration>,
) -> io::Result<Vec<Ready>> {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, interest)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: match interest {
                Interest::Readable => libc::POLLIN,
                Interest::Priority => libc::POLLPRI,
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
    #[cfg_attr(miri, ignore = "poll(2) is a real kernel call miri does not emulate")]
    fn a_signalled_eventfd_wakes_poll_until_drained() {
        let efd = EventFd::new().unwrap();
        let quiet = poll(&[(efd.as_fd(), Interest::Readable)], Some(Duration::ZERO)).unwrap();
        assert!(!quiet[0].ready);
        efd.signal().unwrap();
        efd.signal().unwrap();
        let woken = poll(&[(efd.as_fd(), Interest::Readable)], None).unwrap();
        assert!(woken[0].ready && !woken[0].failed);
        assert_eq!(efd.drain().unwrap(), 2);
        assert_eq!(efd.drain().unwrap(), 0);
    }
}
