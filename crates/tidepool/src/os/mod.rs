//! The one audited place where tidepool talks to the kernel directly.
//!
//! * This file: mapping, protecting, advising and unmapping memory. Nothing
//!   else in the crate calls `mmap`, `mprotect`, `madvise`, `munmap` or
//!   `mincore` (the workspace `clippy.toml` refuses them elsewhere; only
//!   this file allows them).
//! * [`event`]: `poll(2)` and a wake-up descriptor (`eventfd(2)` on Linux,
//!   a socket pair elsewhere), for the reclaimer thread; a forked child
//!   replaces its copy.
//! * [`fork`]: `pthread_atfork(3)`, so locks and the reclaimer survive
//!   `fork(2)`.
//! * [`map_count`]: reading `vm.max_map_count` (Linux and Android).
//! * [`fault`]: injected failures of these calls, for tests (feature
//!   `fault-injection`).
//! * [`thread`]: starting tidepool's own threads, every signal blocked but
//!   the fault signals.
//! * `membarrier` (Linux only): `membarrier(2)`, the heavy half of the
//!   asymmetric fence that lets another thread take an idle thread cache.
//!
//! Nothing here imports the rest of the crate beyond the `sync` facade: the
//! OS is the bottom layer.
//!
//! The submodules state their own (smaller) contracts at their tops.
//!
//! # Per OS
//!
//! The memory calls are POSIX and built on every Unix. What differs:
//!
//! * `MAP_STACK` is passed on Linux and Android (a hint that keeps
//!   transparent huge pages off stacks) and on OpenBSD (which requires it of
//!   every stack), nowhere else (FreeBSD's `MAP_STACK` means a grow-down
//!   region that must be mapped writable, which a guard page is not).
//! * [`release_pages`] is `MADV_DONTNEED` on Linux and Android, where private
//!   anonymous pages are dropped at once and read back as zeros, and
//!   `MADV_FREE` elsewhere (FreeBSD, macOS, the other BSDs, illumos), where
//!   `MADV_DONTNEED` only lowers the pages' priority: with `MADV_FREE` the
//!   kernel takes the pages when it needs memory, and until then they may
//!   still read as their old contents. Stacks carry nothing across reuse,
//!   so either is fine for them.
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
//!   mapped with [`reserve`] and that has not been
//!   unmapped. The caller owns it exclusively, and no Rust reference points
//!   into it while it is unmapped or its pages are released.
//! * **Errors**: failures come back as [`std::io::Error`] from `errno`; no
//!   function panics or aborts. A failed [`reserve`] maps nothing; a failed
//!   [`make_writable`] changes nothing.
//! * Each function lists its own preconditions as `pre:` lines.
//!
//! Failures that cannot be reported to anyone (an `munmap` from a `Drop`)
//! are counted in [`unmap_failures`] instead of panicking.
pub(crate) mod event;
#[cfg_attr(
    not(all(feature = "fault-injection", not(loom))),
    allow(unreachable_pub, dead_code)
)]
pub(crate) mod fault;
// Only the pressure sources, which are Linux's, read and write these.
#[cfg(target_os = "linux")]
pub(crate) mod file;
pub(crate) mod fork;
pub(crate) mod map_count;
#[cfg(target_os = "linux")]
pub(crate) mod membarrier;
#[cfg(miri)]
mod miri_shim;
pub(crate) mod thread;

use crate::sync::process::{AtomicU64, Ordering};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::OnceLock;

/// Which step of mapping stacks failed (`stack/slab.rs`: one [`reserve`]
/// per slab, one [`install_guard`] or [`make_writable`] per stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapStep {
    /// Reserving the address range (`mmap`).
    Reserve,
    /// Making the part above the guard writable, or the guard
    /// inaccessible (`mprotect`).
    Protect,
    /// Installing the guard's markers (`madvise(MADV_GUARD_INSTALL)`).
    Guard,
}

/// Why mapping stacks failed, and the error the OS gave.
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

/// The result of a call that returns 0 or -1 with `errno`.
fn status(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn check_region(addr: usize, len: usize) -> io::Result<()> {
    let page = page_size();
    if len == 0 || len % page != 0 || addr % page != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

/// How a fresh reservation starts out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// All of it inaccessible (`PROT_NONE`): no memory and (on Linux) no
    /// overcommit charge. Pages open with [`make_writable`].
    None,
    /// All of it readable and writable, `MAP_NORESERVE` (no overcommit
    /// charge on Linux unless `vm.overcommit_memory` is 2, strict).
    /// Guards go in with [`install_guard`] (or [`make_inaccessible`]).
    ReadWrite,
}

/// Reserves `len` bytes of address space: a private anonymous mapping at
/// an address of the kernel's choosing, inaccessible or writable as
/// `access` says. One `mmap`, one VMA. Untouched pages cost no memory.
///
/// pre: `len` is a non-zero multiple of [`page_size`] (checked: `EINVAL`
/// otherwise).
#[allow(clippy::disallowed_methods)] // the audited call site
#[cfg_attr(miri, allow(unreachable_code, unused_variables))] // the kernel call, after the shim
pub(crate) fn reserve(len: usize, access: Access) -> io::Result<NonNull<u8>> {
    check_region(0, len)?;
    fault::check(fault::Call::Mmap)?;
    #[cfg(miri)]
    return miri_shim::reserve(len);
    // MAP_STACK: a hint today, and on Linux 6.7+ it keeps transparent huge
    // pages off stacks, which would make a 4 KiB coroutine stack cost 2 MiB.
    // OpenBSD requires it of anything used as a stack. FreeBSD's MAP_STACK is
    // a grow-down region that must be mapped writable: not for us.
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "openbsd"))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK;
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "openbsd")))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // Writable slabs (guard markers, Linux only) reserve no swap up front:
    // untouched stack pages cost nothing. Other systems have no such flag
    // (FreeBSD dropped it) and never map a slab writable.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let noreserve = libc::MAP_NORESERVE;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let noreserve = 0;
    let (prot, flags) = match access {
        Access::None => (libc::PROT_NONE, flags),
        Access::ReadWrite => (libc::PROT_READ | libc::PROT_WRITE, flags | noreserve),
    };
    // SAFETY: a fresh anonymous mapping at an address of the kernel's
    // choosing (null hint, no MAP_FIXED) aliases nothing; `len` is non-zero.
    let raw = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, -1, 0) };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    fault::note_mapped(raw as usize, len);
    // The kernel never maps page 0 for an anonymous hint-less mapping; stay
    // correct regardless.
    NonNull::new(raw.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
}

/// `MADV_GUARD_INSTALL` (Linux 6.13+; not in the `libc` crate yet): turns
/// the range into guard pages, page-table markers that fault on any access
/// (`SIGSEGV`) without splitting the VMA. `MADV_DONTNEED` leaves them in
/// place; `munmap` or `MADV_GUARD_REMOVE` takes them away.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// Whether this kernel has guard-page markers (`MADV_GUARD_INSTALL`):
/// probed once per process with a one-page mapping (`mmap`, `madvise`,
/// `munmap`); an old kernel answers `EINVAL`. Always `false` off Linux and
/// under miri.
pub(crate) fn guard_markers_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(probe_guard_markers)
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
fn probe_guard_markers() -> bool {
    let page = page_size();
    let Ok(start) = reserve(page, Access::ReadWrite) else {
        return false;
    };
    // SAFETY: the page is ours alone, just mapped, and unmapped right after.
    let ok = unsafe { install_guard(start, page) }.is_ok();
    // SAFETY: the whole of the probe's own mapping; nothing points into it.
    if unsafe { unmap(start, page) }.is_err() {
        count_unmap_failure();
    }
    ok
}

#[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
fn probe_guard_markers() -> bool {
    false
}

/// Makes `[start, start + len)` guard pages: any access faults. On Linux
/// 6.13+ one `madvise(MADV_GUARD_INSTALL)`, which keeps the VMA whole (and
/// drops whatever the pages held); elsewhere, or on an older kernel,
/// `EINVAL`, and the caller falls back to [`make_inaccessible`]. The kernel
/// also refuses `VM_LOCKED` memory (a process under `mlockall`) with
/// `EINVAL`.
///
/// # Safety
///
/// pre: the region lies inside a mapping made by [`reserve`] with
/// [`Access::ReadWrite`], not yet unmapped, that the caller owns
/// exclusively, and nothing relies on its contents.
#[allow(clippy::disallowed_methods)] // the audited call site
#[cfg_attr(miri, allow(unreachable_code))] // the kernel call, after the shim
pub(crate) unsafe fn install_guard(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    // The shim cannot fault on a page: miri takes the `mprotect` path.
    #[cfg(miri)]
    return Err(io::Error::from_raw_os_error(libc::EINVAL));
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        fault::check(fault::Call::Madvise)?;
        // SAFETY: by this function's contract the region is ours and its
        // contents unneeded; markers only take access away.
        let rc = unsafe { libc::madvise(start.as_ptr().cast(), len, MADV_GUARD_INSTALL) };
        status(rc)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// Makes `[start, start + len)` inaccessible (`mprotect(PROT_NONE)`): the
/// classic guard page. Inside a writable mapping this splits a VMA (two,
/// in the middle), so at `vm.max_map_count` it fails with `ENOMEM` and
/// changes nothing.
///
/// # Safety
///
/// pre: the region lies inside a mapping made by [`reserve`], not yet
/// unmapped, that the caller owns exclusively, and no reference points
/// into it.
#[allow(clippy::disallowed_methods)] // the audited call site
#[cfg_attr(miri, allow(unreachable_code))] // the kernel call, after the shim
pub(crate) unsafe fn make_inaccessible(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    // The shim's memory stays accessible (only native tests fault).
    #[cfg(miri)]
    return Ok(());
    fault::check(fault::Call::Mprotect)?;
    // SAFETY: by this function's contract the region is ours alone and
    // nothing points into it: taking access away invalidates no reference.
    let rc = unsafe { libc::mprotect(start.as_ptr().cast(), len, libc::PROT_NONE) };
    status(rc)
}

/// Makes `[start, start + len)` readable and writable (`mprotect`). Inside
/// a `PROT_NONE` reservation this splits a VMA, so at `vm.max_map_count` it
/// fails with `ENOMEM` and changes nothing.
///
/// # Safety
///
/// pre: the region lies inside a mapping made by [`reserve`], not yet
/// unmapped, that the caller owns exclusively.
#[allow(clippy::disallowed_methods)] // the audited call site
#[cfg_attr(miri, allow(unreachable_code))] // the kernel call, after the shim
pub(crate) unsafe fn make_writable(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    // A miri reservation is readable and writable from the start.
    #[cfg(miri)]
    return Ok(());
    fault::check(fault::Call::Mprotect)?;
    // SAFETY: by this function's contract the region is ours alone; opening
    // it creates access, it invalidates nothing.
    let rc = unsafe {
        libc::mprotect(
            start.as_ptr().cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    status(rc)
}

/// Unmaps `[start, start + len)`.
///
/// # Safety
///
/// pre: the region is all or part of mappings made by [`reserve`], not yet
/// unmapped, and nothing will touch it again.
#[allow(clippy::disallowed_methods)] // the audited call site
#[cfg_attr(miri, allow(unreachable_code))] // the kernel call, after the shim
pub(crate) unsafe fn unmap(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    #[cfg(miri)]
    // SAFETY: as below; slabs unmap whole reservations (`miri_shim`).
    return unsafe { miri_shim::unmap(start, len) };
    fault::check(fault::Call::Munmap)?;
    // SAFETY: by this function's contract the region is ours and unused.
    let rc = unsafe { libc::munmap(start.as_ptr().cast(), len) };
    if rc == 0 {
        fault::note_unmapped(start.as_ptr() as usize, len);
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
/// Unmapping a whole slab never needs a new VMA, so this stays 0 unless the
/// kernel refuses something unexpected.
pub(crate) fn unmap_failures() -> u64 {
    UNMAP_FAILURES.load(Ordering::Relaxed)
}

/// The advice that gives pages back: see the module's "Per OS" notes.
#[cfg(any(target_os = "linux", target_os = "android"))]
const RELEASE_ADVICE: libc::c_int = libc::MADV_DONTNEED;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const RELEASE_ADVICE: libc::c_int = libc::MADV_FREE;

/// Gives the pages of `[start, start + len)` back to the OS while keeping
/// the mapping. On Linux (`madvise(MADV_DONTNEED)`) the next touch of a page
/// maps a fresh zero page; elsewhere (`MADV_FREE`) the kernel frees the
/// pages when it needs memory, and a page touched before that may keep its
/// old contents.
///
/// Not rustix's `Advice::DontNeed`, which is `POSIX_MADV_DONTNEED`, a no-op
/// on Linux.
///
/// # Safety
///
/// pre: the region is part of a mapping made by [`reserve`], not yet
/// unmapped, and nothing holds a reference into it or relies on its
/// contents (they read as zeros afterwards on Linux, and are unspecified
/// elsewhere). On Linux and Android it may include `PROT_NONE` pages (the
/// guard between two stacks of a slab): the advice ignores protection
/// there. Elsewhere callers pass writable memory only.
#[allow(clippy::disallowed_methods)] // the audited call site
#[cfg_attr(miri, allow(unreachable_code))] // the kernel call, after the shim
pub(crate) unsafe fn release_pages(start: NonNull<u8>, len: usize) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    #[cfg(miri)]
    {
        // SAFETY: as below.
        unsafe { miri_shim::release_pages(start, len) };
        return Ok(());
    }
    fault::check(fault::Call::Madvise)?;
    // SAFETY: by this function's contract the region is private anonymous
    // memory of ours whose contents nobody needs.
    let rc = unsafe { libc::madvise(start.as_ptr().cast(), len, RELEASE_ADVICE) };
    status(rc)
}

/// How many bytes of `[start, start + len)` are resident in RAM now
/// (`mincore`). A snapshot: pages may come and go right after.
///
/// # Safety
///
/// pre: the region is part of a mapping made by [`reserve`]. (`mincore`
/// only reads page tables; it never touches the memory. A region unmapped
/// since makes it fail with `ENOMEM`, and one mapped again by someone else
/// is counted as it is now: wrong numbers, never undefined behaviour; the
/// slab census relies on that.)
pub(crate) unsafe fn resident_bytes(start: NonNull<u8>, len: usize) -> io::Result<usize> {
    let mut map = Vec::new();
    // SAFETY: our own contract.
    unsafe { resident_pages(start, len, &mut map) }?;
    Ok(map.iter().filter(|&&b| b & 1 != 0).count() * page_size())
}

/// Which pages of `[start, start + len)` are resident in RAM now
/// (`mincore`): `map` is cleared and filled with one byte per page, bit 0
/// set for a resident one. A snapshot, as for [`resident_bytes`].
///
/// # Safety
///
/// As for [`resident_bytes`].
#[allow(clippy::disallowed_methods)] // the audited call site
pub(crate) unsafe fn resident_pages(
    start: NonNull<u8>,
    len: usize,
    map: &mut Vec<u8>,
) -> io::Result<()> {
    check_region(start.as_ptr() as usize, len)?;
    fault::check(fault::Call::Mincore)?;
    map.clear();
    map.resize(len / page_size(), 0);
    // SAFETY: the region is mapped (contract), and `map` has one byte per
    // page of it, as `mincore` writes.
    // (The pointer types differ between libcs: `*mut`/`*const c_void`,
    // `c_uchar`/`c_char` vectors; the casts fit each.)
    let rc = unsafe { libc::mincore(start.as_ptr() as _, len, map.as_mut_ptr().cast()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bad_sizes_are_errors_not_mappings() {
        let page = page_size();
        for len in [0, page + 1, usize::MAX] {
            let error = reserve(len, Access::None).unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{len}");
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "counts resident pages with mincore(2), which miri does not emulate"
    )]
    fn reserve_open_release_unmap_round_trip() {
        let page = page_size();
        let start = reserve(5 * page, Access::None).unwrap();
        // SAFETY: the part above the first page lies inside the
        // reservation; it is written only after it was made writable, and
        // the whole reservation is unmapped at the end.
        unsafe {
            let usable = start.add(page);
            assert!(make_writable(usable.add(1), page).is_err(), "misaligned");
            make_writable(usable, 4 * page).unwrap();
            usable.as_ptr().write_bytes(7, 4 * page);
            assert_eq!(resident_bytes(usable, 4 * page).unwrap(), 4 * page);
            release_pages(usable, 4 * page).unwrap();
            // MADV_FREE elsewhere frees lazily: only Linux promises both.
            #[cfg(any(target_os = "linux", target_os = "android"))]
            {
                assert_eq!(resident_bytes(usable, 4 * page).unwrap(), 0);
                assert_eq!(usable.as_ptr().read(), 0, "released pages read as zero");
                // Guards included: the advice ignores protection.
                release_pages(start, 5 * page).unwrap();
            }
            let misaligned = NonNull::new_unchecked(usable.as_ptr().add(1));
            assert!(release_pages(misaligned, page).is_err());
            unmap(start, 5 * page).unwrap();
        }
    }
}
