//! Finding this process's cgroup v1 memory cgroup, and making memory-limited
//! children of it: the one place the lab deals with cgroups.

use std::fs;
use std::path::{Path, PathBuf};

use crate::cleanup::{self, Leftover, Registration};
use crate::procfs;

/// Where the cgroup v1 memory hierarchy is mounted.
pub const V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// `/sys/fs/cgroup/memory/<path>` for this process (`N:memory:<path>` in
/// `/proc/self/cgroup`).
///
/// # Errors
///
/// No v1 memory controller in `/proc/self/cgroup`, or the hierarchy is not
/// mounted where expected.
pub fn own_v1_memory() -> Result<PathBuf, String> {
    let step = "find this process's v1 memory cgroup";
    let table = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("{step}: read /proc/self/cgroup: {e}"))?;
    let rel = v1_memory_path(&table)
        .ok_or_else(|| format!("{step}: no cgroup v1 memory controller in /proc/self/cgroup"))?;
    let dir = Path::new(V1_MEMORY_ROOT).join(rel.trim_start_matches('/'));
    if !dir.join("memory.limit_in_bytes").exists() {
        return Err(format!(
            "{step}: {} has no memory.limit_in_bytes (is the v1 memory hierarchy mounted?)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The path of the `memory` controller's line in a `/proc/<pid>/cgroup`
/// table.
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

/// A child of this process's v1 memory cgroup with a memory limit, removed
/// (its tasks killed first) when dropped or by [`ChildCgroup::remove`], and
/// on any way out of the process ([`crate::cleanup`]).
#[derive(Debug)]
pub struct ChildCgroup {
    dir: PathBuf,
    registration: Option<Registration>,
}

impl ChildCgroup {
    /// Makes `<own cgroup>/<name>` and limits it to `limit_bytes`.
    ///
    /// # Errors
    ///
    /// The step that was refused, and why (with a hint when not root).
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self, String> {
        let dir = own_v1_memory()?.join(name);
        // Left over by a process with the same id that was killed hard.
        let _ = fs::remove_dir(&dir);
        let ((), registration) = cleanup::create(|| {
            fs::create_dir(&dir).map_err(|e| {
                format!(
                    "create a child memory cgroup: mkdir {}: {e}{}",
                    dir.display(),
                    not_root_hint()
                )
            })?;
            Ok(((), Leftover::Cgroup(dir.clone())))
        })?;
        let cgroup = ChildCgroup {
            dir,
            registration: Some(registration),
        };
        cgroup.limit(limit_bytes)?;
        Ok(cgroup)
    }

    fn limit(&self, bytes: u64) -> Result<(), String> {
        let step = format!("limit the child cgroup to {} MiB", bytes >> 20);
        let file = self.dir.join("memory.limit_in_bytes");
        fs::write(&file, bytes.to_string())
            .map_err(|e| format!("{step}: write {bytes} to {}: {e}", file.display()))?;
        let set = fs::read_to_string(&file).unwrap_or_default();
        if set.trim() != bytes.to_string() {
            return Err(format!(
                "{step}: {} reads {set:?} after writing {bytes}",
                file.display()
            ));
        }
        Ok(())
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The ids of the processes in it.
    pub fn tasks(&self) -> Vec<u32> {
        cleanup::cgroup_tasks(&self.dir)
    }

    /// Kills every process in it.
    pub fn kill_tasks(&self) {
        cleanup::kill_cgroup_tasks(&self.dir);
    }

    /// Kills its tasks and removes it.
    ///
    /// # Errors
    ///
    /// If it is still there after 10 s.
    pub fn remove(mut self) -> Result<(), String> {
        let result = cleanup::undo(&Leftover::Cgroup(self.dir.clone()));
        self.registration = None;
        result
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        if self.registration.take().is_some() {
            let _ = cleanup::undo(&Leftover::Cgroup(self.dir.clone()));
        }
    }
}

/// " (not root: effective uid N)" when not root, else nothing: most
/// refusals here are a missing privilege.
pub fn not_root_hint() -> String {
    match procfs::euid() {
        Some(0) | None => String::new(),
        Some(u) => format!(" (not root: effective uid {u})"),
    }
}

#[cfg(test)]
mod tests {
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
