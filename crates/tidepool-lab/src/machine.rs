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
    /// Whether `/proc/pressure/memory` (PSI) can be read.
    pub psi: bool,
    /// `rustc --version`, if a rustc is on the PATH.
    pub rustc: Option<String>,
    /// Whether the lab was built with optimisations.
    pub optimized: bool,
}

impl Machine {
    /// Looks at this machine.
    pub fn detect() -> Self {
        let rustc = Command::new("rustc")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        Machine {
            cpu_model: procfs::cpu_model().unwrap_or_else(|| "unknown CPU".to_owned()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: procfs::kernel_release().unwrap_or_else(|| "unknown".to_owned()),
            max_map_count: procfs::max_map_count().unwrap_or(0),
            // corosensei maps stacks in pages of this size; 4 KiB is what
            // every Linux the lab targets uses unless told otherwise.
            page_size: procfs::page_size().unwrap_or(4096),
            memory_mib: procfs::mem_total_kib().unwrap_or(0) / 1024,
            psi: procfs::psi_memory().is_ok(),
            rustc,
            optimized: !cfg!(debug_assertions),
        }
    }

    /// One line for a terminal (at most about 100 columns).
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{} | {} cores | {} GiB | Linux {} | {} build",
            self.cpu_model,
            self.cores,
            (self.memory_mib + 512) / 1024,
            self.kernel,
            if self.optimized { "release" } else { "debug" },
        );
        if line.chars().count() > 100 {
            line = line.chars().take(99).collect::<String>() + "…";
        }
        line
    }
}
