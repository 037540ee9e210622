//! The heavy half of an asymmetric fence: `membarrier(2)`.
//!
//! A thread cache's owner starts each access by storing its operation count
//! into `entered` and then, after only a compiler fence, loads the slot's
//! state; a remote thread revoking the cache stores `REVOKING`, calls
//! [`heavy_fence`], then loads `entered` and the counters (see
//! `cache/slot.rs`). The syscall makes every thread of the process that is
//! running at that moment execute a full memory barrier (threads that are
//! not running pass through the scheduler, which orders their accesses the
//! same way), so one of the two always sees the other's store: the owner's
//! hot path pays for a compiler fence, the rare remote path for a syscall
//! (folly's `asymmetric_thread_fence_heavy`, liburcu's `sys_membarrier`
//! flavour).
//!
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (microseconds, this process only) is
//! used where the kernel has it; it needs a registration, done once. A
//! forked child may not inherit that registration (it is per address
//! space), so a barrier refused with `EPERM` registers again and retries
//! once. Otherwise `MEMBARRIER_CMD_GLOBAL` (a grace period across all CPUs:
//! milliseconds, but only revokers wait for it).
//!
//! pre: none. Returns `false` when the kernel offers no suitable command
//! (older than 4.3, or filtered by seccomp); callers must then not rely on
//! the fence: revokers only ask owners to flush.

use std::sync::OnceLock;

// From <linux/membarrier.h>; stable kernel ABI.
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: `membarrier` takes two integer arguments and touches no user
    // memory; an unsupported command fails with an errno, nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

/// The command to issue, found (and registered for) once per process.
fn command() -> Option<libc::c_long> {
    static COMMAND: OnceLock<Option<libc::c_long>> = OnceLock::new();
    *COMMAND.get_or_init(|| {
        let supported = membarrier(MEMBARRIER_CMD_QUERY);
        if supported < 0 {
            return None;
        }
        if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
            && supported & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
        {
            // Interrupts only this process's running threads: microseconds.
            return Some(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
        }
        // Waits for a grace period across all CPUs: milliseconds, but only
        // the reclaimer ever waits.
        (supported & MEMBARRIER_CMD_GLOBAL != 0).then_some(MEMBARRIER_CMD_GLOBAL)
    })
}

/// Whether [`heavy_fence`] has a command to issue (registering for it the
/// first time).
pub(crate) fn available() -> bool {
    command().is_some()
}

/// Issues a process-wide memory barrier. `false` if none is available.
pub(crate) fn heavy_fence() -> bool {
    let Some(cmd) = command() else {
        return false;
    };
    if super::fault::check(super::fault::Call::Membarrier).is_err() {
        return false;
    }
    if membarrier(cmd) == 0 {
        return true;
    }
    // A forked child starts unregistered for the expedited command.
    cmd == MEMBARRIER_CMD_PRIVATE_EXPEDITED
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
        && membarrier(cmd) == 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    #[cfg_attr(
        miri,
        ignore = "membarrier(2) is a real kernel call miri does not emulate"
    )]
    fn a_barrier_is_available_and_repeatable() {
        // Every kernel this crate supports in CI (Linux >= 4.14) has one; if
        // this fails, remote cache revocation silently degrades to flush
        // requests, which the reclaim tests would then catch too.
        assert!(super::heavy_fence());
        assert!(super::heavy_fence());
    }
}
