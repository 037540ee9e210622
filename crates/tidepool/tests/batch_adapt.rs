//! The batch size adapts to depot traffic: a pool whose threads go to the
//! depot for a large share of their gets and puts doubles its batch at the
//! end of a traffic window (a reclaim pass, or 64 depot exchanges), up to
//! `Config::max_batch_size` and no further than the traffic needs (a
//! one-way flow, only while it is fast), and halves it when idle objects
//! sit unused; an explicit `batch_size` stays fixed. Driven by a
//! `ManualClock`, no reclaimer thread.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Counting;
use tidepool::reclaim::ManualClock;
use tidepool::{Pool, Pooled, DEFAULT_BATCH_SIZE};

const INTERVAL: Duration = Duration::from_secs(10);

fn pool(batch: Option<usize>) -> (Arc<Pool<Counting>>, Arc<ManualClock>, Arc<common::Ledger>) {
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(ManualClock::new());
    let mut b = Pool::builder(manager)
        .max_idle(4096)
        .reclaim_interval(INTERVAL)
        .background(false)
        .clock(clock.clone());
    if let Some(n) = batch {
        b = b.batch_size(n);
    }
    (Arc::new(b.build().unwrap()), clock, ledger)
}

/// `rounds` bursts of `n` gets then `n` puts on this thread (fio's
/// submit-then-complete rounds); returns the depot exchanges they took.
fn bursts(pool: &Pool<Counting>, n: usize, rounds: usize) -> u64 {
    let before = pool.stats().depot_exchanges;
    for _ in 0..rounds {
        let guards: Vec<Pooled<'_, Counting>> = (0..n).map(|_| pool.get().unwrap()).collect();
        drop(guards);
    }
    pool.stats().depot_exchanges - before
}

fn end_interval(pool: &Pool<Counting>, clock: &ManualClock) {
    clock.advance(INTERVAL);
    pool.reclaim();
}

#[test]
fn bursts_past_the_cache_grow_the_batch_to_its_bound_without_waiting_for_a_pass() {
    let (pool, _clock, ledger) = pool(None);
    let max = pool.config().max_batch_size();
    assert_eq!(pool.stats().batch_size, DEFAULT_BATCH_SIZE);
    assert_eq!(max, 8 * DEFAULT_BATCH_SIZE);
    // 512 in flight: far past a cache of two batches of 32.
    let first = bursts(&pool, 512, 4);
    // The clock never moves: no reclaim pass runs. Windows of depot
    // traffic alone double the batch (each doubling followed by a window
    // that only settles), up to the bound a cache of 512 needs.
    let mut sizes = vec![pool.stats().batch_size];
    for _ in 0..8 {
        bursts(&pool, 512, 8);
        sizes.push(pool.stats().batch_size);
    }
    assert_eq!(pool.stats().reclaim_passes, 0);
    assert_eq!(
        *sizes.last().unwrap(),
        max,
        "sizes after each 8 rounds: {sizes:?}"
    );
    assert!(
        sizes.windows(2).all(|w| w[0] <= w[1]),
        "never shrinks under steady bursts: {sizes:?}"
    );
    let last = bursts(&pool, 512, 4);
    assert!(
        last * 4 <= first,
        "depot exchanges per 4 rounds: {first} at batch 32, {last} at {max}"
    );
    let s = pool.stats();
    assert_eq!(s.live, 0);
    assert_eq!(s.created, 512, "no object made twice");
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn the_batch_grows_to_what_the_bursts_need_and_no_further() {
    // Bursts of 128: a cache of two batches of 64 holds them all. The
    // exchanges of batches still of the old size, right after a doubling,
    // must not double it again (to 128: twice the idle objects per thread).
    let (pool, clock, ledger) = pool(None);
    for _ in 0..3 {
        bursts(&pool, 128, 100);
        end_interval(&pool, &clock);
    }
    bursts(&pool, 128, 100);
    let s = pool.stats();
    assert_eq!(s.batch_size, 64);
    assert_eq!(bursts(&pool, 128, 10), 0, "the cache holds every burst");
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_batch_grown_by_traffic_shrinks_when_idle_objects_go_unused() {
    let (pool, clock, ledger) = pool(None);
    bursts(&pool, 512, 4);
    end_interval(&pool, &clock);
    bursts(&pool, 512, 4);
    end_interval(&pool, &clock);
    let grown = pool.stats().batch_size;
    assert!(grown > DEFAULT_BATCH_SIZE, "grew to {grown}");
    // Nothing more: the cache is taken back, then its objects sit unused.
    for _ in 0..4 {
        end_interval(&pool, &clock);
    }
    let s = pool.stats();
    assert!(s.reclaimed > 0, "idle objects were reclaimed");
    assert!(
        s.batch_size < grown,
        "shrank from {grown} to {}",
        s.batch_size
    );
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_trim_reclaimed_does_not_shrink_the_batch() {
    // Bursts of 128 grow the batch to 64 (the cache holds all 128); then
    // bursts of 8 leave 120 in the cache unneeded: two intervals later the
    // pass trims them, the next reclaims them. The batch stays: halving it
    // would only bring back the depot traffic that grew it.
    let (pool, clock, ledger) = pool(None);
    for _ in 0..4 {
        bursts(&pool, 128, 100);
        end_interval(&pool, &clock);
    }
    assert_eq!(pool.stats().batch_size, 64);
    for _ in 0..5 {
        bursts(&pool, 8, 10);
        end_interval(&pool, &clock);
    }
    let s = pool.stats();
    assert_eq!((s.trimmed, s.reclaimed), (120, 120), "{s:?}");
    assert_eq!(s.batch_size, 64);
    assert_eq!(s.idle_cached(), 8);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn an_explicit_batch_size_is_fixed() {
    let (pool, clock, ledger) = pool(Some(32));
    assert_eq!(pool.config().max_batch_size(), 32);
    for _ in 0..3 {
        bursts(&pool, 512, 4);
        end_interval(&pool, &clock);
    }
    assert_eq!(pool.stats().batch_size, 32);
    drop(pool);
    ledger.assert_all_accounted();
}

/// `rounds` rounds of `n` owned gets on this thread, each round given back
/// on a thread of its own (a one-way flow: every batch goes through the
/// depot), the clock moved half a `step` after the gets and half after the
/// puts: a round's exchanges are never all at one instant.
fn one_way(
    pool: &Arc<Pool<Counting>>,
    clock: &ManualClock,
    n: usize,
    rounds: usize,
    step: Duration,
) {
    for _ in 0..rounds {
        let guards: Vec<_> = (0..n).map(|_| pool.get_owned().unwrap()).collect();
        clock.advance(step / 2);
        // Joined, not left to the scope's end: the scope returns once the
        // closure has, before the thread's thread-locals are destroyed, so
        // its cache's flush to the depot would race what follows.
        std::thread::scope(|s| s.spawn(move || drop(guards)).join().unwrap());
        clock.advance(step / 2);
    }
}

#[test]
fn a_slow_one_way_flow_does_not_grow_the_batch() {
    // Gets on this thread, puts on another, 512 objects a second: a cache
    // of two doubled batches (128) is 250 ms of this flow, far more than
    // the 10 ms a one-way flow may park in a consumer's cache. Every batch
    // goes through the depot, and the batch stays as it is.
    let (pool, clock, ledger) = pool(None);
    for _ in 0..4 {
        one_way(&pool, &clock, 512, 8, Duration::from_secs(1));
        end_interval(&pool, &clock);
    }
    let s = pool.stats();
    assert!(s.depot_exchanges >= 4 * 8 * 2 * 512 / 32 / 2, "{s:?}");
    assert_eq!(s.batch_size, DEFAULT_BATCH_SIZE);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_one_way_flow_grows_the_batch_only_above_its_rate_threshold() {
    // At batch 32, a window of 64 exchanges is two rounds of 512 (1,024
    // objects each way), and a cache of two doubled batches (128) is 10 ms
    // of the flow at 12,800 objects a second: 40 ms a round. Twice as
    // slow, the batch stays; twice as fast, it grows.
    for (step, grows) in [
        (Duration::from_millis(80), false),
        (Duration::from_millis(20), true),
    ] {
        let (pool, clock, ledger) = pool(None);
        one_way(&pool, &clock, 512, 16, step);
        let s = pool.stats();
        assert_eq!(s.reclaim_passes, 0, "{s:?}");
        assert_eq!(
            s.batch_size > DEFAULT_BATCH_SIZE,
            grows,
            "{step:?} a round: {s:?}"
        );
        drop(pool);
        ledger.assert_all_accounted();
    }
}

#[test]
fn a_fast_one_way_flow_grows_the_batch_to_its_bound() {
    // The same flow at 5 million objects a second (512 per 100 us): a
    // cache of even the biggest batches is well under 10 ms of it, so the
    // windows of depot traffic double the batch up to its bound, with no
    // reclaim pass, and the depot sees fewer, bigger exchanges.
    let (pool, clock, ledger) = pool(None);
    let max = pool.config().max_batch_size();
    let step = Duration::from_micros(100);
    let before = pool.stats().depot_exchanges;
    one_way(&pool, &clock, 512, 4, step);
    let first = pool.stats().depot_exchanges - before;
    one_way(&pool, &clock, 512, 60, step);
    let s = pool.stats();
    assert_eq!((s.batch_size, s.reclaim_passes), (max, 0), "{s:?}");
    let before = pool.stats().depot_exchanges;
    one_way(&pool, &clock, 512, 4, step);
    let last = pool.stats().depot_exchanges - before;
    assert!(
        last * 4 <= first,
        "4 rounds took {first} exchanges from batch 32 on, {last} at {max}"
    );
    drop(pool);
    ledger.assert_all_accounted();
}
