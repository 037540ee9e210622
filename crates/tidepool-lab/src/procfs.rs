//! What the process holds, read from `/proc` the way `top` and the kernel
//! see it: VMAs from `/proc/self/maps`, RSS and VSZ from `/proc/self/status`.
//!
//! Both readers use a fixed buffer on the stack and allocate nothing but
//! the path: they run while a policy may have used up `vm.max_map_count`,
//! when a large `malloc` (which would `mmap`) fails and aborts the process.

use std::fs::File;
use std::io::{self, Read};

/// The process's VMAs: lines of `/proc/self/maps`.
///
/// # Errors
///
/// If the file cannot be opened or read (no `/proc`).
pub fn vmas() -> io::Result<u64> {
    let mut file = File::open("/proc/self/maps")?;
    let mut buf = [0u8; 32 * 1024];
    let mut lines = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
    }
    Ok(lines)
}

/// Memory of the process, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Resident set (`VmRSS`).
    pub rss_kib: u64,
    /// Virtual size (`VmSize`).
    pub vsz_kib: u64,
}

/// Reads `VmRSS` and `VmSize` from `/proc/self/status`.
///
/// # Errors
///
/// If the file cannot be read.
pub fn memory() -> io::Result<Memory> {
    let mut file = File::open("/proc/self/status")?;
    let mut buf = [0u8; 8 * 1024];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(parse_status(&buf[..len]))
}

fn parse_status(text: &[u8]) -> Memory {
    let mut mem = Memory::default();
    for line in text.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"VmRSS:") {
            mem.rss_kib = leading_number(rest);
        } else if let Some(rest) = line.strip_prefix(b"VmSize:") {
            mem.vsz_kib = leading_number(rest);
        }
    }
    mem
}

fn leading_number(text: &[u8]) -> u64 {
    text.iter()
        .skip_while(|b| !b.is_ascii_digit())
        .take_while(|b| b.is_ascii_digit())
        .fold(0u64, |n, &b| n * 10 + u64::from(b - b'0'))
}

/// `vm.max_map_count`, if it can be read.
pub fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_parsed() {
        let text = b"Name:\tlab\nVmSize:\t  123456 kB\nVmRSS:\t    7890 kB\nThreads:\t3\n";
        assert_eq!(
            parse_status(text),
            Memory {
                rss_kib: 7890,
                vsz_kib: 123456
            }
        );
    }

    #[test]
    fn this_process_is_measured() {
        // Code, data, heap, stack, vdso: any process has several VMAs.
        assert!(vmas().unwrap() >= 5);
        let mem = memory().unwrap();
        assert!(mem.rss_kib > 0 && mem.vsz_kib >= mem.rss_kib, "{mem:?}");
    }
}
