//! Linux Pressure Stall Information triggers.

use std::fs::File;
use std::io::{self};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Interest, Level, Source};
use crate::os;

/// Which stall a PSI trigger measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Time in which at least one task was stalled on memory.
    Some,
    /// Time in which every non-idle task was stalled on memory.
    Full,
}

/// A PSI trigger: fires when tasks stall on memory for `stall` within a
/// `window` (`Documentation/accounting/psi.rst`).
///
/// The kernel accepts windows of 500 ms to 10 s; without
/// `CAP_SYS_RESOURCE`, only multiples of 2 s. It signals at most once per
/// window while the stall lasts.
///
/// ```no_run
/// use std::time::Duration;
/// use tidepool::pressure::{self, Level, PsiTrigger, Stall};
///
/// let trigger = PsiTrigger::new(
///     "/proc/pressure/memory",
///     Stall::Some,
///     Duration::from_millis(100),
///     Duration::from_secs(2),
///     Level::Medium,
/// )?;
/// pressure::watch(Box::new(trigger));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct PsiTrigger {
    file: File,
    path: PathBuf,
    spec: String,
    level: Level,
}

/// The default triggers' window: the shortest an unprivileged process may
/// use.
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(2);

impl PsiTrigger {
    /// Arms a trigger on `path` (`/proc/pressure/memory`, or a cgroup v2
    /// `memory.pressure`) that signals `level`.
    ///
    /// # Errors
    ///
    /// The file cannot be opened (no PSI in this kernel: `NotFound`), or the
    /// kernel refuses the trigger (`InvalidInput` for a window it does not
    /// allow this process, e.g. not a multiple of 2 s without
    /// `CAP_SYS_RESOURCE`). The error names the path and the trigger.
    pub fn new(
        path: impl AsRef<Path>,
        stall: Stall,
        threshold: Duration,
        window: Duration,
        level: Level,
    ) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let spec = format!(
            "{} {} {}",
            match stall {
                Stall::Some => "some",
                Stall::Full => "full",
            },
            threshold.as_micros(),
            window.as_micros()
        );
        let context = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("{}: trigger `{spec}`: {e}", path.display()),
            )
        };
        let file = os::file::open_nonblocking(&path).map_err(context)?;
        // The kernel wants the trigger, NUL-terminated, in one write.
        os::file::write_all(&file, format!("{spec}\0").as_bytes()).map_err(context)?;
        Ok(Self {
            file,
            path,
            spec,
            level,
        })
    }

    /// The system-wide default triggers on `/proc/pressure/memory`: medium
    /// at 10% of a 2 s window with some task stalled (200 ms), critical at
    /// 10% with every task stalled.
    pub fn system_defaults() -> Vec<io::Result<Self>> {
        Self::defaults_on(Path::new("/proc/pressure/memory"))
    }

    /// The same triggers on this process's cgroup v2 `memory.pressure`.
    ///
    /// # Errors
    ///
    /// `NotFound` if the process is in no cgroup v2 hierarchy with the
    /// memory controller.
    pub fn cgroup_defaults() -> io::Result<Vec<io::Result<Self>>> {
        let path = own_cgroup_v2()?.join("memory.pressure");
        if !path.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{}: no such file (no cgroup v2 memory controller here)",
                    path.display()
                ),
            ));
        }
        Ok(Self::defaults_on(&path))
    }

    fn defaults_on(path: &Path) -> Vec<io::Result<Self>> {
        let tenth = DEFAULT_WINDOW / 10;
        vec![
            Self::new(path, Stall::Some, tenth, DEFAULT_WINDOW, Level::Medium),
            Self::new(path, Stall::Full, tenth, DEFAULT_WINDOW, Level::Critical),
        ]
    }
}

/// `/sys/fs/cgroup/<path>` for this process's cgroup v2 (`0::<path>` in
/// `/proc/self/cgroup`).
fn own_cgroup_v2() -> io::Result<PathBuf> {
    let table = os::file::read_to_string("/proc/self/cgroup")
        .map_err(|e| io::Error::new(e.kind(), format!("/proc/self/cgroup: {e}")))?;
    let rel = table
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup v2 entry in /proc/self/cgroup",
            )
        })?;
    Ok(Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/')))
}

impl Source for PsiTrigger {
    fn name(&self) -> String {
        format!("psi {} `{}`", self.path.display(), self.spec)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn interest(&self) -> Interest {
        Interest::Priority
    }

    fn on_ready(&mut self) -> io::Result<Option<Level>> {
        // A PSI trigger has no data to consume: POLLPRI is edge-like, raised
        // at most once per window.
        Ok(Some(self.level))
    }
}
