//! The machine a report was measured on.

use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::procfs;

/// What the numbers of a report depend on, as far as the lab can see.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cores: usize,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// `vm.max_map_count`, 0 if unreadable.
    pub max_map_count: u64,
    /// Page size in bytes.
    pub page_size: usize,
    /// `MemTotal` in MiB.
    pub memory_mib: u64,
    /// Whether `/proc/pressure/memory` (PSI) exists.
    pub psi: bool,
    /// `rustc --version`, if a rustc is on the PATH.
    pub rustc: Option<String>,
    /// Whether the lab was built with optimisations.
    pub optimized: bool,
}

impl Machine {
    /// Looks at this machine.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let rustc = Command::new("rustc")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        Machine {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".to_owned()),
            max_map_count: procfs::max_map_count().unwrap_or(0),
            page_size: page_size(),
            memory_mib: memory_kib / 1024,
            psi: std::path::Path::new("/proc/pressure/memory").exists(),
            rustc,
            optimized: !cfg!(debug_assertions),
        }
    }

    /// One line for a terminal.
    pub fn summary(&self) -> String {
        format!(
            "{} | {} cores | {} MiB | Linux {} | max_map_count {} | {} | {} build",
            self.cpu_model,
            self.cores,
            self.memory_mib,
            self.kernel,
            self.max_map_count,
            self.rustc.as_deref().unwrap_or("rustc: unknown"),
            if self.optimized { "release" } else { "debug" },
        )
    }
}

fn page_size() -> usize {
    // The lab maps stacks with corosensei, which asks sysconf; 4 KiB is what
    // every Linux the lab targets uses unless told otherwise.
    std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("KernelPageSize:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
        })
        .map_or(4096, |kib| kib * 1024)
}
