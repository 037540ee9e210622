//! Instance-call throughput: wasmtime async calls on pooled fiber stacks
//! against wasmtime's own stacks, in the same run.
//!
//! Each request is what a store-per-request server does: a new `Store`,
//! `instantiate_async` from an `InstancePre`, one `call_async`, drop the
//! store. The store takes one fiber stack for its first async call and
//! gives it back when dropped. Subjects (criterion ids `group/subject`):
//!
//! * `pooled`: `Config::pooled_stacks(StackPool)`, this crate;
//! * `on_demand`: wasmtime's default allocator, a fresh `mmap` +
//!   `mprotect` per store and an `munmap` when it drops;
//! * `pooling_allocator`: wasmtime's pooling instance allocator, which
//!   keeps instances and stacks in slots of its own (for reference: it
//!   pools more than stacks, and must be sized up front).
//!
//! Every subject uses wasmtime's default `async_stack_size` (2 MiB) and
//! `max_wasm_stack` (512 KiB). Groups:
//!
//! * `request`: one request at a time;
//! * `concurrent_64`: 64 requests in flight at once (each suspends once in
//!   an async host function), so 64 stacks are live together; time per
//!   request.
//!
//! After the run, the bench prints each group's medians and the ratios to
//! `pooled` (from criterion's `estimates.json`). `TIDEPOOL_BENCH_QUICK=1`
//! shortens every measurement.

#[cfg(target_os = "linux")]
mod linux {
    use std::future::Future;
    use std::hint::black_box;
    use std::path::PathBuf;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use criterion::{BenchmarkId, Criterion, Throughput};
    use tidepool::stack::StackPool;
    use tidepool_wasmtime::ConfigExt;
    use wasmtime::{
        Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
        PoolingAllocationConfig, Store,
    };

    /// wasmtime's default `async_stack_size`.
    const STACK_SIZE: usize = 2 << 20;
    const CONCURRENT: usize = 64;
    const SUBJECTS: [&str; 3] = ["pooled", "on_demand", "pooling_allocator"];
    const GROUPS: [&str; 2] = ["request", "concurrent_64"];

    /// `run(x)` = `yield(x) + 1`; `yield` returns `x`, suspending the fiber
    /// once when the request is one of many in flight.
    const WAT: &str = r#"
    (module
      (import "host" "yield" (func $yield (param i32) (result i32)))
      (func (export "run") (param i32) (result i32)
        (i32.add (call $yield (local.get 0)) (i32.const 1))))
    "#;

    fn engine(subject: &str) -> Engine {
        let mut config = Config::new();
        match subject {
            "pooled" => {
                let pool = StackPool::new(STACK_SIZE).expect("valid settings");
                config.pooled_stacks(pool);
            }
            "on_demand" => {}
            "pooling_allocator" => {
                let mut pooling = PoolingAllocationConfig::default();
                pooling
                    .total_core_instances(2 * CONCURRENT as u32)
                    .total_stacks(2 * CONCURRENT as u32)
                    .total_memories(0)
                    .total_tables(0);
                config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
            }
            _ => unreachable!("unknown subject {subject}"),
        }
        Engine::new(&config).expect("a valid config")
    }

    fn instance_pre(engine: &Engine, yielding: bool) -> InstancePre<()> {
        let module = Module::new(engine, WAT).expect("valid wat");
        let mut linker = Linker::new(engine);
        linker
            .func_wrap_async("host", "yield", move |_caller, (x,): (i32,)| {
                Box::new(async move {
                    if yielding {
                        YieldOnce(false).await;
                    }
                    x
                })
            })
            .expect("a new name");
        linker.instantiate_pre(&module).expect("imports satisfied")
    }

    async fn request(pre: &InstancePre<()>, x: i32) -> i32 {
        let mut store = Store::new(pre.module().engine(), ());
        let instance = pre.instantiate_async(&mut store).await.expect("instance");
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .expect("exported");
        run.call_async(&mut store, x).await.expect("the call")
    }

    type Task<'a> = Pin<Box<dyn Future<Output = i32> + 'a>>;

    /// Polls every task in turn until all are done (a waker that does
    /// nothing: the only waits are `YieldOnce`s, ready on the next poll).
    fn run_all(mut tasks: Vec<Task<'_>>) -> i32 {
        let mut cx = Context::from_waker(Waker::noop());
        let mut sum = 0;
        while !tasks.is_empty() {
            tasks.retain_mut(|task| match task.as_mut().poll(&mut cx) {
                Poll::Ready(y) => {
                    sum += y;
                    false
                }
                Poll::Pending => true,
            });
        }
        sum
    }

    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if std::mem::replace(&mut self.0, true) {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn one(pre: &InstancePre<()>) -> i32 {
        run_all(vec![Box::pin(request(pre, black_box(1)))])
    }

    fn many(pre: &InstancePre<()>) -> i32 {
        let tasks = (0..CONCURRENT as i32)
            .map(|x| Box::pin(request(pre, black_box(x))) as Task<'_>)
            .collect();
        run_all(tasks)
    }

    pub fn benches(c: &mut Criterion) {
        let mut g = c.benchmark_group("request");
        g.throughput(Throughput::Elements(1));
        for subject in SUBJECTS {
            let pre = instance_pre(&engine(subject), false);
            one(&pre); // the first stack, mapped outside the measurement
            g.bench_function(BenchmarkId::from_parameter(subject), |b| {
                b.iter(|| one(&pre))
            });
        }
        g.finish();

        let mut g = c.benchmark_group("concurrent_64");
        g.throughput(Throughput::Elements(CONCURRENT as u64));
        for subject in SUBJECTS {
            let pre = instance_pre(&engine(subject), true);
            many(&pre);
            g.bench_function(BenchmarkId::from_parameter(subject), |b| {
                b.iter(|| many(&pre))
            });
        }
        g.finish();
    }

    pub fn config() -> Criterion {
        let quick =
            std::env::var_os("TIDEPOOL_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
        let (warm_up, measure) = if quick {
            (Duration::from_millis(300), Duration::from_secs(1))
        } else {
            (Duration::from_secs(1), Duration::from_secs(3))
        };
        Criterion::default()
            .warm_up_time(warm_up)
            .measurement_time(measure)
            .configure_from_args()
    }

    /// `target/criterion`, found from this binary's path
    /// (`target/<profile>/deps/calls-*`).
    fn criterion_dir() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        Some(exe.parent()?.parent()?.parent()?.join("criterion"))
    }

    /// The median of `group/subject` in ns per iteration, if it was run.
    fn median_ns(dir: &std::path::Path, group: &str, subject: &str) -> Option<f64> {
        let path = dir.join(group).join(subject).join("new/estimates.json");
        let json = std::fs::read_to_string(path).ok()?;
        // `{"mean":{...},"median":{"confidence_interval":{...},"point_estimate":N,...`
        let median = &json[json.find("\"median\"")?..];
        let point = &median[median.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
        let end = point.find([',', '}'])?;
        point[..end].trim().parse().ok()
    }

    /// Medians per request and ratios to `pooled`, as in the README.
    pub fn summary() {
        let Some(dir) = criterion_dir() else { return };
        println!("\nmedian µs per request (ratio to pooled):");
        println!("| | {} |", SUBJECTS.join(" | "));
        println!("|---|{}", "---|".repeat(SUBJECTS.len()));
        for group in GROUPS {
            let per = if group == "request" {
                1.0
            } else {
                CONCURRENT as f64
            };
            let Some(base) = median_ns(&dir, group, "pooled") else {
                continue;
            };
            let cells: Vec<String> = SUBJECTS
                .iter()
                .map(|s| match median_ns(&dir, group, s) {
                    Some(ns) => format!("{:.2} ({:.2}×)", ns / per / 1000.0, ns / base),
                    None => "–".to_owned(),
                })
                .collect();
            println!("| {group} | {} |", cells.join(" | "));
        }
    }
}

#[cfg(target_os = "linux")]
fn main() {
    let mut c = linux::config();
    linux::benches(&mut c);
    c.final_summary();
    linux::summary();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("wasmtime stack benchmarks need Linux");
}
