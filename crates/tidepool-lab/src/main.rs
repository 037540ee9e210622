//! `tidepool-lab`: the command line. See the crate docs of `tidepool_lab`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidepool_lab::report::table;
use tidepool_lab::{Options, PolicyKind, PressureSource, Progress, ScenarioKind, Settings};

/// Reproduces the seeds' findings on this machine: tidepool against the
/// QEMU coroutine pool policies, on their workloads, on real stacks.
#[derive(Parser, Debug)]
#[command(name = "tidepool-lab", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs the scenarios and prints a summary table.
    Run(RunArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Scenarios to run (repeat or comma-separate); default: all.
    #[arg(long, value_enum, value_delimiter = ',')]
    scenario: Vec<ScenarioKind>,
    /// Policies to run (repeat or comma-separate); default: all.
    #[arg(long, value_enum, value_delimiter = ',')]
    policy: Vec<PolicyKind>,
    /// Small sizes and short runs, for CI.
    #[arg(long)]
    quick: bool,
    /// Divide every 15 s period by this (default 100, 300 with --quick).
    #[arg(long)]
    time_scale: Option<f64>,
    /// Measured repeats per policy (default 3, 1 with --quick).
    #[arg(long)]
    repeats: Option<usize>,
    /// Where the pressure scenario's signal comes from: `real` (PSI under
    /// page-cache thrash in a 64 MiB cgroup: needs root, a cgroup v1 memory
    /// controller and PSI; the scenario fails if refused), `manual`
    /// (`tidepool::pressure::notify`), or `auto` (real, else manual, saying
    /// why). Default: auto, manual with --quick.
    #[arg(long, value_enum)]
    pressure_source: Option<PressureSource>,
    /// Write report.json and report.html into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

struct Bars {
    multi: MultiProgress,
    current: Mutex<Option<ProgressBar>>,
}

impl Bars {
    fn new(quiet: bool) -> Self {
        let multi = MultiProgress::new();
        if quiet {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        Bars {
            multi,
            current: Mutex::new(None),
        }
    }

    fn with(&self, f: impl FnOnce(&ProgressBar)) {
        if let Some(bar) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            f(bar);
        }
    }
}

impl Progress for Bars {
    fn scenario(&self, id: &str, runs: u64) {
        let bar = self.multi.add(ProgressBar::new(runs));
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>17} [{bar:30}] {pos}/{len} runs {elapsed:>4} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(id.to_owned());
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }

    fn run(&self, policy: PolicyKind, what: &str) {
        self.with(|b| b.set_message(format!("{policy} ({what})")));
    }

    fn run_done(&self) {
        self.with(|b| b.inc(1));
    }

    fn scenario_done(&self) {
        self.with(|b| b.finish_with_message("done"));
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Command::Run(args) = cli.command;
    let mut settings = Settings::new(args.quick);
    if let Some(scale) = args.time_scale {
        if !(scale.is_finite() && scale > 0.0) {
            eprintln!("--time-scale must be a positive number");
            return ExitCode::FAILURE;
        }
        settings.time_scale = scale;
    }
    if let Some(r) = args.repeats {
        settings.repeats = r.max(1);
    }
    if !args.policy.is_empty() {
        settings.policies = PolicyKind::ALL
            .into_iter()
            .filter(|p| args.policy.contains(p))
            .collect();
    }
    let scenarios = if args.scenario.is_empty() {
        ScenarioKind::ALL.to_vec()
    } else {
        ScenarioKind::ALL
            .into_iter()
            .filter(|s| args.scenario.contains(s))
            .collect()
    };
    let options = Options {
        scenarios,
        settings,
    };
    eprintln!(
        "tidepool-lab: {} scenario(s) x {} policies, 15 s periods scaled to {:?}",
        options.scenarios.len(),
        options.settings.policies.len(),
        Duration::from_secs(15).div_f64(options.settings.time_scale)
    );
    let pressure = args
        .pressure_source
        .unwrap_or_else(|| PressureSource::default_for(args.quick));
    let bars = Bars::new(args.quiet);
    let report = tidepool_lab::run_with_pressure_source(&options, pressure, &bars);
    drop(bars);
    println!("{}", table::render(&report));
    if let Some(dir) = &args.out {
        match report.write(dir) {
            Ok((json, html)) => {
                println!("wrote {} and {}", json.display(), html.display());
            }
            Err(e) => {
                eprintln!("could not write the report to {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
        }
    }
    let refused = tidepool_lab::pressure_source::refusals(&report);
    if !refused.is_empty() {
        for r in refused {
            eprintln!("{r}");
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
