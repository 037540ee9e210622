//! The command line: every argument is checked here, before any work, so
//! that a mistake costs a second, not a whole run.
//!
//! * `--out`: the directory is made if missing, and a file is written to it
//!   and removed again.
//! * `--time-scale`: the scaled 15 s period must be one tidepool accepts
//!   (at least [`tidepool::MIN_RECLAIM_INTERVAL`]); a scale that would make
//!   a policy unbuildable is refused, never silently dropped. Every selected
//!   policy is then built once with the scaled settings.
//! * `--repeats`: at least 1.
//! * `--scenario`, `--policy`, `--pressure-source`: names clap knows; an
//!   unknown one is refused with the list of valid ones.
//! * `--pressure-source real` with the pressure scenario: every step of the
//!   real source is tried now.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::scenario::SEED_PERIOD;
use crate::source::PressureSource;
use crate::{Options, PolicyKind, ScenarioKind, Settings};

/// The most repeats accepted.
pub const MAX_REPEATS: usize = 100;
/// The smallest time scale accepted: the seeds' own 15 s periods.
pub const MIN_TIME_SCALE: f64 = 1.0;

/// The largest time scale accepted: the scaled 15 s period is then
/// tidepool's shortest reclaim interval.
pub fn max_time_scale() -> f64 {
    SEED_PERIOD.as_secs_f64() / tidepool::MIN_RECLAIM_INTERVAL.as_secs_f64()
}

/// Reproduces the seeds' findings on this machine: tidepool against the
/// QEMU coroutine pool policies, on their workloads, on real stacks.
#[derive(Parser, Debug)]
#[command(name = "tidepool-lab", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Runs the scenarios, prints a compact table and writes report.json
    /// and report.html.
    Run(RunArgs),
}

/// `tidepool-lab run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Scenarios to run (repeat or comma-separate); default: all.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenario: Vec<ScenarioKind>,
    /// Policies to run (repeat or comma-separate); default: all. Each
    /// scenario runs those it has: dfly-before and dfly-2017 run in
    /// mass-teardown only, the stack pools everywhere else (tidepool in
    /// both).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub policy: Vec<PolicyKind>,
    /// Small sizes and short runs, for CI.
    #[arg(long)]
    pub quick: bool,
    /// Divide every 15 s period by this, from 1 to 15000 (default 100, 300
    /// with --quick).
    #[arg(long, value_parser = parse_time_scale, allow_negative_numbers = true)]
    pub time_scale: Option<f64>,
    /// Measured repeats per policy, from 1 to 100 (default 3, 1 with
    /// --quick).
    #[arg(long, value_parser = parse_repeats, allow_negative_numbers = true)]
    pub repeats: Option<usize>,
    /// Where the pressure scenario's signal comes from: `real` (PSI under
    /// page-cache thrash in a 64 MiB cgroup: needs root, a cgroup v1 memory
    /// controller and PSI; refused up front if any is missing), `manual`
    /// (`tidepool::pressure::notify`), or `auto` (real, else manual, saying
    /// why). Default: auto, manual with --quick.
    #[arg(long, value_enum)]
    pub pressure_source: Option<PressureSource>,
    /// Write report.json and report.html into this directory (made if
    /// missing).
    #[arg(long, default_value = "lab-out")]
    pub out: PathBuf,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

fn parse_time_scale(s: &str) -> Result<f64, String> {
    let scale: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    check_time_scale(scale)?;
    Ok(scale)
}

/// Refuses a time scale outside `[MIN_TIME_SCALE, max_time_scale()]`.
///
/// # Errors
///
/// Why, with the accepted range.
pub fn check_time_scale(scale: f64) -> Result<(), String> {
    let max = max_time_scale();
    let range = format!("use a value from {MIN_TIME_SCALE} to {max}");
    if !scale.is_finite() {
        return Err(format!("must be a finite number; {range}"));
    }
    if scale < MIN_TIME_SCALE {
        return Err(format!(
            "{scale} would make the 15 s period longer than the seeds' own ({:?}), and a full \
             run would take hours; {range}",
            SEED_PERIOD.div_f64(scale.max(1e-9))
        ));
    }
    if scale > max {
        let period = SEED_PERIOD.div_f64(scale);
        return Err(format!(
            "{scale} would make the 15 s period {period:?}, shorter than the shortest reclaim \
             interval tidepool accepts ({:?}): the tidepool policy could not run; {range}",
            tidepool::MIN_RECLAIM_INTERVAL
        ));
    }
    Ok(())
}

fn parse_repeats(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if n == 0 {
        return Err(
            "0: every policy needs at least one measured run for the report to say anything"
                .to_owned(),
        );
    }
    if n > MAX_REPEATS {
        return Err(format!("{n}: at most {MAX_REPEATS}"));
    }
    Ok(n)
}

/// A run, checked and ready.
#[derive(Debug)]
pub struct Checked {
    /// What to run.
    pub options: Options,
    /// Where the report goes (exists and is writable).
    pub out: PathBuf,
    /// No progress bars.
    pub quiet: bool,
}

/// Checks every argument (see the module docs) and makes `--out`.
///
/// # Errors
///
/// The first argument that cannot work, named, and why.
pub fn check(args: RunArgs) -> Result<Checked, String> {
    let mut settings = Settings::new(args.quick);
    if let Some(scale) = args.time_scale {
        check_time_scale(scale).map_err(|e| format!("--time-scale {e}"))?;
        settings.time_scale = scale;
    }
    if let Some(r) = args.repeats {
        parse_repeats(&r.to_string()).map_err(|e| format!("--repeats {e}"))?;
        settings.repeats = r;
    }
    if !args.policy.is_empty() {
        settings.policies = PolicyKind::EVERY
            .into_iter()
            .filter(|p| args.policy.contains(p))
            .collect();
    }
    if let Some(source) = args.pressure_source {
        settings.pressure_source = source;
    }
    let scenarios: Vec<ScenarioKind> = if args.scenario.is_empty() {
        ScenarioKind::ALL.to_vec()
    } else {
        ScenarioKind::ALL
            .into_iter()
            .filter(|s| args.scenario.contains(s))
            .collect()
    };
    check_policies_build(&settings)?;
    check_out(&args.out)?;
    if scenarios.contains(&ScenarioKind::Pressure)
        && settings.pressure_source == PressureSource::Real
    {
        crate::source::prepare(PressureSource::Real).map_err(|why| {
            format!(
                "--pressure-source real: the kernel refused a step of the real source: {why} \
                 (use `auto` to fall back to the manual source, saying why)"
            )
        })?;
    }
    Ok(Checked {
        options: Options {
            scenarios,
            settings,
        },
        out: args.out,
        quiet: args.quiet,
    })
}

/// Builds every selected policy once with the shortest period a scenario
/// uses, so that no policy is dropped at run time.
fn check_policies_build(settings: &Settings) -> Result<(), String> {
    let env = settings.env(4096, settings.interval());
    for p in settings.policies.iter().filter(|p| p.is_pool()) {
        p.build(&env).map_err(|e| {
            format!(
                "--time-scale {}: the {p} policy cannot be built with a {:?} period: {e}",
                settings.time_scale,
                settings.interval()
            )
        })?;
    }
    Ok(())
}

/// Makes `dir` if missing and checks that a file can be written in it.
///
/// # Errors
///
/// Which step failed, and why.
pub fn check_out(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("--out {}: cannot make the directory: {e}", dir.display()))?;
    let probe = dir.join(format!(".tidepool-lab-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"tidepool-lab\n")
        .map_err(|e| format!("--out {}: cannot write there: {e}", dir.display()))?;
    std::fs::remove_file(&probe)
        .map_err(|e| format!("--out {}: cannot remove a file there: {e}", dir.display()))?;
    Ok(())
}

/// The first line the CLI prints, once every argument is checked.
pub fn header(options: &Options) -> String {
    let s = &options.settings;
    format!(
        "tidepool-lab: {} run, {} scenario(s) x {} policies, {} repeat(s), 15 s periods -> {}",
        if s.quick { "quick" } else { "full" },
        options.scenarios.len(),
        s.policies.len(),
        s.repeats,
        crate::report::format::Human(Duration::from_secs(15).div_f64(s.time_scale))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut all = vec!["tidepool-lab", "run"];
        all.extend_from_slice(list);
        Cli::try_parse_from(all).map(|c| match c.command {
            Command::Run(a) => a,
        })
    }

    fn refused(list: &[&str]) -> String {
        match args(list) {
            Err(e) => e.to_string(),
            Ok(a) => check(a).expect_err("must be refused"),
        }
    }

    #[test]
    fn repeats_zero_is_refused_not_rounded_up() {
        let e = refused(&["--repeats", "0"]);
        assert!(e.contains("--repeats"), "{e}");
        assert!(e.contains("at least one measured run"), "{e}");
        assert!(refused(&["--repeats", "101"]).contains("at most 100"));
        assert!(refused(&["--repeats", "two"]).contains("not a whole number"));
    }

    #[test]
    fn a_time_scale_that_would_drop_tidepool_is_refused() {
        let e = refused(&["--time-scale", "1e9"]);
        assert!(e.contains("--time-scale"), "{e}");
        assert!(e.contains("tidepool policy could not run"), "{e}");
        assert!(e.contains("from 1 to 15000"), "{e}");
        for bad in ["0", "-3", "0.5", "inf", "NaN", "abc", "15001"] {
            let e = refused(&["--time-scale", bad]);
            assert!(e.contains("--time-scale"), "{bad}: {e}");
        }
        // The bounds themselves are accepted.
        assert_eq!(check_time_scale(max_time_scale()), Ok(()));
        assert_eq!(check_time_scale(MIN_TIME_SCALE), Ok(()));
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let e = refused(&["--scenario", "fio,no-such-scenario"]);
        for name in ScenarioKind::names() {
            assert!(e.contains(name), "{name} missing from: {e}");
        }
        let e = refused(&["--policy", "qemu-2099"]);
        for p in PolicyKind::EVERY {
            assert!(e.contains(p.name()), "{p} missing from: {e}");
        }
        let e = refused(&["--pressure-source", "psi"]);
        assert!(
            e.contains("auto") && e.contains("real") && e.contains("manual"),
            "{e}"
        );
    }

    #[test]
    fn out_must_be_makeable_and_writable() {
        // Under a regular file: the directory cannot be made.
        let file = std::env::temp_dir().join(format!("tidepool-lab-cli-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let under = file.join("report");
        let e = refused(&["--out", under.to_str().unwrap()]);
        assert!(
            e.contains("--out") && e.contains("cannot make the directory"),
            "{e}"
        );
        std::fs::remove_file(&file).unwrap();
        // /proc takes no new files, even from root.
        let e = refused(&["--out", "/proc/tidepool-lab-test"]);
        assert!(e.contains("--out"), "{e}");
        // A missing directory that can be made is made.
        let dir = std::env::temp_dir().join(format!("tidepool-lab-cli-ok-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ok = check(args(&["--quick", "--out", dir.to_str().unwrap()]).unwrap()).unwrap();
        assert!(dir.is_dir());
        assert_eq!(ok.out, dir);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the probe is removed"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn selections_keep_report_order() {
        let dir = std::env::temp_dir().join(format!("tidepool-lab-cli-sel-{}", std::process::id()));
        let a = args(&[
            "--quick",
            "--scenario",
            "pressure,fio",
            "--policy",
            "tidepool",
            "--policy",
            "none",
            "--out",
            dir.to_str().unwrap(),
        ])
        .unwrap();
        let c = check(a).unwrap();
        assert_eq!(
            c.options.scenarios,
            [ScenarioKind::Fio, ScenarioKind::Pressure]
        );
        assert_eq!(
            c.options.settings.policies,
            [PolicyKind::None, PolicyKind::Tidepool]
        );
        assert_eq!(c.options.settings.pressure_source, PressureSource::Manual);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
