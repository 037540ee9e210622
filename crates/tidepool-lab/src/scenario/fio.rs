//! `fio` and `fio-cross-thread` (seed 001).
//!
//! Seed 001 ran `fio --rw=randrw --bs=4k --iodepth=64 --numjobs=16` against
//! a virtio-blk disk: 1024 requests in flight, each a QEMU coroutine, and
//! found that the pre-2021 pool (64 per thread, 128 global) was too small,
//! so that "coroutine creation becomes a bottleneck"; the 2021 pool took
//! IOPS from 60k to 97k. The 2024 patch (seed 000) measured its capped pool
//! at 0.997–1.033× the IOPS of the pool it replaced (randread, 10 configs).
//!
//! Here `J` worker threads each keep up to `D` requests in flight, in
//! rounds as an fio job with `iodepth_batch` does: submit `D` requests
//! (each a coroutine on a pooled 1 MiB stack that writes 16 KiB of frame
//! and suspends, "I/O submitted"), then complete them all.
//!
//! Each measured run then goes on for [`QUIET_INTERVALS`] reclaim
//! intervals with every thread idle, as a disk does after a benchmark: req/s
//! and CPU per request are measured over the load alone, "idle as the load
//! ended" at the quiet's start (every pool then holds the requests that
//! were in flight, or more), and "final idle" at its end: what each policy
//! keeps once the load is gone.
//!
//! In `fio-cross-thread` the completions run on another thread (an
//! "iothread"), as when QEMU creates a coroutine in one thread and it
//! terminates in another: the case that took the 2021 patch out of QEMU
//! (Stefan Hajnoczi, when it was dropped: "the thread-local book keeping
//! ... was getting out of sync"; see [`crate::seeds::quote::QEMU_2021_DROPPED`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::policy::PolicyKind;
use crate::report::format::{count, Human};
use crate::report::summary::{times, Ratio};
use crate::report::{Claim, Column, Format, ScenarioReport, Verdict};
use crate::scenario::harness::{self, run_timers, Load, Phase, Plan, RunOutput, Worker};
use crate::scenario::{base_metrics, param, phased, plots, MakeWorker, Settings, Spec};
use crate::seeds::{published, quote};
use crate::stack::{InFlight, Touch};

/// QEMU's `COROUTINE_STACK_SIZE`, 1 MiB.
pub const QEMU_STACK_SIZE: usize = 1 << 20;

/// Where requests complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// On the thread that submitted them.
    SameThread,
    /// On one other thread, the "iothread".
    OtherThread,
}

/// Sizes of the fio workload.
#[derive(Clone, Copy, Debug)]
pub struct FioSize {
    /// Submitting threads (`numjobs`).
    pub jobs: usize,
    /// Requests in flight per thread (`iodepth`).
    pub depth: usize,
    /// Measured time per repeat.
    pub duration: Duration,
    /// Warm-up time per policy.
    pub warmup: Duration,
}

impl FioSize {
    /// The sizes for a full or a quick run.
    pub fn new(quick: bool) -> Self {
        if quick {
            FioSize {
                jobs: 2,
                depth: 128,
                duration: Duration::from_millis(250),
                warmup: Duration::from_millis(50),
            }
        } else {
            FioSize {
                jobs: 4,
                depth: 256,
                duration: Duration::from_millis(1500),
                warmup: Duration::from_millis(300),
            }
        }
    }
}

/// Reclaim intervals the measured runs go on, every thread idle, after the
/// load: long enough for a pool that gives back what it stops needing to
/// do so (a quiet cache is taken back after one interval, and idle objects
/// in the depot go at the passes after), so that "final idle" says what
/// each policy keeps once the load is gone.
pub const QUIET_INTERVALS: u32 = 4;

/// The run: the fio load for `duration`, then, if `quiet` is not zero, that
/// long with every thread idle.
fn plan(size: FioSize, completion: Completion, duration: Duration, quiet: Duration) -> Plan {
    let mut loads = vec![Load::Rounds { depth: size.depth }; size.jobs];
    if completion == Completion::OtherThread {
        loads.push(Load::Idle); // the completing thread
    }
    let mut phases = vec![Phase {
        name: "fio load".to_owned(),
        min: duration,
        loads: loads.clone(),
    }];
    if !quiet.is_zero() {
        phases.push(Phase {
            name: "quiet".to_owned(),
            min: quiet,
            loads: vec![Load::Idle; loads.len()],
        });
    }
    Plan {
        phases,
        sample_every: (duration / 60).clamp(Duration::from_millis(5), Duration::from_millis(25)),
        abort_on_failure: false,
        touch: Touch::Large,
    }
}

pub(crate) fn spec(settings: &Settings, completion: Completion) -> Spec<'static> {
    let size = FioSize::new(settings.quick);
    let quiet = settings.interval() * QUIET_INTERVALS;
    let mut params = BTreeMap::new();
    param(&mut params, "jobs (submitting threads)", size.jobs);
    param(&mut params, "iodepth per job", size.depth);
    param(&mut params, "requests in flight", size.jobs * size.depth);
    param(&mut params, "stack", "1 MiB + guard page (QEMU's)");
    param(&mut params, "stack touched per request", "16 KiB");
    param(
        &mut params,
        "duration per repeat",
        Human(size.duration).to_string(),
    );
    param(
        &mut params,
        "quiet after the load",
        format!(
            "{} ({QUIET_INTERVALS} reclaim intervals; \"final idle\" is counted at its end)",
            Human(quiet)
        ),
    );
    param(
        &mut params,
        "warm-up per policy",
        Human(size.warmup).to_string(),
    );
    let (id, title, seeds, finding, quotes, workload, make_worker): (
        _,
        _,
        &'static [&'static str],
        String,
        _,
        String,
        Box<MakeWorker<'static>>,
    ) = match completion {
        Completion::SameThread => {
            param(&mut params, "completions", "on the submitting thread");
            let (lo, hi) = published::qemu_2024_fio_ratio_range();
            (
                "fio",
                "fio: requests on pooled stacks",
                &["001", "000"],
                format!(
                    "Seed 001: with QEMU's fixed limits (64 per thread, 128 global) fio ran out \
                     of pooled coroutines and creating stacks became the bottleneck; the \
                     growing 2021 pool took IOPS from 60k to 97k. Seed 000: the capped 2024 \
                     pool measured {lo:.3}–{hi:.3}× the IOPS of the pool it replaced."
                ),
                vec![
                    quote::QEMU_2021_BOTTLENECK,
                    quote::QEMU_2021_LIMITS,
                    quote::QEMU_2024_GOAL,
                ],
                format!(
                    "{} threads each submit {} requests (a coroutine per request on a pooled \
                     stack; it writes 16 KiB of frame and suspends: I/O in flight), then \
                     complete them all; repeat for {}, then stay idle for {}.",
                    size.jobs,
                    size.depth,
                    Human(size.duration),
                    Human(quiet)
                ),
                phased(),
            )
        }
        Completion::OtherThread => {
            param(
                &mut params,
                "completions",
                "on one other thread (the iothread)",
            );
            (
                "fio-cross-thread",
                "fio-cross-thread: completions on another thread",
                &["001"],
                "Why seed 001 was dropped: coroutines created on one thread and terminated on \
                 another defeat per-thread bookkeeping (this is not in seed 001's text; it is \
                 the reason Stefan Hajnoczi gave when the patch was dropped)."
                    .to_owned(),
                vec![quote::QEMU_2021_DROPPED],
                format!(
                    "as fio, but each batch of {} requests is completed by one iothread: every \
                     stack is taken on a submitting thread and given back on the iothread; \
                     then every thread stays idle for {}.",
                    size.depth,
                    Human(quiet)
                ),
                Box::new(|plan: &Plan, _: PolicyKind| cross_thread_worker(plan)),
            )
        }
    };
    Spec {
        id,
        title,
        seeds,
        finding,
        quotes,
        workload,
        params,
        columns: vec![
            Column::new("req_per_s", "req/s", Format::KiloPerSec).terminal("req/s"),
            Column::new("cpu_us_per_req", "CPU per request (µs)", Format::Micros)
                .terminal("CPU µs/req"),
            Column::new("created", "stacks created", Format::Count).terminal("created"),
            Column::new("stacks_per_request", "stacks per request", Format::Ratio),
            Column::new("peak_idle", "peak idle", Format::Count).terminal("peak idle"),
            Column::new("load_end_idle", "idle as the load ended", Format::Count)
                .terminal("load-end idle"),
            Column::new("final_idle", "final idle (after the quiet)", Format::Count)
                .terminal("final idle"),
            Column::new("peak_vmas", "peak VMAs", Format::Count),
            Column::new("failures", "failures", Format::Count).terminal("failed"),
        ],
        plots: plots::over_run(&plots::STANDARD),
        headline: "req_per_s",
        env: settings.env(QEMU_STACK_SIZE, settings.interval()),
        plan: plan(size, completion, size.duration, quiet),
        warmup: Some(plan(size, completion, size.warmup, Duration::ZERO)),
        make_worker,
        metrics,
        notes: Vec::new(),
    }
}

/// What fio says about seeds 001 and 000 (same thread), or about why seed
/// 001 was dropped (cross thread).
pub(crate) fn claims(s: &ScenarioReport, completion: Completion) -> Vec<Claim> {
    let r = |p| s.result(p);
    let rate = "req_per_s";
    let mut out = Vec::new();
    let claim = |seed: &str,
                 claim: &str,
                 published: String,
                 published_detail: String,
                 ratio: Option<Ratio>,
                 what: &str,
                 rule: &str,
                 ok: &dyn Fn(f64) -> bool| {
        let (measured, detail, verdict) = match ratio {
            Some(q) => (
                q.short(),
                format!("{what}: {}", q.detail()),
                Verdict::of(ok(q.median)),
            ),
            None => (
                "–".to_owned(),
                format!("{what}: not measured (a policy was not run)"),
                Verdict::Unmeasured,
            ),
        };
        Claim {
            seed: seed.to_owned(),
            scenario: s.id.clone(),
            claim: claim.to_owned(),
            published,
            published_detail,
            measured,
            measured_detail: detail,
            rule: rule.to_owned(),
            verdict,
        }
    };
    let ratio = |a: PolicyKind, b: PolicyKind, key: &str| Ratio::of(r(a)?, r(b)?, key);
    match completion {
        Completion::SameThread => {
            let (before, after) = published::QEMU_2021_IOPS;
            out.push(claim(
                "001",
                "growing pool beats QEMU's fixed one",
                times(f64::from(after) / f64::from(before)),
                format!("fio IOPS {}k → {}k (seed 001)", before / 1000, after / 1000),
                ratio(PolicyKind::Qemu2021, PolicyKind::QemuFixed, rate),
                "req/s, qemu-2021 / qemu-fixed",
                "> 1.00×",
                &|x| x > 1.0,
            ));
            out.push(claim(
                "001",
                "tidepool ≥ qemu-2021 (fio req/s)",
                "–".to_owned(),
                "tidepool is to match or beat the seed's pool".to_owned(),
                ratio(PolicyKind::Tidepool, PolicyKind::Qemu2021, rate),
                "req/s, tidepool / qemu-2021",
                "≥ 1.00×",
                &|x| x >= 1.0,
            ));
            let (lo, hi) = published::qemu_2024_fio_ratio_range();
            out.push(claim(
                "000",
                "capping the pool costs no throughput",
                format!("{lo:.3}–{hi:.2}×"),
                format!(
                    "IOPS of the capped pool / the pool it replaced, 10 fio randread configs: \
                     {lo:.3}–{hi:.3}× (seed 000); here against QEMU 2021's unbounded pool, the \
                     \"adequately sized\" one"
                ),
                ratio(PolicyKind::Qemu2024, PolicyKind::Qemu2021, rate),
                "req/s, qemu-2024 / qemu-2021",
                "≥ 0.95× (within 5 %)",
                &|x| x >= 0.95,
            ));
            out.push(claim(
                "000",
                "tidepool ≥ qemu-2024 (fio req/s)",
                "–".to_owned(),
                "tidepool is to match or beat the seed's pool".to_owned(),
                ratio(PolicyKind::Tidepool, PolicyKind::Qemu2024, rate),
                "req/s, tidepool / qemu-2024",
                "≥ 1.00×",
                &|x| x >= 1.0,
            ));
            out.push(less_idle_claim(s, "000", Some(PolicyKind::Qemu2024)));
        }
        Completion::OtherThread => {
            let per = r(PolicyKind::Qemu2021).map(|q| q.metric("stacks_per_request"));
            out.push(Claim {
                seed: "001".to_owned(),
                scenario: s.id.clone(),
                claim: "cross-thread frees defeat the 2021 pool".to_owned(),
                published: "dropped".to_owned(),
                published_detail: "the patch was dropped from QEMU's pull request: \
                                   \"Coroutines are created in one thread and then destroyed \
                                   in another ...\" (Stefan Hajnoczi, not in seed 001's text)"
                    .to_owned(),
                measured: per.map_or("–".to_owned(), |p| format!("{p:.2}/req")),
                measured_detail: per.map_or("qemu-2021 not run".to_owned(), |p| {
                    format!("qemu-2021 maps {p:.2} new stacks per request (1.00: no reuse)")
                }),
                rule: "≥ 0.90 new stacks per request".to_owned(),
                verdict: per.map_or(Verdict::Unmeasured, |p| Verdict::of(p >= 0.9)),
            });
            let best = [
                PolicyKind::QemuFixed,
                PolicyKind::Qemu2021,
                PolicyKind::Qemu2024,
            ]
            .into_iter()
            .filter_map(|p| r(p).map(|x| (p, x.metric(rate))))
            .filter(|(_, v)| v.is_finite())
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(p, _)| p);
            let what = match best {
                Some(b) => format!("req/s, tidepool / {b} (the best seed policy here)"),
                None => "req/s, tidepool / the best seed policy".to_owned(),
            };
            out.push(claim(
                "001",
                "tidepool ≥ best seed pool, cross-thread",
                "–".to_owned(),
                "tidepool is to match or beat every seed's pool".to_owned(),
                best.and_then(|b| ratio(PolicyKind::Tidepool, b, rate)),
                &what,
                "≥ 1.00×",
                &|x| x >= 1.0,
            ));
            out.push(less_idle_claim(s, "001", best));
        }
    }
    out
}

/// Whether tidepool ends the run (after the quiet) holding fewer idle
/// stacks than `other`: medians, every repeat listed.
fn less_idle_claim(s: &ScenarioReport, seed: &str, other: Option<PolicyKind>) -> Claim {
    let key = "final_idle";
    let pair = other.and_then(|o| Some((o, s.result(PolicyKind::Tidepool)?, s.result(o)?)));
    let (measured, detail, verdict) = match pair {
        Some((o, t, b)) => {
            let (mt, mb) = (t.metric(key), b.metric(key));
            let runs = |r: &crate::report::PolicyResult| {
                r.per_run(key)
                    .iter()
                    .map(|&v| count(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            (
                format!("{} vs {}", count(mt), count(mb)),
                format!(
                    "idle stacks after the quiet, median: tidepool {} (runs {}) vs {o} {} (runs {})",
                    count(mt),
                    runs(t),
                    count(mb),
                    runs(b)
                ),
                Verdict::of(mt.is_finite() && mb.is_finite() && mt < mb),
            )
        }
        None => (
            "–".to_owned(),
            "final idle: not measured (a policy was not run)".to_owned(),
            Verdict::Unmeasured,
        ),
    };
    Claim {
        seed: seed.to_owned(),
        scenario: s.id.clone(),
        claim: match other {
            Some(o) => format!("tidepool ends with less idle than {o}"),
            None => "tidepool ends with less idle than best seed".to_owned(),
        },
        published: "–".to_owned(),
        published_detail: "tidepool is to keep less idle memory than the seed's pool once \
                           the load is gone"
            .to_owned(),
        measured,
        measured_detail: detail,
        rule: "fewer idle stacks (median)".to_owned(),
        verdict,
    }
}

fn metrics(out: &RunOutput, plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let end = out.phase_starts.first().copied().flatten().unwrap_or(0.0)
        + plan.phases[0].min.as_secs_f64() * 1e3;
    m.insert("req_per_s".into(), out.rate_between(0.0, end));
    // The quiet after the load: what was idle as it began (the first sample
    // once every worker had stopped submitting), and the CPU it took,
    // which is not the load's. Both CPU figures are of the samples' clock.
    let s = &out.series;
    let load_end = out
        .phase_settled
        .get(1)
        .copied()
        .flatten()
        .map(|t| s.t_ms.partition_point(|&x| x < t))
        .filter(|&i| i < s.t_ms.len());
    if let Some(i) = load_end {
        m.insert("load_end_idle".into(), s.idle[i] as f64);
        if let (Some(&last), Some(&then)) = (s.cpu_ms.last(), s.cpu_ms.get(i)) {
            let load_ms = then - out.cpu_clock_start_ms;
            m.insert("quiet_cpu_ms".into(), last - then);
            m.insert("load_cpu_ms".into(), load_ms);
            if out.completed > 0 {
                m.insert(
                    "cpu_us_per_req".into(),
                    load_ms * 1e3 / out.completed as f64,
                );
            }
        }
    }
    m
}

/// Submitters hand each round to the iothread and wait for it to come back.
fn cross_thread_worker(plan: &Plan) -> Box<Worker<'_>> {
    let submitters = plan.threads() - 1;
    let (tx, rx) = mpsc::channel::<(usize, Vec<InFlight>)>();
    let mut back_tx = Vec::new();
    let mut back_rx = Vec::new();
    for _ in 0..submitters {
        let (t, r) = mpsc::channel::<Vec<InFlight>>();
        back_tx.push(t);
        back_rx.push(Mutex::new(Some(r)));
    }
    let inbox = Mutex::new(Some(rx));
    let tx = Mutex::new(tx);
    let back_tx = Mutex::new(back_tx);
    Box::new(move |idx, h, local| {
        let tick = Duration::from_millis(1);
        if idx == submitters {
            let Some(rx) = inbox.lock().unwrap_or_else(PoisonError::into_inner).take() else {
                return;
            };
            let back: Vec<Sender<Vec<InFlight>>> = back_tx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            iothread(h, idx, local, &rx, &back, submitters, tick);
            return;
        }
        let Some(back) = back_rx[idx]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let tx = tx.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let Load::Rounds { depth } = plan.phases[0].loads[idx] else {
            return;
        };
        let cell = &h.cells[idx];
        let mut batch: Vec<InFlight> = Vec::with_capacity(depth);
        let mut id = h.ids();
        'run: loop {
            run_timers(local);
            if h.stop.load(Ordering::Acquire) {
                break;
            }
            let phase = h.phase.load(Ordering::Acquire);
            if phase != 0 {
                // The quiet after the load: the last batch has come back,
                // so every request this thread submitted has completed.
                cell.at_phase.store(phase, Ordering::Release);
                harness::idle_tick(local, tick);
                continue;
            }
            for _ in 0..depth {
                id += 1;
                match h.submit(local, cell, id, plan.touch) {
                    Some(req) => batch.push(req),
                    None => break,
                }
            }
            if tx.send((idx, std::mem::take(&mut batch))).is_err() {
                break;
            }
            loop {
                match back.recv_timeout(tick) {
                    Ok(b) => {
                        batch = b;
                        break;
                    }
                    Err(RecvTimeoutError::Timeout) => run_timers(local),
                    Err(RecvTimeoutError::Disconnected) => break 'run,
                }
            }
        }
        h.finished.fetch_add(1, Ordering::AcqRel);
    })
}

fn iothread(
    h: &harness::Harness,
    idx: usize,
    local: &mut dyn crate::policy::Local,
    rx: &Receiver<(usize, Vec<InFlight>)>,
    back: &[Sender<Vec<InFlight>>],
    submitters: usize,
    tick: Duration,
) {
    let cell = &h.cells[idx];
    let mut checksum = 0u64;
    loop {
        // Holds no request of its own between batches: it has begun any
        // phase the submitters have (they gate the quiet's settling).
        cell.at_phase
            .store(h.phase.load(Ordering::Acquire), Ordering::Release);
        match rx.recv_timeout(tick) {
            Ok((from, mut batch)) => {
                checksum ^= h.complete_all(&mut batch, local, cell);
                let _ = back[from].send(batch);
            }
            Err(RecvTimeoutError::Timeout) => {
                if h.stop.load(Ordering::Acquire)
                    && h.finished.load(Ordering::Acquire) == submitters
                {
                    break;
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
        run_timers(local);
    }
    std::hint::black_box(checksum);
}
