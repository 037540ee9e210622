//! A pool dropped while the reclaimer runs its tick: the drop waits for the
//! tick to end (the registry's `close`), and the tick's end wakes it. The
//! end of a tick wakes closers only while one waits (`Registry::closing`),
//! so this checks that the one waiting is counted and woken.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::reclaim::registry;
use crate::{Manage, Pool};

/// Counts what it makes and destroys; its first destroy (on the
/// reclaimer's thread, in a tick) says so and holds until `go`.
struct Holding {
    created: Arc<AtomicU64>,
    destroyed: Arc<AtomicU64>,
    entered: mpsc::SyncSender<()>,
    go: Arc<AtomicBool>,
    held: AtomicBool,
}

impl Manage for Holding {
    type Item = u64;
    type Error = std::convert::Infallible;

    fn create(&self) -> Result<u64, Self::Error> {
        self.created.fetch_add(1, SeqCst);
        Ok(1)
    }

    fn destroy(&self, _: u64) {
        let on_reclaimer = thread::current().name() == Some("tidepool-reclaim");
        if on_reclaimer && !self.held.swap(true, SeqCst) {
            let _ = self.entered.send(());
            while !self.go.load(SeqCst) {
                thread::yield_now();
            }
        }
        self.destroyed.fetch_add(1, SeqCst);
    }
}

/// Sets its flag when dropped, on unwind too.
struct Release(Arc<AtomicBool>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// Waits (a bounded while) until `what()` holds; `false` if it never did.
fn eventually(what: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        thread::yield_now();
    }
    false
}

#[test]
fn a_drop_during_the_pools_tick_waits_for_it_and_is_woken_at_its_end() {
    let created = Arc::new(AtomicU64::new(0));
    let destroyed = Arc::new(AtomicU64::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = mpsc::sync_channel(1);
    let pool = Pool::builder(Holding {
        created: created.clone(),
        destroyed: destroyed.clone(),
        entered: entered_tx,
        go: Arc::clone(&go),
        held: AtomicBool::new(false),
    })
    .reclaim_interval(Duration::from_millis(5))
    .build()
    .unwrap();
    // Idle objects, which the reclaimer's passes destroy two intervals on.
    let held: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
    drop(held);
    entered
        .recv_timeout(Duration::from_secs(60))
        .expect("the reclaimer destroys an idle object in a tick");
    // The reclaimer is held from here: let it go however this test ends,
    // so that a failure here does not stall every other test's pools.
    let release = Release(go);

    let (dropped_tx, dropped) = mpsc::channel();
    let dropper = thread::spawn(move || {
        drop(pool);
        dropped_tx.send(()).unwrap();
    });
    assert!(
        eventually(|| registry::lock().closing() == 1),
        "the drop waits in close for the tick, counted"
    );
    assert!(dropped.try_recv().is_err(), "not before the tick ends");
    drop(release);
    dropped
        .recv_timeout(Duration::from_secs(60))
        .expect("the tick's end wakes the waiting drop");
    dropper.join().unwrap();
    // Other tests' pools may be dropped during the reclaimer's later ticks.
    assert!(
        eventually(|| registry::lock().closing() == 0),
        "the waiter is uncounted"
    );
    assert_eq!(
        created.load(SeqCst),
        destroyed.load(SeqCst),
        "every object destroyed exactly once by the drop's end"
    );
}
