//! What a lab run leaves on the machine while it runs, and how it is undone
//! on every way out: the normal path, an error, a panic, and SIGINT, SIGTERM
//! or SIGHUP.
//!
//! Only the pressure scenario's real source leaves anything: a child memory
//! cgroup, a shell and its `dd` inside it, and a 300 MB file in the temp
//! directory (see [`crate::source::thrash`]). Each is registered here
//! *before* it exists ([`create`] makes it under the registry's lock), so
//! that whichever moment a signal comes, [`undo_all`] finds it.
//!
//! * Normal path: the owner removes what it made and drops its
//!   [`Registration`].
//! * Error and panic: the owners' `Drop`s, and [`ExitGuard`] in `main`,
//!   which runs [`undo_all`] as `main` returns or unwinds.
//! * Signals ([`handle_signals`]): `signal-hook`'s iterator receives them on
//!   an ordinary thread, not in signal context, so the cleanup may take
//!   locks, kill processes and retry `rmdir`; then
//!   `emulate_default_handler` ends the process the way the signal would
//!   have, so a shell sees "interrupted", not an error code.
//!
//! [`undo_all`] also closes the registry: whatever the run tries to make
//! afterwards is refused, so nothing can appear behind the cleanup's back.
//!
//! For tests, `TIDEPOOL_LAB_FAULT=<point>` makes the lab panic at a named
//! point ([`fault_point`]), so that the panic path can be checked in a child
//! process.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Something a run made that must not outlive it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// A process, killed with `SIGKILL`.
    Process(u32),
    /// A file, removed.
    File(PathBuf),
    /// A cgroup v1 directory: every task in it is killed, then it is removed.
    Cgroup(PathBuf),
}

#[derive(Debug)]
struct Registry {
    /// Why the registry was closed, once [`undo_all`] ran.
    closed: Option<String>,
    next: u64,
    items: Vec<(u64, Leftover)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    closed: None,
    next: 0,
    items: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A registered [`Leftover`]. Dropping it forgets the entry: drop it once
/// the thing is gone (its owner removed it).
#[derive(Debug)]
#[must_use = "dropping the registration forgets the leftover"]
pub struct Registration {
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().items.retain(|(id, _)| *id != self.id);
    }
}

/// Registers `item`, which the caller is about to make.
///
/// # Errors
///
/// Once [`undo_all`] has run: the lab is shutting down, make nothing more.
pub fn register(item: Leftover) -> Result<Registration, String> {
    let mut reg = registry();
    push(&mut reg, item)
}

fn push(reg: &mut Registry, item: Leftover) -> Result<Registration, String> {
    if let Some(why) = &reg.closed {
        return Err(format!(
            "the lab is shutting down ({why}): nothing new is made"
        ));
    }
    reg.next += 1;
    let id = reg.next;
    reg.items.push((id, item));
    Ok(Registration { id })
}

/// Makes something under the registry's lock and registers what `make`
/// says it made, so that no signal's cleanup can run between the two.
/// `make` must be quick (a `mkdir`, a `spawn`).
///
/// # Errors
///
/// `make`'s error, or the registry is closed (then `make` is not called).
pub fn create<T>(
    make: impl FnOnce() -> Result<(T, Leftover), String>,
) -> Result<(T, Registration), String> {
    let mut reg = registry();
    if let Some(why) = &reg.closed {
        return Err(format!(
            "the lab is shutting down ({why}): nothing new is made"
        ));
    }
    let (made, item) = make()?;
    let registration = push(&mut reg, item)?;
    Ok((made, registration))
}

/// Undoes every registered leftover (processes first, then files, then
/// cgroups) and closes the registry. Returns what could not be undone.
pub fn undo_all(why: &str) -> Vec<String> {
    let items = {
        let mut reg = registry();
        reg.closed.get_or_insert_with(|| why.to_owned());
        std::mem::take(&mut reg.items)
    };
    let mut items: Vec<Leftover> = items.into_iter().map(|(_, item)| item).collect();
    items.sort_by_key(|item| match item {
        Leftover::Process(_) => 0,
        Leftover::File(_) => 1,
        Leftover::Cgroup(_) => 2,
    });
    let mut problems = Vec::new();
    for item in &items {
        if let Err(e) = undo(item) {
            problems.push(e);
        }
    }
    problems
}

/// Undoes one leftover: the one place that knows how.
///
/// # Errors
///
/// What stayed behind, and why.
pub fn undo(item: &Leftover) -> Result<(), String> {
    match item {
        Leftover::Process(pid) => {
            kill(*pid);
            Ok(())
        }
        Leftover::File(path) => match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("remove {}: {e}", path.display())),
        },
        Leftover::Cgroup(dir) => remove_cgroup(dir),
    }
}

fn kill(pid: u32) {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        // ESRCH (already gone) is the common case and fine.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// The tasks in cgroup `dir` (`cgroup.procs`).
pub fn cgroup_tasks(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills every task in cgroup `dir` until none is left (at most 10 s).
pub fn kill_cgroup_tasks(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tasks = cgroup_tasks(dir);
        if tasks.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in tasks {
            kill(pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills the tasks of cgroup `dir` and removes it; a cgroup can go once its
/// tasks have exited, which takes a moment (retried for up to 10 s).
fn remove_cgroup(dir: &Path) -> Result<(), String> {
    kill_cgroup_tasks(dir);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("rmdir {}: {e}", dir.display()))
            }
            Err(_) => {
                kill_cgroup_tasks(dir);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Runs [`undo_all`] when dropped: hold one in `main` for the whole run, so
/// that returning early or unwinding from a panic cleans up too.
#[derive(Debug, Default)]
pub struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let why = if std::thread::panicking() {
            "a panic"
        } else {
            "the run ended"
        };
        for problem in undo_all(why) {
            eprintln!("tidepool-lab: cleanup: {problem}");
        }
    }
}

/// Cleans up and ends the process on SIGINT, SIGTERM or SIGHUP, with the
/// status the signal would have given it. Call once, early in `main`.
///
/// # Errors
///
/// If the handlers cannot be registered or the thread cannot start.
pub fn handle_signals() -> io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("tidepool-lab-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let name = match signal {
                    SIGINT => "SIGINT",
                    SIGTERM => "SIGTERM",
                    _ => "SIGHUP",
                };
                let problems = undo_all(&format!("{name} received"));
                eprintln!();
                if problems.is_empty() {
                    eprintln!("tidepool-lab: {name}: stopped; nothing left behind");
                } else {
                    for p in &problems {
                        eprintln!("tidepool-lab: {name}: cleanup: {p}");
                    }
                }
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                // Not reached unless the default action could not be had.
                std::process::exit(128 + signal);
            }
        })?;
    Ok(())
}

/// Panics if `TIDEPOOL_LAB_FAULT` names `point` (tests of the panic path).
pub fn fault_point(point: &str) {
    static FAULT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let fault = FAULT.get_or_init(|| std::env::var("TIDEPOOL_LAB_FAULT").ok());
    if fault.as_deref() == Some(point) {
        panic!("injected fault at {point} (TIDEPOOL_LAB_FAULT)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_undone_and_the_registry_stays_consistent() {
        let dir = std::env::temp_dir().join(format!("tidepool-lab-cleanup-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a");
        let b = dir.join("b");
        fs::write(&a, b"x").unwrap();
        fs::write(&b, b"x").unwrap();
        let ra = register(Leftover::File(a.clone())).unwrap();
        let rb = register(Leftover::File(b.clone())).unwrap();
        // The owner removed `a` itself: it forgets it.
        undo(&Leftover::File(a.clone())).unwrap();
        drop(ra);
        assert!(!registry()
            .items
            .iter()
            .any(|(_, i)| *i == Leftover::File(a.clone())));
        assert!(registry()
            .items
            .iter()
            .any(|(_, i)| *i == Leftover::File(b.clone())));
        // Undoing something already gone is not an error.
        undo(&Leftover::File(a)).unwrap();
        drop(rb);
        fs::remove_dir_all(&dir).unwrap();
    }
}
