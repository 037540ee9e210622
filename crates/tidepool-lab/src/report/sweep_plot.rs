//! A plot of measures against a numeric setting (run time against
//! threads, say): one line per policy and variant (the first variant solid,
//! the next dashed), every repeat a dot, the median the line, drawn in the
//! frame every hand-drawn plot shares (`frame.rs`).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::report::frame::{Frame, ROW};
use crate::report::plot::{esc, hex};
use crate::report::ScenarioReport;

const LEGEND_W: f64 = 200.0;

/// The dash of each variant's lines, in order (solid first).
const DASHES: [&str; 3] = ["", "6 4", "2 3"];

/// What to plot: the words, the settings along the x axis and the
/// variants drawn at each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// The plot's title.
    pub title: String,
    /// The x axis label, with its unit.
    pub x_label: String,
    /// The y axis label, with its unit.
    pub y_label: String,
    /// The settings, ascending: one tick each.
    pub xs: Vec<usize>,
    /// The variants: one line per policy each.
    pub variants: Vec<Variant>,
}

/// One variant of the measure: its legend label and, per setting, the
/// metric key of its value there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Shown after the policy's name in the legend.
    pub label: String,
    /// One metric key per entry of [`Spec::xs`], in the same order.
    pub keys: Vec<String>,
}

/// The plot as SVG, or why not.
///
/// # Errors
///
/// If the scenario has no results or the spec no settings.
pub fn plot(s: &ScenarioReport, spec: &Spec) -> Result<String, String> {
    let xs = &spec.xs;
    if s.results.is_empty() || xs.is_empty() {
        return Err("no results".to_owned());
    }
    let frame = Frame::new(
        LEGEND_W,
        s.results.iter().flat_map(|r| {
            spec.variants
                .iter()
                .flat_map(move |v| v.keys.iter().flat_map(move |k| r.per_run(k)))
        }),
    );
    let (ax, aw) = (frame.ax, frame.aw);
    let (t_lo, t_hi) = (xs[0] as f64, *xs.last().unwrap_or(&1) as f64);
    let span = (t_hi - t_lo).max(1.0);
    let px = |t: f64| ax + 20.0 + (t - t_lo) / span * (aw - 40.0);
    let mut svg = String::new();
    frame.open(&mut svg, &spec.title);
    for &t in xs {
        let x = px(t as f64);
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{t}</text>",
            frame.tick_y()
        );
    }
    frame.axis_labels(&mut svg, &spec.x_label, &spec.y_label);
    frame.open_data(&mut svg);
    for r in &s.results {
        let colour = hex(r.policy);
        for (variant, dash) in spec.variants.iter().zip(DASHES.iter().cycle()) {
            let line: Vec<String> = xs
                .iter()
                .zip(&variant.keys)
                .filter_map(|(&t, key)| {
                    let v = r.metric(key);
                    v.is_finite()
                        .then(|| format!("{:.1},{:.1}", px(t as f64), frame.py(v)))
                })
                .collect();
            let _ = write!(
                svg,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" \
                 stroke-dasharray=\"{dash}\" points=\"{}\"/>",
                line.join(" ")
            );
            for (&t, key) in xs.iter().zip(&variant.keys) {
                for v in r.per_run(key) {
                    if v.is_finite() {
                        let _ = write!(
                            svg,
                            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\" \
                             fill-opacity=\"0.6\"/>",
                            px(t as f64),
                            frame.py(v)
                        );
                    }
                }
            }
        }
    }
    svg.push_str("</svg>");
    // The legend, right of the plot area: a row per policy and variant.
    let (lx, mut y) = frame.legend(&mut svg, s.results.len() * spec.variants.len());
    for r in &s.results {
        for (variant, dash) in spec.variants.iter().zip(DASHES.iter().cycle()) {
            let _ = write!(
                svg,
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" \
                 stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}, {}</text>",
                lx + 6.0,
                lx + 28.0,
                y - 4.0,
                y - 4.0,
                hex(r.policy),
                lx + 34.0,
                y,
                r.policy.name(),
                esc(&variant.label)
            );
            y += ROW;
        }
    }
    svg.push_str("</g></svg>");
    Ok(svg)
}
