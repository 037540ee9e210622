//! `fio` and `fio-cross-thread` (seed 001).
//!
//! Seed 001 ran `fio --rw=randrw --bs=4k --iodepth=64 --numjobs=16` against
//! a virtio-blk disk: 1024 requests in flight, each a QEMU coroutine, and
//! found that the pre-2021 pool (64 per thread, 128 global) was too small,
//! so that "coroutine creation becomes a bottleneck"; the 2021 pool took
//! IOPS from 60k to 97k. The 2024 patch (seed 000) measured within
//! −0.3..+3.3 % of that.
//!
//! Here `J` worker threads each keep up to `D` requests in flight, in
//! rounds as an fio job with `iodepth_batch` does: submit `D` requests
//! (each a coroutine on a pooled 1 MiB stack that writes 16 KiB of frame
//! and suspends, "I/O submitted"), then complete them all.
//!
//! In `fio-cross-thread` the completions run on another thread (an
//! "iothread"), as when QEMU creates a coroutine in one thread and it
//! terminates in another: the case that took the 2021 patch out of QEMU
//! ("the thread-local book keeping ... was getting out of sync").

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::report::{Column, Format};
use crate::scenario::harness::{
    self, phased_worker, run_timers, Load, Phase, Plan, RunOutput, Worker,
};
use crate::scenario::{base_metrics, param, Settings, Spec};
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
            name: "fio".to_owned(),
            min: duration,
            loads,
            on_enter: None,
        }],
        sample_every: (duration / 60).clamp(Duration::from_millis(5), Duration::from_millis(25)),
        abort_on_failure: false,
        touch: Touch::Large,
    }
}

pub(crate) fn spec(settings: &Settings, completion: Completion) -> Spec {
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
        format!("{:?}", size.duration),
    );
    param(
        &mut params,
        "warm-up per policy",
        format!("{:?}", size.warmup),
    );
    let (id, title, seed, workload, make_worker): (
        _,
        _,
        _,
        String,
        for<'p> fn(&'p Plan) -> Box<Worker<'p>>,
    ) = match completion {
        Completion::SameThread => {
            param(&mut params, "completions", "on the submitting thread");
            (
                    "fio",
                    "fio: requests on pooled stacks",
                    "seed 001: with 64 per thread + 128 global, fio 'exhausts the coroutine pool and \
                     coroutine creation becomes a bottleneck'; the 2021 pool: 60k -> 97k IOPS. \
                     Seed 000: the 2024 pool keeps that (-0.3 .. +3.3 %).",
                    format!(
                        "{} threads each submit {} requests (a coroutine per request on a pooled stack; \
                         it writes 16 KiB of frame and suspends: I/O in flight), then complete them all; \
                         repeat for {:?}.",
                        size.jobs, size.depth, size.duration
                    ),
                    same_thread_worker,
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
                    "fio, completions on another thread",
                    "seed 001 (why it was dropped): 'Coroutines are created in one thread and then \
                     destroyed in another, so the thread-local book keeping that assumed coroutines \
                     live in a single thread was getting out of sync.'",
                    format!(
                        "as fio, but each batch of {} requests is completed by one iothread: every stack \
                         is taken on a submitting thread and given back on the iothread.",
                        size.depth
                    ),
                    cross_thread_worker,
                )
        }
    };
    Spec {
        id,
        title,
        seed,
        workload,
        params,
        columns: vec![
            Column::new("req_per_s", "req/s", Format::KiloPerSec),
            Column::new("created", "stacks created", Format::Count),
            Column::new("peak_idle", "peak idle", Format::Count),
            Column::new("final_idle", "final idle", Format::Count),
            Column::new("peak_vmas", "peak VMAs", Format::Count),
            Column::new("failures", "failures", Format::Count),
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

fn same_thread_worker(plan: &Plan) -> Box<Worker<'_>> {
    Box::new(phased_worker(plan))
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
