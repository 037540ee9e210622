//! A plot of one measure by category (ns per object at each limit, say): a
//! column per category, a lane per policy within it, every round a dot and
//! the median a bar. Laid out in the same bands and with the same classes
//! as [`plot`](super::plot) (`title`, `axis-label x|y`, `plot-area`,
//! `legend-box`), so the report check reads it the same way.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::report::plot::{esc, hex, HEIGHT, WIDTH};
use crate::report::ScenarioReport;

const LEFT: f64 = 64.0;
const TOP: f64 = 42.0;
const BOTTOM: f64 = 46.0;
const LEGEND_W: f64 = 160.0;

/// What to plot: the title, the y axis label (with its unit), the x axis
/// label, and per category its metric key and label.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// The plot's title.
    pub title: String,
    /// The y axis label, with its unit.
    pub y_label: String,
    /// The x axis label.
    pub x_label: String,
    /// Per category (one column each): its metric key and label.
    pub categories: Vec<(String, String)>,
}

/// The plot as SVG, or why not.
///
/// # Errors
///
/// If the scenario has no results or the spec no categories.
pub fn plot(s: &ScenarioReport, spec: &Spec) -> Result<String, String> {
    if s.results.is_empty() || spec.categories.is_empty() {
        return Err("no results".to_owned());
    }
    let (w, h) = (f64::from(WIDTH), f64::from(HEIGHT));
    let (ax, ay) = (LEFT, TOP);
    let (aw, ah) = (w - LEFT - LEGEND_W - 16.0, h - TOP - BOTTOM);
    let y_max = s
        .results
        .iter()
        .flat_map(|r| spec.categories.iter().flat_map(move |(k, _)| r.per_run(k)))
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-3)
        * 1.1;
    let column = aw / spec.categories.len() as f64;
    let lanes = s.results.len() as f64;
    let px = |c: usize, lane: usize| {
        ax + column * c as f64 + column * (lane as f64 + 1.0) / (lanes + 1.0)
    };
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
    for (c, (_, label)) in spec.categories.iter().enumerate() {
        let x = ax + column * (c as f64 + 0.5);
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            ay + ah + 14.0,
            esc(label)
        );
        if c > 0 {
            let xl = ax + column * c as f64;
            let _ = write!(
                svg,
                "<line x1=\"{xl:.1}\" x2=\"{xl:.1}\" y1=\"{ay}\" y2=\"{}\" stroke=\"#ddd\"/>",
                ay + ah
            );
        }
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
    for (lane, r) in s.results.iter().enumerate() {
        let colour = hex(r.policy);
        for (c, (key, _)) in spec.categories.iter().enumerate() {
            let x = px(c, lane);
            let median = r.metric(key);
            if median.is_finite() {
                let y = py(median);
                let _ = write!(
                    svg,
                    "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" \
                     stroke=\"{colour}\" stroke-width=\"3\"/>",
                    x - 8.0,
                    x + 8.0
                );
            }
            for v in r.per_run(key) {
                if v.is_finite() {
                    let _ = write!(
                        svg,
                        "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\" \
                         fill-opacity=\"0.6\"/>",
                        py(v)
                    );
                }
            }
        }
    }
    svg.push_str("</svg>");
    // The legend, right of the plot area.
    let lx = ax + aw + 12.0;
    let lh = 10.0 + 16.0 * lanes + 16.0;
    let _ = write!(
        svg,
        "<g class=\"legend\"><rect class=\"legend-box\" x=\"{lx}\" y=\"{ay}\" \
         width=\"{:.0}\" height=\"{lh:.0}\" fill=\"white\" stroke=\"#ccc\"/>",
        LEGEND_W - 4.0
    );
    let mut y = ay + 16.0;
    for r in &s.results {
        let _ = write!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{y:.1}\" font-size=\"11\">{}</text>",
            lx + 14.0,
            y - 4.0,
            hex(r.policy),
            lx + 26.0,
            r.policy.name()
        );
        y += 16.0;
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{y:.1}\" font-size=\"10\" fill=\"#555\">dot: a round; bar: median</text>",
        lx + 6.0
    );
    svg.push_str("</g></svg>");
    Ok(svg)
}
