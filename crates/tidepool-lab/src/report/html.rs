//! `report.html`: one self-contained page, tables and inline SVG plots
//! (plotters' SVG backend; no scripts, fonts or files beside it).

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::policy::PolicyKind;
use crate::report::table::{format_value, header};
use crate::report::{PolicyResult, Report, ScenarioReport, Series};

const PLOT_SIZE: (u32, u32) = (640, 300);

/// The colour of a policy's line, the same in every plot.
pub fn color(policy: PolicyKind) -> RGBColor {
    match policy {
        PolicyKind::None => RGBColor(120, 120, 120),
        PolicyKind::QemuFixed => RGBColor(230, 145, 30),
        PolicyKind::Qemu2021 => RGBColor(210, 40, 40),
        PolicyKind::Qemu2024 => RGBColor(40, 90, 200),
        PolicyKind::Tidepool => RGBColor(20, 150, 70),
    }
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A quantity plotted over time.
#[derive(Clone, Copy, Debug)]
pub enum Metric {
    /// Idle stacks.
    Idle,
    /// Process VMAs.
    Vmas,
    /// Process RSS, MiB.
    Rss,
    /// Completed requests per second, thousands.
    Throughput,
}

impl Metric {
    fn title(self) -> &'static str {
        match self {
            Metric::Idle => "idle stacks",
            Metric::Vmas => "VMAs (whole process)",
            Metric::Rss => "RSS, MiB (whole process)",
            Metric::Throughput => "throughput, k requests/s",
        }
    }

    fn values(self, s: &Series) -> Vec<f64> {
        match self {
            Metric::Idle => s.idle.iter().map(|&v| v as f64).collect(),
            Metric::Vmas => s.vmas.iter().map(|&v| v as f64).collect(),
            Metric::Rss => s.rss_kib.iter().map(|&v| v as f64 / 1024.0).collect(),
            Metric::Throughput => s.throughput.iter().map(|&v| v / 1e3).collect(),
        }
    }
}

/// One plot as an SVG document: `metric` over time, a line per policy.
///
/// # Errors
///
/// If plotters fails to draw (it should not with the SVG backend).
pub fn plot(
    scenario: &ScenarioReport,
    metric: Metric,
    limit: Option<(f64, &str)>,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let lines: Vec<(&PolicyResult, Vec<(f64, f64)>)> = scenario
            .results
            .iter()
            .map(|r| {
                let pts = r
                    .series
                    .t_ms
                    .iter()
                    .copied()
                    .zip(metric.values(&r.series))
                    .collect();
                (r, pts)
            })
            .collect();
        let x_max = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|&(x, _)| x))
            .fold(1.0f64, f64::max);
        let mut y_max = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
            .fold(0.0f64, f64::max);
        if let Some((l, _)) = limit {
            y_max = y_max.max(l);
        }
        let y_max = if y_max <= 0.0 { 1.0 } else { y_max * 1.08 };
        let mut chart = ChartBuilder::on(&root)
            .caption(metric.title(), ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("time since the run started (ms)")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| e.to_string())?;
        // Phase changes of the first policy's run, as faint verticals.
        if let Some(first) = scenario.results.first() {
            for e in &first.series.events {
                if e.t_ms > 0.0 {
                    chart
                        .draw_series(LineSeries::new(
                            [(e.t_ms, 0.0), (e.t_ms, y_max)],
                            RGBColor(190, 190, 190).stroke_width(1),
                        ))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        if let Some((l, label)) = limit {
            let red = RGBColor(150, 0, 0);
            chart
                .draw_series(LineSeries::new([(0.0, l), (x_max, l)], red.stroke_width(1)))
                .map_err(|e| e.to_string())?
                .label(label.to_owned())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], red));
        }
        for (r, pts) in lines {
            let c = color(r.policy);
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(r.policy.name())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1340px;margin:1em auto;color:#222}\
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:2px solid #ddd}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px}\
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.seed{background:#f8f8f0;border-left:4px solid #cc9;padding:.4em .8em}\
.plots{display:grid;grid-template-columns:1fr 1fr;gap:8px}.plots svg{width:100%;height:auto}\
.note{color:#555}.fail{color:#a00}.sw{display:inline-block;width:12px;height:12px;margin-right:4px}";

/// The whole page.
pub fn render(report: &Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tidepool-lab report</title>\
         <style>{STYLE}</style></head><body><h1>tidepool-lab report</h1>"
    );
    let m = &report.machine;
    let _ = write!(
        h,
        "<p>{tool}, {kind} run, every 15 s period divided by {scale} ({ms:.0} ms), \
         {rep} measured repeat(s) per policy after warm-up; tables show medians.</p>\
         <table><tr><th>CPU</th><td>{cpu}</td></tr><tr><th>cores</th><td>{cores}</td></tr>\
         <tr><th>memory</th><td>{mem} MiB</td></tr><tr><th>kernel</th><td>Linux {kernel}</td></tr>\
         <tr><th>vm.max_map_count</th><td>{mmc}</td></tr><tr><th>page size</th><td>{page}</td></tr>\
         <tr><th>PSI</th><td>{psi}</td></tr><tr><th>rustc</th><td>{rustc}</td></tr>\
         <tr><th>build</th><td>{build}</td></tr></table>",
        tool = esc(&report.tool),
        kind = if report.quick { "quick" } else { "full" },
        scale = report.time_scale,
        ms = 15_000.0 / report.time_scale,
        rep = report.repeats,
        cpu = esc(&m.cpu_model),
        cores = m.cores,
        mem = m.memory_mib,
        kernel = esc(&m.kernel),
        mmc = m.max_map_count,
        page = m.page_size,
        psi = if m.psi {
            "/proc/pressure/memory present"
        } else {
            "absent"
        },
        rustc = esc(m.rustc.as_deref().unwrap_or("unknown")),
        build = if m.optimized { "release" } else { "debug" },
    );
    if !report.notes.is_empty() {
        h.push_str("<ul class=\"note\">");
        for n in &report.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
    h.push_str("<p>");
    for p in PolicyKind::ALL {
        let c = color(p);
        let _ = write!(
            h,
            "<span class=\"sw\" style=\"background:rgb({},{},{})\"></span><b>{}</b>: {} &nbsp; ",
            c.0,
            c.1,
            c.2,
            p.name(),
            esc(p.source())
        );
    }
    h.push_str("</p>");
    for s in &report.scenarios {
        scenario(&mut h, s, m.max_map_count);
    }
    h.push_str("</body></html>\n");
    h
}

fn scenario(h: &mut String, s: &ScenarioReport, max_map_count: u64) {
    let _ = write!(
        h,
        "<h2 id=\"{id}\">{title}</h2><p class=\"seed\">{seed}</p><p>{workload} \
         Period of every periodic policy: {ms:.0} ms.</p>",
        id = esc(&s.id),
        title = esc(&s.title),
        seed = esc(&s.seed),
        workload = esc(&s.workload),
        ms = s.reclaim_interval_ms,
    );
    h.push_str("<table><tr><th>policy</th>");
    for c in &s.columns {
        let _ = write!(h, "<th>{}</th>", esc(&header(&c.label, c.format)));
    }
    h.push_str("</tr>");
    for r in &s.results {
        let _ = write!(h, "<tr><td>{}</td>", r.policy.name());
        for c in &s.columns {
            let _ = write!(
                h,
                "<td class=\"n\">{}</td>",
                format_value(r.metric(&c.key), c.format)
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    for r in &s.results {
        if let Some(f) = &r.first_failure {
            let _ = write!(
                h,
                "<p class=\"fail\">{}: {} failed creation(s) over all repeats; the first at {:.0} ms with {} VMAs: {}</p>",
                r.policy,
                r.failures,
                f.t_ms,
                f.vmas,
                esc(&f.message)
            );
        }
    }
    if !s.notes.is_empty() {
        h.push_str("<ul class=\"note\">");
        for n in &s.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
    h.push_str("<details><summary>parameters</summary><table>");
    for (k, v) in &s.params {
        let _ = write!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    h.push_str("</table></details><div class=\"plots\">");
    for metric in [Metric::Idle, Metric::Vmas, Metric::Rss, Metric::Throughput] {
        let limit = match metric {
            Metric::Vmas if s.id == "map-count" && max_map_count > 0 => {
                Some((max_map_count as f64, "vm.max_map_count"))
            }
            _ => None,
        };
        match plot(s, metric, limit) {
            Ok(svg) => h.push_str(strip_xml_header(&svg)),
            Err(e) => {
                let _ = write!(h, "<p class=\"fail\">plot failed: {}</p>", esc(&e));
            }
        }
    }
    h.push_str("</div>");
    if let Some(first) = s.results.first() {
        h.push_str("<p class=\"note\">Grey verticals: ");
        let labels: Vec<String> = first
            .series
            .events
            .iter()
            .map(|e| format!("{:.0} ms {}", e.t_ms, esc(&e.label)))
            .collect();
        h.push_str(&labels.join("; "));
        let _ = write!(h, " (run of {}).</p>", first.policy);
    }
}

fn strip_xml_header(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}
