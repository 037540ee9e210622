//! `spike-then-idle` (seed 001's memory table): idle memory before, during
//! and after a burst.
//!
//! Seed 001 measured QEMU around an fio run: VSZ 4705248 KB before,
//! +~100 MB during, back to 4694996 KB after ("This confirms that
//! coroutines are indeed being freed when no longer needed"); RSS barely
//! moved. Here: a light load, a burst of the fio workload, then idle for
//! five periods. A fixed cap keeps little; a pool that never shrinks keeps
//! the burst; a periodic one gives it back.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::report::{Column, Format};
use crate::scenario::fio::QEMU_STACK_SIZE;
use crate::scenario::harness::{phased_worker, Load, Phase, Plan, RunOutput, Worker};
use crate::scenario::{base_metrics, param, Settings, Spec};
use crate::stack::Touch;

pub(crate) fn spec(settings: &Settings) -> Spec {
    let interval = settings.interval();
    let threads = if settings.quick { 2 } else { 4 };
    let (light, burst) = (4, 256);
    let phases = vec![
        Phase {
            name: "before (light load)".to_owned(),
            min: interval * 2,
            loads: vec![Load::Rounds { depth: light }; threads],
            on_enter: None,
        },
        Phase {
            name: "burst".to_owned(),
            min: interval * 2,
            loads: vec![Load::Rounds { depth: burst }; threads],
            on_enter: None,
        },
        Phase {
            name: "after (idle)".to_owned(),
            min: interval * 5,
            loads: vec![Load::Idle; threads],
            on_enter: None,
        },
    ];
    let plan = Plan {
        phases,
        sample_every: (interval / 10).clamp(Duration::from_millis(5), Duration::from_millis(25)),
        abort_on_failure: false,
        touch: Touch::Large,
    };
    let mut params = BTreeMap::new();
    param(&mut params, "threads", threads);
    param(&mut params, "before: requests in flight per thread", light);
    param(&mut params, "burst: requests in flight per thread", burst);
    param(&mut params, "before / burst / after", "2 / 2 / 5 periods");
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    Spec {
        id: "spike-then-idle",
        title: "spike-then-idle: idle memory before, during and after a burst",
        seed: "seed 001's memory table: VSZ +~100 MB during fio and -~100 MB after it, RSS nearly \
               flat: the 2021 pool gives a burst's stacks back once it is over.",
        workload: format!(
            "{threads} threads: light load ({light} in flight each) for 2 periods, a burst ({burst} \
             each) for 2 periods, then idle for 5 periods."
        ),
        params,
        columns: vec![
            Column::new("idle_before", "idle before", Format::Count),
            Column::new("stacks_burst", "peak stacks burst", Format::Count),
            Column::new("idle_after", "idle after", Format::Count),
            Column::new("vsz_before", "VSZ before", Format::MiB),
            Column::new("vsz_burst", "peak VSZ burst", Format::MiB),
            Column::new("vsz_after", "VSZ after", Format::MiB),
            Column::new("rss_before", "RSS before", Format::MiB),
            Column::new("rss_burst", "peak RSS burst", Format::MiB),
            Column::new("rss_after", "RSS after", Format::MiB),
        ],
        headline: "idle_after",
        env: settings.env(QEMU_STACK_SIZE, interval),
        plan,
        warmup: None,
        make_worker,
        metrics,
        notes: Vec::new(),
    }
}

fn make_worker(plan: &Plan) -> Box<Worker<'_>> {
    Box::new(phased_worker(plan))
}

fn metrics(out: &RunOutput, _plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let s = &out.series;
    let start = |i: usize| out.phase_starts.get(i).copied().flatten();
    let (Some(burst), Some(after)) = (start(1), start(2)) else {
        return m;
    };
    // Before: the last sample of the light load. Burst: the most stacks
    // (idle + in use) during it. After: the last sample before the workers
    // stopped.
    let last = s.t_ms.len().saturating_sub(2);
    let max_in = |v: &[u64], r: std::ops::Range<usize>| v[r].iter().copied().max().unwrap_or(0);
    let during = out.range(burst, after);
    let marks = [
        ("before", out.index_at(burst - 1.0).map(|i| i..i + 1)),
        ("burst", (!during.is_empty()).then_some(during)),
        ("after", Some(last..last + 1)),
    ];
    let held: Vec<u64> = s.idle.iter().zip(&s.live).map(|(i, l)| i + l).collect();
    for (name, range) in marks {
        let Some(r) = range else { continue };
        m.insert(format!("idle_{name}"), max_in(&s.idle, r.clone()) as f64);
        m.insert(format!("stacks_{name}"), max_in(&held, r.clone()) as f64);
        m.insert(
            format!("vsz_{name}"),
            max_in(&s.vsz_kib, r.clone()) as f64 * 1024.0,
        );
        m.insert(format!("rss_{name}"), max_in(&s.rss_kib, r) as f64 * 1024.0);
    }
    m
}
