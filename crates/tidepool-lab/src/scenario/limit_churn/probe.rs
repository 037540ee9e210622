//! Can this machine show cache-line contention at all? Two threads each
//! add to a counter, first each to its own cache line, then both to one
//! shared line; the ratio of the two wall times is what a contended line
//! costs here. On a machine whose CPUs run the threads at the same time it
//! is several times 1 (each add waits for the line to come back from the
//! other CPU); where the two threads mostly take turns on the CPUs (a
//! loaded machine, a VM's time-sliced vCPUs), it is near 1, and so is any
//! difference the seed's patch makes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use crossbeam_utils::CachePadded;

/// Adds per thread in each of the two runs.
const ADDS: u64 = 4_000_000;

/// Wall ns per add with two threads on `counters[0]` and `counters[1]`
/// (which may be the same counter).
fn run(counters: [&AtomicU64; 2]) -> f64 {
    let start = Barrier::new(3);
    let t0 = std::thread::scope(|s| {
        for c in counters {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for _ in 0..ADDS {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        start.wait();
        Instant::now()
    });
    t0.elapsed().as_secs_f64() * 1e9 / (2 * ADDS) as f64
}

/// `(private, shared)`: wall ns per atomic add, two threads, each on its
/// own line and both on one line.
pub fn contention() -> (f64, f64) {
    let own = [
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ];
    let private = run([&own[0], &own[1]]);
    let one = CachePadded::new(AtomicU64::new(0));
    let shared = run([&one, &one]);
    (private, shared)
}
