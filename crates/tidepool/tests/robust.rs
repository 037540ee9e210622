//! Never hang, never die, never abort: the process-wide reclaimer against
//! managers that misbehave inside the callbacks it runs, thread-local
//! teardown, `fork`, and a reclaimer asleep on a long interval.
//!
//! Every case runs in a child process of its own (`common::child`): the
//! reclaimer is process-wide, so a case that kills or blocks it would
//! otherwise decide the cases after it, and a hang or an abort must fail one
//! case, not take the suite down. Nothing asserts on elapsed time: cases wait
//! for a condition up to [`PATIENCE`] and then assert that it held.
#![cfg(unix)]

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::child::{self, wait_until};
use common::{Counting, Ledger};
use tidepool::pressure::{self, Level};
use tidepool::reclaim::{Clock, SystemClock};
use tidepool::{Manage, Pool, Stats};

/// How long a case waits for the reclaimer to do something before failing.
const PATIENCE: Duration = Duration::from_secs(20);

/// A short reclaim interval: the reclaimer destroys idle objects within a
/// few of these.
const SHORT: Duration = Duration::from_millis(20);

/// Waits for `cond` on `pool`'s stats; fails with `what` and the last stats.
fn wait_stats<M: Manage>(what: &str, pool: &Pool<M>, cond: impl Fn(&Stats) -> bool) -> Stats {
    let (s, ok) = wait_until(PATIENCE, || pool.stats(), cond);
    assert!(
        ok,
        "gave up after {PATIENCE:?} waiting for {what}; last seen: {s:#?}"
    );
    s
}

/// `live + idle == created - destroyed - detached`: exact with no thread
/// inside the pool.
fn assert_balanced(s: &Stats) {
    assert_eq!(s.live + s.idle, s.existing(), "{s:#?}");
}

/// Gives `pool` `n` idle objects: most in the depot (a helper thread's cache,
/// handed over when it exits), some in this thread's cache.
fn fill<M: Manage>(pool: &Arc<Pool<M>>, n: usize) {
    let p = Arc::clone(pool);
    std::thread::spawn(move || drop((0..n).map(|_| p.get().unwrap()).collect::<Vec<_>>()))
        .join()
        .unwrap();
    drop((0..n / 2).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
}

/// After some misbehaviour: the reclaimer still looks after pools. A new
/// background pool is built (registration must not block), its idle objects
/// are reclaimed on its interval, and `notify` returns and is applied.
fn assert_reclaimer_serves_new_pools() {
    let (manager, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(manager)
            .batch_size(2)
            .reclaim_interval(SHORT)
            .build()
            .unwrap(),
    );
    fill(&pool, 10);
    let s = wait_stats("a new pool to be reclaimed", &pool, |s| {
        s.idle == 0 && s.destroying == 0 && s.reclaim_passes > 0
    });
    assert_eq!((s.created, s.destroyed), (10, 10), "{s:#?}");
    let (manager, held_ledger) = Counting::new();
    let held = Arc::new(
        Pool::builder(manager)
            .batch_size(2)
            .reclaim_interval(Duration::from_secs(3600))
            .build()
            .unwrap(),
    );
    fill(&held, 10);
    pressure::notify(Level::Critical);
    wait_stats("notify(Critical) to drain a pool", &held, |s| {
        s.pressure_critical >= 1 && s.idle == 0 && s.destroying == 0
    });
    drop(pool);
    ledger.assert_all_accounted();
    drop(held);
    held_ledger.assert_all_accounted();
}

/// Code a test hands to a [`Hooked`] manager.
type Hook = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A [`Counting`] manager that runs a hook (once) at the end of a `destroy`:
/// user code doing pool things inside a callback the reclaimer runs.
struct Hooked {
    inner: Counting,
    hook: Hook,
}

impl Hooked {
    fn new() -> (Self, Arc<Ledger>, Hook) {
        let (inner, ledger) = Counting::new();
        let hook = Arc::new(Mutex::new(None));
        let me = Self {
            inner,
            hook: Arc::clone(&hook),
        };
        (me, ledger, hook)
    }
}

impl Manage for Hooked {
    type Item = common::Obj;
    type Error = common::CreateFailed;

    fn create(&self) -> Result<common::Obj, common::CreateFailed> {
        self.inner.create()
    }

    fn recycle(&self, item: &mut common::Obj) -> bool {
        self.inner.recycle(item)
    }

    fn purge(&self, item: &mut common::Obj) {
        self.inner.purge(item)
    }

    fn destroy(&self, item: common::Obj) {
        self.inner.destroy(item);
        let hook = self.hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
    }
}

fn hooked_pool() -> (Arc<Pool<Hooked>>, Arc<Ledger>, Hook) {
    let (manager, ledger, hook) = Hooked::new();
    let pool = Pool::builder(manager)
        .batch_size(2)
        .reclaim_interval(SHORT)
        .build()
        .unwrap();
    (Arc::new(pool), ledger, hook)
}

// === defect 1: a callback run by the reclaimer re-enters the registry ===

/// The reclaimer destroys an idle object, and that `destroy` drops the last
/// handle of its own pool. Before the fix the reclaimer deadlocked on the
/// pool's handle, and every later registration blocked forever.
#[test]
fn reclaimer_survives_a_destroy_that_drops_its_own_pool() {
    child::run(
        "reclaimer_survives_a_destroy_that_drops_its_own_pool",
        || {
            let (pool, ledger, hook) = hooked_pool();
            fill(&pool, 12);
            let last = Arc::clone(&pool);
            *hook.lock().unwrap() = Some(Box::new(move || drop(last)));
            drop(pool);
            // The pool's objects: destroyed by the reclaimer's pass, the rest by
            // the pool's drop (wherever that ran).
            let (c, ok) = wait_until(PATIENCE, || ledger.counts(), |c| c.destroyed == c.created);
            assert!(
                ok,
                "the dropped pool's objects were not all destroyed: {c:?}"
            );
            ledger.assert_all_accounted();
            assert!(hook.lock().unwrap().is_none(), "the hook ran");
            assert_reclaimer_serves_new_pools();
        },
    );
}

/// A `destroy` run by the reclaimer builds a new background pool (which
/// registers with the reclaimer). Before the fix this deadlocked the
/// reclaimer and, with it, every later registration and `notify`.
#[test]
fn reclaimer_survives_a_destroy_that_builds_a_background_pool() {
    child::run(
        "reclaimer_survives_a_destroy_that_builds_a_background_pool",
        || {
            type Zeros = Pool<fn() -> u8>;
            static BUILT: Mutex<Vec<Zeros>> = Mutex::new(Vec::new());
            fn zero() -> u8 {
                0
            }
            let (pool, ledger, hook) = hooked_pool();
            *hook.lock().unwrap() = Some(Box::new(|| {
                let built = Pool::new(zero as fn() -> u8);
                assert!(built.config().background());
                BUILT.lock().unwrap().push(built);
            }));
            fill(&pool, 12);
            let (_, ok) = wait_until(PATIENCE, || BUILT.lock().unwrap().len(), |&n| n == 1);
            assert!(ok, "the reclaimer never ran the hook");
            wait_stats("the pool to be reclaimed", &pool, |s| {
                s.idle == 0 && s.destroying == 0
            });
            assert_reclaimer_serves_new_pools();
            drop(pool);
            ledger.assert_all_accounted();
        },
    );
}

// === defect 2: a panicking callback kills the reclaimer ===

/// `destroy` panics during a background pass. Before the fix the panic
/// unwound the reclaimer thread: no pool in the process was reclaimed again.
#[test]
fn reclaimer_survives_a_panicking_destroy() {
    child::run("reclaimer_survives_a_panicking_destroy", || {
        let (manager, ledger) = Counting::new();
        let pool = Arc::new(
            Pool::builder(manager)
                .batch_size(2)
                .reclaim_interval(SHORT)
                .build()
                .unwrap(),
        );
        fill(&pool, 12);
        ledger.panic_destroy.arm(2);
        // The pass counts a panic when it settles, after its destroys: wait
        // for both (a snapshot between them shows every object destroyed
        // and no panic yet).
        let s = wait_stats("the pool to be reclaimed despite panics", &pool, |s| {
            s.idle == 0 && s.destroying == 0 && s.callback_panics > 0
        });
        assert_eq!((s.created, s.destroyed), (12, 12), "{s:#?}");
        assert_balanced(&s);
        // Counted per callback call: both panics fall in one
        // `destroy_batch` of two when the pass tears down a whole batch.
        assert!(
            (1..=2).contains(&s.callback_panics),
            "counted, contained: {s:#?}"
        );
        let status = tidepool::reclaim::status();
        assert!(status.running, "{status:?}");
        assert_eq!(status.restarts, 0, "never died: {status:?}");
        assert_reclaimer_serves_new_pools();
        drop(pool);
        ledger.assert_all_accounted();
    });
}

/// `purge` panics during a background pass: the half-purged object is
/// destroyed, the rest go on, and the reclaimer lives.
#[test]
fn reclaimer_survives_a_panicking_purge() {
    child::run("reclaimer_survives_a_panicking_purge", || {
        let (manager, ledger) = Counting::new();
        let pool = Arc::new(
            Pool::builder(manager)
                .batch_size(2)
                .reclaim_interval(SHORT)
                .build()
                .unwrap(),
        );
        fill(&pool, 12);
        ledger.panic_purge.arm(1);
        // As above: the panic is counted when its pass settles.
        let s = wait_stats("the pool to be reclaimed despite panics", &pool, |s| {
            s.idle == 0 && s.destroying == 0 && s.callback_panics > 0
        });
        assert_eq!((s.created, s.destroyed), (12, 12), "{s:#?}");
        assert_eq!(s.callback_panics, 1, "{s:#?}");
        assert!(ledger.counts().purged >= 1);
        assert!(tidepool::reclaim::status().running);
        assert_reclaimer_serves_new_pools();
        drop(pool);
        ledger.assert_all_accounted();
    });
}

// === defect 4: a pool dropped in a thread-local destructor ===

thread_local! {
    static LAST_OWNER: RefCell<Option<Arc<Pool<Counting>>>> = const { RefCell::new(None) };
}

/// A thread-local holds the last handle of a pool whose `destroy` panics; the
/// thread exits. Before the fix the panic left the pool's drop inside the
/// thread-local destructor and the process aborted (exit 134).
#[test]
fn a_panicking_destroy_in_a_thread_local_destructor_does_not_abort() {
    child::run(
        "a_panicking_destroy_in_a_thread_local_destructor_does_not_abort",
        || {
            let (manager, ledger) = Counting::new();
            let pool = Pool::builder(manager)
                .batch_size(2)
                .max_idle(4)
                .build()
                .unwrap();
            let l = Arc::clone(&ledger);
            std::thread::spawn(move || {
                let pool = Arc::new(pool);
                drop((0..12).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
                l.panic_destroy.always();
                LAST_OWNER.with(|cell| *cell.borrow_mut() = Some(pool));
            })
            .join()
            .expect("the thread itself does not panic");
            ledger.panic_destroy.disarm();
            ledger.assert_all_accounted();
            assert_reclaimer_serves_new_pools();
        },
    );
}

// === defect 9: a short interval behind a long one ===

/// A clock that counts the reads made by the reclaimer thread: each one is
/// a sign that the reclaimer looked at the pool.
#[derive(Default)]
struct WatchedClock {
    reclaimer_reads: AtomicU64,
}

impl Clock for WatchedClock {
    fn now(&self) -> Duration {
        if std::thread::current().name() == Some("tidepool-reclaim") {
            self.reclaimer_reads.fetch_add(1, SeqCst);
        }
        SystemClock.now()
    }
}

/// Waits until `count` stops changing (unchanged for 20 looks, 50 ms
/// apart): the reclaimer has gone back to sleep. Not a timing assertion: a
/// wrong guess only makes a case weaker, never fail.
fn settle(count: impl Fn() -> u64) -> u64 {
    let mut last = count();
    let mut stable = 0;
    while stable < 20 {
        std::thread::sleep(Duration::from_millis(50));
        let now = count();
        stable = if now == last { stable + 1 } else { 0 };
        last = now;
    }
    last
}

/// The reclaimer sleeps on a pool whose interval is an hour; a pool with a
/// 50 ms interval then gains its first idle objects. Before the fix the
/// reclaimer only woke for a new object when it had no deadline at all, so
/// the short pool waited for the hour.
#[test]
fn a_short_interval_is_not_stuck_behind_a_long_one() {
    child::run("a_short_interval_is_not_stuck_behind_a_long_one", || {
        let long_clock = Arc::new(WatchedClock::default());
        let (manager, long_ledger) = Counting::new();
        let long = Arc::new(
            Pool::builder(manager)
                .batch_size(2)
                .reclaim_interval(Duration::from_secs(3600))
                .clock(long_clock.clone())
                .build()
                .unwrap(),
        );
        fill(&long, 10);
        // The long pool armed itself with its next pass an hour away: the
        // reclaimer ran a round for it and sleeps on that deadline.
        let rounds = || tidepool::reclaim::status().rounds;
        let (_, ok) = wait_until(PATIENCE, rounds, |&n| n > 0);
        assert!(ok, "the reclaimer never ran");
        settle(rounds);

        let (manager, short_ledger) = Counting::new();
        let short = Arc::new(
            Pool::builder(manager)
                .batch_size(2)
                .reclaim_interval(Duration::from_millis(50))
                .build()
                .unwrap(),
        );
        // Registering an empty pool gives the reclaimer nothing to do: it
        // still sleeps on the long pool's hour.
        settle(rounds);

        fill(&short, 10);
        let s = wait_stats(
            "the short pool to be reclaimed on its interval",
            &short,
            |s| s.idle == 0 && s.destroying == 0,
        );
        assert!(s.reclaim_passes >= 2, "{s:#?}");
        assert_eq!(long.stats().destroyed, 0, "the long pool keeps its objects");
        drop(short);
        short_ledger.assert_all_accounted();
        drop(long);
        long_ledger.assert_all_accounted();
    });
}

// === defect 6: fork ===

#[cfg(unix)]
mod fork {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    use super::*;

    fn short_pool() -> (Arc<Pool<Counting>>, Arc<Ledger>) {
        let (manager, ledger) = Counting::new();
        let pool = Pool::builder(manager)
            .batch_size(2)
            .reclaim_interval(Duration::from_millis(100))
            .build()
            .unwrap();
        (Arc::new(pool), ledger)
    }

    /// In a forked child, a pool inherited from the parent and a new one are
    /// used and reclaimed on their interval, and `notify` reaches them; the
    /// parent's reclaimer is not woken by anything the child does. Before
    /// the fix the child had no reclaimer (the registry said it had one) and
    /// shared the parent's wake-up descriptor.
    #[test]
    fn a_forked_child_reclaims_and_the_parent_is_not_woken() {
        child::run(
            "fork::a_forked_child_reclaims_and_the_parent_is_not_woken",
            || {
                // The parent's quiet pool: a long interval, idle objects, and a
                // clock that counts the reclaimer's visits.
                let quiet_clock = Arc::new(WatchedClock::default());
                let (manager, quiet_ledger) = Counting::new();
                let quiet = Arc::new(
                    Pool::builder(manager)
                        .batch_size(2)
                        .reclaim_interval(Duration::from_secs(3600))
                        .clock(quiet_clock.clone())
                        .build()
                        .unwrap(),
                );
                fill(&quiet, 6);
                // Inherited by the child.
                let (inherited, inherited_ledger) = short_pool();
                fill(&inherited, 10);

                let (mut go_tx, mut go_rx) = UnixStream::pair().unwrap();
                let forked = child::fork(|| {
                    let mut go = [0u8];
                    go_rx.read_exact(&mut go).unwrap();
                    // The inherited pool works, and is reclaimed on its interval.
                    drop((0..4).map(|_| inherited.get().unwrap()).collect::<Vec<_>>());
                    let s = wait_stats("the inherited pool to be reclaimed", &inherited, |s| {
                        s.idle == 0 && s.destroying == 0
                    });
                    assert_eq!(s.destroyed, s.created, "{s:#?}");
                    // A new pool: the same.
                    let (new, new_ledger) = short_pool();
                    fill(&new, 10);
                    wait_stats("a new pool to be reclaimed", &new, |s| {
                        s.idle == 0 && s.destroying == 0
                    });
                    // notify reaches the child's pools.
                    let (manager, held_ledger) = Counting::new();
                    let held = Arc::new(
                        Pool::builder(manager)
                            .batch_size(2)
                            .reclaim_interval(Duration::from_secs(3600))
                            .build()
                            .unwrap(),
                    );
                    fill(&held, 10);
                    for _ in 0..3 {
                        pressure::notify(Level::Critical);
                    }
                    wait_stats("notify(Critical) to reach the child's pool", &held, |s| {
                        s.pressure_critical >= 1 && s.idle == 0 && s.destroying == 0
                    });
                    drop(new);
                    new_ledger.assert_all_accounted();
                    drop(held);
                    held_ledger.assert_all_accounted();
                });
                // Meanwhile, in the parent: drop the short pool (the child has its
                // own copy), let the reclaimer settle on the quiet pool's hour,
                // then let the child go.
                drop(inherited);
                inherited_ledger.assert_all_accounted();
                let reads = || quiet_clock.reclaimer_reads.load(SeqCst);
                let last = settle(reads);
                let rounds = tidepool::reclaim::status().rounds;
                go_tx.write_all(&[1]).unwrap();
                let waited = forked.wait(Duration::from_secs(50));
                // Not a timing assertion: a wake-up the child caused near its
                // end gets a moment to show before the count is read.
                std::thread::sleep(Duration::from_millis(100));
                assert_eq!(
                    reads(),
                    last,
                    "the parent's reclaimer was woken while the child ran"
                );
                assert_eq!(
                    tidepool::reclaim::status().rounds,
                    rounds,
                    "the parent's reclaimer ran a round while the child ran"
                );
                assert_eq!(waited, Ok(()));
                assert_eq!(tidepool::reclaim::status().restarts, 0);
                assert_eq!(quiet.stats().destroyed, 0);
                drop(quiet);
                quiet_ledger.assert_all_accounted();
            },
        );
    }

    /// A pressure source whose `name` blocks until told: `watch` is then
    /// inside the registry while the main thread forks.
    struct Stalling {
        entered: mpsc::Sender<()>,
        release: Mutex<mpsc::Receiver<()>>,
        rx: UnixStream,
    }

    impl pressure::Source for Stalling {
        fn name(&self) -> String {
            let _ = self.entered.send(());
            let _ = self.release.lock().unwrap().recv();
            "stalling test source".to_owned()
        }

        fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            use std::os::fd::AsFd;
            self.rx.as_fd()
        }

        fn interest(&self) -> pressure::Interest {
            pressure::Interest::Readable
        }

        fn on_ready(&mut self) -> std::io::Result<Option<Level>> {
            Ok(None)
        }
    }

    /// Another thread is inside a registry call at the moment of `fork`.
    /// Before the fix the child inherited the registry locked by a thread it
    /// does not have, and its first `notify` hung forever.
    #[test]
    fn fork_while_another_thread_is_in_the_registry() {
        child::run("fork::fork_while_another_thread_is_in_the_registry", || {
            let (pool, ledger) = short_pool();
            fill(&pool, 4);
            let (entered_tx, entered) = mpsc::channel();
            let (release, release_rx) = mpsc::channel();
            let (_keep, rx) = UnixStream::pair().unwrap();
            let source = Stalling {
                entered: entered_tx,
                release: Mutex::new(release_rx),
                rx,
            };
            let watcher = std::thread::spawn(move || pressure::watch(Box::new(source)));
            entered.recv().unwrap();
            let result = child::fork_and_wait(Duration::from_secs(20), || {
                pressure::notify(Level::Medium);
                let (new, new_ledger) = short_pool();
                fill(&new, 6);
                wait_stats("a new pool to be reclaimed", &new, |s| {
                    s.idle == 0 && s.destroying == 0
                });
                drop(new);
                new_ledger.assert_all_accounted();
            });
            release.send(()).unwrap();
            watcher.join().unwrap();
            assert_eq!(result, Ok(()));
            drop(pool);
            ledger.assert_all_accounted();
        });
    }

    /// Other threads are waiting for the locks tidepool holds across a
    /// fork at the moment of it: one asks for the reclaimer's status in a
    /// loop (the registry's lock), and the reclaimer drains the pool the
    /// test refills (the fork gate, the pool's locks, its destroy queue).
    /// Each child uses the pool (which restarts its reclaimer), starts a
    /// thread that uses it (a new thread id), and forks a grandchild that
    /// uses it too (the gate, taken for writing in the child). Before the
    /// fix the handlers' locks were parking_lot's, whose unlock in the child
    /// handed a contended lock to a waiter whose thread the child does not
    /// have: the lock stayed held, and the child's first `get` that reached
    /// the registry hung forever; and the reclaimer took its pools' destroy
    /// queues outside the gate, so a child could inherit one locked.
    ///
    /// No thread of the test starts or exits around a fork: Rust's standard
    /// library takes a lock of its own there, which a child inherits held,
    /// and that child can start no thread (`reclaim/fork.rs`).
    #[test]
    fn fork_while_other_threads_wait_for_the_handlers_locks() {
        child::run(
            "fork::fork_while_other_threads_wait_for_the_handlers_locks",
            || {
                // Counted with atomics alone: the test ledger's lock, taken
                // in `create` and `destroy`, could itself be held across the
                // fork by the reclaimer.
                let tally = Tally::default();
                let pool = Arc::new(
                    Pool::builder(tally.clone())
                        .batch_size(2)
                        .reclaim_interval(Duration::from_millis(100))
                        .build()
                        .unwrap(),
                );
                let stop = Arc::new(AtomicBool::new(false));
                let asker = {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        while !stop.load(SeqCst) {
                            std::hint::black_box(tidepool::reclaim::status());
                        }
                    })
                };
                let use_pool = |pool: &Pool<Tally>| {
                    let held: Vec<_> = (0..16).map(|_| pool.get().unwrap()).collect();
                    assert_eq!(pool.stats().live, 16);
                    drop(held);
                    assert_eq!(pool.stats().live, 0);
                };
                let mut failures = Vec::new();
                for round in 0..200 {
                    fill(&pool, 8);
                    pressure::notify(Level::Critical);
                    let result = child::fork_and_wait(Duration::from_secs(20), || {
                        use_pool(&pool);
                        assert!(tidepool::reclaim::status().running);
                        std::thread::scope(|s| s.spawn(|| use_pool(&pool)).join().unwrap());
                        let grandchild =
                            child::fork_and_wait(Duration::from_secs(10), || use_pool(&pool));
                        assert_eq!(grandchild, Ok(()));
                    });
                    if let Err(e) = result {
                        failures.push(format!("fork {round}: {e}"));
                        break;
                    }
                }
                stop.store(true, SeqCst);
                asker.join().unwrap();
                assert_eq!(failures, Vec::<String>::new());
                drop(pool);
                let (made, destroyed) = (tally.0.load(SeqCst), tally.1.load(SeqCst));
                assert!(made > 0);
                assert_eq!(destroyed, made, "every object destroyed exactly once");
            },
        );
    }

    /// A manager that counts what it made and destroyed with atomics only.
    #[derive(Clone, Default)]
    struct Tally(Arc<AtomicU64>, Arc<AtomicU64>);

    impl Manage for Tally {
        type Item = Box<u64>;
        type Error = std::convert::Infallible;

        fn create(&self) -> Result<Box<u64>, Self::Error> {
            Ok(Box::new(self.0.fetch_add(1, SeqCst)))
        }

        fn destroy(&self, _: Box<u64>) {
            self.1.fetch_add(1, SeqCst);
        }
    }
}

// === other user code the reclaimer runs ===

/// A clock that panics once told to: on the reclaimer thread only
/// (`reclaimer_only`), or on whichever thread reads it.
#[derive(Default)]
struct PanickingClock {
    armed: std::sync::atomic::AtomicBool,
    reclaimer_only: bool,
}

impl Clock for PanickingClock {
    fn now(&self) -> Duration {
        let here =
            !self.reclaimer_only || std::thread::current().name() == Some("tidepool-reclaim");
        if here && self.armed.load(SeqCst) {
            panic!("{}: clock", common::INJECTED);
        }
        SystemClock.now()
    }
}

/// A user clock that panics on the reclaimer thread ends only that pool's
/// tick: counted in the reclaimer's status, and other pools are served.
#[test]
fn a_panicking_clock_does_not_stop_the_reclaimer() {
    child::run("a_panicking_clock_does_not_stop_the_reclaimer", || {
        common::quiet_injected_panics();
        let clock = Arc::new(PanickingClock {
            reclaimer_only: true,
            ..PanickingClock::default()
        });
        let (manager, ledger) = Counting::new();
        let pool = Arc::new(
            Pool::builder(manager)
                .batch_size(2)
                .reclaim_interval(SHORT)
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        fill(&pool, 6);
        clock.armed.store(true, SeqCst);
        let (status, ok) = wait_until(PATIENCE, tidepool::reclaim::status, |s| s.panics >= 1);
        assert!(ok, "the clock's panic was not counted: {status:?}");
        assert!(status.running, "{status:?}");
        assert_reclaimer_serves_new_pools();
        clock.armed.store(false, SeqCst);
        drop(pool);
        ledger.assert_all_accounted();
    });
}

/// A user clock that panics in a caller's slow path reaches the caller
/// (`Clock`'s docs), and the object that caller had in hand is destroyed,
/// not dropped: every object destroyed exactly once, counts exact. The
/// slow get reads the clock after it has made its object (the lazy pass,
/// and every 64 depot exchanges the end of a traffic window), and so does
/// a get served at `max_live` by a waiter's hand-off.
#[test]
fn a_clock_panicking_in_a_slow_get_loses_no_object() {
    child::run("a_clock_panicking_in_a_slow_get_loses_no_object", || {
        common::quiet_injected_panics();
        let clock = Arc::new(PanickingClock::default());
        let (manager, ledger) = Counting::new();
        let pool = Pool::builder(manager)
            .batch_size(2)
            .background(false)
            .clock(clock.clone())
            .build()
            .unwrap();
        // Refills from the depot: 64 of them end a traffic window, at the
        // end of the get that makes the 64th.
        let mut panics = 0;
        for round in 0..200 {
            let guards: Vec<_> = (0..6).map(|_| pool.get().unwrap()).collect();
            drop(guards);
            clock.armed.store(round % 7 == 3, SeqCst);
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let guards: Vec<_> = (0..6).map(|_| pool.get().unwrap()).collect();
                drop(guards);
            }));
            panics += usize::from(got.is_err());
            clock.armed.store(false, SeqCst);
            let s = pool.stats();
            assert_eq!(s.live, 0, "{s:?}");
            assert_eq!(s.idle, s.created - s.destroyed - s.detached, "{s:?}");
        }
        assert!(panics > 0, "the clock's panic reached the caller");
        drop(pool);
        ledger.assert_all_accounted();
    });
}

/// A pressure source whose `on_ready` panics.
struct PanickingSource {
    rx: std::os::unix::net::UnixStream,
}

impl pressure::Source for PanickingSource {
    fn name(&self) -> String {
        "panicking test source".to_owned()
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.rx.as_fd()
    }

    fn interest(&self) -> pressure::Interest {
        pressure::Interest::Readable
    }

    fn on_ready(&mut self) -> std::io::Result<Option<Level>> {
        panic!("{}: on_ready", common::INJECTED);
    }
}

/// A source that panics is dropped and reported like a failing one; the
/// reclaimer lives on.
#[test]
fn a_panicking_source_is_dropped_and_the_reclaimer_lives() {
    child::run(
        "a_panicking_source_is_dropped_and_the_reclaimer_lives",
        || {
            use std::io::Write;
            common::quiet_injected_panics();
            let (manager, ledger) = Counting::new();
            let pool = Pool::builder(manager).build().unwrap();
            let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
            pressure::watch(Box::new(PanickingSource { rx }));
            tx.write_all(&[1]).unwrap();
            let (statuses, ok) = wait_until(PATIENCE, pressure::sources, |all| {
                all.iter()
                    .any(|s| s.name == "panicking test source" && s.error.is_some())
            });
            assert!(ok, "{statuses:?}");
            let st = statuses
                .iter()
                .find(|s| s.name == "panicking test source")
                .unwrap();
            assert!(st.error.as_deref().unwrap().contains("panicked"), "{st:?}");
            assert!(tidepool::reclaim::status().running);
            assert_reclaimer_serves_new_pools();
            drop(pool);
            ledger.assert_all_accounted();
        },
    );
}
