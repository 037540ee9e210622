//! Running one test case in a child process, so that a hang or an abort
//! fails that case instead of taking the whole test binary down.
//!
//! The parent re-runs this very test binary (`current_exe`) with
//! `--exact NAME` and [`CHILD_ENV`] set to `NAME`; the child runs the case's
//! body, prints [`DONE`] and exits normally. The parent kills a child that
//! outlives its timeout, and fails the test unless the child exited with
//! status 0 after printing the marker (so a filter that matched no test, an
//! abort, a signal or a hang all fail).
//!
//! [`fork_and_wait`] does the same for a `fork(2)`ed copy of the current
//! process (used inside such a child, where only the test thread runs).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Names the case a child process is to run.
pub const CHILD_ENV: &str = "TIDEPOOL_TEST_CHILD";

/// Printed to standard error by a child that finished its case.
pub const DONE: &str = "TIDEPOOL-TEST-CHILD-DONE";

/// How long a child may take by default. Cases wait for conditions with
/// their own (shorter) bounds; this only catches hangs.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Whether this process is the child for case `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).as_deref() == Ok(name)
}

/// What became of a child process.
#[derive(Debug)]
pub struct ChildOutput {
    pub name: String,
    /// `None` if it was killed for outliving its timeout.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl ChildOutput {
    /// The child ran its case to the end and exited normally.
    pub fn finished(&self) -> bool {
        self.status.is_some_and(|s| s.success()) && self.stderr.contains(DONE)
    }

    /// Fails the test unless the child [`finished`](Self::finished),
    /// showing what it printed.
    pub fn assert_finished(&self) {
        assert!(
            self.finished(),
            "child case {:?} did not finish normally: {}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.name,
            match self.status {
                None => "killed after outliving its timeout (a hang)".to_owned(),
                Some(s) => format!("{s}"),
            },
            self.stdout,
            self.stderr
        );
    }
}

/// Runs test `name` of this binary in a child process (with `env` set on top
/// of [`CHILD_ENV`]) and waits at most `timeout` for it.
pub fn spawn(name: &str, timeout: Duration, env: &[(&str, &str)]) -> ChildOutput {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        // The children's reclaimer watches no real PSI file: a real memory
        // pressure event must not decide a case.
        .env("TIDEPOOL_PRESSURE", "manual")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the test binary");
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let status = wait_timeout(&mut child, timeout);
    ChildOutput {
        name: name.to_owned(),
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Runs `body` as case `name`: in the child process if this is it, else
/// spawns the child (timeout [`TIMEOUT`]) and asserts it finished normally.
pub fn run(name: &str, body: impl FnOnce()) {
    run_with(name, TIMEOUT, &[], body);
}

/// [`run`] with a timeout and extra environment variables for the child.
pub fn run_with(name: &str, timeout: Duration, env: &[(&str, &str)], body: impl FnOnce()) {
    if is_child(name) {
        body();
        eprintln!("{DONE} {name}");
        return;
    }
    spawn(name, timeout, env).assert_finished();
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Forks this process, runs `body` in the forked child and ends it with
/// `_exit` (0 if `body` returned, 1 if it panicked: nothing of the test
/// harness runs in the child). Waits at most `timeout` for it.
///
/// Call it only where no other thread of the test harness matters (in a
/// child case process): the forked child has only the calling thread.
#[cfg(unix)]
pub fn fork_and_wait(timeout: Duration, body: impl FnOnce()) -> Result<(), String> {
    fork(body).wait(timeout)
}

/// A forked child running a closure; see [`fork`].
#[cfg(unix)]
#[derive(Debug)]
#[must_use = "wait for the forked child"]
pub struct Forked {
    pid: libc::pid_t,
}

/// Forks this process and runs `body` in the child, which then `_exit`s (0
/// if `body` returned, 1 if it panicked). The parent gets a [`Forked`] to
/// [`wait`](Forked::wait) for.
#[cfg(unix)]
pub fn fork(body: impl FnOnce()) -> Forked {
    // SAFETY: `fork` has no preconditions; in the child only this thread
    // exists, and it runs `body` and then `_exit`s without returning.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_ok();
        // SAFETY: ends the forked child at once, running nothing else of the
        // parent's (no atexit handlers, no test harness).
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    Forked { pid }
}

#[cfg(unix)]
impl Forked {
    /// Waits at most `timeout` for the child, killing it after that. `Ok`
    /// if it exited with 0; `Err` says what happened instead.
    pub fn wait(self, timeout: Duration) -> Result<(), String> {
        let pid = self.pid;
        let start = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: `pid` is our child; `status` is a valid out-pointer.
            let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if rc == pid {
                if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                    return Ok(());
                }
                if libc::WIFSIGNALED(status) {
                    return Err(format!(
                        "forked child killed by signal {}",
                        libc::WTERMSIG(status)
                    ));
                }
                return Err(format!(
                    "forked child exited with status {}",
                    libc::WEXITSTATUS(status)
                ));
            }
            assert!(rc == 0, "waitpid: {}", std::io::Error::last_os_error());
            if start.elapsed() > timeout {
                // SAFETY: signals our own child, then reaps it.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return Err(format!(
                    "forked child still running after {timeout:?}: a hang"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Polls `probe` until `cond` holds or `patience` runs out; returns the last
/// value seen and whether `cond` held. Never asserts on elapsed time: the
/// bound only keeps a broken case from waiting forever.
pub fn wait_until<T>(
    patience: Duration,
    mut probe: impl FnMut() -> T,
    cond: impl Fn(&T) -> bool,
) -> (T, bool) {
    let start = Instant::now();
    loop {
        let seen = probe();
        if cond(&seen) {
            return (seen, true);
        }
        if start.elapsed() > patience {
            return (seen, false);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
