//! The report's first screen: for each seed, does the lab reproduce what
//! the seed found, and does tidepool match or beat the seed's policy?
//!
//! A scenario contributes its seed's claims through one function,
//! `claims(&ScenarioReport, &Settings) -> Vec<Claim>` in its module (called
//! by `ScenarioKind::run`); [`build`] groups them by seed, in seed order.
//! A seed whose scenario is not in this build yet, or was not run, still
//! gets its row, with the seed's published numbers and the reason.

use serde::{Deserialize, Serialize};

use crate::report::{PolicyResult, ScenarioReport};
use crate::seeds::SEEDS;

/// Whether a claim holds in this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// It holds (✓).
    Pass,
    /// It does not (✗).
    Fail,
    /// It could not be measured here (a policy it needs was not run, or the
    /// runs failed).
    Unmeasured,
}

impl Verdict {
    /// ✓, ✗ or –.
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Pass => "✓",
            Verdict::Fail => "✗",
            Verdict::Unmeasured => "–",
        }
    }

    /// `Pass` if `ok`, else `Fail`.
    pub fn of(ok: bool) -> Self {
        if ok {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }
}

/// One claim about a seed, checked against this run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The seed, `"000"` .. `"004"`.
    pub seed: String,
    /// The scenario that measured it.
    pub scenario: String,
    /// What is claimed, briefly (at most 44 characters: it heads a terminal
    /// line).
    pub claim: String,
    /// The seed's number, short (at most 12 characters), e.g. `"1.62×"`.
    pub published: String,
    /// The seed's number in words, with its source.
    pub published_detail: String,
    /// The lab's number, short (at most 14 characters).
    pub measured: String,
    /// The lab's number in words: which policies, spread over the runs.
    pub measured_detail: String,
    /// When the claim holds, e.g. `"≥ 1.00×"`.
    pub rule: String,
    /// Whether it holds here.
    pub verdict: Verdict,
}

/// Why a seed's row has no measured claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeedStatus {
    /// Its scenario(s) ran.
    Measured,
    /// Its scenario is not in this build yet.
    NotInBuild {
        /// The planned scenario.
        scenario: String,
    },
    /// Its scenarios exist but were not selected (`--scenario`).
    NotRun {
        /// The scenarios that would measure it.
        scenarios: Vec<String>,
    },
}

/// One seed's row of the summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedRow {
    /// `"000"` .. `"004"`.
    pub seed: String,
    /// e.g. `"QEMU 2024"`.
    pub short: String,
    /// The patch's subject.
    pub subject: String,
    /// Who, where, when.
    pub origin: String,
    /// The seed's headline number, for rows without a scenario.
    pub published: String,
    /// Whether the lab measured it.
    pub status: SeedStatus,
    /// The claims measured, in scenario order.
    pub claims: Vec<Claim>,
}

impl SeedRow {
    /// The row's status in words.
    pub fn status_text(&self) -> String {
        match &self.status {
            SeedStatus::Measured => "measured".to_owned(),
            SeedStatus::NotInBuild { scenario } => {
                format!("scenario {scenario} not in this build yet")
            }
            SeedStatus::NotRun { scenarios } => format!(
                "not run here (its scenario{}: {})",
                if scenarios.len() == 1 { "" } else { "s" },
                scenarios.join(", ")
            ),
        }
    }
}

/// The seed's published headline, for rows the lab does not measure.
fn headline(seed: &str) -> String {
    use crate::seeds::published as p;
    match seed {
        "000" => "per-thread pools reach vm.max_map_count and QEMU aborts; the capped pool: \
                  IOPS 0.997–1.033× of the old one"
            .to_owned(),
        "001" => format!(
            "fio {}k → {}k IOPS with a growing pool",
            p::QEMU_2021_IOPS.0 / 1000,
            p::QEMU_2021_IOPS.1 / 1000
        ),
        "002" => {
            let [(l1, b1, a1), (l2, b2, a2)] = p::FREEBSD_RUN_S;
            format!(
                "run time ~{b1} s → ~{a1} s ({:.1}×) at a vnode limit of {l1}; ~{b2} s → ~{a2} s \
                 ({:.1}×) at {l2}: one shared counter off the hot path",
                f64::from(b1) / f64::from(a1),
                f64::from(b2) / f64::from(a2)
            )
        }
        "003" => {
            let ((_, _), (out_b, out_a)) = p::XEN_SWAP;
            format!(
                "swap-out under pressure {out_b} → {out_a} pages ({:.1} % less), dd {:.1} → {:.1} \
                 MB/s",
                100.0 * (1.0 - out_a as f64 / out_b as f64),
                p::XEN_DD_MBPS.0,
                p::XEN_DD_MBPS.1
            )
        }
        "004" => {
            let (pipes, before, after) = p::DRAGONFLY;
            format!(
                "tearing down {pipes} pipes at once: unusable for upwards of an hour → less than \
                 30 s (> {}×)",
                before / after
            )
        }
        _ => String::new(),
    }
}

/// The summary: one row per seed, in order, from the claims of the
/// `scenarios` that ran; `built` names every scenario this build has.
pub fn build(scenarios: &[ScenarioReport], built: &[&str]) -> Vec<SeedRow> {
    SEEDS
        .iter()
        .map(|seed| {
            let mut claims: Vec<Claim> = scenarios
                .iter()
                .flat_map(|s| s.claims.iter())
                .filter(|c| c.seed == seed.id)
                .cloned()
                .collect();
            // The seed's own story first: its scenarios in the order the
            // catalogue lists them.
            claims.sort_by_key(|c| {
                seed.scenarios
                    .iter()
                    .position(|s| *s == c.scenario)
                    .unwrap_or(usize::MAX)
            });
            let in_build: Vec<String> = seed
                .scenarios
                .iter()
                .filter(|s| built.contains(s))
                .map(|s| (*s).to_owned())
                .collect();
            let status = if !claims.is_empty() {
                SeedStatus::Measured
            } else if in_build.is_empty() {
                SeedStatus::NotInBuild {
                    scenario: seed.scenarios.first().copied().unwrap_or("?").to_owned(),
                }
            } else {
                SeedStatus::NotRun {
                    scenarios: in_build,
                }
            };
            SeedRow {
                seed: seed.id.to_owned(),
                short: seed.short.to_owned(),
                subject: seed.subject.to_owned(),
                origin: seed.origin.to_owned(),
                published: headline(seed.id),
                status,
                claims,
            }
        })
        .collect()
}

/// `a / b` of two results' medians of `key`, with the spread of the per-run
/// ratios (runs paired in order: each round runs every policy once).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    /// Ratio of the medians.
    pub median: f64,
    /// Smallest per-run ratio.
    pub min: f64,
    /// Largest per-run ratio.
    pub max: f64,
}

impl Ratio {
    /// `a / b` on `key`; `None` if either is missing or `b` is 0.
    pub fn of(a: &PolicyResult, b: &PolicyResult, key: &str) -> Option<Ratio> {
        let (ma, mb) = (a.metric(key), b.metric(key));
        if !(ma.is_finite() && mb.is_finite()) || mb <= 0.0 {
            return None;
        }
        let per: Vec<f64> = a
            .per_run(key)
            .iter()
            .zip(b.per_run(key))
            .filter(|(x, y)| x.is_finite() && y.is_finite() && *y > 0.0)
            .map(|(x, y)| x / y)
            .collect();
        let min = per.iter().copied().fold(f64::INFINITY, f64::min);
        let max = per.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Ratio {
            median: ma / mb,
            min: if min.is_finite() { min } else { ma / mb },
            max: if max.is_finite() { max } else { ma / mb },
        })
    }

    /// `"1.23×"`.
    pub fn short(&self) -> String {
        times(self.median)
    }

    /// `"1.23× (runs 1.10–1.31×)"`, the spread only with several runs.
    pub fn detail(&self) -> String {
        if (self.max - self.min).abs() < 5e-3 {
            times(self.median)
        } else {
            format!(
                "{} (per run {}–{})",
                times(self.median),
                times_bare(self.min),
                times(self.max)
            )
        }
    }
}

/// A ratio as `"1.23×"` (3 significant digits below 10).
pub fn times(r: f64) -> String {
    format!("{}×", times_bare(r))
}

fn times_bare(r: f64) -> String {
    if !r.is_finite() {
        "–".to_owned()
    } else if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

/// A share as `"98 %"`.
pub fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.0} %", 100.0 * x)
    } else {
        "–".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_has_a_row_even_with_no_scenario_run() {
        let rows = build(
            &[],
            &[
                "fio",
                "fio-cross-thread",
                "map-count",
                "spike-then-idle",
                "pressure",
                "limit-churn",
                "mass-teardown",
            ],
        );
        let ids: Vec<&str> = rows.iter().map(|r| r.seed.as_str()).collect();
        assert_eq!(ids, ["000", "001", "002", "003", "004"]);
        for r in &rows {
            assert!(r.claims.is_empty());
            assert!(!r.published.is_empty(), "{}", r.seed);
            match r.seed.as_str() {
                "002" => assert_eq!(
                    r.status,
                    SeedStatus::NotRun {
                        scenarios: vec!["limit-churn".into()]
                    }
                ),
                _ => assert!(matches!(r.status, SeedStatus::NotRun { .. }), "{r:?}"),
            }
        }
        assert_eq!(
            rows[2].status_text(),
            "not run here (its scenario: limit-churn)"
        );
    }

    #[test]
    fn ratios_print_short() {
        assert_eq!(times(1.0), "1.00×");
        assert_eq!(times(12.34), "12.3×");
        assert_eq!(times(150.0), "150×");
        assert_eq!(percent(0.981), "98 %");
    }
}
