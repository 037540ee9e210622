//! The workloads, one per seed finding, and how each is run for every
//! policy: the same plan, warm-up first, repeats in rotating policy order,
//! medians. The stack-pool scenarios run through [`harness`];
//! [`pressure`] adds a signal to it; [`mass_teardown`] runs its own holder
//! and probe threads (its policies are teardowns, not pools).
//!
//! Each scenario hands the [`report`](crate::report) everything its section
//! shows: the table's columns, the claims about its seed, and the plots to
//! draw (most of them from [`plots`]). The report knows no scenario.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::policy::{PolicyEnv, PolicyKind};
use crate::report::{median, Claim, Column, Figure, PolicyResult, RunRecord, ScenarioReport};
use crate::seeds::StaticQuote;
use crate::source::PressureSource;

pub mod fio;
pub mod fio_pressure;
pub mod handoff;
pub mod harness;
pub mod limit_churn;
pub mod map_count;
pub mod mass_teardown;
pub mod plots;
pub mod pressure;
pub mod spike;

use harness::{Plan, RunOutput, Worker};

/// Which scenario.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
pub enum ScenarioKind {
    /// Seed 001: fio-like request load, completions on the submitting thread.
    #[serde(rename = "fio")]
    #[value(name = "fio")]
    Fio,
    /// Seed 001, why it was dropped: requests complete on another thread.
    #[serde(rename = "fio-cross-thread")]
    #[value(name = "fio-cross-thread")]
    FioCrossThread,
    /// Seed 003 on seed 001's load: fio with a pressure signal mid-run.
    #[serde(rename = "fio-pressure")]
    #[value(name = "fio-pressure")]
    FioPressure,
    /// Seed 000: uneven per-thread spikes against `vm.max_map_count`.
    #[serde(rename = "map-count")]
    #[value(name = "map-count")]
    MapCount,
    /// Seed 001's memory table: idle memory before, during, after a burst.
    #[serde(rename = "spike-then-idle")]
    #[value(name = "spike-then-idle")]
    SpikeThenIdle,
    /// Seed 003: a memory-pressure signal in mid-run.
    #[serde(rename = "pressure")]
    #[value(name = "pressure")]
    Pressure,
    /// Seed 002: allocation at a live limit, recycling continuously.
    #[serde(rename = "limit-churn")]
    #[value(name = "limit-churn")]
    LimitChurn,
    /// Seed 004: many threads release many stacks at once.
    #[serde(rename = "mass-teardown")]
    #[value(name = "mass-teardown")]
    MassTeardown,
    /// Seed 004 with every page of every stack written.
    #[serde(rename = "mass-teardown-full")]
    #[value(name = "mass-teardown-full")]
    MassTeardownFull,
    /// Seeds 001 and 002: objects made on one thread, freed on another, at
    /// a live limit and without one.
    #[serde(rename = "handoff")]
    #[value(name = "handoff")]
    Handoff,
}

impl ScenarioKind {
    /// Every scenario, in report order.
    pub const ALL: [ScenarioKind; 10] = [
        ScenarioKind::Fio,
        ScenarioKind::FioCrossThread,
        ScenarioKind::FioPressure,
        ScenarioKind::MapCount,
        ScenarioKind::SpikeThenIdle,
        ScenarioKind::Pressure,
        ScenarioKind::LimitChurn,
        ScenarioKind::Handoff,
        ScenarioKind::MassTeardown,
        ScenarioKind::MassTeardownFull,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::Fio => "fio",
            ScenarioKind::FioCrossThread => "fio-cross-thread",
            ScenarioKind::FioPressure => fio_pressure::ID,
            ScenarioKind::MapCount => "map-count",
            ScenarioKind::SpikeThenIdle => "spike-then-idle",
            ScenarioKind::Pressure => "pressure",
            ScenarioKind::LimitChurn => limit_churn::ID,
            ScenarioKind::Handoff => handoff::ID,
            ScenarioKind::MassTeardown => mass_teardown::Touch::Top.id(),
            ScenarioKind::MassTeardownFull => mass_teardown::Touch::Whole.id(),
        }
    }

    /// The names of every scenario in this build.
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|k| k.name()).collect()
    }

    /// Runs this scenario for every policy in `settings`, and checks what
    /// it says about its seed(s).
    pub fn run(self, settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
        let mut report = match self {
            ScenarioKind::Fio => run_spec(
                &fio::spec(settings, fio::Completion::SameThread),
                settings,
                progress,
            ),
            ScenarioKind::FioCrossThread => run_spec(
                &fio::spec(settings, fio::Completion::OtherThread),
                settings,
                progress,
            ),
            ScenarioKind::FioPressure => fio_pressure::run(settings, progress),
            ScenarioKind::MapCount => run_spec(&map_count::spec(settings), settings, progress),
            ScenarioKind::SpikeThenIdle => run_spec(&spike::spec(settings), settings, progress),
            ScenarioKind::Pressure => pressure::run(settings, progress),
            ScenarioKind::LimitChurn => limit_churn::run(settings, progress),
            ScenarioKind::Handoff => handoff::run(settings, progress),
            ScenarioKind::MassTeardown => {
                mass_teardown::run(settings, progress, mass_teardown::Touch::Top)
            }
            ScenarioKind::MassTeardownFull => {
                mass_teardown::run(settings, progress, mass_teardown::Touch::Whole)
            }
        };
        report.claims = self.claims(&report, settings);
        report
    }

    /// What a finished run of this scenario says about its seed(s): the one
    /// place a scenario feeds the report's summary. A new scenario adds its
    /// arm here, and its seed's row fills in.
    pub fn claims(self, report: &ScenarioReport, settings: &Settings) -> Vec<Claim> {
        match self {
            ScenarioKind::Fio => fio::claims(report, fio::Completion::SameThread),
            ScenarioKind::FioCrossThread => fio::claims(report, fio::Completion::OtherThread),
            ScenarioKind::FioPressure => fio_pressure::claims(report),
            ScenarioKind::MapCount => map_count::claims(report, settings),
            ScenarioKind::SpikeThenIdle => spike::claims(report),
            ScenarioKind::Pressure => pressure::claims(report),
            ScenarioKind::LimitChurn => limit_churn::claims(report),
            ScenarioKind::Handoff => handoff::claims(report),
            ScenarioKind::MassTeardown | ScenarioKind::MassTeardownFull => {
                mass_teardown::claims(report)
            }
        }
    }
}

impl fmt::Display for ScenarioKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a lab run is set up; the same for every scenario and policy.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Small sizes, for CI.
    pub quick: bool,
    /// Periods are divided by this (15 s / 100 = 150 ms).
    pub time_scale: f64,
    /// Measured repeats per policy (medians are over these).
    pub repeats: usize,
    /// The policies to run (each scenario runs those of them it has:
    /// the stack pools, or mass-teardown's teardown policies).
    pub policies: Vec<PolicyKind>,
    /// `vm.max_map_count` (QEMU 2024's cap comes from it).
    pub max_map_count: u64,
    /// Where the pressure scenario's signal comes from.
    pub pressure_source: PressureSource,
}

/// The seeds' period, 15 s (QEMU 2021's resize timer; the Solaris kmem
/// reaper's; tidepool's default reclaim interval).
pub const SEED_PERIOD: Duration = Duration::from_secs(15);

impl Settings {
    /// Settings for a full run (`quick` false) or a CI run (`quick` true),
    /// every policy.
    pub fn new(quick: bool) -> Self {
        Settings {
            quick,
            time_scale: if quick { 300.0 } else { 100.0 },
            repeats: if quick { 1 } else { 3 },
            policies: PolicyKind::EVERY.to_vec(),
            max_map_count: crate::procfs::max_map_count().unwrap_or(65530),
            pressure_source: PressureSource::default_for(quick),
        }
    }

    /// The seeds' 15 s period after time scaling.
    pub fn interval(&self) -> Duration {
        SEED_PERIOD.div_f64(self.time_scale.max(1e-3))
    }

    /// What every policy of a scenario is built with, for stacks of
    /// `stack_size` bytes and a period of `interval` (the scaled 15 s, or a
    /// scenario's longer one).
    pub fn env(&self, stack_size: usize, interval: Duration) -> PolicyEnv {
        PolicyEnv {
            stack_size,
            reclaim_interval: interval,
            pressure_hold: scaled_pressure_hold(interval),
            max_map_count: self.max_map_count,
            resident_touch: None,
            idle_decay: true,
        }
    }
}

/// tidepool's default pressure hold, scaled like the period: the hold is to
/// the 15 s reclaim interval what it is in the library, at every time scale.
pub fn scaled_pressure_hold(interval: Duration) -> Duration {
    let default_hold = tidepool::Config::default().pressure_hold();
    default_hold.mul_f64(interval.as_secs_f64() / SEED_PERIOD.as_secs_f64())
}

/// Told how a run progresses (the CLI draws progress bars with it).
pub trait Progress: Sync {
    /// A scenario starts; it will do `runs` policy runs.
    fn scenario(&self, id: &str, runs: u64) {
        let _ = (id, runs);
    }
    /// A policy run starts.
    fn run(&self, policy: PolicyKind, what: &str) {
        let _ = (policy, what);
    }
    /// The policy run ended.
    fn run_done(&self) {}
    /// The scenario ended.
    fn scenario_done(&self) {}
}

/// Progress that shows nothing (tests, `--quiet`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {}

/// Makes the worker body of one run, for one policy.
pub(crate) type MakeWorker<'a> = dyn for<'p> Fn(&'p Plan, PolicyKind) -> Box<Worker<'p>> + 'a;

/// A scenario, ready to run.
pub(crate) struct Spec<'a> {
    pub id: &'static str,
    pub title: &'static str,
    pub seeds: &'static [&'static str],
    pub finding: String,
    pub quotes: Vec<StaticQuote>,
    pub workload: String,
    pub params: BTreeMap<String, String>,
    pub columns: Vec<Column>,
    /// The plots of the scenario's section, in order.
    pub plots: Vec<Figure>,
    /// The metric that picks the run drawn bold.
    pub headline: &'static str,
    pub env: PolicyEnv,
    pub plan: Plan,
    pub warmup: Option<Plan>,
    pub make_worker: Box<MakeWorker<'a>>,
    pub metrics: fn(&RunOutput, &Plan) -> BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

/// The standard worker for every policy: follows the plan's phases.
pub(crate) fn phased() -> Box<MakeWorker<'static>> {
    Box::new(|plan, _| Box::new(harness::phased_worker(plan)))
}

fn run_spec(spec: &Spec<'_>, settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
    let policies: Vec<PolicyKind> = settings
        .policies
        .iter()
        .copied()
        .filter(|p| p.is_pool())
        .collect();
    let policies = &policies;
    let warmups = if spec.warmup.is_some() { 1 } else { 0 };
    progress.scenario(
        spec.id,
        (policies.len() * (settings.repeats + warmups)) as u64,
    );
    if let Some(plan) = &spec.warmup {
        for &kind in policies {
            progress.run(kind, "warm-up");
            let _ = run_one(spec, kind, plan);
            progress.run_done();
        }
    }
    let mut runs: BTreeMap<PolicyKind, Vec<RunOutput>> = BTreeMap::new();
    let mut errors: Vec<String> = Vec::new();
    for repeat in 0..settings.repeats {
        // Rotate the order so that no policy always runs first (or last).
        for i in 0..policies.len() {
            let kind = policies[(i + repeat) % policies.len()];
            progress.run(kind, &format!("repeat {}/{}", repeat + 1, settings.repeats));
            match run_one(spec, kind, &spec.plan) {
                Ok(out) => runs.entry(kind).or_default().push(out),
                Err(e) => errors.push(format!("{kind}: {e}")),
            }
            progress.run_done();
        }
    }
    progress.scenario_done();

    let mut results = Vec::new();
    for &kind in policies {
        let Some(outs) = runs.remove(&kind) else {
            continue;
        };
        let records: Vec<RunRecord> = outs
            .into_iter()
            .map(|o| {
                let mut metrics = (spec.metrics)(&o, &spec.plan);
                metrics.retain(|_, v| v.is_finite());
                metrics.insert("pressure_received".into(), o.pressure.received as f64);
                metrics.insert("pressure_raised".into(), o.pressure.raised as f64);
                metrics.insert("pressure_withheld".into(), o.pressure.withheld as f64);
                RunRecord {
                    metrics,
                    first_failure: o.first_failure,
                    pressure: o.pressure,
                    series: o.series,
                }
            })
            .collect();
        results.push(summarize(kind, records, spec.headline));
    }
    let mut notes = spec.notes.clone();
    notes.extend(
        errors
            .into_iter()
            .map(|e| format!("policy could not be built: {e}")),
    );
    ScenarioReport {
        id: spec.id.to_owned(),
        title: spec.title.to_owned(),
        seeds: spec.seeds.iter().map(|s| (*s).to_owned()).collect(),
        finding: spec.finding.clone(),
        quotes: spec.quotes.iter().map(|q| q.to_quote()).collect(),
        workload: spec.workload.clone(),
        params: spec.params.clone(),
        reclaim_interval_ms: spec.env.reclaim_interval.as_secs_f64() * 1e3,
        columns: spec.columns.clone(),
        phases: spec.plan.phases.iter().map(|p| p.name.clone()).collect(),
        results,
        claims: Vec::new(),
        plots: spec.plots.clone(),
        notes,
    }
}

/// Medians over the runs, and the run whose `headline` is nearest its
/// median (drawn bold).
pub(crate) fn summarize(kind: PolicyKind, runs: Vec<RunRecord>, headline: &str) -> PolicyResult {
    let mut metrics = BTreeMap::new();
    let keys: Vec<String> = runs
        .iter()
        .flat_map(|r| r.metrics.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for key in keys {
        let values: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.metrics.get(&key).copied())
            .filter(|v| v.is_finite())
            .collect();
        // JSON has no NaN: a metric no run could measure is left out.
        if !values.is_empty() {
            metrics.insert(key, median(&values));
        }
    }
    let mid = metrics.get(headline).copied().unwrap_or(0.0);
    let median_run = runs
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| {
            let da = (a.metrics.get(headline).copied().unwrap_or(0.0) - mid).abs();
            let db = (b.metrics.get(headline).copied().unwrap_or(0.0) - mid).abs();
            da.total_cmp(&db)
        })
        .map_or(0, |(i, _)| i);
    let failures = runs
        .iter()
        .map(|r| r.metrics.get("failures").copied().unwrap_or(0.0) as u64)
        .sum();
    PolicyResult {
        policy: kind,
        metrics,
        runs,
        median_run,
        failures,
    }
}

/// Per policy in `policies` that has runs in `records`, in that order: its
/// runs (metrics only, no time series, no failed creations) summarized
/// around `headline`. For the scenarios that measure a run as a whole.
pub(crate) fn summarize_counts(
    policies: &[PolicyKind],
    mut records: BTreeMap<PolicyKind, Vec<BTreeMap<String, f64>>>,
    headline: &str,
) -> Vec<PolicyResult> {
    policies
        .iter()
        .filter_map(|&kind| {
            let runs: Vec<RunRecord> = records
                .remove(&kind)?
                .into_iter()
                .map(|mut metrics| {
                    metrics.insert("failures".into(), 0.0);
                    RunRecord {
                        metrics,
                        series: Default::default(),
                        first_failure: None,
                        pressure: Default::default(),
                    }
                })
                .collect();
            Some(summarize(kind, runs, headline))
        })
        .collect()
}

fn run_one(spec: &Spec<'_>, kind: PolicyKind, plan: &Plan) -> Result<RunOutput, String> {
    let policy = kind.build(&spec.env)?;
    let worker = (spec.make_worker)(plan, kind);
    let out = harness::run(&*policy, plan, &*worker);
    drop(policy);
    Ok(out)
}

/// Common metrics of every scenario.
pub(crate) fn base_metrics(out: &RunOutput) -> BTreeMap<String, f64> {
    let s = &out.series;
    let mut m = BTreeMap::new();
    let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0) as f64;
    m.insert("created".into(), out.created as f64);
    m.insert("peak_idle".into(), max(&s.idle));
    m.insert("final_idle".into(), out.quiescent_idle as f64);
    m.insert("peak_vmas".into(), max(&s.vmas));
    m.insert("peak_rss_mib".into(), max(&s.rss_kib) / 1024.0);
    m.insert("failures".into(), out.failures as f64);
    if out.completed > 0 {
        m.insert(
            "stacks_per_request".into(),
            out.created as f64 / out.completed as f64,
        );
    }
    m.insert("completed".into(), out.completed as f64);
    if out.completed > 0 && out.cpu_ms.is_finite() {
        // Less sensitive than req/s to other work on the machine: what
        // the process spent per request, not how much CPU it was given.
        m.insert(
            "cpu_us_per_req".into(),
            out.cpu_ms * 1e3 / out.completed as f64,
        );
    }
    m.insert("final_live".into(), out.quiescent_live as f64);
    m.insert("left_after_exit".into(), out.after_exit_existing as f64);
    m.insert("aborted".into(), if out.aborted { 1.0 } else { 0.0 });
    m
}

pub(crate) fn param(map: &mut BTreeMap<String, String>, key: &str, value: impl fmt::Display) {
    map.insert(key.to_owned(), value.to_string());
}
