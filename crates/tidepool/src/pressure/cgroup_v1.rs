//! cgroup v1 `memory.pressure_level` notifications.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use super::{Interest, Level, Source};
use crate::os;
use crate::os::event::EventFd;

/// A cgroup v1 memory-pressure notification: the kernel bumps an eventfd
/// when the cgroup's reclaim reaches a vmpressure level
/// (`Documentation/admin-guide/cgroup-v1/memory.rst`).
///
/// The v1 levels are `low` (the cgroup is reclaiming), `medium` (it is
/// swapping or dropping active page cache) and `critical` (it is thrashing,
/// close to OOM); a listener hears its level and those above.
#[derive(Debug)]
pub struct CgroupV1Pressure {
    event: EventFd,
    // Registered by descriptor: keep it open as long as the eventfd.
    _level_file: File,
    dir: PathBuf,
    v1_level: String,
    level: Level,
}

impl CgroupV1Pressure {
    /// This process's v1 memory cgroup directory:
    /// `/sys/fs/cgroup/memory/<path>` for the `N:memory:<path>` line of
    /// `/proc/self/cgroup`. The one lookup of it in the project (the lab
    /// and the tests use it too).
    ///
    /// # Errors
    ///
    /// `/proc/self/cgroup` cannot be read, or has no v1 memory controller
    /// (`NotFound`).
    pub fn own_cgroup_dir() -> io::Result<PathBuf> {
        let table = os::file::read_to_string("/proc/self/cgroup")
            .map_err(|e| io::Error::new(e.kind(), format!("/proc/self/cgroup: {e}")))?;
        let rel = v1_memory_path(&table).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup v1 memory controller in /proc/self/cgroup",
            )
        })?;
        Ok(Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/')))
    }

    /// Listens on the cgroup v1 memory cgroup at `dir` for `v1_level`
    /// (`"low"`, `"medium"` or `"critical"`) and signals `level`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an unknown level; otherwise the cgroup's files
    /// cannot be opened or written (no v1 memory controller, no permission;
    /// recent kernels may refuse `cgroup.event_control` altogether). The
    /// error names the file.
    pub fn new(dir: impl AsRef<Path>, v1_level: &str, level: Level) -> io::Result<Self> {
        if !matches!(v1_level, "low" | "medium" | "critical") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown cgroup v1 pressure level `{v1_level}` (low, medium, critical)"),
            ));
        }
        let dir = dir.as_ref().to_path_buf();
        let in_dir = |name: &str| dir.join(name);
        let context = |path: PathBuf| {
            move |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
        };
        let event = EventFd::new()?;
        let level_file = os::file::open(in_dir("memory.pressure_level"))
            .map_err(context(in_dir("memory.pressure_level")))?;
        let registration = format!(
            "{} {} {v1_level}",
            event.as_fd().as_raw_fd(),
            level_file.as_raw_fd()
        );
        os::file::write(in_dir("cgroup.event_control"), registration)
            .map_err(context(in_dir("cgroup.event_control")))?;
        Ok(Self {
            event,
            _level_file: level_file,
            dir,
            v1_level: v1_level.to_owned(),
            level,
        })
    }

    /// The defaults on this process's own v1 memory cgroup: `medium` signals
    /// [`Level::Medium`], `critical` signals [`Level::Critical`].
    ///
    /// # Errors
    ///
    /// `NotFound` when the process is in no v1 memory cgroup.
    pub fn own_defaults() -> io::Result<Vec<io::Result<Self>>> {
        let dir = Self::own_cgroup_dir()?;
        Ok(vec![
            Self::new(&dir, "medium", Level::Medium),
            Self::new(&dir, "critical", Level::Critical),
        ])
    }
}

/// The path of the `memory` controller's line in a `/proc/<pid>/cgroup`
/// table (`N:controllers:path`).
fn v1_memory_path(table: &str) -> Option<&str> {
    table.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    })
}

impl Source for CgroupV1Pressure {
    fn name(&self) -> String {
        format!("cgroup v1 {} `{}`", self.dir.display(), self.v1_level)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    fn interest(&self) -> Interest {
        Interest::Readable
    }

    fn on_ready(&mut self) -> io::Result<Option<Level>> {
        Ok((self.event.drain()? > 0).then_some(self.level))
    }
}

#[cfg(test)]
mod cgroup_table_tests {
    use super::v1_memory_path;

    #[test]
    fn the_memory_line_is_found_among_others() {
        let table = "12:pids:/a\n4:cpu,memory:/lab/x\n0::/unified\n";
        assert_eq!(v1_memory_path(table), Some("/lab/x"));
        assert_eq!(v1_memory_path("0::/only-v2\n"), None);
        // A controller whose name merely contains "memory" is not it.
        assert_eq!(v1_memory_path("3:memory_extra:/no\n"), None);
    }
}
