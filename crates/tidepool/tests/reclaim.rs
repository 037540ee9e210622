//! Adaptive reclaim and memory-pressure responses, driven deterministically:
//! every pool here has a [`ManualClock`], no reclaimer thread
//! (`.background(false)`), and its passes run only when the test calls
//! `pool.reclaim()` right after moving the clock past an interval boundary.
//!
//! The expectations follow the policy in `tidepool::reclaim`: at a boundary,
//! objects idle in the depot through the last two whole intervals are
//! destroyed (never below `min_idle`), those idle through the last one are
//! purged, and a thread cache whose owner did nothing between two passes is
//! taken back to the depot, its objects counted as idle through that
//! interval (so the next pass destroys them if they stay unused). Every test ends by dropping the pool and checking
//! that each object was destroyed exactly once.
//!
//! Depot arithmetic used below (batch 4, one thread): a thread caches at most
//! two batches (8 objects). Putting back `n >= 8` objects from an empty cache
//! fills it to 8, then each 4 more donate the full spare batch (the cache
//! drops to 5): 16 leave 8 cached and 8 in the depot, 50 leave 6 and 44.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Counting, Ledger, Worker};
use tidepool::pressure::Level;
use tidepool::reclaim::ManualClock;
use tidepool::{Pool, Pooled, Stats};

type P = Pool<Counting>;

const INTERVAL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_secs(2);
const BATCH: usize = 4;

struct Rig {
    pool: Arc<P>,
    ledger: Arc<Ledger>,
    clock: Arc<ManualClock>,
}

fn rig(min_idle: usize) -> Rig {
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(ManualClock::new());
    let pool = Pool::builder(manager)
        .batch_size(BATCH)
        .max_idle(1024)
        .min_idle(min_idle)
        .reclaim_interval(INTERVAL)
        .pressure_hold(HOLD)
        .background(false)
        .clock(clock.clone())
        .build()
        .expect("valid settings");
    Rig {
        pool: Arc::new(pool),
        ledger,
        clock,
    }
}

impl Rig {
    /// Ends the current interval: moves the clock to the next boundary and
    /// runs the pass. Returns how many objects it destroyed.
    fn end_interval(&self) -> usize {
        self.clock.advance(INTERVAL);
        let passes = self.pool.stats().reclaim_passes;
        let n = self.pool.reclaim();
        assert_eq!(
            self.pool.stats().reclaim_passes,
            passes + 1,
            "one pass per boundary"
        );
        n
    }

    /// Uses `n` objects at once on this thread, then gives them all back.
    fn use_n(&self, n: usize) -> Vec<u64> {
        let guards: Vec<Pooled<'_, Counting>> = (0..n).map(|_| self.pool.get().unwrap()).collect();
        let ids = guards.iter().map(|g| g.id()).collect();
        drop(guards);
        ids
    }

    /// Four intervals of a load that peaks every third: 64, 8, 8 (the
    /// peak's 56 reclaimed at the end of the third, and the window grows
    /// to four when they are made again), 64.
    fn peak_then_back(&self) {
        for i in 0..4 {
            self.use_n(if i % 3 == 0 { 64 } else { 8 });
            self.end_interval();
        }
    }

    fn stats(&self) -> Stats {
        self.pool.stats()
    }

    /// Drops the pool and checks every object was destroyed exactly once.
    fn finish(self) {
        let Rig { pool, ledger, .. } = self;
        assert_eq!(Arc::strong_count(&pool), 1, "test still holds the pool");
        drop(pool);
        ledger.assert_all_accounted();
    }
}

/// Objects in existence and idle agree with the manager's own count.
fn assert_consistent(s: &Stats, ledger: &Ledger) {
    let c = ledger.counts();
    assert_eq!(s.created, c.created, "created");
    assert_eq!(s.destroyed, c.destroyed, "destroyed");
    assert_eq!(s.live + s.idle, s.existing(), "live + idle == existing");
    ledger.assert_no_errors();
}

/// `n` gets on `worker`, all held at once, then given back; returns the ids
/// it got.
fn use_on(worker: &Worker, pool: &Arc<P>, n: usize) -> Vec<u64> {
    let pool = Arc::clone(pool);
    worker.run(move || {
        let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
        guards.iter().map(|g| g.id()).collect()
    })
}

// === the working set ===

/// A steady load of 16 objects (8 cached, 8 from the depot each interval),
/// a one-interval spike to 216, then the steady load again: the 200 spike
/// objects are purged after one whole idle interval and destroyed after
/// two; the working set is never destroyed, and nothing is created again.
#[test]
fn spike_then_idle_falls_to_the_working_set_within_two_intervals() {
    let r = rig(0);
    // Warm up: three intervals of the steady load.
    for _ in 0..3 {
        r.use_n(16);
        assert_eq!(r.end_interval(), 0);
    }
    let s = r.stats();
    assert_eq!((s.created, s.idle, s.idle_depot), (16, 16, 8));
    assert_eq!((s.reclaimed, s.destroyed), (0, 0));

    // The spike interval: 216 at once (the 16 plus 200 more).
    r.use_n(216);
    let s = r.stats();
    assert_eq!((s.created, s.idle, s.idle_depot), (216, 216, 208));
    // The depot was emptied during this interval: nothing sat unused.
    assert_eq!(r.end_interval(), 0);
    assert_eq!(r.stats().idle_purged, 0);

    // First whole interval after the spike: the steady load takes its 8 from
    // the newest batches; the 200 oldest sit unused. End of it: purged, not
    // destroyed.
    r.use_n(16);
    assert_eq!(r.end_interval(), 0, "idle for one interval: not destroyed");
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_purged), (216, 208, 200));
    assert_eq!(r.ledger.counts().purged, 200, "manager purged each once");
    assert_eq!(s.working_set, 16, "216 exist, 200 sat unused");
    assert_eq!((s.reclaimed, s.destroyed), (0, 0));

    // Second whole interval: destroyed at its end, exactly the 200.
    let before: HashSet<u64> = r.ledger.existing_ids();
    let used = r.use_n(16);
    assert_eq!(
        r.end_interval(),
        200,
        "idle through two intervals: destroyed"
    );
    let s = r.stats();
    assert_eq!((s.reclaimed, s.destroyed, s.created), (200, 200, 216));
    assert_eq!((s.idle, s.idle_depot, s.idle_purged), (16, 8, 0));
    assert_eq!(s.working_set, 16);
    // The objects the load used are the survivors.
    let alive = r.ledger.existing_ids();
    assert_eq!(alive, used.iter().copied().collect::<HashSet<_>>());
    assert_eq!(before.difference(&alive).count(), 200);
    for id in r.ledger.destroyed_ids() {
        assert_eq!(
            r.ledger.purges_of(id),
            1,
            "object {id}: purged once, then destroyed"
        );
    }
    assert_consistent(&s, &r.ledger);

    // The steady load goes on: nothing destroyed or created any more.
    for _ in 0..6 {
        r.use_n(16);
        assert_eq!(r.end_interval(), 0);
    }
    let s = r.stats();
    assert_eq!((s.created, s.destroyed, s.reclaimed), (216, 200, 200));
    assert_eq!(
        r.ledger.counts().purged,
        200,
        "objects in use are never purged"
    );
    r.finish();
}

/// The same steady load for 50 intervals: no destroy, no re-create, no
/// purge of objects in use.
#[test]
fn steady_load_over_many_intervals_never_destroys_or_recreates() {
    let r = rig(0);
    for i in 0..50 {
        let ids = r.use_n(40);
        assert_eq!(ids.len(), 40);
        assert_eq!(r.end_interval(), 0, "interval {i}");
        let s = r.stats();
        assert_eq!(
            (s.created, s.destroyed, s.reclaimed),
            (40, 0, 0),
            "interval {i}"
        );
        assert_eq!((s.idle, s.idle_depot), (40, 32), "interval {i}");
        assert_eq!(s.working_set, 40, "interval {i}");
    }
    let s = r.stats();
    assert_eq!(s.reclaim_passes, 50);
    assert_eq!(
        s.caches_taken, 0,
        "the thread used its cache every interval"
    );
    assert_eq!(r.ledger.counts().purged, 0);
    assert_eq!(s.hits, 50 * 40 - 40);
    r.finish();
}

/// A load that peaks every other interval keeps its peak: nothing sat unused
/// through two whole intervals. Peaking every third interval, the peak's
/// extra objects sit unused through two and are reclaimed once; the next
/// peak makes them again, one interval after the reclaim, and the pool
/// learns from it: its window grows (to three intervals, doubled to four),
/// and the peak is kept from then on.
#[test]
fn periodic_load_keeps_its_peak_once_it_was_made_again() {
    // Period 2: 64, 8, 64, 8, ...
    let r = rig(0);
    for i in 0..20 {
        r.use_n(if i % 2 == 0 { 64 } else { 8 });
        assert_eq!(r.end_interval(), 0, "interval {i}");
    }
    let s = r.stats();
    assert_eq!((s.created, s.destroyed, s.reclaimed), (64, 0, 0));
    r.finish();

    // Period 3: 64, 8, 8, 64, 8, 8, ...: the 56 in the depot sit unused
    // through the two quiet intervals and are destroyed at the end of the
    // second; the next peak creates 56 again, and they stay.
    let r = rig(0);
    let mut reclaimed = Vec::new();
    for i in 0..12 {
        r.use_n(if i % 3 == 0 { 64 } else { 8 });
        reclaimed.push(r.end_interval());
    }
    assert_eq!(reclaimed, [0, 0, 56, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let s = r.stats();
    assert_eq!((s.created, s.destroyed, s.reclaimed), (64 + 56, 56, 56));
    assert_eq!(s.idle, 64, "the peak stays");
    // When the peaks stop, the longer window still lets them go once they
    // sit unused through four intervals: the last two above, and two more.
    let mut reclaimed = Vec::new();
    for _ in 0..4 {
        r.use_n(8);
        reclaimed.push(r.end_interval());
    }
    assert_eq!(reclaimed, [0, 56, 0, 0]);
    assert_eq!(r.stats().idle, 8);
    r.finish();
}

/// The window a recurring peak lengthened goes back to two intervals, one
/// interval per 64 in which nothing reclaimed was made again: a spike then
/// goes two unused intervals after it, as in a fresh pool.
#[test]
fn a_lengthened_window_shrinks_back_when_nothing_is_made_again() {
    let r = rig(0);
    for i in 0..6 {
        r.use_n(if i % 3 == 0 { 64 } else { 8 });
        r.end_interval();
    }
    // The peak was reclaimed once and made again: the window is 4. It
    // shrinks by one every 64 intervals with nothing made again.
    assert_eq!((r.stats().created, r.stats().reclaimed), (120, 56));
    let mut reclaimed = Vec::new();
    for _ in 0..140 {
        r.use_n(8);
        reclaimed.push(r.end_interval());
    }
    assert_eq!(reclaimed.iter().sum::<usize>(), 56);
    assert_eq!(reclaimed[1], 56, "four unused intervals");
    r.use_n(64);
    let after: Vec<usize> = (0..3)
        .map(|_| {
            r.use_n(8);
            r.end_interval()
        })
        .collect();
    // The 56 sit unused through the two intervals after the spike's and go
    // at the end of the second (with a longer window, they would stay).
    assert_eq!(after, [0, 0, 56]);
    r.finish();
}

/// A pool nobody uses any more goes down to `min_idle` two quiet intervals
/// after its last use, whatever its window grew to: the peak a period-3
/// load taught it to keep has no next need once every get and put has
/// stopped (its window of four would keep the peak through four quiet
/// intervals).
#[test]
fn a_pool_nobody_uses_falls_to_min_idle_after_two_quiet_intervals_whatever_its_window() {
    for min_idle in [0, 4] {
        let r = rig(min_idle);
        r.peak_then_back();
        assert_eq!(r.stats().idle, 64, "the peak is back");
        // Nothing at all from here: the thread's cache is taken at the
        // first quiet pass, and everything above min_idle goes at the
        // second.
        let reclaimed: Vec<usize> = (0..5).map(|_| r.end_interval()).collect();
        assert_eq!(
            reclaimed,
            [0, 64 - min_idle, 0, 0, 0],
            "min_idle {min_idle}"
        );
        let s = r.stats();
        assert_eq!((s.idle, s.live), (min_idle as u64, 0));
        assert_consistent(&s, &r.ledger);
        r.finish();
    }
}

/// A pause as long as the longest window or longer is not learnt: a pool
/// that comes back after one and then stops again still falls to
/// `min_idle` two quiet intervals after its last use, though its window
/// is four.
#[test]
fn a_pause_past_the_longest_window_is_not_learnt() {
    let r = rig(0);
    r.peak_then_back(); // the window grows to four
    let pause: Vec<usize> = (0..20).map(|_| r.end_interval()).collect();
    assert_eq!(pause.iter().sum::<usize>(), 64);
    assert_eq!(
        pause[1], 64,
        "nobody used it: gone after two quiet intervals"
    );
    r.peak_then_back();
    assert_eq!(r.stats().idle, 64);
    let reclaimed: Vec<usize> = (0..5).map(|_| r.end_interval()).collect();
    assert_eq!(reclaimed, [0, 64, 0, 0, 0]);
    r.finish();
}

/// A load with whole quiet intervals between its peaks (64 every third
/// interval, nothing between) loses its peak to the first pause, which is
/// longer than any it had shown, and keeps it from then on: the pause and
/// the window are learnt, and the rule for a pool nobody uses does not
/// undo the window.
#[test]
fn a_load_with_quiet_pauses_keeps_its_peak_once_the_pause_is_learnt() {
    let r = rig(0);
    let mut reclaimed = Vec::new();
    for i in 0..15 {
        if i % 3 == 0 {
            r.use_n(64);
        }
        reclaimed.push(r.end_interval());
    }
    assert_eq!(reclaimed, [0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let s = r.stats();
    assert_eq!((s.created, s.reclaimed, s.idle), (128, 64, 64));
    // The pause goes on (two intervals so far): the peak goes once it
    // outlasts the longest pause, at its third interval, before the
    // window (four) would let it.
    let reclaimed: Vec<usize> = (0..5).map(|_| r.end_interval()).collect();
    assert_eq!(reclaimed, [64, 0, 0, 0, 0]);
    r.finish();
}

/// One reclaim lengthens the window once: a pool that keeps growing after
/// a reclaim (creating in every interval) does not read each of its
/// creates as a reclaim undone, and a later spike still goes after four
/// unused intervals (the window doubled once), not after many.
#[test]
fn a_growing_pool_lengthens_the_window_once() {
    let r = rig(0);
    r.use_n(64);
    for _ in 0..2 {
        r.use_n(8);
        r.end_interval();
    }
    r.use_n(8);
    assert_eq!(r.end_interval(), 56, "the spike, unused through two");
    // Growth: every interval needs 8 more than the one before.
    for n in [16, 24, 32, 40, 48, 56] {
        r.use_n(n);
        r.end_interval();
    }
    let created = r.stats().created;
    r.use_n(120); // a spike: 64 above the load
    let after: Vec<usize> = (0..6)
        .map(|_| {
            r.use_n(56);
            r.end_interval()
        })
        .collect();
    assert_eq!(r.stats().created, created + 64);
    assert_eq!(after, [0, 0, 0, 0, 64, 0], "a window of four");
    r.finish();
}

/// After a gap of many intervals with no depot visit, one pass accounts for
/// all of them: what the depot held sat unused through the whole gap.
#[test]
fn a_late_pass_counts_every_interval_it_missed() {
    let r = rig(0);
    r.use_n(100); // cache 8, depot 92
    assert_eq!(r.end_interval(), 0);
    r.clock.advance(INTERVAL * 5);
    let passes = r.stats().reclaim_passes;
    assert_eq!(r.pool.reclaim(), 92, "the whole depot sat unused");
    let s = r.stats();
    assert_eq!(s.reclaim_passes, passes + 1, "one pass for the gap");
    // The thread did nothing since the previous pass: its cache came back.
    assert_eq!(s.caches_taken, 1);
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (8, 8, 0));
    r.finish();
}

/// With no explicit `reclaim()`, the first thread to visit the depot after
/// a boundary runs the pass.
#[test]
fn a_due_pass_runs_on_the_next_depot_visit() {
    let r = rig(0);
    r.use_n(100); // cache 8, depot 92
    r.clock.advance(INTERVAL);
    // Cache hits do not visit the depot.
    r.use_n(8);
    assert_eq!(r.stats().reclaim_passes, 0);
    // The 9th get visits the depot.
    r.use_n(9);
    assert_eq!(r.stats().reclaim_passes, 1);
    assert_eq!(r.pool.reclaim(), 0, "not due again until the next boundary");
    assert_eq!(r.stats().reclaim_passes, 1);
    r.finish();
}

// === min_idle ===

#[test]
fn min_idle_floor_holds_for_passes_trim_pressure_and_prefill() {
    let r = rig(20);
    assert_eq!(r.pool.prefill().unwrap(), 20);
    assert_eq!(r.pool.prefill().unwrap(), 0, "already full");
    let s = r.stats();
    assert_eq!((s.created, s.idle, s.idle_depot), (20, 20, 20));

    // Idle passes never go below the floor.
    for _ in 0..5 {
        assert_eq!(r.end_interval(), 0);
    }
    assert_eq!(r.pool.reclaim_unused(), 0);
    assert_eq!(r.pool.reclaim_unused(), 0);
    assert_eq!(r.pool.pressure(Level::Medium), 0);
    assert_eq!(r.pool.pressure(Level::Critical), 0);
    let s = r.stats();
    assert_eq!((s.idle_depot, s.destroyed), (20, 0));
    assert_eq!((s.pressure_medium, s.pressure_critical), (1, 1));
    r.clock.advance(HOLD);

    // A spike of 100, then idle: the 20 prefilled objects were used by the
    // spike (the depot was emptied), the other 80 go, down to the floor.
    r.use_n(100);
    let s = r.stats();
    assert_eq!((s.created, s.idle_depot, s.idle_cached()), (100, 92, 8));
    let mut reclaimed = Vec::new();
    for _ in 0..5 {
        reclaimed.push(r.end_interval());
    }
    // Pass 1 ends the spike's interval; pass 2 purges and takes the idle
    // thread's cache (donated after the tick); pass 3 destroys down to 20.
    assert_eq!(reclaimed, [0, 0, 80, 0, 0]);
    let s = r.stats();
    assert_eq!(
        (s.idle, s.idle_depot, s.reclaimed, s.caches_taken),
        (20, 20, 80, 1)
    );

    // Trim and pressure respect the floor too.
    r.use_n(60); // 40 created; cache 8, depot 52
    r.pool.reclaim_unused(); // starts a period
    assert_eq!(
        r.pool.reclaim_unused(),
        32,
        "reclaim_unused stops at the floor"
    );
    assert_eq!(r.stats().idle_depot, 20);
    r.use_n(60); // depot 52 again: 20 + 32 donated
    assert_eq!(r.pool.pressure(Level::Critical), 40, "32 depot + 8 cached");
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot), (20, 20));

    // `drain` is the one that ignores the floor; `prefill` restores it.
    r.clock.advance(HOLD);
    assert_eq!(r.pool.drain(), 20);
    assert_eq!(r.stats().idle, 0);
    assert_eq!(r.pool.prefill().unwrap(), 20);
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot), (20, 20));
    assert_consistent(&s, &r.ledger);
    r.finish();
}

// === memory pressure ===

/// Medium destroys now what sat unused through this interval and the last,
/// and nothing else.
#[test]
fn medium_pressure_destroys_what_sat_unused_through_this_interval_and_the_last() {
    let r = rig(0);
    r.use_n(16);
    assert_eq!(r.end_interval(), 0);
    r.use_n(216); // spike: cache 8, depot 208
    assert_eq!(
        r.pool.pressure(Level::Medium),
        0,
        "everything was used this interval"
    );
    assert_eq!(r.end_interval(), 0);
    r.use_n(16); // 200 unused this interval, but the last interval used all
    assert_eq!(
        r.pool.pressure(Level::Medium),
        0,
        "the last interval used them"
    );
    assert_eq!(r.end_interval(), 0);
    // Mid-interval, before any use: the 200 sat unused through the last
    // interval and all of this one so far.
    assert_eq!(r.pool.pressure(Level::Medium), 200);
    let s = r.stats();
    assert_eq!((s.pressure_medium, s.reclaimed), (3, 200));
    assert_eq!((s.idle, s.idle_depot, s.created), (16, 8, 216));
    assert_eq!(r.pool.pressure(Level::Medium), 0, "nothing unused is left");
    assert_consistent(&s, &r.ledger);
    r.finish();
}

/// After a Medium signal has taken what sat unused, the steady load's own
/// objects must still not be destroyed and created again: the signal
/// removed exactly the objects the low-water marks counted, so the marks
/// must drop by as much.
#[test]
fn steady_load_recreates_nothing_after_medium_pressure() {
    let r = rig(0);
    r.use_n(16);
    assert_eq!(r.end_interval(), 0);
    r.use_n(216); // spike
    assert_eq!(r.end_interval(), 0);
    r.use_n(16);
    assert_eq!(r.end_interval(), 0); // the 200 are purged here
    r.use_n(16); // the load takes its 8 from the depot's newest batches
    assert_eq!(r.pool.pressure(Level::Medium), 200, "the 200 spike objects");
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot), (16, 8));
    // The 8 left in the depot were used in this very interval.
    for i in 0..4 {
        assert_eq!(
            r.end_interval(),
            0,
            "pass {i} after the signal destroys nothing"
        );
        r.use_n(16);
    }
    let s = r.stats();
    assert_eq!(
        (s.created, s.destroyed),
        (216, 200),
        "the steady load's objects were destroyed and created again"
    );
    r.finish();
}

/// The same for `reclaim_unused`: objects it leaves were used since the previous call,
/// and the next reclaim pass must not count them as unused.
#[test]
fn steady_load_recreates_nothing_after_trim() {
    let r = rig(0);
    r.use_n(16);
    assert_eq!(r.end_interval(), 0);
    r.use_n(216); // spike
    assert_eq!(r.end_interval(), 0);
    r.use_n(16);
    assert_eq!(r.end_interval(), 0);
    r.pool.reclaim_unused(); // starts a period
    r.use_n(16);
    assert_eq!(
        r.pool.reclaim_unused(),
        200,
        "the spike objects sat unused since the last call"
    );
    for i in 0..4 {
        assert_eq!(
            r.end_interval(),
            0,
            "pass {i} after reclaim_unused destroys nothing"
        );
        r.use_n(16);
    }
    let s = r.stats();
    assert_eq!(
        (s.created, s.destroyed),
        (216, 200),
        "the steady load's objects were destroyed and created again"
    );
    r.finish();
}

/// Critical drains the depot to `min_idle` and takes every thread cache,
/// the caller's and a parked thread's.
#[test]
fn critical_pressure_drains_to_min_idle_and_takes_every_cache() {
    let r = rig(4);
    let worker = Worker::spawn();
    use_on(&worker, &r.pool, 6); // the worker caches 6
    r.use_n(50); // main: cache 6, depot 44
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (56, 44, 12));

    assert_eq!(r.pool.pressure(Level::Critical), 52, "56 idle, 4 kept");
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (4, 4, 0));
    assert_eq!(
        (s.pressure_critical, s.caches_taken, s.reclaimed),
        (1, 2, 52)
    );
    assert_eq!(s.destroyed, 52);
    assert_consistent(&s, &r.ledger);

    // The worker works on during the hold: it re-claims its cache (empty
    // now), takes the 4 kept in the depot, creates 2, and caches all 6
    // again (threads keep caching during a hold; only the depot is capped).
    let ids = use_on(&worker, &r.pool, 6);
    assert_eq!(ids.len(), 6);
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (6, 0, 6));
    assert_eq!((s.created, s.destroyed), (56 + 2, 52));
    worker.exit();
    // Its exit hands its two batches (4 and 2) to the depot, capped at
    // min_idle = 4 during the hold: whichever is offered first fits, the
    // other is refused whole and destroyed.
    let s = r.stats();
    assert_eq!(s.idle, s.idle_depot, "{s:?}");
    assert!(s.idle_depot == 2 || s.idle_depot == 4, "{s:?}");
    assert_eq!(s.destroyed, 58 - s.idle, "{s:?}");
    r.finish();
}

/// During the hold, the depot is capped at `min_idle`: batches donated
/// beyond it are destroyed, while each thread goes on caching at most two
/// batches. After the hold, the depot keeps what it is given again.
#[test]
fn critical_hold_caps_the_depot_at_min_idle_then_caching_resumes() {
    let r = rig(4);
    r.use_n(50);
    assert_eq!(r.pool.pressure(Level::Critical), 46);
    let s = r.stats();
    assert_eq!((s.created, s.idle, s.idle_depot), (50, 4, 4));
    assert_eq!(s.caches_taken, 1, "the caller's own cache, at the signal");

    // During the hold: 20 gets take the 4 kept and create 16; the 20 puts
    // fill the cache (8) and donate 3 batches of 4: the first fits under
    // the cap of 4, the other two (8 objects) are destroyed.
    r.clock.advance(HOLD / 2);
    r.use_n(20);
    let s = r.stats();
    assert_eq!((s.created, s.destroyed), (66, 54));
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (12, 4, 8));
    // Again: it is not a one-off. 12 idle are reused, 8 created, 8
    // destroyed.
    r.use_n(20);
    let s = r.stats();
    assert_eq!((s.created, s.destroyed), (74, 62));
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (12, 4, 8));

    // After the hold: the depot keeps all it is given.
    r.clock.advance(HOLD);
    r.use_n(20);
    let s = r.stats();
    assert_eq!(s.destroyed, 62, "no donation destroyed after the hold");
    assert_eq!((s.created, s.idle, s.idle_depot), (82, 20, 12));
    // And reuses without creating.
    r.use_n(20);
    assert_eq!(r.stats().created, 82);
    assert_consistent(&r.stats(), &r.ledger);
    r.finish();
}

/// A second critical signal during a hold extends it from the second one.
#[test]
fn a_second_critical_signal_renews_the_hold() {
    let r = rig(0);
    r.use_n(20);
    r.pool.pressure(Level::Critical);
    r.clock.advance(HOLD * 3 / 4);
    r.pool.pressure(Level::Critical);
    // Past the first hold's end, within the second's.
    r.clock.advance(HOLD * 3 / 4);
    let d = r.stats().destroyed;
    assert_eq!(d, 20);
    // 20 created; 8 cached, 3 batches donated and refused (cap 0).
    r.use_n(20);
    let s = r.stats();
    assert_eq!(
        s.destroyed,
        d + 12,
        "still holding the depot at min_idle = 0"
    );
    assert_eq!((s.idle, s.idle_depot), (8, 0));
    // Past the second hold's end: 8 reused, 12 created, all kept.
    r.clock.advance(HOLD);
    r.use_n(20);
    let s = r.stats();
    assert_eq!(s.destroyed, d + 12, "the hold is over");
    assert_eq!((s.idle, s.idle_depot), (20, 12));
    assert_eq!(s.pressure_critical, 2);
    r.finish();
}

/// A reclaim pass that ends the hold restores the depot's cap as well.
#[test]
fn a_pass_after_the_hold_lifts_it() {
    let r = rig(0);
    r.use_n(20);
    r.pool.pressure(Level::Critical);
    assert_eq!(r.end_interval(), 0, "nothing left to reclaim");
    let worker = Worker::spawn();
    // The worker has no cache yet: it claims one, the hold being over.
    use_on(&worker, &r.pool, 20);
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (20, 12, 8));
    worker.exit();
    let s = r.stats();
    assert_eq!(
        (s.idle, s.idle_depot),
        (20, 20),
        "its exit gave the cache back"
    );
    r.finish();
}

// === thread caches taken back ===

/// A thread that used the pool and then blocks (alive) has its cache taken
/// back by the second pass after it went quiet; it then works on, and the
/// counts stay exact.
#[test]
fn idle_thread_cache_is_taken_back_after_two_passes_and_the_thread_resumes() {
    let r = rig(0);
    let worker = Worker::spawn();
    let first = use_on(&worker, &r.pool, 6);
    let s = r.stats();
    assert_eq!(
        (s.created, s.idle, s.idle_depot, s.idle_cached()),
        (6, 6, 0, 6)
    );

    // Pass 1 records the worker's counts; pass 2 sees them unchanged.
    assert_eq!(r.end_interval(), 0);
    assert_eq!(
        r.stats().caches_taken,
        0,
        "one pass is not a whole interval"
    );
    assert_eq!(r.end_interval(), 0);
    let s = r.stats();
    assert_eq!(s.caches_taken, 1);
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (6, 6, 0));
    assert_eq!((s.destroyed, s.reclaimed), (0, 0));

    // The worker resumes before the next pass: it gets its old objects back
    // from the depot.
    let again = use_on(&worker, &r.pool, 6);
    assert_eq!(
        again.iter().copied().collect::<HashSet<_>>(),
        first.iter().copied().collect::<HashSet<_>>(),
        "reused, not created"
    );
    let s = r.stats();
    assert_eq!((s.created, s.live, s.idle, s.idle_cached()), (6, 0, 6, 6));
    assert_eq!((s.hits, s.misses), (6, 6));
    assert_consistent(&s, &r.ledger);

    // It goes quiet again: taken again, two passes later.
    assert_eq!(r.end_interval(), 0);
    assert_eq!(r.stats().caches_taken, 1);
    assert_eq!(r.end_interval(), 0);
    let s = r.stats();
    assert_eq!((s.caches_taken, s.idle_depot, s.idle_cached()), (2, 6, 0));

    // They sat unused through the interval before that pass (in the quiet
    // cache) and sit unused through the next one (in the depot): two whole
    // intervals, so the next pass destroys them, as it does objects idle in
    // the depot all along. Taking the empty cache again is not counted.
    assert_eq!(r.end_interval(), 6);
    assert_eq!(r.stats().caches_taken, 2);
    let s = r.stats();
    assert_eq!((s.idle, s.existing(), s.reclaimed), (0, 0, 6));

    // The worker still works, creating afresh, and exits cleanly.
    use_on(&worker, &r.pool, 3);
    let s = r.stats();
    assert_eq!((s.created, s.idle_cached()), (9, 3));
    worker.exit();
    assert_eq!(r.stats().idle_depot, 3);
    r.finish();
}

/// A thread busy in every interval keeps its cache; once it stops, the cache
/// comes back at the second pass, while a thread still busy keeps its own.
#[test]
fn busy_then_idle_thread_cache_comes_back_busy_one_stays() {
    let r = rig(0);
    let worker = Worker::spawn();
    for i in 0..6 {
        use_on(&worker, &r.pool, 5);
        r.use_n(5);
        assert_eq!(r.end_interval(), 0, "interval {i}");
        assert_eq!(r.stats().caches_taken, 0, "interval {i}: both busy");
    }
    let s = r.stats();
    assert_eq!((s.created, s.idle_cached(), s.idle_depot), (10, 10, 0));

    // The worker stops (its last operations came before the last pass);
    // main keeps going. The worker does nothing for the whole interval up
    // to the next pass, which takes its cache.
    r.use_n(5);
    assert_eq!(r.end_interval(), 0);
    let s = r.stats();
    assert_eq!(s.caches_taken, 1, "only the worker's");
    assert_eq!((s.idle_depot, s.idle_cached()), (5, 5));
    // Main's load never visits the depot (5 fit in its cache): the worker's
    // 5 sat unused through the interval before the pass that took them and
    // through the one after it, so the next pass destroys them.
    let mut reclaimed = Vec::new();
    for _ in 0..4 {
        r.use_n(5);
        reclaimed.push(r.end_interval());
    }
    assert_eq!(reclaimed, [5, 0, 0, 0]);
    let s = r.stats();
    assert_eq!(s.caches_taken, 1, "main's cache, busy, is never taken");
    assert_eq!(
        (s.created, s.reclaimed, s.idle, s.idle_cached()),
        (10, 5, 5, 5)
    );
    worker.exit();
    r.finish();
}

/// A busy thread cache that holds objects it does not need through two
/// intervals gives them back to the depot (a trim) at its next access.
/// There they are idle objects like any other, counted from their arrival:
/// nothing takes them through two whole intervals, and the pass after
/// those destroys them. The thread keeps what it uses and never creates
/// again.
#[test]
fn a_busy_cache_trims_what_it_held_unused_through_two_intervals() {
    let r = rig(0);
    r.use_n(8); // both batches full: 8 cached, all needed in interval 1
    let mut reclaimed = Vec::new();
    for _ in 0..7 {
        // Two at a time: the cache never holds fewer than 6.
        r.use_n(2);
        reclaimed.push(r.end_interval());
    }
    // Pass 3 sees 6 unneeded through intervals 2 and 3 and asks for them;
    // the thread's next get hands them over in interval 4; they sit in the
    // depot through intervals 5 and 6, and pass 6 destroys them.
    assert_eq!(reclaimed, [0, 0, 0, 0, 0, 6, 0]);
    let s = r.stats();
    assert_eq!(
        (s.created, s.trimmed, s.reclaimed, s.caches_taken),
        (8, 6, 6, 0)
    );
    assert_eq!((s.idle_cached(), s.idle_depot), (2, 0), "it keeps its two");
    assert_consistent(&s, &r.ledger);
    r.finish();
}

/// What a trim took is not counted again: after the 2 objects a cache held
/// unused through two intervals are trimmed, the 6 it used in the second
/// are not asked for at the next pass; only once 4 of them sit unused
/// through two more intervals are those asked for.
#[test]
fn a_trim_is_not_asked_again_of_what_the_cache_used() {
    let r = rig(0);
    let mut trimmed = Vec::new();
    for n in [8, 2, 6, 2, 2, 2] {
        r.use_n(n);
        trimmed.push(r.stats().trimmed);
        r.end_interval();
    }
    // Pass 3 asks for the 2 unused through intervals 2 and 3, served in
    // interval 4; pass 5 for the 4 unused through 4 and 5, served in 6.
    assert_eq!(trimmed, [0, 0, 0, 2, 2, 6]);
    let s = r.stats();
    assert_eq!((s.created, s.idle_cached()), (8, 2));
    assert_consistent(&s, &r.ledger);
    r.finish();
}

/// A cache that needs everything it holds in one of every two intervals is
/// never trimmed: its low-water mark is 0 in one of the two.
#[test]
fn a_cache_emptied_every_other_interval_keeps_all_it_holds() {
    let r = rig(0);
    for i in 0..10 {
        r.use_n(if i % 2 == 0 { 8 } else { 2 });
        assert_eq!(r.end_interval(), 0, "interval {i}");
    }
    let s = r.stats();
    assert_eq!((s.created, s.trimmed, s.destroyed), (8, 0, 0));
    assert_eq!(s.idle_cached(), 8);
    r.finish();
}

/// A trim asked of a thread that then goes quiet: the quiet-cache path takes
/// the whole cache instead, and nothing is lost or destroyed twice.
#[test]
fn a_trim_request_left_unserved_is_overtaken_by_the_take_back() {
    let r = rig(0);
    let worker = Worker::spawn();
    use_on(&worker, &r.pool, 8);
    assert_eq!(r.end_interval(), 0);
    for _ in 0..2 {
        use_on(&worker, &r.pool, 2);
        assert_eq!(r.end_interval(), 0);
    }
    // The second of those passes asked the worker for 6. It does nothing
    // now: the next pass takes its cache, trim request and all; the one
    // after destroys the 8.
    assert_eq!(r.stats().caches_taken, 0);
    assert_eq!(r.end_interval(), 0);
    assert_eq!(r.stats().caches_taken, 1);
    assert_eq!(r.end_interval(), 8);
    let s = r.stats();
    assert_eq!((s.created, s.trimmed, s.idle), (8, 0, 0));
    assert_consistent(&s, &r.ledger);
    // The worker comes back: its cache is claimed afresh.
    use_on(&worker, &r.pool, 2);
    assert_eq!(r.stats().created, 10);
    worker.exit();
    r.finish();
}

/// A guard held across passes keeps its object out of reclaim; giving it
/// back later is a plain put.
#[test]
fn objects_held_across_passes_are_never_reclaimed() {
    let r = rig(0);
    let held: Vec<_> = (0..12).map(|_| r.pool.get_owned().unwrap()).collect();
    for _ in 0..5 {
        assert_eq!(r.end_interval(), 0);
    }
    r.pool.pressure(Level::Critical);
    let s = r.stats();
    assert_eq!((s.live, s.idle, s.destroyed), (12, 0, 0));
    r.clock.advance(HOLD);
    drop(held);
    let s = r.stats();
    assert_eq!((s.live, s.idle, s.destroyed), (0, 12, 0));
    r.finish();
}
