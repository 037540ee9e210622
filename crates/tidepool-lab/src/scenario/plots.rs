//! The plots over time the scenarios share: each quantity with the title
//! and the axis labels it has wherever it is drawn, so that the same plot
//! reads the same in every section. A scenario picks its plots from here
//! (or makes its own) and hands them to the report in
//! [`ScenarioReport::plots`](crate::report::ScenarioReport::plots).

use crate::report::plot::{Metric, Spec};
use crate::report::Figure;

/// The x axis of a plot over a whole run, with its unit.
pub const SINCE_START: &str = "time since the run started (s)";

/// The stack-pool scenarios' plots, in order: requests, idle stacks, and
/// what they cost the process.
pub const STANDARD: [Metric; 4] = [Metric::Throughput, Metric::Idle, Metric::Rss, Metric::Vmas];

/// `metric` over time, against `x_label`, with its usual title and y axis
/// label.
pub fn over_time(metric: Metric, x_label: &str) -> Spec {
    let (title, y_label) = match metric {
        Metric::Idle => ("Idle stacks (pooled, not in use)", "idle stacks (count)"),
        Metric::Vmas => ("VMAs of the whole process", "VMAs (count)"),
        Metric::Rss => ("Resident memory of the whole process", "RSS (MiB)"),
        Metric::IdleResident => (
            "Idle stacks' resident memory (tidepool, mincore)",
            "idle resident (MiB)",
        ),
        Metric::Throughput => ("Throughput", "requests completed (per s)"),
        Metric::ProbeGetPut => ("Probe: get + put on another pool", "latency (µs)"),
        Metric::ProbeMap => ("Probe: map + unmap a 64 KiB region", "latency (ms)"),
    };
    Spec {
        title: title.to_owned(),
        x_label: x_label.to_owned(),
        y_label: y_label.to_owned(),
        metric,
        limit: None,
    }
}

/// Each of `metrics` over a whole run, in order.
pub fn over_run(metrics: &[Metric]) -> Vec<Figure> {
    metrics
        .iter()
        .map(|&m| Figure::OverTime(over_time(m, SINCE_START)))
        .collect()
}
