//! The `limit-churn` plot: run time against threads, one line per policy
//! and limit (solid: the loose limit, dashed: the tight one), every repeat a
//! dot, the median the line. Laid out in the same bands and with the same
//! classes as [`plot`](super::plot) (`title`, `axis-label x|y`,
//! `plot-area`, `legend-box`), so the report check reads it the same way.

use std::fmt::Write as _;

use crate::report::plot::{hex, HEIGHT, WIDTH};
use crate::report::ScenarioReport;

const LEFT: f64 = 64.0;
const TOP: f64 = 42.0;
const BOTTOM: f64 = 46.0;
const LEGEND_W: f64 = 200.0;

/// `(limit tag, label, dash)` of each line style.
const STYLES: [(&str, &str, &str); 2] = [("hi", "loose limit", ""), ("lo", "tight limit", "6 4")];

/// The plot as SVG, or why not.
///
/// # Errors
///
/// If the scenario has no results or no thread counts.
pub fn plot(s: &ScenarioReport, threads: &[usize]) -> Result<String, String> {
    if s.results.is_empty() || threads.is_empty() {
        return Err("no results".to_owned());
    }
    let (w, h) = (f64::from(WIDTH), f64::from(HEIGHT));
    let (ax, ay) = (LEFT, TOP);
    let (aw, ah) = (w - LEFT - LEGEND_W - 16.0, h - TOP - BOTTOM);
    let key = |tag: &str, t: usize| super::super::scenario::limit_churn::key(tag, t);
    let y_max = s
        .results
        .iter()
        .flat_map(|r| {
            STYLES.iter().flat_map(move |(tag, _, _)| {
                threads.iter().flat_map(move |&t| r.per_run(&key(tag, t)))
            })
        })
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-3)
        * 1.1;
    let (t_lo, t_hi) = (threads[0] as f64, *threads.last().unwrap_or(&1) as f64);
    let span = (t_hi - t_lo).max(1.0);
    let px = |t: f64| ax + 20.0 + (t - t_lo) / span * (aw - 40.0);
    let py = |v: f64| ay + ah - v / y_max * ah;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\">\
         <text class=\"title\" x=\"{ax}\" y=\"20\" font-size=\"14\">Run time against threads \
         (lower is better)</text>\
         <rect class=\"plot-area\" x=\"{ax}\" y=\"{ay}\" width=\"{aw}\" height=\"{ah}\" \
         fill=\"none\" stroke=\"#888\"/>"
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
    for &t in threads {
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
         text-anchor=\"middle\">threads (count)</text>\
         <text class=\"axis-label y\" x=\"14\" y=\"{:.1}\" font-size=\"12\" \
         text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">run time (ms)</text>",
        ax + aw / 2.0,
        h - 10.0,
        ay + ah / 2.0,
        ay + ah / 2.0
    );
    // The data, inside the plot area.
    let _ = write!(
        svg,
        "<svg x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\">"
    );
    for r in &s.results {
        let colour = hex(r.policy);
        for (tag, _, dash) in STYLES {
            let line: Vec<String> = threads
                .iter()
                .filter_map(|&t| {
                    let v = r.metric(&key(tag, t));
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
            for &t in threads {
                for v in r.per_run(&key(tag, t)) {
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
    let rows = s.results.len() * STYLES.len();
    let lh = 10.0 + 16.0 * rows as f64;
    let _ = write!(
        svg,
        "<g class=\"legend\"><rect class=\"legend-box\" x=\"{lx}\" y=\"{ay}\" \
         width=\"{:.0}\" height=\"{lh:.0}\" fill=\"white\" stroke=\"#ccc\"/>",
        LEGEND_W - 4.0
    );
    let mut y = ay + 16.0;
    for r in &s.results {
        for (_, label, dash) in STYLES {
            let _ = write!(
                svg,
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" \
                 stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}, {label}</text>",
                lx + 6.0,
                lx + 28.0,
                y - 4.0,
                y - 4.0,
                hex(r.policy),
                lx + 34.0,
                y,
                r.policy.name()
            );
            y += 16.0;
        }
    }
    svg.push_str("</g></svg>");
    Ok(svg)
}
