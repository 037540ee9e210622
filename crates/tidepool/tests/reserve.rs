//! Memory reserved up front is bounded in bytes, not in objects: a pool of
//! big by-value items reserves a few MiB per thread at most, and a batch that
//! would reserve more is refused when the pool is built.
//!
//! A binary of its own: it counts the bytes this thread asks the global
//! allocator for.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use tidepool::{Manage, Pool, MAX_BATCH_SIZE};

/// Counts the bytes allocated by threads that turned counting on.
struct Counting;

thread_local! {
    static COUNT: Cell<bool> = const { Cell::new(false) };
}
static BYTES: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

fn note(size: usize) {
    if COUNT.try_with(Cell::get).unwrap_or(false) {
        BYTES.fetch_add(size, SeqCst);
        LARGEST.fetch_max(size, SeqCst);
    }
}

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` on a fresh thread (with a stack big enough for by-value items),
/// counting what that thread allocates; returns (total, largest) in bytes.
fn allocated_by(f: impl FnOnce() + Send + 'static) -> (usize, usize) {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            BYTES.store(0, SeqCst);
            LARGEST.store(0, SeqCst);
            COUNT.with(|c| c.set(true));
            f();
            COUNT.with(|c| c.set(false));
            (BYTES.load(SeqCst), LARGEST.load(SeqCst))
        })
        .unwrap()
        .join()
        .unwrap()
}

const MIB: usize = 1 << 20;

/// An item of 1 MiB, kept by value.
type Big = [u8; MIB];

struct Bigs;

impl Manage for Bigs {
    type Item = Box<Big>;
    type Error = Infallible;

    fn create(&self) -> Result<Box<Big>, Infallible> {
        unreachable!("only the by-value manager creates")
    }
}

/// Makes 1 MiB items by value.
struct ByValue;

impl Manage for ByValue {
    type Item = Big;
    type Error = Infallible;

    fn create(&self) -> Result<Big, Infallible> {
        Ok([7; MIB])
    }
}

/// The most the pool may reserve up front for one thread's cache.
const BOUND: usize = 4 * MIB;

#[test]
fn a_batch_of_big_items_past_the_byte_bound_is_refused() {
    on_big_stack(batch_of_big_items_refused);
}

fn batch_of_big_items_refused() {
    let e = Pool::builder(ByValue)
        .batch_size(MAX_BATCH_SIZE)
        .max_idle(MAX_BATCH_SIZE)
        .background(false)
        .build()
        .expect_err("two batches of 65536 items of 1 MiB would reserve 128 GiB per thread");
    assert_eq!(e.field(), "batch_size");
    assert!(e.reason().contains("MiB"), "{e}");
    // Boxed, the same batch is fine: the items live on the heap, and only
    // the pointers are reserved.
    let boxed = Pool::builder(Bigs)
        .batch_size(MAX_BATCH_SIZE)
        .max_idle(MAX_BATCH_SIZE)
        .background(false)
        .build();
    assert!(boxed.is_ok(), "{:?}", boxed.err());
}

/// Runs `f` on a thread whose stack holds a few by-value items (debug
/// builds copy them between frames).
fn on_big_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn the_default_batch_of_big_items_reserves_a_few_mib_per_thread() {
    on_big_stack(default_batch_of_big_items);
}

fn default_batch_of_big_items() {
    let pool = std::sync::Arc::new(Pool::builder(ByValue).background(false).build().unwrap());
    let p = std::sync::Arc::clone(&pool);
    let (total, largest) = allocated_by(move || {
        let g = p.get().unwrap();
        assert_eq!(g[0], 7);
        drop(g);
    });
    assert!(
        total <= BOUND + 64 * 1024,
        "one get and put on a fresh thread allocated {} KiB (largest block {} KiB); \
         batch_size {}",
        total / 1024,
        largest / 1024,
        pool.config().batch_size()
    );
    assert_eq!(
        pool.config().batch_size(),
        2,
        "two batches of two 1 MiB items fill MAX_CACHE_BYTES"
    );
    assert_eq!(Pool::new(ByValue).config().batch_size(), 2);
}
