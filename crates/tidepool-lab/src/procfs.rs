//! Every `/proc` file the lab reads, one function each: what the process
//! holds, the way `top` and the kernel see it (VMAs from `/proc/self/maps`,
//! RSS and VSZ from `/proc/self/status`), who it runs as, and the machine
//! facts a report records.
//!
//! The two per-sample readers ([`vmas`], [`memory`]) use a fixed buffer on
//! the stack and allocate nothing but the path: they run while a policy may
//! have used up `vm.max_map_count`, when a large `malloc` (which would
//! `mmap`) fails and aborts the process.
//!
//! (The cgroup a process belongs to is looked up in
//! [`crate::source::cgroup`], the one place that deals with cgroups.)

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

/// Minor page faults of this process so far, all threads (`minflt`, the
/// 10th field of `/proc/self/stat`): each first touch of a fresh or purged
/// stack page is one.
pub fn minor_faults() -> io::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The command name (2nd field) is in parentheses and may hold spaces:
    // count fields after its closing one (state is field 3).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| io::Error::other("no ')' in /proc/self/stat"))?;
    rest.split_whitespace()
        .nth(7)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::other("no minflt in /proc/self/stat"))
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

/// CPU time this process has used, every thread's (exited ones too), user
/// and system, in milliseconds: `utime + stime` of `/proc/self/stat`, in
/// clock ticks of 10 ms (`USER_HZ`, 100 on Linux whatever the kernel's HZ).
pub fn cpu_ms() -> Option<f64> {
    parse_cpu_ms(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

fn parse_cpu_ms(stat: &str) -> Option<f64> {
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Field 3 (state) is the first; utime and stime are 14, 15.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 * 10.0)
}

/// `vm.max_map_count`, if it can be read.
pub fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The effective user id of this process (`Uid:` in `/proc/self/status`,
/// second field).
pub fn euid() -> Option<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `model name` of the first CPU in `/proc/cpuinfo`.
pub fn cpu_model() -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()?
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_owned())
        })
}

/// `MemTotal` from `/proc/meminfo`, in KiB.
pub fn mem_total_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `/proc/sys/kernel/osrelease`.
pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The page size of this process's mappings (`KernelPageSize` in
/// `/proc/self/smaps`), in bytes.
pub fn page_size() -> Option<usize> {
    std::fs::read_to_string("/proc/self/smaps")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("KernelPageSize:"))?
        .split_whitespace()
        .next()?
        .parse::<usize>()
        .ok()
        .map(|kib| kib * 1024)
}

/// The system-wide memory PSI file.
pub const PSI_MEMORY: &str = "/proc/pressure/memory";

/// Whether [`PSI_MEMORY`] can be read: the kernel has PSI and it is on.
///
/// # Errors
///
/// Why not, naming the file.
pub fn psi_memory() -> Result<(), String> {
    std::fs::read_to_string(PSI_MEMORY)
        .map(drop)
        .map_err(|e| format!("read {PSI_MEMORY}: {e} (a kernel without PSI, or booted with psi=0)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_utime_plus_stime_after_the_command_name() {
        // A command name with spaces and a ')' of its own.
        let stat = "4242 (lab (x) y) R 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 5";
        assert_eq!(parse_cpu_ms(stat), Some((123.0 + 45.0) * 10.0));
        assert_eq!(parse_cpu_ms("4242 (lab) R 1 2"), None);
        assert!(cpu_ms().is_some(), "/proc/self/stat is readable here");
    }

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
    fn machine_facts_are_read() {
        assert!(euid().is_some());
        assert!(mem_total_kib().unwrap() > 0);
        assert!(page_size().unwrap() >= 4096);
        assert!(!kernel_release().unwrap().is_empty());
    }

    #[test]
    fn this_process_is_measured() {
        // Code, data, heap, stack, vdso: any process has several VMAs.
        assert!(vmas().unwrap() >= 5);
        let mem = memory().unwrap();
        assert!(mem.rss_kib > 0 && mem.vsz_kib >= mem.rss_kib, "{mem:?}");
    }
}
