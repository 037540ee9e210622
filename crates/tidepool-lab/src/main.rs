//! `tidepool-lab`: the command line. See the crate docs of `tidepool_lab`.

use std::process::ExitCode;
use std::sync::Mutex;

use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidepool_lab::cli::{self, Cli, Command};
use tidepool_lab::report::table;
use tidepool_lab::scenario::pressure::refusals;
use tidepool_lab::{cleanup, PolicyKind, Progress};

/// One progress bar per scenario, at most 100 columns.
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
                "{prefix:>16} [{bar:24}] {pos:>2}/{len:2} {elapsed:>4} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(id.to_owned());
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }

    fn run(&self, policy: PolicyKind, what: &str) {
        self.with(|b| b.set_message(format!("{policy}, {what}")));
    }

    fn run_done(&self) {
        self.with(|b| b.inc(1));
    }

    fn scenario_done(&self) {
        self.with(|b| b.finish_with_message("done"));
    }
}

fn main() -> ExitCode {
    // Before any pool exists, while the process has one thread: tidepool
    // then watches no machine-wide pressure source on its own; the lab
    // watches them itself, behind a gate that only the pressure scenario
    // opens (tidepool_lab::source::psi), so that every other scenario gives
    // every policy the same conditions.
    std::env::set_var("TIDEPOOL_PRESSURE", "manual");
    let Cli {
        command: Command::Run(args),
    } = Cli::parse();
    let checked = match cli::check(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tidepool-lab: error: {e}");
            return ExitCode::from(2);
        }
    };
    // From here on the run may leave things behind (the pressure
    // scenario's thrash): undo them however the process ends.
    let _cleanup = cleanup::ExitGuard;
    if let Err(e) = cleanup::handle_signals() {
        eprintln!("tidepool-lab: warning: cannot handle SIGINT/SIGTERM ({e}); an interrupted run may leave its thrash cgroup and file behind");
    }
    eprintln!("{}", cli::header(&checked.options));
    let bars = Bars::new(checked.quiet);
    let report = tidepool_lab::run(&checked.options, &bars);
    drop(bars);
    print!("{}", table::render(&report));
    match report.write(&checked.out) {
        Ok((json, html)) => println!(
            "details, plots and notes: {}\n(data: {})",
            html.display(),
            json.display()
        ),
        Err(e) => {
            eprintln!(
                "tidepool-lab: error: could not write the report to {}: {e}",
                checked.out.display()
            );
            return ExitCode::FAILURE;
        }
    }
    let refused = refusals(&report.scenarios);
    if !refused.is_empty() {
        for r in refused {
            eprintln!("tidepool-lab: {r}");
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
