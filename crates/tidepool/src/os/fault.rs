//! Fault injection (feature `fault-injection`, off by default): makes the
//! `n`th call of a kind of kernel call fail with a chosen `errno`, so that
//! tests can walk every call site of `os/` and check what a failure does.
//! Without the feature, [`check`] is an empty inline function.
//!
//! What a failure of each call does (`tests/faults.rs` walks each one
//! with `ENOMEM`, `EAGAIN`, `EPERM` and `EINVAL` at each of its first six
//! calls, and checks that nothing panics, counts stay exact and nothing is
//! unmapped twice):
//!
//! | call | where | a failure |
//! |---|---|---|
//! | `mmap` | a stack slab (a refill), `Region::reserve`, the guard-marker probe | the get fails with a `StackError` (a stack pool first has every stack pool give back its idle stacks and retries once); `reserve` returns the error; the probe reports no markers |
//! | `mprotect` | opening a stack slot, a `PROT_NONE` guard, `Region::set_accessible` | the get fails (the slot goes back, an empty slab is unmapped); the region is unchanged and the error returned |
//! | `madvise` | guard markers, page release (purge, reset) | markers fall back to `mprotect` guards (logged once); a purge leaves the stack resident (`purge_failures`); a region reset fails and the region is destroyed (`reset_failures`) |
//! | `munmap` | destroying a slab or region | counted (`unmap_failures`); the range stays mapped, leaked, never unmapped twice |
//! | `mincore` | `resident_bytes`, a region reset | the error is returned; the reset releases the region's pages and it is destroyed |
//! | thread spawn | the reclaimer | the pool works without it (reclaim runs on depot visits); a later operation starts it |
//! | `membarrier` | taking a busy thread's idle cache (drain, critical pressure, a get at `max_live`) | the cache's owner is asked to hand it back at its next operation instead |
//! | `eventfd` | the reclaimer's wake-up descriptor | the reclaimer wakes on a 100 ms timer instead of being woken |
//! | `poll` | the reclaimer's sleep | a 100 ms nap instead; pressure sources are not read that round |
//! | `pthread_atfork` | the fork handlers, once per process | logged with `log::warn!`; a child forked while tidepool holds a process-wide lock may find it held |
//! | system counts | `/proc/sys/vm/max_map_count` (a pool's map-count caps: stack pools, `maps_per_object`; explaining an `ENOMEM`), `/proc/self/maps` (explaining an `ENOMEM`), the CPU count (`available_parallelism`, a pool's teardown threads) | the kernel's default map count, 65530, is assumed ([`BudgetSource::Fallback`](crate::stack::BudgetSource::Fallback)); an `ENOMEM` is reported as [`StackError::OutOfMemory`](crate::stack::StackError::OutOfMemory) with `vmas` 0; one teardown thread at a time |
//! | pressure files | opening a default source at the reclaimer's start (`/proc/self/cgroup`, `/proc/pressure/memory`, a cgroup's `memory.pressure`, cgroup v1's `memory.pressure_level` and `cgroup.event_control`), or one built by hand ([`PsiTrigger::new`](crate::pressure::PsiTrigger::new), [`CgroupV1Pressure::new`](crate::pressure::CgroupV1Pressure::new)) | that source is not watched: reported once with `log::warn!` and in [`pressure::sources`](crate::pressure::sources); a source built by hand returns the error; pools work without it, and [`pressure::notify`](crate::pressure::notify) still reaches them |
//!
//! With the feature it also keeps the set of mappings `reserve` made and
//! `unmap` has not removed, so that an `munmap` of a region that is not
//! mapped (a double unmap) is counted ([`double_unmaps`]) instead of
//! passing unseen.

use std::io;

/// A kind of kernel call that `os/` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// `mmap` of a reservation (`reserve`).
    Mmap,
    /// `mprotect`: opening pages, or closing them (`PROT_NONE` guards).
    Mprotect,
    /// `madvise`: guard markers (`MADV_GUARD_INSTALL`) and page release
    /// (`MADV_DONTNEED` / `MADV_FREE`).
    Madvise,
    /// `munmap`.
    Munmap,
    /// `mincore` (residency counts, region resets).
    Mincore,
    /// Starting one of tidepool's own threads (the reclaimer).
    Spawn,
    /// `membarrier(2)` (taking another thread's idle cache).
    Membarrier,
    /// Opening the reclaimer's wake-up descriptor (`eventfd`).
    EventFd,
    /// The reclaimer's `poll(2)`.
    Poll,
    /// `pthread_atfork` (installing the fork handlers).
    Atfork,
    /// Opening, reading or writing a pressure source's file (`os/file.rs`):
    /// `/proc/self/cgroup`, a PSI trigger, cgroup v1's pressure files.
    PressureFile,
    /// Reading a count the system keeps: `vm.max_map_count`, the VMAs in
    /// `/proc/self/maps`, the CPUs this process may use.
    SystemCount,
}

/// Every kind, in declaration order.
pub const CALLS: [Call; 12] = [
    Call::Mmap,
    Call::Mprotect,
    Call::Madvise,
    Call::Munmap,
    Call::Mincore,
    Call::Spawn,
    Call::Membarrier,
    Call::EventFd,
    Call::Poll,
    Call::Atfork,
    Call::PressureFile,
    Call::SystemCount,
];

#[cfg(all(feature = "fault-injection", not(loom)))]
mod armed {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};

    use parking_lot::Mutex;

    use super::{Call, CALLS};

    /// Per kind: calls left before the failing one (0: none armed) in the
    /// high half, the errno in the low half.
    static RULES: [AtomicU64; CALLS.len()] = [const { AtomicU64::new(0) }; CALLS.len()];
    static INJECTED: [AtomicU64; CALLS.len()] = [const { AtomicU64::new(0) }; CALLS.len()];
    static DOUBLE_UNMAPS: AtomicU64 = AtomicU64::new(0);
    /// Mapped regions: start -> length.
    static MAPPED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

    fn index(call: Call) -> usize {
        CALLS
            .iter()
            .position(|&c| c == call)
            .expect("every kind is listed")
    }

    pub(super) fn arm(call: Call, n: u32, errno: i32) {
        let word = (u64::from(n) << 32) | u64::from(errno as u32);
        RULES[index(call)].store(word, Ordering::SeqCst);
    }

    pub(super) fn disarm_all() {
        for rule in &RULES {
            rule.store(0, Ordering::SeqCst);
        }
    }

    /// The errno to fail this call with, if it is the armed one.
    pub(super) fn fires(call: Call) -> Option<i32> {
        let rule = &RULES[index(call)];
        let mut word = rule.load(Ordering::SeqCst);
        loop {
            let left = word >> 32;
            if left == 0 {
                return None;
            }
            let next = if left == 1 { 0 } else { word - (1 << 32) };
            match rule.compare_exchange(word, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) if left == 1 => {
                    INJECTED[index(call)].fetch_add(1, Ordering::SeqCst);
                    return Some(word as u32 as i32);
                }
                Ok(_) => return None,
                Err(now) => word = now,
            }
        }
    }

    pub(super) fn injected(call: Call) -> u64 {
        INJECTED[index(call)].load(Ordering::SeqCst)
    }

    pub(super) fn mapped(start: usize, len: usize) {
        MAPPED.lock().insert(start, len);
    }

    pub(super) fn unmapped(start: usize, len: usize) {
        let mut map = MAPPED.lock();
        // Whole regions or parts of one: find the region holding `start`.
        let holder = map.range(..=start).next_back().map(|(&s, &l)| (s, l));
        match holder {
            Some((s, l)) if start + len <= s + l => {
                map.remove(&s);
                if start > s {
                    map.insert(s, start - s);
                }
                if start + len < s + l {
                    map.insert(start + len, s + l - start - len);
                }
            }
            _ => {
                DOUBLE_UNMAPS.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    pub(super) fn double_unmaps() -> u64 {
        DOUBLE_UNMAPS.load(Ordering::SeqCst)
    }
}

/// Fails the `n`th call of `call` from now on (1: the next one) with
/// `errno`, once; `n` 0 disarms it. Process-wide: tests that arm faults
/// run one at a time.
#[cfg(all(feature = "fault-injection", not(loom)))]
pub fn fail_nth(call: Call, n: u32, errno: i32) {
    armed::arm(call, n, errno);
}

/// Disarms every kind.
#[cfg(all(feature = "fault-injection", not(loom)))]
pub fn disarm_all() {
    armed::disarm_all();
}

/// How many calls of `call` have failed by injection.
#[cfg(all(feature = "fault-injection", not(loom)))]
pub fn injected(call: Call) -> u64 {
    armed::injected(call)
}

/// `munmap`s of regions that were not mapped (by `reserve`, and not
/// unmapped since): 0 unless something unmapped twice.
#[cfg(all(feature = "fault-injection", not(loom)))]
pub fn double_unmaps() -> u64 {
    armed::double_unmaps()
}

/// Fails with the injected errno if this call of `call` is the armed one.
#[inline(always)]
pub(crate) fn check(call: Call) -> io::Result<()> {
    #[cfg(all(feature = "fault-injection", not(loom)))]
    if let Some(errno) = armed::fires(call) {
        return Err(io::Error::from_raw_os_error(errno));
    }
    let _ = call;
    Ok(())
}

/// Records a new mapping (for [`double_unmaps`]).
#[inline(always)]
pub(crate) fn note_mapped(start: usize, len: usize) {
    #[cfg(all(feature = "fault-injection", not(loom)))]
    armed::mapped(start, len);
    let _ = (start, len);
}

/// Records an unmapping (for [`double_unmaps`]).
#[inline(always)]
pub(crate) fn note_unmapped(start: usize, len: usize) {
    #[cfg(all(feature = "fault-injection", not(loom)))]
    armed::unmapped(start, len);
    let _ = (start, len);
}

#[cfg(all(test, feature = "fault-injection", not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_unmap_of_what_is_not_mapped_is_counted() {
        // Addresses no mapping of this process has (page 1 onwards).
        let before = double_unmaps();
        note_mapped(0x1000, 0x3000);
        note_unmapped(0x2000, 0x1000); // the middle: two parts left
        note_unmapped(0x1000, 0x1000);
        note_unmapped(0x3000, 0x1000);
        assert_eq!(double_unmaps(), before);
        note_unmapped(0x1000, 0x1000);
        assert_eq!(double_unmaps(), before + 1);
    }
}
