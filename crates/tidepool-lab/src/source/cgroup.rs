//! Finding this process's cgroup v1 memory cgroup, and making memory-limited
//! children of it: the one place the lab deals with cgroups.

use std::fs;
use std::path::{Path, PathBuf};

use crate::cleanup::{self, Leftover, Registration};
use crate::procfs;

/// This process's v1 memory cgroup (the core's lookup,
/// [`tidepool::pressure::CgroupV1Pressure::own_cgroup_dir`]), checked to be
/// a mounted v1 memory hierarchy.
///
/// # Errors
///
/// No v1 memory controller in `/proc/self/cgroup`, or the hierarchy is not
/// mounted where expected.
pub fn own_v1_memory() -> Result<PathBuf, String> {
    let step = "find this process's v1 memory cgroup";
    let dir = tidepool::pressure::CgroupV1Pressure::own_cgroup_dir()
        .map_err(|e| format!("{step}: {e}"))?;
    if !dir.join("memory.limit_in_bytes").exists() {
        return Err(format!(
            "{step}: {} has no memory.limit_in_bytes (is the v1 memory hierarchy mounted?)",
            dir.display()
        ));
    }
    Ok(dir)
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
