//! `roundtrip SUBJECT N`: N single-thread operations on one subject, for
//! counting instructions under callgrind (`bin/callgrind.sh`,
//! `bin/budget.sh`). The subject is built and primed with one operation
//! first; the N operations run inside [`measured_loop`] and nothing else
//! does, so `valgrind --tool=callgrind --toggle-collect='*measured_loop*'`
//! counts exactly them: instructions per operation = Ir / N.
//!
//! Subjects: the round-trip ones of the benchmarks (get, touch, put; names as
//! in `benches/pools.rs`) and the get + drop ones (`core_get_drop`,
//! `core_owned_get_drop`, `stack_get_drop`, and `stack_get_drop_apart`,
//! whose get and drop are each behind a call that is not inlined; and
//! `stack_get_put`, `stack_get_put_apart`, which give the stack back with
//! `StackPool::put`; and `slotless_get_drop`, in pools where the thread
//! keeps no cache; see `GetDrop`).
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
    GetDrop, LockfreeLinear, MutexVec, NoPool, ObjectPool, Opool, ShardedSlab, Subject, Tidepool,
    TidepoolOwned, TlsVec,
};

/// Round-trip subjects, in the order `callgrind.sh` reports them.
const ROUND_TRIPS: &[&str] = &[
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

/// Get + drop subjects.
const GET_DROPS: &[&str] = &[
    "core_get_drop",
    "core_owned_get_drop",
    "stack_get_drop",
    "stack_get_drop_apart",
    "stack_get_put",
    "stack_get_put_apart",
    "c_obj_get_put",
    "c_obj_get_put_checked",
    "slotless_get_drop",
];

/// The region callgrind counts: `n` calls of `op`, inlined into the loop.
#[inline(never)]
fn measured_loop(op: impl Fn(), n: u64) {
    for _ in 0..n {
        op();
    }
}

fn run<S: Subject>(subject: S, n: u64, mode: Mode) -> Result<(), String> {
    subject.round_trip();
    let (what, f): (String, &dyn Fn() -> std::time::Duration) = match mode {
        Mode::Count => {
            measured_loop(|| subject.round_trip(), n);
            return Ok(());
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
    Ok(())
}

fn run_get_drop<S: GetDrop>(subject: S, n: u64, mode: Mode) -> Result<(), String> {
    subject.get_drop();
    match mode {
        Mode::Count => {
            measured_loop(|| subject.get_drop(), n);
            Ok(())
        }
        Mode::Threads(1) => {
            let runs: Vec<String> = (0..5)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    measured_loop(|| subject.get_drop(), n);
                    format!("{:.1}", t0.elapsed().as_nanos() as f64 / n.max(1) as f64)
                })
                .collect();
            println!("ns/op with 1 thread: {}", runs.join(" "));
            Ok(())
        }
        _ => Err("get + drop subjects run on one thread only".into()),
    }
}

/// What to do with the subject.
#[derive(Clone, Copy)]
enum Mode {
    /// Operations on this thread, no output (for callgrind).
    Count,
    /// Timed round trips on this many threads at once.
    Threads(usize),
    /// Timed forwarding through a channel.
    Forward,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--list") {
        for name in ROUND_TRIPS.iter().chain(GET_DROPS) {
            println!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    let (Some(name), Some(Ok(n))) = (args.get(1), args.get(2).map(|n| n.parse::<u64>())) else {
        eprintln!(
            "usage: roundtrip SUBJECT N [THREADS | forward] | roundtrip --list\nsubjects: {} {}",
            ROUND_TRIPS.join(" "),
            GET_DROPS.join(" ")
        );
        return ExitCode::from(2);
    };
    let mode = match args.get(3).map(String::as_str) {
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
    let result = match name.as_str() {
        "tidepool" => run(Tidepool::new(), n, mode),
        "tidepool_owned" => run(TidepoolOwned(Tidepool::new()), n, mode),
        "tls_vec" => run(TlsVec, n, mode),
        "mutex_vec" => run(MutexVec::default(), n, mode),
        "no_pool" => run(NoPool, n, mode),
        "object_pool" => run(ObjectPool::new(), n, mode),
        "lockfree_linear" => run(LockfreeLinear::new(), n, mode),
        "sharded_slab" => run(ShardedSlab::new(), n, mode),
        "opool" => run(Opool::new(), n, mode),
        "core_get_drop" => run_get_drop(Tidepool::new(), n, mode),
        "core_owned_get_drop" => run_get_drop(TidepoolOwned(Tidepool::new()), n, mode),
        #[cfg(target_os = "linux")]
        "stack_get_drop" => run_get_drop(tidepool_bench::Stacks::new(), n, mode),
        #[cfg(target_os = "linux")]
        "stack_get_drop_apart" => run_get_drop(tidepool_bench::StacksApart::default(), n, mode),
        #[cfg(target_os = "linux")]
        "stack_get_put" => run_get_drop(tidepool_bench::StacksPut::default(), n, mode),
        #[cfg(target_os = "linux")]
        "stack_get_put_apart" => run_get_drop(tidepool_bench::StacksPutApart::default(), n, mode),
        "c_obj_get_put" => run_get_drop(tidepool_bench::CObjects::new(false), n, mode),
        "c_obj_get_put_checked" => run_get_drop(tidepool_bench::CObjects::new(true), n, mode),
        "slotless_get_drop" => run_get_drop(tidepool_bench::Slotless::new(), n, mode),
        other => Err(format!(
            "unknown subject {other}; subjects: {} {}",
            ROUND_TRIPS.join(" "),
            GET_DROPS.join(" ")
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
