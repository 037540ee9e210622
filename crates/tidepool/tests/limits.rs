//! `max_live`: a `get` at the limit recycles before it fails (depot, other
//! threads' caches), so it never reports a false `Exhausted`.

mod common;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use common::{until_waiting, Counting, Held, Ledger, FOREVER};
use tidepool::{Error, Pool};

type P = Pool<Counting>;

fn pool_live(batch: usize, max_idle: usize, max_live: usize) -> (Arc<P>, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    // Exact counts: no process-wide reclaimer taking caches on its own.
    let pool = Pool::builder(manager)
        .batch_size(batch)
        .max_idle(max_idle)
        .max_live(max_live)
        .background(false)
        .build()
        .unwrap();
    (Arc::new(pool), ledger)
}

/// A thread that runs one get-and-give-back per command and replies with
/// the id it got (or the error), then waits, alive, with its cache.
struct Worker {
    tx: Sender<()>,
    rx: Receiver<Result<u64, Error<common::CreateFailed>>>,
    handle: JoinHandle<()>,
}

impl Worker {
    fn spawn(pool: &Arc<P>) -> Self {
        let pool = Arc::clone(pool);
        let (tx, cmd) = channel::<()>();
        let (reply, rx) = channel();
        let handle = thread::spawn(move || {
            while cmd.recv().is_ok() {
                let got = pool.get_owned().map(|g| Held::new(g).id());
                reply.send(got).unwrap();
            }
        });
        Self { tx, rx, handle }
    }

    fn get_and_put(&self) -> Result<u64, Error<common::CreateFailed>> {
        self.tx.send(()).unwrap();
        self.rx.recv().unwrap()
    }

    fn stop(self) {
        drop(self.tx);
        self.handle.join().unwrap();
    }
}

#[test]
fn no_false_exhausted_when_the_idle_object_is_in_another_threads_cache() {
    const N: usize = 4;
    let (pool, ledger) = pool_live(2, 8, N);
    // N - 1 objects live on this thread.
    let held: Vec<_> = (0..N - 1)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    let workers: Vec<_> = (0..3).map(|_| Worker::spawn(&pool)).collect();
    // The N-th object: created on worker 0, now idle in its cache.
    let last = workers[0].get_and_put().unwrap();
    assert_eq!(pool.stats().created, N as u64);
    // Every other thread in turn, then worker 0 again, then this thread:
    // each takes the one idle object from the cache of the thread before.
    for round in 0..2 {
        for (i, w) in workers.iter().enumerate().skip(1).chain([(0, &workers[0])]) {
            match w.get_and_put() {
                Ok(id) => assert_eq!(id, last, "round {round}, worker {i}: the idle object"),
                Err(e) => panic!("round {round}, worker {i}: false {e:?}"),
            }
        }
        let mine = Held::new(pool.get_owned().expect("this thread: no false Exhausted"));
        assert_eq!(mine.id(), last);
        drop(mine);
    }
    let s = pool.stats();
    assert_eq!(s.created, N as u64, "nothing created past the limit");
    assert_eq!(s.live, (N - 1) as u64);
    assert_eq!(s.live + s.idle, s.existing());
    assert_eq!(s.caches_taken, 8, "one steal per get after the first");
    // A true exhaustion still fails, fast: the idle object is live too.
    let extra = Held::new(pool.get_owned().unwrap());
    assert!(matches!(pool.get(), Err(Error::Exhausted { limit: N })));
    for w in &workers {
        assert!(matches!(
            w.get_and_put(),
            Err(Error::Exhausted { limit: N })
        ));
    }
    drop((extra, held));
    for w in workers {
        w.stop();
    }
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_get_at_the_limit_takes_a_depot_batch_first() {
    // Idle objects in the depot (an exited thread's cache) are found
    // before anything is stolen.
    let (pool, ledger) = pool_live(2, 8, 4);
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        let g: Vec<_> = (0..4).map(|_| p.get_owned().unwrap()).collect();
        drop(g);
    })
    .join()
    .unwrap();
    let all: Vec<_> = (0..4)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    let s = pool.stats();
    assert_eq!((s.created, s.caches_taken), (4, 0));
    drop(all);
    drop(pool);
    ledger.assert_all_accounted();
}

// === get_timeout: FIFO waiting at the limit ===

#[test]
fn waiters_are_served_in_arrival_order_one_object_each() {
    let (pool, ledger) = pool_live(1, 4, 1);
    let only = Held::new(pool.get_owned().unwrap());
    let id = only.id();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (p, order) = (Arc::clone(&pool), Arc::clone(&order));
        waiters.push(thread::spawn(move || {
            let got = Held::new(p.get_owned_timeout(FOREVER).expect("served"));
            order.lock().unwrap().push((i, got.id()));
            // Dropped here: handed straight to the next waiter.
        }));
        until_waiting(&pool, i + 1);
    }
    assert!(
        matches!(pool.get(), Err(Error::Exhausted { limit: 1 })),
        "a plain get does not wait"
    );
    drop(only);
    for w in waiters {
        w.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        (0..5).map(|i| (i, id)).collect::<Vec<_>>(),
        "FIFO, the one object"
    );
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.waiting), (1, 0, 0));
    assert_eq!(s.live + s.idle, s.existing());
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_destroy_or_detach_makes_room_for_the_oldest_waiter() {
    let (pool, ledger) = pool_live(1, 4, 1);
    let first = Held::new(pool.get_owned().unwrap());
    let (tx, rx) = channel();
    let mut waiters = Vec::new();
    for i in 0..2 {
        let (p, tx) = (Arc::clone(&pool), tx.clone());
        waiters.push(thread::spawn(move || {
            let got = Held::new(p.get_owned_timeout(FOREVER).expect("served"));
            tx.send((i, got.id())).unwrap();
            got // kept until joined
        }));
        until_waiting(&pool, i + 1);
    }
    // A discard frees the place: the oldest waiter creates in it.
    let first_id = first.id();
    first.discard();
    let (who, id) = rx.recv().unwrap();
    assert_eq!(who, 0);
    assert_ne!(id, first_id, "a new object");
    let got0 = waiters.remove(0).join().unwrap();
    // A detach frees it too: the next waiter.
    let _obj = got0.detach();
    let (who, _) = rx.recv().unwrap();
    assert_eq!(who, 1);
    drop(waiters.remove(0).join().unwrap());
    let s = pool.stats();
    assert_eq!(
        (s.created, s.destroyed, s.detached, s.waiting),
        (3, 1, 1, 0)
    );
    assert_eq!(s.live + s.idle, s.existing());
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn get_timeout_times_out_when_nothing_comes_back_and_leaves_the_queue() {
    let (pool, ledger) = pool_live(1, 4, 1);
    let only = pool.get().unwrap();
    for timeout in [Duration::ZERO, Duration::from_millis(1)] {
        match pool.get_timeout(timeout) {
            Err(Error::Timeout { limit: 1 }) => {}
            other => panic!("expected Timeout, got {other:?}"),
        }
        assert_eq!(pool.stats().waiting, 0);
    }
    let err = pool.get_owned_timeout(Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    drop(only);
    // Below the limit it returns at once, like get.
    assert!(pool.get_timeout(Duration::ZERO).is_ok());
    // Without a limit there is nothing to wait for.
    let (manager, _) = Counting::new();
    let unlimited = Pool::builder(manager).background(false).build().unwrap();
    let held: Vec<_> = (0..100)
        .map(|_| unlimited.get_timeout(Duration::ZERO).unwrap())
        .collect();
    drop(held);
    drop(pool);
    ledger.assert_all_accounted();
}

#[cfg(unix)]
#[test]
fn stack_pools_wait_too() {
    use tidepool::stack::{StackError, StackPool};
    let pool = StackPool::builder(16 * 1024)
        .max_live(1)
        .background(false)
        .build()
        .unwrap();
    let only = pool.get().unwrap();
    let top = only.top().as_ptr() as usize;
    assert!(matches!(
        pool.get_timeout(Duration::ZERO),
        Err(StackError::Timeout { limit: 1 })
    ));
    let p = pool.clone();
    let waiter = thread::spawn(move || p.get_timeout(FOREVER).map(|s| s.top().as_ptr() as usize));
    while pool.stats().pool.waiting != 1 {
        thread::yield_now();
    }
    drop(only);
    assert_eq!(
        waiter.join().unwrap().unwrap(),
        top,
        "the same stack, handed over"
    );
}

// === scalable accounting: credits ===

#[test]
fn places_parked_in_another_threads_credits_are_recalled_at_the_limit() {
    // max_live 256, batch 8: places are lent 4 at a time far from the limit.
    const N: usize = 256;
    let (pool, ledger) = pool_live(8, 8, N);
    let p = Arc::clone(&pool);
    let (tx, rx) = channel();
    let (done_tx, done_rx) = channel::<()>();
    let other = thread::spawn(move || {
        // One object live here; the rest of its chunk stays parked.
        let one = Held::new(p.get_owned().unwrap());
        tx.send(()).unwrap();
        done_rx.recv().unwrap();
        drop(one);
    });
    rx.recv().unwrap();
    // Every other place, on this thread: the last few only after recalling
    // the other thread's credits.
    let mine: Vec<_> = (0..N - 1)
        .map(|i| {
            Held::new(
                pool.get_owned()
                    .unwrap_or_else(|e| panic!("get {i}: {e:?}")),
            )
        })
        .collect();
    assert!(matches!(pool.get(), Err(Error::Exhausted { limit: N })));
    assert_eq!(pool.stats().existing(), N as u64);
    assert_eq!(ledger.max_existing(), N as u64);
    done_tx.send(()).unwrap();
    other.join().unwrap();
    drop(mine);
    // Trim returns parked credits; counts stay exact.
    pool.reclaim_unused();
    let s = pool.stats();
    assert_eq!(s.live + s.idle, s.existing());
    drop(pool);
    ledger.assert_all_accounted();
}

/// A manager whose `recycle`, once armed, holds the put inside it until the
/// test lets it go: a waiter can queue exactly then.
struct GatedRecycle {
    armed: std::sync::atomic::AtomicBool,
    inside: std::sync::atomic::AtomicBool,
    go: std::sync::atomic::AtomicBool,
}

impl tidepool::Manage for GatedRecycle {
    type Item = u64;
    type Error = std::convert::Infallible;

    fn create(&self) -> Result<u64, Self::Error> {
        Ok(7)
    }

    fn recycle(&self, _: &mut u64) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if self.armed.swap(false, SeqCst) {
            self.inside.store(true, SeqCst);
            while !self.go.load(SeqCst) {
                thread::yield_now();
            }
        }
        true
    }
}

/// A waiter queues while a put runs `recycle` (the fast path, this thread's
/// cache remembered): it gets that object, and nothing is created. The put
/// looks for waiters after `recycle`, right before caching; a review of
/// this release's fast path caught it looking before (the waiter was still
/// served here, by its own recall of the putter's cache at the limit).
/// Bounded, so that a stranded waiter fails the test instead of hanging it.
#[test]
fn a_waiter_that_queues_while_a_put_recycles_is_handed_that_object() {
    use std::sync::atomic::Ordering::SeqCst;
    let pool = Arc::new(
        Pool::builder(GatedRecycle {
            armed: false.into(),
            inside: false.into(),
            go: false.into(),
        })
        .max_live(1)
        .build()
        .unwrap(),
    );
    // The putter stays alive until the end: its exit would give its cache
    // back, and that would serve the waiter too.
    let (done, stay) = channel::<()>();
    let (put, put_done) = channel::<()>();
    let putter = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || {
            // Twice, so that this thread's cache is the remembered one and
            // the third drop takes the inlined fast path.
            drop(pool.get().unwrap());
            drop(pool.get().unwrap());
            let g = pool.get().unwrap();
            pool.manager().armed.store(true, SeqCst);
            drop(g);
            put.send(()).unwrap();
            let _ = stay.recv();
        })
    };
    while !pool.manager().inside.load(SeqCst) {
        thread::yield_now();
    }
    let waiter = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || pool.get_timeout(Duration::from_secs(20)).map(|g| *g))
    };
    until_waiting(&pool, 1);
    pool.manager().go.store(true, SeqCst);
    put_done.recv().unwrap();
    assert_eq!(
        waiter.join().unwrap().ok(),
        Some(7),
        "handed the object the put was recycling"
    );
    drop(done);
    putter.join().unwrap();
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.waiting), (1, 0, 0));
}
