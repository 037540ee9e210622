//! The report's plots: one metric over time, every policy, every run. What
//! is drawn, its title and its axis labels come from the scenario, as a
//! [`Spec`].
//!
//! Each plot is one SVG document laid out in fixed bands, so that nothing
//! overlaps and nothing is cut off:
//!
//! ```text
//! +-----------------------------------------------------------+
//! | title                                                     |
//! |        1        2          3   4      (phase numbers)     |
//! | y  +------------------------------------+  +-----------+  |
//! | a  |  plotters chart: mesh, ticks,      |  | legend    |  |
//! | x  |  one line per run, markers         |  |           |  |
//! | i  +------------------------------------+  +-----------+  |
//! | s             x axis label                                |
//! +-----------------------------------------------------------+
//! ```
//!
//! The chart itself is drawn by plotters' SVG backend into a nested `<svg>`;
//! the title, axis labels, phase numbers, markers and the legend are
//! written around it with classes (`title`, `axis-label x|y`, `plot-area`,
//! `phase-marker`, `failure-marker`, `limit`, `legend`), which the report
//! check reads to prove that the legend is off the data and every label
//! carries its unit.
//!
//! Every run is drawn: the run whose headline metric is the median bold,
//! the others thin and faint, in the policy's colour (the same in every
//! plot). Phase markers are dashed lines in each policy's colour, from that
//! policy's own median run. A failed creation is always the same cross.

use std::fmt::Write as _;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::policy::PolicyKind;
use crate::report::format;
use crate::report::{ScenarioReport, Series};

/// The whole plot, in CSS pixels.
pub const WIDTH: u32 = 640;
/// The whole plot, in CSS pixels.
pub const HEIGHT: u32 = 300;
const LEFT: u32 = 24;
const TOP: u32 = 42;
const BOTTOM: u32 = 24;
const LEGEND_W: u32 = 158;
const CHART_W: u32 = WIDTH - LEFT - LEGEND_W;
const CHART_H: u32 = HEIGHT - TOP - BOTTOM;
const FONT: &str = "sans-serif";

/// The colour of a policy, the same in every plot (Okabe-Ito palette:
/// told apart with the common colour-vision deficiencies).
pub fn color(policy: PolicyKind) -> RGBColor {
    match policy {
        PolicyKind::None => RGBColor(110, 110, 110),
        PolicyKind::QemuFixed => RGBColor(230, 159, 0),
        PolicyKind::Qemu2021 => RGBColor(213, 94, 0),
        PolicyKind::Qemu2024 => RGBColor(0, 114, 178),
        PolicyKind::Tidepool => RGBColor(0, 158, 115),
        PolicyKind::FbsdBefore => RGBColor(153, 79, 0),
        PolicyKind::Fbsd2023 => RGBColor(120, 94, 240),
        PolicyKind::LockedList => RGBColor(0, 0, 0),
        PolicyKind::DflyBefore => RGBColor(204, 121, 167),
        PolicyKind::Dfly2017 => RGBColor(86, 180, 233),
    }
}

/// `#rrggbb` of a policy's colour.
pub fn hex(policy: PolicyKind) -> String {
    let c = color(policy);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A quantity of a run drawn over time, in the unit its axis must name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Idle stacks, a count.
    Idle,
    /// Process VMAs, a count.
    Vmas,
    /// Process RSS, MiB.
    Rss,
    /// Resident memory of idle stacks, MiB.
    IdleResident,
    /// Completed requests per second.
    Throughput,
    /// A probe's get + put on another pool, µs.
    ProbeGetPut,
    /// A probe's small stack mapped and unmapped, ms.
    ProbeMap,
}

impl Metric {
    fn values(self, s: &Series) -> Vec<f64> {
        match self {
            Metric::Idle => s.idle.iter().map(|&v| v as f64).collect(),
            Metric::Vmas => s.vmas.iter().map(|&v| v as f64).collect(),
            Metric::Rss => s.rss_kib.iter().map(|&v| v as f64 / 1024.0).collect(),
            Metric::IdleResident => s.idle_resident_kib.iter().map(|&v| v / 1024.0).collect(),
            Metric::Throughput => s.throughput.clone(),
            Metric::ProbeGetPut => s.probe_get_put_us.clone(),
            Metric::ProbeMap => s.probe_map_ms.clone(),
        }
    }

    fn tick(self, v: f64) -> String {
        match self {
            Metric::Rss | Metric::IdleResident => format::mib(v),
            _ => format::si(v),
        }
    }
}

/// What to draw: a metric over time, with its words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// The plot's title.
    pub title: String,
    /// The x axis label, with its unit (seconds).
    pub x_label: String,
    /// The y axis label, with the metric's unit.
    pub y_label: String,
    /// The quantity drawn.
    pub metric: Metric,
    /// A horizontal line to draw with it, if any.
    pub limit: Option<Limit>,
}

/// A horizontal line with a name, e.g. `vm.max_map_count`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// Where, in the metric's unit.
    pub value: f64,
    /// What it is.
    pub label: String,
}

pub(crate) fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One run's line: its policy, whether it is the median run, its points
/// (seconds, value).
type Line = (PolicyKind, bool, Vec<(f64, f64)>);

/// The median of the start times of `phase` over the policies' median runs.
fn phase_time(scenario: &ScenarioReport, phase: usize) -> Option<f64> {
    let mut times: Vec<f64> = scenario
        .results
        .iter()
        .filter_map(|r| r.median_series())
        .filter_map(|s| s.events.iter().find(|e| e.phase == phase).map(|e| e.t_ms))
        .collect();
    if times.is_empty() {
        return None;
    }
    times.sort_by(f64::total_cmp);
    Some(times[times.len() / 2])
}

/// One plot as an SVG document.
///
/// # Errors
///
/// If plotters fails to draw (it should not with the SVG backend).
pub fn plot(scenario: &ScenarioReport, spec: &Spec) -> Result<String, String> {
    let (metric, limit) = (spec.metric, spec.limit.as_ref());
    let err = |e: &dyn std::fmt::Display| e.to_string();
    // Every run of every policy, in seconds.
    let lines: Vec<Line> = scenario
        .results
        .iter()
        .flat_map(|r| {
            r.runs.iter().enumerate().map(move |(i, run)| {
                let pts: Vec<(f64, f64)> = run
                    .series
                    .t_ms
                    .iter()
                    .map(|t| t / 1e3)
                    .zip(metric.values(&run.series))
                    .filter(|(_, y)| y.is_finite())
                    .collect();
                (r.policy, i == r.median_run, pts)
            })
        })
        .collect();
    let x_max = lines
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|&(x, _)| x))
        .fold(1e-3f64, f64::max);
    let mut y_max = lines
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|&(_, y)| y))
        .fold(0.0f64, f64::max);
    if let Some(l) = limit {
        y_max = y_max.max(l.value);
    }
    let y_max = if y_max <= 0.0 { 1.0 } else { y_max * 1.08 };

    let mut chart_svg = String::new();
    let area = {
        let root = SVGBackend::with_string(&mut chart_svg, (CHART_W, CHART_H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .margin_top(6)
            .margin_right(18)
            .x_label_area_size(22)
            .y_label_area_size(54)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        let tick_style = (FONT, 11).into_font().color(&RGBColor(70, 70, 70));
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(5)
            .x_label_formatter(&|x| format::seconds(*x))
            .y_label_formatter(&|y| metric.tick(*y))
            .label_style(tick_style)
            .axis_style(RGBColor(150, 150, 150))
            .bold_line_style(RGBColor(228, 228, 228))
            .light_line_style(RGBColor(246, 246, 246))
            .draw()
            .map_err(|e| err(&e))?;
        // Other runs first, thin and faint; the median run on top.
        for bold in [false, true] {
            for (policy, is_median, pts) in &lines {
                if *is_median != bold || pts.is_empty() {
                    continue;
                }
                let c = color(*policy);
                let style = if bold {
                    c.stroke_width(2)
                } else {
                    c.mix(0.4).stroke_width(1)
                };
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), style))
                    .map_err(|e| err(&e))?;
            }
        }
        let (xr, yr) = chart.plotting_area().get_pixel_range();
        drop(chart);
        root.present().map_err(|e| err(&e))?;
        (xr, yr)
    };
    let (ax0, ay0, ax1, ay1) = (
        area.0.start + LEFT as i32,
        area.1.start + TOP as i32,
        area.0.end + LEFT as i32,
        area.1.end + TOP as i32,
    );
    // plotters' own linear mapping, in this document's coordinates.
    let to_px = |x: f64, y: f64| {
        let px = f64::from(ax0) + x / x_max * f64::from(ax1 - ax0);
        let py = f64::from(ay1) - y / y_max * f64::from(ay1 - ay0);
        (px.round() as i32, py.round() as i32)
    };

    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
         aria-label=\"{} over time, {}\" font-family=\"{FONT}\">",
        esc(&spec.title),
        esc(&scenario.id)
    );
    let _ = write!(
        svg,
        "<text class=\"title\" x=\"{LEFT}\" y=\"17\" font-size=\"14\" font-weight=\"bold\" \
         fill=\"#222\">{}</text>",
        esc(&spec.title)
    );
    let nested = strip_xml_header(&chart_svg).replacen(
        "<svg ",
        &format!("<svg x=\"{LEFT}\" y=\"{TOP}\" "),
        1,
    );
    svg.push_str(&nested);
    let _ = write!(
        svg,
        "<rect class=\"plot-area\" x=\"{ax0}\" y=\"{ay0}\" width=\"{}\" height=\"{}\" \
         fill=\"none\" stroke=\"none\"/>",
        ax1 - ax0,
        ay1 - ay0
    );

    // Phase numbers above the plot area, at the middle of each phase, and
    // each policy's own phase starts as dashed lines.
    let phases = scenario.phases.len();
    if phases > 1 {
        let starts: Vec<Option<f64>> = (0..phases).map(|k| phase_time(scenario, k)).collect();
        let mut last_x = i32::MIN;
        svg.push_str("<g class=\"phase-tags\">");
        for k in 0..phases {
            let Some(start) = starts[k] else { continue };
            let end = starts
                .iter()
                .skip(k + 1)
                .flatten()
                .next()
                .copied()
                .unwrap_or(x_max * 1e3);
            let (mut x, _) = to_px((start + end) / 2e3, 0.0);
            x = x.clamp(ax0 + 5, ax1 - 5).max(last_x + 13);
            if x > ax1 - 4 {
                continue;
            }
            last_x = x;
            let _ = write!(
                svg,
                "<text x=\"{x}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" \
                 fill=\"#555\">{}</text>",
                ay0 - 5,
                k + 1
            );
        }
        svg.push_str("</g>");
        for r in &scenario.results {
            let Some(series) = r.median_series() else {
                continue;
            };
            for e in series.events.iter().filter(|e| e.phase > 0) {
                let (x, _) = to_px(e.t_ms / 1e3, 0.0);
                // The x range comes from the policies with data in this
                // plot; a policy without any (a longer run) may have phase
                // starts past it, which would land under the legend.
                if x > ax1 {
                    continue;
                }
                let _ = write!(
                    svg,
                    "<line class=\"phase-marker\" x1=\"{x}\" y1=\"{ay0}\" x2=\"{x}\" \
                     y2=\"{ay1}\" stroke=\"{}\" stroke-width=\"1\" stroke-dasharray=\"4 3\" \
                     opacity=\"0.75\"/>",
                    hex(r.policy)
                );
            }
        }
    }
    if let Some(l) = limit {
        let (_, y) = to_px(0.0, l.value);
        let _ = write!(
            svg,
            "<line class=\"limit\" x1=\"{ax0}\" y1=\"{y}\" x2=\"{ax1}\" y2=\"{y}\" \
             stroke=\"#8b0000\" stroke-width=\"1.5\" stroke-dasharray=\"7 4\"/>"
        );
    }
    // A failed creation: the same cross everywhere, at the run's value then.
    let mut any_failure = false;
    for r in &scenario.results {
        for run in &r.runs {
            let Some(f) = &run.first_failure else {
                continue;
            };
            let values = metric.values(&run.series);
            let at = run.series.t_ms.partition_point(|&t| t <= f.t_ms);
            let y = values.get(at.saturating_sub(1)).copied().unwrap_or(0.0);
            let (x, y) = to_px(f.t_ms / 1e3, y);
            any_failure = true;
            let d = format!(
                "M{} {}L{} {}M{} {}L{} {}",
                x - 5,
                y - 5,
                x + 5,
                y + 5,
                x - 5,
                y + 5,
                x + 5,
                y - 5
            );
            let _ = write!(
                svg,
                "<g class=\"failure-marker\"><path d=\"{d}\" stroke=\"#fff\" stroke-width=\"5\"/>\
                 <path d=\"{d}\" stroke=\"{}\" stroke-width=\"2\"/></g>",
                hex(r.policy)
            );
        }
    }

    // Axis labels.
    let _ = write!(
        svg,
        "<text class=\"axis-label x\" x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" \
         fill=\"#333\">{}</text>",
        (ax0 + ax1) / 2,
        HEIGHT - 6,
        esc(&spec.x_label)
    );
    let _ = write!(
        svg,
        "<text class=\"axis-label y\" transform=\"translate(15 {}) rotate(-90)\" font-size=\"12\" \
         text-anchor=\"middle\" fill=\"#333\">{}</text>",
        (ay0 + ay1) / 2,
        esc(&spec.y_label)
    );

    legend(&mut svg, scenario, limit, any_failure, phases > 1);
    svg.push_str("</svg>");
    Ok(svg)
}

/// The legend, right of the chart: off the data by construction.
fn legend(
    svg: &mut String,
    scenario: &ScenarioReport,
    limit: Option<&Limit>,
    failure: bool,
    phases: bool,
) {
    let x0 = WIDTH - LEGEND_W + 8;
    let row = 17;
    let mut y = TOP + 14;
    let mut body = String::new();
    let entry = |body: &mut String, y: u32, swatch: String, text: &str| {
        let _ = write!(
            body,
            "{swatch}<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#222\">{}</text>",
            x0 + 30,
            y + 4,
            esc(text)
        );
    };
    for r in &scenario.results {
        let line = format!(
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{}\" stroke-width=\"3\"/>",
            x0 + 4,
            x0 + 24,
            hex(r.policy)
        );
        entry(&mut body, y, line, r.policy.name());
        y += row;
    }
    y += 4;
    let grey = "#777";
    entry(
        &mut body,
        y,
        format!(
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{grey}\" stroke-width=\"2\"/>",
            x0 + 4,
            x0 + 24
        ),
        "median run",
    );
    y += row;
    entry(
        &mut body,
        y,
        format!(
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{grey}\" stroke-width=\"1\" \
             opacity=\"0.5\"/>",
            x0 + 4,
            x0 + 24
        ),
        "other runs",
    );
    y += row;
    if phases {
        entry(
            &mut body,
            y,
            format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{grey}\" \
                 stroke-dasharray=\"4 3\"/>",
                x0 + 14,
                y - 6,
                x0 + 14,
                y + 6
            ),
            "phase start",
        );
        y += row;
    }
    if failure {
        let (cx, cy) = (x0 + 14, y);
        entry(
            &mut body,
            y,
            format!(
                "<path d=\"M{} {}L{} {}M{} {}L{} {}\" stroke=\"{grey}\" stroke-width=\"2\"/>",
                cx - 5,
                cy - 5,
                cx + 5,
                cy + 5,
                cx - 5,
                cy + 5,
                cx + 5,
                cy - 5
            ),
            "failed creation",
        );
        y += row;
    }
    if let Some(l) = limit {
        entry(
            &mut body,
            y,
            format!(
                "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#8b0000\" \
                 stroke-width=\"1.5\" stroke-dasharray=\"7 4\"/>",
                x0 + 4,
                x0 + 24
            ),
            &l.label,
        );
        y += row;
    }
    let _ = write!(
        svg,
        "<g class=\"legend\"><rect class=\"legend-box\" x=\"{}\" y=\"{}\" width=\"{}\" \
         height=\"{}\" fill=\"#fafafa\" stroke=\"#ddd\"/>{body}</g>",
        x0 - 2,
        TOP,
        LEGEND_W - 12,
        y - TOP - 4
    );
}

fn strip_xml_header(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}
