//! The wasm the tests run, and engines to run it on pooled stacks.

use tidepool::stack::StackPool;
use tidepool_wasmtime::ConfigExt;
use wasmtime::{Config, Engine, InstancePre, Linker, Module};

use crate::executor::YieldOnce;

/// `run(x)` calls the host's async `yield(x + 1)`, which suspends the fiber
/// once and returns its argument, then returns twice that: `(x + 1) * 2`.
pub const YIELDING: &str = r#"
(module
  (import "host" "yield" (func $yield (param i32) (result i32)))
  (func (export "run") (param i32) (result i32)
    (i32.mul (call $yield (i32.add (local.get 0) (i32.const 1))) (i32.const 2))))
"#;

pub fn yielding_result(x: i32) -> i32 {
    (x + 1) * 2
}

/// Fiber stacks of 512 KiB, of which wasm may use 256 KiB.
pub const STACK_SIZE: usize = 512 * 1024;
pub const MAX_WASM_STACK: usize = 256 * 1024;

/// A pool that only shrinks when told: no reclaimer thread, so its counts
/// depend on the test's own steps alone.
pub fn pool() -> StackPool {
    StackPool::builder(STACK_SIZE)
        .background(false)
        .build()
        .expect("valid settings")
}

pub fn config(pool: &StackPool) -> Config {
    let mut config = Config::new();
    config.max_wasm_stack(MAX_WASM_STACK);
    config.pooled_stacks(pool.clone());
    config
}

pub fn engine(pool: &StackPool) -> Engine {
    Engine::new(&config(pool)).expect("a valid config")
}

/// `YIELDING`, linked and ready to instantiate once per store.
pub fn yielding(engine: &Engine) -> InstancePre<()> {
    let module = Module::new(engine, YIELDING).expect("valid wat");
    let mut linker = Linker::new(engine);
    linker
        .func_wrap_async("host", "yield", |_caller, (x,): (i32,)| {
            Box::new(async move {
                YieldOnce::new().await;
                x
            })
        })
        .expect("a new name");
    linker.instantiate_pre(&module).expect("imports satisfied")
}

/// One request: a new store, an instance, one async call; the store (and
/// the fiber stack it holds) is dropped when the future finishes.
pub async fn request(pre: InstancePre<()>, x: i32) -> wasmtime::Result<i32> {
    let mut store = wasmtime::Store::new(pre.module().engine(), ());
    let instance = pre.instantiate_async(&mut store).await?;
    let run = instance.get_typed_func::<i32, i32>(&mut store, "run")?;
    run.call_async(&mut store, x).await
}
