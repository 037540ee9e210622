//! `roundtrip SUBJECT N`: N single-thread round trips on one subject (names
//! as in the benchmarks), for counting instructions under callgrind
//! (`bin/callgrind.sh`). The subject is built and primed with one round trip
//! before the loop, so running with N = 0 measures everything but the loop.
//!
//! `roundtrip SUBJECT N THREADS`: a quick wall-clock check instead: THREADS
//! threads each do N round trips on one shared subject, five times over
//! (`run_threads`, as in the `two_threads` benchmark); prints ns per op per
//! thread for each run.
//!
//! `roundtrip SUBJECT N forward`: likewise for the forward benchmark
//! (`run_forward`): ns per object sent from one thread to another.

use std::process::ExitCode;

use tidepool_bench::{
    LockfreeLinear, MutexVec, NoPool, ObjectPool, Opool, ShardedSlab, Subject, Tidepool,
    TidepoolOwned, TlsVec,
};

/// Names accepted, in the order `callgrind.sh` reports them.
const SUBJECTS: &[&str] = &[
    "tidepool",
    "tidepool_owned",
    "tls_vec",
    "mutex_vec",
    "no_pool",
    "object_pool",
    "lockfree_linear",
    "sharded_slab",
    "opool",
];

#[inline(never)]
fn run<S: Subject>(subject: S, n: u64, mode: Mode) {
    subject.round_trip();
    let (what, f): (String, &dyn Fn() -> std::time::Duration) = match mode {
        Mode::Count => {
            for _ in 0..n {
                subject.round_trip();
            }
            return;
        }
        Mode::Threads(t) => (format!("ns/op/thread with {t} thread(s)"), &move || {
            tidepool_bench::run_threads(&subject, t, n)
        }),
        Mode::Forward => ("ns/object forwarded".to_string(), &|| {
            tidepool_bench::run_forward(&subject, n)
        }),
    };
    let runs: Vec<String> = (0..5)
        .map(|_| format!("{:.1}", f().as_nanos() as f64 / n.max(1) as f64))
        .collect();
    println!("{what}: {}", runs.join(" "));
}

/// What to do with the subject.
#[derive(Clone, Copy)]
enum Mode {
    /// Round trips on this thread, no output (for callgrind).
    Count,
    /// Timed round trips on this many threads at once.
    Threads(usize),
    /// Timed forwarding through a channel.
    Forward,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(name), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse::<u64>())) else {
        eprintln!(
            "usage: roundtrip SUBJECT N [THREADS | forward]\nsubjects: {}",
            SUBJECTS.join(" ")
        );
        return ExitCode::from(2);
    };
    let threads = match args.get(3).map(String::as_str) {
        None => Mode::Count,
        Some("forward") => Mode::Forward,
        Some(t) => match t.parse::<usize>() {
            Ok(t) if t > 0 => Mode::Threads(t),
            _ => {
                eprintln!("THREADS must be a positive number or `forward`");
                return ExitCode::from(2);
            }
        },
    };
    match name.as_str() {
        "tidepool" => run(Tidepool::new(), n, threads),
        "tidepool_owned" => run(TidepoolOwned(Tidepool::new()), n, threads),
        "tls_vec" => run(TlsVec, n, threads),
        "mutex_vec" => run(MutexVec::default(), n, threads),
        "no_pool" => run(NoPool, n, threads),
        "object_pool" => run(ObjectPool::new(), n, threads),
        "lockfree_linear" => run(LockfreeLinear::new(), n, threads),
        "sharded_slab" => run(ShardedSlab::new(), n, threads),
        "opool" => run(Opool::new(), n, threads),
        "--list" => println!("{}", SUBJECTS.join("\n")),
        other => {
            eprintln!("unknown subject {other}; subjects: {}", SUBJECTS.join(" "));
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
