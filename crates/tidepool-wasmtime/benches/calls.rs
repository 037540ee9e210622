//! Instance-call throughput: wasmtime async calls on pooled fiber stacks
//! and pooled linear memories against wasmtime's own allocators, in the
//! same run.
//!
//! Each request is what a store-per-request server does: a new `Store`,
//! `instantiate_async` from an `InstancePre`, one `call_async` (which
//! suspends once in an async host function when many are in flight), drop
//! the store. Subjects (criterion ids `group/subject`):
//!
//! * `pooled`: this crate: `Config::pooled_stacks(StackPool)`, and for
//!   modules with a memory `Config::pooled_memories(PooledMemoryCreator)`;
//! * `on_demand`: wasmtime's default allocator: a fresh `mmap` + `mprotect`
//!   per stack and per memory, an `munmap` when the store drops;
//! * `pooling_allocator`: wasmtime's pooling instance allocator, sized for
//!   the largest load here (1,024 instances, stacks and memories);
//! * `bounded_queue`: the stack pool wasmtime users hand-write, a
//!   `StackCreator` over a `Mutex<Vec>` of at most 100 guarded stacks
//!   (memories on demand).
//!
//! Groups: `request` (one request at a time), `concurrent_64` and
//! `concurrent_512` (that many in flight; time per batch), for a module
//! without memory, and the same three with a `memory_` prefix for a module
//! with a 17-page (1.06 MiB) memory whose call touches 15 pages of it and
//! recurses 50 deep.
//!
//! After the run, the bench prints each group's medians per request and the
//! ratios to `pooled` (from criterion's `estimates.json`).
//! `TIDEPOOL_BENCH_QUICK=1` shortens every measurement.

#[cfg(target_os = "linux")]
mod linux {
    use std::future::Future;
    use std::hint::black_box;
    use std::path::PathBuf;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use std::ops::Range;
    use std::sync::{Arc, Mutex};

    use criterion::{BenchmarkId, Criterion, Throughput};
    use tidepool::stack::{GuardedStack, StackPool};
    use tidepool_wasmtime::{ConfigExt, PooledMemoryCreator};
    use wasmtime::{
        Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
        PoolingAllocationConfig, StackCreator, StackMemory, Store,
    };

    /// wasmtime's default `async_stack_size`.
    const STACK_SIZE: usize = 2 << 20;
    const SUBJECTS: [&str; 4] = ["pooled", "on_demand", "pooling_allocator", "bounded_queue"];
    /// Requests in flight per group.
    const LOADS: [(&str, usize); 3] = [
        ("request", 1),
        ("concurrent_64", 64),
        ("concurrent_512", 512),
    ];
    /// What the pooling allocator is sized for: twice the largest load.
    const POOLING_SLOTS: u32 = 1024;
    /// The hand-written queue's bound.
    const QUEUE_BOUND: usize = 100;

    /// `run(x)` = `yield(x) + 1`; `yield` returns `x`, suspending the fiber
    /// once when the request is one of many in flight.
    const WAT: &str = r#"
    (module
      (import "host" "yield" (func $yield (param i32) (result i32)))
      (func (export "run") (param i32) (result i32)
        (i32.add (call $yield (local.get 0)) (i32.const 1))))
    "#;

    fn engine(subject: &str, memory: bool) -> Engine {
        let mut config = Config::new();
        match subject {
            "pooled" => {
                let pool = StackPool::new(STACK_SIZE).expect("valid settings");
                config.pooled_stacks(pool);
                if memory {
                    let memories = PooledMemoryCreator::new().expect("valid settings");
                    config.pooled_memories(Arc::new(memories));
                }
            }
            "on_demand" => {}
            "pooling_allocator" => {
                let mut pooling = PoolingAllocationConfig::default();
                pooling
                    .total_core_instances(POOLING_SLOTS)
                    .total_stacks(POOLING_SLOTS)
                    .total_memories(if memory { POOLING_SLOTS } else { 0 })
                    .total_tables(0);
                config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
            }
            "bounded_queue" => {
                config
                    .async_stack_size(STACK_SIZE)
                    .with_host_stack(Arc::new(QueueStacks::default()));
            }
            _ => unreachable!("unknown subject {subject}"),
        }
        Engine::new(&config).expect("a valid config")
    }

    /// A stack pool as wasmtime users write it: a locked queue of at most
    /// `QUEUE_BOUND` guarded stacks, each given back on drop (or unmapped
    /// when the queue is full).
    #[derive(Default)]
    struct QueueStacks(Arc<Mutex<Vec<GuardedStack>>>);

    struct QueuedStack {
        stack: Option<GuardedStack>,
        queue: Arc<Mutex<Vec<GuardedStack>>>,
    }

    impl QueuedStack {
        fn stack(&self) -> &GuardedStack {
            self.stack.as_ref().expect("held until drop")
        }
    }

    impl Drop for QueuedStack {
        fn drop(&mut self) {
            let stack = self.stack.take().expect("held until drop");
            let mut queue = self.queue.lock().unwrap();
            if queue.len() < QUEUE_BOUND {
                queue.push(stack);
            }
        }
    }

    // SAFETY: a `GuardedStack` is page-aligned, whole pages, above a
    // PROT_NONE guard page, owned by this value until it drops.
    unsafe impl StackMemory for QueuedStack {
        fn top(&self) -> *mut u8 {
            self.stack().top().as_ptr()
        }

        fn range(&self) -> Range<usize> {
            self.stack().usable()
        }

        fn guard_range(&self) -> Range<*mut u8> {
            self.stack().limit().as_ptr()..self.stack().bottom().as_ptr()
        }
    }

    // SAFETY: every stack is a `QueuedStack` of at least `size` bytes;
    // zeroed requests get a fresh mapping (zeros).
    unsafe impl StackCreator for QueueStacks {
        fn new_stack(&self, size: usize, zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
            let reused = if zeroed {
                None
            } else {
                self.0.lock().unwrap().pop()
            };
            let stack = match reused {
                Some(stack) if stack.usable_size() >= size => stack,
                _ => GuardedStack::new(size).map_err(wasmtime::Error::new)?,
            };
            Ok(Box::new(QueuedStack {
                stack: Some(stack),
                queue: self.0.clone(),
            }))
        }
    }

    /// `run(x)` touches 15 pages of its 17-page memory, recurses 50 deep,
    /// and calls the host's `yield` once.
    const MEMORY_WAT: &str = r#"
    (module
      (import "host" "yield" (func $yield (param i32) (result i32)))
      (memory 17)
      (func $deep (param i32) (result i32)
        (if (result i32) (i32.eqz (local.get 0))
          (then (i32.const 0))
          (else (i32.add (call $deep (i32.sub (local.get 0) (i32.const 1))) (i32.const 1)))))
      (func (export "run") (param i32) (result i32)
        (local $i i32)
        (loop $touch
          (i32.store (i32.mul (local.get $i) (i32.const 69632)) (local.get 0))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $touch (i32.lt_u (local.get $i) (i32.const 15))))
        (i32.add (call $yield (call $deep (i32.const 50))) (i32.load (i32.const 69632)))))
    "#;

    fn instance_pre(engine: &Engine, yielding: bool, memory: bool) -> InstancePre<()> {
        let module = Module::new(engine, if memory { MEMORY_WAT } else { WAT }).expect("valid wat");
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

    fn requests(pre: &InstancePre<()>, n: usize) -> i32 {
        let tasks = (0..n as i32)
            .map(|x| Box::pin(request(pre, black_box(x))) as Task<'_>)
            .collect();
        run_all(tasks)
    }

    pub fn benches(c: &mut Criterion) {
        for memory in [false, true] {
            for (name, n) in LOADS {
                let group = if memory {
                    format!("memory_{name}")
                } else {
                    name.to_owned()
                };
                let mut g = c.benchmark_group(&group);
                g.throughput(Throughput::Elements(n as u64));
                for subject in SUBJECTS {
                    let pre = instance_pre(&engine(subject, memory), n > 1, memory);
                    requests(&pre, n); // the first stacks, outside the measurement
                    g.bench_function(BenchmarkId::from_parameter(subject), |b| {
                        b.iter(|| requests(&pre, n))
                    });
                }
                g.finish();
            }
        }
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
        let groups = LOADS
            .iter()
            .flat_map(|&(name, n)| [(name.to_owned(), n), (format!("memory_{name}"), n)]);
        for (group, n) in groups {
            let group = group.as_str();
            let per = n as f64;
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
