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

use crate::report::{Column, Format};
use crate::scenario::harness::{phased_worker, Load, Phase, Plan, RunOutput, Worker};
use crate::scenario::{base_metrics, param, Settings, Spec};
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

pub(crate) fn spec(settings: &Settings) -> Spec {
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
            on_enter: None,
        });
    }
    phases.push(Phase {
        name: "all idle".to_owned(),
        min: size.hold * 4,
        loads: vec![Load::Idle; size.threads],
        on_enter: None,
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
    param(&mut params, "hold per spike", format!("{:?}", size.hold));
    param(&mut params, "vm.max_map_count", settings.max_map_count);
    let mut notes = Vec::new();
    if interval > settings.interval() {
        notes.push(format!(
            "periods here are {interval:?} for every periodic policy, not {:?}: the spikes take about \
             a second of real mmap work, and a shorter period would end a spike's pool before the next \
             spike, which QEMU's real 15 s never does",
            settings.interval()
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
        seed: "seed 000: per-thread pools 'can grow to tens of thousands of coroutines' until \
               vm.max_map_count is reached and QEMU aborts; the 2024 fix caps the global pool at \
               (max_map_count - 5000) / 2 and each thread at 2 batches of 128.",
        workload: format!(
            "{} threads in turn hold {} requests in flight on one-page guarded stacks, then complete \
             them; then all idle.",
            size.threads, size.spike
        ),
        params,
        columns: vec![
            Column::new("peak_stacks", "peak stacks", Format::Count),
            Column::new("peak_idle", "peak idle", Format::Count),
            Column::new("peak_vmas", "peak VMAs", Format::Count),
            Column::new("failures", "failed creations", Format::Count),
            Column::new("first_failure_ms", "1st failure at", Format::Millis),
        ],
        headline: "peak_vmas",
        env: settings.env(STACK_SIZE, interval),
        plan,
        warmup: None,
        make_worker,
        metrics,
        notes,
    }
}

fn make_worker(plan: &Plan) -> Box<Worker<'_>> {
    Box::new(phased_worker(plan))
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
