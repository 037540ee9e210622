//! tidepool-lab: reproduces the seeds' findings on the machine it runs on.
//!
//! Five pool policies (see [`policy`]): no pool, QEMU's coroutine pool as it
//! was before 2021, in the 2021 patch (seed 001), and since 2024 (seed 000),
//! and tidepool, run through the seeds' workloads (see [`scenario`]) on
//! real guarded stacks with real coroutines on them; and, for seed 004's
//! mass teardown ([`scenario::mass_teardown`]), DragonFly's teardown
//! before and after its 2017 fix against tidepool's; measured from `/proc`
//! ([`procfs`]) and reported as JSON, HTML with SVG plots, and a compact
//! table ([`report`]), opening with a per-seed summary ([`seeds`],
//! [`report::summary`]).
//!
//! Modules, one concern each; imports go one way, down this list:
//!
//! * [`cli`]: the command line, every argument checked before any work.
//! * [`scenario`]: the workloads and how each runs every policy; each
//!   scenario hands the report its table's columns, its claims and the
//!   plots to draw ([`report::Figure`]). Memory pressure, and the count of
//!   its signals, come from [`source`].
//! * [`report`]: what a run found, and how it is shown: it renders what
//!   the scenarios give it and names none of them.
//! * [`policy`]: the pools under test, on [`stack`]s.
//! * [`source`]: where memory pressure comes from (cgroups, thrash, PSI).
//! * [`cleanup`]: what a run leaves behind, undone on every way out.
//! * [`machine`], [`procfs`], [`seeds`]: facts, read or quoted.
//!
//! The CLI (`tidepool-lab run`) is a thin layer over [`run`]; the tests run
//! the same function with `--quick` sizes.

#![warn(missing_docs, missing_debug_implementations)]

pub mod cleanup;
pub mod cli;
pub mod machine;
pub mod policy;
pub mod procfs;
pub mod report;
pub mod scenario;
pub mod seeds;
pub mod source;
pub mod stack;

use std::time::{SystemTime, UNIX_EPOCH};

pub use machine::Machine;
pub use policy::PolicyKind;
pub use report::Report;
pub use scenario::{Progress, ScenarioKind, Settings, Silent};
pub use source::PressureSource;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The scenarios, in order.
    pub scenarios: Vec<ScenarioKind>,
    /// Sizes, time scale, repeats, policies and the pressure source.
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

/// Runs the scenarios and returns the report.
///
/// Machine-wide memory pressure reaches tidepool's pools only in the
/// `pressure` scenario if `TIDEPOOL_PRESSURE=manual` was set before the
/// process built its first pool (the CLI does; see [`source::psi`]);
/// otherwise the report says that it was not isolated.
pub fn run(options: &Options, progress: &dyn Progress) -> Report {
    let isolation = source::psi::isolation();
    let signals_before = source::psi::totals();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let machine = Machine::detect();
    let s = &options.settings;
    let mut scenarios: Vec<report::ScenarioReport> = options
        .scenarios
        .iter()
        .map(|&kind| kind.run(s, progress))
        .collect();
    scenario::mass_teardown::fold_variants(&mut scenarios);
    let mut notes = vec![format!(
        "time scaled: every 15 s period (QEMU 2021's resize timer, tidepool's reclaim interval, \
         and with it tidepool's pressure hold) is divided by {}, to {:.0} ms, identically for \
         every policy; scenarios that need a longer one say so",
        s.time_scale,
        s.interval().as_secs_f64() * 1e3
    )];
    if !machine.optimized {
        notes.push("debug build: absolute throughput is not representative".to_owned());
    }
    let signals = source::psi::totals().since(signals_before);
    notes.push(format!(
        "memory-pressure signals during the lab run: {} raised by the watched sources and the \
         lab's manual source, {} of them withheld by the gate outside the pressure scenario",
        signals.raised, signals.withheld
    ));
    let ungated = source::psi::ungated_sources();
    if !ungated.is_empty() {
        notes.push(format!(
            "tidepool also watched, outside the lab's gate: {}",
            ungated.join("; ")
        ));
    }
    let summary = report::summary::build(&scenarios, &ScenarioKind::names());
    Report {
        tool: format!("tidepool-lab {}", env!("CARGO_PKG_VERSION")),
        started_unix,
        quick: s.quick,
        time_scale: s.time_scale,
        repeats: s.repeats,
        machine,
        pressure_isolated: isolation.is_gated() && ungated.is_empty(),
        pressure_isolation: isolation.describe(),
        notes,
        summary,
        scenarios,
    }
}
