//! Starting tidepool's own threads: named, and with every signal blocked
//! but those a fault of the thread's own raises.
//!
//! A process-directed signal goes to any thread that does not block it.
//! Applications that read their signals from a `signalfd` or `sigwait`
//! (QEMU: SIGALRM, SIGIO, SIGBUS) block them in their own threads; a thread
//! of tidepool's that left them unblocked would receive them instead, and
//! their default action ends the process. So a thread is started with the
//! creating thread's mask set to "all blocked" (the new thread inherits
//! it), and the creating thread's own mask is restored right after, as
//! jemalloc does for its background threads. Signals a fault raises in the
//! thread itself stay unblocked (SIGSEGV, SIGILL, SIGFPE, SIGTRAP), so that
//! the application's handlers for them (guard pages, a runtime's traps)
//! and Rust's stack-overflow report still see a fault on this thread; no
//! one sends those to a process. SIGBUS stays blocked: QEMU reads
//! machine-check errors sent to the process as SIGBUS from a `signalfd`.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Starts `f` on a new thread named `name` that blocks every signal but
/// the fault signals (see the module docs).
///
/// # Errors
///
/// If the thread cannot be started ([`Builder::spawn`]'s error).
pub(crate) fn spawn_quiet<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    super::fault::check(super::fault::Call::Spawn)?;
    let builder = Builder::new().name(name.to_owned());
    #[cfg(all(unix, not(miri)))]
    let _mask = AllBlocked::new();
    builder.spawn(f)
}

/// The CPUs this process may use (`available_parallelism`: its affinity
/// mask and cgroup quota); 1 if that cannot be read.
pub(crate) fn cpus() -> usize {
    if super::fault::check(super::fault::Call::SystemCount).is_err() {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The calling thread's signal mask set to "all blocked" for as long as
/// this lives; the previous mask comes back on drop.
#[cfg(all(unix, not(miri)))]
struct AllBlocked {
    /// The mask to restore; `None` if it could not be changed (then the
    /// thread starts with the caller's mask, as any thread would).
    old: Option<libc::sigset_t>,
}

#[cfg(all(unix, not(miri)))]
impl AllBlocked {
    fn new() -> Self {
        // SAFETY: `all` and `old` are plain signal sets, filled by
        // `sigfillset` and `pthread_sigmask` before they are read; the
        // calls take pointers to them only for their duration.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            for fault in [libc::SIGSEGV, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP] {
                libc::sigdelset(&mut all, fault);
            }
            let changed = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) == 0;
            Self {
                old: changed.then_some(old),
            }
        }
    }
}

#[cfg(all(unix, not(miri)))]
impl Drop for AllBlocked {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            // SAFETY: `old` is the mask `pthread_sigmask` gave back in
            // `new`; setting it again restores the caller's mask.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
        }
    }
}
