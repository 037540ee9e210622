//! `pressure` (seed 003): a memory-pressure signal in mid-run.
//!
//! Seed 003 (Xen blkback): once memory pressure is detected, shrink the
//! free-page pools "aggressively" (to 0) for a short while; swap traffic
//! under pressure fell from 76,672/185,799 pages in/out to 212/3,325, with
//! no visible I/O cost. Here: a burst leaves idle stacks pooled, a light
//! load continues, and critical pressure is signalled in the middle of it.
//! Which policies give their idle stacks back, and what does it cost?
//!
//! The signal is real where the kernel allows it: page-cache thrash in a
//! 64 MiB child memory cgroup until a PSI trigger on `/proc/pressure/memory`
//! fires; else tidepool's manual source,
//! `tidepool::pressure::notify(Level::Critical)` (see
//! [`crate::pressure_source`]). Either way it starts at the same moment of
//! every policy's run, the run waits (at most 15 s) until it has arrived,
//! and the report says which source delivered it in each run. Only
//! tidepool listens.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::pressure_source::{self, Delivery, SignalRecord, MANUAL_LABEL, REAL_LABEL, REFUSED};
use crate::report::{median, Column, Format, ScenarioReport};
use crate::scenario::fio::QEMU_STACK_SIZE;
use crate::scenario::harness::{phased_worker, Load, Phase, Plan, RunOutput, Worker};
use crate::scenario::{base_metrics, param, Progress, ScenarioKind, Settings, Spec};
use crate::stack::Touch;

/// The shortest period used here, so that the windows around the signal
/// are long enough to measure throughput in and no periodic resize falls
/// inside them.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1000);
/// In quick runs.
pub const MIN_INTERVAL_QUICK: Duration = Duration::from_millis(300);
/// With the real source, quick or not: the signal comes 1-3 s after the
/// thrash starts, and the wait and the window after it must end before
/// QEMU 2021's resize at 2 periods.
pub const MIN_INTERVAL_REAL: Duration = Duration::from_secs(5);
/// The wait for a real signal that [`MIN_INTERVAL_REAL`] leaves room for
/// (longer waits are recorded, and flagged when the window after the
/// signal reaches past 2 periods).
pub const REAL_WAIT_BUDGET: Duration = Duration::from_secs(3);

/// The phase in which the signal is delivered and awaited.
const SIGNAL_PHASE: usize = 2;

/// Runs the scenario with the pressure source of this thread's lab run
/// (see [`pressure_source::begin`]; manual outside one), and adds what
/// each run's signal did to the report.
pub(crate) fn run(settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
    let delivery = match pressure_source::prepare_current() {
        Ok(d) => d,
        Err(why) => return refused_report(settings, &why),
    };
    let mut report = ScenarioKind::Pressure.run(settings, progress);
    let (interval, window) = timing(settings, matches!(delivery, Delivery::Real { .. }));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    annotate(
        &mut report,
        &delivery,
        pressure_source::take_records(),
        (ms(interval * 2), ms(window)),
    );
    report
}

/// `--pressure-source real` was refused: the scenario is not run.
fn refused_report(settings: &Settings, why: &str) -> ScenarioReport {
    let spec = spec(settings);
    ScenarioReport {
        id: spec.id.to_owned(),
        title: spec.title.to_owned(),
        seed: spec.seed.to_owned(),
        workload: spec.workload,
        params: spec.params,
        reclaim_interval_ms: spec.env.reclaim_interval.as_secs_f64() * 1e3,
        columns: spec.columns,
        results: Vec::new(),
        notes: vec![format!(
            "{REFUSED} --pressure-source real, but the kernel refused a step of the real \
             source ({REAL_LABEL}): {why}; the scenario was not run"
        )],
    }
}

/// The period, and the windows before delivery and after arrival in which
/// rates are measured (the last phase's length).
fn timing(settings: &Settings, real: bool) -> (Duration, Duration) {
    let floor = if real {
        MIN_INTERVAL_REAL
    } else if settings.quick {
        MIN_INTERVAL_QUICK
    } else {
        MIN_INTERVAL
    };
    let interval = settings.interval().max(floor);
    let window = if real {
        interval
            .mul_f64(0.6)
            .min(interval.mul_f64(0.8).saturating_sub(REAL_WAIT_BUDGET))
    } else {
        interval.mul_f64(0.6)
    };
    (interval, window)
}

pub(crate) fn spec(settings: &Settings) -> Spec {
    let delivery = pressure_source::current_delivery();
    let real = matches!(delivery, Delivery::Real { .. });
    let (interval, window) = timing(settings, real);
    let threads = if settings.quick { 2 } else { 4 };
    let (steady, burst) = (16, 256);
    // Burst [0, 0.5 I), steady [0.5 I, 1.2 I), signal delivered at 1.2 I
    // and awaited, then steady for a window after it arrived (0.6 I; with
    // the real source 0.8 I less the wait budget): before QEMU 2021's resize
    // at 2 I would free the burst.
    // The last thread is the controller (see `pressure_source::worker`).
    let loads = |load: Load, signal: bool| {
        let mut v = vec![load; threads];
        v.push(pressure_source::controller_load(signal));
        v
    };
    let (signal_name, after_name) = if real {
        (
            "pressure: page-cache thrash starts (64 MiB cgroup, PSI trigger armed)",
            "steady, after the PSI signal (or 15 s without)",
        )
    } else {
        (
            "pressure: critical (tidepool::pressure::notify)",
            "steady, after the signal",
        )
    };
    let phases = vec![
        Phase {
            name: "burst".to_owned(),
            min: interval.mul_f64(0.5),
            loads: loads(Load::Rounds { depth: burst }, false),
            on_enter: None,
        },
        Phase {
            name: "steady".to_owned(),
            min: interval.mul_f64(0.7),
            loads: loads(Load::Rounds { depth: steady }, false),
            on_enter: None,
        },
        Phase {
            name: signal_name.to_owned(),
            min: Duration::ZERO,
            loads: loads(Load::Rounds { depth: steady }, true),
            on_enter: None,
        },
        Phase {
            name: after_name.to_owned(),
            min: window,
            loads: loads(Load::Rounds { depth: steady }, false),
            on_enter: None,
        },
    ];
    debug_assert_eq!(pressure_source::signal_phase(&phases), Some(SIGNAL_PHASE));
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
    param(
        &mut params,
        "window before delivery / after arrival",
        format!("{window:?}"),
    );
    param(&mut params, "pressure source", delivery.label());
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    let mut notes = vec![match &delivery {
        Delivery::Real { trigger, .. } => format!(
            "pressure source: {REAL_LABEL}: as the signal phase begins (1.2 periods), a shell in \
             a new child of this process's cgroup v1 memory cgroup, limited to 64 MiB, writes a \
             300 MB file and reads it back three times, in a loop (page-cache thrash), the same \
             for every policy, until the PSI trigger {trigger} (Level::Critical, armed once for \
             the lab run and watched by tidepool's reclaimer thread) fires (and, for tidepool, \
             the pool's Stats::pressure_critical has gone up; tidepool's default sources, also \
             watched, may bring it first). The thrash is then killed; a run waits at most {:?}. \
             Periods are at least {MIN_INTERVAL_REAL:?} here, so that a wait of up to \
             {REAL_WAIT_BUDGET:?} and the {window:?} after it end before QEMU 2021's resize at 2 \
             periods (runs that overran are flagged). A thrash starts at least {:?} after the previous one ended (the kernel \
             signals a trigger at most once per 2 s window). PSI is system-wide: a stall of \
             another process on this machine could fire the trigger too (the sources that fired \
             are listed per run)",
            pressure_source::PATIENCE,
            pressure_source::GAP
        ),
        Delivery::Manual { fallback } => {
            let mut n = format!(
                "pressure source: {MANUAL_LABEL}, called as the signal phase begins (1.2 \
                 periods) of every policy's run; the phase ends when tidepool's pool has \
                 received it (Stats::pressure_critical goes up), at once for the seed policies"
            );
            if let Some(why) = fallback {
                n.push_str(&format!(
                    "; --pressure-source auto fell back to it because the real source \
                     ({REAL_LABEL}) was refused: {why}"
                ));
            }
            n
        }
    }];
    notes.push(
        "the seed policies have no pressure response, as in QEMU; a controller thread beside \
         the workers delivers the signal and waits for it, and worker 0 reads the tidepool \
         pool's statistics from the stacks it gets (at most every 0.5 ms, only while waiting)"
            .to_owned(),
    );
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
             critical pressure is signalled at 1.2 periods ({}) and awaited (at most {:?}); the run \
             ends {window:?} after it arrived.",
            delivery.label(),
            pressure_source::PATIENCE
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
            Column::new("psi_ms", "PSI fired after", Format::Millis),
            Column::new("pool_ms", "pool signalled after", Format::Millis),
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
    pressure_source::worker(plan, phased_worker(plan))
}

fn metrics(out: &RunOutput, plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let s = &out.series;
    // Delivery (the signal phase began) and arrival (the phase after it
    // began: within a sample of the signal reaching the pool, or the
    // reclaimer for the seed policies).
    let (Some(start), Some(signal)) = (
        out.phase_starts.get(SIGNAL_PHASE).copied().flatten(),
        out.phase_starts.get(SIGNAL_PHASE + 1).copied().flatten(),
    ) else {
        return m;
    };
    let window = plan.phases[SIGNAL_PHASE + 1].min.as_secs_f64() * 1e3;
    let before = out.index_at(start - 1.0);
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
        out.rate_between(start - window, start),
    );
    m.insert("rate_waiting".into(), out.rate_between(start, signal));
    m.insert(
        "rate_after".into(),
        out.rate_between(signal, signal + window),
    );
    m.insert("wait_ms".into(), signal - start);
    m
}

/// Per-run metrics from a record: `psi_ms` (delivery to the armed trigger
/// firing) and `pool_ms` (delivery to the pool's `pressure_critical` going
/// up), 0 where there is none; `signal_real`, `signal_timeout`: 1 or 0.
fn record_metrics(rec: &SignalRecord) -> [(&'static str, f64); 4] {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    [
        ("psi_ms", rec.after_delivery(rec.psi_ms).unwrap_or(0.0)),
        ("pool_ms", rec.after_delivery(rec.pool_ms).unwrap_or(0.0)),
        ("signal_real", flag(rec.source == Some(REAL_LABEL))),
        ("signal_timeout", flag(rec.timed_out)),
    ]
}

/// One run's signal, in words.
fn describe(rec: &SignalRecord, delivery: &Delivery, overrun: Option<f64>) -> String {
    let mut parts = Vec::new();
    match (rec.source, &rec.refused) {
        (_, Some(why)) => parts.push(format!("no signal: the real source was refused: {why}")),
        (Some(src), None) => parts.push(src.to_owned()),
        (None, None) => parts.push("no signal delivered (the run ended first)".to_owned()),
    }
    if let Some(why) = &rec.fallback {
        if !matches!(delivery, Delivery::Manual { fallback: Some(_) }) {
            parts.push(format!("fallback: {why}"));
        }
    }
    if let Some(t) = rec.delivered_ms {
        let what = if rec.source == Some(REAL_LABEL) {
            "thrash started"
        } else {
            "notify called"
        };
        parts.push(format!("{what} at {t:.0} ms of the run"));
    }
    if let Some(d) = rec.after_delivery(rec.psi_ms) {
        parts.push(format!("PSI trigger fired {d:.0} ms later"));
    }
    if rec.pooled {
        match rec.after_delivery(rec.pool_ms) {
            Some(d) => parts.push(format!(
                "the pool's Stats::pressure_critical rose {d:.1} ms after delivery"
            )),
            None => parts.push("the pool's Stats::pressure_critical did not rise".to_owned()),
        }
    } else {
        parts.push("no pressure response (the policy has none)".to_owned());
    }
    if rec.timed_out {
        parts.push(format!(
            "no signal within {:?}: gave up waiting",
            pressure_source::PATIENCE
        ));
    }
    if !rec.first_fired.is_empty() {
        parts.push(format!("first to fire: {}", rec.first_fired.join(", ")));
    }
    let later: Vec<&str> = rec
        .fired
        .iter()
        .filter(|f| !rec.first_fired.contains(f))
        .map(String::as_str)
        .collect();
    if !later.is_empty() {
        parts.push(format!("then: {}", later.join(", ")));
    }
    if let Some(end) = overrun {
        parts.push(format!(
            "the window after the signal ended at {end:.0} ms, past 2 periods: a periodic \
             resize may fall inside it"
        ));
    }
    if rec.critical_before > 0 {
        parts.push(format!(
            "{} critical signal(s) reached the pool earlier in the run, from elsewhere",
            rec.critical_before
        ));
    }
    if rec.medium_during > 0 {
        parts.push(format!(
            "{} medium signal(s) reached the pool while waiting",
            rec.medium_during
        ));
    }
    if let Some(p) = &rec.load_problem {
        parts.push(format!("load: {p}"));
    }
    parts.join(", ")
}

/// Adds each run's signal to the report: per-repeat and median metrics,
/// and a note per policy saying which source delivered it in each run.
/// `(two_periods, window)`, ms: a run whose window after the signal ended
/// past two periods may have had a periodic resize inside it.
fn annotate(
    report: &mut ScenarioReport,
    delivery: &Delivery,
    records: Vec<SignalRecord>,
    (two_periods, window): (f64, f64),
) {
    let mut notes = Vec::new();
    for r in &mut report.results {
        let recs: Vec<&SignalRecord> = records
            .iter()
            .filter(|rec| rec.policy == Some(r.policy))
            .collect();
        if recs.len() != r.repeats.len() {
            notes.push(format!(
                "{}: {} signal record(s) for {} run(s): per-run signal metrics left out",
                r.policy,
                recs.len(),
                r.repeats.len()
            ));
            continue;
        }
        for (repeat, rec) in r.repeats.iter_mut().zip(&recs) {
            for (k, v) in record_metrics(rec) {
                repeat.insert(k.to_owned(), v);
            }
        }
        for (k, _) in record_metrics(&SignalRecord::default()) {
            let values: Vec<f64> = r.repeats.iter().filter_map(|m| m.get(k).copied()).collect();
            r.metrics.insert(k.to_owned(), median(&values));
        }
        let runs: Vec<String> = recs
            .iter()
            .enumerate()
            .map(|(i, rec)| {
                let overrun = rec
                    .released_ms
                    .map(|t| t + window)
                    .filter(|&end| end > two_periods);
                format!("run {}: {}", i + 1, describe(rec, delivery, overrun))
            })
            .collect();
        notes.push(format!(
            "signal, {} ({}/{} run(s) real PSI): {}",
            r.policy,
            recs.iter()
                .filter(|rec| rec.source == Some(REAL_LABEL))
                .count(),
            recs.len(),
            runs.join("; ")
        ));
        if matches!(delivery, Delivery::Real { strict: true, .. }) {
            for (i, rec) in recs.iter().enumerate() {
                if let Some(why) = &rec.refused {
                    notes.push(format!(
                        "{REFUSED} --pressure-source real: {} run {}: {why}",
                        r.policy,
                        i + 1
                    ));
                }
            }
        }
    }
    report.notes.extend(notes);
}
