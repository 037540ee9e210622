//! `roundtrip SUBJECT N`: N single-thread get + put round trips through the
//! Rust API or the C ABI, after one priming round trip; no output. Run under
//! callgrind with N and with 0: the difference / N is instructions per round
//! trip (`bin/callgrind-ffi.sh` does this).
//!
//! Subjects: `rust_buf` (`Pool::get` + drop of a 256-byte `Vec`), `ffi_buf`
//! (`tidepool_buf_get` + `tidepool_buf_put`, 256 bytes), `ffi_obj`
//! (`tidepool_obj_get` + `tidepool_obj_put`), `rust_stack`
//! (`StackPool::get` + drop), `ffi_stack` (`tidepool_stack_get` +
//! `tidepool_stack_put`). The C entry points are called through function
//! pointers hidden from the optimiser, as a C caller would reach them.

use std::ffi::{c_int, c_void};
use std::hint::black_box;
use std::ptr::null_mut;

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

type BufGet = unsafe extern "C" fn(*mut tidepool_pool, *mut *mut c_void) -> tidepool_status;
type BufPut = unsafe extern "C" fn(*mut tidepool_pool, *mut c_void) -> tidepool_status;
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

fn new_pool(
    build: unsafe extern "C" fn(*const tidepool_config, *mut *mut tidepool_pool) -> tidepool_status,
    cfg: tidepool_config,
) -> *mut tidepool_pool {
    let mut pool = null_mut();
    // SAFETY: a valid config and out-pointer.
    let status = unsafe { build(&cfg, &mut pool) };
    assert_eq!(status, tidepool_status::TIDEPOOL_OK);
    pool
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let subject = args.first().map(String::as_str).unwrap_or("");
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    match subject {
        "rust_buf" => {
            let pool = tidepool::Pool::builder(|| vec![0u8; 256])
                .background(false)
                .build()
                .unwrap();
            for _ in 0..=n {
                let mut g = pool.get().unwrap();
                black_box(&mut *g)[0] = 1;
            }
        }
        "ffi_buf" => {
            let pool = new_pool(
                tidepool_buf_pool_new,
                tidepool_config {
                    object_size: 256,
                    ..config()
                },
            );
            let (get, put) = black_box((tidepool_buf_get as BufGet, tidepool_buf_put as BufPut));
            for _ in 0..=n {
                let mut buf: *mut c_void = null_mut();
                // SAFETY: a live pool; the buffer goes back to it.
                unsafe {
                    get(pool, &mut buf);
                    *black_box(buf.cast::<u8>()) = 1;
                    put(pool, buf);
                }
            }
        }
        "ffi_obj" => {
            let cfg = tidepool_config {
                create: Some(create),
                destroy: Some(destroy),
                ..config()
            };
            let pool = new_pool(tidepool_obj_pool_new, cfg);
            let (get, put) = black_box((tidepool_obj_get as ObjGet, tidepool_obj_put as BufPut));
            for _ in 0..=n {
                let mut obj: *mut c_void = null_mut();
                // SAFETY: a live pool; the object goes back to it.
                unsafe {
                    get(pool, 0, &mut obj);
                    *black_box(obj.cast::<u8>()) = 1;
                    put(pool, obj);
                }
            }
        }
        "rust_stack" => {
            let pool = tidepool::stack::StackPool::builder(64 * 1024)
                .background(false)
                .build()
                .unwrap();
            for _ in 0..=n {
                let s = pool.get().unwrap();
                black_box(&s);
            }
        }
        "ffi_stack" => {
            let pool = new_pool(
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
            for _ in 0..=n {
                // SAFETY: all-zero is a valid `tidepool_stack`.
                let mut st: tidepool_stack = unsafe { std::mem::zeroed() };
                // SAFETY: a live pool; the stack goes back to it.
                unsafe {
                    get(pool, &mut st);
                    black_box(&st);
                    put(pool, &st);
                }
            }
        }
        _ => {
            eprintln!("usage: roundtrip rust_buf|ffi_buf|ffi_obj|rust_stack|ffi_stack N");
            std::process::exit(2);
        }
    }
}
