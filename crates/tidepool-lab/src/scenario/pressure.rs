//! `pressure` (seed 003): a memory-pressure signal in mid-run.
//!
//! Seed 003 (Xen blkback): once memory pressure is detected, shrink the
//! free-page pools "aggressively" (to 0) for a short while; swap traffic
//! under pressure fell from 76,672/185,799 pages in/out to 212/3,325, with
//! no visible I/O cost. Here: a burst leaves idle stacks pooled, a light
//! load continues, and critical pressure is signalled in the middle of it.
//! Which policies give their idle stacks back, and what does it cost?
//!
//! The signal is tidepool's manual source,
//! `tidepool::pressure::notify(Level::Critical)`, at the same moment in
//! every policy's run; only tidepool listens. (A real PSI trigger fires only
//! under real memory stall, which the lab does not inflict on the machine.)

use std::collections::BTreeMap;
use std::time::Duration;

use crate::report::{Column, Format};
use crate::scenario::fio::QEMU_STACK_SIZE;
use crate::scenario::harness::{phased_worker, Action, Load, Phase, Plan, RunOutput, Worker};
use crate::scenario::{base_metrics, param, Settings, Spec};
use crate::stack::Touch;

/// The shortest period used here, so that the windows around the signal
/// are long enough to measure throughput in and no periodic resize falls
/// inside them.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1000);
/// In quick runs.
pub const MIN_INTERVAL_QUICK: Duration = Duration::from_millis(300);

pub(crate) fn spec(settings: &Settings) -> Spec {
    let floor = if settings.quick {
        MIN_INTERVAL_QUICK
    } else {
        MIN_INTERVAL
    };
    let interval = settings.interval().max(floor);
    let threads = if settings.quick { 2 } else { 4 };
    let (steady, burst) = (16, 256);
    // Burst [0, 0.5 I), steady [0.5 I, 1.2 I), signal at 1.2 I, steady
    // until 1.8 I: before QEMU 2021's resize at 2 I would free the burst.
    let phases = vec![
        Phase {
            name: "burst".to_owned(),
            min: interval.mul_f64(0.5),
            loads: vec![Load::Rounds { depth: burst }; threads],
            on_enter: None,
        },
        Phase {
            name: "steady".to_owned(),
            min: interval.mul_f64(0.7),
            loads: vec![Load::Rounds { depth: steady }; threads],
            on_enter: None,
        },
        Phase {
            name: "steady, after the signal".to_owned(),
            min: interval.mul_f64(0.6),
            loads: vec![Load::Rounds { depth: steady }; threads],
            on_enter: Some(Action::PressureCritical),
        },
    ];
    let plan = Plan {
        phases,
        sample_every: (interval / 60).clamp(Duration::from_millis(5), Duration::from_millis(20)),
        abort_on_failure: false,
        touch: Touch::Large,
    };
    let mut params = BTreeMap::new();
    param(&mut params, "threads", threads);
    param(&mut params, "burst: requests in flight per thread", burst);
    param(&mut params, "steady: requests in flight per thread", steady);
    param(&mut params, "signal", "Level::Critical at 1.2 periods");
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    let mut notes = vec![
        "pressure source: manual, tidepool::pressure::notify(Level::Critical), at the same moment of \
         every policy's run; the seed policies have no pressure response, as in QEMU"
            .to_owned(),
    ];
    notes.push(format!(
        "tidepool's pressure hold is the library default, {:?}, in real time (not scaled: it follows \
         PSI's 2 s trigger window); while it lasts, the depot is held at min_idle and each \
         thread keeps at most the two batches it caches",
        tidepool::Config::default().pressure_hold()
    ));
    if interval > settings.interval() {
        notes.push(format!(
            "periods here are {interval:?} for every periodic policy, not {:?}, so the windows around \
             the signal are long enough to measure and contain no periodic resize",
            settings.interval()
        ));
    }
    Spec {
        id: "pressure",
        title: "pressure: a critical memory-pressure signal in mid-run",
        seed: "seed 003 (Xen blkback): on memory pressure, shrink the pools aggressively for a while; \
               swap-out under pressure 185,799 -> 3,325 pages, no visible I/O cost.",
        workload: format!(
            "{threads} threads: a burst ({burst} in flight each) for 0.5 period, then {steady} each; \
             critical pressure is signalled at 1.2 periods; the run ends at 1.8 periods."
        ),
        params,
        columns: vec![
            Column::new("idle_before", "idle before", Format::Count),
            Column::new("idle_after", "idle after", Format::Count),
            Column::new("rss_before", "RSS before", Format::MiB),
            Column::new("rss_after", "RSS after", Format::MiB),
            Column::new("rate_before", "req/s before", Format::KiloPerSec),
            Column::new("rate_after", "req/s after", Format::KiloPerSec),
            Column::new("created_after", "created after", Format::Count),
        ],
        headline: "idle_after",
        env: settings.env(QEMU_STACK_SIZE, interval),
        plan,
        warmup: Some(Plan {
            phases: vec![Phase {
                name: "warm-up".to_owned(),
                min: Duration::from_millis(if settings.quick { 20 } else { 100 }),
                loads: vec![Load::Rounds { depth: steady }; threads],
                on_enter: None,
            }],
            sample_every: Duration::from_millis(10),
            abort_on_failure: false,
            touch: Touch::Large,
        }),
        make_worker,
        metrics,
        notes,
    }
}

fn make_worker(plan: &Plan) -> Box<Worker<'_>> {
    Box::new(phased_worker(plan))
}

fn metrics(out: &RunOutput, plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let s = &out.series;
    let Some(signal) = out.phase_starts.get(2).copied().flatten() else {
        return m;
    };
    let window = plan.phases[2].min.as_secs_f64() * 1e3;
    let before = out.index_at(signal - 1.0);
    // A sixth of the window after the signal: tidepool applies it within
    // milliseconds; Xen's aggressive shrink lasts 10 ms.
    let after = out.index_at(signal + window / 6.0);
    let end = out.index_at(signal + window);
    if let (Some(b), Some(a)) = (before, after) {
        m.insert("idle_before".into(), s.idle[b] as f64);
        m.insert("idle_after".into(), s.idle[a] as f64);
        m.insert("rss_before".into(), s.rss_kib[b] as f64 * 1024.0);
        m.insert("rss_after".into(), s.rss_kib[a] as f64 * 1024.0);
    }
    if let (Some(b), Some(e)) = (before, end) {
        m.insert(
            "created_after".into(),
            s.created[e].saturating_sub(s.created[b]) as f64,
        );
    }
    m.insert(
        "rate_before".into(),
        out.rate_between(signal - window, signal),
    );
    m.insert(
        "rate_after".into(),
        out.rate_between(signal, signal + window),
    );
    m
}
