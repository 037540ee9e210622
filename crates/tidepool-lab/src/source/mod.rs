//! Where memory pressure comes from: the real thing where the kernel allows
//! it, else tidepool's manual signal; and how machine-wide pressure is kept
//! away from the scenarios that do not study it.
//!
//! * [`cgroup`]: finding this process's memory cgroup, making limited
//!   children of it.
//! * [`thrash`]: generating pressure (page-cache thrash in such a child).
//! * [`psi`]: reading pressure (the PSI trigger, the gate in front of every
//!   machine-wide source).
//!
//! Scenarios use these; nothing here knows about scenarios, policies or
//! reports.
//!
//! # Choosing
//!
//! [`PressureSource::Auto`] tries every step of the real source and, if any
//! is refused (no PSI, no v1 memory cgroup, no permission to make one, no
//! `sh`/`dd`, a refused trigger), falls back to the manual source and says
//! why; [`PressureSource::Real`] refuses instead; [`PressureSource::Manual`]
//! always calls `tidepool::pressure::notify(Level::Critical)`.

use std::fmt;
use std::process::{Command, Stdio};

pub mod cgroup;
pub mod psi;
pub mod thrash;

/// How the real source is named in reports.
pub const REAL_LABEL: &str =
    "psi /proc/pressure/memory (real page-cache thrash in a 64 MiB cgroup)";
/// How the manual source is named in reports.
pub const MANUAL_LABEL: &str = "manual: tidepool::pressure::notify(Critical)";

/// Which pressure source the `pressure` scenario uses.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
pub enum PressureSource {
    /// Real PSI where the kernel allows it, else manual (saying why).
    #[serde(rename = "auto")]
    #[value(name = "auto")]
    Auto,
    /// Real PSI, or the scenario is refused with the reason.
    #[serde(rename = "real")]
    #[value(name = "real")]
    Real,
    /// `tidepool::pressure::notify(Level::Critical)`.
    #[serde(rename = "manual")]
    #[value(name = "manual")]
    Manual,
}

impl PressureSource {
    /// `manual` for `--quick` runs (fast, no root needed), `auto` otherwise.
    pub fn default_for(quick: bool) -> Self {
        if quick {
            PressureSource::Manual
        } else {
            PressureSource::Auto
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PressureSource::Auto => "auto",
            PressureSource::Real => "real",
            PressureSource::Manual => "manual",
        }
    }
}

impl fmt::Display for PressureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the signal will be delivered in a lab run's pressure scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Page-cache thrash in a 64 MiB cgroup; the PSI trigger is armed.
    Real {
        /// The armed trigger's name (see [`psi::events_of`]).
        trigger: String,
        /// `--pressure-source real`: a run whose thrash cannot start gets
        /// no signal (and is marked refused) instead of the manual one.
        strict: bool,
    },
    /// `tidepool::pressure::notify(Level::Critical)`.
    Manual {
        /// Why not the real source (`auto` only).
        fallback: Option<String>,
    },
}

impl Delivery {
    /// The source's name for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Delivery::Real { .. } => REAL_LABEL,
            Delivery::Manual { .. } => MANUAL_LABEL,
        }
    }

    /// Whether it is the real source.
    pub fn is_real(&self) -> bool {
        matches!(self, Delivery::Real { .. })
    }
}

/// Decides the delivery for `choice`: tries every step of the real source
/// for `auto` and `real` (the probe cgroup is made and removed again).
///
/// # Errors
///
/// For `real` only: the step that was refused, and why.
pub fn prepare(choice: PressureSource) -> Result<Delivery, String> {
    match choice {
        PressureSource::Manual => Ok(Delivery::Manual { fallback: None }),
        PressureSource::Auto | PressureSource::Real => match try_real() {
            Ok(trigger) => Ok(Delivery::Real {
                trigger,
                strict: choice == PressureSource::Real,
            }),
            Err(why) if choice == PressureSource::Auto => Ok(Delivery::Manual {
                fallback: Some(why),
            }),
            Err(why) => Err(why),
        },
    }
}

fn try_real() -> Result<String, String> {
    if !cfg!(target_os = "linux") {
        return Err("not Linux: no PSI, no cgroups".to_owned());
    }
    crate::procfs::psi_memory()?;
    let probe = cgroup::ChildCgroup::create(
        &format!("tidepool-lab-probe-{}", std::process::id()),
        thrash::LIMIT_BYTES,
    )?;
    probe.remove()?;
    let tools = Command::new("sh")
        .args(["-c", "command -v dd >/dev/null"])
        .stdin(Stdio::null())
        .status();
    match tools {
        Ok(s) if s.success() => {}
        Ok(s) => {
            return Err(format!(
                "find `dd` for the load: sh -c 'command -v dd': {s}"
            ))
        }
        Err(e) => return Err(format!("start `sh` for the load: {e}")),
    }
    psi::arm_trigger()
}
