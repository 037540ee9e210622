//! A plot of measures against a numeric setting (run time against
//! threads, say): one line per policy and variant (the first variant solid,
//! the next dashed), every repeat a dot, the median the line. Laid out in
//! the same bands and with the same classes as [`plot`](super::plot)
//! (`title`, `axis-label x|y`, `plot-area`, `legend-box`), so the report
//! check reads it the same way.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::report::plot::{esc, hex, HEIGHT, WIDTH};
use crate::report::ScenarioReport;

const LEFT: f64 = 64.0;
const TOP: f64 = 42.0;
const BOTTOM: f64 = 46.0;
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
    let (w, h) = (f64::from(WIDTH), f64::from(HEIGHT));
    let (ax, ay) = (LEFT, TOP);
    let (aw, ah) = (w - LEFT - LEGEND_W - 16.0, h - TOP - BOTTOM);
    let y_max = s
        .results
        .iter()
        .flat_map(|r| {
            spec.variants
                .iter()
                .flat_map(move |v| v.keys.iter().flat_map(move |k| r.per_run(k)))
        })
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-3)
        * 1.1;
    let (t_lo, t_hi) = (xs[0] as f64, *xs.last().unwrap_or(&1) as f64);
    let span = (t_hi - t_lo).max(1.0);
    let px = |t: f64| ax + 20.0 + (t - t_lo) / span * (aw - 40.0);
    let py = |v: f64| ay + ah - v / y_max * ah;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\">\
         <text class=\"title\" x=\"{ax}\" y=\"20\" font-size=\"14\">{}</text>\
         <rect class=\"plot-area\" x=\"{ax}\" y=\"{ay}\" width=\"{aw}\" height=\"{ah}\" \
         fill=\"none\" stroke=\"#888\"/>",
        esc(&spec.title)
    );
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let y = py(v);
        let _ = write!(
            svg,
            "<line x1=\"{ax}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{v:.0}</text>",
            ax + aw,
            ax - 4.0,
            y + 3.0
        );
    }
    for &t in xs {
        let x = px(t as f64);
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{t}</text>",
            ay + ah + 14.0
        );
    }
    let _ = write!(
        svg,
        "<text class=\"axis-label x\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" \
         text-anchor=\"middle\">{}</text>\
         <text class=\"axis-label y\" x=\"14\" y=\"{:.1}\" font-size=\"12\" \
         text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
        ax + aw / 2.0,
        h - 10.0,
        esc(&spec.x_label),
        ay + ah / 2.0,
        ay + ah / 2.0,
        esc(&spec.y_label)
    );
    // The data, inside the plot area.
    let _ = write!(
        svg,
        "<svg x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\">"
    );
    for r in &s.results {
        let colour = hex(r.policy);
        for (variant, dash) in spec.variants.iter().zip(DASHES.iter().cycle()) {
            let line: Vec<String> = xs
                .iter()
                .zip(&variant.keys)
                .filter_map(|(&t, key)| {
                    let v = r.metric(key);
                    v.is_finite()
                        .then(|| format!("{:.1},{:.1}", px(t as f64), py(v)))
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
                            py(v)
                        );
                    }
                }
            }
        }
    }
    svg.push_str("</svg>");
    // The legend, right of the plot area.
    let lx = ax + aw + 12.0;
    let rows = s.results.len() * spec.variants.len();
    let lh = 10.0 + 16.0 * rows as f64;
    let _ = write!(
        svg,
        "<g class=\"legend\"><rect class=\"legend-box\" x=\"{lx}\" y=\"{ay}\" \
         width=\"{:.0}\" height=\"{lh:.0}\" fill=\"white\" stroke=\"#ccc\"/>",
        LEGEND_W - 4.0
    );
    let mut y = ay + 16.0;
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
            y += 16.0;
        }
    }
    svg.push_str("</g></svg>");
    Ok(svg)
}
