//! A figure: one plot a scenario asks the report to draw, as data.
//!
//! The scenario knows what its numbers mean, so it chooses what to plot,
//! the titles and the axis labels with their units; the report knows how
//! to draw each kind of chart and nothing about any scenario. A figure is
//! kept in [`ScenarioReport::plots`], so `report.json` says what
//! `report.html` draws.

use serde::{Deserialize, Serialize};

use crate::report::{category_plot, plot, sweep_plot, ScenarioReport};

/// One plot, by kind of chart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Figure {
    /// One quantity over time, every run of every policy ([`plot`]).
    OverTime(plot::Spec),
    /// One measure in a few categories, a lane per policy
    /// ([`category_plot`]).
    ByCategory(category_plot::Spec),
    /// Measures against a numeric setting, a line per policy and variant
    /// ([`sweep_plot`]).
    Sweep(sweep_plot::Spec),
}

impl Figure {
    /// The figure as an SVG document, drawn from `scenario`'s results.
    ///
    /// # Errors
    ///
    /// Why it cannot be drawn (no results, or the chart failed).
    pub fn render(&self, scenario: &ScenarioReport) -> Result<String, String> {
        match self {
            Figure::OverTime(spec) => plot::plot(scenario, spec),
            Figure::ByCategory(spec) => category_plot::plot(scenario, spec),
            Figure::Sweep(spec) => sweep_plot::plot(scenario, spec),
        }
    }
}
