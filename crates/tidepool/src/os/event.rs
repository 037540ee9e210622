//! `poll(2)` and a wake-up descriptor: how the reclaimer thread sleeps
//! until a deadline, a pressure signal or a wake-up.
//!
//! The wake-up descriptor ([`WakeFd`]) is an `eventfd(2)` on Linux and a
//! connected socket pair elsewhere; both are non-blocking and close-on-exec,
//! and both stay readable from a `signal` until the next `drain`. It lives in
//! a `static`, and a forked child replaces its copy (the parent's is shared
//! with it by `fork`).
//!
//! pre: none; every failure is an `io::Error`. Nothing here knows what it is
//! waiting for: callers say which readiness they want ([`PollFor`]).

#[cfg(target_os = "linux")]
use std::fs::File;
use std::io;
#[cfg(all(test, not(loom)))]
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, RawFd};
#[cfg(target_os = "linux")]
use std::os::fd::{FromRawFd, OwnedFd};
#[cfg(any(test, not(target_os = "linux")))]
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::sync::process::{AtomicI32, Ordering};

/// A counter the kernel makes pollable: `signal` makes it readable until
/// `drain`.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct EventFd(File);

/// A new non-blocking, close-on-exec eventfd at zero.
#[cfg(target_os = "linux")]
fn eventfd() -> io::Result<OwnedFd> {
    super::fault::check(super::fault::Call::EventFd)?;
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

/// `write(2)` of `bytes` to a borrowed descriptor; `Ok(false)` if it would
/// block.
fn write_raw(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<bool> {
    // SAFETY: writes `bytes.len()` bytes from a live slice to a borrowed
    // (so open) descriptor.
    let rc = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if rc >= 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.kind() {
        io::ErrorKind::WouldBlock => Ok(false),
        _ => Err(err),
    }
}

/// `read(2)` into `buf` from a borrowed descriptor; `Ok(None)` if it would
/// block.
fn read_raw(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: reads at most `buf.len()` bytes into a live, writable buffer
    // from a borrowed (so open) descriptor.
    let rc = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc >= 0 {
        return Ok(Some(rc as usize));
    }
    let err = io::Error::last_os_error();
    match err.kind() {
        io::ErrorKind::WouldBlock => Ok(None),
        _ => Err(err),
    }
}

/// Adds one to an eventfd's counter.
#[cfg(target_os = "linux")]
fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    write_raw(fd, &1u64.to_ne_bytes()).map(drop)
}

/// Reads and resets an eventfd's counter; 0 if it was already zero.
#[cfg(target_os = "linux")]
fn eventfd_drain(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    match read_raw(fd, &mut buf)? {
        Some(8) => Ok(u64::from_ne_bytes(buf)),
        Some(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
        None => Ok(0),
    }
}

/// Reads every pending byte of a socket; how many (0 if none).
#[cfg(any(test, not(target_os = "linux")))]
fn pair_drain(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 64];
    let mut total = 0u64;
    loop {
        match read_raw(fd, &mut buf) {
            Ok(Some(0)) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(Some(n)) => total += n as u64,
            Ok(None) => return Ok(total),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(target_os = "linux")]
impl EventFd {
    /// A non-blocking, close-on-exec eventfd at zero.
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Self(File::from(eventfd()?)))
    }

    /// Adds one to the counter, waking a `poll` on it.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn signal(&self) -> io::Result<()> {
        eventfd_signal(self.0.as_fd())
    }

    /// Reads and resets the counter; 0 if it was already zero.
    pub(crate) fn drain(&self) -> io::Result<u64> {
        eventfd_drain(self.0.as_fd())
    }
}

#[cfg(target_os = "linux")]
impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

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
    #[cfg(all(test, not(loom)))]
    pub(crate) fn signal(&self) -> io::Result<()> {
        match (&self.write).write(&[1]) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads every pending byte; returns how many signals that was (0 if
    /// none).
    #[cfg(all(test, not(loom)))]
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

/// No descriptor.
const NONE: RawFd = -1;

/// The process-wide wake-up descriptor, for a `static`, which a forked
/// child can drop: the parent's descriptor is shared with the child by
/// `fork`, so a child signalling it would wake the parent's sleeper.
///
/// Its descriptors (one eventfd on Linux, both ends of a socket pair
/// elsewhere) are opened once ([`open`](WakeFd::open)) and then stay open
/// for the life of the process, except that
/// [`forget_after_fork`](WakeFd::forget_after_fork) closes the child's
/// copies from the child's `pthread_atfork` handler, when no other thread
/// exists.
#[derive(Debug)]
pub(crate) struct WakeFd {
    /// What `poll` waits on.
    read: AtomicI32,
    /// What `signal` writes to (the same eventfd on Linux).
    write: AtomicI32,
}

impl WakeFd {
    pub(crate) const fn new() -> Self {
        Self {
            read: AtomicI32::new(NONE),
            write: AtomicI32::new(NONE),
        }
    }

    /// Opens the descriptors unless they are open. Callers serialise calls
    /// to this (the reclaimer registry's lock).
    pub(crate) fn open(&self) -> io::Result<()> {
        if self.read.load(Ordering::Acquire) != NONE {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        let (read, write) = {
            let fd = eventfd()?.into_raw_fd();
            (fd, fd)
        };
        #[cfg(not(target_os = "linux"))]
        let (read, write) = {
            let pair = PairWaker::new()?;
            (pair.read.into_raw_fd(), pair.write.into_raw_fd())
        };
        // `write` first: a reader that sees `read` open may signal.
        self.write.store(write, Ordering::Release);
        self.read.store(read, Ordering::Release);
        Ok(())
    }

    /// One of the descriptors, if open.
    fn get(fd: &AtomicI32) -> Option<BorrowedFd<'_>> {
        let fd = fd.load(Ordering::Acquire);
        // SAFETY: a descriptor stored here is open and owned by the
        // `WakeFd` until `forget_after_fork`, which runs only when no other
        // thread of the process exists, so it cannot close it under a borrow
        // (which lives as long as the `&self` it came from, at most).
        (fd != NONE).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Wakes whoever polls the descriptor; nothing if it is not open.
    pub(crate) fn signal(&self) {
        if let Some(fd) = Self::get(&self.write) {
            // A full socket buffer (or eventfd counter) is readable already.
            #[cfg(target_os = "linux")]
            let _ = eventfd_signal(fd);
            #[cfg(not(target_os = "linux"))]
            let _ = write_raw(fd, &[1]);
        }
    }

    /// Waits like [`poll`], with the wake-up descriptor first in the list
    /// (and drained afterwards). `None` if it is not open.
    pub(crate) fn poll_with(
        &self,
        others: &[(BorrowedFd<'_>, PollFor)],
        timeout: Option<Duration>,
    ) -> Option<io::Result<Vec<Ready>>> {
        let fd = Self::get(&self.read)?;
        let mut fds = Vec::with_capacity(1 + others.len());
        fds.push((fd, PollFor::Readable));
        fds.extend_from_slice(others);
        let ready = poll(&fds, timeout);
        #[cfg(target_os = "linux")]
        let _ = eventfd_drain(fd);
        #[cfg(not(target_os = "linux"))]
        let _ = pair_drain(fd);
        Some(ready)
    }

    /// In a forked child, from its `pthread_atfork` child handler (only the
    /// forking thread exists): closes the child's copies of the parent's
    /// descriptors, so the next [`open`](WakeFd::open) makes its own.
    /// Async-signal-safe (`close` only).
    pub(crate) fn forget_after_fork(&self) {
        let read = self.read.swap(NONE, Ordering::AcqRel);
        let write = self.write.swap(NONE, Ordering::AcqRel);
        // One eventfd (Linux) is both: closed once.
        let write = if write == read { NONE } else { write };
        for fd in [read, write] {
            if fd != NONE {
                // SAFETY: `fd` was ours (see `get`), and no borrow of it
                // exists: the threads that could hold one did not survive
                // the fork.
                unsafe { libc::close(fd) };
            }
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
    super::fault::check(super::fault::Call::Poll)?;
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

    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "poll(2) is a real kernel call miri does not emulate")]
    fn a_signalled_eventfd_wakes_poll_until_drained() {
        wakes_poll_until_drained(&EventFd::new().unwrap());
    }

    /// The waker of systems without `eventfd`, checked here on any Unix.
    #[test]
    #[cfg_attr(miri, ignore = "poll(2) is a real kernel call miri does not emulate")]
    fn a_signalled_socket_pair_wakes_poll_until_drained() {
        let pair = PairWaker::new().unwrap();
        wakes_poll_until_drained(&pair);
        // More signals than the socket buffer holds: `signal` still
        // succeeds (the socket stays readable), `drain` empties it.
        const SIGNALS: u64 = 100_000;
        for _ in 0..SIGNALS {
            pair.signal().unwrap();
        }
        let woken = poll(&[(pair.as_fd(), PollFor::Readable)], None).unwrap();
        assert!(woken[0].ready);
        let drained = pair.drain().unwrap();
        assert!(
            drained > 0 && drained < SIGNALS,
            "{drained}: the buffer never filled"
        );
        assert_eq!(pair.drain().unwrap(), 0);
        assert_eq!(pair_drain(pair.as_fd()).unwrap(), 0);
    }

    trait Waker: AsFd {
        fn signal(&self) -> io::Result<()>;
        fn drain(&self) -> io::Result<u64>;
    }
    #[cfg(target_os = "linux")]
    impl Waker for EventFd {
        fn signal(&self) -> io::Result<()> {
            EventFd::signal(self)
        }
        fn drain(&self) -> io::Result<u64> {
            EventFd::drain(self)
        }
    }
    impl Waker for PairWaker {
        fn signal(&self) -> io::Result<()> {
            PairWaker::signal(self)
        }
        fn drain(&self) -> io::Result<u64> {
            PairWaker::drain(self)
        }
    }

    fn wakes_poll_until_drained(efd: &impl Waker) {
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
    #[cfg_attr(miri, ignore = "poll(2) is a real kernel call miri does not emulate")]
    fn a_wake_fd_opens_once_and_wakes_its_poll() {
        let wake = WakeFd::new();
        assert!(wake.poll_with(&[], Some(Duration::ZERO)).is_none());
        wake.signal(); // not open: nothing
        wake.open().unwrap();
        let fd = wake.read.load(Ordering::Relaxed);
        wake.open().unwrap();
        assert_eq!(wake.read.load(Ordering::Relaxed), fd, "opened once");
        let quiet = wake.poll_with(&[], Some(Duration::ZERO)).unwrap().unwrap();
        assert!(!quiet[0].ready);
        wake.signal();
        wake.signal();
        let woken = wake.poll_with(&[], None).unwrap().unwrap();
        assert!(woken[0].ready);
        let drained = wake.poll_with(&[], Some(Duration::ZERO)).unwrap().unwrap();
        assert!(!drained[0].ready, "drained by the poll before");
        wake.forget_after_fork();
        assert!(wake.poll_with(&[], Some(Duration::ZERO)).is_none());
    }
}
