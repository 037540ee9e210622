//! A plot of one measure by category (ns per object at each limit, say): a
//! column per category, a lane per policy within it, every round a dot and
//! the median a bar, drawn in the frame every hand-drawn plot shares
//! (`frame.rs`).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::report::frame::{Frame, ROW};
use crate::report::plot::{esc, hex};
use crate::report::ScenarioReport;

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
    let frame = Frame::new(
        LEGEND_W,
        s.results
            .iter()
            .flat_map(|r| spec.categories.iter().flat_map(move |(k, _)| r.per_run(k))),
    );
    let (ax, ay, aw, ah) = (frame.ax, frame.ay, frame.aw, frame.ah);
    let column = aw / spec.categories.len() as f64;
    let lanes = s.results.len() as f64;
    let px = |c: usize, lane: usize| {
        ax + column * c as f64 + column * (lane as f64 + 1.0) / (lanes + 1.0)
    };
    let mut svg = String::new();
    frame.open(&mut svg, &spec.title);
    for (c, (_, label)) in spec.categories.iter().enumerate() {
        let x = ax + column * (c as f64 + 0.5);
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            frame.tick_y(),
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
    frame.axis_labels(&mut svg, &spec.x_label, &spec.y_label);
    frame.open_data(&mut svg);
    for (lane, r) in s.results.iter().enumerate() {
        let colour = hex(r.policy);
        for (c, (key, _)) in spec.categories.iter().enumerate() {
            let x = px(c, lane);
            let median = r.metric(key);
            if median.is_finite() {
                let y = frame.py(median);
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
                        frame.py(v)
                    );
                }
            }
        }
    }
    svg.push_str("</svg>");
    // The legend, right of the plot area: a row per policy and the key.
    let (lx, mut y) = frame.legend(&mut svg, s.results.len() + 1);
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
        y += ROW;
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{y:.1}\" font-size=\"10\" fill=\"#555\">dot: a round; bar: median</text>",
        lx + 6.0
    );
    svg.push_str("</g></svg>");
    Ok(svg)
}
