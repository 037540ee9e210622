//! Where the `pressure` scenario's signal comes from: real memory pressure
//! reported by the kernel's PSI where the kernel allows it, else tidepool's
//! manual source.
//!
//! # The real source
//!
//! Produced honestly, as `crates/tidepool/tests/pressure_psi.rs` does (and
//! `/work/shared/reference/machine-notes.md` measured): a new child of this
//! process's cgroup v1 memory cgroup, limited to 64 MiB, and a shell moved
//! into it that writes a 300 MB file and reads it back three times, over and
//! over (page-cache thrash). A PSI trigger on `/proc/pressure/memory`
//! (`some 10000 2000000`: 10 ms of stall in a 2 s window, the shortest window
//! an unprivileged trigger may use), armed once per process and watched by
//! tidepool's reclaimer thread, signals [`Level::Critical`]; it fires within
//! about 1-3 s. The thrash starts at the scenario's signal moment for every
//! policy alike, and stops once the signal has arrived (or after
//! [`PATIENCE`]). The trigger signals at most once per window, so a thrash
//! never starts less than [`GAP`] after the previous one ended.
//!
//! # Choosing
//!
//! [`PressureSource::Auto`] tries the real source and, if any step is
//! refused (no PSI, no v1 memory cgroup, no permission to make one, no
//! `sh`/`dd`, a refused trigger), falls back to the manual source and says
//! why; [`PressureSource::Real`] fails the scenario instead;
//! [`PressureSource::Manual`] always calls
//! `tidepool::pressure::notify(Level::Critical)`.
//!
//! # Plumbing
//!
//! The scenario runner is shared by every scenario, so this module reaches
//! the pressure scenario's runs through a per-thread record of the lab run
//! ([`begin`]): the source chosen, the policy being run ([`Tracking`], a
//! [`Progress`] that notes it), and one [`SignalRecord`] per measured run,
//! written by a controller thread that joins each run's worker threads.

use std::cell::RefCell;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tidepool::pressure::{self, Level};

use crate::policy::{Local, PolicyKind, StackFailure};
use crate::report::Report;
use crate::scenario::harness::{Harness, Load, Phase, Plan, Worker};
use crate::scenario::Progress;
use crate::stack::LabStack;

/// How the real source is named in reports.
pub const REAL_LABEL: &str =
    "psi /proc/pressure/memory (real page-cache thrash in a 64 MiB cgroup)";
/// How the manual source is named in reports.
pub const MANUAL_LABEL: &str = "manual: tidepool::pressure::notify(Critical)";
/// Notes that start with this mark a `--pressure-source real` that could not
/// deliver a real signal; [`refusals`] finds them.
pub const REFUSED: &str = "pressure source refused:";

/// The PSI file the trigger is armed on.
pub const PSI_FILE: &str = "/proc/pressure/memory";
/// Stall within a window that fires the trigger.
pub const PSI_THRESHOLD: Duration = Duration::from_millis(10);
/// The trigger's window (the shortest allowed without `CAP_SYS_RESOURCE`).
pub const PSI_WINDOW: Duration = Duration::from_secs(2);
/// How long a run waits for the signal before it records that none came.
pub const PATIENCE: Duration = Duration::from_secs(15);
/// The least time between the end of one thrash and the start of the next:
/// a window, so that neither the kernel's one-event-per-window limit nor
/// stall left over from the previous run decides when the trigger fires.
pub const GAP: Duration = Duration::from_millis(2100);
const LIMIT: &str = "67108864"; // 64 MiB
const FILE_MB: u32 = 300;

/// Which pressure source the `pressure` scenario uses.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
pub enum PressureSource {
    /// Real PSI where the kernel allows it, else manual (saying why).
    #[serde(rename = "auto")]
    #[value(name = "auto")]
    Auto,
    /// Real PSI, or the scenario fails with the reason.
    #[serde(rename = "real")]
    #[value(name = "real")]
    Real,
    /// `tidepool::pressure::notify(Level::Critical)`.
    #[serde(rename = "manual")]
    #[value(name = "manual")]
    Manual,
}

impl PressureSource {
    /// `manual` for `--quick` runs (fast, no root needed), `auto` otherwise.
    pub fn default_for(quick: bool) -> Self {
        if quick {
            PressureSource::Manual
        } else {
            PressureSource::Auto
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PressureSource::Auto => "auto",
            PressureSource::Real => "real",
            PressureSource::Manual => "manual",
        }
    }
}

impl fmt::Display for PressureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the signal will be delivered in this lab run's pressure scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Page-cache thrash in a 64 MiB cgroup; the PSI trigger is armed.
    Real {
        /// The armed trigger's name, as in `tidepool::pressure::sources()`.
        trigger: String,
        /// `--pressure-source real`: a run whose thrash cannot start gets
        /// no signal (and the scenario is marked refused) instead of the
        /// manual one.
        strict: bool,
    },
    /// `tidepool::pressure::notify(Level::Critical)`.
    Manual {
        /// Why not the real source (`auto` only).
        fallback: Option<String>,
    },
}

impl Delivery {
    /// The source's name for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Delivery::Real { .. } => REAL_LABEL,
            Delivery::Manual { .. } => MANUAL_LABEL,
        }
    }
}

/// Decides the delivery for `choice`: tries every step of the real source
/// for `auto` and `real`.
///
/// # Errors
///
/// For `real` only: the step that was refused, and why.
pub fn prepare(choice: PressureSource) -> Result<Delivery, String> {
    match choice {
        PressureSource::Manual => Ok(Delivery::Manual { fallback: None }),
        PressureSource::Auto | PressureSource::Real => match try_real() {
            Ok(trigger) => Ok(Delivery::Real {
                trigger,
                strict: choice == PressureSource::Real,
            }),
            Err(why) if choice == PressureSource::Auto => Ok(Delivery::Manual {
                fallback: Some(why),
            }),
            Err(why) => Err(why),
        },
    }
}

/// Every step of the real source, tried (the cgroup is made and removed
/// again); on success, the PSI trigger is armed (once per process) and its
/// name returned.
fn try_real() -> Result<String, String> {
    if !cfg!(target_os = "linux") {
        return Err("not Linux: no PSI, no cgroups".to_owned());
    }
    fs::read_to_string(PSI_FILE).map_err(|e| {
        format!("read {PSI_FILE}: {e} (a kernel without PSI, or booted with psi=0)")
    })?;
    let parent = own_v1_memory_cgroup()?;
    let probe = parent.join(format!("tidepool-lab-probe-{}", std::process::id()));
    let _ = fs::remove_dir(&probe);
    fs::create_dir(&probe).map_err(|e| {
        format!(
            "create a child memory cgroup: mkdir {}: {e}{}",
            probe.display(),
            not_root_hint()
        )
    })?;
    let limited = set_limit(&probe);
    let _ = fs::remove_dir(&probe);
    limited?;
    let tools = Command::new("sh")
        .args(["-c", "command -v dd >/dev/null"])
        .stdin(Stdio::null())
        .status();
    match tools {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(format!(
                "find `dd` for the load: sh -c 'command -v dd': {s}"
            ))
        }
        Err(e) => return Err(format!("start `sh` for the load: {e}")),
    }
    arm_trigger()
}

/// Arms the PSI trigger once per process and has tidepool's reclaimer watch
/// it; later calls return the first outcome.
fn arm_trigger() -> Result<String, String> {
    static ARMED: OnceLock<Result<String, String>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            #[cfg(target_os = "linux")]
            {
                use tidepool::pressure::{PsiTrigger, Source, Stall};
                let trigger = PsiTrigger::new(
                    PSI_FILE,
                    Stall::Some,
                    PSI_THRESHOLD,
                    PSI_WINDOW,
                    Level::Critical,
                )
                .map_err(|e| format!("arm the PSI trigger: {e}"))?;
                let name = trigger.name();
                pressure::watch(Box::new(trigger));
                // The reclaimer thread starts with the first pool: make sure
                // it runs (and polls the trigger) even if no tidepool pool
                // is built before a seed policy's run.
                drop(tidepool::stack::StackPool::new(64 * 1024));
                match pressure::sources().into_iter().find(|s| s.name == name) {
                    Some(st) if st.error.is_none() => Ok(name),
                    Some(st) => Err(format!(
                        "watch the PSI trigger: {}",
                        st.error.unwrap_or_default()
                    )),
                    None => Err("watch the PSI trigger: not listed by the reclaimer".to_owned()),
                }
            }
            #[cfg(not(target_os = "linux"))]
            {
                Err("arm the PSI trigger: not Linux".to_owned())
            }
        })
        .clone()
}

fn not_root_hint() -> String {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse::<u32>().ok());
    match euid {
        Some(0) | None => String::new(),
        Some(u) => format!(" (not root: effective uid {u})"),
    }
}

/// `/sys/fs/cgroup/memory/<path>` for this process (`N:memory:<path>` in
/// `/proc/self/cgroup`).
fn own_v1_memory_cgroup() -> Result<PathBuf, String> {
    let step = "find this process's v1 memory cgroup";
    let table = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("{step}: {e}"))?;
    let rel = table
        .lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        })
        .ok_or_else(|| format!("{step}: no cgroup v1 memory controller in /proc/self/cgroup"))?;
    let dir = Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
    if !dir.join("memory.limit_in_bytes").exists() {
        return Err(format!(
            "{step}: {} has no memory.limit_in_bytes (is the v1 memory hierarchy mounted?)",
            dir.display()
        ));
    }
    Ok(dir)
}

fn set_limit(cgroup: &Path) -> Result<(), String> {
    let step = "limit the child cgroup to 64 MiB";
    let limit = cgroup.join("memory.limit_in_bytes");
    fs::write(&limit, LIMIT)
        .map_err(|e| format!("{step}: write {LIMIT} to {}: {e}", limit.display()))?;
    let set = fs::read_to_string(&limit).unwrap_or_default();
    if set.trim() != LIMIT {
        return Err(format!(
            "{step}: {} reads {set:?} after writing {LIMIT}",
            limit.display()
        ));
    }
    Ok(())
}

/// When the last thrash of this process ended.
static LAST_THRASH_END: Mutex<Option<Instant>> = Mutex::new(None);

/// The page-cache thrash: a 64 MiB child memory cgroup with a shell in it
/// that writes a 300 MB file and reads it back three times, in a loop.
/// Dropping it kills the load and removes the file and the cgroup.
struct Thrash {
    cgroup: PathBuf,
    file: PathBuf,
    child: Option<Child>,
}

impl Thrash {
    /// Makes the cgroup and starts the load; returns once the load is in
    /// the cgroup.
    fn start() -> Result<Self, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tag = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup = own_v1_memory_cgroup()?.join(format!("tidepool-lab-thrash-{tag}"));
        let file = std::env::temp_dir().join(format!("tidepool-lab-thrash-{tag}"));
        let _ = fs::remove_dir(&cgroup);
        fs::create_dir(&cgroup).map_err(|e| {
            format!(
                "create a child memory cgroup: mkdir {}: {e}{}",
                cgroup.display(),
                not_root_hint()
            )
        })?;
        let mut thrash = Thrash {
            cgroup,
            file,
            child: None,
        };
        set_limit(&thrash.cgroup)?;
        let script = format!(
            r#"
            echo $$ > "$CG/cgroup.procs" || exit 97
            while :; do
                dd if=/dev/zero of="$F" bs=1M count={FILE_MB} status=none || exit 98
                for i in 1 2 3; do dd if="$F" of=/dev/null bs=1M status=none || exit 99; done
            done
        "#
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("CG", &thrash.cgroup)
            .env("F", &thrash.file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start the load process: spawn sh: {e}"))?;
        let pid = child.id().to_string();
        thrash.child = Some(child);
        let start = Instant::now();
        loop {
            if thrash.procs().contains(&pid) {
                return Ok(thrash);
            }
            thrash.check_running()?;
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "move the load process into the child cgroup: pid {pid} not in \
                     {}/cgroup.procs after 10 s",
                    thrash.cgroup.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// An error if the load has exited (it only stops when killed).
    fn check_running(&mut self) -> Result<(), String> {
        let Some(child) = self.child.as_mut() else {
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

    fn procs(&self) -> Vec<String> {
        fs::read_to_string(self.cgroup.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Kills the shell and whichever `dd` it runs: everything in the cgroup.
    fn stop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let procs = self.procs();
            if procs.is_empty() || Instant::now() > deadline {
                break;
            }
            let _ = Command::new("kill")
                .arg("-KILL")
                .args(&procs)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        *LAST_THRASH_END
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Stops the load, removes the file and the cgroup; an error if either
    /// stays.
    fn cleanup(mut self) -> Result<(), String> {
        self.stop();
        let mut problems = Vec::new();
        if let Err(e) = fs::remove_file(&self.file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                problems.push(format!("remove {}: {e}", self.file.display()));
            }
        }
        // The cgroup can go once its tasks have exited (give it a moment).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match fs::remove_dir(&self.cgroup) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() > deadline => {
                    problems.push(format!("rmdir {}: {e}", self.cgroup.display()));
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
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
        // Normally `cleanup` ran; this is for a panic on the way there.
        if self.child.is_some() {
            self.stop();
            let _ = fs::remove_file(&self.file);
            let _ = fs::remove_dir(&self.cgroup);
        }
    }
}

/// Waits until [`GAP`] has passed since the last thrash ended.
fn keep_gap() {
    let last = *LAST_THRASH_END
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(end) = last {
        let ready = end + GAP;
        let now = Instant::now();
        if ready > now {
            std::thread::sleep(ready - now);
        }
    }
}

/// What became of one run's pressure signal. Times are ms from the start
/// of the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignalRecord {
    /// The policy run (`None` outside [`Tracking`]).
    pub policy: Option<PolicyKind>,
    /// The source that delivered the signal ([`REAL_LABEL`] or
    /// [`MANUAL_LABEL`]); `None` if none was delivered.
    pub source: Option<&'static str>,
    /// Why the manual source stood in for the real one (`auto`).
    pub fallback: Option<String>,
    /// Why no signal was delivered at all (`real` refused in this run).
    pub refused: Option<String>,
    /// The policy's stacks came from a tidepool pool (whose statistics
    /// were read).
    pub pooled: bool,
    /// When the thrash started (was in its cgroup) or `notify` was called.
    pub delivered_ms: Option<f64>,
    /// When the armed PSI trigger's event count went up.
    pub psi_ms: Option<f64>,
    /// When the pool's `Stats::pressure_critical` went up (tidepool only).
    pub pool_ms: Option<f64>,
    /// Gave up waiting after [`PATIENCE`].
    pub timed_out: bool,
    /// When the controller let the run go on to the window after the
    /// signal (the signal arrived, or the wait was given up).
    pub released_ms: Option<f64>,
    /// The sources whose event counts had gone up when the controller first
    /// saw any go up.
    pub first_fired: Vec<String>,
    /// Every source whose event count went up while the run waited.
    pub fired: Vec<String>,
    /// Critical signals the pool had received this run before delivery
    /// (from some other source).
    pub critical_before: u64,
    /// Medium signals the pool received while the run waited.
    pub medium_during: u64,
    /// The load ended early, or could not be cleaned up.
    pub load_problem: Option<String>,
}

impl SignalRecord {
    /// `to - delivered_ms`, if both are known.
    pub fn after_delivery(&self, to: Option<f64>) -> Option<f64> {
        Some(to? - self.delivered_ms?)
    }
}

/// Reads the pool's pressure counters from the stacks one worker gets (a
/// tidepool `PooledStack` knows its pool): no extra operation on the pool,
/// and only while the controller wants them.
#[derive(Debug)]
struct Probe {
    pooled: AtomicBool,
    first_critical: AtomicU64,
    want: AtomicBool,
    seq: AtomicU64,
    critical: AtomicU64,
    medium: AtomicU64,
    /// `u64::MAX` until the controller sets the count before delivery.
    baseline: AtomicU64,
    /// f64 bits of the first time the count was seen above `baseline`;
    /// `u64::MAX` until then.
    raised_bits: AtomicU64,
}

impl Probe {
    fn new() -> Self {
        Probe {
            pooled: AtomicBool::new(false),
            first_critical: AtomicU64::new(0),
            want: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            critical: AtomicU64::new(0),
            medium: AtomicU64::new(0),
            baseline: AtomicU64::new(u64::MAX),
            raised_bits: AtomicU64::new(u64::MAX),
        }
    }

    fn raised_ms(&self) -> Option<f64> {
        let bits = self.raised_bits.load(Ordering::Acquire);
        (bits != u64::MAX).then(|| f64::from_bits(bits))
    }
}

/// Worker 0's handle on the policy, passing everything through and letting
/// the [`Probe`] look at the stacks it gets.
struct Spy<'a> {
    inner: &'a mut dyn Local,
    probe: &'a Probe,
    h: &'a Harness,
    last: Option<Instant>,
}

impl Spy<'_> {
    fn look(&mut self, stack: &LabStack) {
        let LabStack::Pooled(ps) = stack else {
            return;
        };
        let probe = self.probe;
        if !probe.pooled.load(Ordering::Relaxed) {
            probe
                .first_critical
                .store(ps.pool().stats().pool.pressure_critical, Ordering::Relaxed);
            probe.pooled.store(true, Ordering::Release);
        }
        if !probe.want.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_micros(500))
        {
            return;
        }
        self.last = Some(now);
        let stats = ps.pool().stats().pool;
        probe
            .critical
            .store(stats.pressure_critical, Ordering::Relaxed);
        probe.medium.store(stats.pressure_medium, Ordering::Relaxed);
        probe.seq.fetch_add(1, Ordering::Release);
        let base = probe.baseline.load(Ordering::Acquire);
        if base != u64::MAX
            && stats.pressure_critical > base
            && probe.raised_bits.load(Ordering::Relaxed) == u64::MAX
        {
            probe
                .raised_bits
                .store(self.h.elapsed_ms().to_bits(), Ordering::Release);
        }
    }
}

impl Local for Spy<'_> {
    fn get(&mut self) -> Result<LabStack, StackFailure> {
        let got = self.inner.get();
        if let Ok(stack) = &got {
            self.look(stack);
        }
        got
    }

    fn put(&mut self, stack: LabStack) {
        self.inner.put(stack);
    }

    fn deadline(&self) -> Option<Instant> {
        self.inner.deadline()
    }

    fn on_timer(&mut self, now: Instant) {
        self.inner.on_timer(now);
    }
}

/// One measured run's shared state: the probe and what the controller
/// recorded.
#[derive(Debug)]
struct RunShared {
    probe: Probe,
    record: Mutex<SignalRecord>,
}

/// The controller's entry in a plan's `loads`: idle, except in the signal
/// phase, where it "holds" nothing until the signal has arrived, which
/// keeps the harness in that phase until then.
pub(crate) fn controller_load(signal_phase: bool) -> Load {
    if signal_phase {
        Load::Hold { count: 0 }
    } else {
        Load::Idle
    }
}

/// The signal phase of a plan with a controller: the phase in which the
/// last thread's load is `Hold { count: 0 }`.
pub(crate) fn signal_phase(phases: &[Phase]) -> Option<usize> {
    phases
        .iter()
        .position(|p| p.loads.last() == Some(&Load::Hold { count: 0 }))
}

/// The workers of a pressure run: `inner` for every worker thread (worker 0
/// through a [`Spy`]), and, as the last thread, the controller that
/// delivers the signal as the signal phase begins and ends that phase once
/// the signal has arrived. Plans without a signal phase (warm-ups) get
/// `inner` as it is.
pub(crate) fn worker<'p>(
    plan: &'p Plan,
    inner: impl Fn(usize, &Harness, &mut dyn Local) + Sync + 'p,
) -> Box<Worker<'p>> {
    let Some(signal) = signal_phase(&plan.phases) else {
        return Box::new(inner);
    };
    let controller = plan.threads() - 1;
    let delivery = current_delivery();
    if matches!(delivery, Delivery::Real { .. }) {
        keep_gap();
    }
    let run = Arc::new(RunShared {
        probe: Probe::new(),
        record: Mutex::new(SignalRecord::default()),
    });
    LAB.with(|lab| {
        if let Some(lab) = lab.borrow_mut().as_mut() {
            lab.runs.push((lab.current, Arc::clone(&run)));
        }
    });
    Box::new(move |idx, h, local| {
        if idx == controller {
            control(&run, &delivery, h, idx, signal);
        } else if idx == 0 {
            let mut spy = Spy {
                inner: local,
                probe: &run.probe,
                h,
                last: None,
            };
            inner(idx, h, &mut spy);
        } else {
            inner(idx, h, local);
        }
    })
}

fn trigger_events(name: &str) -> u64 {
    pressure::sources()
        .into_iter()
        .find(|s| s.name == name)
        .map_or(0, |s| s.events)
}

/// The sources whose event counts are higher in `now` than in `before`.
fn fired_since(before: &[pressure::SourceStatus], now: &[pressure::SourceStatus]) -> Vec<String> {
    now.iter()
        .filter(|s| {
            let b = before
                .iter()
                .find(|b| b.name == s.name)
                .map_or(0, |b| b.events);
            s.events > b
        })
        .map(|s| s.name.clone())
        .collect()
}

/// The controller thread's body.
fn control(run: &RunShared, delivery: &Delivery, h: &Harness, idx: usize, signal: usize) {
    let nap = Duration::from_millis(1);
    while h.phase.load(Ordering::Acquire) < signal {
        if h.stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(nap);
    }
    let probe = &run.probe;
    let mut rec = SignalRecord {
        pooled: probe.pooled.load(Ordering::Acquire),
        ..SignalRecord::default()
    };
    // The pool's counts just before delivery.
    let mut base = (0, 0);
    if rec.pooled {
        probe.want.store(true, Ordering::Release);
        let seq = probe.seq.load(Ordering::Acquire);
        let start = Instant::now();
        while probe.seq.load(Ordering::Acquire) == seq && start.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_micros(200));
        }
        base = (
            probe.critical.load(Ordering::Relaxed),
            probe.medium.load(Ordering::Relaxed),
        );
        rec.critical_before = base
            .0
            .saturating_sub(probe.first_critical.load(Ordering::Relaxed));
        probe.baseline.store(base.0, Ordering::Release);
    }
    let sources_before = pressure::sources();
    let (trigger, strict) = match delivery {
        Delivery::Real { trigger, strict } => (Some(trigger.as_str()), *strict),
        Delivery::Manual { .. } => (None, false),
    };
    let trigger_before = trigger.map_or(0, trigger_events);

    let mut thrash = None;
    match delivery {
        Delivery::Real { .. } => match Thrash::start() {
            Ok(t) => {
                rec.delivered_ms = Some(h.elapsed_ms());
                rec.source = Some(REAL_LABEL);
                thrash = Some(t);
            }
            Err(why) if strict => rec.refused = Some(why),
            Err(why) => {
                rec.fallback = Some(format!("this run's thrash could not start: {why}"));
                rec.delivered_ms = Some(h.elapsed_ms());
                pressure::notify(Level::Critical);
                rec.source = Some(MANUAL_LABEL);
            }
        },
        Delivery::Manual { fallback } => {
            rec.fallback.clone_from(fallback);
            rec.delivered_ms = Some(h.elapsed_ms());
            pressure::notify(Level::Critical);
            rec.source = Some(MANUAL_LABEL);
        }
    }

    // Wait for the signal: the pool's count (tidepool), the armed trigger
    // (seed policies, real source); nothing to wait for otherwise.
    let waited = Instant::now();
    let real = thrash.is_some();
    while rec.delivered_ms.is_some() {
        let now = pressure::sources();
        let now_ms = h.elapsed_ms();
        if let Some(name) = trigger.filter(|_| real) {
            let events = now.iter().find(|s| s.name == name).map_or(0, |s| s.events);
            if rec.psi_ms.is_none() && events > trigger_before {
                rec.psi_ms = Some(now_ms);
            }
        }
        if rec.first_fired.is_empty() {
            rec.first_fired = fired_since(&sources_before, &now);
        }
        if rec.pool_ms.is_none() {
            rec.pool_ms = probe.raised_ms();
        }
        // The same rule for every policy: the armed trigger fired (real
        // source); and tidepool's pool has the signal.
        let done = (!real || rec.psi_ms.is_some()) && (!rec.pooled || rec.pool_ms.is_some());
        if done || h.stop.load(Ordering::Acquire) {
            break;
        }
        if let Some(t) = thrash.as_mut() {
            if let Err(why) = t.check_running() {
                rec.load_problem = Some(why);
                break;
            }
        }
        if waited.elapsed() >= PATIENCE {
            rec.timed_out = true;
            break;
        }
        std::thread::sleep(nap);
    }
    // The harness may move on to the "after" phase.
    rec.released_ms = Some(h.elapsed_ms());
    h.cells[idx].holding.store(signal, Ordering::Release);
    if let Some(t) = thrash.as_mut() {
        t.stop();
    }
    probe.want.store(false, Ordering::Release);
    if rec.pooled {
        rec.medium_during = probe.medium.load(Ordering::Relaxed).saturating_sub(base.1);
    }
    rec.fired = fired_since(&sources_before, &pressure::sources());
    *run.record.lock().unwrap_or_else(PoisonError::into_inner) = rec;

    while !h.stop.load(Ordering::Acquire) {
        std::thread::sleep(nap);
    }
    if let Some(t) = thrash {
        if let Err(why) = t.cleanup() {
            let mut rec = run.record.lock().unwrap_or_else(PoisonError::into_inner);
            let prev = rec.load_problem.take();
            rec.load_problem = Some(match prev {
                Some(p) => format!("{p}; cleanup: {why}"),
                None => format!("cleanup: {why}"),
            });
        }
    }
}

/// What this thread's lab run knows about the pressure scenario.
#[derive(Debug)]
struct Lab {
    choice: PressureSource,
    delivery: Option<Delivery>,
    current: Option<PolicyKind>,
    runs: Vec<(Option<PolicyKind>, Arc<RunShared>)>,
}

thread_local! {
    static LAB: RefCell<Option<Lab>> = const { RefCell::new(None) };
}

/// Marks this thread's lab run; ends when dropped.
#[derive(Debug)]
pub struct LabGuard {
    previous: Option<PressureSource>,
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        LAB.with(|lab| {
            *lab.borrow_mut() = previous.map(|choice| Lab {
                choice,
                delivery: None,
                current: None,
                runs: Vec::new(),
            });
        });
    }
}

/// Starts a lab run on this thread with `choice` as the pressure source.
pub fn begin(choice: PressureSource) -> LabGuard {
    let previous = LAB.with(|lab| {
        lab.borrow_mut()
            .replace(Lab {
                choice,
                delivery: None,
                current: None,
                runs: Vec::new(),
            })
            .map(|l| l.choice)
    });
    LabGuard { previous }
}

/// Decides (and remembers) this lab run's delivery; see [`prepare`].
pub(crate) fn prepare_current() -> Result<Delivery, String> {
    let choice = LAB.with(|lab| lab.borrow().as_ref().map(|l| l.choice));
    let delivery = prepare(choice.unwrap_or(PressureSource::Manual))?;
    LAB.with(|lab| {
        if let Some(lab) = lab.borrow_mut().as_mut() {
            lab.delivery = Some(delivery.clone());
            lab.runs.clear();
        }
    });
    Ok(delivery)
}

/// The delivery decided for this lab run; manual outside one.
pub(crate) fn current_delivery() -> Delivery {
    LAB.with(|lab| lab.borrow().as_ref().and_then(|l| l.delivery.clone()))
        .unwrap_or(Delivery::Manual { fallback: None })
}

/// The records of the measured runs since [`prepare_current`], in the
/// order they ran.
pub(crate) fn take_records() -> Vec<SignalRecord> {
    let runs = LAB.with(|lab| {
        lab.borrow_mut()
            .as_mut()
            .map(|l| std::mem::take(&mut l.runs))
            .unwrap_or_default()
    });
    runs.into_iter()
        .map(|(policy, run)| {
            let mut rec = run
                .record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            rec.policy = policy;
            rec
        })
        .collect()
}

/// A [`Progress`] that passes everything on and notes which policy runs,
/// so that each run's [`SignalRecord`] names it.
#[derive(Clone, Copy)]
pub struct Tracking<'a> {
    inner: &'a dyn Progress,
}

impl fmt::Debug for Tracking<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracking").finish_non_exhaustive()
    }
}

impl<'a> Tracking<'a> {
    /// Wraps `inner`.
    pub fn new(inner: &'a dyn Progress) -> Self {
        Tracking { inner }
    }
}

impl Progress for Tracking<'_> {
    fn scenario(&self, id: &str, runs: u64) {
        self.inner.scenario(id, runs);
    }

    fn run(&self, policy: PolicyKind, what: &str) {
        LAB.with(|lab| {
            if let Some(lab) = lab.borrow_mut().as_mut() {
                lab.current = Some(policy);
            }
        });
        self.inner.run(policy, what);
    }

    fn run_done(&self) {
        self.inner.run_done();
    }

    fn scenario_done(&self) {
        self.inner.scenario_done();
    }
}

/// The notes of `report` that say a `--pressure-source real` could not
/// deliver a real signal.
pub fn refusals(report: &Report) -> Vec<&str> {
    report
        .scenarios
        .iter()
        .flat_map(|s| s.notes.iter())
        .filter(|n| n.starts_with(REFUSED))
        .map(String::as_str)
        .collect()
}
