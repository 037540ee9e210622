//! A `--quick` run of the `handoff` scenario: every policy at both limits,
//! the counts a limit allows, tidepool's cache takes, the claims and the
//! plot; no timed assertions.

use tidepool_lab::report::{Figure, Verdict};
use tidepool_lab::scenario::handoff;
use tidepool_lab::{Options, PolicyKind, ScenarioKind, Settings, Silent};

#[test]
fn handoff_quick_run_reports_every_policy_and_limit() {
    // As the CLI does: the machine's own memory pressure must not reach
    // the pools. Before the first pool of this process.
    std::env::set_var("TIDEPOOL_PRESSURE", "manual");
    let options = Options {
        scenarios: vec![ScenarioKind::Handoff],
        settings: Settings::new(true),
    };
    let report = tidepool_lab::run(&options, &Silent);
    let s = report.scenario(handoff::ID).expect("the scenario ran");
    let policies: Vec<PolicyKind> = s.results.iter().map(|r| r.policy).collect();
    assert_eq!(policies, PolicyKind::HANDOFF);
    assert!(
        s.notes.iter().all(|n| !n.starts_with("run failed")),
        "{:?}",
        s.notes
    );
    for r in &s.results {
        assert_eq!(r.runs.len(), options.settings.repeats);
        for (tag, limit) in handoff::LIMITS {
            let ns = r.metric(&handoff::key(tag));
            assert!(ns.is_finite() && ns > 0.0, "{} {tag}: {ns}", r.policy);
            let created = r.metric(&handoff::count_key("created", tag));
            let what = format!("{} {tag}: {created} created", r.policy);
            // At most about 40 objects are in use at once: every policy
            // makes at least those, and the locked list and tidepool never
            // pass the limit (the FreeBSD models may, by a few, as FreeBSD
            // does when its free list is empty).
            assert!(created >= 16.0, "{what}");
            if let Some(limit) = limit {
                if matches!(r.policy, PolicyKind::LockedList | PolicyKind::Tidepool) {
                    assert!(created <= limit as f64, "{what}");
                }
            }
        }
    }
    // tidepool takes no other thread's cache at the limit.
    let tp = s.result(PolicyKind::Tidepool).expect("tidepool ran");
    let taken = tp.per_run(&handoff::count_key("taken", handoff::LIMITS[0].0));
    assert_eq!(taken.len(), options.settings.repeats);
    assert!(taken.iter().all(|&t| t <= 1.0), "{taken:?}");
    // Two claims on seed 002's row, each measured.
    let claims: Vec<_> = s.claims.iter().collect();
    assert_eq!(claims.len(), 2, "{claims:?}");
    for c in claims {
        assert_eq!(c.seed, "002");
        assert_ne!(c.verdict, Verdict::Unmeasured, "{c:?}");
    }
    // The plot: both limits, every policy in the legend, labelled axes.
    let [figure @ Figure::ByCategory(_)] = s.plots.as_slice() else {
        panic!("one plot, by limit: {:?}", s.plots);
    };
    let svg = figure.render(s).expect("plotted");
    for p in PolicyKind::HANDOFF {
        assert!(svg.contains(&format!(">{}</text>", p.name())), "{p}");
    }
    assert!(svg.contains("axis-label x") && svg.contains("axis-label y"));
    assert!(svg.contains(">limit 64<") && svg.contains(">no limit<"));
}
