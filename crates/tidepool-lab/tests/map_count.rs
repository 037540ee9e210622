//! The `map-count` scenario, `--quick`, every policy, against this
//! process's real `vm.max_map_count`. In a test binary of its own: a policy
//! that hoards uses up the process's VMAs.
//!
//! The periods are made an hour long so that no periodic policy resizes
//! during the run: what happens then depends on the policies' rules only,
//! not on how fast this machine maps stacks.

use tidepool_lab::policy::qemu_2024::global_pool_hard_max_size;
use tidepool_lab::report::Verdict;
use tidepool_lab::scenario::map_count::MapCountSize;
use tidepool_lab::{Options, PolicyKind, ScenarioKind, Settings, Silent};

#[test]
fn per_thread_hoarding_hits_the_map_count_and_capped_pools_do_not() {
    let mut settings = Settings::new(true);
    settings.time_scale = 15.0 / 3600.0; // 15 s -> 1 hour
    let max_map_count = settings.max_map_count;
    let options = Options {
        scenarios: vec![ScenarioKind::MapCount],
        settings,
    };
    let report = tidepool_lab::run(&options, &Silent);
    let s = report.scenario("map-count").expect("map-count ran");
    assert!(s.reclaim_interval_ms >= 3_600_000.0);
    let size = MapCountSize::new(true);
    let kept_by_hoarder = (size.threads * size.spike) as u64;

    for r in &s.results {
        let series = r.median_series().expect("a median run");
        let n = series.t_ms.len();
        assert!(n >= 2, "{}: samples", r.policy);
        assert_eq!(series.vmas.len(), n);
        assert_eq!(r.metric("final_live"), 0.0, "{}", r.policy);
        for run in &r.runs {
            match &run.first_failure {
                Some(f) => {
                    // Recorded as data: when, the VMA count, what was said.
                    assert!(run.metrics["failures"] >= 1.0);
                    assert!(!f.message.is_empty());
                    assert_eq!(
                        run.metrics["aborted"], 1.0,
                        "{}: the run ended there",
                        r.policy
                    );
                    assert!(f.t_ms <= *run.series.t_ms.last().unwrap());
                }
                None => assert_eq!(run.metrics["failures"], 0.0),
            }
        }
    }

    // Capped policies: the spikes come and go, nothing fails.
    for p in [
        PolicyKind::None,
        PolicyKind::QemuFixed,
        PolicyKind::Qemu2024,
        PolicyKind::Tidepool,
    ] {
        let r = s.result(p).unwrap();
        assert_eq!(r.failures, 0, "{p}: {:?}", r.first_failure());
        assert_eq!(r.metric("aborted"), 0.0);
        assert!(r.metric("peak_vmas") < max_map_count as f64, "{p}");
    }
    // QEMU 2024 and tidepool keep idle stacks under the global cap.
    let cap = global_pool_hard_max_size(max_map_count) as f64;
    for p in [PolicyKind::Qemu2024, PolicyKind::Tidepool] {
        assert!(
            s.result(p).unwrap().metric("peak_idle") <= cap + 4.0 * 256.0,
            "{p}"
        );
    }

    // QEMU 2021 keeps every thread's spike in that thread's pool: past the
    // map count, a creation fails (QEMU aborted there).
    if 2 * kept_by_hoarder > max_map_count {
        let r = s.result(PolicyKind::Qemu2021).unwrap();
        let f = r
            .first_failure()
            .expect("qemu-2021 runs into vm.max_map_count");
        assert!(
            f.vmas + 1000 >= max_map_count,
            "{f:?}: at the map count, not out of memory"
        );
    }

    // What the summary says about seed 000, from these runs.
    assert_eq!(s.claims.len(), 3, "{:?}", s.claims);
    assert!(s.claims.iter().all(|c| c.seed == "000"));
    if 2 * kept_by_hoarder > max_map_count {
        assert_eq!(s.claims[0].verdict, Verdict::Pass, "{:?}", s.claims[0]);
    }
    for c in &s.claims[1..] {
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    }
}
