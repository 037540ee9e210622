//! What a lab run found: [`Report`], written as `report.json` (serde) and
//! `report.html` (self-contained, SVG plots), and printed as a compact table.
//!
//! The report opens with a [`summary`]: one row per seed, the seed's own
//! published numbers beside the lab's, as ratios (the machine differs), and
//! a verdict per claim. Each scenario contributes the claims about its seed
//! ([`Claim`]); the rest of the report is one section per scenario, with
//! the plots the scenario asks for ([`Figure`]). The report draws what it
//! is given and knows no scenario by name: scenarios use the report, never
//! the other way round.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::policy::PolicyKind;
use crate::seeds::Quote;

pub mod category_plot;
pub mod figure;
pub mod format;
mod frame;
pub mod html;
pub mod plot;
pub mod summary;
pub mod sweep_plot;
pub mod table;

pub use figure::Figure;
pub use summary::{Claim, SeedRow, SeedStatus, Verdict};

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
    /// Whether machine-wide memory pressure was kept away from the pools
    /// outside the pressure scenario (see [`crate::source::psi`]).
    pub pressure_isolated: bool,
    /// How, in a sentence.
    pub pressure_isolation: String,
    /// Things a reader must know to read the numbers right.
    pub notes: Vec<String>,
    /// One row per seed, 000 to 004, in order.
    pub summary: Vec<SeedRow>,
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
    /// The seed(s) it replays, e.g. `["001"]`.
    pub seeds: Vec<String>,
    /// What the seed found, in the lab's words.
    pub finding: String,
    /// The seed's own words (or the words of whoever said them).
    pub quotes: Vec<Quote>,
    /// What the workload does.
    pub workload: String,
    /// Workload parameters (the same for every policy).
    pub params: BTreeMap<String, String>,
    /// The period every periodic policy used in this scenario, in ms.
    pub reclaim_interval_ms: f64,
    /// The table's columns, in order.
    pub columns: Vec<Column>,
    /// The phases of every run, in order (markers on the plots).
    pub phases: Vec<String>,
    /// One result per policy.
    pub results: Vec<PolicyResult>,
    /// What this scenario says about its seed(s), for the summary.
    pub claims: Vec<Claim>,
    /// The plots of its section, in order, as the scenario chose them.
    pub plots: Vec<Figure>,
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
    /// Header text in the terminal's compact table; `None` leaves the
    /// column out there.
    pub short: Option<String>,
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
    /// Microseconds.
    Micros,
    /// A plain ratio.
    Ratio,
    /// A share, printed as a percentage.
    Percent,
}

impl Column {
    /// A column shown in the HTML only.
    pub(crate) fn new(key: &str, label: &str, format: Format) -> Self {
        Column {
            key: key.to_owned(),
            label: label.to_owned(),
            short: None,
            format,
        }
    }

    /// Also in the terminal's table, headed `short`.
    pub(crate) fn terminal(mut self, short: &str) -> Self {
        self.short = Some(short.to_owned());
        self
    }
}

/// One policy's result in one scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// The policy.
    pub policy: PolicyKind,
    /// Medians over the runs.
    pub metrics: BTreeMap<String, f64>,
    /// Every measured run (repeat), in the order they ran.
    pub runs: Vec<RunRecord>,
    /// The run whose headline metric is the median (drawn bold).
    pub median_run: usize,
    /// Stack creations that failed, over all runs.
    pub failures: u64,
}

/// One measured run of one policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Its metrics.
    pub metrics: BTreeMap<String, f64>,
    /// Its time series.
    pub series: Series,
    /// Its first failed creation, if any.
    pub first_failure: Option<Failure>,
    /// The memory-pressure signals of the run.
    pub pressure: PressureCounts,
}

/// Memory-pressure signals during one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PressureCounts {
    /// Signals the policy received: its pool's own count (tidepool); 0 for
    /// the seed policies, which have no pressure response.
    pub received: u64,
    /// Signals the machine-wide sources raised meanwhile, plus the lab's
    /// manual ones: the same conditions for every policy.
    pub raised: u64,
    /// Of those, the ones the lab's gate held back from the pools (see
    /// [`crate::source::psi`]).
    pub withheld: u64,
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
    /// Requests completed per second over the last four sample intervals
    /// or so (a moving window, so that one late sample is no spike).
    pub throughput: Vec<f64>,
    /// mass-teardown's probe: latency of a get + put on another pool, µs,
    /// one per sample (empty in the other scenarios).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_get_put_us: Vec<f64>,
    /// mass-teardown's probe: latency of a small stack's `mmap` +
    /// `mprotect` + `munmap`, ms, one per sample (empty elsewhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_map_ms: Vec<f64>,
    /// Resident memory of the policy's idle stacks, KiB, one per sample,
    /// where the scenario measures it (`fio-pressure`, tidepool only:
    /// `mincore` over the pool's slabs less what live requests touched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle_resident_kib: Vec<f64>,
    /// CPU time of the whole process by each sample, ms (every thread:
    /// workers, sampler, the policy's own): with `completed`, the CPU a
    /// request costs, which load from other processes on the machine does
    /// not change the way it changes wall-clock rates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_ms: Vec<f64>,
    /// Minor page faults of the whole process by each sample (first
    /// touches of fresh or purged stack pages among them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minor_faults: Vec<u64>,
    /// When each phase started.
    pub events: Vec<Event>,
}

/// The start of a phase in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Time from the start of the run, ms.
    pub t_ms: f64,
    /// The phase that starts (an index into [`ScenarioReport::phases`]).
    pub phase: usize,
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
    /// Each file is written beside its place and renamed into it, so a
    /// reader never sees half a report.
    ///
    /// # Errors
    ///
    /// If a file cannot be written.
    pub fn write(&self, dir: &Path) -> io::Result<(std::path::PathBuf, std::path::PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("report.json");
        write_whole(&json, &self.to_json())?;
        let page = dir.join("report.html");
        write_whole(&page, &html::render(self))?;
        Ok((json, page))
    }

    /// The scenario with this id.
    pub fn scenario(&self, id: &str) -> Option<&ScenarioReport> {
        self.scenarios.iter().find(|s| s.id == id)
    }
}

/// Writes `text` to `path` through a temporary file beside it.
fn write_whole(path: &Path, text: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let registration = crate::cleanup::register(crate::cleanup::Leftover::File(tmp.clone()))
        .map_err(io::Error::other)?;
    let result = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    drop(registration);
    result
}

impl ScenarioReport {
    /// The result of `policy`.
    pub fn result(&self, policy: PolicyKind) -> Option<&PolicyResult> {
        self.results.iter().find(|r| r.policy == policy)
    }

    /// The machine's pressure signals over every run of every policy:
    /// `(raised, withheld)` (see [`PressureCounts`]).
    pub fn machine_signals(&self) -> (u64, u64) {
        self.results
            .iter()
            .flat_map(|r| &r.runs)
            .fold((0, 0), |(a, b), run| {
                (a + run.pressure.raised, b + run.pressure.withheld)
            })
    }
}

impl PolicyResult {
    /// A median metric, or NaN if the scenario has no such metric.
    pub fn metric(&self, key: &str) -> f64 {
        self.metrics.get(key).copied().unwrap_or(f64::NAN)
    }

    /// One metric of every run, in order (NaN where missing).
    pub fn per_run(&self, key: &str) -> Vec<f64> {
        self.runs
            .iter()
            .map(|r| r.metrics.get(key).copied().unwrap_or(f64::NAN))
            .collect()
    }

    /// The run drawn bold: the one whose headline metric is the median.
    pub fn median_series(&self) -> Option<&Series> {
        self.runs.get(self.median_run).map(|r| &r.series)
    }

    /// The first failure of any run.
    pub fn first_failure(&self) -> Option<&Failure> {
        self.runs.iter().find_map(|r| r.first_failure.as_ref())
    }

    /// Pressure signals received over all runs.
    pub fn pressure_received(&self) -> u64 {
        self.runs.iter().map(|r| r.pressure.received).sum()
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
