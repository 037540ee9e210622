//! `spike-then-idle` (seed 001's memory table): idle memory before, during
//! and after a burst.
//!
//! Seed 001 measured QEMU around an fio run: VSZ 4705248 KB before,
//! +~100 MB during, back to 4694996 KB after, which its author took as
//! proof that idle coroutines are freed (`seeds.rs` quotes it); RSS barely
//! moved. Here: a light load, a burst of the fio workload, then idle for
//! five periods. A fixed cap keeps little; a pool that never shrinks keeps
//! the burst; a periodic one gives it back.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::policy::PolicyKind;
use crate::report::format;
use crate::report::summary::percent;
use crate::report::{Claim, Column, Format, ScenarioReport, Verdict};
use crate::scenario::fio::QEMU_STACK_SIZE;
use crate::scenario::harness::{Load, Phase, Plan, RunOutput};
use crate::scenario::{base_metrics, param, phased, plots, Settings, Spec};
use crate::seeds::{published, quote};
use crate::stack::Touch;

pub(crate) fn spec(settings: &Settings) -> Spec<'static> {
    let interval = settings.interval();
    let threads = if settings.quick { 2 } else { 4 };
    let (light, burst) = (4, 256);
    let phases = vec![
        Phase {
            name: "before (light load)".to_owned(),
            min: interval * 2,
            loads: vec![Load::Rounds { depth: light }; threads],
        },
        Phase {
            name: "burst".to_owned(),
            min: interval * 2,
            loads: vec![Load::Rounds { depth: burst }; threads],
        },
        Phase {
            name: "after (idle)".to_owned(),
            min: interval * 5,
            loads: vec![Load::Idle; threads],
        },
    ];
    let plan = Plan {
        phases,
        sample_every: (interval / 10).clamp(Duration::from_millis(5), Duration::from_millis(25)),
        abort_on_failure: false,
        touch: Touch::Large,
    };
    let mut params = BTreeMap::new();
    param(&mut params, "threads", threads);
    param(&mut params, "before: requests in flight per thread", light);
    param(&mut params, "burst: requests in flight per thread", burst);
    param(&mut params, "before / burst / after", "2 / 2 / 5 periods");
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    let (before, during, after) = published::QEMU_2021_VSZ_KB;
    Spec {
        id: "spike-then-idle",
        title: "spike-then-idle: idle memory before, during and after a burst",
        seeds: &["001"],
        finding: format!(
            "Seed 001's memory table: VSZ {} KB before fio, {} KB during (+~100 MB), {} KB \
             after; RSS nearly flat: the 2021 pool gives a burst's stacks back once it is over.",
            format::count(before as f64),
            format::count(during as f64),
            format::count(after as f64)
        ),
        quotes: vec![quote::QEMU_2021_FREED],
        workload: format!(
            "{threads} threads: light load ({light} in flight each) for 2 periods, a burst ({burst} \
             each) for 2 periods, then idle for 5 periods."
        ),
        params,
        columns: vec![
            Column::new("idle_before", "idle before", Format::Count).terminal("idle before"),
            Column::new("stacks_burst", "peak stacks burst", Format::Count).terminal("burst"),
            Column::new("idle_after", "idle after", Format::Count).terminal("idle after"),
            Column::new("vsz_before", "VSZ before", Format::MiB),
            Column::new("vsz_burst", "peak VSZ burst", Format::MiB),
            Column::new("vsz_after", "VSZ after", Format::MiB).terminal("VSZ after"),
            Column::new("given_back", "burst's VSZ given back", Format::Percent)
                .terminal("given back"),
            Column::new("rss_before", "RSS before", Format::MiB),
            Column::new("rss_burst", "peak RSS burst", Format::MiB),
            Column::new("rss_soon", "RSS 2 s after (scaled)", Format::MiB),
            Column::new("rss_after", "RSS after", Format::MiB),
        ],
        plots: plots::over_run(&plots::STANDARD),
        headline: "idle_after",
        env: settings.env(QEMU_STACK_SIZE, interval),
        plan,
        warmup: None,
        make_worker: phased(),
        metrics,
        notes: Vec::new(),
    }
}

/// What spike-then-idle says about seed 001's memory table.
pub(crate) fn claims(s: &ScenarioReport) -> Vec<Claim> {
    let seed_share = published::qemu_2021_vsz_given_back();
    let (before, during, after) = published::QEMU_2021_VSZ_KB;
    [
        (PolicyKind::Qemu2021, "the 2021 pool gives a burst back"),
        (PolicyKind::Tidepool, "tidepool gives a burst back too"),
    ]
    .into_iter()
    .map(|(p, claim)| {
        let mut c = Claim {
            seed: "001".to_owned(),
            scenario: s.id.clone(),
            claim: claim.to_owned(),
            published: percent(seed_share),
            published_detail: format!(
                "VSZ {} KB before fio, {} KB during, {} KB after: {} of the growth given back \
                 (seed 001)",
                format::count(before as f64),
                format::count(during as f64),
                format::count(after as f64),
                percent(seed_share)
            ),
            measured: "–".to_owned(),
            measured_detail: format!("{p} was not run"),
            rule: "≥ 90 % of the burst's VSZ back".to_owned(),
            verdict: Verdict::Unmeasured,
        };
        if let Some(r) = s.result(p) {
            let share = r.metric("given_back");
            if share.is_finite() {
                let runs = r.per_run("given_back");
                let lo = runs.iter().copied().fold(f64::INFINITY, f64::min);
                c.measured = percent(share);
                c.measured_detail = format!(
                    "{p}: VSZ {:.0} MiB before, {:.0} MiB at the burst's peak, {:.0} MiB after: \
                     {} given back (lowest run {})",
                    r.metric("vsz_before") / 1048576.0,
                    r.metric("vsz_burst") / 1048576.0,
                    r.metric("vsz_after") / 1048576.0,
                    percent(share),
                    percent(lo)
                );
                c.verdict = Verdict::of(share >= 0.9);
            }
        }
        c
    })
    .collect()
}

/// How long after the burst `rss_soon` is read: 2 s of the seed's 15 s
/// period, scaled like it (the purge delay's decay shows there).
const SOON: f64 = 2.0 / 15.0;

fn metrics(out: &RunOutput, plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let s = &out.series;
    let start = |i: usize| out.phase_starts.get(i).copied().flatten();
    let (Some(burst), Some(after)) = (start(1), start(2)) else {
        return m;
    };
    // Before: the last sample of the light load. Burst: the most stacks
    // (idle + in use) from its start through the first sample to see every
    // worker done with it: a worker finishes the round it is in when the
    // phase changes, and on a loaded machine that round (up to `burst`
    // stacks) may end well after the switch; samples up to the switch alone
    // would miss what it created. After: the last sample before the workers
    // stopped.
    let last = s.t_ms.len().saturating_sub(2);
    let max_in = |v: &[u64], r: std::ops::Range<usize>| v[r].iter().copied().max().unwrap_or(0);
    let burst_done = out.phase_settled.get(2).copied().flatten().unwrap_or(after);
    let during = out.range_until_seen(burst, burst_done);
    let marks = [
        ("before", out.index_at(burst - 1.0).map(|i| i..i + 1)),
        ("burst", (!during.is_empty()).then_some(during)),
        ("after", Some(last..last + 1)),
    ];
    let held: Vec<u64> = s.idle.iter().zip(&s.live).map(|(i, l)| i + l).collect();
    for (name, range) in marks {
        let Some(r) = range else { continue };
        m.insert(format!("idle_{name}"), max_in(&s.idle, r.clone()) as f64);
        m.insert(format!("stacks_{name}"), max_in(&held, r.clone()) as f64);
        m.insert(
            format!("vsz_{name}"),
            max_in(&s.vsz_kib, r.clone()) as f64 * 1024.0,
        );
        m.insert(format!("rss_{name}"), max_in(&s.rss_kib, r) as f64 * 1024.0);
    }
    // The sample nearest to SOON of a period after every worker was done
    // with the burst (the "after" phase is five periods).
    let period_ms = plan
        .phases
        .get(2)
        .map_or(0.0, |p| p.min.as_secs_f64() * 1000.0 / 5.0);
    if let Some(i) = out.index_at(burst_done + SOON * period_ms) {
        m.insert("rss_soon".into(), s.rss_kib[i] as f64 * 1024.0);
    }
    if let (Some(b), Some(p), Some(a)) =
        (m.get("vsz_before"), m.get("vsz_burst"), m.get("vsz_after"))
    {
        if p > b {
            m.insert("given_back".into(), (p - a) / (p - b));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyEnv;
    use crate::scenario::harness::{phased_worker, run};

    /// A burst round that outlasts its phase (what a loaded machine does to
    /// the quick run's 2 periods; here the phase is 10 ms and the round
    /// 2,048 stacks, about 100 ms, done well within the idle phase): the stacks it creates after the switch are
    /// still the burst's. A pool that never shrinks keeps every one, so its
    /// peak during the burst is all it ever created, and no less than what
    /// it holds idle after.
    #[test]
    fn the_burst_peak_counts_a_round_that_ends_after_the_switch() {
        const DEPTH: usize = 2048;
        let env = PolicyEnv {
            stack_size: 64 * 1024,
            reclaim_interval: Duration::from_secs(15),
            pressure_hold: Duration::from_secs(2),
            max_map_count: 65530,
            resident_touch: None,
            idle_decay: true,
        };
        let phase = |name: &str, ms: u64, load: Load| Phase {
            name: name.to_owned(),
            min: Duration::from_millis(ms),
            loads: vec![load],
        };
        let plan = Plan {
            phases: vec![
                phase("before", 5, Load::Rounds { depth: 1 }),
                phase("burst", 10, Load::Rounds { depth: DEPTH }),
                phase("after", 300, Load::Idle),
            ],
            sample_every: Duration::from_millis(1),
            abort_on_failure: false,
            touch: Touch::Small,
        };
        // The worker must see the burst phase at all (a starved one may
        // not, in 10 ms): run again until it did.
        let out = (0..10)
            .map(|_| {
                let policy = PolicyKind::Qemu2024.build(&env).unwrap();
                run(&*policy, &plan, &phased_worker(&plan))
            })
            .find(|out| out.created >= DEPTH as u64)
            .expect("in 10 runs, the worker never began a burst round");
        assert_eq!(out.failures, 0);
        let m = metrics(&out, &plan);
        assert_eq!(m["final_idle"], out.created as f64, "QEMU 2024 keeps all");
        assert!(
            m["stacks_burst"] >= m["idle_after"],
            "burst peak {} < idle after {}",
            m["stacks_burst"],
            m["idle_after"]
        );
    }
}
