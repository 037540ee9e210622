//! `--quick` runs of the fio, fio-cross-thread, spike-then-idle, pressure
//! and mass-teardown scenarios, every policy, as the CLI runs them; checked for
//! structure and for invariants that hold whatever the machine's speed.
//! (map-count has its own test binary: it uses up this process's VMAs.)
//! The quick runs use the manual pressure source; one test runs the
//! pressure scenario again with `auto` (real PSI where the kernel allows).
//! Like the CLI, the process runs with `TIDEPOOL_PRESSURE=manual`, so that
//! machine-wide pressure reaches tidepool's pools only through the lab's
//! gate, in the pressure scenario.

use std::sync::OnceLock;

use tidepool_lab::policy::qemu_2024::COROUTINE_POOL_BATCH_MAX_SIZE;
use tidepool_lab::report::{PolicyResult, ScenarioReport, SeedStatus, Verdict};
use tidepool_lab::source::{MANUAL_LABEL, REAL_LABEL};
use tidepool_lab::{Options, PolicyKind, PressureSource, Report, ScenarioKind, Settings, Silent};

fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        // Before the first pool of this process (every test goes through
        // here first).
        std::env::set_var("TIDEPOOL_PRESSURE", "manual");
        let options = Options {
            scenarios: vec![
                ScenarioKind::Fio,
                ScenarioKind::FioCrossThread,
                ScenarioKind::FioPressure,
                ScenarioKind::SpikeThenIdle,
                ScenarioKind::Pressure,
                ScenarioKind::MassTeardown,
                ScenarioKind::MassTeardownFull,
            ],
            settings: Settings::new(true),
        };
        tidepool_lab::run(&options, &Silent)
    })
}

fn scenario(id: &str) -> &'static ScenarioReport {
    report()
        .scenario(id)
        .unwrap_or_else(|| panic!("no scenario {id} in the report"))
}

fn result(s: &ScenarioReport, p: PolicyKind) -> &PolicyResult {
    s.result(p)
        .unwrap_or_else(|| panic!("{}: no result for {p}", s.id))
}

/// What every scenario's results must look like.
fn check_structure(s: &ScenarioReport) {
    let policies: Vec<PolicyKind> = s.results.iter().map(|r| r.policy).collect();
    assert_eq!(policies, PolicyKind::ALL, "{}: one result per policy", s.id);
    assert!(s.reclaim_interval_ms > 0.0);
    for r in &s.results {
        let ser = r.median_series().expect("a median run");
        let n = ser.t_ms.len();
        assert!(n >= 3, "{} {}: {n} samples", s.id, r.policy);
        for (name, len) in [
            ("idle", ser.idle.len()),
            ("live", ser.live.len()),
            ("created", ser.created.len()),
            ("vmas", ser.vmas.len()),
            ("rss", ser.rss_kib.len()),
            ("vsz", ser.vsz_kib.len()),
            ("throughput", ser.throughput.len()),
        ] {
            assert_eq!(len, n, "{} {}: {name} column", s.id, r.policy);
        }
        assert!(
            ser.t_ms.windows(2).all(|w| w[0] <= w[1]),
            "time goes forward"
        );
        assert!(
            ser.created.windows(2).all(|w| w[0] <= w[1]),
            "created only grows"
        );
        assert!(ser.vmas.iter().all(|&v| v > 0), "VMAs were read");
        assert!(ser.rss_kib.iter().all(|&v| v > 0), "RSS was read");
        for c in &s.columns {
            let v = r.metric(&c.key);
            // `given_back` is a signed share: the process's VSZ may grow
            // after the burst (other mappings), which reads as negative.
            let floor = if c.key == "given_back" { -1.0 } else { 0.0 };
            assert!(
                v.is_finite() && v >= floor,
                "{} {} {}: {v}",
                s.id,
                r.policy,
                c.key
            );
        }
        // Every run is kept, with its own series and phase starts.
        assert_eq!(r.runs.len(), report().repeats);
        assert!(r.median_run < r.runs.len());
        for run in &r.runs {
            assert!(run.series.t_ms.len() >= 3);
            assert_eq!(run.series.idle.len(), run.series.t_ms.len());
            let phases: Vec<usize> = run.series.events.iter().map(|e| e.phase).collect();
            assert_eq!(
                phases,
                (0..s.phases.len()).collect::<Vec<_>>(),
                "{} {}",
                s.id,
                r.policy
            );
            assert!(run.pressure.withheld <= run.pressure.raised);
            assert!(run.metrics.values().all(|v| v.is_finite()));
        }
        // Once the workers stopped, no request was left holding a stack.
        assert_eq!(r.metric("final_live"), 0.0, "{} {}", s.id, r.policy);
        assert_eq!(
            r.failures,
            0,
            "{} {}: {:?}",
            s.id,
            r.policy,
            r.first_failure()
        );
        assert!(r.metric("completed") > 0.0, "{} {}", s.id, r.policy);
        assert_eq!(r.metric("aborted"), 0.0);
    }
}

fn threads(s: &ScenarioReport, key: &str) -> f64 {
    s.params[key].parse().unwrap()
}

#[test]
fn fio_every_policy_serves_every_request() {
    let s = scenario("fio");
    check_structure(s);
    let jobs = threads(s, "jobs (submitting threads)");
    let depth = threads(s, "iodepth per job");
    for r in &s.results {
        assert!(r.metric("req_per_s") > 0.0, "{}", r.policy);
        // A round holds `depth` requests at once on one thread.
        assert!(r.metric("created") >= depth, "{}", r.policy);
    }
    let none = result(s, PolicyKind::None);
    assert_eq!(
        none.metric("created"),
        none.metric("completed"),
        "no pool: a stack per request"
    );
    assert_eq!(none.metric("final_idle"), 0.0);
    assert_eq!(none.metric("left_after_exit"), 0.0);
    // Caps: QEMU 2024 holds at most 2 batches per thread beyond its global
    // list; the fixed pool at most 64 local (+ one stolen global list) per
    // thread and 128 global.
    let batch = COROUTINE_POOL_BATCH_MAX_SIZE as f64;
    let q24 = result(s, PolicyKind::Qemu2024);
    assert!(q24.metric("final_idle") - q24.metric("left_after_exit") <= jobs * 2.0 * batch);
    let fixed = result(s, PolicyKind::QemuFixed);
    assert!(fixed.metric("left_after_exit") <= 128.0 + jobs);
    // The same pressure conditions for every policy: with the gate closed,
    // no signal reaches a pool here, whatever the machine does meanwhile.
    assert!(
        report().pressure_isolated,
        "{}",
        report().pressure_isolation
    );
    for r in &s.results {
        for run in &r.runs {
            assert_eq!(run.pressure.received, 0, "{}: {:?}", r.policy, run.pressure);
            assert_eq!(run.pressure.withheld, run.pressure.raised, "{}", r.policy);
        }
    }
    check_quiet(s);
    // A pool reuses: far fewer stacks than requests.
    for p in [
        PolicyKind::Qemu2021,
        PolicyKind::Qemu2024,
        PolicyKind::Tidepool,
    ] {
        let r = result(s, p);
        if r.metric("completed") > 4.0 * jobs * depth {
            assert!(
                r.metric("created") < r.metric("completed"),
                "{p} reuses stacks"
            );
        }
    }
}

#[test]
fn fio_cross_thread_breaks_the_2021_bookkeeping() {
    let s = scenario("fio-cross-thread");
    check_structure(s);
    // Stacks are taken on the submitting threads and given back on the
    // iothread: QEMU 2021's submitters never find one in their own pool,
    // so every request maps a new stack, exactly as with no pool.
    check_quiet(s);
    let q21 = result(s, PolicyKind::Qemu2021);
    assert_eq!(q21.metric("created"), q21.metric("completed"));
    let none = result(s, PolicyKind::None);
    assert_eq!(none.metric("created"), none.metric("completed"));
    // Pools with a shared level reuse across threads.
    let jobs = threads(s, "jobs (submitting threads)");
    let depth = threads(s, "iodepth per job");
    for p in [PolicyKind::Qemu2024, PolicyKind::Tidepool] {
        let r = result(s, p);
        if r.metric("completed") > 4.0 * (jobs * depth + 1024.0) {
            assert!(
                r.metric("created") < r.metric("completed"),
                "{p} reuses stacks"
            );
        }
    }
}

/// fio and fio-cross-thread end with a quiet: every run measured what was
/// idle as the load ended and at the end; a pool that never gives back
/// (QEMU 2024's) keeps all of it, and none holds more at the end than as
/// the quiet began (nothing runs then).
fn check_quiet(s: &ScenarioReport) {
    for r in &s.results {
        for run in &r.runs {
            let m = &run.metrics;
            let (begun, end) = (m["load_end_idle"], m["final_idle"]);
            assert!(end <= begun, "{} {}: {end} > {begun}", s.id, r.policy);
            // The load's CPU per request, from the same clock as the
            // quiet's: every thread busy, then every thread idle.
            let (load, quiet) = (m["load_cpu_ms"], m["quiet_cpu_ms"]);
            assert!(
                0.0 <= quiet && quiet < load,
                "{} {}: quiet {quiet} ms, load {load} ms",
                s.id,
                r.policy
            );
            let per = load * 1e3 / m["completed"];
            assert!(
                (m["cpu_us_per_req"] - per).abs() <= 1e-9 * per,
                "{}",
                r.policy
            );
            if r.policy == PolicyKind::Qemu2024 {
                assert_eq!(end, begun, "{}: QEMU 2024 keeps what it pooled", s.id);
            }
        }
    }
    let claim = |policy: &str| format!("tidepool ends with less idle than {policy}");
    let claims = report()
        .summary
        .iter()
        .flat_map(|row| &row.claims)
        .filter(|c| c.scenario == s.id && c.claim.starts_with("tidepool ends with less idle"))
        .collect::<Vec<_>>();
    assert_eq!(claims.len(), 1, "{}: one idle claim", s.id);
    if s.id == "fio" {
        assert_eq!(claims[0].claim, claim("qemu-2024"));
    }
    // The verdict is the medians' comparison.
    let other = claims[0]
        .claim
        .rsplit(' ')
        .next()
        .and_then(|name| s.results.iter().find(|r| r.policy.to_string() == name))
        .expect("the claim names a policy that ran");
    let ours = result(s, PolicyKind::Tidepool).metric("final_idle");
    let want = if ours < other.metric("final_idle") {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    assert_eq!(claims[0].verdict, want, "{:?}", claims[0]);
}

/// fio-pressure: every policy gets the same load and the same signal;
/// tidepool alone receives it, and its idle stacks' resident memory (the
/// pool's slabs by `mincore`, less the live requests' share) is measured at
/// every sample, before and after. Rates depend on the machine: only their
/// presence is checked, and that the signal freed tidepool's idle memory.
#[test]
fn fio_pressure_measures_throughput_and_idle_resident_memory_around_the_signal() {
    let s = scenario("fio-pressure");
    let policies: Vec<PolicyKind> = s.results.iter().map(|r| r.policy).collect();
    assert_eq!(policies, PolicyKind::ALL);
    for r in &s.results {
        for key in ["rate_steady", "rate_window", "created_window"] {
            let v = r.metric(key);
            assert!(v.is_finite() && v >= 0.0, "{} {key}: {v}", r.policy);
        }
        // A ratio, or (its one run stalled through the whole fio load, so
        // nothing completed before the signal) its absence said in the
        // report, with a zero steady rate and requests completing after.
        let ratio = r.metric("window_ratio");
        if ratio.is_nan() {
            assert_eq!(r.metric("rate_steady"), 0.0, "{}: no ratio", r.policy);
            assert!(r.metric("rate_window") > 0.0, "{}: nothing ran", r.policy);
            let note = tidepool_lab::scenario::fio_pressure::no_ratio_note(r.policy);
            assert!(s.notes.contains(&note), "{}: no ratio, no note", r.policy);
        } else {
            assert!(ratio.is_finite() && ratio >= 0.0, "{}: {ratio}", r.policy);
        }
        for run in &r.runs {
            let ser = &run.series;
            assert_eq!(ser.cpu_ms.len(), ser.t_ms.len());
            assert_eq!(ser.minor_faults.len(), ser.t_ms.len());
            let resident = !ser.idle_resident_kib.is_empty();
            assert_eq!(resident, r.policy == PolicyKind::Tidepool, "{}", r.policy);
            if resident {
                assert_eq!(ser.idle_resident_kib.len(), ser.t_ms.len());
            }
            let received = run.metrics["pressure_received"];
            let expected = if r.policy == PolicyKind::Tidepool {
                1.0
            } else {
                0.0
            };
            assert_eq!(received, expected, "{}", r.policy);
        }
    }
    // Runs are one after another: a stall takes the ratio of one at most.
    let unmeasured = s
        .results
        .iter()
        .filter(|r| r.metric("window_ratio").is_nan());
    assert!(unmeasured.count() <= 1, "{:?}", s.notes);
    let t = result(s, PolicyKind::Tidepool);
    // The burst left idle stacks beyond the working set: resident before,
    // and the signal took their memory back (Critical drains to min_idle).
    assert!(t.metric("idle_resident_steady") > 0.0, "{:?}", t.metrics);
    assert!(t.metric("resident_drop") > 0.5, "{:?}", t.metrics);
    assert_eq!(s.claims.len(), 1);
    assert_eq!(s.claims[0].seed, "003");
}

#[test]
fn spike_then_idle_shows_who_keeps_the_burst() {
    let s = scenario("spike-then-idle");
    check_structure(s);
    let none = result(s, PolicyKind::None);
    assert_eq!(none.metric("idle_after"), 0.0);
    assert_eq!(none.metric("final_idle"), 0.0);
    // QEMU 2024 never shrinks while its threads live (its global list is
    // far below the cap here): everything it created is still there.
    let q24 = result(s, PolicyKind::Qemu2024);
    assert_eq!(q24.metric("final_idle"), q24.metric("created"));
    for r in &s.results {
        for phase in ["before", "burst", "after"] {
            let key = format!("vsz_{phase}");
            assert!(r.metric(&key) > 0.0, "{} {key}", r.policy);
        }
        assert!(
            r.metric("stacks_burst") >= r.metric("idle_after"),
            "{}",
            r.policy
        );
    }
}

#[test]
fn pressure_is_signalled_to_every_policy_at_the_same_point() {
    let s = scenario("pressure");
    check_structure(s);
    // --quick: the manual source, and the report says so.
    assert_eq!(s.params["pressure source"], MANUAL_LABEL);
    assert!(s
        .notes
        .iter()
        .any(|n| n.starts_with("pressure source: manual")));
    assert!(s.phases[2].starts_with("pressure on"), "{:?}", s.phases);
    assert!(s.phases[3].starts_with("pressure off"), "{:?}", s.phases);
    for r in &s.results {
        assert!(r.metric("rate_before") > 0.0 && r.metric("rate_after") > 0.0);
        // Each run's signal is recorded: manual, never timed out.
        assert_eq!(r.metric("signal_real"), 0.0, "{}", r.policy);
        assert_eq!(r.metric("signal_timeout"), 0.0, "{}", r.policy);
        assert_eq!(r.metric("psi_ms"), 0.0, "{}", r.policy);
        let note = format!("signal, {} (0/", r.policy);
        assert!(
            s.notes
                .iter()
                .any(|n| n.starts_with(&note) && n.contains(MANUAL_LABEL)),
            "{}: a note says which source delivered the signal",
            r.policy
        );
        // One manual signal per run, raised the same for every policy.
        for run in &r.runs {
            assert!(run.pressure.raised >= 1, "{}: {:?}", r.policy, run.pressure);
        }
    }
    // tidepool's pool received it in every run; the seed policies have no
    // pressure response.
    for run in &result(s, PolicyKind::Tidepool).runs {
        assert!(run.pressure.received >= 1, "{:?}", run.pressure);
    }
    for p in [PolicyKind::None, PolicyKind::Qemu2021, PolicyKind::Qemu2024] {
        assert_eq!(result(s, p).pressure_received(), 0, "{p}");
    }
    // Only tidepool's pool receives it (the seed policies do not listen).
    let tp = result(s, PolicyKind::Tidepool);
    assert!(tp.metric("pool_ms") > 0.0);
    assert!(tp.metric("pool_ms") < 15_000.0);
    for p in [PolicyKind::None, PolicyKind::Qemu2021, PolicyKind::Qemu2024] {
        assert_eq!(result(s, p).metric("pool_ms"), 0.0, "{p}");
    }
    // The seed policies do not listen: QEMU 2024 destroys nothing.
    let q24 = result(s, PolicyKind::Qemu2024);
    assert_eq!(q24.metric("final_idle"), q24.metric("created"));
}

/// `--pressure-source auto`, tidepool only: a real PSI signal from
/// page-cache thrash in a 64 MiB cgroup where the kernel allows it (it
/// arrives within seconds), else the manual source with the reason. Run
/// after the shared quick report, so no other lab run shares the process
/// (the thrash, the PSI trigger and the reclaimer are process-wide).
#[test]
fn pressure_auto_source_is_real_or_says_why_not() {
    let _ = report();
    let mut settings = Settings::new(true);
    settings.policies = vec![PolicyKind::Tidepool];
    settings.pressure_source = PressureSource::Auto;
    let options = Options {
        scenarios: vec![ScenarioKind::Pressure],
        settings,
    };
    let r = tidepool_lab::run(&options, &Silent);
    let s = r.scenario("pressure").expect("the pressure scenario ran");
    let source = s.params["pressure source"].as_str();
    assert!(
        source == REAL_LABEL || source == MANUAL_LABEL,
        "source: {source}"
    );
    let tp = result(s, PolicyKind::Tidepool);
    assert_eq!(tp.failures, 0);
    let note = s
        .notes
        .iter()
        .find(|n| n.starts_with("signal, tidepool"))
        .expect("a note on tidepool's signal");
    if source == REAL_LABEL {
        assert_eq!(tp.metric("signal_real"), 1.0, "{note}");
        assert_eq!(tp.metric("signal_timeout"), 0.0, "{note}");
        // The signal arrived at the pool, and the run moved on.
        assert!(tp.metric("pool_ms") > 0.0, "{note}");
        assert!(tp.metric("wait_ms") < 15_000.0, "{note}");
        assert!(note.contains(REAL_LABEL), "{note}");
        assert!(note.contains("Stats::pressure_critical rose"), "{note}");
    } else {
        assert_eq!(tp.metric("signal_real"), 0.0);
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("fell back to it because")),
            "auto says why it did not use the real source: {:?}",
            s.notes
        );
        assert!(tp.metric("pool_ms") > 0.0, "{note}");
    }
}

#[test]
fn mass_teardown_tears_everything_down_and_counts_its_unmaps() {
    for id in ["mass-teardown", "mass-teardown-full"] {
        mass_teardown_checks(scenario(id));
    }
}

fn mass_teardown_checks(s: &ScenarioReport) {
    use tidepool_lab::scenario::mass_teardown::BURST;
    let policies: Vec<PolicyKind> = s.results.iter().map(|r| r.policy).collect();
    assert_eq!(
        policies,
        PolicyKind::TEARDOWN,
        "one result per teardown policy"
    );
    assert_eq!(s.phases.len(), 4);
    for r in &s.results {
        assert_eq!(r.failures, 0, "{}: no creation failed", r.policy);
        assert_eq!(r.runs.len(), 1, "{}: quick runs once", r.policy);
        for run in &r.runs {
            let ser = &run.series;
            let n = ser.t_ms.len();
            assert!(n >= 10, "{}: {n} probe samples", r.policy);
            assert_eq!(ser.probe_get_put_us.len(), n);
            assert_eq!(ser.probe_map_ms.len(), n);
            assert_eq!(ser.rss_kib.len(), n);
            assert!(ser.probe_get_put_us.iter().all(|&v| v > 0.0));
            assert!(ser.probe_map_ms.iter().all(|&v| v > 0.0));
            // Phases in order, teardown after release.
            let at: Vec<f64> = ser.events.iter().map(|e| e.t_ms).collect();
            assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
            assert!(run.metrics["wall_ms"] > 0.0);
            // Both probes' ratios, each run's own.
            assert!(run.metrics["map_p99_ratio"] > 0.0, "{:?}", run.metrics);
            assert!(run.metrics["get_put_p99_ratio"] > 0.0, "{:?}", run.metrics);
            assert!(run.metrics["rest_samples"] >= 1.0, "{:?}", run.metrics);
            // Every stack held was torn down; none is left live.
            assert_eq!(run.metrics["left_live"], 0.0, "{}", r.policy);
            assert!(run.metrics["torn_down"] >= 1000.0, "{:?}", run.metrics);
            // At least a VMA per slab (guard markers keep a slab one VMA;
            // PROT_NONE guards make it two per stack).
            assert!(run.metrics["peak_vmas"] >= 1000.0 / BURST as f64);
        }
    }
    let unmaps = |p| result(s, p).metric("munmap_per_1000");
    // One mapping per stack before the fix; one per slab after (the last
    // slab of each holder may be partial).
    assert_eq!(unmaps(PolicyKind::DflyBefore), 1000.0);
    for p in [PolicyKind::Dfly2017, PolicyKind::Tidepool] {
        let v = unmaps(p);
        assert!(v > 0.0 && v <= 2.0 * 1000.0 / BURST as f64, "{p}: {v}");
    }
    // Counted by the pools: dfly-2017 unmaps slabs with their pages (no
    // release step, no madvise of a slab that goes); tidepool releases
    // them first, a step at a time.
    let madvises = |p| result(s, p).metric("madvise_per_1000");
    assert_eq!(madvises(PolicyKind::DflyBefore), 0.0);
    assert!(
        madvises(PolicyKind::Tidepool) >= unmaps(PolicyKind::Tidepool),
        "{}: a step per slab at least",
        s.id
    );
    // The full variant's claims are shown with mass-teardown's, both
    // figures in each.
    if s.id == "mass-teardown" {
        assert_eq!(s.claims.len(), 5);
        assert!(
            s.claims.iter().all(|c| c.measured.contains(" / ")),
            "{:?}",
            s.claims
        );
    } else {
        assert!(s.claims.is_empty());
        assert!(s
            .notes
            .iter()
            .any(|n| n.contains("shown with mass-teardown's")));
    }
    assert!(s.claims.iter().all(|c| c.verdict != Verdict::Unmeasured));
}

#[test]
fn the_json_report_round_trips_and_keeps_its_schema() {
    let r = report();
    let text = r.to_json();
    let back = Report::from_json(&text).expect("the report parses back");
    // (Compared as a bool: the Debug of a whole report is pages long.)
    assert!(
        &back == r,
        "the report read back differs from the one written"
    );
    assert_eq!(back.to_json(), text);
    // The fields a reader of report.json relies on, by name.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["quick"], true);
    assert!(v["machine"]["max_map_count"].as_u64().is_some());
    assert!(v["pressure_isolated"].is_boolean());
    assert!(v["pressure_isolation"].is_string());
    let seeds: Vec<&str> = v["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["seed"].as_str().unwrap())
        .collect();
    assert_eq!(seeds, ["000", "001", "002", "003", "004"]);
    let s0 = &v["scenarios"][0];
    for key in [
        "id", "title", "seeds", "finding", "quotes", "workload", "params", "columns", "phases",
        "results", "claims", "plots", "notes",
    ] {
        assert!(!s0[key].is_null(), "scenario field {key}");
    }
    let res = &s0["results"][4];
    assert_eq!(res["policy"], "tidepool");
    assert!(res["median_run"].is_u64());
    let run = &res["runs"][0];
    for key in ["received", "raised", "withheld"] {
        assert!(run["pressure"][key].is_u64(), "pressure.{key}");
    }
    for key in [
        "t_ms",
        "idle",
        "live",
        "created",
        "vmas",
        "rss_kib",
        "vsz_kib",
        "throughput",
    ] {
        assert!(run["series"][key].is_array(), "series.{key}");
    }
    assert!(run["series"]["events"][0]["phase"].is_u64());
    assert!(run["metrics"]["pressure_received"].is_number());
    let claim = &s0["claims"][0];
    for key in [
        "seed",
        "scenario",
        "claim",
        "published",
        "published_detail",
        "measured",
        "measured_detail",
        "rule",
        "verdict",
    ] {
        assert!(claim[key].is_string(), "claim field {key}");
    }
}

#[test]
fn the_summary_has_a_row_for_every_seed_and_a_claim_per_scenario() {
    let r = report();
    let ids: Vec<&str> = r.summary.iter().map(|row| row.seed.as_str()).collect();
    assert_eq!(ids, ["000", "001", "002", "003", "004"]);
    for row in &r.summary {
        match row.seed.as_str() {
            // fio (000, 001), spike-then-idle and fio-cross-thread (001),
            // pressure (003), mass-teardown and mass-teardown-full (004)
            // ran here.
            "000" | "001" | "003" | "004" => {
                assert_eq!(row.status, SeedStatus::Measured, "{}", row.seed);
                assert!(!row.claims.is_empty());
                for c in &row.claims {
                    assert_eq!(c.seed, row.seed);
                    assert!(c.claim.chars().count() <= 44, "{}", c.claim);
                    assert!(c.published.chars().count() <= 12, "{}", c.published);
                    assert!(c.measured.chars().count() <= 14, "{}", c.measured);
                    assert!(!c.rule.is_empty());
                    // Every policy ran: every claim could be measured.
                    assert_ne!(c.verdict, Verdict::Unmeasured, "{c:?}");
                }
            }
            // limit-churn is built but has its own test binary.
            "002" => {
                assert_eq!(
                    row.status,
                    SeedStatus::NotRun {
                        scenarios: vec!["limit-churn".to_owned()]
                    }
                );
                assert!(row.claims.is_empty());
            }
            other => panic!("unexpected seed {other}"),
        }
    }
    // Every scenario that ran contributed claims to its seeds' rows.
    for s in &r.scenarios {
        // (mass-teardown-full's are folded into mass-teardown's.)
        assert!(
            !s.claims.is_empty() || s.id == "mass-teardown-full",
            "{}",
            s.id
        );
        for c in &s.claims {
            assert!(
                s.seeds.contains(&c.seed) || c.seed == "000",
                "{}: {}",
                s.id,
                c.seed
            );
        }
    }
    // The cross-thread scenario quotes why seed 001 was dropped, and says
    // where those words stand: not in seed 001.
    let q = &scenario("fio-cross-thread").quotes[0];
    assert!(q.text.starts_with("Coroutines are created in one thread"));
    assert!(q.source.contains("not in seed 001's text"), "{}", q.source);
}

#[test]
fn the_terminal_table_fits_100_columns() {
    let text = tidepool_lab::report::table::render(report());
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} chars: {line}",
            line.chars().count()
        );
    }
    for seed in ["000", "001", "002", "003", "004"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(seed)),
            "{seed}"
        );
    }
    assert!(text.contains("signals"));
}

#[test]
fn the_html_report_is_self_contained_with_four_plots_per_scenario() {
    let r = report();
    let dir = std::env::temp_dir().join(format!("tidepool-lab-test-{}", std::process::id()));
    let (json, html) = r.write(&dir).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(std::fs::metadata(&json).unwrap().len() > 100);
    // Written whole: nothing but the two files is left in the directory.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    // Four plots per scenario; the two mass-teardown scenarios' three: the
    // probe's two latencies and RSS.
    let plots: usize = r.scenarios.iter().map(|s| s.plots.len()).sum();
    assert_eq!(plots, 4 * (r.scenarios.len() - 2) + 2 * 3);
    assert_eq!(page.matches("<svg class=\"plot\"").count(), plots);
    for p in PolicyKind::EVERY {
        assert!(page.contains(p.name()), "{p} is named");
    }
    for s in &r.scenarios {
        assert!(page.contains(&format!("id=\"{}\"", s.id)));
    }
    // The summary comes first, before any scenario.
    let summary = page.find("id=\"summary\"").unwrap();
    let first = page.find("class=\"scenario\"").unwrap();
    assert!(summary < first);
    // Nothing to fetch: no scripts, no external resources.
    assert!(!page.contains("<script"));
    assert!(!page.contains("src=\"http"));
    assert!(!page.contains("href=\"http"));
}

/// The value of attribute `name` in the tag starting at `tag`.
fn attr(tag: &str, name: &str) -> Option<f64> {
    let end = tag.find('>')?;
    let tag = &tag[..end];
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let len = tag[at..].find('"')?;
    tag[at..at + len].parse().ok()
}

/// Every tag `<{name} ...` with `class="{class}"` in `svg`.
fn tags<'a>(svg: &'a str, name: &str, class: &str) -> Vec<&'a str> {
    let open = format!("<{name} ");
    let class = format!("class=\"{class}\"");
    svg.match_indices(&open)
        .map(|(i, _)| &svg[i..])
        .filter(|t| t[..t.find('>').unwrap()].contains(&class))
        .collect()
}

/// The text of the element starting at `tag`.
fn text_of(tag: &str) -> &str {
    let start = tag.find('>').unwrap() + 1;
    &tag[start..start + tag[start..].find('<').unwrap()]
}

/// What a person checks on every plot, from the SVG the lab writes (the
/// browser check, `bin/report-check.sh`, measures the same in Chromium):
/// axis labels with units, a legend that does not overlap the plot area
/// or the data, every line inside the plot area, outer text inside the
/// picture.
#[test]
fn every_plot_has_labelled_axes_and_a_legend_off_the_data() {
    use tidepool_lab::report::plot::{plot, Limit, HEIGHT, WIDTH};
    use tidepool_lab::report::Figure;
    let r = report();
    let mut plots = 0;
    let mut expected = 0;
    for s in &r.scenarios {
        expected += s.plots.len();
        for figure in &s.plots {
            let Figure::OverTime(spec) = figure else {
                continue;
            };
            let mut spec = spec.clone();
            spec.limit = Some(Limit {
                value: 1000.0,
                label: "a limit".to_owned(),
            });
            let svg = plot(s, &spec).unwrap();
            plots += 1;
            let what = format!("{} / {:?}", s.id, spec.metric);
            // Axis labels, each with a unit in parentheses at the end.
            for axis in ["axis-label x", "axis-label y"] {
                let t = tags(&svg, "text", axis);
                assert_eq!(t.len(), 1, "{what}: {axis}");
                let label = text_of(t[0]);
                assert!(
                    label.ends_with(')') && label.contains(" ("),
                    "{what}: {axis} without a unit: {label}"
                );
            }
            // The plot area and the legend's box.
            let area = tags(&svg, "rect", "plot-area")[0];
            let (ax, ay) = (attr(area, "x").unwrap(), attr(area, "y").unwrap());
            let (aw, ah) = (attr(area, "width").unwrap(), attr(area, "height").unwrap());
            let legend = tags(&svg, "rect", "legend-box")[0];
            let (lx, ly) = (attr(legend, "x").unwrap(), attr(legend, "y").unwrap());
            let (lw, lh) = (
                attr(legend, "width").unwrap(),
                attr(legend, "height").unwrap(),
            );
            let apart = lx >= ax + aw || ax >= lx + lw || ly >= ay + ah || ay >= ly + lh;
            assert!(apart, "{what}: the legend overlaps the plot area");
            assert!(
                lx + lw <= f64::from(WIDTH) && ly + lh <= f64::from(HEIGHT),
                "{what}"
            );
            // Every data line lies inside the plot area (the chart is nested
            // at its own offset).
            let nested = svg.find("<svg x=\"").expect("the nested chart");
            let (ox, oy) = (
                attr(&svg[nested..], "x").unwrap(),
                attr(&svg[nested..], "y").unwrap(),
            );
            let mut points = 0;
            let colours: Vec<String> = PolicyKind::EVERY
                .iter()
                .map(|&p| tidepool_lab::report::plot::hex(p).to_uppercase())
                .collect();
            for (i, _) in svg.match_indices("<polyline ") {
                let tag = &svg[i..];
                let head = tag[..tag.find('>').unwrap()].to_uppercase();
                if !colours.iter().any(|c| head.contains(c.as_str())) {
                    continue; // the mesh and the axes
                }
                let at = tag.find("points=\"").unwrap() + 8;
                let list = &tag[at..at + tag[at..].find('"').unwrap()];
                for p in list.split_whitespace() {
                    let (x, y) = p.split_once(',').unwrap();
                    let (x, y) = (
                        x.parse::<f64>().unwrap() + ox,
                        y.parse::<f64>().unwrap() + oy,
                    );
                    assert!(
                        x >= ax - 1.0 && x <= ax + aw + 1.0 && y >= ay - 1.0 && y <= ay + ah + 1.0,
                        "{what}: a point ({x}, {y}) outside the plot area"
                    );
                    points += 1;
                }
            }
            assert!(points > 0, "{what}: no data drawn");
            // Markers stay inside the plot area.
            for class in ["phase-marker", "limit"] {
                for t in tags(&svg, "line", class) {
                    for (k, lo, hi) in [
                        ("x1", ax, ax + aw),
                        ("x2", ax, ax + aw),
                        ("y1", ay, ay + ah),
                        ("y2", ay, ay + ah),
                    ] {
                        let v = attr(t, k).unwrap();
                        assert!(v >= lo - 1.0 && v <= hi + 1.0, "{what}: {class} {k}={v}");
                    }
                }
            }
            // Text written around the chart fits the picture (width by
            // estimate: 0.62 em a character).
            for (i, _) in svg.match_indices("<text ") {
                let tag = &svg[i..];
                if tag[..tag.find('>').unwrap()].contains("transform") {
                    continue; // the rotated y label: checked by the browser
                }
                let (Some(x), Some(y)) = (attr(tag, "x"), attr(tag, "y")) else {
                    continue;
                };
                let inside_chart = svg[..i]
                    .rfind("<svg x=")
                    .is_some_and(|n| n > 0 && svg[n..i].find("</svg>").is_none());
                if inside_chart {
                    continue; // plotters' ticks: inside the nested chart, clipped by it
                }
                let size = attr(tag, "font-size").unwrap_or(12.0);
                let w = 0.62 * size * text_of(tag).chars().count() as f64;
                let anchor = &tag[..tag.find('>').unwrap()];
                let left = if anchor.contains("text-anchor=\"middle\"") {
                    x - w / 2.0
                } else {
                    x
                };
                assert!(
                    left >= 0.0
                        && left + w <= f64::from(WIDTH)
                        && y <= f64::from(HEIGHT)
                        && y >= size * 0.8,
                    "{what}: text {:?} at ({x}, {y}) runs off the picture",
                    text_of(tag)
                );
            }
        }
    }
    assert_eq!(plots, expected);
    assert_eq!(expected, 4 * (r.scenarios.len() - 2) + 2 * 3);
}

/// A policy whose run went on past the data of a plot (its phases start
/// later than any drawn point) puts no phase marker outside the plot area,
/// where it would land under the legend.
#[test]
fn phase_markers_past_the_data_are_not_drawn() {
    use tidepool_lab::report::plot::plot;
    use tidepool_lab::report::{Event, Figure};
    let mut s = report()
        .scenarios
        .iter()
        .find(|s| s.phases.len() > 1 && s.plots.iter().any(|f| matches!(f, Figure::OverTime(_))))
        .expect("a scenario with phases and a plot over time")
        .clone();
    let end = s
        .results
        .iter()
        .filter_map(|r| r.median_series())
        .flat_map(|series| series.t_ms.iter().copied())
        .fold(0.0, f64::max);
    let r = &mut s.results[0];
    let median = r.median_run;
    r.runs[median].series.events.push(Event {
        t_ms: end * 3.0 + 1000.0,
        phase: 1,
    });
    for figure in &s.plots {
        let Figure::OverTime(spec) = figure else {
            continue;
        };
        let svg = plot(&s, spec).unwrap();
        let area = tags(&svg, "rect", "plot-area")[0];
        let (ax, aw) = (attr(area, "x").unwrap(), attr(area, "width").unwrap());
        for t in tags(&svg, "line", "phase-marker") {
            let x = attr(t, "x1").unwrap();
            assert!(
                x <= ax + aw + 1.0,
                "{} / {:?}: a marker at x={x}",
                s.id,
                spec.metric
            );
        }
    }
}
