//! `background(false)`: no reclaimer thread is started, and `Pool::reclaim`
//! called from the program's own loop does what the thread would. A binary
//! of its own with one test: the thread is process-wide, so nothing else in
//! this process may start it first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidepool::pressure::{self, Level};
use tidepool::reclaim::ManualClock;
use tidepool::Pool;

/// Threads of this process named `tidepool-reclaim`; `None` without
/// `/proc` (not Linux), where the count cannot be checked. The kernel keeps
/// 15 bytes of a thread's name.
fn reclaimer_threads() -> Option<usize> {
    const COMM: &str = "tidepool-reclai";
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == COMM)
            .count(),
    )
}

#[test]
fn without_background_no_thread_starts_and_reclaim_runs_from_the_callers_loop() {
    const INTERVAL: Duration = Duration::from_secs(1);
    let clock = Arc::new(ManualClock::new());
    let pool = Pool::builder(|| vec![0u8; 64])
        .batch_size(1)
        .max_idle(8)
        .reclaim_interval(INTERVAL)
        .background(false)
        .clock(clock.clone())
        .build()
        .unwrap();
    #[cfg(unix)]
    let stacks = tidepool::stack::StackPool::builder(4096)
        .background(false)
        .build()
        .unwrap();
    #[cfg(unix)]
    drop(stacks.get().unwrap());

    let held: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
    drop(held);
    assert_eq!(pool.stats().idle, 4);
    // With no reclaimer running, a notification has no pool to go to.
    pressure::notify(Level::Critical);
    if let Some(n) = reclaimer_threads() {
        assert_eq!(n, 0, "background(false) started the reclaimer thread");
    }

    // The caller's loop: one `reclaim` per interval. The thread cache, quiet
    // for an interval, is taken back to the depot; what then sits idle there
    // through two whole intervals is destroyed.
    let mut reclaimed = 0;
    for _ in 0..5 {
        clock.advance(INTERVAL);
        reclaimed += pool.reclaim();
    }
    let s = pool.stats();
    assert_eq!((reclaimed, s.reclaimed), (4, 4));
    assert_eq!((s.idle, s.existing(), s.destroyed), (0, 0, 4));
    assert_eq!(s.pressure_critical, 0, "no notification reached the pool");

    // A pool with background on does start it: the check above can fail.
    let _with_thread = Pool::new(|| 0u8);
    if reclaimer_threads().is_some() {
        let deadline = Instant::now() + Duration::from_secs(30);
        while reclaimer_threads() != Some(1) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(reclaimer_threads(), Some(1));
    }
}
