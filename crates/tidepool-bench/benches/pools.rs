//! tidepool against the limit (a bare thread-local `Vec`, and below it a raw
//! thread-local array with no bookkeeping at all), two baselines and four
//! peer crates. Subjects are described in the crate docs (`src/lib.rs`).
//!
//! Groups (criterion ids `group/subject[/threads]`):
//!
//! * `round_trip/<subject>`: one thread, get + touch + put, time per round
//!   trip.
//! * `two_threads/<subject>/<n>`: `n` (1 or 2) threads hammer one shared
//!   subject; `iter_custom` times the region after a common barrier, and the
//!   figure is elapsed / iterations per thread: per-op time as one thread
//!   sees it. With 2 threads on 2 cores it stays flat only if the threads do
//!   not contend (and the machine is otherwise idle).
//! * `forward/<subject>`: a producer takes owned guards and sends them
//!   through a bounded channel; a consumer thread gives them back. Time per
//!   object, channel included (`no_pool` shows the channel + malloc cost
//!   alone).
//! * `get_drop/<subject>`: one thread takes an object and drops the guard at
//!   once (`GetDrop`): `core` (`Pool::get`), `core_owned`
//!   (`Pool::get_owned`) and `stack` (`StackPool::get`, a 1 MiB guarded
//!   stack), the three guards the targets compare.
//!
//! `TIDEPOOL_BENCH_QUICK=1` shortens every measurement (see `bin/bench.sh
//! --quick`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tidepool_bench::{
    run_forward, run_threads, GetDrop, LockfreeLinear, MutexVec, NoPool, ObjectPool, Opool, RawTls,
    ShardedSlab, Subject, Tidepool, TidepoolOwned, TlsVec,
};

fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("round_trip");
    fn one<S: Subject>(
        g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        s: S,
    ) {
        // Prime the subject so the first sample does not pay for creation.
        s.round_trip();
        g.bench_function(name, |b| b.iter(|| s.round_trip()));
        black_box(&s);
    }
    one(&mut g, "tidepool", Tidepool::new());
    one(&mut g, "tidepool_owned", TidepoolOwned(Tidepool::new()));
    one(&mut g, "tls_vec", TlsVec);
    one(&mut g, "raw_tls", RawTls);
    one(&mut g, "mutex_vec", MutexVec::default());
    one(&mut g, "no_pool", NoPool);
    one(&mut g, "object_pool", ObjectPool::new());
    one(&mut g, "lockfree_linear", LockfreeLinear::new());
    one(&mut g, "sharded_slab", ShardedSlab::new());
    one(&mut g, "opool", Opool::new());
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads");
    fn one<S: Subject>(
        g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        s: S,
    ) {
        for threads in [1, 2] {
            g.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &n| {
                b.iter_custom(|iters| run_threads(&s, n, iters))
            });
        }
    }
    one(&mut g, "tidepool", Tidepool::new());
    one(&mut g, "tls_vec", TlsVec);
    one(&mut g, "mutex_vec", MutexVec::default());
    one(&mut g, "no_pool", NoPool);
    one(&mut g, "object_pool", ObjectPool::new());
    one(&mut g, "lockfree_linear", LockfreeLinear::new());
    one(&mut g, "sharded_slab", ShardedSlab::new());
    one(&mut g, "opool", Opool::new());
    g.finish();
}

fn forward(c: &mut Criterion) {
    let mut g = c.benchmark_group("forward");
    fn one<S: Subject>(
        g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        s: S,
    ) {
        g.bench_function(name, |b| b.iter_custom(|iters| run_forward(&s, iters)));
    }
    // No `tls_vec`: a thread-local free list cannot forward (the consumer's
    // list would grow without bound and the producer would always allocate).
    one(&mut g, "tidepool", Tidepool::new());
    one(&mut g, "mutex_vec", MutexVec::default());
    one(&mut g, "no_pool", NoPool);
    one(&mut g, "object_pool", ObjectPool::new());
    one(&mut g, "lockfree_linear", LockfreeLinear::new());
    one(&mut g, "sharded_slab", ShardedSlab::new());
    one(&mut g, "opool", Opool::new());
    g.finish();
}

fn get_drop(c: &mut Criterion) {
    let mut g = c.benchmark_group("get_drop");
    fn one<S: GetDrop>(
        g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        name: &str,
        s: S,
    ) {
        s.get_drop();
        g.bench_function(name, |b| b.iter(|| s.get_drop()));
    }
    one(&mut g, "core", Tidepool::new());
    one(&mut g, "core_owned", TidepoolOwned(Tidepool::new()));
    #[cfg(target_os = "linux")]
    one(&mut g, "stack", tidepool_bench::Stacks::new());
    g.finish();
}

fn config() -> Criterion {
    let quick = std::env::var_os("TIDEPOOL_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
    let (warm_up, measure, samples) = if quick {
        (Duration::from_millis(300), Duration::from_millis(700), 10)
    } else {
        (Duration::from_secs(1), Duration::from_millis(2500), 40)
    };
    Criterion::default()
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(samples)
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = round_trip, get_drop, two_threads, forward
}
criterion_main!(benches);
