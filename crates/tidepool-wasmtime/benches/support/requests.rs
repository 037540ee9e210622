//! The store-per-request workload the `calls` bench and the
//! `burst_residency` example run: a new `Store`, `instantiate_async` from
//! an `InstancePre`, one `call_async`, drop the store; `n` of them in
//! flight at once on one thread, polled in turn (each suspends once in an
//! async host function when there are many).

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use std::sync::Arc;

use tidepool::stack::StackPool;
use tidepool_wasmtime::{ConfigExt, PooledMemoryCreator};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store,
};

use crate::queue_stacks::QueueStacks;

/// wasmtime's default `async_stack_size`.
pub const STACK_SIZE: usize = 2 << 20;
/// What the pooling allocator is sized for: twice the largest load.
pub const POOLING_SLOTS: u32 = 1024;
/// The hand-written queue's bound.
pub const QUEUE_BOUND: usize = 100;

/// `run(x)` = `yield(x) + 1`; `yield` returns `x`, suspending the fiber
/// once when the request is one of many in flight.
pub const WAT: &str = r#"
(module
  (import "host" "yield" (func $yield (param i32) (result i32)))
  (func (export "run") (param i32) (result i32)
    (i32.add (call $yield (local.get 0)) (i32.const 1))))
"#;

/// What both pools keep resident of a stack when `async_stack_zeroing` is
/// on, cleared with `memset`: a fiber's first frames (the rest is released
/// with `madvise`).
pub const ZEROING_KEEP_RESIDENT: usize = 64 << 10;

/// An engine for `subject` (see the `calls` bench), with pooled memories
/// too for `pooled` when `memory`.
pub fn engine(subject: &str, memory: bool) -> Engine {
    engine_with(subject, memory, false)
}

/// [`engine`], with `async_stack_zeroing(zeroing)`. With zeroing, the
/// pooled stacks and the pooling allocator's keep
/// [`ZEROING_KEEP_RESIDENT`] bytes resident (wasmtime's
/// `async_stack_keep_resident`, tidepool's `keep_resident`), and
/// `pooling_batched` is the pooling allocator with its decommits batched
/// 32 at a time (`decommit_batch_size`). `pooling_tuned` is the pooling
/// allocator as its documentation advises for a store per request: a
/// released memory's first 1 MiB cleared with `memset` and kept resident
/// (`linear_memory_keep_resident`, what tidepool's memory creator keeps),
/// decommits batched 32 at a time; copy-on-write images stay on (its
/// default).
pub fn engine_with(subject: &str, memory: bool, zeroing: bool) -> Engine {
    let mut config = Config::new();
    config.async_stack_zeroing(zeroing);
    let keep = if zeroing { ZEROING_KEEP_RESIDENT } else { 0 };
    match subject {
        "pooled" => {
            let pool = StackPool::builder(STACK_SIZE)
                .keep_resident(keep)
                .build()
                .expect("valid settings");
            config.pooled_stacks(pool);
            if memory {
                let memories = PooledMemoryCreator::new().expect("valid settings");
                config.pooled_memories(Arc::new(memories));
            }
        }
        "on_demand" => {}
        "pooling_allocator" | "pooling_batched" | "pooling_tuned" => {
            let mut pooling = PoolingAllocationConfig::default();
            if subject != "pooling_allocator" {
                pooling.decommit_batch_size(32);
            }
            if subject == "pooling_tuned" {
                // What tidepool's memory creator keeps of an idle region,
                // cleared in place for the next instance.
                pooling.linear_memory_keep_resident(tidepool::region::DEFAULT_KEEP_RESIDENT);
            }
            pooling
                .async_stack_keep_resident(keep)
                .total_core_instances(POOLING_SLOTS)
                .total_stacks(POOLING_SLOTS)
                .total_memories(if memory { POOLING_SLOTS } else { 0 })
                .total_tables(0);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        }
        "bounded_queue" => {
            config
                .async_stack_size(STACK_SIZE)
                .with_host_stack(Arc::new(QueueStacks::new(QUEUE_BOUND)));
        }
        _ => unreachable!("unknown subject {subject}"),
    }
    Engine::new(&config).expect("a valid config")
}

/// `run(x)` touches 15 pages of its 17-page memory, recurses 50 deep,
/// and calls the host's `yield` once.
pub const MEMORY_WAT: &str = r#"
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

/// A module whose `run(x)` stores `x` in its memory of `pages` wasm pages
/// and reads it back, plus the last byte of a data segment of `data` bytes
/// at address 0 (none if 0), around one call of the host's `yield`.
// The `calls` bench's only; the `burst_residency` example shares this file.
#[allow(dead_code)]
pub fn data_wat(pages: u32, data: usize) -> String {
    let segment = if data == 0 {
        String::new()
    } else {
        format!("(data (i32.const 0) \"{}\")", "a".repeat(data))
    };
    format!(
        r#"(module
  (import "host" "yield" (func $yield (param i32) (result i32)))
  (memory {pages})
  {segment}
  (func (export "run") (param i32) (result i32)
    (i32.store (i32.const {at}) (local.get 0))
    (i32.add (call $yield (i32.load (i32.const {at})))
             (i32.load8_u (i32.const {last})))))"#,
        at = data.next_multiple_of(64),
        last = data.saturating_sub(1),
    )
}

pub fn instance_pre(engine: &Engine, yielding: bool, memory: bool) -> InstancePre<()> {
    instance_pre_wat(engine, yielding, if memory { MEMORY_WAT } else { WAT })
}

/// [`instance_pre`] for the module `wat`.
pub fn instance_pre_wat(engine: &Engine, yielding: bool, wat: &str) -> InstancePre<()> {
    let module = Module::new(engine, wat).expect("valid wat");
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

pub async fn request(pre: &InstancePre<()>, x: i32) -> i32 {
    let mut store = Store::new(pre.module().engine(), ());
    let instance = pre.instantiate_async(&mut store).await.expect("instance");
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .expect("exported");
    run.call_async(&mut store, x).await.expect("the call")
}

pub type Task<'a> = Pin<Box<dyn Future<Output = i32> + 'a>>;

/// Polls every task in turn until all are done (a waker that does
/// nothing: the only waits are `YieldOnce`s, ready on the next poll).
pub fn run_all(mut tasks: Vec<Task<'_>>) -> i32 {
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

pub struct YieldOnce(pub bool);

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

pub fn requests(pre: &InstancePre<()>, n: usize) -> i32 {
    let tasks = (0..n as i32)
        .map(|x| Box::pin(request(pre, black_box(x))) as Task<'_>)
        .collect();
    run_all(tasks)
}
