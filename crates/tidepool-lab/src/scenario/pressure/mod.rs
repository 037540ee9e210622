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
//! `tidepool::pressure::notify(Level::Critical)` (see [`crate::source`]).
//! Either way it starts at the same moment of every policy's run, the run
//! waits (at most 15 s) until it has arrived, and the report says which
//! source delivered it in each run. Only tidepool listens. This is the one
//! scenario in which the lab's gate lets machine-wide pressure through to
//! the pools ([`crate::source::psi`]): from the moment the signal is
//! delivered to the end of the run, so that the state before it is not
//! disturbed by whatever else the machine does.
//!
//! # Timeline
//!
//! With period `I`: a burst for `0.2 I`, a steady load for one window `W`,
//! then the signal, the wait for it, and one more window `W`; all of it
//! before `2 I`, when QEMU 2021's periodic resize would free the burst by
//! itself (and tidepool's own reclaim would destroy what sat idle two
//! intervals). `I` is at least [`MIN_INTERVAL`] (manual) or
//! [`MIN_INTERVAL_REAL`] (real: the PSI trigger fires 1-3 s after the
//! thrash starts, [`REAL_WAIT_BUDGET`]).

pub(crate) mod signal;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::policy::PolicyKind;
use crate::report::format::{self, change, Human};
use crate::report::summary::times;
use crate::report::{median, Claim, Column, Format, ScenarioReport, Verdict};
use crate::scenario::fio::QEMU_STACK_SIZE;
use crate::scenario::harness::{Load, Phase, Plan, RunOutput};
use crate::scenario::{base_metrics, param, plots, run_spec, Progress, Settings, Spec};
use crate::seeds::{published, quote};
use crate::source::{self, Delivery, MANUAL_LABEL, REAL_LABEL};
use crate::stack::Touch;

pub use signal::{SignalRecord, PATIENCE};

/// Notes that start with this mark a `--pressure-source real` that could not
/// deliver a real signal; [`refusals`] finds them.
pub const REFUSED: &str = "pressure source refused:";

/// The shortest period used here (manual source), so that the windows
/// around the signal are long enough to measure throughput in and no
/// periodic resize falls inside them.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1000);
/// In quick runs.
pub const MIN_INTERVAL_QUICK: Duration = Duration::from_millis(300);
/// With the real source, quick or not: the signal, the wait for it and the
/// window after it must end before QEMU 2021's resize at 2 periods.
pub const MIN_INTERVAL_REAL: Duration = Duration::from_secs(3);
/// The wait for a real signal that [`MIN_INTERVAL_REAL`] leaves room for
/// (longer waits are recorded, and flagged when the window after the
/// signal reaches past 2 periods).
pub const REAL_WAIT_BUDGET: Duration = Duration::from_secs(3);

/// The phase in which the signal is delivered and awaited.
const SIGNAL_PHASE: usize = 2;

/// Runs the scenario with the pressure source `settings` chose, and adds
/// what each run's signal did to the report.
pub(crate) fn run(settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
    let delivery = match source::prepare(settings.pressure_source) {
        Ok(d) => d,
        Err(why) => return refused_report(settings, &why),
    };
    let recorder = signal::Recorder::new(delivery.clone());
    let mut spec = spec(settings, &delivery);
    spec.make_worker = recorder.make_worker();
    let mut report = run_spec(&spec, settings, progress);
    let t = timing(settings, delivery.is_real());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    annotate(
        &mut report,
        &delivery,
        recorder.take_records(),
        (ms(t.interval * 2), ms(t.window)),
    );
    report
}

/// `--pressure-source real` was refused: the scenario is not run.
fn refused_report(settings: &Settings, why: &str) -> ScenarioReport {
    let spec = spec(settings, &Delivery::Manual { fallback: None });
    ScenarioReport {
        id: spec.id.to_owned(),
        title: spec.title.to_owned(),
        seeds: spec.seeds.iter().map(|s| (*s).to_owned()).collect(),
        finding: spec.finding,
        quotes: spec.quotes.iter().map(|q| q.to_quote()).collect(),
        workload: spec.workload,
        params: spec.params,
        reclaim_interval_ms: spec.env.reclaim_interval.as_secs_f64() * 1e3,
        columns: spec.columns,
        phases: spec.plan.phases.iter().map(|p| p.name.clone()).collect(),
        results: Vec::new(),
        claims: Vec::new(),
        plots: spec.plots,
        notes: vec![format!(
            "{REFUSED} --pressure-source real, but the kernel refused a step of the real \
             source ({REAL_LABEL}): {why}; the scenario was not run"
        )],
    }
}

/// The notes of every scenario that say a `--pressure-source real` could
/// not deliver a real signal.
pub fn refusals(scenarios: &[ScenarioReport]) -> Vec<&str> {
    scenarios
        .iter()
        .flat_map(|s| s.notes.iter())
        .filter(|n| n.starts_with(REFUSED))
        .map(String::as_str)
        .collect()
}

/// A run's timeline (see the module docs).
#[derive(Clone, Copy, Debug)]
struct Timing {
    interval: Duration,
    burst: Duration,
    /// The windows before delivery and after arrival in which rates are
    /// measured.
    window: Duration,
}

fn timing(settings: &Settings, real: bool) -> Timing {
    let floor = if real {
        MIN_INTERVAL_REAL
    } else if settings.quick {
        MIN_INTERVAL_QUICK
    } else {
        MIN_INTERVAL
    };
    let interval = settings.interval().max(floor);
    let burst = interval.mul_f64(0.2);
    let window = if real {
        // burst + W + wait + W ≤ 2 I, with a tenth to spare.
        let room = (interval * 2).saturating_sub(burst + REAL_WAIT_BUDGET);
        room.mul_f64(0.45).min(interval.mul_f64(0.6))
    } else {
        interval.mul_f64(0.6)
    };
    Timing {
        interval,
        burst,
        window,
    }
}

pub(crate) fn spec(settings: &Settings, delivery: &Delivery) -> Spec<'static> {
    let real = delivery.is_real();
    let Timing {
        interval,
        burst: burst_time,
        window,
    } = timing(settings, real);
    let threads = if settings.quick { 2 } else { 4 };
    let (steady, burst) = (16, 256);
    // The last thread is the controller (see `signal::worker`).
    let loads = |load: Load, signal: bool| {
        let mut v = vec![load; threads];
        v.push(signal::controller_load(signal));
        v
    };
    let (signal_name, after_name) = if real {
        (
            "pressure on: page-cache thrash starts",
            "pressure off: PSI fired, thrash stopped",
        )
    } else {
        (
            "pressure on: notify(Critical)",
            "pressure off: signal arrived",
        )
    };
    let phases = vec![
        Phase {
            name: "burst".to_owned(),
            min: burst_time,
            loads: loads(Load::Rounds { depth: burst }, false),
        },
        Phase {
            name: "steady".to_owned(),
            min: window,
            loads: loads(Load::Rounds { depth: steady }, false),
        },
        Phase {
            name: signal_name.to_owned(),
            min: Duration::ZERO,
            loads: loads(Load::Rounds { depth: steady }, true),
        },
        Phase {
            name: after_name.to_owned(),
            min: window,
            loads: loads(Load::Rounds { depth: steady }, false),
        },
    ];
    debug_assert_eq!(signal::signal_phase(&phases), Some(SIGNAL_PHASE));
    let plan = Plan {
        phases,
        sample_every: (interval / 100).clamp(Duration::from_millis(5), Duration::from_millis(20)),
        abort_on_failure: false,
        touch: Touch::Large,
    };
    let signal_at = Human(burst_time + window);
    let (burst_h, window_h) = (Human(burst_time), Human(window));
    let mut params = BTreeMap::new();
    param(&mut params, "threads", threads);
    param(&mut params, "burst: requests in flight per thread", burst);
    param(&mut params, "steady: requests in flight per thread", steady);
    param(
        &mut params,
        "signal",
        format!("Level::Critical at {signal_at}"),
    );
    param(
        &mut params,
        "window before delivery / after arrival",
        window_h.to_string(),
    );
    param(&mut params, "pressure source", delivery.label());
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    let mut notes = vec![match delivery {
        Delivery::Real { trigger, .. } => format!(
            "pressure source: {REAL_LABEL}: at {signal_at} into the run, a shell in a new child \
             of this process's cgroup v1 memory cgroup, limited to 64 MiB, writes a 300 MB file \
             and reads it back three times, in a loop (page-cache thrash), the same for every \
             policy, until the PSI trigger {trigger} (Level::Critical, armed once for the lab \
             run) fires (and, for tidepool, the pool's Stats::pressure_critical has gone up; \
             tidepool's default sources, also open here, may bring it first). The thrash is then \
             killed; a run waits at most {}. Periods are at least {} here, so that a wait of up \
             to {} and the {window_h} after it end before QEMU 2021's resize at 2 periods (runs \
             that overran are flagged). A thrash starts at least {} after the previous one ended (the \
             kernel signals a trigger at most once per 2 s window). PSI is system-wide: a stall \
             of another process on this machine could fire the trigger too (the sources that \
             fired are listed per run)",
            Human(PATIENCE),
            Human(MIN_INTERVAL_REAL),
            Human(REAL_WAIT_BUDGET),
            Human(source::thrash::GAP)
        ),
        Delivery::Manual { fallback } => {
            let mut n = format!(
                "pressure source: {MANUAL_LABEL}, called at {signal_at} into every policy's \
                 run; the phase ends when tidepool's pool has applied it \
                 (Stats::pressure_critical goes up once its drain is done), at once for the seed policies"
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
    let env = settings.env(QEMU_STACK_SIZE, interval);
    notes.push(format!(
        "tidepool's pressure hold is the library default: none for a single critical signal \
         (as here: the pool drains to min_idle and the load re-creates its working set once); \
         {} ({} per 15 s interval) once critical signals follow each other within an \
         interval, during which the depot is held at min_idle and each thread keeps at most \
         the two batches it caches",
        Human(env.pressure_hold),
        Human(tidepool::Config::default().pressure_hold())
    ));
    if interval > settings.interval() {
        notes.push(format!(
            "periods here are {} for every periodic policy, not {}, so the windows around the \
             signal are long enough to measure and contain no periodic resize",
            Human(interval),
            Human(settings.interval())
        ));
    }
    let ((in_b, in_a), (out_b, out_a)) = published::XEN_SWAP;
    Spec {
        id: "pressure",
        title: "pressure: a critical memory-pressure signal in mid-run",
        seeds: &["003"],
        finding: format!(
            "Seed 003 (Xen blkback): on memory pressure, shrink the idle page pools to zero for a \
             short while; swap traffic under pressure fell from {}/{} pages in/out to {}/{}, and \
             even always shrinking cost no visible I/O throughput.",
            format::count(in_b as f64),
            format::count(out_b as f64),
            format::count(in_a as f64),
            format::count(out_a as f64)
        ),
        quotes: vec![quote::XEN_MECHANISM, quote::XEN_NO_COST],
        workload: format!(
            "{threads} threads: a burst ({burst} in flight each) for {burst_h}, then {steady} \
             each; critical pressure is signalled at {signal_at} ({}) and awaited (at most {}); \
             the run ends {window_h} after it arrived.",
            delivery.label(),
            Human(PATIENCE),
        ),
        params,
        columns: vec![
            Column::new("idle_before", "idle before", Format::Count).terminal("idle before"),
            Column::new("idle_after", "idle after", Format::Count).terminal("idle after"),
            Column::new("rss_before", "RSS before", Format::MiB),
            Column::new("rss_after", "RSS after", Format::MiB),
            Column::new("rate_before", "req/s before", Format::KiloPerSec).terminal("req/s bef."),
            Column::new("rate_after", "req/s after", Format::KiloPerSec).terminal("req/s aft."),
            Column::new("created_after", "created after", Format::Count),
            Column::new("psi_ms", "PSI fired after", Format::Millis),
            Column::new("pool_ms", "pool signalled after", Format::Millis),
        ],
        plots: plots::over_run(&plots::STANDARD),
        headline: "idle_after",
        env,
        plan,
        warmup: Some(Plan::warm_up(
            Duration::from_millis(if settings.quick { 20 } else { 100 }),
            vec![Load::Rounds { depth: steady }; threads],
        )),
        make_worker: crate::scenario::phased(),
        metrics,
        notes,
    }
}

/// What the pressure scenario says about seed 003.
pub(crate) fn claims(s: &ScenarioReport) -> Vec<Claim> {
    let ((_, _), (out_b, out_a)) = published::XEN_SWAP;
    let swap_fall = 1.0 - out_a as f64 / out_b as f64;
    let (dd_default, dd_worst) = published::XEN_DD_MBPS;
    let tp = s.result(PolicyKind::Tidepool);
    let unmeasured = |c: &mut Claim| {
        c.measured = "–".to_owned();
        c.measured_detail = "tidepool was not run, or its runs had no signal".to_owned();
        c.verdict = Verdict::Unmeasured;
    };
    let mut freed = Claim {
        seed: "003".to_owned(),
        scenario: s.id.clone(),
        claim: "tidepool frees idle memory on pressure".to_owned(),
        published: change(-swap_fall),
        published_detail: format!(
            "swap-out under pressure {} → {} pages: {} (seed 003; Xen's pool shrinks to 0)",
            format::count(out_b as f64),
            format::count(out_a as f64),
            change(-swap_fall)
        ),
        measured: String::new(),
        measured_detail: String::new(),
        rule: "idle stacks fall ≥ 90 %".to_owned(),
        verdict: Verdict::Unmeasured,
    };
    let mut cost = Claim {
        seed: "003".to_owned(),
        scenario: s.id.clone(),
        claim: "…at little throughput cost".to_owned(),
        published: times(dd_worst / dd_default),
        published_detail: format!(
            "dd {dd_default} MB/s with the default pool, {dd_worst} MB/s always shrinking: \
             \"no visible performance degradation\" (seed 003)"
        ),
        measured: String::new(),
        measured_detail: String::new(),
        rule: "req/s after ≥ 0.80× before".to_owned(),
        verdict: Verdict::Unmeasured,
    };
    let (before, after) = tp.map_or((f64::NAN, f64::NAN), |r| {
        (r.metric("idle_before"), r.metric("idle_after"))
    });
    if before.is_finite() && after.is_finite() && before > 0.0 {
        let fall = 1.0 - after / before;
        freed.measured = change(-fall);
        let seeds: Vec<String> = [PolicyKind::Qemu2021, PolicyKind::Qemu2024]
            .into_iter()
            .filter_map(|p| {
                let r = s.result(p)?;
                let (b, a) = (r.metric("idle_before"), r.metric("idle_after"));
                (b > 0.0).then(|| format!("{p} {}", change(a / b - 1.0)))
            })
            .collect();
        freed.measured_detail = format!(
            "tidepool idle stacks {} → {} ({}); seed policies, which do not listen: {}",
            format::count(before),
            format::count(after),
            change(-fall),
            if seeds.is_empty() {
                "not run".to_owned()
            } else {
                seeds.join(", ")
            }
        );
        freed.verdict = Verdict::of(fall >= 0.9);
    } else {
        unmeasured(&mut freed);
    }
    match tp.map(|r| (r.metric("rate_before"), r.metric("rate_after"), r)) {
        Some((b, a, r)) if b.is_finite() && a.is_finite() && b > 0.0 => {
            let per: Vec<f64> = r
                .per_run("rate_after")
                .iter()
                .zip(r.per_run("rate_before"))
                .filter(|(_, y)| *y > 0.0)
                .map(|(x, y)| x / y)
                .collect();
            let lo = per.iter().copied().fold(f64::INFINITY, f64::min);
            cost.measured = times(a / b);
            cost.measured_detail = format!(
                "tidepool req/s in the window after the signal / before it: {} (lowest run {})",
                times(a / b),
                times(lo)
            );
            cost.verdict = Verdict::of(a / b >= 0.8);
        }
        _ => unmeasured(&mut cost),
    }
    vec![freed, cost]
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
/// up: its response done), 0 where there is none; `signal_real`, `signal_timeout`: 1 or 0.
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
            "no signal within {}: gave up waiting",
            Human(PATIENCE)
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
        if recs.len() != r.runs.len() {
            notes.push(format!(
                "{}: {} signal record(s) for {} run(s): per-run signal metrics left out",
                r.policy,
                recs.len(),
                r.runs.len()
            ));
            continue;
        }
        for (run, rec) in r.runs.iter_mut().zip(&recs) {
            for (k, v) in record_metrics(rec) {
                run.metrics.insert(k.to_owned(), v);
            }
        }
        for (k, _) in record_metrics(&SignalRecord::default()) {
            let values: Vec<f64> = r
                .runs
                .iter()
                .filter_map(|run| run.metrics.get(k).copied())
                .collect();
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
