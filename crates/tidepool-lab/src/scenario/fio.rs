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
use crate::report::format::Human;
use crate::report::summary::{times, Ratio};
use crate::report::{Claim, Column, Format, ScenarioReport, Verdict};
use crate::scenario::harness::{self, run_timers, Load, Phase, Plan, RunOutput, Worker};
use crate::scenario::{base_metrics, param, phased, MakeWorker, Settings, Spec};
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

fn plan(size: FioSize, completion: Completion, duration: Duration) -> Plan {
    let mut loads = vec![Load::Rounds { depth: size.depth }; size.jobs];
    if completion == Completion::OtherThread {
        loads.push(Load::Idle); // the completing thread
    }
    Plan {
        phases: vec![Phase {
            name: "fio load".to_owned(),
            min: duration,
            loads,
        }],
        sample_every: (duration / 60).clamp(Duration::from_millis(5), Duration::from_millis(25)),
        abort_on_failure: false,
        touch: Touch::Large,
    }
}

pub(crate) fn spec(settings: &Settings, completion: Completion) -> Spec<'static> {
    let size = FioSize::new(settings.quick);
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
                     complete them all; repeat for {}.",
                    size.jobs,
                    size.depth,
                    Human(size.duration)
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
                     stack is taken on a submitting thread and given back on the iothread.",
                    size.depth
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
            Column::new("final_idle", "final idle", Format::Count).terminal("final idle"),
            Column::new("peak_vmas", "peak VMAs", Format::Count),
            Column::new("failures", "failures", Format::Count).terminal("failed"),
        ],
        headline: "req_per_s",
        env: settings.env(QEMU_STACK_SIZE, settings.interval()),
        plan: plan(size, completion, size.duration),
        warmup: Some(plan(size, completion, size.warmup)),
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
        }
    }
    out
}

fn metrics(out: &RunOutput, plan: &Plan) -> BTreeMap<String, f64> {
    let mut m = base_metrics(out);
    let end = out.phase_starts.first().copied().flatten().unwrap_or(0.0)
        + plan.phases[0].min.as_secs_f64() * 1e3;
    m.insert("req_per_s".into(), out.rate_between(0.0, end));
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
