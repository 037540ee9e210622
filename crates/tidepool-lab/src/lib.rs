//! tidepool-lab: reproduces the seeds' findings on the machine it runs on.
//!
//! Five pool policies (see [`policy`]): no pool, QEMU's coroutine pool as it
//! was before 2021, in the 2021 patch (seed 001), and since 2024 (seed 000),
//! and tidepool, run through the seeds' workloads (see [`scenario`]) on
//! real guarded stacks with real coroutines on them, measured from `/proc`
//! ([`procfs`]) and reported as JSON, HTML with SVG plots, and a table
//! ([`report`]).
//!
//! The CLI (`tidepool-lab run`) is a thin layer over [`run`]; the tests run
//! the same function with `--quick` sizes.

#![warn(missing_docs, missing_debug_implementations)]

pub mod machine;
pub mod policy;
pub mod pressure_source;
pub mod procfs;
pub mod report;
pub mod scenario;
pub mod stack;

use std::time::{SystemTime, UNIX_EPOCH};

pub use machine::Machine;
pub use policy::PolicyKind;
pub use pressure_source::PressureSource;
pub use report::Report;
pub use scenario::{Progress, ScenarioKind, Settings, Silent};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The scenarios, in order.
    pub scenarios: Vec<ScenarioKind>,
    /// Sizes, time scale, repeats and policies.
    pub settings: Settings,
}

impl Options {
    /// Every scenario and policy, full or quick sizes.
    pub fn all(quick: bool) -> Self {
        Options {
            scenarios: ScenarioKind::ALL.to_vec(),
            settings: Settings::new(quick),
        }
    }
}

/// Runs the scenarios and returns the report. The pressure scenario's
/// signal comes from [`PressureSource::default_for`] the settings: manual
/// for `--quick`, else real PSI where the kernel allows it.
pub fn run(options: &Options, progress: &dyn Progress) -> Report {
    let source = PressureSource::default_for(options.settings.quick);
    run_with_pressure_source(options, source, progress)
}

/// [`run`], with the pressure scenario's signal from `pressure` (see
/// [`pressure_source`]).
pub fn run_with_pressure_source(
    options: &Options,
    pressure: PressureSource,
    progress: &dyn Progress,
) -> Report {
    let _lab = pressure_source::begin(pressure);
    let progress = pressure_source::Tracking::new(progress);
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let machine = Machine::detect();
    let s = &options.settings;
    let scenarios = options
        .scenarios
        .iter()
        .map(|&kind| match kind {
            ScenarioKind::Pressure => scenario::pressure::run(s, &progress),
            _ => kind.run(s, &progress),
        })
        .collect();
    let mut notes = vec![format!(
        "time scaled: every 15 s period (QEMU 2021's resize timer, tidepool's reclaim interval) is \
         divided by {}, to {:.0} ms, identically for every policy; scenarios that need a longer one \
         say so",
        s.time_scale,
        s.interval().as_secs_f64() * 1e3
    )];
    if !machine.optimized {
        notes.push("debug build: absolute throughput is not representative".to_owned());
    }
    for src in tidepool::pressure::sources() {
        notes.push(match src.error {
            None => format!(
                "tidepool pressure source '{}' watched, {} signal(s) during the run",
                src.name, src.events
            ),
            Some(e) => format!("tidepool pressure source '{}' not watched: {e}", src.name),
        });
    }
    Report {
        tool: format!("tidepool-lab {}", env!("CARGO_PKG_VERSION")),
        started_unix,
        quick: s.quick,
        time_scale: s.time_scale,
        repeats: s.repeats,
        machine,
        notes,
        scenarios,
    }
}
