//! What the terminal shows at the end of a run: one compact table per
//! scenario and the per-seed summary, every line at most [`MAX_COLUMNS`]
//! characters. Everything else (notes, per-run numbers, plots) is in the
//! JSON and HTML reports.

use std::fmt::Write as _;

use crate::policy::PolicyKind;
use crate::report::format;
use crate::report::summary::Ratio;
use crate::report::{Format, Report, ScenarioReport, SeedStatus};

/// The widest line printed.
pub const MAX_COLUMNS: usize = 100;

/// A metric as the tables show it.
pub fn format_value(value: f64, format: Format) -> String {
    if !value.is_finite() {
        return "–".to_owned();
    }
    match format {
        Format::Count => format::count(value),
        Format::KiloPerSec => format::si(value),
        Format::MiB => format!("{:.1}", value / (1024.0 * 1024.0)),
        Format::Millis if value == 0.0 => "–".to_owned(),
        Format::Millis => format::millis(value),
        Format::Micros => format::micros(value),
        Format::Ratio => format!("{value:.2}"),
        Format::Percent => format!("{:.0} %", value * 100.0),
    }
}

/// A column header with its unit.
pub fn header(label: &str, format: Format) -> String {
    match format {
        Format::MiB => format!("{label} (MiB)"),
        _ => label.to_owned(),
    }
}

/// Cuts `text` to `width` characters, marking the cut with `…`.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

fn pad(out: &mut String, cell: &str, width: usize, right: bool) {
    let n = cell.chars().count();
    let fill = " ".repeat(width.saturating_sub(n));
    if right {
        out.push_str(&fill);
        out.push_str(cell);
    } else {
        out.push_str(cell);
        out.push_str(&fill);
    }
}

/// One scenario's compact table: a row per policy, the columns marked for
/// the terminal, and the pressure signals each policy received.
pub fn scenario_table(s: &ScenarioReport) -> String {
    let cols: Vec<(&str, &str, Format)> = s
        .columns
        .iter()
        .filter_map(|c| c.short.as_deref().map(|h| (c.key.as_str(), h, c.format)))
        .collect();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut head = vec!["policy".to_owned()];
    head.extend(cols.iter().map(|(_, h, _)| (*h).to_owned()));
    head.push("signals".to_owned());
    rows.push(head);
    for r in &s.results {
        let mut row = vec![r.policy.name().to_owned()];
        row.extend(cols.iter().map(|(k, _, f)| format_value(r.metric(k), *f)));
        row.push(r.pressure_received().to_string());
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        out.push_str("  ");
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            pad(&mut out, cell, widths[i], i > 0);
        }
        out.push('\n');
        if n == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let _ = writeln!(out, "  {}", "-".repeat(total));
        }
    }
    out
}

/// The per-seed summary, a line per claim.
pub fn summary(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Seeds: does the lab reproduce each one, and does tidepool match its policy?"
    );
    let _ = writeln!(
        out,
        "  {:<19}    {:<42}  {:>12}  {:>14}",
        "seed", "claim (✓ holds, ✗ does not)", "published", "lab"
    );
    for row in &report.summary {
        let name = fit(&format!("{} {}", row.seed, row.short), 19);
        if row.claims.is_empty() {
            let why = match &row.status {
                SeedStatus::Measured => String::new(),
                _ => row.status_text(),
            };
            let _ = writeln!(out, "  {name:<19} –  {}", fit(&why, 75));
            continue;
        }
        for (i, c) in row.claims.iter().enumerate() {
            let seed = if i == 0 { name.as_str() } else { "" };
            let _ = writeln!(
                out,
                "  {seed:<19} {}  {:<42}  {:>12}  {:>14}",
                c.verdict.mark(),
                fit(&c.claim, 42),
                fit(&c.published, 12),
                fit(&c.measured, 14)
            );
        }
    }
    out
}

/// For a scenario measured in requests per second (fio, fio-cross-thread):
/// tidepool against the best seed pool there, every repeat shown (repeat
/// `i` of each policy ran in the same rotation round), the ratio of their
/// CPU time per request (medians), and the idle stacks each left at the end
/// (the range over repeats).
fn against_best_seed(s: &ScenarioReport) -> Option<String> {
    const RATE: &str = "req_per_s";
    let ours = s.result(PolicyKind::Tidepool)?;
    let best = [
        PolicyKind::QemuFixed,
        PolicyKind::Qemu2021,
        PolicyKind::Qemu2024,
    ]
    .into_iter()
    .filter_map(|p| s.result(p))
    .filter(|r| r.metric(RATE).is_finite())
    .max_by(|a, b| a.metric(RATE).total_cmp(&b.metric(RATE)))?;
    let ratio = Ratio::of(ours, best, RATE)?;
    let per: Vec<String> = ours
        .per_run(RATE)
        .iter()
        .zip(best.per_run(RATE))
        .map(|(a, b)| format!("{:.2}", a / b))
        .collect();
    let idle = |r: &crate::report::PolicyResult| {
        let v = r.per_run("final_idle");
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if lo == hi {
            format::count(lo)
        } else {
            format!("{}–{}", format::count(lo), format::count(hi))
        }
    };
    let cpu = Ratio::of(ours, best, "cpu_us_per_req").map_or_else(|| "–".to_owned(), |r| r.short());
    Some(format!(
        "  tidepool/{}: {} req/s ({}), {cpu} CPU/req; final idle {} vs {}",
        best.policy,
        ratio.short(),
        per.join(" "),
        idle(ours),
        idle(best)
    ))
}

/// Everything the terminal shows after the progress bars.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let m = &report.machine;
    let _ = writeln!(
        out,
        "{}",
        fit(
            &format!(
                "{}: {} run, 15 s periods / {} = {:.0} ms, {} repeat(s) per policy, medians",
                report.tool,
                if report.quick { "quick" } else { "full" },
                report.time_scale,
                15_000.0 / report.time_scale,
                report.repeats
            ),
            MAX_COLUMNS
        )
    );
    let _ = writeln!(
        out,
        "{}",
        fit(&format!("machine: {}", m.summary()), MAX_COLUMNS)
    );
    let _ = writeln!(
        out,
        "{}",
        fit(
            &format!(
                "pressure: {}",
                if report.pressure_isolated {
                    "machine-wide signals reach pools only after the pressure scenario's signal"
                } else {
                    "NOT isolated: machine-wide signals may reach tidepool anywhere (see report)"
                }
            ),
            MAX_COLUMNS
        )
    );
    for s in &report.scenarios {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{}",
            fit(
                &format!(
                    "{} (period {})",
                    s.title,
                    format::millis(s.reclaim_interval_ms)
                ),
                MAX_COLUMNS
            )
        );
        if s.results.is_empty() {
            for n in &s.notes {
                let _ = writeln!(out, "  {}", fit(n, MAX_COLUMNS - 2));
            }
            continue;
        }
        out.push_str(&scenario_table(s));
        let (raised, withheld) = s.machine_signals();
        let _ = writeln!(
            out,
            "  signals: received by the policy, all runs; machine: {raised} raised, {withheld} \
             withheld by the gate"
        );
        if let Some(line) = against_best_seed(s) {
            let _ = writeln!(out, "{}", fit(&line, MAX_COLUMNS));
        }
        for r in &s.results {
            if let Some(f) = r.first_failure() {
                let _ = writeln!(
                    out,
                    "{}",
                    fit(
                        &format!(
                            "  {}: {} failed creation(s); first at {} with {} VMAs",
                            r.policy,
                            r.failures,
                            format::millis(f.t_ms),
                            format::count(f.vmas as f64)
                        ),
                        MAX_COLUMNS
                    )
                );
            }
        }
    }
    let _ = writeln!(out);
    out.push_str(&summary(report));
    out
}
