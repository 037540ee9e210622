//! `vm.max_map_count`: the kernel's cap on one process's memory areas
//! (VMAs), on Linux and Android. Past it `mmap`, and an `mprotect` that
//! splits a mapping, fail with `ENOMEM`. Other systems have no such count.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::fault::{check, Call};

/// VMAs left for everything else in the process (code and data of each
/// shared library, heaps, thread stacks, other mappings). QEMU's figure:
/// "an arbitrary value for fixed overhead … that may vary".
pub const RESERVED_VMAS: usize = 5000;

/// The kernel's default `vm.max_map_count` (`DEFAULT_MAX_MAP_COUNT`,
/// 65530), assumed when `/proc/sys/vm/max_map_count` cannot be read (no
/// `/proc` mounted, a sandbox that hides it).
pub const FALLBACK_MAX_MAP_COUNT: usize = 65530;

/// Where the map count comes from (Linux and Android).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub const MAX_MAP_COUNT_PATH: &str = "/proc/sys/vm/max_map_count";

/// Reads a count from `path`: `None` if it is missing, unreadable or not
/// a number.
pub(crate) fn read_count(path: &Path) -> Option<usize> {
    check(Call::SystemCount).ok()?;
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// How many objects of `vmas_each` VMAs fit in this process's map count
/// after the reserve, read now (the kernel default if it cannot be read);
/// `None` on systems without a map count.
pub(crate) fn objects_that_fit(vmas_each: usize) -> Option<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let count = read_count(Path::new(MAX_MAP_COUNT_PATH)).unwrap_or(FALLBACK_MAX_MAP_COUNT);
        Some(count.saturating_sub(RESERVED_VMAS) / vmas_each.max(1))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = vmas_each;
        None
    }
}

/// The VMAs this process has mapped now: the lines of `/proc/self/maps`.
///
/// Counted through a small buffer on the stack, without allocating in
/// proportion to the count: this runs when `mmap` has just failed at the
/// map-count limit, where a large allocation (itself an `mmap`) would fail
/// too. The kernel's own count differs by the `[vsyscall]` line at most.
///
/// # Errors
///
/// Opening or reading the file failed (no `/proc`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn mapped_vmas() -> std::io::Result<usize> {
    check(Call::SystemCount)?;
    let mut file = File::open("/proc/self/maps")?;
    let mut buf = [0u8; 4096];
    let mut lines = 0;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(lines),
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
