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

use crate::sync::process::{AtomicU64, Ordering};

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
///
/// Reading them costs a few file reads under a cgroup (`cpu.max` and its
/// parents), far more than building a pool, so the count is read once and
/// kept. It can change at any time (`sched_setaffinity`, a new cgroup
/// quota), so the reclaimer thread reads it again at most once a second
/// ([`refresh_cpus`]), off every caller's path; a process without a
/// reclaimer keeps its first reading. A failed read is not kept.
pub(crate) fn cpus() -> usize {
    match CPUS.load(Ordering::Relaxed) {
        0 => refresh_cpus(),
        n => n as usize,
    }
}

/// Reads the CPU count again and keeps it (see [`cpus`]); returns it.
pub(crate) fn refresh_cpus() -> usize {
    if super::fault::check(super::fault::Call::SystemCount).is_err() {
        return 1;
    }
    match std::thread::available_parallelism() {
        Ok(n) => {
            CPUS.store(n.get() as u64, Ordering::Relaxed);
            n.get()
        }
        Err(_) => 1,
    }
}

/// The CPU count last read; 0 before the first read.
static CPUS: AtomicU64 = AtomicU64::new(0);

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
