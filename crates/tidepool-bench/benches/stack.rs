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
//! * `stack_create/<subject>`: make a batch of 32 guarded 64 KiB stacks (a
//!   thread cache's refill; 32 to a slab), with nothing to reuse; the
//!   teardown is not timed. `burst` is `StackManager::create_batch(32)`
//!   (one `mmap` + 32 guard calls: `madvise(MADV_GUARD_INSTALL)` on Linux
//!   6.13+, `mprotect` before); `one_by_one_slab` is 32
//!   `StackManager::create` calls (the same calls, one stack at a time);
//!   `one_by_one_own` is 32 `GuardedStack::new` (one mapping per stack,
//!   `mmap` + a guard call each);
//!   `burst_reused` refills 31 freed slots of a live slab (no syscall).
//!   `pool_burst` and `pool_one_by_one` take 32 stacks from a fresh
//!   `StackPool`, with `burst(32)` (one `create_batch` refill) and without
//!   (32 misses, one `create` each).
//!   Target: `burst` at least 2x faster than `one_by_one_own`; `pool_burst`
//!   against `pool_one_by_one` is reported (the same system calls either
//!   way: one `mmap` per slab, one guard call per stack). The refill
//!   against the classic one-by-one mapping (`mmap` + `mprotect` per
//!   stack), rounds interleaved and syscalls counted, is
//!   `src/bin/stack_refill.rs`, in `bin/bench.sh`'s table.
//! * `stack_teardown/<subject>`: tear down 32 such stacks, touched, the
//!   making not timed. `batch` is `StackManager::destroy_batch` (one
//!   `munmap` for the slab); `one_by_one_own` drops 32 `GuardedStack::new`s
//!   (32 `munmap`s).
//!
//! Exact system-call counts for a thousand stacks: `stack_teardown`
//! (`src/bin/stack_teardown.rs`).
//!
//! `TIDEPOOL_BENCH_QUICK=1` shortens every measurement.

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;
    use std::time::Duration;

    use corosensei::stack::DefaultStack;
    use corosensei::{Coroutine, CoroutineResult, Yielder};
    use criterion::{criterion_group, BatchSize, Criterion};
    use tidepool::stack::{GuardedStack, StackPool};
    use tidepool::Manage;

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

    /// A thread cache's refill in the creation benchmarks: one slab of
    /// 64 KiB stacks.
    const BURST: usize = 32;
    const BURST_STACK: usize = 64 * 1024;

    fn touch(stack: &GuardedStack) {
        // SAFETY: the usable part is writable and ours alone.
        unsafe { stack.bottom().as_ptr().write_bytes(1, stack.usable_size()) }
    }

    fn create(c: &mut Criterion) {
        let mut g = c.benchmark_group("stack_create");
        // No reuse possible between samples: every batch is torn down (not
        // timed) before the next, so each one maps a new slab.
        let pool = StackPool::builder(BURST_STACK).build().expect("valid");
        let m = pool.manager();
        assert_eq!(m.stacks_per_slab(), BURST, "one slab per burst");
        g.bench_function("burst", |b| {
            b.iter_batched(
                || (),
                |()| m.create_batch(BURST).expect("stacks"),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("one_by_one_slab", |b| {
            b.iter_batched(
                || (),
                |()| {
                    (0..BURST)
                        .map(|_| m.create().expect("a stack"))
                        .collect::<Vec<_>>()
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("one_by_one_own", |b| {
            b.iter_batched(
                || (),
                |()| {
                    (0..BURST)
                        .map(|_| GuardedStack::new(BURST_STACK).expect("a stack"))
                        .collect::<Vec<_>>()
                },
                BatchSize::PerIteration,
            )
        });
        // One stack keeps the slab mapped; the other 31 slots are freed
        // (released) before each sample and refilled in it.
        let mut holder = m.create_batch(BURST).expect("stacks");
        m.destroy_batch(holder.split_off(1));
        g.bench_function("burst_reused", |b| {
            b.iter_batched(
                || (),
                |()| m.create_batch(BURST - 1).expect("stacks"),
                BatchSize::PerIteration,
            )
        });
        drop(holder);
        // Through the pool: 32 gets from a fresh, empty pool, holding them
        // all. `pool_burst` refills the thread cache with one
        // `create_batch(32)` on the first miss (`burst(32)`);
        // `pool_one_by_one` misses 32 times, one `create` each (the
        // default). The pool and its stacks are dropped untimed.
        for (name, burst) in [("pool_burst", BURST), ("pool_one_by_one", 1)] {
            g.bench_function(name, |b| {
                b.iter_batched(
                    || {
                        StackPool::builder(BURST_STACK)
                            .batch_size(BURST)
                            .burst(burst)
                            .background(false)
                            .build()
                            .expect("valid")
                    },
                    |pool| {
                        let held: Vec<_> =
                            (0..BURST).map(|_| pool.get().expect("a stack")).collect();
                        (held, pool)
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        g.finish();
    }

    fn teardown(c: &mut Criterion) {
        let mut g = c.benchmark_group("stack_teardown");
        let pool = StackPool::builder(BURST_STACK).build().expect("valid");
        let m = pool.manager();
        g.bench_function("batch", |b| {
            b.iter_batched(
                || {
                    let v = m.create_batch(BURST).expect("stacks");
                    v.iter().for_each(touch);
                    v
                },
                |v| m.destroy_batch(v),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("one_by_one_own", |b| {
            b.iter_batched(
                || {
                    let v: Vec<_> = (0..BURST)
                        .map(|_| GuardedStack::new(BURST_STACK).expect("a stack"))
                        .collect();
                    v.iter().for_each(touch);
                    v
                },
                drop,
                BatchSize::PerIteration,
            )
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
        targets = get_put, coroutine, create, teardown
    }
}

#[cfg(target_os = "linux")]
criterion::criterion_main!(linux::benches);

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("stack benchmarks need Linux");
}
