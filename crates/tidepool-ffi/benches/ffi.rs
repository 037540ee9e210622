//! A get + put round trip through the C ABI against the same through the
//! Rust API, on one thread, in one run (criterion group `ffi_round_trip`).
//!
//! * `rust_buf`: `Pool::get` + drop of a 256-byte `Vec` (a core pool).
//! * `ffi_buf`: `tidepool_buf_get` + `tidepool_buf_put`, 256-byte buffers:
//!   the boundary (`catch_unwind`, handle check) plus the buffer header's
//!   checks and compare-and-swap.
//! * `ffi_obj`: `tidepool_obj_get` + `tidepool_obj_put`: the boundary plus
//!   two visits to the live set (a shard lock and a hash lookup each).
//! * `rust_stack` / `ffi_stack`: the same for 64 KiB guarded stacks.
//!
//! The C entry points are called through function pointers the optimiser
//! cannot see through, as a C caller reaches them.

use std::ffi::{c_int, c_void};
use std::hint::black_box;
use std::ptr::null_mut;

use criterion::{criterion_group, criterion_main, Criterion};
use tidepool_ffi::*;

unsafe extern "C" fn create(_: *mut c_void, out: *mut *mut c_void) -> c_int {
    // SAFETY: `out` is the pool's valid out-pointer.
    unsafe { *out = Box::into_raw(Box::new([0u8; 64])).cast() };
    0
}

unsafe extern "C" fn destroy(_: *mut c_void, obj: *mut c_void) {
    // SAFETY: made by `create`, destroyed once.
    drop(unsafe { Box::from_raw(obj.cast::<[u8; 64]>()) });
}

type New = unsafe extern "C" fn(*const tidepool_config, *mut *mut tidepool_pool) -> tidepool_status;
type BufGet = unsafe extern "C" fn(*mut tidepool_pool, *mut *mut c_void) -> tidepool_status;
type Put = unsafe extern "C" fn(*mut tidepool_pool, *mut c_void) -> tidepool_status;
type ObjGet = unsafe extern "C" fn(*mut tidepool_pool, u32, *mut *mut c_void) -> tidepool_status;
type StackGet = unsafe extern "C" fn(*mut tidepool_pool, *mut tidepool_stack) -> tidepool_status;
type StackPut = unsafe extern "C" fn(*mut tidepool_pool, *const tidepool_stack) -> tidepool_status;

fn config() -> tidepool_config {
    // SAFETY: all-zero is a valid config (integers, a null pointer, `None`s).
    let mut cfg: tidepool_config = unsafe { std::mem::zeroed() };
    cfg.size = std::mem::size_of::<tidepool_config>();
    cfg.flags = TIDEPOOL_NO_BACKGROUND;
    cfg
}

fn new_pool(build: New, cfg: tidepool_config) -> *mut tidepool_pool {
    let mut pool = null_mut();
    // SAFETY: a valid config and out-pointer.
    let status = unsafe { build(&cfg, &mut pool) };
    assert_eq!(status, tidepool_status::TIDEPOOL_OK);
    pool
}

fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("ffi_round_trip");

    let rust_buf = tidepool::Pool::builder(|| vec![0u8; 256])
        .background(false)
        .build()
        .unwrap();
    g.bench_function("rust_buf", |b| {
        b.iter(|| {
            let mut buf = rust_buf.get().unwrap();
            black_box(&mut *buf)[0] = 1;
        })
    });

    let bufs = new_pool(
        tidepool_buf_pool_new,
        tidepool_config {
            object_size: 256,
            ..config()
        },
    );
    let (get, put) = black_box((tidepool_buf_get as BufGet, tidepool_buf_put as Put));
    g.bench_function("ffi_buf", |b| {
        b.iter(|| {
            let mut buf: *mut c_void = null_mut();
            // SAFETY: a live pool; the buffer goes back to it.
            unsafe {
                get(bufs, &mut buf);
                *black_box(buf.cast::<u8>()) = 1;
                put(bufs, buf);
            }
        })
    });

    let objs = new_pool(
        tidepool_obj_pool_new,
        tidepool_config {
            create: Some(create),
            destroy: Some(destroy),
            ..config()
        },
    );
    let (get, put) = black_box((tidepool_obj_get as ObjGet, tidepool_obj_put as Put));
    g.bench_function("ffi_obj", |b| {
        b.iter(|| {
            let mut obj: *mut c_void = null_mut();
            // SAFETY: a live pool; the object goes back to it.
            unsafe {
                get(objs, 0, &mut obj);
                *black_box(obj.cast::<u8>()) = 1;
                put(objs, obj);
            }
        })
    });

    let rust_stacks = tidepool::stack::StackPool::builder(64 * 1024)
        .background(false)
        .build()
        .unwrap();
    g.bench_function("rust_stack", |b| {
        b.iter(|| {
            let stack = rust_stacks.get().unwrap();
            black_box(&stack);
        })
    });

    let stacks = new_pool(
        tidepool_stack_pool_new,
        tidepool_config {
            object_size: 64 * 1024,
            ..config()
        },
    );
    let (get, put) = black_box((
        tidepool_stack_get as StackGet,
        tidepool_stack_put as StackPut,
    ));
    g.bench_function("ffi_stack", |b| {
        b.iter(|| {
            // SAFETY: all-zero is a valid `tidepool_stack`.
            let mut st: tidepool_stack = unsafe { std::mem::zeroed() };
            // SAFETY: a live pool; the stack goes back to it.
            unsafe {
                get(stacks, &mut st);
                black_box(&st);
                put(stacks, &st);
            }
        })
    });
    g.finish();

    for pool in [bufs, objs, stacks] {
        // SAFETY: every object is back; nothing uses the pool any more.
        let status = unsafe { tidepool_pool_destroy(pool) };
        assert_eq!(status, tidepool_status::TIDEPOOL_OK);
    }
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
