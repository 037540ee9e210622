//! Running off the end of a pooled fiber stack: wasm is stopped by a trap
//! and the stack is reused; host code hits the guard page, which wasmtime
//! recognises from our `guard_range` and reports.

use std::hint::black_box;
use std::os::unix::process::ExitStatusExt;

use wasmtime::{Linker, Module, Store, Trap};

use crate::child::{is_child, run_child};
use crate::executor::block_on;
use crate::modules::{self, request, yielding_result};

/// `rec` calls itself forever; `host` calls the host's `recurse`.
const RECURSIVE: &str = r#"
(module
  (import "host" "recurse" (func $recurse (param i64) (result i64)))
  (func $rec (export "rec") (param i32) (result i32)
    (call $rec (i32.add (local.get 0) (i32.const 1))))
  (func (export "host") (param i64) (result i64)
    (call $recurse (local.get 0))))
"#;

/// Recursion without end, a kilobyte of stack per frame; not a tail call
/// (the sum comes after it), so it cannot become a loop.
fn deep(depth: u64) -> u64 {
    let frame = black_box([depth as u8; 1024]);
    if black_box(depth) == u64::MAX {
        return 0;
    }
    deep(depth + 1) + u64::from(black_box(frame)[7])
}

fn linker(engine: &wasmtime::Engine) -> Linker<()> {
    let mut linker = Linker::new(engine);
    linker
        .func_wrap("host", "recurse", |depth: u64| deep(depth))
        .expect("a new name");
    linker
}

#[test]
fn wasm_recursion_traps_and_the_stack_is_reused() {
    let pool = modules::pool();
    let engine = modules::engine(&pool);
    let module = Module::new(&engine, RECURSIVE).expect("valid wat");
    let linker = linker(&engine);

    let mut store = Store::new(&engine, ());
    let err = block_on(async {
        let instance = linker.instantiate_async(&mut store, &module).await?;
        let rec = instance.get_typed_func::<i32, i32>(&mut store, "rec")?;
        rec.call_async(&mut store, 0).await
    })
    .expect_err("endless recursion cannot return");
    assert_eq!(
        err.downcast_ref::<Trap>(),
        Some(&Trap::StackOverflow),
        "{err:?}"
    );
    drop(store);
    assert_eq!(pool.stats().pool.live, 0, "the stack went back to the pool");

    // The same stack serves the next store, whose call returns normally.
    let pre = modules::yielding(&engine);
    assert_eq!(block_on(request(pre, 4)).expect("runs"), yielding_result(4));
    let stats = pool.stats().pool;
    assert_eq!((stats.created, stats.hits), (1, 1));
}

const HOST_OVERFLOW_TEST: &str = "overflow::host_overflow_hits_the_guard_page";

/// Child: a host function called from an async call recurses until it runs
/// off its pooled fiber stack. Never returns.
fn host_overflow() {
    let pool = modules::pool();
    let engine = modules::engine(&pool);
    let module = Module::new(&engine, RECURSIVE).expect("valid wat");
    let linker = linker(&engine);
    let mut store = Store::new(&engine, ());
    let result = block_on(async {
        let instance = linker.instantiate_async(&mut store, &module).await?;
        let host = instance.get_typed_func::<i64, i64>(&mut store, "host")?;
        host.call_async(&mut store, 0).await
    });
    eprintln!("the recursion returned: {result:?}");
}

/// The fault lands in our `guard_range`, so wasmtime's signal handler names
/// it ("execution on async fiber has overflowed its stack") and aborts. A
/// wrong or empty guard range would leave the fault to the default handler
/// (SIGSEGV, no message); no guard page at all would let the recursion
/// write below the stack.
#[test]
fn host_overflow_hits_the_guard_page() {
    if is_child("host_overflow") {
        host_overflow();
        return;
    }
    let (status, stderr) = run_child(HOST_OVERFLOW_TEST, "host_overflow");
    assert_eq!(
        status.signal(),
        Some(libc_sigabrt()),
        "the child should abort on wasmtime's overflow check: {status}, stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("execution on async fiber has overflowed its stack"),
        "wasmtime's message, stderr:\n{stderr}"
    );
    assert!(!stderr.contains("the recursion returned"), "{stderr}");
}

/// SIGABRT, the same on every Linux architecture.
fn libc_sigabrt() -> i32 {
    6
}
