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
//!
//! With `FIO_AB_FRESH=1` every chunk instead builds its policy anew, on
//! threads of its own, as each repeat of `tidepool-lab run` does: the
//! chunk then includes what a new pool pays to reach its working set
//! (creating its stacks; for tidepool, growing its batch), and the pool
//! is dropped, untimed, after it.
//!
//! With `FIO_AB_TIMELINE=1` it also prints, to standard error, each
//! measured chunk's policy and its start and end on `CLOCK_MONOTONIC`
//! (`chunk POLICY START END`, seconds), so that a profile taken on the
//! same clock can be split by policy: where each policy's time goes, for
//! the same requests.
//!
//! ```text
//! FIO_AB_TIMELINE=1 perf record -k CLOCK_MONOTONIC -e cpu-clock -o ab.data \
//!     target/release/examples/fio_ab qemu-2024 tidepool 2> ab.timeline
//! perf script -i ab.data -F time,ip,sym | bin/perf-by-chunk.py ab.timeline
//! ```
//!
//! Note that tidepool reclaims its idle stacks while the other policy runs
//! its chunk (that is what the pool is for), and creates them again at the
//! start of its own: `fio_ab` charges it that, which the lab's `fio`, one
//! policy at a time, does not.

use std::sync::Barrier;
use std::time::Instant;

use tidepool_lab::policy::{Local, Policy, PolicyKind};
use tidepool_lab::scenario::fio::{FioSize, QEMU_STACK_SIZE};
use tidepool_lab::scenario::Settings;
use tidepool_lab::stack::{self, Touch};

/// A stack-pool policy by its command-line name, or exit with the reason.
fn kind(name: &str) -> PolicyKind {
    match <PolicyKind as clap::ValueEnum>::from_str(name, false) {
        Ok(kind) if kind.is_pool() => kind,
        Ok(kind) => fail(&format!("{kind} is not a stack pool")),
        Err(e) => fail(&e),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("fio_ab: {message}");
    std::process::exit(2);
}

/// Seconds on `CLOCK_MONOTONIC`, the clock `perf record -k
/// CLOCK_MONOTONIC` stamps its samples with.
fn monotonic() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        fail("usage: fio_ab POLICY_A POLICY_B [CHUNKS] [ROUNDS] [THREADS]");
    }
    let number = |i: usize, default: usize| {
        args.get(i).map_or(default, |s| {
            s.parse()
                .unwrap_or_else(|_| fail(&format!("not a number: {s}")))
        })
    };
    let names = [args[1].as_str(), args[2].as_str()];
    let chunks = number(3, 8).max(1);
    let rounds = number(4, 3000).max(1);
    // The full run's fio: its threads and requests in flight per thread.
    let size = FioSize::new(false);
    let threads = number(5, size.jobs).max(1);
    let depth = size.depth;
    // What `tidepool-lab run` builds fio's policies with.
    let settings = Settings::new(false);
    let env = settings.env(QEMU_STACK_SIZE, settings.interval());
    let policies: Vec<Box<dyn Policy>> = names
        .iter()
        .map(|n| kind(n).build(&env).unwrap_or_else(|e| fail(&e)))
        .collect();
    let timeline = std::env::var_os("FIO_AB_TIMELINE").is_some_and(|v| v == "1");
    if std::env::var_os("FIO_AB_FRESH").is_some_and(|v| v == "1") {
        let kinds = [kind(names[0]), kind(names[1])];
        let times = fresh_chunks(kinds, &env, chunks, rounds, threads, depth);
        return report(names, times, rounds, threads, depth);
    }
    // One warm-up chunk of each, then `chunks` of each, alternating.
    let total = 2 * (chunks + 1);
    let barrier = Barrier::new(threads + 1);
    let mut times = [Vec::new(), Vec::new()];
    std::thread::scope(|s| {
        for t in 0..threads {
            let (policies, barrier) = (&policies, &barrier);
            s.spawn(move || {
                let mut locals: Vec<_> = policies.iter().map(|p| p.local()).collect();
                let mut round = Vec::with_capacity(depth);
                let mut id = (t as u64) << 40;
                let mut sum = 0u64;
                for c in 0..total {
                    barrier.wait();
                    let local = &mut *locals[c % 2];
                    sum = sum.wrapping_add(requests(local, &mut round, &mut id, rounds, depth));
                    barrier.wait();
                }
                std::hint::black_box(sum);
            });
        }
        for c in 0..total {
            barrier.wait();
            let start = Instant::now();
            let opened = monotonic();
            barrier.wait();
            if c >= 2 {
                times[c % 2].push(start.elapsed().as_secs_f64());
                if timeline {
                    eprintln!("chunk {} {opened:.6} {:.6}", names[c % 2], monotonic());
                }
            }
        }
    });
    report(names, times, rounds, threads, depth);
}

/// `rounds` rounds of `depth` requests on `local` (submit all, then
/// complete all), ids counted on from `id`; returns their checksums' sum.
fn requests(
    local: &mut dyn Local,
    round: &mut Vec<stack::InFlight>,
    id: &mut u64,
    rounds: usize,
    depth: usize,
) -> u64 {
    let mut sum = 0u64;
    for _ in 0..rounds {
        for _ in 0..depth {
            *id += 1;
            let stack = local.get().expect("a stack");
            round.push(stack::start(stack, *id, Touch::Large));
        }
        for req in round.drain(..) {
            let (x, stack) = req.complete();
            sum = sum.wrapping_add(x);
            local.put(stack);
        }
    }
    sum
}

/// One warm-up chunk of each policy, then `chunks` of each, alternating;
/// each chunk builds its policy and threads anew and times the requests
/// alone. Returns each policy's chunk times (seconds).
fn fresh_chunks(
    kinds: [PolicyKind; 2],
    env: &tidepool_lab::policy::PolicyEnv,
    chunks: usize,
    rounds: usize,
    threads: usize,
    depth: usize,
) -> [Vec<f64>; 2] {
    let mut times = [Vec::new(), Vec::new()];
    for c in 0..2 * (chunks + 1) {
        let policy = kinds[c % 2].build(env).unwrap_or_else(|e| fail(&e));
        let barrier = Barrier::new(threads + 1);
        let elapsed = std::thread::scope(|s| {
            for t in 0..threads {
                let (policy, barrier) = (&policy, &barrier);
                s.spawn(move || {
                    let mut local = policy.local();
                    let mut round = Vec::with_capacity(depth);
                    let mut id = (t as u64) << 40;
                    barrier.wait();
                    let sum = requests(&mut *local, &mut round, &mut id, rounds, depth);
                    std::hint::black_box(sum);
                    barrier.wait();
                });
            }
            barrier.wait();
            let start = Instant::now();
            barrier.wait();
            start.elapsed().as_secs_f64()
        });
        drop(policy);
        if c >= 2 {
            times[c % 2].push(elapsed);
        }
    }
    times
}

/// Prints each policy's median chunk and B's throughput over A's per pair
/// of neighbouring chunks.
fn report(names: [&str; 2], mut times: [Vec<f64>; 2], rounds: usize, threads: usize, depth: usize) {
    // B's throughput over A's, per pair of neighbouring chunks.
    let mut ratios: Vec<f64> = times[0].iter().zip(&times[1]).map(|(a, b)| a / b).collect();
    let requests = (threads * rounds * depth) as f64;
    for (name, t) in names.iter().zip(times.iter_mut()) {
        let m = median(t);
        println!(
            "{name}: median chunk {:.1} ms, {:.2}M req/s",
            m * 1e3,
            requests / m / 1e6
        );
    }
    let n = ratios.len();
    // Sorts `ratios`, so the quartiles below are in place.
    let mid = median(&mut ratios);
    println!(
        "{} / {} req/s, paired chunks: median {mid:.3} (quartiles {:.3}-{:.3}, {n} pairs of {rounds} rounds x {threads} threads)",
        names[1],
        names[0],
        ratios[n / 4],
        ratios[3 * n / 4],
    );
}
