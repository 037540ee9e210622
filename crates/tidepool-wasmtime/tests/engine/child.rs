//! Cases that end the process, run in a child: the test binary itself,
//! re-executed with one test name and an environment variable saying
//! "you are the child, do it".

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const CHILD_VAR: &str = "TIDEPOOL_WASMTIME_CHILD";

/// A hang guard, not a measurement: far above what the case takes.
const HANG_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether this process is the child asked to run `case`.
pub fn is_child(case: &str) -> bool {
    std::env::var(CHILD_VAR).is_ok_and(|v| v == case)
}

/// Runs test `test` (its full path in this binary) as the child for
/// `case`; returns how it ended and what it wrote to stderr. Kills it and
/// fails if it hangs.
pub fn run_child(test: &str, case: &str) -> (ExitStatus, String) {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, case)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test binary");
    let mut pipe = child.stderr.take().expect("piped");
    let reader = thread::spawn(move || {
        let mut stderr = String::new();
        let _ = pipe.read_to_string(&mut stderr);
        stderr
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if started.elapsed() > HANG_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child `{case}` hung for {HANG_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, reader.join().expect("the reader does not panic"))
}
