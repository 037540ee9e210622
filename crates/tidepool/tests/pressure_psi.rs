//! Memory pressure from the real kernel: a PSI trigger (and a cgroup v1
//! `memory.pressure_level` listener) armed by this process fires under real
//! memory pressure, and a pool drains.
//!
//! The pressure is produced honestly, as on a machine with cgroup v1 and PSI:
//! a child of this process's v1 memory cgroup limited to 64 MiB, and a shell
//! moved into it that writes a 300 MB file and reads it back, over and over
//! (page-cache thrash), until the test has seen what it waits for.
//!
//! Where the kernel refuses a step (no PSI, a refused trigger, no v1 memory
//! cgroup, no permission), the test FAILS and names the step and the reason:
//! it never passes without having seen the signal.
//!
//! `TIDEPOOL_PRESSURE=manual` is set before the first pool is built, so the
//! only sources the reclaimer watches are the ones these tests give it: a
//! pool's response is the armed source's doing. The two tests take
//! [`SERIAL`], so one load runs at a time.

#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use common::{Counting, Ledger};
use tidepool::pressure::{self, CgroupV1Pressure, Level, PsiTrigger, SourceStatus, Stall};
use tidepool::reclaim::ManualClock;
use tidepool::{Pool, Stats};

type P = Pool<Counting>;

/// How long the load may take to produce the signal (the notes: ~3 s for
/// PSI, ~1 s for v1 `low`).
const PATIENCE: Duration = Duration::from_secs(60);
const PSI_FILE: &str = "/proc/pressure/memory";
const LIMIT: &str = "67108864"; // 64 MiB

static SERIAL: Mutex<()> = Mutex::new(());

fn setup() -> MutexGuard<'static, ()> {
    static MANUAL: Once = Once::new();
    MANUAL.call_once(|| std::env::set_var("TIDEPOOL_PRESSURE", "manual"));
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn refused(step: &str, why: impl std::fmt::Display) -> ! {
    panic!("memory-pressure test: the kernel refused step `{step}`: {why}")
}

/// This process's v1 memory cgroup (the library's own lookup).
fn own_v1_memory_cgroup() -> PathBuf {
    let step = "find this process's v1 memory cgroup";
    let dir =
        tidepool::pressure::CgroupV1Pressure::own_cgroup_dir().unwrap_or_else(|e| refused(step, e));
    if !dir.join("memory.limit_in_bytes").exists() {
        refused(
            step,
            format!(
                "{} has no memory.limit_in_bytes (is the v1 memory hierarchy mounted?)",
                dir.display()
            ),
        );
    }
    dir
}

/// A child memory cgroup limited to 64 MiB, with a page-cache thrashing load
/// in it once [`start`](Load::start)ed. Dropping it kills the load and
/// removes the file and the cgroup.
struct Load {
    cgroup: PathBuf,
    file: PathBuf,
    child: Option<Child>,
}

impl Load {
    /// Creates the cgroup (not yet loaded), so a listener can be armed on it.
    fn cgroup(tag: &str) -> Self {
        let parent = own_v1_memory_cgroup();
        let cgroup = parent.join(format!("tidepool-test-{tag}-{}", std::process::id()));
        let file =
            std::env::temp_dir().join(format!("tidepool-thrash-{tag}-{}", std::process::id()));
        if cgroup.exists() {
            let _ = fs::remove_dir(&cgroup);
        }
        fs::create_dir(&cgroup).unwrap_or_else(|e| {
            refused(
                "create a child memory cgroup",
                format!("mkdir {}: {e}", cgroup.display()),
            )
        });
        let load = Self {
            cgroup,
            file,
            child: None,
        };
        let limit = load.cgroup.join("memory.limit_in_bytes");
        fs::write(&limit, LIMIT).unwrap_or_else(|e| {
            refused(
                "limit the child cgroup to 64 MiB",
                format!("write {LIMIT} to {}: {e}", limit.display()),
            )
        });
        let set = fs::read_to_string(&limit).unwrap_or_default();
        if set.trim() != LIMIT {
            refused(
                "limit the child cgroup to 64 MiB",
                format!("{} reads {set:?} after writing {LIMIT}", limit.display()),
            );
        }
        load
    }

    /// Starts the load: a shell that moves itself into the cgroup, then
    /// writes the file and reads it back three times, in a loop.
    fn start(&mut self) {
        let script = r#"
            echo $$ > "$CG/cgroup.procs" || exit 97
            while :; do
                dd if=/dev/zero of="$F" bs=1M count=300 status=none || exit 98
                for i in 1 2 3; do dd if="$F" of=/dev/null bs=1M status=none || exit 99; done
            done
        "#;
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("CG", &self.cgroup)
            .env("F", &self.file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| refused("start the load process", format!("spawn sh: {e}")));
        let pid = child.id();
        self.child = Some(child);
        // It is in the cgroup before it does anything else.
        let start = Instant::now();
        loop {
            let procs = fs::read_to_string(self.cgroup.join("cgroup.procs")).unwrap_or_default();
            if procs.lines().any(|l| l.trim() == pid.to_string()) {
                return;
            }
            self.check_running("move the load process into the child cgroup");
            if start.elapsed() > Duration::from_secs(10) {
                refused(
                    "move the load process into the child cgroup",
                    format!(
                        "pid {pid} not in {}/cgroup.procs after 10 s",
                        self.cgroup.display()
                    ),
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Fails the test if the load process has exited: it only stops when
    /// killed.
    fn check_running(&mut self, step: &str) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if let Ok(Some(status)) = child.try_wait() {
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
            refused(step, format!("{what} ({status}); stderr: {err:?}"));
        }
    }

    fn cgroup_procs(&self) -> Vec<String> {
        fs::read_to_string(self.cgroup.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // The shell and whichever `dd` it runs: everything in the cgroup.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let procs = self.cgroup_procs();
            if procs.is_empty() || Instant::now() > deadline {
                break;
            }
            let _ = Command::new("kill").arg("-KILL").args(&procs).status();
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_file(&self.file);
        // The cgroup can go once its tasks have exited (give it a moment).
        let mut last = None;
        while Instant::now() < deadline {
            match fs::remove_dir(&self.cgroup) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let msg = format!("could not remove {}: {last:?}", self.cgroup.display());
        if std::thread::panicking() {
            eprintln!("{msg}");
        } else {
            panic!("{msg}");
        }
    }
}

fn status_of(name: &str) -> Option<SourceStatus> {
    pressure::sources().into_iter().find(|s| s.name == name)
}

/// Waits (up to [`PATIENCE`]) for `cond`, checking the load keeps running.
fn wait_under_load<T: std::fmt::Debug>(
    load: &mut Load,
    what: &str,
    mut probe: impl FnMut() -> T,
    cond: impl Fn(&T) -> bool,
) -> T {
    let start = Instant::now();
    loop {
        let seen = probe();
        if cond(&seen) {
            return seen;
        }
        load.check_running(what);
        assert!(
            start.elapsed() < PATIENCE,
            "no signal: gave up after {PATIENCE:?} of page-cache thrash in a 64 MiB cgroup \
             waiting for {what}; last seen: {seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn finish(pool: Arc<P>, ledger: Arc<Ledger>) {
    assert_eq!(Arc::strong_count(&pool), 1);
    drop(pool);
    ledger.assert_all_accounted();
}

/// The unprivileged PSI trigger (`some 10 ms` in a 2 s window) on the
/// system's `/proc/pressure/memory` fires while a 64 MiB cgroup thrashes its
/// page cache, and a background pool drains to `min_idle`.
#[test]
fn psi_trigger_fires_under_real_memory_pressure_and_the_pool_drains() {
    let _serial = setup();
    if let Err(e) = fs::read_to_string(PSI_FILE) {
        refused(
            "read /proc/pressure/memory",
            format!("{PSI_FILE}: {e} (a kernel without PSI, or booted with psi=0)"),
        );
    }
    let trigger = PsiTrigger::new(
        PSI_FILE,
        Stall::Some,
        Duration::from_millis(10),
        Duration::from_secs(2),
        Level::Critical,
    )
    .unwrap_or_else(|e| refused("arm the PSI trigger `some 10000 2000000`", e));
    let name = pressure::Source::name(&trigger);

    let (manager, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(manager)
            .batch_size(4)
            .min_idle(2)
            .reclaim_interval(Duration::from_secs(3600))
            .build()
            .unwrap(),
    );
    drop((0..50).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
    assert_eq!(pool.stats().idle, 50);

    let mut load = Load::cgroup("psi");
    pressure::watch(Box::new(trigger));
    let st = status_of(&name).expect("the trigger is listed once watched");
    assert_eq!(st.error, None);
    let before = pool.stats();
    load.start();

    let (s, st) = wait_under_load(
        &mut load,
        "the PSI trigger to fire and the pool to drain to min_idle",
        || (pool.stats(), status_of(&name).unwrap()),
        |(s, st): &(Stats, SourceStatus)| {
            // Destroys go through the pool's destroy queue: wait until
            // it is empty too, so `destroyed` is final.
            st.events >= 1
                && s.pressure_critical > before.pressure_critical
                && s.idle == 2
                && s.destroying == 0
        },
    );
    drop(load);
    assert_eq!(st.error, None, "the trigger is still watched: {st:?}");
    assert_eq!((s.idle_depot, s.idle_cached()), (2, 0));
    assert_eq!(s.destroyed, 48);
    finish(pool, ledger);
}

/// The cgroup v1 `memory.pressure_level` listener at `low`, on the
/// thrashing cgroup itself, fires, and Medium reaches a background pool: it
/// destroys exactly what sat unused through this interval and the last.
#[test]
fn cgroup_v1_low_pressure_fires_under_real_memory_pressure() {
    let _serial = setup();
    let mut load = Load::cgroup("v1");
    let listener = CgroupV1Pressure::new(&load.cgroup, "low", Level::Medium).unwrap_or_else(|e| {
        refused(
            "register a memory.pressure_level `low` listener via cgroup.event_control",
            e,
        )
    });
    let name = pressure::Source::name(&listener);

    // A background pool on a manual clock, set up so that 200 objects sat
    // unused through the last interval and this one so far.
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(ManualClock::new());
    let interval = Duration::from_secs(10);
    let pool = Arc::new(
        Pool::builder(manager)
            .batch_size(4)
            .reclaim_interval(interval)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let use_n = |n: usize| drop((0..n).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
    let passes = std::cell::Cell::new(0);
    let end_interval = || {
        clock.advance(interval);
        pool.reclaim();
        // The reclaimer may be the one running it: wait for it.
        passes.set(passes.get() + 1);
        let start = Instant::now();
        while pool.stats().reclaim_passes != passes.get() {
            assert!(
                start.elapsed() < PATIENCE,
                "pass {} never ran",
                passes.get()
            );
            std::thread::yield_now();
        }
    };
    use_n(16);
    end_interval();
    use_n(216);
    end_interval();
    use_n(16);
    end_interval();
    let before = pool.stats();
    assert_eq!(
        (before.idle, before.reclaimed, before.pressure_medium),
        (216, 0, 0)
    );

    pressure::watch(Box::new(listener));
    assert_eq!(status_of(&name).expect("listed once watched").error, None);
    load.start();
    let (s, st) = wait_under_load(
        &mut load,
        "the v1 `low` listener to fire and Medium to reach the pool",
        || (pool.stats(), status_of(&name).unwrap()),
        // Medium's destroys go through the reclaimer's destroy queue, counted
        // as reclaimed once run: wait for the queue too, not just the signal.
        |(s, st): &(Stats, SourceStatus)| {
            st.events >= 1 && s.pressure_medium >= 1 && s.destroying == 0
        },
    );
    drop(load);
    assert_eq!(st.error, None, "{st:?}");
    // Medium takes the 200; a Critical from the other test's PSI trigger
    // (still watched, if it ran first) may have drained the rest too.
    assert!(s.reclaimed >= 200, "{s:?}");
    assert!(s.idle <= 16, "{s:?}");
    finish(pool, ledger);
}
