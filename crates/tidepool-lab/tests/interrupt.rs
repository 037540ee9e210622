//! A lab run stopped at the wrong moment leaves nothing behind: the CLI is
//! run as a child process and sent SIGINT (or SIGTERM, or made to panic)
//! at several moments, the pressure scenario's page-cache thrash included;
//! then no thrash file is left in its temp directory, no cgroup of its own
//! under this process's memory cgroup, and it ended the way a person
//! expects (killed by the signal; exit code 101 for a panic). Every wait
//! has a deadline: a hang fails the test instead of stalling it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use tidepool_lab::source::cgroup::own_v1_memory;

const BIN: &str = env!("CARGO_BIN_EXE_tidepool-lab");
const DEADLINE: Duration = Duration::from_secs(120);

struct Lab {
    child: Child,
    tmp: PathBuf,
    out: PathBuf,
    stderr: Receiver<String>,
    seen: Vec<String>,
}

impl Lab {
    fn start(name: &str, args: &[&str], fault: Option<&str>) -> Lab {
        let base = std::env::temp_dir().join(format!(
            "tidepool-lab-interrupt-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        let tmp = base.join("tmp");
        let out = base.join("out");
        std::fs::create_dir_all(&tmp).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("run")
            .args(["--quick", "--quiet", "--out"])
            .arg(&out)
            .args(args)
            .env("TMPDIR", &tmp)
            .env_remove("TIDEPOOL_LAB_FAULT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(f) = fault {
            cmd.env("TIDEPOOL_LAB_FAULT", f);
        }
        let mut child = cmd.spawn().expect("start tidepool-lab");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lab {
            child,
            tmp,
            out,
            stderr: rx,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line of standard error that starts with `prefix`.
    fn wait_line(&mut self, prefix: &str) {
        let end = Instant::now() + DEADLINE;
        loop {
            match self.stderr.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    let hit = line.starts_with(prefix);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the lab ended before printing {prefix:?}: {:?}", self.seen)
                }
            }
            assert!(Instant::now() < end, "no {prefix:?} within {DEADLINE:?}");
        }
    }

    /// Waits until the thrash of the pressure scenario runs: its file is in
    /// the temp directory and its cgroup exists.
    fn wait_thrash(&mut self) {
        let end = Instant::now() + DEADLINE;
        loop {
            let file = !leftover_files(&self.tmp).is_empty();
            let cgroup = !leftover_cgroups(self.pid()).is_empty();
            if file && cgroup {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the lab ended ({status}) before its thrash ran: {:?}",
                    self.drain()
                );
            }
            assert!(Instant::now() < end, "no thrash within {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    fn drain(&mut self) -> Vec<String> {
        while let Ok(line) = self.stderr.try_recv() {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    /// Waits for the lab to end (killing it after the deadline: a hang is
    /// a failure).
    fn wait(&mut self) -> ExitStatus {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the lab hung: {:?}", self.drain());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Nothing of the run is left, whatever its status; then the test's own
    /// directories go.
    fn assert_clean(mut self, what: &str) {
        let pid = self.pid();
        let files = leftover_files(&self.tmp);
        let cgroups = leftover_cgroups(pid);
        let partial: Vec<PathBuf> = std::fs::read_dir(&self.out)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().contains(".tmp-"))
                    .collect()
            })
            .unwrap_or_default();
        let log = self.drain();
        assert!(files.is_empty(), "{what}: files left: {files:?}; {log:?}");
        assert!(
            cgroups.is_empty(),
            "{what}: cgroups left: {cgroups:?}; {log:?}"
        );
        assert!(partial.is_empty(), "{what}: partial reports: {partial:?}");
        let _ = std::fs::remove_dir_all(self.tmp.parent().unwrap());
    }
}

fn leftover_files(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("tidepool-lab-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// This child's cgroups under our memory cgroup (it inherits it).
fn leftover_cgroups(pid: u32) -> Vec<PathBuf> {
    let Ok(parent) = own_v1_memory() else {
        return Vec::new();
    };
    let mine = [
        format!("tidepool-lab-thrash-{pid}-"),
        format!("tidepool-lab-probe-{pid}"),
    ];
    std::fs::read_dir(parent)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap().to_string_lossy().into_owned();
                    mine.iter().any(|m| n.starts_with(m.as_str()))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn assert_signalled(status: ExitStatus, sig: i32, what: &str) {
    assert_eq!(status.signal(), Some(sig), "{what}: {status}");
}

/// Whether the real pressure source can run here (the same steps the
/// CLI tries up front, in this process, which has the same privileges);
/// if not, why.
fn real_source() -> Result<(), String> {
    tidepool_lab::source::prepare(tidepool_lab::PressureSource::Real).map(drop)
}

#[test]
fn sigint_as_the_run_starts() {
    let mut lab = Lab::start("start", &["--scenario", "fio"], None);
    lab.wait_line("tidepool-lab: quick run");
    lab.signal(rustix::process::Signal::INT);
    let status = lab.wait();
    assert_signalled(status, libc_sigint(), "SIGINT at the start");
    lab.assert_clean("SIGINT at the start");
}

#[test]
fn sigint_in_the_middle_of_a_scenario() {
    let mut lab = Lab::start("middle", &["--scenario", "fio,spike-then-idle"], None);
    lab.wait_line("tidepool-lab: quick run");
    // A moment into the runs (not a measurement: any moment must do).
    std::thread::sleep(Duration::from_millis(1500));
    lab.signal(rustix::process::Signal::INT);
    let status = lab.wait();
    assert_signalled(status, libc_sigint(), "SIGINT mid-scenario");
    lab.assert_clean("SIGINT mid-scenario");
}

const THRASH: &[&str] = &[
    "--scenario",
    "pressure",
    "--pressure-source",
    "real",
    "--policy",
    "none,tidepool",
];

#[test]
fn sigint_sigterm_and_a_panic_during_the_thrash_leave_nothing() {
    if let Err(why) = real_source() {
        // Without the real source no thrash ever starts, so there is
        // nothing to leave behind; say so rather than pass silently.
        eprintln!(
            "the real pressure source is refused here, so no thrash can be interrupted: {why}"
        );
        return;
    }
    for (n, sig, name) in [
        (0, rustix::process::Signal::INT, "SIGINT"),
        (1, rustix::process::Signal::TERM, "SIGTERM"),
    ] {
        let mut lab = Lab::start(&format!("thrash-{n}"), THRASH, None);
        lab.wait_thrash();
        lab.signal(sig);
        let status = lab.wait();
        assert_signalled(status, sig.as_raw(), name);
        lab.assert_clean(&format!("{name} during the thrash"));
    }
    // A second thrash, later in the scenario (the first policy's run is
    // over by then).
    let mut lab = Lab::start("thrash-later", THRASH, None);
    lab.wait_thrash();
    let first = leftover_cgroups(lab.pid());
    let end = Instant::now() + DEADLINE;
    loop {
        let now = leftover_cgroups(lab.pid());
        if !now.is_empty() && now != first {
            break;
        }
        assert!(Instant::now() < end, "no second thrash");
        assert!(lab.child.try_wait().unwrap().is_none(), "ended too soon");
        std::thread::sleep(Duration::from_millis(5));
    }
    lab.signal(rustix::process::Signal::INT);
    let status = lab.wait();
    assert_signalled(status, libc_sigint(), "SIGINT in the second thrash");
    lab.assert_clean("SIGINT in the second thrash");

    // A panic right after the thrash started: unwinding cleans up, the
    // run does not hang, the exit code is a panic's.
    let mut lab = Lab::start("panic", THRASH, Some("thrash"));
    let status = lab.wait();
    let log = lab.drain();
    assert_eq!(status.code(), Some(101), "{status}: {log:?}");
    assert!(
        log.iter().any(|l| l.contains("injected fault at thrash")),
        "{log:?}"
    );
    lab.assert_clean("a panic during the thrash");

    // And the normal path.
    let mut lab = Lab::start("normal", THRASH, None);
    let status = lab.wait();
    assert!(status.success(), "{status}: {:?}", lab.drain());
    assert!(lab.out.join("report.html").exists());
    lab.assert_clean("a run that ended normally");
}

#[test]
fn bad_arguments_fail_before_any_work() {
    for (args, expect) in [
        (vec!["--repeats", "0"], "--repeats"),
        (vec!["--time-scale", "1e9"], "tidepool policy could not run"),
        (vec!["--scenario", "no-such-scenario"], "possible values"),
        (vec!["--policy", "qemu-2099"], "possible values"),
        (vec!["--out", "/proc/tidepool-lab"], "--out"),
    ] {
        let out = Command::new(BIN)
            .arg("run")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err}");
        // Refused before the run began: no header, no table, no report.
        assert!(
            !err.contains("tidepool-lab: quick run") && !err.contains("full run"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

fn libc_sigint() -> i32 {
    rustix::process::Signal::INT.as_raw()
}
