//! Memory pressure and reclaim through the process-wide reclaimer thread:
//! `pressure::notify`, a custom [`Source`] given to `pressure::watch`, and
//! background passes on a pool nobody touches.
//!
//! A binary of its own: the reclaimer and its signals are process-wide, so a
//! signal here reaches every pool in the process. The tests in it take
//! [`SERIAL`] so that one test's signal cannot land on another's pool.
//!
//! The machine's own pressure sources (PSI, cgroup) are not watched
//! (`TIDEPOOL_PRESSURE=manual`, set by [`serial`] before the first pool):
//! a real signal from a loaded machine would land on these tests' pools
//! too, and change the exact counts they check (a persisting critical
//! signal holds the depot at `min_idle`, refusing donations).
//!
//! Nothing here asserts on elapsed time: each test waits (polling, up to
//! [`PATIENCE`]) for a condition, then asserts it held.

mod common;

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use common::{Counting, Ledger};
use tidepool::pressure::{self, Interest, Level, Source, SourceStatus};
use tidepool::reclaim::ManualClock;
use tidepool::{Pool, Stats};

type P = Pool<Counting>;

const PATIENCE: Duration = Duration::from_secs(30);

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes [`SERIAL`]; the first call also turns the default pressure
/// sources off, before any test builds a pool (which starts the reclaimer,
/// which opens them).
fn serial() -> MutexGuard<'static, ()> {
    static MANUAL: Once = Once::new();
    MANUAL.call_once(|| std::env::set_var("TIDEPOOL_PRESSURE", "manual"));
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `cond` until it holds or [`PATIENCE`] runs out; fails the test with
/// `what` and the last state seen otherwise.
fn wait_for<T: std::fmt::Debug>(
    what: &str,
    mut probe: impl FnMut() -> T,
    cond: impl Fn(&T) -> bool,
) -> T {
    let start = Instant::now();
    loop {
        let seen = probe();
        if cond(&seen) {
            return seen;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "gave up after {PATIENCE:?} waiting for {what}; last seen: {seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn background_pool(min_idle: usize, interval: Duration) -> (Arc<P>, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    let pool = Pool::builder(manager)
        .batch_size(4)
        .max_idle(1024)
        .min_idle(min_idle)
        .reclaim_interval(interval)
        .build()
        .expect("valid settings");
    assert!(pool.config().background(), "background is the default");
    (Arc::new(pool), ledger)
}

/// Gives the pool `n` idle objects on this thread (some cached, the rest in
/// the depot), then has a second thread use `m` of them (taken from the
/// depot, `m <= n - 8`), so they end in its cache; that thread then parks,
/// alive, until the returned sender is dropped.
fn fill(
    pool: &Arc<P>,
    n: usize,
    m: usize,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
    drop(guards);
    let (ready_tx, ready) = channel();
    let (park_tx, park) = channel::<()>();
    let worker_pool = Arc::clone(pool);
    let handle = std::thread::spawn(move || {
        let guards: Vec<_> = (0..m).map(|_| worker_pool.get().unwrap()).collect();
        drop(guards);
        drop(worker_pool);
        ready_tx.send(()).unwrap();
        let _ = park.recv();
    });
    ready.recv().unwrap();
    (park_tx, handle)
}

fn finish(pool: Arc<P>, ledger: Arc<Ledger>) {
    assert_eq!(Arc::strong_count(&pool), 1);
    drop(pool);
    ledger.assert_all_accounted();
}

/// `notify(Critical)` reaches a background pool: it drains to `min_idle`,
/// taking both threads' caches.
#[test]
fn notify_critical_drains_a_background_pool_to_min_idle() {
    let _serial = serial();
    let (pool, ledger) = background_pool(3, Duration::from_secs(3600));
    let (park, worker) = fill(&pool, 40, 6);
    let s = pool.stats();
    assert_eq!((s.created, s.idle), (40, 40));
    assert!(s.idle_cached() >= 8 + 6, "both threads cache: {s:?}");
    assert_eq!(s.pressure_critical, 0);

    pressure::notify(Level::Critical);
    // A pass counts the signal first and what it destroyed last: wait for
    // the end (`reclaimed`), not the start, or this reads a pass mid-way
    // (miri's scheduler found that interleaving). `reclaimed` counts what
    // the drain queued for destruction; the destroy queue may still be
    // destroying it (`destroying`), so wait for that too (miri found that
    // one as well: `destroyed` 0 with 37 reclaimed).
    let s = wait_for(
        "the pool to drain to min_idle after notify(Critical)",
        || pool.stats(),
        |s: &Stats| {
            s.pressure_critical >= 1 && s.idle == 3 && s.reclaimed >= 37 && s.destroying == 0
        },
    );
    assert_eq!((s.idle_depot, s.idle_cached()), (3, 0));
    assert!(
        s.caches_taken >= 2,
        "this thread's and the parked worker's: {s:?}"
    );
    assert_eq!(s.destroyed, 37);
    assert!(s.reclaimed >= 37, "{s:?}");
    drop(park);
    worker.join().unwrap();
    finish(pool, ledger);
}

/// A source on a socket pair: fires `level` for each byte written to the
/// other end.
struct SocketSource {
    name: String,
    rx: UnixStream,
    level: Level,
}

impl SocketSource {
    fn new(name: &str, level: Level) -> (Self, UnixStream) {
        let (tx, rx) = UnixStream::pair().expect("socketpair");
        rx.set_nonblocking(true).unwrap();
        (
            Self {
                name: name.to_owned(),
                rx,
                level,
            },
            tx,
        )
    }
}

impl Source for SocketSource {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    fn interest(&self) -> Interest {
        Interest::Readable
    }

    fn on_ready(&mut self) -> io::Result<Option<Level>> {
        let mut buf = [0u8; 64];
        let mut got = 0;
        loop {
            match self.rx.read(&mut buf) {
                Ok(0) => return Err(io::Error::other("the test closed its end")),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok((got > 0).then_some(self.level))
    }
}

fn status_of(name: &str) -> Option<SourceStatus> {
    pressure::sources().into_iter().find(|s| s.name == name)
}

/// A custom source given to `watch` fires; the pool responds and
/// `sources()` counts the event.
#[test]
#[cfg_attr(
    miri,
    ignore = "sources are polled with poll(2), which miri does not emulate"
)]
fn a_watched_source_fires_and_the_pool_responds() {
    let _serial = serial();
    let (pool, ledger) = background_pool(2, Duration::from_secs(3600));
    let (park, worker) = fill(&pool, 30, 5);
    let name = format!("test socket source {}", std::process::id());
    let (source, mut trigger) = SocketSource::new(&name, Level::Critical);
    pressure::watch(Box::new(source));
    let status = status_of(&name).expect("watch lists the source at once");
    assert_eq!((status.events, status.error), (0, None));
    // Not fired yet: the pool keeps its objects.
    std::thread::sleep(Duration::from_millis(50));
    let before = pool.stats();
    assert_eq!(before.idle, 30, "no signal, no drain: {before:?}");

    trigger.write_all(&[1]).unwrap();
    let s = wait_for(
        "the pool to drain to min_idle after the source fired",
        || (pool.stats(), status_of(&name)),
        |(s, st): &(Stats, Option<SourceStatus>)| {
            s.pressure_critical > before.pressure_critical
                && s.idle == 2
                && st.as_ref().is_some_and(|st| st.events >= 1)
        },
    );
    assert_eq!(s.1.unwrap().error, None);
    assert_eq!(s.0.idle_depot, 2);

    // It keeps being watched: a second firing is counted too.
    trigger.write_all(&[2]).unwrap();
    wait_for(
        "a second event from the source",
        || status_of(&name).unwrap(),
        |st: &SourceStatus| st.events >= 2,
    );
    drop(park);
    worker.join().unwrap();
    finish(pool, ledger);
}

/// A source that fails is reported in `sources()` and dropped; the pools
/// keep working.
#[test]
#[cfg_attr(
    miri,
    ignore = "sources are polled with poll(2), which miri does not emulate"
)]
fn a_failing_source_is_reported_and_dropped() {
    let _serial = serial();
    let name = format!("test failing source {}", std::process::id());
    let (source, trigger) = SocketSource::new(&name, Level::Critical);
    let (pool, ledger) = background_pool(0, Duration::from_secs(3600));
    pressure::watch(Box::new(source));
    // Closing our end makes the source's read return 0: `on_ready` fails.
    drop(trigger);
    let st = wait_for(
        "the failing source to be reported",
        || status_of(&name).unwrap(),
        |st: &SourceStatus| st.error.is_some(),
    );
    assert_eq!(st.events, 0, "{st:?}");
    // The pool is fine.
    let guards: Vec<_> = (0..10).map(|_| pool.get().unwrap()).collect();
    drop(guards);
    assert_eq!(pool.stats().idle, 10);
    finish(pool, ledger);
}

/// The reclaimer runs the passes of a pool nobody touches, and takes back the
/// caches of threads that stopped using it: an untouched pool empties itself.
#[test]
fn the_reclaimer_empties_an_untouched_pool() {
    let _serial = serial();
    let (pool, ledger) = background_pool(0, Duration::from_millis(100));
    let (park, worker) = fill(&pool, 100, 7);
    // A pass counts what it reclaimed last, after its objects are destroyed
    // (and `destroying` is back at 0): wait for that count too, or this may
    // read a pass preempted between the two. An object destroyed by any
    // other path is never counted, and the wait gives up showing it.
    let s = wait_for(
        "the untouched pool to give back every idle object, all counted reclaimed",
        || pool.stats(),
        |s: &Stats| s.idle == 0 && s.destroying == 0 && s.reclaimed >= s.destroyed,
    );
    // A pass may already run while `fill` works (an interval is 100 ms: a
    // stall, or miri's interpreter, lets one pass), and the worker then
    // creates what it finds gone: at least 100, all destroyed by passes.
    assert!(s.created >= 100, "{s:?}");
    assert_eq!(s.created, s.destroyed, "{s:?}");
    assert_eq!(s.reclaimed, s.destroyed, "all by reclaim passes: {s:?}");
    assert!(s.caches_taken >= 2, "this thread's and the worker's: {s:?}");
    assert!(s.reclaim_passes >= 3, "{s:?}");
    for id in 0..s.created {
        assert!(
            ledger.purges_of(id) <= 1,
            "object {id} purged twice while idle"
        );
    }
    drop(park);
    worker.join().unwrap();
    finish(pool, ledger);
}

/// A background pool may use its own clock: the reclaimer delivers pressure
/// to it all the same, and Medium takes exactly what sat unused through this
/// interval and the last.
#[test]
fn notify_medium_reaches_a_background_pool_with_a_manual_clock() {
    let _serial = serial();
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(ManualClock::new());
    let interval = Duration::from_secs(10);
    let pool = Arc::new(
        Pool::builder(manager)
            .batch_size(4)
            .reclaim_interval(interval)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let use_n = |n: usize| drop((0..n).map(|_| pool.get().unwrap()).collect::<Vec<_>>());
    // The reclaimer may run a due pass itself, concurrently with this
    // thread's `reclaim()` (which then returns at once): wait until the
    // pass is done before using the pool again, so the marks are exact.
    let passes = std::cell::Cell::new(0);
    let end_interval = || {
        clock.advance(interval);
        pool.reclaim();
        passes.set(passes.get() + 1);
        wait_for(
            "the interval's pass",
            || pool.stats().reclaim_passes,
            |&n| n == passes.get(),
        );
    };
    use_n(16);
    end_interval();
    use_n(216); // spike: 8 cached, 208 in the depot
    end_interval();
    use_n(16); // the 200 oldest sit unused
    end_interval();
    let before = pool.stats();
    assert_eq!((before.idle, before.reclaimed), (216, 0), "{before:?}");

    pressure::notify(Level::Medium);
    // The signal is counted before the pass destroys anything: wait for
    // what it destroyed (counted last), then check it was exactly that.
    let s = wait_for(
        "the Medium signal to reach the pool",
        || pool.stats(),
        |s: &Stats| s.pressure_medium >= 1 && s.reclaimed >= 200 && s.idle <= 16,
    );
    assert_eq!(s.reclaimed, 200, "{s:?}");
    assert_eq!((s.idle, s.idle_depot, s.created), (16, 8, 216));
    assert_eq!(Arc::strong_count(&pool), 1);
    drop(pool);
    ledger.assert_all_accounted();
}
