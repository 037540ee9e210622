//! Two policies on the fio request loop in one process, in alternating
//! chunks: a paired comparison that the machine's drift between separate
//! runs (and between processes: address layout, physical pages) cannot
//! tilt, since every chunk of one policy sits between two of the other.
//!
//! ```text
//! cargo build --release -p tidepool-lab --example fio_ab
//! target/release/examples/fio_ab qemu-2024 tidepool [CHUNKS] [ROUNDS] [THREADS]
//! ```
//!
//! `THREADS` workers (default 4, as `tidepool-lab run`'s fio) each keep a
//! handle on both policies and run `ROUNDS` rounds (default 3000) of 256
//! requests (the fio scenario's: a 1 MiB pooled stack per request, 16 KiB of
//! frame written and read back) on one policy per chunk, A and B in turn,
//! `CHUNKS` times each (default 8), after one warm-up chunk of each. Prints
//! the median chunk time of each and, per pair of neighbouring chunks, B's
//! throughput over A's: median and quartiles.
//!
//! Both pools stay alive throughout, so a chunk starts with the other
//! policy's stacks in the caches: short chunks (a few hundred rounds)
//! measure mostly that cold start, long ones the steady state.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use tidepool_lab::policy::{Policy, PolicyEnv, PolicyKind};
use tidepool_lab::stack::{self, Touch};

/// The fio scenario's requests in flight per thread.
const DEPTH: usize = 256;

fn kind(name: &str) -> PolicyKind {
    match name {
        "tidepool" => PolicyKind::Tidepool,
        "qemu-2021" => PolicyKind::Qemu2021,
        "qemu-2024" => PolicyKind::Qemu2024,
        "qemu-fixed" => PolicyKind::QemuFixed,
        other => {
            eprintln!("unknown policy {other} (tidepool, qemu-2021, qemu-2024, qemu-fixed)");
            std::process::exit(2);
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: fio_ab POLICY_A POLICY_B [CHUNKS] [ROUNDS] [THREADS]");
        std::process::exit(2);
    }
    let number = |i: usize, default: usize| {
        args.get(i).map_or(default, |s| {
            s.parse().unwrap_or_else(|_| {
                eprintln!("not a number: {s}");
                std::process::exit(2)
            })
        })
    };
    let names = [args[1].as_str(), args[2].as_str()];
    let chunks = number(3, 8).max(1);
    let rounds = number(4, 3000).max(1);
    let threads = number(5, 4).max(1);
    // The lab's fio environment: QEMU's 1 MiB stacks, 15 s / 100.
    let env = PolicyEnv {
        stack_size: 1 << 20,
        reclaim_interval: Duration::from_millis(150),
        pressure_hold: tidepool_lab::scenario::scaled_pressure_hold(Duration::from_millis(150)),
        max_map_count: tidepool_lab::procfs::max_map_count().unwrap_or(65530),
        resident_touch: None,
    };
    let policies: Vec<Box<dyn Policy>> = names
        .iter()
        .map(|n| kind(n).build(&env).expect("policy"))
        .collect();
    // One warm-up chunk of each, then `chunks` of each, alternating.
    let total = 2 * (chunks + 1);
    let barrier = Barrier::new(threads + 1);
    let mut times = [Vec::new(), Vec::new()];
    std::thread::scope(|s| {
        for t in 0..threads {
            let (policies, barrier) = (&policies, &barrier);
            s.spawn(move || {
                let mut locals: Vec<_> = policies.iter().map(|p| p.local()).collect();
                let mut round = Vec::with_capacity(DEPTH);
                let mut id = (t as u64) << 40;
                let mut sum = 0u64;
                for c in 0..total {
                    barrier.wait();
                    let local = &mut locals[c % 2];
                    for _ in 0..rounds {
                        for _ in 0..DEPTH {
                            id += 1;
                            let stack = local.get().expect("a stack");
                            round.push(stack::start(stack, id, Touch::Large));
                        }
                        for req in round.drain(..) {
                            let (x, stack) = req.complete();
                            sum = sum.wrapping_add(x);
                            local.put(stack);
                        }
                    }
                    barrier.wait();
                }
                std::hint::black_box(sum);
            });
        }
        for c in 0..total {
            barrier.wait();
            let start = Instant::now();
            barrier.wait();
            if c >= 2 {
                times[c % 2].push(start.elapsed().as_secs_f64());
            }
        }
    });
    // B's throughput over A's, per pair of neighbouring chunks.
    let mut ratios: Vec<f64> = times[0].iter().zip(&times[1]).map(|(a, b)| a / b).collect();
    let requests = (threads * rounds * DEPTH) as f64;
    for (name, t) in names.iter().zip(times.iter_mut()) {
        let m = median(t);
        println!(
            "{name}: median chunk {:.1} ms, {:.2}M req/s",
            m * 1e3,
            requests / m / 1e6
        );
    }
    let n = ratios.len();
    let mid = median(&mut ratios);
    println!(
        "{} / {} req/s, paired chunks: median {mid:.3} (quartiles {:.3}-{:.3}, {n} pairs of {rounds} rounds x {threads} threads)",
        names[1],
        names[0],
        ratios[n / 4],
        ratios[(3 * n) / 4].min(ratios[n - 1]),
    );
}
