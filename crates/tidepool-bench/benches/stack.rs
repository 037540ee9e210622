//! Pooled coroutine stacks against fresh ones, in the same run.
//!
//! Groups (criterion ids `group/subject`):
//!
//! * `stack_get_put/<subject>`: take a 1 MiB guarded stack and give it back.
//!   `pooled` is `StackPool::get` + drop (this thread's cache: no syscall);
//!   `fresh` is corosensei's `DefaultStack::new` + drop (`mmap` + `mprotect`
//!   + `munmap`). Target: pooled at least 100x faster.
//! * `coroutine/<subject>`: create a coroutine on such a stack, run it to
//!   completion through one suspension, drop it. `fresh` also pays the page
//!   faults of a never-touched stack; `pooled` reuses warm pages.
//!
//! `TIDEPOOL_BENCH_QUICK=1` shortens every measurement.

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;
    use std::time::Duration;

    use corosensei::stack::DefaultStack;
    use corosensei::{Coroutine, CoroutineResult, Yielder};
    use criterion::{criterion_group, Criterion};
    use tidepool::stack::StackPool;

    /// corosensei's `DefaultStack::default()` size.
    const STACK_SIZE: usize = 1024 * 1024;

    fn pool() -> StackPool {
        let pool = StackPool::new(STACK_SIZE).expect("valid settings");
        // Prime: the first sample should not pay for the one `mmap`.
        drop(pool.get().expect("a stack"));
        pool
    }

    fn get_put(c: &mut Criterion) {
        let mut g = c.benchmark_group("stack_get_put");
        let pool = pool();
        g.bench_function("pooled", |b| {
            b.iter(|| black_box(pool.get().expect("a stack")))
        });
        g.bench_function("fresh", |b| {
            b.iter(|| black_box(DefaultStack::new(STACK_SIZE).expect("a stack")))
        });
        g.finish();
    }

    /// A request-like coroutine: one suspension, then a result.
    fn body(yielder: &Yielder<u64, u64>, x: u64) -> u64 {
        let y = yielder.suspend(black_box(x) + 1);
        x + y
    }

    fn run<S: corosensei::stack::Stack + 'static>(stack: S) -> u64 {
        let mut co = Coroutine::with_stack(stack, body);
        let CoroutineResult::Yield(y) = co.resume(1) else {
            unreachable!("the body suspends once")
        };
        let CoroutineResult::Return(r) = co.resume(y) else {
            unreachable!("and then returns")
        };
        r
    }

    fn coroutine(c: &mut Criterion) {
        let mut g = c.benchmark_group("coroutine");
        let pool = pool();
        g.bench_function("pooled", |b| b.iter(|| run(pool.get().expect("a stack"))));
        g.bench_function("fresh", |b| {
            b.iter(|| run(DefaultStack::new(STACK_SIZE).expect("a stack")))
        });
        g.finish();
    }

    fn config() -> Criterion {
        let quick =
            std::env::var_os("TIDEPOOL_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
        let (warm_up, measure) = if quick {
            (Duration::from_millis(300), Duration::from_secs(1))
        } else {
            (Duration::from_secs(1), Duration::from_secs(2))
        };
        Criterion::default()
            .warm_up_time(warm_up)
            .measurement_time(measure)
            .configure_from_args()
    }

    criterion_group! {
        name = benches;
        config = config();
        targets = get_put, coroutine
    }
}

#[cfg(target_os = "linux")]
criterion::criterion_main!(linux::benches);

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("stack benchmarks need Linux");
}
