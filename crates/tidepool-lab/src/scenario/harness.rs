//! Running one policy through one workload: worker threads, the phases
//! they go through, and the sampler that watches the process meanwhile.
//!
//! Every policy gets the same threads, the same phases and the same
//! requests; only the [`Policy`] differs. Worker threads are new for each
//! run, so a run starts with empty thread-local pools, and their exit runs
//! each policy's thread-exit cleanup.
//!
//! A worker that panics does not hang the run: its panic is caught, the
//! run is stopped, every thread still meets the others at the end, and the
//! panic is raised again on the caller's thread once they have all exited.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::policy::{Local, Policy, StackFailure};
use crate::procfs;
use crate::report::{Event, Failure, PressureCounts, Series};
use crate::source::psi;
use crate::stack::{self, InFlight, Touch};

/// Samples kept per run before the series is thinned (allocated up front:
/// the sampler must not allocate while a policy may be at the map count).
const SAMPLE_CAPACITY: usize = 4096;

/// What a worker does during a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// Nothing; the thread's event loop only runs its timers.
    Idle,
    /// fio-style rounds: submit `depth` requests (each runs until its I/O
    /// is "in flight"), then complete them all; repeat.
    Rounds {
        /// Requests in flight per round.
        depth: usize,
    },
    /// A spike: submit `count` requests once and hold them in flight until
    /// the phase ends, then complete them.
    Hold {
        /// Requests held.
        count: usize,
    },
}

/// One phase of a run.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Shown on plots.
    pub name: String,
    /// The phase lasts at least this long...
    pub min: Duration,
    /// ...and, if it has `Hold` loads, until every holder holds.
    pub loads: Vec<Load>,
}

/// A run's shape: the same for every policy.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The phases, in order. Every `loads` has one entry per thread.
    pub phases: Vec<Phase>,
    /// How often the sampler looks.
    pub sample_every: Duration,
    /// End the run at the first failed creation (QEMU aborts there).
    pub abort_on_failure: bool,
    /// Stack bytes each request touches.
    pub touch: Touch,
}

impl Plan {
    /// An unmeasured warm-up: one phase of `loads` (one per thread) for at
    /// least `min`, sampled every 10 ms, touching as much stack as the
    /// measured requests do.
    pub fn warm_up(min: Duration, loads: Vec<Load>) -> Self {
        Plan {
            phases: vec![Phase {
                name: "warm-up".to_owned(),
                min,
                loads,
            }],
            sample_every: Duration::from_millis(10),
            abort_on_failure: false,
            touch: Touch::Large,
        }
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.phases.first().map_or(0, |p| p.loads.len())
    }

    /// The largest number of requests one worker has in flight.
    fn max_in_flight(&self) -> usize {
        self.phases
            .iter()
            .flat_map(|p| p.loads.iter())
            .map(|l| match *l {
                Load::Idle => 0,
                Load::Rounds { depth } => depth,
                Load::Hold { count } => count,
            })
            .max()
            .unwrap_or(0)
    }
}

/// Per-worker counters, each on its own cache lines and written only by
/// its worker (plain load + store, no read-modify-write): the sampler sums
/// them.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Cell {
    /// Requests this worker started minus those it completed (negative for
    /// a thread that completes others' requests).
    pub live: AtomicI64,
    /// Requests this worker completed.
    pub completed: AtomicU64,
    /// The last phase in which this worker's `Hold` was fully in flight.
    pub holding: AtomicUsize,
    /// The phase this worker has begun: its work for every earlier phase
    /// (a round begun before the switch, a spike's held requests) is done.
    /// Stored (`Release`) by workers that report it ([`phased_worker`]);
    /// one that does not leaves it at 0, and its phases count as finished
    /// only once it has stopped.
    pub at_phase: AtomicUsize,
}

impl Cell {
    fn add_live(&self, n: i64) {
        let v = self.live.load(Ordering::Relaxed);
        self.live.store(v + n, Ordering::Relaxed);
    }

    fn add_completed(&self, n: u64) {
        let v = self.completed.load(Ordering::Relaxed);
        self.completed.store(v + n, Ordering::Relaxed);
    }
}

/// What the workers and the controller of one run share.
#[derive(Debug)]
pub struct Harness {
    /// Set when the workers must finish.
    pub stop: AtomicBool,
    /// The current phase.
    pub phase: AtomicUsize,
    /// One per worker.
    pub cells: Vec<Cell>,
    /// Workers that finished their requests (cross-thread completion).
    pub finished: AtomicUsize,
    failures: AtomicU64,
    first_failure: Mutex<Option<Failure>>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    t0: Instant,
    quiesce: Barrier,
    exit: Barrier,
    id_base: AtomicU64,
}

impl Harness {
    fn new(threads: usize) -> Self {
        Harness {
            stop: AtomicBool::new(false),
            phase: AtomicUsize::new(0),
            cells: (0..threads)
                .map(|_| Cell {
                    holding: AtomicUsize::new(usize::MAX),
                    ..Cell::default()
                })
                .collect(),
            finished: AtomicUsize::new(0),
            failures: AtomicU64::new(0),
            first_failure: Mutex::new(None),
            panic: Mutex::new(None),
            t0: Instant::now(),
            quiesce: Barrier::new(threads + 1),
            exit: Barrier::new(threads + 1),
            id_base: AtomicU64::new(0),
        }
    }

    /// Milliseconds since the run started.
    pub fn elapsed_ms(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1e3
    }

    /// Records a failed creation (never panics).
    pub fn fail(&self, failure: &StackFailure) {
        if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            let record = Failure {
                t_ms: self.elapsed_ms(),
                vmas: procfs::vmas().unwrap_or(0),
                message: failure.message.clone(),
            };
            *self
                .first_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(record);
        }
    }

    fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// A fresh range of request ids for a worker.
    pub fn ids(&self) -> u64 {
        self.id_base.fetch_add(1 << 40, Ordering::Relaxed)
    }

    /// Starts one request on a stack from `local`, counted on `cell`.
    /// `None` (and a recorded failure) if no stack could be had.
    pub fn submit(
        &self,
        local: &mut dyn Local,
        cell: &Cell,
        id: u64,
        touch: Touch,
    ) -> Option<InFlight> {
        match local.get() {
            Ok(stack) => {
                cell.add_live(1);
                Some(stack::start(stack, id, touch))
            }
            Err(e) => {
                self.fail(&e);
                None
            }
        }
    }

    /// Completes every request in `reqs` on this thread, giving their
    /// stacks to `local`. Returns a checksum of the results.
    pub fn complete_all(
        &self,
        reqs: &mut Vec<InFlight>,
        local: &mut dyn Local,
        cell: &Cell,
    ) -> u64 {
        let n = reqs.len();
        let mut sum = 0u64;
        for req in reqs.drain(..) {
            let (s, stack) = req.complete();
            sum = sum.wrapping_add(s);
            local.put(stack);
        }
        cell.add_live(-(n as i64));
        cell.add_completed(n as u64);
        sum
    }
}

/// Runs the thread's timers if due, then sleeps until the next one or for
/// at most `max`.
pub fn idle_tick(local: &mut dyn Local, max: Duration) {
    let now = Instant::now();
    let mut wait = max;
    if let Some(deadline) = local.deadline() {
        if deadline <= now {
            local.on_timer(now);
        }
        if let Some(next) = local.deadline() {
            wait = wait.min(next.saturating_duration_since(now));
        }
    }
    if !wait.is_zero() {
        std::thread::sleep(wait);
    }
}

/// Runs the thread's timers if due, without sleeping.
pub fn run_timers(local: &mut dyn Local) {
    if let Some(deadline) = local.deadline() {
        let now = Instant::now();
        if deadline <= now {
            local.on_timer(now);
        }
    }
}

/// A worker's body: given its index, the harness and its thread's handle
/// on the policy. It returns once `stop` is set and its requests are done.
pub type Worker<'a> = dyn Fn(usize, &Harness, &mut dyn Local) + Sync + 'a;

/// The standard worker: follows the plan's phases.
pub fn phased_worker(plan: &Plan) -> impl Fn(usize, &Harness, &mut dyn Local) + Sync + '_ {
    move |idx, h, local| {
        let cell = &h.cells[idx];
        let cap = plan.max_in_flight();
        let mut held: Vec<InFlight> = Vec::with_capacity(cap);
        let mut round: Vec<InFlight> = Vec::with_capacity(cap);
        let mut id = h.ids();
        let mut seen = usize::MAX;
        let mut checksum = 0u64;
        loop {
            run_timers(local);
            if h.stop.load(Ordering::Acquire) {
                break;
            }
            let p = h.phase.load(Ordering::Acquire);
            if p != seen {
                // The spike is over: its requests complete.
                checksum ^= h.complete_all(&mut held, local, cell);
                seen = p;
                // Every stack the earlier phases' rounds took is counted by
                // now: samples from here on see all of it.
                cell.at_phase.store(p, Ordering::Release);
            }
            match plan.phases[p].loads[idx] {
                Load::Idle => idle_tick(local, Duration::from_millis(1)),
                Load::Rounds { depth } => {
                    for _ in 0..depth {
                        id += 1;
                        match h.submit(local, cell, id, plan.touch) {
                            Some(req) => round.push(req),
                            None => break,
                        }
                    }
                    checksum ^= h.complete_all(&mut round, local, cell);
                }
                Load::Hold { count } => {
                    if cell.holding.load(Ordering::Relaxed) != p {
                        while held.len() < count {
                            id += 1;
                            match h.submit(local, cell, id, plan.touch) {
                                Some(req) => held.push(req),
                                None => break,
                            }
                            if held.len() % 256 == 0 {
                                run_timers(local);
                            }
                        }
                        cell.holding.store(p, Ordering::Release);
                    } else {
                        idle_tick(local, Duration::from_millis(1));
                    }
                }
            }
        }
        checksum ^= h.complete_all(&mut held, local, cell);
        std::hint::black_box(checksum);
    }
}

/// One sample of the process and the policy.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    t_ms: f64,
    created: u64,
    destroyed: u64,
    live: i64,
    completed: u64,
    vmas: u64,
    rss_kib: u64,
    vsz_kib: u64,
    /// Resident memory of the policy's idle stacks, bytes, where measured
    /// ([`Policy::idle_resident_bytes`]).
    idle_resident: Option<u64>,
    /// CPU time of the whole process so far, ms.
    cpu_ms: f64,
    /// Minor page faults of the whole process so far.
    minflt: u64,
}

impl Sample {
    fn idle(&self) -> u64 {
        let existing = self.created.saturating_sub(self.destroyed) as i64;
        (existing - self.live.max(0)).max(0) as u64
    }
}

/// Every how many samples the idle stacks' resident memory is measured
/// (a `mincore` walk over every slab takes about a millisecond per
/// thousand 1 MiB stacks on the 2-core machine: every sample would make
/// the sampler a load of its own). The samples between repeat the last
/// measurement.
const RESIDENT_EVERY: usize = 3;

/// A sample; `resident`: measure the idle stacks' resident memory too.
fn take_sample(h: &Harness, policy: &dyn Policy, resident: bool) -> Sample {
    let counts = policy.counts();
    let live = h.cells.iter().map(|c| c.live.load(Ordering::Relaxed)).sum();
    let completed = h
        .cells
        .iter()
        .map(|c| c.completed.load(Ordering::Relaxed))
        .sum();
    let mem = procfs::memory().unwrap_or_default();
    let idle_resident = if resident {
        policy.idle_resident_bytes(u64::try_from(live).unwrap_or(0))
    } else {
        None
    };
    Sample {
        t_ms: h.elapsed_ms(),
        created: counts.created,
        destroyed: counts.destroyed,
        live,
        completed,
        vmas: procfs::vmas().unwrap_or(0),
        rss_kib: mem.rss_kib,
        vsz_kib: mem.vsz_kib,
        idle_resident,
        cpu_ms: process_cpu_ms(),
        minflt: procfs::minor_faults().unwrap_or(0),
    }
}

/// CPU time the process has used so far, all threads (workers, sampler,
/// the policy's own threads), ms.
fn process_cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// What one run of one policy produced.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// The sampled series (throughput is per sample interval).
    pub series: Series,
    /// Failed creations.
    pub failures: u64,
    /// The first one.
    pub first_failure: Option<Failure>,
    /// Requests completed.
    pub completed: u64,
    /// Stacks created over the run.
    pub created: u64,
    /// When each phase started, ms (`None` for phases never reached).
    pub phase_starts: Vec<Option<f64>>,
    /// When each phase had *settled*, ms: the time of the first sample
    /// taken once every worker had begun it, so that no work of an earlier
    /// phase was still under way (a worker finishes the round it is in
    /// when the phase changes, and a loaded machine may leave it there for
    /// many samples). A sample at or after this time has seen everything
    /// the earlier phases created. `None` for phases never reached.
    pub phase_settled: Vec<Option<f64>>,
    /// The run ended early at a failure.
    pub aborted: bool,
    /// Idle stacks once every request had completed, before the worker
    /// threads exited.
    pub quiescent_idle: u64,
    /// Live stacks at that moment (0 unless a request leaked).
    pub quiescent_live: i64,
    /// Stacks still in existence after the worker threads exited (held by
    /// global pools).
    pub after_exit_existing: u64,
    /// Requests completed by each sample's time.
    pub completed_series: Vec<u64>,
    /// Memory-pressure signals during the run.
    pub pressure: PressureCounts,
    /// CPU time the process used from the run's start to the moment every
    /// request had completed, ms (every thread: workers, sampler, and a
    /// policy's own, such as tidepool's reclaimer); NaN if unreadable.
    pub cpu_ms: f64,
    /// The process's CPU clock when the run started, ms: the clock of the
    /// series' `cpu_ms` (`clock_gettime`, finer than `cpu_ms`'s ticks), so
    /// that a span of the run can be measured from its start.
    pub cpu_clock_start_ms: f64,
}

impl RunOutput {
    /// Index of the last sample taken at or before `t_ms`.
    pub fn index_at(&self, t_ms: f64) -> Option<usize> {
        let t = &self.series.t_ms;
        let n = t.partition_point(|&x| x <= t_ms);
        n.checked_sub(1)
    }

    /// Indices of the samples from `from` ms through the first one taken at
    /// or after `to` ms: the first to have seen everything done by `to` (a
    /// run's samples may be thinned, so not necessarily the one taken at
    /// `to`).
    pub fn range_until_seen(&self, from: f64, to: f64) -> std::ops::Range<usize> {
        let t = &self.series.t_ms;
        let start = t.partition_point(|&x| x < from);
        let end = (t.partition_point(|&x| x < to) + 1).min(t.len());
        start..end.max(start)
    }

    /// Indices of the samples in `[from, to)` ms.
    pub fn range(&self, from: f64, to: f64) -> std::ops::Range<usize> {
        let t = &self.series.t_ms;
        t.partition_point(|&x| x < from)..t.partition_point(|&x| x < to)
    }

    /// Requests per second completed between `from` and `to` ms, from the
    /// first and last samples inside that span. When a loaded machine left
    /// fewer than two samples inside it, the nearest samples around it are
    /// used instead (the last at or before `from`, the first at or after
    /// `to`): a wider span, but a measured rate rather than none. 0 when the
    /// run has no samples on both sides.
    pub fn rate_between(&self, from: f64, to: f64) -> f64 {
        let t = &self.series.t_ms;
        let completed = &self.completed_series;
        let n = t.len().min(completed.len());
        if n < 2 {
            return 0.0;
        }
        let mut a = t.partition_point(|&x| x < from);
        let mut b = t[..n].partition_point(|&x| x <= to).saturating_sub(1);
        if b <= a || a >= n {
            a = t.partition_point(|&x| x <= from).saturating_sub(1);
            b = t.partition_point(|&x| x < to).min(n - 1);
        }
        if b <= a {
            return 0.0;
        }
        let dt = (t[b] - t[a]) / 1e3;
        if dt <= 0.0 {
            return 0.0;
        }
        completed[b].saturating_sub(completed[a]) as f64 / dt
    }
}

/// Runs `policy` through `plan`, with `worker` as every thread's body.
pub fn run(policy: &dyn Policy, plan: &Plan, worker: &Worker<'_>) -> RunOutput {
    let threads = plan.threads();
    let h = Harness::new(threads);
    let mut samples: Vec<Sample> = Vec::with_capacity(SAMPLE_CAPACITY);
    let mut events: Vec<Event> = Vec::with_capacity(64);
    let mut phase_starts = vec![None; plan.phases.len()];
    let mut phase_settled = vec![None; plan.phases.len()];
    let mut aborted = false;
    let mut quiescent = Sample::default();
    let signals_before = psi::totals();
    let cpu_before = procfs::cpu_ms();
    let cpu_clock_start_ms = process_cpu_ms();
    let mut cpu_after = None;

    std::thread::scope(|s| {
        for idx in 0..threads {
            let h = &h;
            s.spawn(move || {
                let mut local = policy.local();
                let body = panic::catch_unwind(AssertUnwindSafe(|| worker(idx, h, &mut *local)));
                if let Err(payload) = body {
                    h.stop.store(true, Ordering::Release);
                    h.panic
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get_or_insert(payload);
                }
                h.quiesce.wait();
                h.exit.wait();
                drop(local); // the thread exits: its pool's exit cleanup
            });
        }

        let mut every = plan.sample_every;
        let mut phase = 0;
        let mut phase_start = Instant::now();
        events.push(Event {
            t_ms: 0.0,
            phase: 0,
        });
        phase_starts[0] = Some(0.0);
        let mut next_tick = Instant::now();
        loop {
            next_tick += every;
            let now = Instant::now();
            if next_tick > now {
                std::thread::sleep(next_tick - now);
            } else {
                next_tick = now;
            }
            if samples.len() == samples.capacity() {
                thin(&mut samples);
                every *= 2;
            }
            let resident = samples.len() % RESIDENT_EVERY == 0;
            // Read before the sample (`Acquire`): what the workers did
            // before they began their phase is in it.
            let begun = h
                .cells
                .iter()
                .map(|c| c.at_phase.load(Ordering::Acquire))
                .min()
                .unwrap_or(phase);
            let sample = take_sample(&h, policy, resident);
            settle(&mut phase_settled, begun, sample.t_ms);
            samples.push(sample);
            if plan.abort_on_failure && h.failures() > 0 {
                aborted = true;
                break;
            }
            if h.stop.load(Ordering::Acquire) {
                break; // a worker panicked
            }
            let current = &plan.phases[phase];
            let holders_ready = current.loads.iter().enumerate().all(|(i, l)| {
                !matches!(l, Load::Hold { .. })
                    || h.cells[i].holding.load(Ordering::Acquire) == phase
            });
            if phase_start.elapsed() >= current.min && holders_ready {
                phase += 1;
                if phase == plan.phases.len() {
                    break;
                }
                phase_start = Instant::now();
                let t = h.elapsed_ms();
                phase_starts[phase] = Some(t);
                h.phase.store(phase, Ordering::Release);
                events.push(Event { t_ms: t, phase });
            }
        }
        h.stop.store(true, Ordering::Release);
        h.quiesce.wait();
        quiescent = take_sample(&h, policy, true);
        // Every worker has stopped: each phase it reached has settled.
        settle(&mut phase_settled, phase, quiescent.t_ms);
        cpu_after = procfs::cpu_ms();
        samples.push(quiescent);
        h.exit.wait();
    });
    if let Some(payload) = h
        .panic
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        panic::resume_unwind(payload);
    }
    let after_exit = policy.counts().existing();
    let signals = psi::totals().since(signals_before);
    let pressure = PressureCounts {
        received: policy.pressure_signals(),
        raised: signals.raised,
        withheld: signals.withheld,
    };

    let completed: Vec<u64> = samples.iter().map(|s| s.completed).collect();
    let mut series = Series {
        events,
        ..Series::default()
    };
    // Throughput over a moving window of about four sample intervals: a
    // sample the sampler took late (the machine is shared) would otherwise
    // show as a spike and a dip that no policy caused.
    let window_ms = plan.sample_every.as_secs_f64() * 1e3 * 4.0;
    let mut from = 0;
    // One value per sample or none: a policy that does not measure leaves
    // the series empty; a sample without a measurement of its own repeats
    // the last one.
    let resident_measured = samples.iter().any(|s| s.idle_resident.is_some());
    let mut last_resident = 0;
    for (i, s) in samples.iter().enumerate() {
        series.t_ms.push(s.t_ms);
        series.idle.push(s.idle());
        series.live.push(s.live.max(0) as u64);
        series.created.push(s.created);
        series.vmas.push(s.vmas);
        series.rss_kib.push(s.rss_kib);
        series.vsz_kib.push(s.vsz_kib);
        series.cpu_ms.push(s.cpu_ms);
        series.minor_faults.push(s.minflt);
        if resident_measured {
            last_resident = s.idle_resident.unwrap_or(last_resident);
            series.idle_resident_kib.push(last_resident as f64 / 1024.0);
        }
        while from + 1 < i && samples[from + 1].t_ms <= s.t_ms - window_ms {
            from += 1;
        }
        let p = &samples[from];
        let rate = if i > 0 && s.t_ms > p.t_ms {
            (s.completed - p.completed) as f64 / ((s.t_ms - p.t_ms) / 1e3)
        } else {
            0.0
        };
        series.throughput.push(rate);
    }
    let first_failure = h
        .first_failure
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    RunOutput {
        failures: h.failures(),
        first_failure,
        completed: quiescent.completed,
        created: quiescent.created,
        phase_starts,
        phase_settled,
        aborted,
        quiescent_idle: quiescent.idle(),
        quiescent_live: quiescent.live,
        after_exit_existing: after_exit,
        completed_series: completed,
        series,
        pressure,
        cpu_clock_start_ms,
        cpu_ms: match (cpu_before, cpu_after) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        },
    }
}

/// Marks phases `0..=begun` (every worker has begun them) as settled at
/// `t_ms`, those not marked before.
fn settle(settled: &mut [Option<f64>], begun: usize, t_ms: f64) {
    let end = begun.saturating_add(1).min(settled.len());
    for s in &mut settled[..end] {
        s.get_or_insert(t_ms);
    }
}

/// Keeps every other sample (the first and last stay).
fn thin(samples: &mut Vec<Sample>) {
    let last = samples.last().copied();
    let mut i = 0;
    samples.retain(|_| {
        i += 1;
        i % 2 == 1
    });
    if let Some(last) = last {
        if samples.last().map(|s| s.t_ms) != Some(last.t_ms) {
            samples.push(last);
        }
    }
}

/// A run's output with only the sample times and completions set, for
/// the tests of what is measured from them.
#[cfg(test)]
pub(crate) fn output_of(t_ms: &[f64], completed: &[u64]) -> RunOutput {
    RunOutput {
        series: Series {
            t_ms: t_ms.to_vec(),
            ..Series::default()
        },
        failures: 0,
        first_failure: None,
        completed: completed.last().copied().unwrap_or(0),
        created: 0,
        phase_starts: Vec::new(),
        phase_settled: Vec::new(),
        aborted: false,
        quiescent_idle: 0,
        quiescent_live: 0,
        after_exit_existing: 0,
        completed_series: completed.to_vec(),
        pressure: PressureCounts::default(),
        cpu_ms: f64::NAN,
        cpu_clock_start_ms: 0.0,
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn the_rate_uses_the_samples_inside_the_span() {
        // 1,000 requests per 10 ms sample, then 4,000: the span 15..45 ms
        // holds the samples at 20, 30, 40 ms.
        let out = output_of(
            &[0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
            &[0, 10, 20, 30, 70, 80],
        );
        assert_eq!(out.rate_between(15.0, 45.0), 50.0 / 0.020);
    }

    #[test]
    fn a_span_with_too_few_samples_widens_to_the_nearest_ones() {
        // One sample (at 30 ms) inside 25..35 ms: measured between 20 and
        // 40 ms instead of reported as nothing.
        let out = output_of(&[0.0, 20.0, 30.0, 40.0], &[0, 100, 150, 300]);
        assert_eq!(out.rate_between(25.0, 35.0), 200.0 / 0.020);
        // None inside at all: the samples around the span.
        assert_eq!(out.rate_between(21.0, 29.0), 50.0 / 0.010);
        // Nothing after the span: no rate.
        assert_eq!(out.rate_between(45.0, 60.0), 0.0);
    }
}
