//! How the `pressure` scenario delivers its signal inside a run, and what
//! it records: a controller thread beside the workers starts the signal as
//! the signal phase begins and holds the harness in that phase until the
//! signal has arrived; worker 0 looks at the tidepool pool's statistics
//! through the stacks it gets ([`Spy`]); one [`SignalRecord`] per measured
//! run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::cleanup;
use crate::policy::{Local, PolicyKind, StackFailure};
use crate::scenario::harness::{Harness, Load, Phase, Plan, Worker};
use crate::scenario::MakeWorker;
use crate::source::thrash::{self, Thrash};
use crate::source::{psi, Delivery, MANUAL_LABEL, REAL_LABEL};
use crate::stack::LabStack;

/// How long a run waits for the signal before it records that none came.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// What became of one run's pressure signal. Times are ms from the start
/// of the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignalRecord {
    /// The policy run.
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
    fn take(&mut self) -> Result<LabStack, StackFailure> {
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

/// Collects the signal records of one scenario run and makes its workers.
#[derive(Debug)]
pub(crate) struct Recorder {
    delivery: Delivery,
    runs: Mutex<Vec<(PolicyKind, Arc<RunShared>)>>,
}

impl Recorder {
    pub(crate) fn new(delivery: Delivery) -> Arc<Self> {
        Arc::new(Recorder {
            delivery,
            runs: Mutex::new(Vec::new()),
        })
    }

    /// Workers for every run: `phased` for each worker thread, plus the
    /// controller (see [`worker`]).
    pub(crate) fn make_worker(self: &Arc<Self>) -> Box<MakeWorker<'static>> {
        let recorder = Arc::clone(self);
        Box::new(move |plan: &Plan, policy: PolicyKind| worker(&recorder, plan, policy))
    }

    /// The records of the measured runs, in the order they ran.
    pub(crate) fn take_records(&self) -> Vec<SignalRecord> {
        let runs = std::mem::take(&mut *self.runs.lock().unwrap_or_else(PoisonError::into_inner));
        runs.into_iter()
            .map(|(policy, run)| {
                let mut rec = run
                    .record
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                rec.policy = Some(policy);
                rec
            })
            .collect()
    }
}

/// The workers of a pressure run: the phased worker for every worker thread
/// (worker 0 through a [`Spy`]), and, as the last thread, the controller
/// that delivers the signal as the signal phase begins and ends that phase
/// once the signal has arrived. Plans without a signal phase (warm-ups) get
/// the phased worker as it is.
fn worker<'p>(recorder: &Arc<Recorder>, plan: &'p Plan, policy: PolicyKind) -> Box<Worker<'p>> {
    let inner = crate::scenario::harness::phased_worker(plan);
    let Some(signal) = signal_phase(&plan.phases) else {
        return Box::new(inner);
    };
    let controller = plan.threads() - 1;
    let delivery = recorder.delivery.clone();
    let run = Arc::new(RunShared {
        probe: Probe::new(),
        record: Mutex::new(SignalRecord::default()),
    });
    recorder
        .runs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((policy, Arc::clone(&run)));
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
    let (trigger, strict) = match delivery {
        Delivery::Real { trigger, strict } => (Some(trigger.as_str()), *strict),
        Delivery::Manual { .. } => (None, false),
    };
    if trigger.is_some() {
        thrash::wait_for_gap();
    }
    // From delivery to the end of the run, machine-wide pressure reaches
    // the pools, as it would without the lab (see `source::psi`).
    let gate = psi::open_gate();
    let sources_before = psi::events();
    let trigger_before = trigger.map_or(0, psi::events_of);

    let mut thrash = None;
    match delivery {
        Delivery::Real { .. } => match Thrash::start() {
            Ok(t) => {
                rec.delivered_ms = Some(h.elapsed_ms());
                rec.source = Some(REAL_LABEL);
                thrash = Some(t);
                cleanup::fault_point("thrash");
            }
            Err(why) if strict => rec.refused = Some(why),
            Err(why) => {
                rec.fallback = Some(format!("this run's thrash could not start: {why}"));
                rec.delivered_ms = Some(h.elapsed_ms());
                psi::notify_critical();
                rec.source = Some(MANUAL_LABEL);
            }
        },
        Delivery::Manual { fallback } => {
            rec.fallback.clone_from(fallback);
            rec.delivered_ms = Some(h.elapsed_ms());
            psi::notify_critical();
            rec.source = Some(MANUAL_LABEL);
        }
    }

    // Wait for the signal: the pool's count (tidepool), the armed trigger
    // (seed policies, real source); nothing to wait for otherwise.
    let waited = Instant::now();
    let real = thrash.is_some();
    while rec.delivered_ms.is_some() {
        let now = psi::events();
        let now_ms = h.elapsed_ms();
        if let Some(name) = trigger.filter(|_| real) {
            if rec.psi_ms.is_none() && psi::events_of(name) > trigger_before {
                rec.psi_ms = Some(now_ms);
            }
        }
        if rec.first_fired.is_empty() {
            rec.first_fired = psi::fired_between(&sources_before, &now);
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
    rec.fired = psi::fired_between(&sources_before, &psi::events());
    *run.record.lock().unwrap_or_else(PoisonError::into_inner) = rec;

    while !h.stop.load(Ordering::Acquire) {
        std::thread::sleep(nap);
    }
    drop(gate);
    if let Some(t) = thrash {
        if let Err(why) = t.finish() {
            let mut rec = run.record.lock().unwrap_or_else(PoisonError::into_inner);
            let prev = rec.load_problem.take();
            rec.load_problem = Some(match prev {
                Some(p) => format!("{p}; cleanup: {why}"),
                None => format!("cleanup: {why}"),
            });
        }
    }
}
