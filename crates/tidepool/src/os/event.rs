//! `poll(2)` and a wake-up descriptor: how the reclaimer thread sleeps
//! until a deadline, a pressure signal or a wake-up.
//!
//! The wake-up descriptor is an `eventfd(2)` on Linux and a connected
//! socket pair elsewhere (POSIX, and made by `std` without `unsafe`); both
//! are non-blocking and close-on-exec, and both stay readable from a
//! `signal` until the next `drain`.
//!
//! pre: none; every failure is an `io::Error`.

#[cfg(target_os = "linux")]
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
#[cfg(target_os = "linux")]
use std::os::fd::{FromRawFd, OwnedFd};
#[cfg(any(test, not(target_os = "linux")))]
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::pressure::Interest;

/// A counter the kernel makes pollable: `signal` makes it readable until
/// `drain`.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct EventFd(File);

#[cfg(target_os = "linux")]
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

#[cfg(target_os = "linux")]
impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The wake-up descriptor where there is no `eventfd`.
#[cfg(not(target_os = "linux"))]
pub(crate) type EventFd = PairWaker;

/// The same as [`EventFd`], without `eventfd`: a byte written to one end of
/// a socket pair per `signal`, all read back from the other end by `drain`.
/// Built on Linux too, for its tests.
#[cfg(any(test, not(target_os = "linux")))]
#[derive(Debug)]
pub(crate) struct PairWaker {
    read: UnixStream,
    write: UnixStream,
}

#[cfg(any(test, not(target_os = "linux")))]
impl PairWaker {
    /// A non-blocking socket pair (`std` makes it close-on-exec).
    pub(crate) fn new() -> io::Result<Self> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        Ok(Self { read, write })
    }

    /// Makes the read end readable. A full socket buffer is already
    /// readable, so `WouldBlock` is success.
    pub(crate) fn signal(&self) -> io::Result<()> {
        match (&self.write).write(&[1]) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads every pending byte; returns how many signals that was (0 if
    /// none).
    pub(crate) fn drain(&self) -> io::Result<u64> {
        let mut buf = [0u8; 64];
        let mut total = 0u64;
        loop {
            match (&self.read).read(&mut buf) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Ok(n) => total += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(any(test, not(target_os = "linux")))]
impl AsFd for PairWaker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
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
    fn a_signalled_eventfd_wakes_poll_until_drained() {
        wakes_poll_until_drained(&EventFd::new().unwrap());
    }

    /// The waker of systems without `eventfd`, checked here on any Unix.
    #[test]
    fn a_signalled_socket_pair_wakes_poll_until_drained() {
        let pair = PairWaker::new().unwrap();
        wakes_poll_until_drained(&pair);
        // More signals than the socket buffer holds: `signal` still
        // succeeds (the socket stays readable), `drain` empties it.
        const SIGNALS: u64 = 100_000;
        for _ in 0..SIGNALS {
            pair.signal().unwrap();
        }
        let woken = poll(&[(pair.as_fd(), Interest::Readable)], None).unwrap();
        assert!(woken[0].ready);
        let drained = pair.drain().unwrap();
        assert!(
            drained > 0 && drained < SIGNALS,
            "{drained}: the buffer never filled"
        );
        assert_eq!(pair.drain().unwrap(), 0);
    }

    trait Waker: AsFd {
        fn signal(&self) -> io::Result<()>;
        fn drain(&self) -> io::Result<u64>;
    }
    impl Waker for EventFd {
        fn signal(&self) -> io::Result<()> {
            EventFd::signal(self)
        }
        fn drain(&self) -> io::Result<u64> {
            EventFd::drain(self)
        }
    }
    #[cfg(target_os = "linux")]
    impl Waker for PairWaker {
        fn signal(&self) -> io::Result<()> {
            PairWaker::signal(self)
        }
        fn drain(&self) -> io::Result<u64> {
            PairWaker::drain(self)
        }
    }

    fn wakes_poll_until_drained(efd: &impl Waker) {
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
