//! `map-count` (seed 000): per-thread demand that is uneven in time, against
//! the real `vm.max_map_count`.
//!
//! Seed 000: "per-thread pools can grow to tens of thousands of coroutines.
//! Each coroutine causes 2 virtual memory areas to be created. Eventually
//! vm.max_map_count is reached" and QEMU aborts with "failed to allocate
//! memory for stack". "The per-thread pool sizes are non-uniform and depend
//! on past coroutine usage in each thread, so it's possible for one thread
//! to have a large pool while another thread's pool is empty."
//!
//! Here one thread at a time spikes: it holds `N` requests in flight at
//! once, then completes them, and the next thread spikes. Stacks are one
//! page plus the guard (8 KiB of address space, 2 VMAs), so the real limit
//! (65530 VMAs, about 30k stacks) is reached in well under a second by a
//! policy that keeps every thread's spike. A failed creation is recorded
//! with the VMA count and ends that policy's run, where QEMU would abort.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::policy::PolicyKind;
use crate::report::format;
use crate::report::plot::{Limit, Metric};
use crate::report::summary::times;
use crate::report::{Claim, Column, Figure, Format, ScenarioReport, Verdict};
use crate::scenario::harness::{Load, Phase, Plan, RunOutput};
use crate::scenario::{base_metrics, param, phased, plots, Settings, Spec};
use crate::seeds::quote;
use crate::stack::Touch;

/// The shortest period used here. The spikes are real work (tens of
/// thousands of `mmap`s, about a second in all), so a period scaled far
/// below that would let a periodic policy forget one thread's spike before
/// the next one comes, which at QEMU's real 15 s it never does.
pub const MIN_INTERVAL: Duration = Duration::from_secs(3);

/// Usable bytes per stack: one page.
pub const STACK_SIZE: usize = 4096;

/// Sizes of the workload.
#[derive(Clone, Copy, Debug)]
pub struct MapCountSize {
    /// Threads; each spikes once, in turn.
    pub threads: usize,
    /// Requests one spike holds in flight.
    pub spike: usize,
    /// How long a spike holds them.
    pub hold: Duration,
}

impl MapCountSize {
    /// Sizes for a full or a quick run. Both exceed the map count for a
    /// policy that keeps every spike (threads × spike > 32k stacks).
    pub fn new(quick: bool) -> Self {
        if quick {
            MapCountSize {
                threads: 4,
                spike: 9_000,
                hold: Duration::from_millis(10),
            }
        } else {
            MapCountSize {
                threads: 4,
                spike: 10_000,
                hold: Duration::from_millis(50),
            }
        }
    }
}

pub(crate) fn spec(settings: &Settings) -> Spec<'static> {
    let size = MapCountSize::new(settings.quick);
    let interval = settings.interval().max(MIN_INTERVAL);
    let mut phases = Vec::new();
    for k in 0..size.threads {
        let mut loads = vec![Load::Idle; size.threads];
        loads[k] = Load::Hold { count: size.spike };
        phases.push(Phase {
            name: format!("thread {k} spikes"),
            min: size.hold,
            loads,
        });
    }
    phases.push(Phase {
        name: "all idle".to_owned(),
        min: size.hold * 4,
        loads: vec![Load::Idle; size.threads],
    });
    let plan = Plan {
        phases,
        sample_every: Duration::from_millis(10),
        abort_on_failure: true,
        touch: Touch::Small,
    };
    let mut params = BTreeMap::new();
    param(&mut params, "threads", size.threads);
    param(&mut params, "requests per spike", size.spike);
    param(
        &mut params,
        "stacks if every spike is kept",
        size.threads * size.spike,
    );
    param(&mut params, "stack", "4 KiB + guard page (2 VMAs)");
    param(&mut params, "hold per spike", format::Human(size.hold));
    param(&mut params, "vm.max_map_count", settings.max_map_count);
    let mut notes = Vec::new();
    if interval > settings.interval() {
        notes.push(format!(
            "periods here are {} for every periodic policy, not {}: the spikes take about \
             a second of real mmap work, and a shorter period would end a spike's pool before the next \
             spike, which QEMU's real 15 s never does",
            format::Human(interval),
            format::Human(settings.interval())
        ));
    }
    notes.push(
        "a failed creation ends that policy's run (QEMU aborts there); it is recorded with the \
         process's VMA count"
            .to_owned(),
    );
    Spec {
        id: "map-count",
        title: "map-count: uneven per-thread spikes against vm.max_map_count",
        seeds: &["000"],
        finding: "Seed 000: per-thread pools grew to tens of thousands of coroutines, two VMAs \
                  each, until vm.max_map_count was reached and QEMU aborted. Its fix caps the \
                  global pool (QEMU's code: at (max_map_count - 5000) / 2) and each thread at \
                  two batches (of 128)."
            .to_owned(),
        quotes: vec![quote::QEMU_2024_MAP_COUNT],
        workload: format!(
            "{} threads in turn hold {} requests in flight on one-page guarded stacks, then \
             complete them; then all idle.",
            size.threads, size.spike
        ),
        params,
        columns: vec![
            Column::new("peak_stacks", "peak stacks", Format::Count).terminal("peak stacks"),
            Column::new("peak_idle", "peak idle", Format::Count).terminal("peak idle"),
            Column::new("peak_vmas", "peak VMAs", Format::Count).terminal("peak VMAs"),
            Column::new("failures", "failed creations", Format::Count).terminal("failed"),
            Column::new("first_failure_ms", "1st failure at", Format::Millis)
                .terminal("1st failure"),
        ],
        plots: figures(settings),
        headline: "peak_vmas",
        env: settings.env(STACK_SIZE, interval),
        plan,
        warmup: None,
        make_worker: phased(),
        metrics,
        notes,
    }
}

/// The standard plots, the VMAs against the `vm.max_map_count` the run
/// was sized for: the line the hoarding policies reach.
fn figures(settings: &Settings) -> Vec<Figure> {
    plots::STANDARD
        .iter()
        .map(|&metric| {
            let mut spec = plots::over_time(metric, plots::SINCE_START);
            if metric == Metric::Vmas && settings.max_map_count > 0 {
                spec.limit = Some(Limit {
                    value: settings.max_map_count as f64,
                    label: "vm.max_map_count".to_owned(),
                });
            }
            Figure::OverTime(spec)
        })
        .collect()
}

/// What map-count says about seed 000.
pub(crate) fn claims(s: &ScenarioReport, settings: &Settings) -> Vec<Claim> {
    let limit = settings.max_map_count as f64;
    let share = |p: PolicyKind| {
        s.result(p).map(|r| {
            let peak = r
                .runs
                .iter()
                .map(|run| run.metrics.get("peak_vmas").copied().unwrap_or(0.0))
                .fold(0.0, f64::max);
            (peak / limit, r.failures, r.runs.len())
        })
    };
    let base = |claim: &str, published: &str, published_detail: &str| Claim {
        seed: "000".to_owned(),
        scenario: s.id.clone(),
        claim: claim.to_owned(),
        published: published.to_owned(),
        published_detail: published_detail.to_owned(),
        measured: "–".to_owned(),
        measured_detail: "not measured (the policy was not run)".to_owned(),
        rule: String::new(),
        verdict: Verdict::Unmeasured,
    };
    let mut out = Vec::new();

    let mut c = base(
        "per-thread pools reach vm.max_map_count",
        "abort",
        "\"per-thread pools can grow to tens of thousands of coroutines ... Eventually \
         vm.max_map_count is reached\" and QEMU aborts (seed 000)",
    );
    c.rule = "every qemu-2021 run fails at ≥ 0.95× the limit".to_owned();
    if let Some(r) = s.result(PolicyKind::Qemu2021) {
        let at: Vec<f64> = r
            .runs
            .iter()
            .map(|run| {
                run.first_failure
                    .as_ref()
                    .map_or(0.0, |f| f.vmas as f64 / limit)
            })
            .collect();
        let failed = r
            .runs
            .iter()
            .filter(|run| run.first_failure.is_some())
            .count();
        let low = at.iter().copied().fold(f64::INFINITY, f64::min);
        c.measured = if failed > 0 {
            times(low)
        } else {
            "no failure".to_owned()
        };
        c.measured_detail = match r.first_failure() {
            Some(f) => format!(
                "qemu-2021 failed to map a stack in {failed}/{} runs, the first at {} VMAs ({} \
                 of vm.max_map_count = {})",
                r.runs.len(),
                format::count(f.vmas as f64),
                times(f.vmas as f64 / limit),
                format::count(limit)
            ),
            None => format!("qemu-2021 never failed in {} runs", r.runs.len()),
        };
        c.verdict = Verdict::of(failed == r.runs.len() && failed > 0 && low >= 0.95);
    }
    out.push(c);

    for (p, claim) in [
        (PolicyKind::Qemu2024, "the capped pool stays under it"),
        (PolicyKind::Tidepool, "tidepool stays under it too"),
    ] {
        let mut c = base(
            claim,
            "no abort",
            "the capped pool does not reach vm.max_map_count (seed 000's goal)",
        );
        c.rule = "no failure; peak VMAs < the limit".to_owned();
        if let Some((peak, failures, runs)) = share(p) {
            c.measured = times(peak);
            c.measured_detail = format!(
                "{p}: peak VMAs {} of vm.max_map_count over {runs} runs, {failures} failed \
                 creation(s)",
                times(peak)
            );
            c.verdict = Verdict::of(failures == 0 && peak < 1.0);
        }
        out.push(c);
    }
    out
}

fn metrics(out: &RunOutput, _plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let s = &out.series;
    let peak = s
        .idle
        .iter()
        .zip(&s.live)
        .map(|(i, l)| i + l)
        .max()
        .unwrap_or(0);
    m.insert("peak_stacks".into(), peak as f64);
    m.insert(
        "first_failure_ms".into(),
        out.first_failure.as_ref().map_or(0.0, |f| f.t_ms),
    );
    m
}
