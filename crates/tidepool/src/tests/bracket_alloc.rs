//! Nothing allocates inside a thread cache's access bracket: an allocation
//! there would run the global allocator (which may block, fail or abort)
//! while a revoker treats the owner as busy. A counting allocator checks
//! every get and put path: hits, refills, donations, claims after a
//! revocation, thread exit.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use crate::probe::INSIDE;
use crate::Pool;

struct Probe;

static INSIDE_ALLOCS: AtomicU64 = AtomicU64::new(0);

fn note() {
    if INSIDE.try_with(std::cell::Cell::get).unwrap_or(false) {
        INSIDE_ALLOCS.fetch_add(1, SeqCst);
    }
}

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Probe = Probe;

#[test]
fn no_path_allocates_inside_an_access_bracket() {
    let pool = Arc::new(
        Pool::builder(|| vec![0u8; 16])
            .batch_size(4)
            .max_idle(8)
            .background(false)
            .build()
            .unwrap(),
    );
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for round in 0..50 {
                    // Spikes past both batches and the depot's cap: refills,
                    // donations, refused donations.
                    let n = 1 + round % 23;
                    let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
                    drop(guards);
                    if round % 7 == 0 {
                        // Takes back every idle cache, this thread's too: the
                        // next access claims again.
                        pool.drain();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(pool.stats().created > 0);
    assert_eq!(
        INSIDE_ALLOCS.load(SeqCst),
        0,
        "allocations inside a bracket"
    );
}
