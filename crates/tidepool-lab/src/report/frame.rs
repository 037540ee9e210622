//! The frame the hand-drawn plots ([`category_plot`](super::category_plot),
//! [`sweep_plot`](super::sweep_plot)) share: the SVG document with its title
//! and plot area, the horizontal grid with its ticks, the axis labels, and
//! the legend box right of the plot area. The bands and classes are those
//! of [`plot`](super::plot) (`title`, `axis-label x|y`, `plot-area`,
//! `legend-box`), so the report check reads every plot the same way.

use std::fmt::Write as _;

use crate::report::plot::{esc, HEIGHT, WIDTH};

const LEFT: f64 = 64.0;
const TOP: f64 = 42.0;
const BOTTOM: f64 = 46.0;
/// Height of one legend row, in CSS pixels.
pub(crate) const ROW: f64 = 16.0;

/// The plot area's place in the document and the y scale, in CSS pixels.
pub(crate) struct Frame {
    /// Left edge of the plot area.
    pub ax: f64,
    /// Top edge of the plot area.
    pub ay: f64,
    /// Width of the plot area.
    pub aw: f64,
    /// Height of the plot area.
    pub ah: f64,
    y_max: f64,
    legend_w: f64,
}

impl Frame {
    /// A frame with a legend `legend_w` wide, its y axis from 0 to a tenth
    /// above the largest finite value of `values` (or a small positive
    /// span if there is none).
    pub fn new(legend_w: f64, values: impl Iterator<Item = f64>) -> Self {
        let y_max = values
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max)
            .max(1e-3)
            * 1.1;
        let (w, h) = (f64::from(WIDTH), f64::from(HEIGHT));
        Frame {
            ax: LEFT,
            ay: TOP,
            aw: w - LEFT - legend_w - 16.0,
            ah: h - TOP - BOTTOM,
            y_max,
            legend_w,
        }
    }

    /// The y coordinate of the value `v`.
    pub fn py(&self, v: f64) -> f64 {
        self.ay + self.ah - v / self.y_max * self.ah
    }

    /// Opens the document: the title, the plot area's outline and five
    /// grid lines with their values.
    pub fn open(&self, svg: &mut String, title: &str) {
        let (ax, ay, aw, ah) = (self.ax, self.ay, self.aw, self.ah);
        let _ = write!(
            svg,
            "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" \
             height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\">\
             <text class=\"title\" x=\"{ax}\" y=\"20\" font-size=\"14\">{}</text>\
             <rect class=\"plot-area\" x=\"{ax}\" y=\"{ay}\" width=\"{aw}\" height=\"{ah}\" \
             fill=\"none\" stroke=\"#888\"/>",
            esc(title)
        );
        for i in 0..=4 {
            let v = self.y_max * f64::from(i) / 4.0;
            let y = self.py(v);
            let _ = write!(
                svg,
                "<line x1=\"{ax}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/>\
                 <text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{v:.0}</text>",
                ax + aw,
                ax - 4.0,
                y + 3.0
            );
        }
    }

    /// The y coordinate of the x axis' tick labels.
    pub fn tick_y(&self) -> f64 {
        self.ay + self.ah + 14.0
    }

    /// The axis labels.
    pub fn axis_labels(&self, svg: &mut String, x_label: &str, y_label: &str) {
        let _ = write!(
            svg,
            "<text class=\"axis-label x\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" \
             text-anchor=\"middle\">{}</text>\
             <text class=\"axis-label y\" x=\"14\" y=\"{:.1}\" font-size=\"12\" \
             text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
            self.ax + self.aw / 2.0,
            f64::from(HEIGHT) - 10.0,
            esc(x_label),
            self.ay + self.ah / 2.0,
            self.ay + self.ah / 2.0,
            esc(y_label)
        );
    }

    /// Opens the nested document the data is drawn in; the caller closes
    /// it (`</svg>`) before the legend.
    pub fn open_data(&self, svg: &mut String) {
        let _ = write!(
            svg,
            "<svg x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\">"
        );
    }

    /// Opens the legend with room for `rows` rows; returns its left edge
    /// and the baseline of its first row. The caller closes it (`</g>`).
    pub fn legend(&self, svg: &mut String, rows: usize) -> (f64, f64) {
        let (lx, ay) = (self.ax + self.aw + 12.0, self.ay);
        let lh = 10.0 + ROW * rows as f64;
        let _ = write!(
            svg,
            "<g class=\"legend\"><rect class=\"legend-box\" x=\"{lx}\" y=\"{ay}\" \
             width=\"{:.0}\" height=\"{lh:.0}\" fill=\"white\" stroke=\"#ccc\"/>",
            self.legend_w - 4.0
        );
        (lx, ay + ROW)
    }
}
