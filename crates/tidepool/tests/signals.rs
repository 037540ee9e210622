//! Threads tidepool starts take no signals: a process-directed signal the
//! application blocks in its own threads (to read it from a `signalfd`, as
//! QEMU does with SIGALRM, SIGIO and SIGBUS) stays pending for it, rather
//! than being delivered to tidepool's reclaimer, where its default action
//! would end the process.
//!
//! Run in a forked copy of a child test process: the forked process has
//! one thread of the test's, so the signal has nowhere else to go.

#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::child::{self, wait_until};
use tidepool::Pool;

/// Waits (bounded) until the reclaimer thread runs.
fn until_reclaimer_runs() {
    let (_, running) = wait_until(
        Duration::from_secs(10),
        || tidepool::reclaim::status().running,
        |&running| running,
    );
    assert!(running, "no reclaimer");
}

/// Blocks `sig` in this thread and opens a `signalfd` for it.
fn block_and_watch(sig: libc::c_int) -> libc::c_int {
    // SAFETY: `set` is a valid signal set, initialised by `sigemptyset`
    // before use; the calls take pointers to it only for their duration.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
            0
        );
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        assert!(fd >= 0, "signalfd: {}", std::io::Error::last_os_error());
        fd
    }
}

/// Reads one signal from `fd`: its number.
fn read_signal(fd: libc::c_int) -> u32 {
    // SAFETY: `info` is a plain-data struct the kernel fills; `read` writes
    // at most its size into it.
    unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let n = libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size);
        assert_eq!(n, size as isize, "{}", std::io::Error::last_os_error());
        info.ssi_signo
    }
}

/// The pool (and with it the reclaimer thread) comes first, as in QEMU,
/// whose pool is set up by a constructor before `main` blocks its signals.
#[test]
fn a_signal_blocked_by_the_application_reaches_its_signalfd_not_the_reclaimer() {
    const NAME: &str = "a_signal_blocked_by_the_application_reaches_its_signalfd_not_the_reclaimer";
    child::run(NAME, || {
        let outcome = child::fork_and_wait(Duration::from_secs(30), || {
            let pool = Pool::new(|| 0u64);
            drop(pool.get().unwrap());
            until_reclaimer_runs();
            for sig in [libc::SIGALRM, libc::SIGIO] {
                let fd = block_and_watch(sig);
                // SAFETY: signals this very process.
                assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0);
                assert_eq!(read_signal(fd), sig as u32);
                // SAFETY: `fd` is ours, opened above.
                unsafe { libc::close(fd) };
            }
            assert!(tidepool::reclaim::status().running);
        });
        assert_eq!(outcome, Ok(()), "the forked process did not survive");
    });
}
