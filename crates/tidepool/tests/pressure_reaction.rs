//! The cheaper pressure reactions, driven deterministically (a
//! [`ManualClock`], no reclaimer thread, the pool's own `pressure` calls):
//!
//! * Medium purges what the depot keeps after reclaiming what sat unused
//!   (release pages, keep the objects), and leaves the thread caches alone;
//! * by default (no `pressure_hold` set) a single critical signal drains
//!   the pool without a hold, and only a critical signal that follows
//!   another within one reclaim interval holds the depot at `min_idle`, for
//!   2/15 of the interval.
//!
//! A pool built with an explicit `pressure_hold` keeps the fixed hold:
//! `tests/reclaim.rs` covers it. Every test checks the manager's own count
//! (`live + idle == created - destroyed`) and ends with every object
//! destroyed exactly once.
//!
//! Depot arithmetic (batch 4, one thread): a thread caches at most two
//! batches; putting back 50 from an empty cache leaves 6 cached and 44 in
//! the depot, 20 leave 8 and 12.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use common::{Counting, Ledger};
use tidepool::pressure::Level;
use tidepool::reclaim::ManualClock;
use tidepool::{Manage, Pool, Pooled, Stats};

const INTERVAL: Duration = Duration::from_secs(15);
/// The default hold for persisting pressure at this interval: 2/15 of it.
const AUTO_HOLD: Duration = Duration::from_secs(2);

struct Rig {
    pool: Pool<Counting>,
    ledger: Arc<Ledger>,
    clock: Arc<ManualClock>,
}

/// A pool with the default pressure hold (none set).
fn rig(min_idle: usize) -> Rig {
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(ManualClock::new());
    let pool = Pool::builder(manager)
        .batch_size(4)
        .max_idle(1024)
        .min_idle(min_idle)
        .reclaim_interval(INTERVAL)
        .background(false)
        .clock(clock.clone())
        .build()
        .expect("valid settings");
    Rig {
        pool,
        ledger,
        clock,
    }
}

impl Rig {
    fn use_n(&self, n: usize) -> Vec<u64> {
        let guards: Vec<Pooled<'_, Counting>> = (0..n).map(|_| self.pool.get().unwrap()).collect();
        let ids = guards.iter().map(|g| g.id()).collect();
        drop(guards);
        ids
    }

    /// The pool's counts, checked against the manager's.
    fn stats(&self) -> Stats {
        let s = self.pool.stats();
        let c = self.ledger.counts();
        assert_eq!((s.created, s.destroyed), (c.created, c.destroyed));
        assert_eq!(s.live + s.idle, s.created - s.destroyed, "{s:?}");
        self.ledger.assert_no_errors();
        s
    }

    fn finish(self) {
        let Rig { pool, ledger, .. } = self;
        drop(pool);
        ledger.assert_all_accounted();
    }
}

#[test]
fn the_default_hold_is_proportional_to_the_interval() {
    let (manager, _ledger) = Counting::new();
    let interval = Duration::from_millis(150);
    let pool = Pool::builder(manager)
        .reclaim_interval(interval)
        .background(false)
        .build()
        .unwrap();
    // A configured value, not a measured time: 2/15 of the interval.
    assert_eq!(pool.config().pressure_hold(), interval * 2 / 15);
    let r = rig(0);
    assert_eq!(r.pool.config().pressure_hold(), AUTO_HOLD);
    // Set explicitly, it is what was set.
    let (manager, _ledger) = Counting::new();
    let hold = Duration::from_millis(7);
    let fixed = Pool::builder(manager)
        .pressure_hold(hold)
        .background(false)
        .build()
        .unwrap();
    assert_eq!(fixed.config().pressure_hold(), hold);
}

/// Medium, mid-interval, everything used this interval: nothing is
/// destroyed, the depot's 44 are purged once each, the 6 cached are not
/// touched; the load then reuses all 50 (purged ones included) without
/// creating any.
#[test]
fn medium_purges_the_depot_and_keeps_the_caches() {
    let r = rig(0);
    let ids = r.use_n(50);
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (50, 44, 6));
    assert_eq!(r.pool.pressure(Level::Medium), 0, "all used this interval");
    let s = r.stats();
    assert_eq!((s.pressure_medium, s.destroyed, s.reclaimed), (1, 0, 0));
    assert_eq!((s.idle, s.idle_purged, s.idle_cached()), (50, 44, 6));
    let purged: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|&id| r.ledger.purges_of(id) == 1)
        .collect();
    assert_eq!(purged.len(), 44, "each depot object purged exactly once");
    assert!(ids.iter().all(|&id| r.ledger.purges_of(id) <= 1));
    // A second Medium finds nothing left to purge.
    assert_eq!(r.pool.pressure(Level::Medium), 0);
    assert!(
        ids.iter().all(|&id| r.ledger.purges_of(id) <= 1),
        "purged twice"
    );
    // The load takes them back: purged objects are reused, not recreated.
    let again = r.use_n(50);
    let s = r.stats();
    assert_eq!(s.created, 50, "nothing created after a Medium signal");
    let mut a = again.clone();
    let mut b = ids.clone();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    r.finish();
}

/// Medium still destroys what sat unused through this interval and the
/// last (never below `min_idle`), then purges what the depot keeps.
#[test]
fn medium_reclaims_the_unused_then_purges_the_rest() {
    let r = rig(2);
    r.use_n(16);
    r.clock.advance(INTERVAL);
    assert_eq!(r.pool.reclaim(), 0);
    r.use_n(216); // spike: 8 cached, 208 in the depot
    r.clock.advance(INTERVAL);
    assert_eq!(r.pool.reclaim(), 0);
    r.use_n(16); // the 200 oldest sit unused
    r.clock.advance(INTERVAL);
    assert_eq!(r.pool.reclaim(), 0);
    let before = r.stats();
    assert_eq!((before.idle, before.idle_depot), (216, 208));
    assert_eq!(r.pool.pressure(Level::Medium), 200);
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (16, 8, 8));
    assert_eq!((s.destroyed, s.reclaimed), (200, 200));
    assert_eq!(s.idle_purged, 8, "what the depot kept is purged");
    r.finish();
}

/// A single critical signal (no other before it) drains to `min_idle`,
/// caches included, and holds nothing: the load re-creates its working set
/// once and the depot keeps it.
#[test]
fn a_single_critical_signal_drains_without_a_hold() {
    let r = rig(4);
    r.use_n(50);
    assert_eq!(r.pool.pressure(Level::Critical), 46, "50 idle, 4 kept");
    let s = r.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (4, 4, 0));
    assert_eq!((s.pressure_critical, s.caches_taken), (1, 1));
    // Right after the signal: 20 gets take the 4 kept and create 16; the
    // 20 puts are all kept (8 cached, 12 in the depot): no hold.
    r.clock.advance(AUTO_HOLD / 2);
    r.use_n(20);
    let s = r.stats();
    assert_eq!((s.created, s.destroyed), (66, 46));
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (20, 12, 8));
    r.use_n(20);
    assert_eq!(r.stats().created, 66, "reused, not created");
    r.finish();
}

/// A critical signal within an interval of the previous one means the
/// pressure persists: the depot is held at `min_idle` for 2/15 of the
/// interval, then keeps what it is given again.
#[test]
fn a_critical_signal_that_follows_another_holds_the_depot() {
    let r = rig(0);
    r.use_n(20);
    assert_eq!(r.pool.pressure(Level::Critical), 20);
    r.clock.advance(INTERVAL / 2);
    r.use_n(20); // no hold yet: 20 created, all kept
    assert_eq!(r.stats().destroyed, 20);
    assert_eq!(r.pool.pressure(Level::Critical), 20, "drained again");
    // Within the hold: 20 created; 8 cached, 3 batches donated and refused.
    r.clock.advance(AUTO_HOLD / 2);
    r.use_n(20);
    let s = r.stats();
    assert_eq!((s.created, s.destroyed), (60, 52));
    assert_eq!((s.idle, s.idle_depot), (8, 0));
    // Past the hold: 8 reused, 12 created, all kept.
    r.clock.advance(AUTO_HOLD);
    r.use_n(20);
    let s = r.stats();
    assert_eq!((s.created, s.destroyed), (72, 52));
    assert_eq!((s.idle, s.idle_depot), (20, 12));
    assert_eq!(s.pressure_critical, 2);
    r.finish();
}

/// Signals an interval or more apart are each a single one: no hold.
#[test]
fn critical_signals_an_interval_apart_hold_nothing() {
    let r = rig(0);
    r.use_n(20);
    assert_eq!(r.pool.pressure(Level::Critical), 20);
    r.clock.advance(INTERVAL);
    r.use_n(20);
    assert_eq!(r.pool.pressure(Level::Critical), 20);
    r.use_n(20); // 20 created, all kept: no hold
    let s = r.stats();
    assert_eq!((s.created, s.destroyed, s.idle), (60, 40, 20));
    r.finish();
}

/// A purge that panics under Medium: the batch it was purging is destroyed
/// (which of its objects are half-purged cannot be told), the others go
/// back purged, the panic reaches the caller once all of that is done, and
/// the counts stay exact.
#[test]
fn a_panicking_purge_under_medium_loses_nothing() {
    common::quiet_injected_panics();
    let r = rig(0);
    r.use_n(50); // 6 cached, 44 in the depot (11 batches of 4)
    r.ledger.panic_purge.arm(1);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        r.pool.pressure(Level::Medium)
    }));
    let s = r.stats();
    assert_eq!(s.callback_panics, 1, "{s:?}");
    assert_eq!(s.destroyed, 4, "the panicking batch, whole: {s:?}");
    assert_eq!((s.idle, s.idle_purged, s.idle_cached()), (46, 40, 6));
    if let Ok(n) = caught {
        assert_eq!(n, 0, "nothing sat unused");
    }
    // Nothing else is touched: the survivors are reused, 4 are created.
    r.use_n(50);
    assert_eq!(r.stats().created, 54);
    r.finish();
}

/// A manager whose `destroy` looks at its own pool's stats: what a
/// signal's response shows while it runs. Counts what it made and
/// destroyed.
#[derive(Clone, Default)]
struct Watching {
    pool: Arc<OnceLock<Weak<Pool<Watching>>>>,
    /// `(pressure_medium, pressure_critical)` at each destroy.
    seen: Arc<Mutex<Vec<(u64, u64)>>>,
    made: Arc<AtomicU64>,
    destroyed: Arc<AtomicU64>,
}

impl Manage for Watching {
    type Item = Box<u64>;
    type Error = Infallible;

    fn create(&self) -> Result<Box<u64>, Infallible> {
        Ok(Box::new(self.made.fetch_add(1, Ordering::Relaxed)))
    }

    fn destroy(&self, _: Box<u64>) {
        self.destroyed.fetch_add(1, Ordering::Relaxed);
        if let Some(pool) = self.pool.get().and_then(Weak::upgrade) {
            let s = pool.stats();
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.push((s.pressure_medium, s.pressure_critical));
        }
    }
}

/// A signal is counted once its response is done: while Medium's and
/// Critical's destroys run, the pool's stats do not count the signal yet;
/// a `Stats` that counts it shows all it reclaimed.
#[test]
fn a_signal_is_counted_once_its_response_is_done() {
    let manager = Watching::default();
    let clock = Arc::new(ManualClock::new());
    let pool = Arc::new(
        Pool::builder(manager.clone())
            .batch_size(4)
            .max_idle(1024)
            .reclaim_interval(INTERVAL)
            .background(false)
            .clock(clock.clone())
            .build()
            .expect("valid settings"),
    );
    assert!(manager.pool.set(Arc::downgrade(&pool)).is_ok());
    let use_n = |n: usize| drop((0..n).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
    // As in `medium_reclaims_the_unused_then_purges_the_rest`: 200 sit
    // unused through this interval and the last.
    for n in [16, 216, 16] {
        use_n(n);
        clock.advance(INTERVAL);
        assert_eq!(pool.reclaim(), 0);
    }
    assert_eq!(pool.pressure(Level::Medium), 200);
    let seen = std::mem::take(&mut *manager.seen.lock().unwrap());
    assert_eq!(
        seen,
        vec![(0, 0); 200],
        "Medium counted before its destroys"
    );
    let s = pool.stats();
    assert_eq!((s.pressure_medium, s.reclaimed, s.idle), (1, 200, 16));

    assert_eq!(pool.pressure(Level::Critical), 16);
    let seen = std::mem::take(&mut *manager.seen.lock().unwrap());
    assert_eq!(
        seen,
        vec![(1, 0); 16],
        "Critical counted before its destroys"
    );
    let s = pool.stats();
    assert_eq!((s.pressure_critical, s.reclaimed, s.idle), (1, 216, 0));

    drop(pool);
    assert_eq!(manager.made.load(Ordering::Relaxed), 216);
    assert_eq!(manager.destroyed.load(Ordering::Relaxed), 216);
}
