//! `mass-teardown` (seed 004): many threads release many stacks at once.
//!
//! Seed 004 (DragonFly BSD, 2017): killing 900,000 processes that each held
//! a pipe made the system unusable for upwards of an hour; bounding
//! teardown to `ncpus` at a time (a queued lock, no wake-up storm),
//! removing address ranges in bulk, and allocating in bursts of 32 pages
//! brought it under 30 s. Here: `H` holder threads (the seed's chain of
//! processes) together hold `N` guarded 256 KiB stacks, the top 64 KiB of
//! each written (`mass-teardown`) or all of it (`mass-teardown-full`),
//! then all release at once and exit. Meanwhile a probe thread, about
//! every millisecond, times a get + put on a *different* stack pool and
//! an `mmap` + `munmap` of a 64 KiB region: what the rest of the process
//! feels.
//!
//! Policies ([`PolicyKind::TEARDOWN`]):
//!
//! * `dfly-before`: every stack its own mapping with a `PROT_NONE` guard
//!   (`GuardedStack::with_guard_mode(_, GuardMode::Protect)`: one `mmap` +
//!   one `mprotect`, two VMAs, the seed's one-object-at-a-time pattern and
//!   tidepool's before issue 13, whatever the kernel offers); every
//!   releasing thread unmaps its own stacks at once, one `munmap` each, no
//!   bound.
//! * `dfly-2017`: stacks carved in slabs of 32
//!   (`StackManager::create_batch`, the same manager as `tidepool`'s, so
//!   the same guards: the two differ only in how they tear down); a
//!   releasing thread takes one of `ncpus` permits (woken one at a time)
//!   and tears its stacks down with one `destroy_batch` (one `munmap` per
//!   slab).
//! * `tidepool`: a `StackPool` with `burst(32)` and one batch kept idle;
//!   holders drop their `PooledStack`s and exit; the pool's destroy queue
//!   (at most `ncpus` runners, one chunk per releasing thread, the
//!   reclaimer the rest) tears them down.
//!
//! # Timeline of a run
//!
//! ```text
//! 0 take: holders create      1 held, at rest      2 teardown          3 after
//! |---------------------------|--------------------|-------------------|------|
//!  probe ~every ms throughout; "at rest" = phase 1, "during" = phase 2
//! ```
//!
//! Phase 2 starts when the holders are released and ends when every holder
//! thread has exited and nothing is left to destroy (tidepool's
//! `Stats::destroying` is 0): that is the teardown wall time. Runs are in
//! this process, one after another, in rotating policy order; the VMA
//! count is read at the end of phase 0 (not during the probe's windows:
//! reading `/proc/self/maps` takes the address-space lock).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use tidepool::stack::{GuardMode, GuardedStack, StackPool};
use tidepool::Manage;

use crate::policy::PolicyKind;
use crate::report::format;
use crate::report::plot::Metric;
use crate::report::summary::{times, Ratio};
use crate::report::{
    Claim, Column, Event, Figure, Format, PolicyResult, RunRecord, ScenarioReport, Series, Verdict,
};
use crate::scenario::{param, plots, summarize, Progress, Settings};
use crate::seeds::{published, quote};

/// Usable bytes of every stack.
pub const STACK: usize = 256 * 1024;
/// Bytes of the region the probe maps and unmaps.
const PROBE_MAP: usize = 64 * 1024;

/// How much of each held stack is written (resident), and so how much
/// memory the teardown frees: the scenario's two variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// The top 64 KiB: a coroutine's frames (`mass-teardown`).
    Top,
    /// The whole stack (`mass-teardown-full`).
    Whole,
}

impl Touch {
    /// Bytes written at the top of each stack.
    pub fn bytes(self) -> usize {
        match self {
            Touch::Top => 64 * 1024,
            Touch::Whole => STACK,
        }
    }

    /// The scenario's id.
    pub fn id(self) -> &'static str {
        match self {
            Touch::Top => "mass-teardown",
            Touch::Whole => "mass-teardown-full",
        }
    }
}
/// The seed's burst: 32 pages at a time; here a slab's worth of stacks:
/// 31 stacks of 256 KiB and their guard pages fill the 8 MiB a slab holds
/// at most ([`tidepool::stack::MAX_SLAB_BYTES`]).
pub const BURST: usize = 31;
const _: () = {
    let slot = STACK + 4096;
    assert!(BURST * slot <= tidepool::stack::MAX_SLAB_BYTES);
    assert!((BURST + 1) * slot > tidepool::stack::MAX_SLAB_BYTES);
};
/// The phases of every run.
const PHASES: [&str; 4] = [
    "holders take their stacks",
    "held, at rest",
    "release: teardown",
    "after",
];

/// Sizes of a run.
#[derive(Clone, Copy, Debug)]
struct Size {
    stacks: usize,
    holders: usize,
    rest: Duration,
    after: Duration,
}

fn size(settings: &Settings, touch: Touch) -> (Size, Option<String>) {
    let (want, holders, rest, after) = if settings.quick {
        (2_000, 16, 60, 30)
    } else {
        (25_000, 64, 200, 60)
    };
    // Two VMAs per stack (guard + stack), a burst of slack per holder, and
    // room for the rest of the process: never past vm.max_map_count.
    let now = crate::procfs::vmas().unwrap_or(1_000);
    let room = settings.max_map_count.saturating_sub(now + 4_096) / 2;
    let room = room.saturating_sub((holders * BURST) as u64) as usize;
    // What is written stays under half the machine's memory.
    let ram = crate::procfs::mem_total_kib().map_or(u64::MAX, |k| k * 1024 / 2);
    let fit = (ram / touch.bytes() as u64).min(usize::MAX as u64) as usize;
    let stacks = want.min(room).min(fit).max(holders);
    let note = (stacks < want).then(|| {
        format!(
            "sized down from {} to {} stacks: vm.max_map_count is {} and the process already \
             had {} VMAs; {} KiB written per stack and half the RAM fit {}",
            format::count(want as f64),
            format::count(stacks as f64),
            settings.max_map_count,
            now,
            touch.bytes() / 1024,
            format::count(fit as f64),
        )
    });
    (
        Size {
            stacks,
            holders,
            rest: Duration::from_millis(rest),
            after: Duration::from_millis(after),
        },
        note,
    )
}

/// Writes the top `bytes` of a stack.
fn touch(stack: &GuardedStack, bytes: usize) {
    let n = bytes.min(stack.usable_size());
    // SAFETY: the top `n` bytes of the usable part are writable, and ours
    // alone while we hold the stack.
    unsafe { stack.top().as_ptr().sub(n).write_bytes(1, n) }
}

/// A counting semaphore whose waiters are woken one at a time
/// (`notify_one`): dfly-2017's bound of `ncpus` teardowns at once, without
/// a wake-up storm.
struct Permits {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Permits {
    fn acquire(&self) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
    }

    fn release(&self) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_one();
    }
}

/// One probe sample.
#[derive(Clone, Copy, Debug)]
struct Sample {
    t_ms: f64,
    get_put_us: f64,
    map_ms: f64,
    rss_kib: u64,
}

/// The rest of the process: a get + put on its own pool, and a 64 KiB
/// region of its own mapped and unmapped, about every millisecond until
/// `stop`.
fn probe(stop: &AtomicBool, start: Instant) -> Vec<Sample> {
    let Ok(pool) = StackPool::builder(STACK).background(false).build() else {
        return Vec::new();
    };
    drop(pool.get());
    let mut samples = Vec::new();
    while !stop.load(SeqCst) {
        let t = Instant::now();
        drop(std::hint::black_box(pool.get()));
        let get_put_us = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        map_unmap();
        let map_ms = t.elapsed().as_secs_f64() * 1e3;
        let rss_kib = crate::procfs::memory().map_or(0, |m| m.rss_kib);
        samples.push(Sample {
            t_ms: start.elapsed().as_secs_f64() * 1e3,
            get_put_us,
            map_ms,
            rss_kib,
        });
        std::thread::sleep(Duration::from_millis(1));
    }
    samples
}

/// Maps a private 64 KiB region and unmaps it: both take the process's
/// address-space lock for write, and the `munmap` flushes the TLBs of the
/// other CPUs running the process.
// The probe stands for the rest of the process: a plain `mmap` + `munmap`
// of its own, not tidepool's.
#[allow(clippy::disallowed_methods)]
fn map_unmap() {
    use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
    // SAFETY: a fresh anonymous mapping at an address the kernel picks,
    // unmapped whole right after; nothing points into it.
    unsafe {
        if let Ok(p) = mmap_anonymous(
            std::ptr::null_mut(),
            PROBE_MAP,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        ) {
            let _ = munmap(std::hint::black_box(p), PROBE_MAP);
        }
    }
}

/// What one run measured, besides the probe.
struct Run {
    samples: Vec<Sample>,
    /// Phase starts, ms from the run's start.
    phases: [f64; 4],
    peak_vmas: u64,
    hold_rss_kib: u64,
    munmaps: u64,
    /// `madvise` calls releasing freed stacks' pages (slabs that stayed).
    madvises: u64,
    torn_down: u64,
    holders: usize,
    left_live: u64,
    error: Option<String>,
}

fn run_once(kind: PolicyKind, size: Size, touch_bytes: usize) -> Result<Run, String> {
    // Built first: a refused configuration costs no thread. dfly-2017
    // unmaps whole slabs, pages and all (DragonFly's bulk removal): no
    // release step.
    let step = match kind {
        PolicyKind::Dfly2017 => 0,
        _ => tidepool::DEFAULT_RELEASE_STEP,
    };
    let pool = StackPool::builder(STACK)
        .release_step(step)
        .batch_size(BURST)
        .burst(BURST)
        .unbounded()
        .max_idle(BURST)
        .build()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let ms = || start.elapsed().as_secs_f64() * 1e3;
    let stop = Arc::new(AtomicBool::new(false));
    let probe_thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || probe(&stop, start))
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let per = size.stacks.div_ceil(size.holders);
    let held = Arc::new(Barrier::new(size.holders + 1));
    let go = Arc::new(Barrier::new(size.holders + 1));
    let failed = Arc::new(Mutex::new(None::<String>));
    let permits = Arc::new(Permits {
        free: Mutex::new(cpus),
        cv: Condvar::new(),
    });
    // The probe sees the process before anything is held.
    std::thread::sleep(size.after);
    let mut phases = [0.0; 4];
    phases[0] = ms();
    let threads: Vec<_> = (0..size.holders)
        .map(|_| {
            let (held, go, pool, permits, failed) = (
                Arc::clone(&held),
                Arc::clone(&go),
                pool.clone(),
                Arc::clone(&permits),
                Arc::clone(&failed),
            );
            let fail = move |e: String| {
                failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
            };
            std::thread::spawn(move || match kind {
                PolicyKind::DflyBefore => {
                    let v: Vec<GuardedStack> = (0..per)
                        .map_while(|_| {
                            GuardedStack::with_guard_mode(STACK, GuardMode::Protect)
                                .map_err(|e| fail(e.to_string()))
                                .ok()
                        })
                        .collect();
                    v.iter().for_each(|s| touch(s, touch_bytes));
                    held.wait();
                    go.wait();
                    drop(v);
                }
                PolicyKind::Dfly2017 => {
                    let m = pool.manager();
                    let mut v = Vec::with_capacity(per);
                    while v.len() < per {
                        match m.create_batch((per - v.len()).min(BURST)) {
                            Ok(b) => v.extend(b),
                            Err(e) => {
                                fail(e.to_string());
                                break;
                            }
                        }
                    }
                    v.iter().for_each(|s| touch(s, touch_bytes));
                    held.wait();
                    go.wait();
                    permits.acquire();
                    m.destroy_batch(v);
                    permits.release();
                }
                _ => {
                    let v: Vec<_> = (0..per)
                        .map_while(|_| pool.get().map_err(|e| fail(e.to_string())).ok())
                        .collect();
                    v.iter().for_each(|s| touch(s, touch_bytes));
                    held.wait();
                    go.wait();
                    drop(v);
                }
            })
        })
        .collect();
    held.wait();
    let peak_vmas = crate::procfs::vmas().unwrap_or(0);
    let hold_rss_kib = crate::procfs::memory().map_or(0, |m| m.rss_kib);
    phases[1] = ms();
    std::thread::sleep(size.rest);
    phases[2] = ms();
    go.wait();
    for t in threads {
        let _ = t.join();
    }
    // Nothing left to destroy: tidepool's queue empties on the reclaimer.
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool.stats().pool.destroying > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    phases[3] = ms();
    std::thread::sleep(size.after);
    stop.store(true, SeqCst);
    let samples = probe_thread.join().unwrap_or_default();
    let stats = pool.stats();
    let held_total = (per * size.holders) as u64;
    let (munmaps, torn_down) = match kind {
        // One mapping per stack, unmapped by its drop: one `munmap` each.
        PolicyKind::DflyBefore => (held_total, held_total),
        PolicyKind::Dfly2017 => (stats.munmap_calls, held_total),
        // Bursts may have made a few more than were held; `max_idle` stay.
        _ => (stats.munmap_calls, stats.pool.destroyed),
    };
    // dfly-before's stacks are each a whole mapping: nothing to release.
    let madvises = match kind {
        PolicyKind::DflyBefore => 0,
        _ => stats.madvise_calls,
    };
    let error = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
    Ok(Run {
        samples,
        phases,
        peak_vmas,
        hold_rss_kib,
        munmaps,
        madvises,
        torn_down,
        holders: size.holders,
        left_live: stats.pool.live,
        error,
    })
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn record(run: &Run) -> RunRecord {
    let mut m = BTreeMap::new();
    // A teardown shorter than the probe's period may hold no sample: then
    // "during" reaches to the first sample after the release, the one
    // whose map + unmap ran while (or right after) it happened.
    let first_after = run
        .samples
        .iter()
        .map(|s| s.t_ms)
        .find(|&t| t >= run.phases[2])
        .unwrap_or(run.phases[3]);
    let during_end = run.phases[3].max(first_after);
    let (rest, during) = (run.phases[1]..run.phases[2], run.phases[2]..=during_end);
    let pick = |f: &dyn Fn(f64) -> bool, g: fn(&Sample) -> f64| -> Vec<f64> {
        run.samples.iter().filter(|s| f(s.t_ms)).map(g).collect()
    };
    let in_rest = |t: f64| rest.contains(&t);
    let in_during = |t: f64| during.contains(&t);
    for (w, f) in [
        ("rest", &in_rest as &dyn Fn(f64) -> bool),
        ("during", &in_during),
    ] {
        let gp = pick(f, |s| s.get_put_us);
        let mp = pick(f, |s| s.map_ms);
        for (p, q) in [("p50", 0.5), ("p99", 0.99), ("max", 1.0)] {
            m.insert(format!("{w}_get_put_{p}_us"), pct(&gp, q));
            m.insert(format!("{w}_map_{p}_ms"), pct(&mp, q));
        }
        m.insert(format!("{w}_samples"), gp.len() as f64);
    }
    // Each run's own during / rest: the figure the claims bound.
    for (what, unit) in [("map", "ms"), ("get_put", "us")] {
        let ratio = m[&format!("during_{what}_p99_{unit}")] / m[&format!("rest_{what}_p99_{unit}")];
        m.insert(format!("{what}_p99_ratio"), ratio);
    }
    let wall = run.phases[3] - run.phases[2];
    m.insert("wall_ms".into(), wall);
    m.insert(
        "wall_per_1000_ms".into(),
        wall * 1000.0 / run.torn_down.max(1) as f64,
    );
    let peak_rss = run
        .samples
        .iter()
        .map(|s| s.rss_kib)
        .max()
        .unwrap_or(0)
        .max(run.hold_rss_kib);
    m.insert("peak_rss".into(), peak_rss as f64 * 1024.0);
    m.insert("peak_rss_mib".into(), peak_rss as f64 / 1024.0);
    m.insert("peak_vmas".into(), run.peak_vmas as f64);
    m.insert(
        "munmap_per_1000".into(),
        run.munmaps as f64 * 1000.0 / run.torn_down.max(1) as f64,
    );
    m.insert(
        "madvise_per_1000".into(),
        run.madvises as f64 * 1000.0 / run.torn_down.max(1) as f64,
    );
    m.insert("torn_down".into(), run.torn_down as f64);
    m.insert("holders".into(), run.holders as f64);
    m.insert("left_live".into(), run.left_live as f64);
    m.insert(
        "failures".into(),
        if run.error.is_some() { 1.0 } else { 0.0 },
    );
    m.retain(|_, v| v.is_finite());
    // The series (the plots) start when every stack is held, so that every
    // run's release is at the same place: the rest length.
    let held = run.phases[1];
    let shown: Vec<&Sample> = run.samples.iter().filter(|s| s.t_ms >= held).collect();
    let series = Series {
        t_ms: shown.iter().map(|s| s.t_ms - held).collect(),
        rss_kib: shown.iter().map(|s| s.rss_kib).collect(),
        probe_get_put_us: shown.iter().map(|s| s.get_put_us).collect(),
        probe_map_ms: shown.iter().map(|s| s.map_ms).collect(),
        events: run
            .phases
            .iter()
            .enumerate()
            .skip(1)
            .map(|(phase, &t_ms)| Event {
                t_ms: t_ms - held,
                phase,
            })
            .collect(),
        ..Series::default()
    };
    RunRecord {
        metrics: m,
        series,
        first_failure: run.error.as_ref().map(|e| crate::report::Failure {
            t_ms: 0.0,
            vmas: run.peak_vmas,
            message: e.clone(),
        }),
        pressure: Default::default(),
    }
}

/// Runs every teardown policy `settings` selects, `settings.repeats` times
/// each, in rotating order.
pub(crate) fn run(settings: &Settings, progress: &dyn Progress, touch: Touch) -> ScenarioReport {
    let policies: Vec<PolicyKind> = PolicyKind::TEARDOWN
        .into_iter()
        .filter(|p| settings.policies.contains(p))
        .collect();
    let (size, sized_down) = size(settings, touch);
    progress.scenario(touch.id(), (policies.len() * settings.repeats) as u64);
    let mut runs: BTreeMap<PolicyKind, Vec<RunRecord>> = BTreeMap::new();
    let mut errors = Vec::new();
    for repeat in 0..settings.repeats {
        for i in 0..policies.len() {
            let kind = policies[(i + repeat) % policies.len()];
            progress.run(kind, &format!("repeat {}/{}", repeat + 1, settings.repeats));
            match run_once(kind, size, touch.bytes()) {
                Ok(run) => runs.entry(kind).or_default().push(record(&run)),
                Err(e) => errors.push(format!("policy could not be built: {kind}: {e}")),
            }
            progress.run_done();
        }
    }
    progress.scenario_done();
    let results: Vec<PolicyResult> = policies
        .iter()
        .filter_map(|&k| Some(summarize(k, runs.remove(&k)?, "wall_ms")))
        .collect();

    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut params = BTreeMap::new();
    param(&mut params, "stacks", size.stacks);
    param(&mut params, "holder threads", size.holders);
    param(&mut params, "stack size", "256 KiB + a guard page");
    param(
        &mut params,
        "touched per stack",
        format!("the top {} KiB", touch.bytes() / 1024),
    );
    param(&mut params, "stacks per slab (burst)", BURST);
    param(&mut params, "teardown bound (ncpus)", cpus);
    param(&mut params, "held at rest", format::Human(size.rest));
    param(&mut params, "probe period", "1 ms + the probe's own time");
    let (pipes, before, after) = published::DRAGONFLY;
    let mut notes = vec![
        "the probe runs in the same process: a get + put on its own stack pool (tidepool, \
         another pool than the one torn down), then a private 64 KiB region mapped (mmap) \
         and unmapped (munmap); \"at rest\" is phase 2 (everything held, nothing moving), \
         \"during\" is phase 3 (teardown); a probe iteration that waits on the address-space \
         lock is one late sample, so a stalled policy has fewer samples during its teardown \
         (the count is in the JSON); the ratios are each run's p99 during over its p99 at \
         rest, the median over runs"
            .to_owned(),
        "munmap and madvise per 1000 stacks are the pool's own counts \
         (StackStats::munmap_calls and madvise_calls, tidepool_stats in C) for dfly-2017 and \
         tidepool; dfly-before's stacks are each their own mapping, unmapped by their drop: \
         one munmap each and no madvise, by construction"
            .to_owned(),
        "the plots start when every stack is held (the end of phase 1, whose creation \
         differs by policy), so that every run's release comes after the same rest; the \
         percentiles and peak RSS use every sample"
            .to_owned(),
        format!(
            "peak RSS is the largest VmRSS the probe read (and the one read when all were \
             held); VMAs are read once everything is held; tidepool's bursts of {BURST} may \
             make up to a burst more per holder than it holds"
        ),
    ];
    notes.extend(sized_down);
    notes.extend(results.iter().map(percentiles));
    notes.extend(errors);
    ScenarioReport {
        id: touch.id().to_owned(),
        title: format!(
            "{}: many threads release many stacks at once ({} of each written)",
            touch.id(),
            match touch {
                Touch::Top => "the top 64 KiB",
                Touch::Whole => "all 256 KiB",
            }
        ),
        seeds: vec!["004".to_owned()],
        finding: format!(
            "Seed 004 (DragonFly BSD, 2017): killing {} processes that each held a pipe made \
             the system unusable for upwards of an hour ({} s); teardown bounded to ncpus at \
             a time through a queued lock, address ranges removed in bulk, and allocation in \
             bursts of 32 pages brought it under {} s.",
            format::count(pipes as f64),
            before,
            after
        ),
        quotes: vec![
            quote::DRAGONFLY_PROBLEM.to_quote(),
            quote::DRAGONFLY_FIX.to_quote(),
        ],
        workload: format!(
            "{} holder threads together take {} stacks of 256 KiB (the top {} KiB of each \
             written), hold them for {}, then all release at once and exit; a probe thread \
             times, about every millisecond, a get + put on another pool and a 64 KiB region \
             mapped and unmapped.",
            size.holders,
            format::count(size.stacks as f64),
            touch.bytes() / 1024,
            format::Human(size.rest)
        ),
        params,
        reclaim_interval_ms: tidepool::Config::default().reclaim_interval().as_secs_f64() * 1e3,
        columns: vec![
            Column::new("wall_ms", "teardown wall", Format::Millis).terminal("teardown"),
            Column::new("rest_map_p99_ms", "map+unmap p99 at rest", Format::Millis),
            Column::new("during_map_p99_ms", "map+unmap p99 during", Format::Millis),
            Column::new(
                "map_p99_ratio",
                "map+unmap p99 during / rest",
                Format::Ratio,
            )
            .terminal("map ×"),
            Column::new("rest_get_put_p99_us", "get+put p99 at rest", Format::Micros),
            Column::new(
                "during_get_put_p99_us",
                "get+put p99 during",
                Format::Micros,
            ),
            Column::new(
                "get_put_p99_ratio",
                "get+put p99 during / rest",
                Format::Ratio,
            )
            .terminal("g+p ×"),
            Column::new("peak_rss", "peak RSS", Format::MiB),
            Column::new("peak_vmas", "VMAs held", Format::Count).terminal("VMAs"),
            Column::new("munmap_per_1000", "munmap per 1000 stacks", Format::Count)
                .terminal("munmap/1k"),
            Column::new("madvise_per_1000", "madvise per 1000 stacks", Format::Count),
        ],
        phases: PHASES.iter().map(|p| (*p).to_owned()).collect(),
        results,
        claims: Vec::new(),
        plots: figures(),
        notes,
    }
}

/// The probe's two latencies and RSS (there are no requests or idle stacks
/// here), from the moment every stack is held, so that every run's release
/// is at the same place.
fn figures() -> Vec<Figure> {
    [Metric::ProbeMap, Metric::ProbeGetPut, Metric::Rss]
        .into_iter()
        .map(|m| Figure::OverTime(plots::over_time(m, "time since every stack was held (s)")))
        .collect()
}

/// A policy's probe percentiles at rest and during teardown, in words.
fn percentiles(r: &PolicyResult) -> String {
    let three = |w: &str, what: &str, f: fn(f64) -> String| {
        let unit = if what == "map" { "ms" } else { "us" };
        let v: Vec<String> = ["p50", "p99", "max"]
            .iter()
            .map(|p| f(r.metric(&format!("{w}_{what}_{p}_{unit}"))))
            .collect();
        v.join(" / ")
    };
    format!(
        "probe p50 / p99 / max, {} (medians over runs): map + unmap at rest {}, during teardown \
         {}; get + put on another pool at rest {}, during teardown {}; samples at rest {}, \
         during {}",
        r.policy,
        three("rest", "map", format::millis),
        three("during", "map", format::millis),
        three("rest", "get_put", format::micros),
        three("during", "get_put", format::micros),
        format::count(r.metric("rest_samples")),
        format::count(r.metric("during_samples")),
    )
}

/// What the mass-teardown scenario says about seed 004.
pub(crate) fn claims(s: &ScenarioReport) -> Vec<Claim> {
    let (pipes, before, after) = published::DRAGONFLY;
    let get = |p: PolicyKind| s.result(p);
    let (db, d17, tp) = (
        get(PolicyKind::DflyBefore),
        get(PolicyKind::Dfly2017),
        get(PolicyKind::Tidepool),
    );
    // The seed's row lists both variants' claims: the full one is marked.
    let tag = if s.id == Touch::Whole.id() {
        "full: "
    } else {
        ""
    };
    let claim = |claim: &str, published: String, detail: String, rule: &str| Claim {
        seed: "004".to_owned(),
        scenario: s.id.clone(),
        claim: format!("{tag}{claim}"),
        published,
        published_detail: detail,
        measured: "–".to_owned(),
        measured_detail: "a policy it needs was not run".to_owned(),
        rule: rule.to_owned(),
        verdict: Verdict::Unmeasured,
    };
    let seed_ratio = before as f64 / after as f64;
    let seed_words = format!(
        "{} pipes torn down at once: unusable for upwards of an hour before, less than {after} s \
         after: > {} (seed 004)",
        format::count(pipes as f64),
        times(seed_ratio)
    );

    // 1. The seed's before/after: how long the rest of the process stalls.
    let mut stall = claim(
        "the rest stalls less than before the fix",
        format!("> {}", times(seed_ratio)),
        seed_words.clone(),
        "dfly-before / tidepool ≥ 2×",
    );
    if let (Some(b), Some(t)) = (db, tp) {
        if let Some(r) = Ratio::of(b, t, "during_map_max_ms") {
            let d17_max = d17.map_or(f64::NAN, |r| r.metric("during_map_max_ms"));
            stall.measured = r.short();
            stall.measured_detail = format!(
                "worst probe stall (map + unmap) during teardown: dfly-before {}, dfly-2017 {}, \
                 tidepool {}; before / tidepool {}",
                format::millis(b.metric("during_map_max_ms")),
                format::millis(d17_max),
                format::millis(t.metric("during_map_max_ms")),
                r.detail()
            );
            stall.verdict = Verdict::of(r.median >= 2.0);
        }
    }

    // 2. The rest of the process is not disturbed: another pool's get +
    // put, and a map + unmap (the address-space lock, the TLB flushes).
    let disturbed = |what: &str, words: &str, bound: f64| {
        let mut c = claim(
            &format!("{words} p99 in teardown ≤ {bound}× rest"),
            "–".to_owned(),
            format!(
                "the seed: the rest of the system balks for less than {after} s after the \
                 fix; no latency figure (the bound is issue 44's)"
            ),
            &format!("tidepool during / rest ≤ {bound}×"),
        );
        let key = format!("{what}_p99_ratio");
        if let Some(t) = tp {
            let r = t.metric(&key);
            if r.is_finite() {
                let per: Vec<String> = t.per_run(&key).iter().map(|&v| times(v)).collect();
                let other = |p: Option<&PolicyResult>| {
                    p.map_or("not run".to_owned(), |p| times(p.metric(&key)))
                };
                let unit = if what == "map" { "ms" } else { "us" };
                let fmt = |v: f64| {
                    if what == "map" {
                        format::millis(v)
                    } else {
                        format::micros(v)
                    }
                };
                c.measured = times(r);
                c.measured_detail = format!(
                    "tidepool: the probe thread's {words} p99 {} during teardown vs {} at \
                     rest, {} (median of the runs' ratios; per run {}); dfly-2017 {}, \
                     dfly-before {} (mmap: an mmap + munmap of a 64 KiB region of its own; \
                     get+put: on a stack pool of its own)",
                    fmt(t.metric(&format!("during_{what}_p99_{unit}"))),
                    fmt(t.metric(&format!("rest_{what}_p99_{unit}"))),
                    times(r),
                    per.join(", "),
                    other(d17),
                    other(db),
                );
                c.verdict = Verdict::of(r <= bound);
            }
        }
        c
    };
    let map = disturbed("map", "mmap", 2.0);
    let probe = disturbed("get_put", "get+put", 1.5);

    // 3. Teardown wall time against the seed's fix.
    let mut wall = claim(
        "teardown wall time ≤ the seed's fix",
        "–".to_owned(),
        "the seed bounds teardown to ncpus at a time through a queued lock (no wake-up \
         storm), with ranges removed in bulk; no wall time of its own for that (seed 004)"
            .to_owned(),
        "tidepool / dfly-2017 ≤ 1.00×",
    );
    if let (Some(t), Some(d)) = (tp, d17) {
        if let Some(r) = Ratio::of(t, d, "wall_ms") {
            wall.measured = r.short();
            wall.measured_detail = format!(
                "teardown wall time: tidepool {}, dfly-2017 {}, dfly-before {}; tidepool / \
                 dfly-2017 {}; tidepool tore down {} stacks to dfly-2017's {} (its bursts of \
                 {BURST} carve up to a burst more per holder than it holds), per 1000 stacks \
                 {} vs {} ({})",
                format::millis(t.metric("wall_ms")),
                format::millis(d.metric("wall_ms")),
                db.map_or("not run".to_owned(), |b| format::millis(
                    b.metric("wall_ms")
                )),
                r.detail(),
                format::count(t.metric("torn_down")),
                format::count(d.metric("torn_down")),
                format::millis(t.metric("wall_per_1000_ms")),
                format::millis(d.metric("wall_per_1000_ms")),
                times(t.metric("wall_per_1000_ms") / d.metric("wall_per_1000_ms"))
            );
            wall.verdict = Verdict::of(r.median <= 1.0);
        }
    }

    // 4. Bulk unmap: one munmap per slab.
    let bound = 1000.0 / BURST as f64;
    let mut unmap = claim(
        "munmap per 1000 stacks ≤ 1000/k",
        "4 → 32 pages".to_owned(),
        format!(
            "the seed removes address ranges in bulk and grows its zone in bursts of 32 pages \
             instead of 4 (seed 004); here k = {BURST} stacks per slab"
        ),
        &format!("tidepool ≤ 1000/{BURST} + 1 slab/holder"),
    );
    if let Some(t) = tp {
        let v = t.metric("munmap_per_1000");
        if v.is_finite() {
            unmap.measured = format!("{v:.1}");
            unmap.measured_detail = format!(
                "munmap calls per 1000 stacks torn down, counted: tidepool {v:.1}, dfly-2017 {}, \
                 dfly-before {}",
                d17.map_or("not run".to_owned(), |r| format!(
                    "{:.1}",
                    r.metric("munmap_per_1000")
                )),
                db.map_or("not run".to_owned(), |r| format!(
                    "{:.0}",
                    r.metric("munmap_per_1000")
                ))
            );
            // Counted per stack torn down; each holder's last burst may
            // leave a partial slab, one more call each at most.
            let partial = t.metric("holders") * 1000.0 / t.metric("torn_down").max(1.0);
            unmap.verdict = Verdict::of(v <= bound + partial);
        }
    }
    vec![stall, map, probe, wall, unmap]
}

/// With both variants in one report, each claim of `mass-teardown` takes
/// its twin from `mass-teardown-full`: one row per claim on the report's
/// first screen with both figures in it (top 64 KiB written / all
/// written), holding only if both hold. The full variant's section then
/// lists no claims of its own and says where they went.
pub(crate) fn fold_variants(scenarios: &mut [ScenarioReport]) {
    let find = |t: Touch| scenarios.iter().position(|s| s.id == t.id());
    let (Some(top), Some(full)) = (find(Touch::Top), find(Touch::Whole)) else {
        return;
    };
    let twins = std::mem::take(&mut scenarios[full].claims);
    scenarios[full].notes.push(format!(
        "this variant's claims are shown with {}'s, each with both figures: top 64 KiB \
         written / all written",
        Touch::Top.id()
    ));
    for c in &mut scenarios[top].claims {
        let twin = twins
            .iter()
            .find(|f| f.claim.strip_prefix("full: ") == Some(c.claim.as_str()));
        let Some(f) = twin else { continue };
        c.measured = format!("{} / {}", c.measured, f.measured);
        c.measured_detail = format!(
            "top 64 KiB written: {}; all 256 KiB written: {}",
            c.measured_detail, f.measured_detail
        );
        // Which figure is which, where the row is read.
        c.rule = format!("{} (64K / all)", c.rule);
        c.verdict = match (c.verdict, f.verdict) {
            (Verdict::Pass, Verdict::Pass) => Verdict::Pass,
            (Verdict::Fail, _) | (_, Verdict::Fail) => Verdict::Fail,
            _ => Verdict::Unmeasured,
        };
    }
}
