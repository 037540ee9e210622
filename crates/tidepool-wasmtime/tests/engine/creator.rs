//! The stacks handed to wasmtime: their geometry, where they come from, and
//! zeroing, checked through wasmtime's own traits.

use std::sync::Arc;

use tidepool::stack::{StackError, StackPool};
use tidepool_wasmtime::{ConfigExt, PooledStackCreator};
use wasmtime::{Config, Engine, StackCreator, StackMemory};

use crate::executor::{block_on, run_all, Task};
use crate::modules::{self, request, yielding_result, STACK_SIZE};

const PAGE: usize = 4096;

fn creator() -> PooledStackCreator {
    PooledStackCreator::new(modules::pool())
}

/// What wasmtime's `StackMemory` contract asks, for a stack of `size`.
fn assert_contract(stack: &dyn StackMemory, size: usize) {
    let top = stack.top() as usize;
    let range = stack.range();
    let guard = stack.guard_range();
    assert_eq!(top % PAGE, 0, "top is page-aligned");
    assert_eq!(range.end, top, "the usable range ends at the top");
    assert_eq!(range.start % PAGE, 0, "whole pages");
    assert!(
        range.len() >= size,
        "{} usable bytes for {size}",
        range.len()
    );
    assert_eq!(guard.end as usize, range.start, "the guard lies just below");
    assert!(
        guard.end as usize - guard.start as usize >= PAGE,
        "a guard page"
    );
    assert_eq!(guard.start as usize % PAGE, 0);
}

/// The usable bytes of a stack wasmtime is not running on.
fn bytes(stack: &dyn StackMemory) -> &[u8] {
    let range = stack.range();
    // SAFETY: `range` is mapped readable and writable for as long as
    // `stack` lives (the `StackMemory` contract), and no fiber runs on it.
    unsafe { std::slice::from_raw_parts(range.start as *const u8, range.len()) }
}

fn fill(stack: &dyn StackMemory, byte: u8) {
    let range = stack.range();
    // SAFETY: as in `bytes`; we hold the only handle to the stack.
    unsafe { std::ptr::write_bytes(range.start as *mut u8, byte, range.len()) }
}

#[test]
fn stacks_meet_wasmtime_contract() {
    let creator = creator();
    for size in [1, PAGE, STACK_SIZE / 2, STACK_SIZE] {
        let stack = creator.new_stack(size, false).expect("a stack");
        assert_contract(&*stack, size);
        assert_eq!(stack.range().len(), STACK_SIZE, "the pool's size");
    }
    assert_eq!(creator.unpooled(), 0, "all from the pool");
    let stats = creator.pool().stats().pool;
    assert_eq!((stats.created, stats.hits), (1, 3), "one stack, reused");
}

#[test]
fn larger_requests_get_their_own_mapping() {
    let creator = creator();
    let size = 3 * STACK_SIZE + 100;
    let stack = creator.stack(size, false).expect("a stack");
    assert!(!stack.is_pooled());
    assert_contract(&stack, size);
    assert_eq!(creator.unpooled(), 1);
    assert_eq!(
        creator.pool().stats().pool.created,
        0,
        "the pool is not used"
    );
    drop(stack);
    assert_eq!(creator.pool().stats().mapped, 0, "unmapped, not pooled");
}

/// A pooled stack keeps what its last fiber wrote; a zeroed request reuses
/// it all the same, and reads zeros.
#[test]
fn zeroed_requests_reuse_a_dirty_stack_and_read_zero() {
    let creator = creator();
    let dirty = creator.new_stack(STACK_SIZE, false).expect("a stack");
    fill(&*dirty, 0xa5);
    let top = dirty.top();
    drop(dirty);

    let zeroed = creator.new_stack(STACK_SIZE, true).expect("a stack");
    assert_contract(&*zeroed, STACK_SIZE);
    assert_eq!(zeroed.top(), top, "the dirty pooled stack, reused");
    assert!(bytes(&*zeroed).iter().all(|&b| b == 0), "zero-filled");
    assert_eq!(creator.unpooled(), 0);
    fill(&*zeroed, 0x5a);
    drop(zeroed);

    let reused = creator.new_stack(STACK_SIZE, false).expect("a stack");
    assert_eq!(reused.top(), top);
    assert!(
        bytes(&*reused).iter().all(|&b| b == 0x5a),
        "unzeroed requests get it as it was left"
    );
    let stats = creator.pool().stats().pool;
    assert_eq!((stats.created, stats.hits), (1, 2), "one stack, reused");
}

/// `async_stack_zeroing(true)`: every fiber gets a pooled stack, zeroed, and
/// the engine runs.
#[test]
fn engine_with_stack_zeroing() {
    let pool = modules::pool();
    let creator = Arc::new(PooledStackCreator::new(pool.clone()));
    let mut config = Config::new();
    config
        .max_wasm_stack(modules::MAX_WASM_STACK)
        .async_stack_size(STACK_SIZE)
        .async_stack_zeroing(true)
        .with_host_stack(creator.clone());
    let engine = Engine::new(&config).expect("a valid config");
    let pre = modules::yielding(&engine);
    for x in 0..3 {
        assert_eq!(
            block_on(request(pre.clone(), x)).expect("runs"),
            yielding_result(x)
        );
    }
    assert_eq!(creator.unpooled(), 0, "every stack from the pool");
    let stats = pool.stats().pool;
    assert_eq!((stats.created, stats.hits), (1, 2), "one stack, reused");
}

/// The pool at `max_live`: the next store's async call fails with the
/// pool's error, the process carries on, and once a store is dropped its
/// stack serves the next call.
#[test]
fn exhausted_pool_fails_the_call_not_the_process() {
    let pool = StackPool::builder(STACK_SIZE)
        .max_live(2)
        .background(false)
        .build()
        .expect("valid settings");
    let engine = modules::engine(&pool);
    let pre = modules::yielding(&engine);

    let tasks: Vec<Task<'_, wasmtime::Result<i32>>> = (0..3)
        .map(|x| Box::pin(request(pre.clone(), x)) as Task<'_, _>)
        .collect();
    let results = run_all(tasks, || {});
    assert_eq!(*results[0].as_ref().expect("first"), yielding_result(0));
    assert_eq!(*results[1].as_ref().expect("second"), yielding_result(1));
    let err = results[2].as_ref().expect_err("no third stack");
    let cause = err
        .chain()
        .find_map(|e| e.downcast_ref::<StackError>())
        .unwrap_or_else(|| panic!("the pool's error is in the chain: {err:?}"));
    assert!(
        matches!(cause, StackError::Exhausted { limit: 2 }),
        "{cause}"
    );

    assert_eq!(
        block_on(request(pre, 7)).expect("a stack is free"),
        yielding_result(7)
    );
    let stats = pool.stats().pool;
    assert_eq!((stats.created, stats.live), (2, 0));
}

/// `pooled_stacks` sets `async_stack_size` to the pool's size, so a pool
/// smaller than `max_wasm_stack` is refused by `Engine::new`, not at the
/// first call.
#[test]
fn pool_smaller_than_max_wasm_stack_is_refused() {
    let pool = StackPool::builder(64 * 1024)
        .background(false)
        .build()
        .expect("valid settings");
    let mut config = Config::new();
    config.max_wasm_stack(128 * 1024).pooled_stacks(pool);
    assert!(Engine::new(&config).is_err());
}
