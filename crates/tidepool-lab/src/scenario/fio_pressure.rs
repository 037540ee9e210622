//! `fio-pressure` (seeds 003 and 001): fio's load, with a critical
//! memory-pressure signal injected mid-run.
//!
//! Seed 003 (Xen blkback) shrinks idle page pools hard for a short window
//! under memory pressure, "with no I/O cost". Here the fio workload of
//! [`super::fio`] (same threads, depth, stacks and touch) runs at full
//! speed; after a steady stretch the controller thread of the `pressure`
//! scenario (`pressure::signal`) calls
//! `tidepool::pressure::notify(Level::Critical)` and waits until tidepool's
//! pool has it (at once for the seed policies, which ignore pressure as the
//! seeds do: every policy gets the same event at the same point of its run).
//! Then the *pressure window*, a fixed stretch of two reclaim intervals,
//! and an equal stretch after it.
//!
//! Two things are measured per run, from the same samples:
//!
//! * throughput in the pressure window over the policy's own steady state
//!   (the two windows before the signal);
//! * the resident memory of idle stacks: `mincore` over every slab of the
//!   tidepool pool (`StackPool::resident_bytes`), less the live requests'
//!   share (each request leaves the same pages resident on its stack,
//!   measured once with `mincore` on a throwaway pool's stack). Its mean
//!   over the steady state against its lowest point in the window. The seed
//!   policies' stacks are single mappings held in thread-locals the sampler
//!   cannot reach, so theirs is not measured (it cannot fall anyway: they
//!   ignore the signal; their idle stack count is plotted instead).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::policy::PolicyKind;
use crate::report::format::Human;
use crate::report::plot::Metric;
use crate::report::{Claim, Column, Format, PolicyResult, ScenarioReport, Verdict};
use crate::scenario::fio::{FioSize, QEMU_STACK_SIZE};
use crate::scenario::harness::{Load, Phase, Plan, RunOutput};
use crate::scenario::pressure::signal::{self, Recorder};
use crate::scenario::{base_metrics, param, plots, run_spec, Progress, Settings, Spec};
use crate::seeds::quote;
use crate::source::Delivery;
use crate::stack::Touch;

/// The scenario's name.
pub const ID: &str = "fio-pressure";

/// The phase in which the signal is delivered and awaited.
const SIGNAL_PHASE: usize = 2;

/// Throughput in the pressure window over the steady state: at least this.
pub const WINDOW_RATIO_TARGET: f64 = 0.8;
/// The idle stacks' resident memory falls by at least this share.
pub const RESIDENT_DROP_TARGET: f64 = 0.9;

/// The period here: long enough that no interval pass reclaims the burst's
/// stacks before the pressure window is over (a pass destroys what sat idle
/// through two intervals), as in the `pressure` scenario.
fn interval(settings: &Settings) -> Duration {
    let floor = if settings.quick {
        super::pressure::MIN_INTERVAL_QUICK
    } else {
        super::pressure::MIN_INTERVAL
    };
    settings.interval().max(floor)
}

/// Runs the scenario: the `pressure` scenario's manual signal, on fio's
/// load.
pub(crate) fn run(settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
    let recorder = Recorder::new(Delivery::Manual { fallback: None });
    let mut spec = spec(settings);
    spec.make_worker = recorder.make_worker();
    let mut report = run_spec(&spec, settings, progress);
    let said = ratio_notes(&report.results);
    report.notes.extend(said);
    // What the controller saw, run by run: a signal that never reached the
    // pool is a run that measured nothing.
    for rec in recorder.take_records() {
        if rec.timed_out {
            report.notes.push(format!(
                "{}: the signal did not reach the pool within {} in one run",
                rec.policy.map_or("?".to_owned(), |p| p.to_string()),
                Human(signal::PATIENCE)
            ));
        }
    }
    report
}

/// The run metric set (to 1) where nothing completed in the trimmed steady
/// window and the steady rates are the whole fio load phase's.
pub const WHOLE_PHASE: &str = "steady_whole_phase";

/// The note for a policy none of whose runs completed a request in the fio
/// load before the signal (so it has no window ratio).
pub fn no_ratio_note(policy: PolicyKind) -> String {
    format!(
        "{policy}: no request completed in the fio load before the signal in any run \
         (likely a stall of the machine), so no window ratio"
    )
}

/// The note for a policy's run whose steady rates are the whole fio load
/// phase's ([`WHOLE_PHASE`]).
pub fn whole_phase_note(policy: PolicyKind, run: usize) -> String {
    format!(
        "{policy}, run {}: nothing completed in the last four fifths of the fio load \
         (likely a stall of the machine), so its steady rates are the whole phase's, \
         burst tail included",
        run + 1
    )
}

/// What the report says of the runs' steady rates: which were taken over the
/// whole phase, which policies have no window ratio.
pub(crate) fn ratio_notes(results: &[PolicyResult]) -> Vec<String> {
    let mut notes = Vec::new();
    for r in results {
        for (i, run) in r.runs.iter().enumerate() {
            if run.metrics.contains_key(WHOLE_PHASE) {
                notes.push(whole_phase_note(r.policy, i));
            }
        }
        if !r.metrics.contains_key("window_ratio") {
            notes.push(no_ratio_note(r.policy));
        }
    }
    notes
}

pub(crate) fn spec(settings: &Settings) -> Spec<'static> {
    let size = FioSize::new(settings.quick);
    let period = interval(settings);
    let (burst_time, steady, w) = (period.mul_f64(0.2), period / 2, period / 2);
    let rounds = Load::Rounds { depth: size.depth };
    let burst = Load::Rounds {
        depth: size.depth * 2,
    };
    // The last thread is the controller.
    let loads_of = |load: Load, signal_phase: bool| {
        let mut v = vec![load; size.jobs];
        v.push(signal::controller_load(signal_phase));
        v
    };
    let loads = |signal_phase: bool| loads_of(rounds, signal_phase);
    let phases = vec![
        Phase {
            name: "burst: twice the depth".to_owned(),
            min: burst_time,
            loads: loads_of(burst, false),
        },
        Phase {
            name: "fio load".to_owned(),
            min: steady,
            loads: loads(false),
        },
        Phase {
            name: "notify(Critical), until the pool has it".to_owned(),
            min: Duration::ZERO,
            loads: loads(true),
        },
        Phase {
            name: "pressure window".to_owned(),
            min: w,
            loads: loads(false),
        },
        Phase {
            name: "after".to_owned(),
            min: period.mul_f64(0.3),
            loads: loads(false),
        },
    ];
    debug_assert_eq!(signal::signal_phase(&phases), Some(SIGNAL_PHASE));
    let plan = Plan {
        phases,
        sample_every: Duration::from_millis(5),
        abort_on_failure: false,
        touch: Touch::Large,
    };
    let mut env = settings.env(QEMU_STACK_SIZE, period);
    env.resident_touch = Some(plan.touch);
    // Measured here: what the signal frees. The idle-page decay would have
    // released the burst's pages before it (spike-then-idle shows that).
    env.idle_decay = false;
    let mut params = BTreeMap::new();
    param(&mut params, "jobs (submitting threads)", size.jobs);
    param(&mut params, "iodepth per job", size.depth);
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    param(&mut params, "stack touched per request", "16 KiB");
    param(
        &mut params,
        "burst first",
        format!(
            "{} requests in flight per job for {}",
            size.depth * 2,
            Human(burst_time)
        ),
    );
    param(&mut params, "fio load before the signal", Human(steady));
    param(&mut params, "period (reclaim interval here)", Human(period));
    param(&mut params, "pressure window (and after it)", Human(w));
    param(
        &mut params,
        "signal",
        "tidepool::pressure::notify(Level::Critical)",
    );
    param(
        &mut params,
        "tidepool idle-page decay",
        "off (purge_delay = Duration::MAX), so that the signal's effect is measured alone; \
         spike-then-idle measures the decay",
    );
    param(
        &mut params,
        "tidepool pressure hold",
        format!(
            "the library default: none for a single signal (as here), {} while critical \
             signals keep coming",
            Human(env.pressure_hold)
        ),
    );
    let notes = vec![
        format!(
            "throughput: requests completed in the pressure window (the {} after the signal \
             reached the pool) per second, over the same in the last {} of the fio load before \
             the signal was sent (its first fifth is left out: the burst's requests end then; \
             a run in which nothing completed there measures the whole phase, and says so); \
             the plot's throughput is a moving window of about 20 ms. The machine is shared: \
             wall-clock rates move with other processes' load, so requests per CPU-second of \
             the process (all threads) and page faults per request are given beside",
            Human(w),
            Human(steady.mul_f64(0.8))
        ),
        "idle resident memory (tidepool): mincore over every slab of the pool \
         (StackPool::resident_bytes: stacks in use, idle and free slots), less the live \
         requests' share: live requests × the bytes one request leaves resident on its stack \
         (measured once per policy build with mincore on a stack of a throwaway pool), \
         sampled every 5 ms. The drop compares floors: the lowest sample in the window with \
         the lowest in the steady state, i.e. idle memory that no request used at any moment \
         (idle stacks between two rounds are taken again within microseconds; the means, \
         which count them, are in the table too). Not \
         measured for the seed policies: their stacks are separate mappings held in \
         thread-locals the sampler cannot reach, and they ignore the signal"
            .to_owned(),
        "the seed policies have no pressure response, as in QEMU; they get the same \
         notify call at the same point of their run (it reaches no pool of theirs)"
            .to_owned(),
    ];
    Spec {
        id: ID,
        title: "fio-pressure: fio with a critical memory-pressure signal mid-run",
        seeds: &["003"],
        finding: "Seed 003 (Xen blkback): under memory pressure, shrink the idle pools \
                  aggressively for a short window; the memory comes back to the system with no \
                  visible I/O cost. Target here: tidepool's throughput in the pressure window \
                  ≥ 0.8× its steady state while its idle stacks' resident memory falls ≥ 90 %."
            .to_owned(),
        quotes: vec![quote::XEN_MECHANISM, quote::XEN_NO_COST],
        workload: format!(
            "fio's load ({} threads × {} requests in flight, 16 KiB touched on 1 MiB stacks), \
             after a burst at twice the depth for {} (so the pools hold idle stacks beyond the \
             working set), for {}; then notify(Critical) and the wait for it, {} of pressure \
             window and {} after it, the load unchanged.",
            size.jobs,
            size.depth,
            Human(burst_time),
            Human(steady),
            Human(w),
            Human(period.mul_f64(0.3))
        ),
        params,
        columns: vec![
            Column::new("rate_steady", "req/s steady", Format::KiloPerSec).terminal("req/s st."),
            Column::new("rate_window", "req/s pressure window", Format::KiloPerSec)
                .terminal("req/s win."),
            Column::new("window_ratio", "window / steady", Format::Ratio).terminal("win/st"),
            Column::new("cpu_ratio", "window / steady per CPU-s", Format::Ratio)
                .terminal("per CPU"),
            Column::new(
                "idle_resident_steady",
                "idle resident floor, steady",
                Format::MiB,
            )
            .terminal("idle st."),
            Column::new(
                "idle_resident_low",
                "idle resident floor, window",
                Format::MiB,
            )
            .terminal("idle win."),
            Column::new(
                "resident_drop",
                "idle resident drop (floors)",
                Format::Percent,
            )
            .terminal("drop"),
            Column::new(
                "idle_resident_steady_mean",
                "idle resident mean, steady",
                Format::MiB,
            ),
            Column::new(
                "idle_resident_window",
                "idle resident mean, window",
                Format::MiB,
            ),
            Column::new(
                "resident_drop_mean",
                "idle resident drop (means)",
                Format::Percent,
            ),
            Column::new("created_window", "created in window", Format::Count),
            Column::new(
                "faults_per_req_steady",
                "page faults / req steady",
                Format::Ratio,
            ),
            Column::new(
                "faults_per_req_window",
                "page faults / req window",
                Format::Ratio,
            ),
        ],
        // Throughput and idle resident memory first: the two the pressure
        // window is judged by.
        plots: plots::over_run(&[
            Metric::Throughput,
            Metric::IdleResident,
            Metric::Idle,
            Metric::Rss,
        ]),
        headline: "window_ratio",
        env,
        plan,
        warmup: Some(Plan::warm_up(size.warmup, vec![rounds; size.jobs])),
        make_worker: crate::scenario::phased(),
        metrics,
        notes,
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn metrics(out: &RunOutput, plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let (Some(sent), Some(arrived)) = (
        out.phase_starts.get(SIGNAL_PHASE).copied().flatten(),
        out.phase_starts.get(SIGNAL_PHASE + 1).copied().flatten(),
    ) else {
        return m;
    };
    let w = plan.phases[SIGNAL_PHASE + 1].min.as_secs_f64() * 1e3;
    // The steady state: the fio load's phase less its first fifth (the
    // burst's requests are still completing then).
    let from = sent - 0.8 * plan.phases[SIGNAL_PHASE - 1].min.as_secs_f64() * 1e3;
    let mut steady = out.rate_between(from, sent);
    // The span the steady rates (requests, faults, CPU) are taken over.
    let mut steady_from = from;
    if steady <= 0.0 {
        // Nothing completed in it (a stall of the machine longer than the
        // window, as a loaded VM can give a short quick run): the whole
        // phase, burst tail and all, rather than no steady rate at all,
        // marked so that the report says which runs these are.
        if let Some(start) = out.phase_starts.get(SIGNAL_PHASE - 1).copied().flatten() {
            steady = out.rate_between(start, sent);
            steady_from = start;
            m.insert(WHOLE_PHASE.into(), 1.0);
        }
    }
    let window = out.rate_between(arrived, arrived + w);
    m.insert("rate_steady".into(), steady);
    m.insert("rate_window".into(), window);
    if steady > 0.0 {
        m.insert("window_ratio".into(), window / steady);
    }
    m.insert("signal_wait_ms".into(), arrived - sent);
    // The same windows per CPU-second of the process: what the reaction
    // costs in work, which the other load on a shared machine moves less
    // than it moves wall-clock rates.
    let per_cpu = |from: f64, to: f64| -> Option<f64> {
        let (a, b) = (out.index_at(from)?, out.index_at(to)?);
        let cpu = out.series.cpu_ms.get(b)? - out.series.cpu_ms.get(a)?;
        let done = out
            .completed_series
            .get(b)?
            .checked_sub(*out.completed_series.get(a)?)?;
        (cpu > 0.0).then(|| done as f64 / (cpu / 1e3))
    };
    // Page faults per request: the work a purge or a fresh stack adds (each
    // first touch of a released page is one), whatever the machine's load.
    let faults = |from: f64, to: f64| -> Option<f64> {
        let (a, b) = (out.index_at(from)?, out.index_at(to)?);
        let f = out.series.minor_faults.get(b)? - out.series.minor_faults.get(a)?;
        let done = out
            .completed_series
            .get(b)?
            .checked_sub(*out.completed_series.get(a)?)?;
        (done > 0).then(|| f as f64 / done as f64)
    };
    if let (Some(st), Some(win)) = (faults(steady_from, sent), faults(arrived, arrived + w)) {
        m.insert("faults_per_req_steady".into(), st);
        m.insert("faults_per_req_window".into(), win);
    }
    if let (Some(st), Some(win)) = (per_cpu(steady_from, sent), per_cpu(arrived, arrived + w)) {
        m.insert("per_cpu_steady".into(), st);
        m.insert("per_cpu_window".into(), win);
        m.insert("cpu_ratio".into(), win / st);
    }
    let s = &out.series;
    if let (Some(b), Some(e)) = (out.index_at(sent), out.index_at(arrived + w)) {
        m.insert(
            "created_window".into(),
            s.created[e].saturating_sub(s.created[b]) as f64,
        );
    }
    let res = &s.idle_resident_kib;
    if res.len() == s.t_ms.len() {
        let bytes = |r: std::ops::Range<usize>| -> Vec<f64> {
            res[r].iter().map(|kib| kib * 1024.0).collect()
        };
        // Over the trimmed window even after a stall: memory is sampled
        // whether or not requests complete, and the burst's tail would
        // lower the floor before.
        let before = bytes(out.range(from, sent));
        let during = bytes(out.range(arrived, arrived + w));
        // Floors: the idle memory no request used at any moment of the
        // window (what seed 003 gives back). The mean also counts the
        // stacks between two rounds, which the load takes again within
        // microseconds; it is reported beside.
        let floor = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        if let (Some(st), Some(mid)) = (mean(&before), mean(&during)) {
            let (low_before, low) = (floor(&before), floor(&during));
            m.insert("idle_resident_steady".into(), low_before);
            m.insert("idle_resident_low".into(), low);
            m.insert("idle_resident_steady_mean".into(), st);
            m.insert("idle_resident_window".into(), mid);
            if low_before > 0.0 {
                m.insert("resident_drop".into(), 1.0 - low / low_before);
            }
            if st > 0.0 {
                m.insert("resident_drop_mean".into(), 1.0 - mid / st);
            }
        }
    }
    m
}

/// What this scenario says about seed 003, for tidepool.
pub(crate) fn claims(s: &ScenarioReport) -> Vec<Claim> {
    let Some(t) = s.result(PolicyKind::Tidepool) else {
        return Vec::new();
    };
    // Runs whose steady rate took in the burst's tail say nothing of the
    // window against the steady state: the claim is on the others.
    let ratios: Vec<f64> = t
        .runs
        .iter()
        .filter(|r| !r.metrics.contains_key(WHOLE_PHASE))
        .filter_map(|r| r.metrics.get("window_ratio").copied())
        .filter(|v| v.is_finite())
        .collect();
    let ratio = (!ratios.is_empty()).then(|| crate::report::median(&ratios));
    let drop = t.metrics.get("resident_drop").copied();
    let each = t
        .runs
        .iter()
        .map(|r| {
            let get = |k: &str| r.metrics.get(k).copied().unwrap_or(f64::NAN);
            format!(
                "{:.2}× (per CPU-s {:.2}×) / {:.0} %",
                get("window_ratio"),
                get("cpu_ratio"),
                get("resident_drop") * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (measured, verdict) = match (ratio, drop) {
        (Some(r), Some(d)) => (
            format!("{r:.2}×, −{:.0} %", d * 100.0),
            Verdict::of(r >= WINDOW_RATIO_TARGET && d >= RESIDENT_DROP_TARGET),
        ),
        _ => ("–".to_owned(), Verdict::Unmeasured),
    };
    vec![Claim {
        seed: "003".to_owned(),
        scenario: s.id.clone(),
        claim: "pressure frees idle RAM, fio keeps its rate".to_owned(),
        published: "no I/O cost".to_owned(),
        published_detail: "Xen blkback: aggressive shrinking under pressure, \"no visible I/O \
                           cost\" (seed 003)"
            .to_owned(),
        measured,
        measured_detail: format!(
            "tidepool, median of runs: req/s in the pressure window / steady, and the fall of \
             its idle stacks' resident memory (floor in the steady state → floor in the window); \
             each run (NaN: too few samples in a window on the loaded machine): {each}. \
             Wall-clock rates swing with the shared machine's load: compare the seed policies' \
             own window / steady in the table, which ignore the signal"
        ),
        rule: format!(
            "≥ {WINDOW_RATIO_TARGET:.1}× and ≥ {:.0} %",
            RESIDENT_DROP_TARGET * 100.0
        ),
        verdict,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::harness::output_of;

    /// Samples at the plan's step through its phases, `per_sample` giving
    /// the requests completed in the step ending at each time.
    fn run_of(plan: &Plan, per_sample: impl Fn(f64) -> u64) -> RunOutput {
        let mut starts = vec![Some(0.0)];
        let mut t = 0.0;
        for phase in &plan.phases[..plan.phases.len() - 1] {
            t += phase.min.as_secs_f64() * 1e3;
            starts.push(Some(t));
        }
        let end = t + plan.phases.last().unwrap().min.as_secs_f64() * 1e3;
        let step = plan.sample_every.as_secs_f64() * 1e3;
        let times: Vec<f64> = (0..=(end / step) as usize)
            .map(|i| i as f64 * step)
            .collect();
        let done: Vec<u64> = times
            .iter()
            .scan(0, |n, &t| {
                *n += per_sample(t);
                Some(*n)
            })
            .collect();
        let mut out = output_of(&times, &done);
        out.series.created = vec![0; times.len()];
        out.phase_starts = starts;
        out
    }

    #[test]
    fn a_stall_through_the_steady_window_measures_the_whole_load_phase() {
        let plan = spec(&Settings::new(true)).plan;
        let step = plan.sample_every.as_secs_f64() * 1e3;
        let ms = |i: usize| plan.phases[i].min.as_secs_f64() * 1e3;
        let (load_start, load) = (ms(0), ms(SIGNAL_PHASE - 1));
        let sent = load_start + load;
        let from = sent - 0.8 * load;
        // Requests complete steadily from the start: the last four fifths
        // of the load are measured, at 10 per sample, not the burst's 30.
        let m = metrics(
            &run_of(&plan, |t| if t <= load_start { 30 } else { 10 }),
            &plan,
        );
        assert_eq!(m["rate_steady"], 10.0 / (step / 1e3), "{m:?}");
        assert!(!m.contains_key(WHOLE_PHASE), "{m:?}");
        // Through the burst, then in the load phase's first tenth only (the
        // measured window leaves out its first fifth), then nothing until
        // the signal, then steadily: the whole load phase, marked.
        let m = metrics(
            &run_of(&plan, |t| {
                let early = t > load_start && t <= load_start + 0.1 * load;
                u64::from(t <= load_start || early || t > sent) * 10
            }),
            &plan,
        );
        let early_samples =
            ((load_start + 0.1 * load) / step).floor() - (load_start / step).floor();
        assert!(from > load_start + 0.1 * load);
        assert_eq!(
            m["rate_steady"],
            early_samples * 10.0 / (load / 1e3),
            "{m:?}"
        );
        assert_eq!(m[WHOLE_PHASE], 1.0);
        assert!(m["window_ratio"].is_finite(), "{m:?}");
        // Nothing at all before the signal: no ratio, not a division by 0.
        let m = metrics(&run_of(&plan, |t| u64::from(t > sent) * 10), &plan);
        assert_eq!(m["rate_steady"], 0.0);
        assert!(!m.contains_key("window_ratio"), "{m:?}");
    }

    #[test]
    fn runs_measured_over_the_whole_phase_and_policies_with_no_ratio_are_named() {
        use crate::report::RunRecord;
        use crate::scenario::summarize;
        let run = |pairs: &[(&str, f64)]| RunRecord {
            metrics: pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
            series: Default::default(),
            first_failure: None,
            pressure: Default::default(),
        };
        let results = vec![
            summarize(
                PolicyKind::Tidepool,
                vec![run(&[("window_ratio", 0.9)]), run(&[("window_ratio", 1.0)])],
                "window_ratio",
            ),
            summarize(
                PolicyKind::None,
                vec![
                    run(&[("window_ratio", 1.2), (WHOLE_PHASE, 1.0)]),
                    run(&[("rate_steady", 0.0)]),
                ],
                "window_ratio",
            ),
            summarize(
                PolicyKind::Qemu2024,
                vec![run(&[("rate_steady", 0.0)])],
                "window_ratio",
            ),
        ];
        assert_eq!(
            ratio_notes(&results),
            vec![
                whole_phase_note(PolicyKind::None, 0),
                no_ratio_note(PolicyKind::Qemu2024),
            ]
        );
    }
}
