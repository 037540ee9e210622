//! The one audited place where tidepool talks to the kernel directly.
//!
//! * This file: mapping, protecting, advising and unmapping memory. Nothing
//!   else in the crate calls `mmap`, `mprotect`, `madvise`, `munmap` or
//!   `mincore` (the workspace `clippy.toml` refuses them elsewhere; only
//!   this file allows them).
//! * [`event`]: `eventfd(2)` and `poll(2)`, for the reclaimer thread.
//! * [`membarrier`]: `membarrier(2)`, the heavy half of the asymmetric fence
//!   that lets another thread take an idle thread cache.
//!
//! The submodules state their own (smaller) contracts at their tops.
//!
//! # Contract of the memory functions
//!
//! Every function in this file keeps to the same rules, stated once:
//!
//! * **Alignment**: every address passed in or handed out is a multiple of
//!   [`page_size`]; every length is a non-zero multiple of it. The kernel
//!   would refuse anything else with `EINVAL`; the wrappers check first and
//!   return that error themselves, so a bad caller gets an error, not UB.
//! * **Ownership**: a region handed to a function here is one this module
//!   mapped with [`map_guarded`] and that has not been unmapped. The caller
//!   owns it exclusively, and no Rust reference points into it while it is
//!   unmapped or its pages are released.
//! * **Errors**: failures come back as [`std::io::Error`] from `errno`; no
//!   function panics or aborts. A failed [`map_guarded`] leaves nothing
//!   mapped.
//! * Each function lists its own preconditions as `pre:` lines.
//!
//! Failures that cannot be reported to anyone (an `munmap` from a `Drop`)
//! are counted in [`unmap_failures`] instead of panicking.
pub(crate) mod event;
pub(crate) mod membarrier;

use crate::sync::process::{AtomicU64, Ordering};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::OnceLock;

/// Which system call of [`map_guarded`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapStep {
    /// Reserving the address range (`mmap`).
    Reserve,
    /// Making the part above the guard writable (`mprotect`).
    Protect,
}

/// Why [`map_guarded`] failed. Nothing is left mapped.
#[derive(Debug)]
pub(crate) struct MapFailure {
    pub(crate) step: MapStep,
    pub(crate) error: io::Error,
}

static UNMAP_FAILURES: AtomicU64 = AtomicU64::new(0);

/// The size of a memory page, read once from the OS.
pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: `sysconf` only reads a system constant.
        let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        match usize::try_from(raw) {
            Ok(page) if page.is_power_of_two() => page,
            // POSIX guarantees a positive power of two; 4 KiB is the
            // smallest page of every Linux target, so it stays aligned.
            _ => 4096,
        }
    })
}

fn check_region(addr: usize, len: usize) -> io::Result<()> {
    let page = page_size();
    if len == 0 || len % page != 0 || addr % page != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

/// Maps `guard + usable` bytes of private anonymous memory: the lowest
/// `guard` bytes inaccessible (`PROT_NONE`), the `usable` bytes above them
/// readable and writable. Returns the lowest address (the guard's start).
///
/// This is two VMAs, built the way corosensei and wasmtime build stacks:
/// reserve everything `PROT_NONE`, then open the part above the guard. If
/// the second step fails (`ENOMEM` at `vm.max_map_count`: the split needs a
/// new VMA) the reservation is unmapped before returning, so a failure maps
/// nothing.
///
/// pre: `guard` and `usable` are non-zero multiples of [`page_size`] whose
/// sum does not overflow (checked: `EINVAL` otherwise).
#[allow(clippy::disallowed_methods)] // the audited call site
pub(crate) fn map_guarded(guard: usize, usable: usize) -> Result<NonNull<u8>, MapFailure> {
    let reserve = |error| MapFailure {
        step: MapStep::Reserve,
        error,
    };
    let len = guard
        .checked_add(usable)
        .ok_or_else(|| reserve(io::Error::from_raw_os_error(libc::EINVAL)))?;
    check_region(0, guard).map_err(reserve)?;
    check_region(0, usable).map_err(reserve)?;

    // MAP_STACK: a hint today, and on Linux 6.7+ it keeps transparent huge
    // pages off stacks, which would make a 4 KiB coroutine stack cost 2 MiB.
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's
    // choosing (null hint, no MAP_FIXED) aliases nothing; `len` is non-zero.
    let raw = unsafe { libc::mmap(ptr::null_mut(), len, libc::PROT_NONE, flags, -1, 0) };
    if raw == libc::MAP_FAILED {
        return Err(reserve(io::Error::last_os_error()));
    }
    let Some(start) = NonNull::new(raw.cast::<u8>()) else {
        // The kernel never maps page 0 for an anonymous hint-less mapping;
        // stay correct regardless.
        return Err(reserve(io::Error::from_raw_os_error(libc::EFAULT)));
    };
    // SAFETY: `guard < len`, so the result lies inside the mapping just made.
    let usable_start = unsafe { start.as_ptr().add(guard) };
    // SAFETY: `[usable_start, usable_start + usable)` is the upper part of
    // the mapping just made, owned by us alone and page-aligned.
    let rc = unsafe {
        libc::mprotect(
            usable_start.cast(),
            usable,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if rc != 0 {
        let error = io::Error::last_os_error();
        // Not a leak: the reservation goes. Unmapping the whole of a
        // mapping never splits a VMA of ours, so it does not need a new one
        // and succeeds even at the map-count limit.
        // SAFETY: `[start, start + len)` was mapped above and nothing
        // refers to it.
        if unsafe { unmap(start, len) }.is_err() {
            UNMAP_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        return Err(MapFailure {
            step: MapStep::Protect,
            error,
        });
    }
    Ok(start)
}

/// Unmaps `[start, start + len)`.
///
/// # Safety
///
/// pre: the region is all or part of mappings made by [`map_guarded`], not
/// yet unmapped, and nothing will touch it again.
#[allow(clippy::disallowed_methods)] // the audited call site
pub(crate) unsafe fn unmap(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    // SAFETY: by this function's contract the region is ours and unused.
    let rc = unsafe { libc::munmap(start.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Counts an `munmap` that failed where no caller could be told (a `Drop`).
/// The region stays mapped: leaked, not corrupted.
pub(crate) fn count_unmap_failure() {
    UNMAP_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// `munmap` calls that failed in this process, whose regions stayed mapped.
/// Unmapping a whole stack never needs a new VMA, so this stays 0 unless the
/// kernel refuses something unexpected.
pub(crate) fn unmap_failures() -> u64 {
    UNMAP_FAILURES.load(Ordering::Relaxed)
}

/// Gives the pages of `[start, start + len)` back to the OS while keeping
/// the mapping (`madvise(MADV_DONTNEED)`: the next touch of a page maps a
/// fresh zero page).
///
/// Not rustix's `Advice::DontNeed`, which is `POSIX_MADV_DONTNEED`, a no-op
/// on Linux.
///
/// # Safety
///
/// pre: the region is a readable and writable part of a mapping made by
/// [`map_guarded`], and nothing holds a reference into it or relies on its
/// contents (they read as zeros afterwards).
#[allow(clippy::disallowed_methods)] // the audited call site
pub(crate) unsafe fn release_pages(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    // SAFETY: by this function's contract the region is private anonymous
    // memory of ours whose contents nobody needs.
    let rc = unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How many bytes of `[start, start + len)` are resident in RAM now
/// (`mincore`). A snapshot: pages may come and go right after.
///
/// # Safety
///
/// pre: the region is part of a mapping made by [`map_guarded`], not yet
/// unmapped. (`mincore` only reads page tables; it never touches the
/// memory.)
#[allow(clippy::disallowed_methods)] // the audited call site
pub(crate) unsafe fn resident_bytes(start: NonNull<u8>, len: usize) -> io::Result<usize> {
    check_region(start.as_ptr() as usize, len)?;
    let page = page_size();
    let mut vec = vec![0u8; len / page];
    // SAFETY: the region is mapped (contract), and `vec` has one byte per
    // page of it, as `mincore` writes.
    let rc = unsafe { libc::mincore(start.as_ptr().cast(), len, vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() * page)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bad_sizes_are_errors_not_mappings() {
        let page = page_size();
        for (guard, usable) in [(0, page), (page, 0), (page, page + 1), (usize::MAX, page)] {
            let failure = map_guarded(guard, usable).unwrap_err();
            assert_eq!(failure.step, MapStep::Reserve);
            assert_eq!(failure.error.raw_os_error(), Some(libc::EINVAL));
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "mmap/mprotect/madvise/mincore need the kernel")]
    fn guarded_mapping_round_trip() {
        let page = page_size();
        let start = map_guarded(page, 4 * page).unwrap();
        // SAFETY: the usable part starts one page up and is writable.
        unsafe {
            let usable = NonNull::new_unchecked(start.as_ptr().add(page));
            usable.as_ptr().write_bytes(7, 4 * page);
            assert_eq!(resident_bytes(usable, 4 * page).unwrap(), 4 * page);
            release_pages(usable, 4 * page).unwrap();
            assert_eq!(resident_bytes(usable, 4 * page).unwrap(), 0);
            assert_eq!(usable.as_ptr().read(), 0, "released pages read as zero");
            let misaligned = NonNull::new_unchecked(usable.as_ptr().add(1));
            assert!(release_pages(misaligned, page).is_err());
            unmap(start, 5 * page).unwrap();
        }
    }
}
