//! What a lab run found: [`Report`], written as `report.json` (serde) and
//! `report.html` (self-contained, SVG plots), and printed as a table.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::policy::PolicyKind;

pub mod html;
pub mod table;

/// Everything one `tidepool-lab run` measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `tidepool-lab <version>`.
    pub tool: String,
    /// When the run started, seconds since the Unix epoch.
    pub started_unix: u64,
    /// Whether `--quick` sizes were used.
    pub quick: bool,
    /// Every period (QEMU 2021's resize timer, tidepool's reclaim interval)
    /// was divided by this.
    pub time_scale: f64,
    /// Measured repeats per policy and scenario (medians are over these).
    pub repeats: usize,
    /// The machine it ran on.
    pub machine: Machine,
    /// Things a reader must know to read the numbers right.
    pub notes: Vec<String>,
    /// One entry per scenario run.
    pub scenarios: Vec<ScenarioReport>,
}

/// One scenario: its setup, and each policy's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// Short name, as given to `--scenario`.
    pub id: String,
    /// Title.
    pub title: String,
    /// The seed it reproduces, and what the seed found.
    pub seed: String,
    /// What the workload does.
    pub workload: String,
    /// Workload parameters (the same for every policy).
    pub params: BTreeMap<String, String>,
    /// The period every periodic policy used in this scenario, in ms.
    pub reclaim_interval_ms: f64,
    /// The table's columns, in order.
    pub columns: Vec<Column>,
    /// One result per policy.
    pub results: Vec<PolicyResult>,
    /// Scenario-specific remarks (e.g. where the pressure signal came from).
    pub notes: Vec<String>,
}

/// A column of a scenario's table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Key into [`PolicyResult::metrics`].
    pub key: String,
    /// Header text.
    pub label: String,
    /// How to print it.
    pub format: Format,
}

/// How a metric is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    /// A whole number.
    Count,
    /// Requests per second, in thousands.
    KiloPerSec,
    /// Bytes shown as MiB.
    MiB,
    /// Milliseconds.
    Millis,
}

impl Column {
    pub(crate) fn new(key: &str, label: &str, format: Format) -> Self {
        Column {
            key: key.to_owned(),
            label: label.to_owned(),
            format,
        }
    }
}

/// One policy's result in one scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// The policy.
    pub policy: PolicyKind,
    /// Medians over the repeats.
    pub metrics: BTreeMap<String, f64>,
    /// Each repeat's metrics.
    pub repeats: Vec<BTreeMap<String, f64>>,
    /// Stack creations that failed, over all repeats.
    pub failures: u64,
    /// The first failure, if any.
    pub first_failure: Option<Failure>,
    /// Time series of the repeat whose headline metric is the median.
    pub series: Series,
}

/// A creation that failed: recorded, never a panic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// When, from the start of the run, in ms.
    pub t_ms: f64,
    /// The process's VMAs right after it.
    pub vmas: u64,
    /// The error.
    pub message: String,
}

/// Samples over one run, as columns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Time from the start of the run, ms.
    pub t_ms: Vec<f64>,
    /// Idle (pooled) stacks.
    pub idle: Vec<u64>,
    /// Stacks in use by requests.
    pub live: Vec<u64>,
    /// Stacks created so far.
    pub created: Vec<u64>,
    /// VMAs of the whole process.
    pub vmas: Vec<u64>,
    /// Resident memory of the whole process, KiB.
    pub rss_kib: Vec<u64>,
    /// Virtual size of the whole process, KiB.
    pub vsz_kib: Vec<u64>,
    /// Requests completed per second since the previous sample.
    pub throughput: Vec<f64>,
    /// Phase changes and other moments worth marking.
    pub events: Vec<Event>,
}

/// A marked moment of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Time from the start of the run, ms.
    pub t_ms: f64,
    /// What happened.
    pub label: String,
}

impl Report {
    /// The report as pretty JSON.
    ///
    /// # Panics
    ///
    /// Never: every field serializes.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    /// Reads a report back from JSON.
    ///
    /// # Errors
    ///
    /// If `text` is not a report.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Writes `report.json` and `report.html` into `dir` (created if need
    /// be). Returns their paths.
    ///
    /// # Errors
    ///
    /// If a file cannot be written.
    pub fn write(&self, dir: &Path) -> io::Result<(std::path::PathBuf, std::path::PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("report.json");
        std::fs::write(&json, self.to_json())?;
        let page = dir.join("report.html");
        std::fs::write(&page, html::render(self))?;
        Ok((json, page))
    }

    /// The scenario with this id.
    pub fn scenario(&self, id: &str) -> Option<&ScenarioReport> {
        self.scenarios.iter().find(|s| s.id == id)
    }
}

impl ScenarioReport {
    /// The result of `policy`.
    pub fn result(&self, policy: PolicyKind) -> Option<&PolicyResult> {
        self.results.iter().find(|r| r.policy == policy)
    }
}

impl PolicyResult {
    /// A median metric, or NaN if the scenario has no such metric.
    pub fn metric(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(f64::NAN)
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
