//! The summary table printed at the end of a run.

use std::fmt::Write as _;

use crate::report::{Format, Report, ScenarioReport};

/// A metric as the table shows it.
pub fn format_value(value: f64, format: Format) -> String {
    if value.is_nan() {
        return "-".to_owned();
    }
    match format {
        Format::Count => format!("{}", value.round() as i64),
        Format::KiloPerSec => format!("{:.1}k", value / 1e3),
        Format::MiB => format!("{:.1}", value / (1024.0 * 1024.0)),
        Format::Millis if value == 0.0 => "-".to_owned(),
        Format::Millis => format!("{value:.0} ms"),
    }
}

/// A column header with its unit.
pub fn header(label: &str, format: Format) -> String {
    match format {
        Format::MiB => format!("{label} (MiB)"),
        _ => label.to_owned(),
    }
}

/// One scenario's table: a row per policy.
pub fn scenario_table(s: &ScenarioReport) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut head = vec!["policy".to_owned()];
    head.extend(s.columns.iter().map(|c| header(&c.label, c.format)));
    rows.push(head);
    for r in &s.results {
        let mut row = vec![r.policy.name().to_owned()];
        row.extend(
            s.columns
                .iter()
                .map(|c| format_value(r.metric(&c.key), c.format)),
        );
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        for (i, cell) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "  {cell:<w$}", w = widths[i]);
            } else {
                let _ = write!(out, "  {cell:>w$}", w = widths[i]);
            }
        }
        out.push('\n');
        if n == 0 {
            let total: usize = widths.iter().map(|w| w + 2).sum();
            let _ = writeln!(out, "  {}", "-".repeat(total.saturating_sub(2)));
        }
    }
    out
}

/// The whole summary: machine, settings, then every scenario.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let m = &report.machine;
    let _ = writeln!(out, "{}", report.tool);
    let _ = writeln!(out, "machine: {}", m.summary());
    let _ = writeln!(
        out,
        "settings: {} run, time scale {} (15 s periods -> {:.0} ms), {} measured repeat(s) per \
         policy, medians shown",
        if report.quick { "quick" } else { "full" },
        report.time_scale,
        15_000.0 / report.time_scale,
        report.repeats
    );
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for s in &report.scenarios {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "== {} (period {:.0} ms)",
            s.title, s.reclaim_interval_ms
        );
        let _ = writeln!(out, "   {}", s.seed);
        out.push_str(&scenario_table(s));
        for r in &s.results {
            if let Some(f) = &r.first_failure {
                let _ = writeln!(
                    out,
                    "  {}: first failed creation at {:.0} ms with {} VMAs: {}",
                    r.policy, f.t_ms, f.vmas, f.message
                );
            }
        }
        for note in &s.notes {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    out
}
