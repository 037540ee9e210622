//! Objects made outside the pool: `try_get` never creates, `adopt` takes an
//! object in as an ordinary member (reused, reclaimed, counted), and
//! `into_raw` / `from_raw` lend one without a guard. Also the run-time
//! knobs a drop-in for QEMU's coroutine pool needs: `set_max_idle`,
//! `adjust_max_idle`, `destroy_local` and `maps_per_object`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidepool::reclaim::ManualClock;
use tidepool::{Pool, Pooled};

const INTERVAL: Duration = Duration::from_secs(10);

/// An object that counts its own destruction: every one is destroyed
/// exactly once when `made == dropped` at the end.
struct Item {
    dropped: Arc<AtomicU64>,
}

impl Drop for Item {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

struct Counts {
    made: AtomicU64,
    dropped: Arc<AtomicU64>,
}

impl Counts {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            made: AtomicU64::new(0),
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// An object made "elsewhere" (by the caller).
    fn make(&self) -> Item {
        self.made.fetch_add(1, Ordering::Relaxed);
        Item {
            dropped: self.dropped.clone(),
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

type Make = Box<dyn Fn() -> Item + Send + Sync>;

fn pool(counts: &Arc<Counts>, batch: usize) -> (Pool<Make>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let c = counts.clone();
    let make: Make = Box::new(move || c.make());
    let pool = Pool::builder(make)
        .batch_size(batch)
        .reclaim_interval(INTERVAL)
        .background(false)
        .clock(clock.clone())
        .build()
        .unwrap();
    (pool, clock)
}

fn check_counts<M: tidepool::Manage>(pool: &Pool<M>) {
    let s = pool.stats();
    assert_eq!(s.live + s.idle + s.destroying, s.existing(), "{s:?}");
}

/// The defect QEMU's seam found: objects the caller made and handed over
/// sat in a side list that reclaim never touched. A burst of 200 adopted
/// objects, then one object at a time: reclaim passes destroy them as they
/// destroy objects the pool made.
#[test]
fn adopted_objects_are_reclaimed_like_created_ones() {
    let counts = Counts::new();
    let (pool, clock) = pool(&counts, 4);
    let burst: Vec<Pooled<'_, Make>> = (0..200)
        .map(|_| {
            assert!(pool.try_get().is_none());
            pool.adopt(counts.make()).ok().expect("no max_live")
        })
        .collect();
    let s = pool.stats();
    assert_eq!(
        (s.created, s.adopted, s.live, s.empty_gets),
        (200, 200, 200, 200)
    );
    assert_eq!(s.misses, 200, "an empty try_get is a miss");
    drop(burst);
    for _ in 0..50 {
        drop(pool.get().unwrap());
        clock.advance(INTERVAL);
        pool.reclaim();
    }
    let s = pool.stats();
    assert_eq!(s.created, 200, "the adopted objects served every get");
    assert!(s.destroyed >= 190, "{s:?}");
    assert!(s.reclaimed >= 180, "{s:?}");
    check_counts(&pool);
    drop(pool);
    assert_eq!(counts.dropped(), counts.made.load(Ordering::Relaxed));
}

#[test]
fn try_get_takes_what_is_idle_and_never_creates() {
    let counts = Counts::new();
    let (pool, _clock) = pool(&counts, 4);
    assert!(pool.try_get().is_none());
    drop(pool.get().unwrap());
    assert!(pool.try_get().is_some());
    let s = pool.stats();
    assert_eq!((s.created, s.empty_gets, s.misses, s.hits), (1, 1, 2, 1));
    // Idle in the depot only (this thread's cache handed back): found there.
    pool.trim_local();
    assert!(pool.try_get().is_some());
    assert_eq!(pool.stats().created, 1);
}

#[test]
fn adopt_at_max_live_hands_the_object_back() {
    let counts = Counts::new();
    let c = counts.clone();
    let make: Make = Box::new(move || c.make());
    let pool = Pool::builder(make)
        .max_live(2)
        .batch_size(1)
        .background(false)
        .build()
        .unwrap();
    let a = pool.get().unwrap();
    let b = pool.adopt(counts.make()).ok().unwrap();
    let refused = pool.adopt(counts.make());
    assert!(refused.is_err(), "a third object past max_live(2)");
    drop(refused); // the caller's to drop
    assert_eq!(pool.stats().adopted, 1);
    drop((a, b));
    check_counts(&pool);
    drop(pool);
    assert_eq!(counts.dropped(), counts.made.load(Ordering::Relaxed));
}

#[test]
fn raw_objects_stay_counted_until_turned_back() {
    let counts = Counts::new();
    let (pool, _clock) = pool(&counts, 4);
    let raw = pool.get().unwrap().into_raw();
    assert_eq!(pool.stats().live, 1);
    // SAFETY: lent by this pool, turned into a bare object once.
    let back = unsafe { Pooled::from_raw(&pool, raw) };
    drop(back);
    let s = pool.stats();
    assert_eq!((s.live, s.idle), (0, 1));
    // Detached through from_raw: the pool lets it go.
    let raw = pool.get().unwrap().into_raw();
    // SAFETY: as above.
    let item = unsafe { Pooled::from_raw(&pool, raw) }.detach();
    drop(item);
    let s = pool.stats();
    assert_eq!((s.live, s.idle, s.detached), (0, 0, 1));
    check_counts(&pool);
}

#[test]
fn max_idle_changes_at_run_time_and_bad_changes_are_refused() {
    let counts = Counts::new();
    let (pool, _clock) = pool(&counts, 4);
    assert_eq!(pool.max_idle(), tidepool::DEFAULT_MAX_IDLE);
    // 64 idle in the depot.
    let many: Vec<_> = (0..64).map(|_| pool.get().unwrap()).collect();
    drop(many);
    pool.trim_local();
    assert_eq!(pool.stats().idle_depot, 64);
    // Lowered under what it holds: the oldest above the cap go at once.
    let destroyed = pool.set_max_idle(16).unwrap();
    assert_eq!(destroyed, 48);
    assert_eq!(pool.stats().idle_depot, 16);
    assert_eq!(counts.dropped(), 48);
    // Additive, as QEMU's inc / dec.
    assert_eq!(pool.adjust_max_idle(1024).unwrap(), 0);
    assert_eq!(pool.max_idle(), 1040);
    assert_eq!(pool.adjust_max_idle(-1024).unwrap(), 0);
    assert_eq!(pool.max_idle(), 16);
    // Below a batch, below zero, past usize::MAX: refused, unchanged.
    for bad in [pool.set_max_idle(3), pool.adjust_max_idle(-17)] {
        let err = bad.unwrap_err();
        assert_eq!(err.field(), "max_idle", "{err}");
        assert_eq!(pool.max_idle(), 16);
    }
    pool.set_max_idle(usize::MAX - 8).unwrap();
    assert_eq!(
        pool.adjust_max_idle(isize::MAX).unwrap_err().field(),
        "max_idle"
    );
    assert_eq!(pool.max_idle(), usize::MAX - 8);
    pool.set_max_idle(16).unwrap();
    // A depot at its new cap refuses what comes past it.
    let many: Vec<_> = (0..64).map(|_| pool.get().unwrap()).collect();
    drop(many);
    pool.trim_local();
    assert!(pool.stats().idle_depot <= 16);
    check_counts(&pool);
}

#[test]
fn concurrent_adjustments_add_up() {
    let counts = Counts::new();
    let (pool, _clock) = pool(&counts, 4);
    let pool = Arc::new(pool);
    let base = pool.max_idle();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    pool.adjust_max_idle(if (i + t) % 2 == 0 { 7 } else { -5 })
                        .unwrap();
                    drop(pool.get().unwrap());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(pool.max_idle(), base + 4 * 250 * 2);
    check_counts(&pool);
}

#[test]
fn destroy_local_destroys_this_threads_cache_only() {
    let counts = Counts::new();
    let (pool, _clock) = pool(&counts, 4);
    let pool = Arc::new(pool);
    let objs: Vec<_> = (0..6).map(|_| pool.get().unwrap()).collect();
    drop(objs);
    let cached = pool.stats().idle_cached();
    assert!(cached > 0);
    let other = pool.clone();
    std::thread::spawn(move || drop(other.get_owned().unwrap()))
        .join()
        .unwrap();
    let before = pool.stats().destroyed;
    assert_eq!(pool.destroy_local() as u64, cached);
    let s = pool.stats();
    assert_eq!(s.destroyed - before, cached);
    assert_eq!(s.idle_cached(), 0);
    check_counts(&pool);
    // The thread may use the pool again.
    drop(pool.get().unwrap());
    check_counts(&pool);
}

#[test]
fn maps_per_object_derives_the_caps_from_the_map_count() {
    let err = Pool::builder(|| 0u64)
        .maps_per_object(0)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "maps_per_object");
    let pool = Pool::builder(|| 0u64).maps_per_object(2).build().unwrap();
    assert_eq!(pool.config().maps_per_object(), 2);
    #[cfg(target_os = "linux")]
    {
        let budget = tidepool::stack::MapBudget::from_os();
        assert_eq!(pool.config().max_live(), Some(budget.stacks()));
        assert!(pool.config().max_idle() <= budget.stacks());
        // Set explicitly: kept.
        let pool = Pool::builder(|| 0u64)
            .maps_per_object(2)
            .max_live(10)
            .build()
            .unwrap();
        assert_eq!(pool.config().max_live(), Some(10));
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    assert_eq!(pool.config().max_live(), None);
}
