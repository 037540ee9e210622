//! `purge_delay`: idle objects are purged about one delay after their last
//! use, in the depot and in thread caches left untouched that long, while
//! the working-set reclaim still decides, over whole intervals, when they
//! are destroyed. Driven by a `ManualClock`, no reclaimer thread.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Counting;
use tidepool::reclaim::ManualClock;
use tidepool::Pool;

const INTERVAL: Duration = Duration::from_secs(15);
const DELAY: Duration = Duration::from_secs(1);

fn pool() -> (Arc<Pool<Counting>>, Arc<ManualClock>, Arc<common::Ledger>) {
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(ManualClock::new());
    let pool = Pool::builder(manager)
        .batch_size(4)
        .reclaim_interval(INTERVAL)
        .purge_delay(DELAY)
        .background(false)
        .clock(clock.clone())
        .build()
        .unwrap();
    (Arc::new(pool), clock, ledger)
}

fn check_counts(pool: &Pool<Counting>) {
    let s = pool.stats();
    assert_eq!(s.live + s.idle + s.destroying, s.existing(), "{s:?}");
}

#[test]
fn idle_depot_objects_are_purged_a_delay_after_their_last_use_and_kept() {
    let (pool, clock, ledger) = pool();
    let held: Vec<_> = (0..16).map(|_| pool.get().unwrap()).collect();
    drop(held);
    pool.trim_local(); // all 16 in the depot
    assert_eq!(pool.stats().idle_depot, 16);
    // Half a delay: nothing is due.
    clock.advance(DELAY / 2);
    pool.reclaim();
    assert_eq!(ledger.counts().purged, 0);
    // The first tick, a delay in: the objects came after the period
    // began, so they have not sat unused through a whole one yet.
    clock.advance(DELAY / 2);
    pool.reclaim();
    assert_eq!(ledger.counts().purged, 0);
    // The second: unused through the whole period, purged.
    clock.advance(DELAY);
    pool.reclaim();
    let s = pool.stats();
    assert_eq!((s.idle_purged, ledger.counts().purged), (16, 16), "{s:?}");
    // Purged, not destroyed: the working-set reclaim has not run.
    assert_eq!((s.destroyed, s.reclaim_passes, s.idle), (0, 0, 16));
    check_counts(&pool);
}

#[test]
fn objects_used_within_the_delay_keep_their_pages() {
    let (pool, clock, ledger) = pool();
    let held: Vec<_> = (0..8).map(|_| pool.get().unwrap()).collect();
    drop(held);
    pool.trim_local();
    // A thread keeps using four of them, every half delay, over 4 delays.
    let user = {
        let pool = pool.clone();
        move || {
            let four: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
            drop(four);
            pool.trim_local();
        }
    };
    for _ in 0..8 {
        user();
        clock.advance(DELAY / 2);
        pool.reclaim();
    }
    // The four used every half delay were never idle a whole delay: only
    // the other four were purged (once each).
    assert_eq!(ledger.counts().purged, 4);
    check_counts(&pool);
}

#[test]
fn a_thread_cache_left_alone_for_a_delay_is_taken_and_purged() {
    let (pool, clock, ledger) = pool();
    let owner = {
        let pool = pool.clone();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (parked, ready) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let held: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
            drop(held); // in this thread's cache
            parked.send(()).unwrap();
            wait.recv().unwrap(); // alive, not touching the pool
        });
        ready.recv().unwrap();
        (handle, go)
    };
    assert_eq!(pool.stats().idle_cached(), 4);
    // The first tick sees the cache for the first time; the second finds it
    // untouched since, takes it and purges what it held.
    for _ in 0..2 {
        clock.advance(DELAY);
        pool.reclaim();
    }
    let s = pool.stats();
    assert_eq!(s.idle_cached(), 0, "{s:?}");
    assert_eq!(ledger.counts().purged, 4);
    assert!(s.caches_taken >= 1);
    owner.1.send(()).unwrap();
    owner.0.join().unwrap();
    check_counts(&pool);
}

#[test]
fn a_delay_below_the_minimum_is_refused_by_name() {
    let err = Pool::builder(|| 0u8)
        .purge_delay(Duration::from_micros(10))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "purge_delay");
}
