//! The destroy queue: objects the pool decides to destroy go through it,
//! each exactly once; `drain`, a thread's exit and the pool's drop run at
//! most one chunk of it and leave the rest to the reclaimer thread (or the
//! next callers); a `get` at `max_live` flushes it before failing; counts
//! stay exact with `destroying` (`live + idle + destroying == existing`).

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::{Counting, CreateFailed, Ledger, Obj, INJECTED};
use tidepool::{Manage, Pool, Stats};

/// Generous bound on waiting for another thread: it only catches hangs.
const PATIENCE: Duration = Duration::from_secs(30);

/// A [`Counting`] manager that records which threads ran `destroy_batch`,
/// can block one `destroy_batch` until told, can make one panic (after
/// destroying everything), and records the ledger at its own drop.
struct Gated {
    inner: Counting,
    state: Arc<GateState>,
}

#[derive(Default)]
struct GateState {
    threads: Mutex<Vec<(ThreadId, usize)>>,
    block_next: AtomicBool,
    entered: Mutex<Option<mpsc::Sender<()>>>,
    release: Mutex<Option<mpsc::Receiver<()>>>,
    panic_next: AtomicBool,
    /// Objects destroyed when the manager was dropped (`u64::MAX` until).
    destroyed_at_drop: AtomicU64,
}

impl Gated {
    fn new() -> (Self, Arc<Ledger>, Arc<GateState>) {
        let (inner, ledger) = Counting::new();
        let state = Arc::new(GateState {
            destroyed_at_drop: AtomicU64::new(u64::MAX),
            ..GateState::default()
        });
        let m = Self {
            inner,
            state: Arc::clone(&state),
        };
        (m, ledger, state)
    }
}

impl GateState {
    /// Makes the next `destroy_batch` signal `entered` and wait for
    /// `release`.
    fn block_next(&self) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *self.entered.lock().unwrap() = Some(entered_tx);
        *self.release.lock().unwrap() = Some(release_rx);
        self.block_next.store(true, SeqCst);
        (entered_rx, release_tx)
    }

    fn destroyed_on(&self, thread: ThreadId) -> usize {
        let threads = self.threads.lock().unwrap();
        threads
            .iter()
            .filter(|(t, _)| *t == thread)
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        let destroyed = self.inner.ledger().counts().destroyed;
        self.state.destroyed_at_drop.store(destroyed, SeqCst);
    }
}

impl Manage for Gated {
    type Item = Obj;
    type Error = CreateFailed;

    fn create(&self) -> Result<Obj, CreateFailed> {
        self.inner.create()
    }

    fn destroy(&self, item: Obj) {
        let me = std::thread::current().id();
        self.state.threads.lock().unwrap().push((me, 1));
        self.inner.destroy(item)
    }

    fn destroy_batch(&self, items: Vec<Obj>) {
        let me = std::thread::current().id();
        self.state.threads.lock().unwrap().push((me, items.len()));
        if self.state.block_next.swap(false, SeqCst) {
            let entered = self.state.entered.lock().unwrap().take();
            let release = self.state.release.lock().unwrap().take();
            if let Some(tx) = entered {
                let _ = tx.send(());
            }
            if let Some(rx) = release {
                let _ = rx.recv_timeout(PATIENCE);
            }
        }
        for item in items {
            self.inner.destroy(item);
        }
        if self.state.panic_next.swap(false, SeqCst) {
            panic!("{INJECTED}: destroy_batch");
        }
    }
}

fn balanced(s: &Stats) {
    assert_eq!(s.live + s.idle + s.destroying, s.existing(), "{s:#?}");
}

/// Polls `f` until it returns true; false after [`PATIENCE`] (a hang).
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// Gives `pool` `n` idle objects in its depot (a helper thread's cache,
/// handed over when it exits).
fn fill<M: Manage>(pool: &Arc<Pool<M>>, n: usize) {
    let p = Arc::clone(pool);
    std::thread::spawn(move || drop((0..n).map(|_| p.get().unwrap()).collect::<Vec<_>>()))
        .join()
        .unwrap();
}

#[test]
fn every_object_is_destroyed_once_across_the_queue_under_contention() {
    let (m, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(m)
            .batch_size(4)
            .max_idle(8)
            .teardown_threads(1)
            .teardown_chunk(4)
            .build()
            .unwrap(),
    );
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for round in 0..50 {
                    let held: Vec<_> = (0..(8 + (i + round) % 17))
                        .map(|_| pool.get().unwrap())
                        .collect();
                    drop(held);
                    if round % 10 == 0 {
                        pool.drain();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    pool.drain_blocking();
    let s = pool.stats();
    assert_eq!((s.idle, s.destroying), (0, 0), "{s:#?}");
    assert_eq!(s.created, s.destroyed, "{s:#?}");
    ledger.assert_no_errors();
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn drain_runs_one_chunk_and_counts_the_rest_as_destroying() {
    let (m, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(m)
            .batch_size(4)
            .teardown_chunk(4)
            .background(false)
            .build()
            .unwrap(),
    );
    fill(&pool, 40);
    assert_eq!(pool.drain(), 40, "all of it taken");
    let s = pool.stats();
    assert_eq!(s.destroyed, 4, "one chunk of one batch here: {s:#?}");
    assert_eq!((s.idle, s.destroying), (0, 36), "{s:#?}");
    balanced(&s);
    // The next callers' slow paths help, a chunk each.
    drop(pool.get().unwrap());
    assert_eq!(pool.stats().destroying, 32);
    assert_eq!(
        pool.drain_blocking(),
        1,
        "the one object this thread cached"
    );
    let s = pool.stats();
    assert_eq!((s.destroying, s.destroyed), (0, 41), "{s:#?}");
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_get_at_max_live_flushes_the_queue_before_failing() {
    let (m, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(m)
            .batch_size(2)
            .max_live(8)
            .teardown_chunk(2)
            .background(false)
            .build()
            .unwrap(),
    );
    fill(&pool, 8);
    pool.drain();
    let s = pool.stats();
    assert_eq!(s.destroying, 6, "{s:#?}");
    assert_eq!(s.existing(), 6, "queued objects still hold their places");
    // Only queued objects stand between this get and the limit.
    let held: Vec<_> = (0..8).map(|_| pool.get().unwrap()).collect();
    let s = pool.stats();
    assert_eq!((s.destroying, s.live), (0, 8), "{s:#?}");
    assert!(matches!(
        pool.get().map(drop),
        Err(tidepool::Error::Exhausted { limit: 8 })
    ));
    drop(held);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn dropping_a_pool_with_a_full_queue_runs_one_chunk_and_the_reclaimer_the_rest() {
    let (m, ledger, state) = Gated::new();
    let pool = Arc::new(
        Pool::builder(m)
            .batch_size(4)
            .max_idle(1024)
            .teardown_chunk(8)
            .build()
            .unwrap(),
    );
    fill(&pool, 400);
    assert_eq!(pool.stats().idle, 400);
    let me = std::thread::current().id();
    drop(pool);
    let here = state.destroyed_on(me);
    assert!(
        (1..=8).contains(&here),
        "the dropping thread destroyed one chunk, not {here}"
    );
    assert!(
        eventually(|| ledger.counts().destroyed == 400),
        "the reclaimer never finished: {:?}",
        ledger.counts()
    );
    assert!(eventually(
        || state.destroyed_at_drop.load(SeqCst) != u64::MAX
    ));
    assert_eq!(
        state.destroyed_at_drop.load(SeqCst),
        400,
        "the manager is dropped after its last destroy"
    );
    ledger.assert_all_accounted();
}

#[test]
fn a_panicking_destroy_batch_in_a_handed_off_teardown_is_contained() {
    let (m, ledger, state) = Gated::new();
    let pool = Arc::new(
        Pool::builder(m)
            .batch_size(4)
            .teardown_chunk(4)
            .build()
            .unwrap(),
    );
    fill(&pool, 40);
    let destroyed_before = ledger.counts().destroyed;
    state.panic_next.store(true, SeqCst);
    drop(pool); // the first chunk panics here: contained
    assert!(
        eventually(|| ledger.counts().destroyed == destroyed_before + 40),
        "{:?}",
        ledger.counts()
    );
    assert!(eventually(
        || state.destroyed_at_drop.load(SeqCst) != u64::MAX
    ));
    assert!(tidepool::reclaim::status().running);
    ledger.assert_all_accounted();
}

#[test]
fn a_thread_exiting_mid_teardown_does_not_wait_and_its_objects_are_destroyed_once() {
    let (m, ledger, state) = Gated::new();
    let pool = Arc::new(
        Pool::builder(m)
            .batch_size(2)
            .max_idle(2)
            .teardown_threads(1)
            .build()
            .unwrap(),
    );
    fill(&pool, 2); // the depot: one batch of two
    let (entered, release) = state.block_next();
    // A drains; its one chunk blocks inside `destroy_batch`, holding the
    // only permit.
    let drainer = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || pool.drain())
    };
    entered
        .recv_timeout(PATIENCE)
        .expect("the drain reached destroy_batch");
    // B exits with two batches: the depot takes one, the other is refused
    // and queued; B finds no permit and goes.
    let (exited_tx, exited_rx) = mpsc::channel();
    let exiter = {
        let pool = Arc::clone(&pool);
        std::thread::spawn(move || {
            drop((0..4).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
            let me = std::thread::current().id();
            exited_tx.send(me).unwrap();
        })
    };
    let b = exited_rx.recv_timeout(PATIENCE).expect("B ran");
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || done_tx.send(exiter.join().is_ok()).unwrap());
    assert_eq!(
        done_rx.recv_timeout(PATIENCE),
        Ok(true),
        "the exiting thread waited for the blocked teardown"
    );
    assert_eq!(state.destroyed_on(b), 0, "B destroyed nothing itself");
    let s = pool.stats();
    assert_eq!(s.destroying, 4, "A's chunk and B's refused batch: {s:#?}");
    release.send(()).unwrap();
    assert_eq!(drainer.join().unwrap(), 2);
    // A ran its one chunk; the reclaimer (woken for the rest) or A's second
    // look at the queue destroys B's batch.
    assert!(
        eventually(|| pool.stats().destroying == 0),
        "{:#?}",
        pool.stats()
    );
    let s = pool.stats();
    assert_eq!((s.destroyed, s.idle), (4, 2), "{s:#?}");
    balanced(&s);
    let ids: HashSet<u64> = ledger.destroyed_ids();
    assert_eq!(ids.len(), 4);
    drop(pool);
    ledger.assert_all_accounted();
}

/// A [`Counting`] manager whose `destroy_batch` takes a little while and
/// records how many run at once, and the most ever.
struct Overlap {
    inner: Counting,
    inside: Arc<AtomicU64>,
    most: Arc<AtomicU64>,
}

impl Manage for Overlap {
    type Item = Obj;
    type Error = CreateFailed;

    fn create(&self) -> Result<Obj, CreateFailed> {
        self.inner.create()
    }

    fn destroy(&self, item: Obj) {
        self.destroy_batch(vec![item]);
    }

    fn destroy_batch(&self, items: Vec<Obj>) {
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        // Long enough for the other threads to pile up behind the bound.
        std::thread::sleep(Duration::from_micros(300));
        for item in items {
            self.inner.destroy(item);
        }
        self.inside.fetch_sub(1, SeqCst);
    }
}

/// Many threads tearing down at once (`drain_blocking`, `drain`, thread
/// exits) never run more than `min(ncpus, teardown_threads)` teardown
/// chunks at once; the ones that must wait (`drain_blocking`) sleep in
/// line and all finish (in a child process: a lost wake-up would hang),
/// and every object is destroyed exactly once.
#[test]
fn concurrent_teardown_stays_within_the_bound_and_every_waiter_finishes() {
    common::child::run(
        "concurrent_teardown_stays_within_the_bound_and_every_waiter_finishes",
        || {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let configured = 2;
            let bound = configured.min(cpus) as u64;
            let (inner, ledger) = Counting::new();
            let most = Arc::new(AtomicU64::new(0));
            let m = Overlap {
                inner,
                inside: Arc::new(AtomicU64::new(0)),
                most: Arc::clone(&most),
            };
            let pool = Arc::new(
                Pool::builder(m)
                    .batch_size(4)
                    .max_idle(1 << 16)
                    .teardown_threads(configured)
                    .teardown_chunk(4)
                    .build()
                    .unwrap(),
            );
            let workers: Vec<_> = (0..8)
                .map(|i| {
                    let pool = Arc::clone(&pool);
                    std::thread::spawn(move || {
                        for round in 0..20 {
                            fill(&pool, 16 + (i + round) % 9);
                            if (i + round) % 3 == 0 {
                                pool.drain();
                            } else {
                                pool.drain_blocking();
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            pool.drain_blocking();
            // The reclaimer may still be finishing a chunk it took.
            assert!(eventually(|| pool.stats().destroying == 0));
            let s = pool.stats();
            assert_eq!((s.idle, s.destroying), (0, 0), "{s:#?}");
            assert_eq!(s.created, s.destroyed, "{s:#?}");
            let most = most.load(SeqCst);
            eprintln!("at most {most} teardown chunks at once (bound {bound})");
            assert!(most <= bound, "{most} chunks at once, bound {bound}");
            assert!(most >= 1);
            ledger.assert_no_errors();
            drop(pool);
            ledger.assert_all_accounted();
        },
    );
}

/// A `get` at `max_live` whose places are held by objects another runner
/// is destroying (the queue itself empty) sleeps until that chunk is done,
/// then gets its object.
#[test]
fn a_get_at_max_live_waits_for_objects_another_thread_is_destroying() {
    common::child::run(
        "a_get_at_max_live_waits_for_objects_another_thread_is_destroying",
        || {
            let (m, ledger, state) = Gated::new();
            let pool = Arc::new(
                Pool::builder(m)
                    .batch_size(4)
                    .max_live(4)
                    .teardown_threads(1)
                    .teardown_chunk(4)
                    .background(false)
                    .build()
                    .unwrap(),
            );
            fill(&pool, 4);
            let (entered, release) = state.block_next();
            let drainer = {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || pool.drain())
            };
            entered
                .recv_timeout(PATIENCE)
                .expect("the drain's chunk started");
            let s = pool.stats();
            assert_eq!((s.idle, s.destroying), (0, 4), "all four in flight: {s:#?}");
            let getter = {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || pool.get().map(drop).is_ok())
            };
            // The getter cannot have its object before the chunk is done.
            std::thread::sleep(Duration::from_millis(50));
            assert!(!getter.is_finished(), "got an object past max_live");
            release.send(()).unwrap();
            assert!(
                getter.join().unwrap(),
                "the get succeeded once places came back"
            );
            assert_eq!(drainer.join().unwrap(), 4);
            drop(pool);
            ledger.assert_all_accounted();
        },
    );
}

/// A [`Counting`] manager whose `destroy_batch` calls `drain_blocking` on
/// its own pool (once: not from inside that call).
struct DrainsItsPool {
    inner: Counting,
    me: Arc<std::sync::OnceLock<std::sync::Weak<Pool<DrainsItsPool>>>>,
    inside: Arc<AtomicBool>,
    reentered: Arc<AtomicU64>,
}

impl Manage for DrainsItsPool {
    type Item = Obj;
    type Error = CreateFailed;

    fn create(&self) -> Result<Obj, CreateFailed> {
        self.inner.create()
    }

    fn destroy(&self, item: Obj) {
        self.destroy_batch(vec![item]);
    }

    fn destroy_batch(&self, items: Vec<Obj>) {
        if !self.inside.swap(true, SeqCst) {
            if let Some(pool) = self.me.get().and_then(std::sync::Weak::upgrade) {
                self.reentered.fetch_add(1, SeqCst);
                pool.drain_blocking();
            }
            self.inside.store(false, SeqCst);
        }
        for item in items {
            self.inner.destroy(item);
        }
    }
}

/// A `destroy_batch` that calls `drain_blocking` on its own pool runs while
/// its thread holds a teardown permit; with one permit, the inner call must
/// not wait in line for the permit its own thread holds (a hang).
#[test]
fn a_destroy_batch_that_drains_its_own_pool_does_not_wait_for_its_own_permit() {
    common::child::run(
        "a_destroy_batch_that_drains_its_own_pool_does_not_wait_for_its_own_permit",
        || {
            let (inner, ledger) = Counting::new();
            let me = Arc::new(std::sync::OnceLock::new());
            let reentered = Arc::new(AtomicU64::new(0));
            let pool = Arc::new(
                Pool::builder(DrainsItsPool {
                    inner,
                    me: Arc::clone(&me),
                    inside: Arc::new(AtomicBool::new(false)),
                    reentered: Arc::clone(&reentered),
                })
                .batch_size(4)
                .max_idle(1 << 10)
                .teardown_threads(1)
                .teardown_chunk(4)
                .build()
                .unwrap(),
            );
            me.set(Arc::downgrade(&pool)).ok().unwrap();
            fill(&pool, 64);
            // One chunk here, the rest queued: the callback's drain finds
            // the queue full while its thread holds the only permit.
            pool.drain();
            pool.drain_blocking();
            assert!(reentered.load(SeqCst) >= 1, "the callback drained its pool");
            assert!(eventually(|| pool.stats().destroying == 0));
            let s = pool.stats();
            assert_eq!((s.idle, s.destroying), (0, 0), "{s:#?}");
            assert_eq!(s.created, s.destroyed, "{s:#?}");
            ledger.assert_no_errors();
            drop(pool);
            ledger.assert_all_accounted();
        },
    );
}
