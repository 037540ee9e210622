//! Generating real memory pressure: page-cache thrash in a 64 MiB cgroup.
//!
//! A shell in a new child of this process's v1 memory cgroup, limited to
//! 64 MiB, writes a 300 MB file and reads it back three times, over and
//! over: the cgroup's page cache is reclaimed all the time, which the
//! kernel's PSI accounts as memory stall (the method and its numbers are in
//! the project's machine notes: the trigger fired after about 3 s, with
//! about 0.1 s of stall per run). Anonymous memory over the limit would be
//! OOM-killed at once instead (no swap), with little stall.
//!
//! The cgroup, the shell and the file are registered with
//! [`crate::cleanup`] before they exist, so no way out of the lab leaves
//! them behind.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::cleanup::{self, Leftover, Registration};
use crate::source::cgroup::ChildCgroup;

/// The cgroup's memory limit.
pub const LIMIT_BYTES: u64 = 64 << 20;
/// The size of the file written and read back, MB.
pub const FILE_MB: u32 = 300;
/// The least time between the end of one thrash and the start of the next:
/// a PSI window, so that neither the kernel's one-event-per-window limit nor
/// stall left over from the previous thrash decides when a trigger fires.
pub const GAP: Duration = Duration::from_millis(2100);
/// Names of the cgroups and files made here start with this (and go on
/// with the process id).
pub const NAME_PREFIX: &str = "tidepool-lab-thrash-";

/// When the last thrash of this process ended.
static LAST_END: Mutex<Option<Instant>> = Mutex::new(None);

/// Waits until [`GAP`] has passed since the last thrash ended.
pub fn wait_for_gap() {
    let last = *LAST_END.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(end) = last {
        let ready = end + GAP;
        let now = Instant::now();
        if ready > now {
            std::thread::sleep(ready - now);
        }
    }
}

/// A running thrash. [`Thrash::finish`] (or dropping it) kills the load and
/// removes the file and the cgroup.
#[derive(Debug)]
pub struct Thrash {
    cgroup: Option<ChildCgroup>,
    file: PathBuf,
    file_registration: Option<Registration>,
    child: Option<(Child, Registration)>,
}

impl Thrash {
    /// Makes the cgroup and starts the load; returns once the load is in the
    /// cgroup.
    ///
    /// # Errors
    ///
    /// The step that was refused, and why.
    pub fn start() -> Result<Self, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tag = format!(
            "{NAME_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup = ChildCgroup::create(&tag, LIMIT_BYTES)?;
        let file = std::env::temp_dir().join(&tag);
        let file_registration = cleanup::register(Leftover::File(file.clone()))?;
        let mut thrash = Thrash {
            cgroup: Some(cgroup),
            file,
            file_registration: Some(file_registration),
            child: None,
        };
        let dir = thrash.cgroup_dir();
        let script = format!(
            r#"
            echo $$ > "$CG/cgroup.procs" || exit 97
            while :; do
                dd if=/dev/zero of="$F" bs=1M count={FILE_MB} status=none || exit 98
                for i in 1 2 3; do dd if="$F" of=/dev/null bs=1M status=none || exit 99; done
            done
        "#
        );
        let file = thrash.file.clone();
        let (child, registration) = cleanup::create(|| {
            let child = Command::new("sh")
                .arg("-c")
                .arg(script)
                .env("CG", &dir)
                .env("F", &file)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("start the load process: spawn sh: {e}"))?;
            let pid = child.id();
            Ok((child, Leftover::Process(pid)))
        })?;
        let pid = child.id();
        thrash.child = Some((child, registration));
        let start = Instant::now();
        loop {
            if thrash.tasks().contains(&pid) {
                return Ok(thrash);
            }
            thrash.check_running()?;
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "move the load process into the child cgroup: pid {pid} not in \
                     {}/cgroup.procs after 10 s",
                    dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn cgroup_dir(&self) -> PathBuf {
        self.cgroup
            .as_ref()
            .map(|c| c.dir().to_path_buf())
            .unwrap_or_default()
    }

    fn tasks(&self) -> Vec<u32> {
        self.cgroup
            .as_ref()
            .map(ChildCgroup::tasks)
            .unwrap_or_default()
    }

    /// An error if the load has exited (it only stops when killed).
    ///
    /// # Errors
    ///
    /// What the load said, if it stopped.
    pub fn check_running(&mut self) -> Result<(), String> {
        let Some((child, _)) = self.child.as_mut() else {
            return Ok(());
        };
        let Ok(Some(status)) = child.try_wait() else {
            return Ok(());
        };
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let what = match status.code() {
            Some(97) => "the shell could not write its pid to cgroup.procs",
            Some(98) => "writing the 300 MB file failed",
            Some(99) => "reading the file back failed",
            _ => "the load process exited",
        };
        self.child = None;
        Err(format!("{what} ({status}); stderr: {:?}", err.trim()))
    }

    /// Kills the shell and whichever `dd` it runs: everything in the cgroup.
    pub fn stop(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill_tasks();
        }
        if let Some((mut child, registration)) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            drop(registration);
        }
        *LAST_END.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Stops the load, removes the file and the cgroup.
    ///
    /// # Errors
    ///
    /// What stayed behind.
    pub fn finish(mut self) -> Result<(), String> {
        self.stop();
        let mut problems = Vec::new();
        if let Err(e) = cleanup::undo(&Leftover::File(self.file.clone())) {
            problems.push(e);
        }
        self.file_registration = None;
        if let Some(cgroup) = self.cgroup.take() {
            if let Err(e) = cgroup.remove() {
                problems.push(e);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Thrash {
    fn drop(&mut self) {
        // `finish` ran, unless a panic or an early error came first.
        if self.child.is_some() || self.cgroup.is_some() {
            self.stop();
            if self.file_registration.take().is_some() {
                let _ = cleanup::undo(&Leftover::File(self.file.clone()));
            }
            // The cgroup removes itself when dropped.
        }
    }
}
