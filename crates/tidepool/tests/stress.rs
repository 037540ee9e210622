//! Multi-thread tests: random work on many threads with guards passed between
//! them, threads exiting mid-way, and the two lifetimes that meet at a thread
//! cache (thread exit and pool drop).
//!
//! The random runs print their seed; set `TIDEPOOL_STRESS_SEED` to replay one.

mod common;

use std::cell::RefCell;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::thread;

use common::{scaled, Counting, Held, Ledger, Rng};
use tidepool::{Error, Pool};

type P = Pool<Counting>;

fn pool(batch: usize, max_idle: usize, max_live: Option<usize>) -> (Arc<P>, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    // Exact counts: no process-wide reclaimer (see tests/model.rs). Cache
    // take-backs still happen here, from the workers' own `drain` calls.
    let mut b = Pool::builder(manager)
        .batch_size(batch)
        .max_idle(max_idle)
        .background(false);
    if let Some(n) = max_live {
        b = b.max_live(n);
    }
    (Arc::new(b.build().unwrap()), ledger)
}

fn seed() -> u64 {
    let seed = std::env::var("TIDEPOOL_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            // Miri's isolation has no wall clock; its own seeded RNG
            // (`-Zmiri-seed`) varies the run instead.
            #[cfg(miri)]
            return std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                0u8,
            );
            #[cfg(not(miri))]
            return std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64;
        });
    println!("TIDEPOOL_STRESS_SEED={seed}");
    seed
}

/// One worker of [`stress`]: random gets, drops, hand-offs to other workers,
/// discards, detaches, trims and drains, and short-lived child threads.
fn worker(
    pool: Arc<P>,
    mut rng: Rng,
    ops: usize,
    inbox: Receiver<Held>,
    peers: Vec<Sender<Held>>,
    max_live: Option<usize>,
) {
    let max_idle = pool.config().max_idle() as u64;
    let mut held: Vec<Held> = Vec::new();
    let mut detached = Vec::new();
    for _ in 0..ops {
        held.extend(inbox.try_iter());
        match rng.below(100) {
            0..=34 => match pool.get_owned() {
                Ok(g) => held.push(Held::new(g)),
                Err(Error::Exhausted { limit }) => assert_eq!(Some(limit), max_live),
                Err(e) => panic!("unexpected {e:?}"),
            },
            35..=59 if !held.is_empty() => {
                let i = rng.below(held.len());
                drop(held.swap_remove(i));
            }
            60..=71 if !held.is_empty() => {
                let i = rng.below(held.len());
                let g = held.swap_remove(i);
                let to = rng.below(peers.len());
                // A peer that has exited hands the guard back; drop it here.
                if let Err(back) = peers[to].send(g) {
                    drop(back.0);
                }
            }
            72..=75 if !held.is_empty() => {
                let i = rng.below(held.len());
                held.swap_remove(i).discard();
            }
            76..=77 if !held.is_empty() => {
                let i = rng.below(held.len());
                detached.push(held.swap_remove(i).detach());
            }
            78 => {
                pool.reclaim_unused();
            }
            79 => {
                pool.drain();
            }
            80..=82 => {
                // A short-lived child takes some guards, works a little and
                // exits: its cache must go back to the depot.
                let take = rng.below(held.len() + 1);
                let mine: Vec<Held> = held.drain(..take).collect();
                let pool = Arc::clone(&pool);
                let mut child_rng = Rng::new(rng.next_u64());
                thread::spawn(move || {
                    let mut mine = mine;
                    for _ in 0..20 {
                        if child_rng.below(2) == 0 {
                            if let Ok(g) = pool.get_owned() {
                                mine.push(Held::new(g));
                            }
                        } else if !mine.is_empty() {
                            let i = child_rng.below(mine.len());
                            drop(mine.swap_remove(i));
                        }
                    }
                })
                .join()
                .unwrap();
            }
            _ => {
                // A get and a put in a row: the hot path.
                if let Ok(g) = pool.get_owned() {
                    drop(Held::new(g));
                }
            }
        }
        while held.len() > 12 {
            let i = rng.below(held.len());
            drop(held.swap_remove(i));
        }
        let s = pool.stats();
        assert!(s.idle_depot <= max_idle, "depot over max_idle: {s:?}");
    }
    // Exiting mid-way: whatever is still held (and still in the inbox, once
    // it is dropped) goes back through this thread's cache.
}

fn stress(threads: usize, batch: usize, max_idle: usize, max_live: Option<usize>) {
    let mut rng = Rng::new(seed());
    let (pool, ledger) = pool(batch, max_idle, max_live);
    let (senders, inboxes): (Vec<_>, Vec<_>) = (0..threads).map(|_| channel::<Held>()).unzip();
    let handles: Vec<_> = inboxes
        .into_iter()
        .enumerate()
        .map(|(k, inbox)| {
            let pool = Arc::clone(&pool);
            let peers = senders.clone();
            let worker_rng = Rng::new(rng.next_u64());
            // Different lifetimes: some workers exit while others still
            // send to them.
            let ops = scaled(3000 + k * 1000, 30 + k * 10) + rng.below(scaled(1000, 10));
            thread::spawn(move || worker(pool, worker_rng, ops, inbox, peers, max_live))
        })
        .collect();
    drop(senders);
    for h in handles {
        h.join().expect("worker panicked");
    }

    // Every thread that used the pool has exited: every cache went back to
    // the depot (or was destroyed past max_idle).
    let s = pool.stats();
    let c = ledger.counts();
    assert_eq!(ledger.in_use(), 0);
    assert_eq!(s.live, 0, "{s:?}");
    assert_eq!(s.idle, s.idle_depot, "no thread caches left: {s:?}");
    assert!(s.idle_depot <= max_idle as u64, "{s:?}");
    assert!(s.idle <= pool.config().idle_bound(0) as u64, "{s:?}");
    assert!(s.idle <= pool.config().idle_bound(threads) as u64, "{s:?}");
    assert_eq!(s.existing(), s.idle);
    assert_eq!(
        (c.created, c.destroyed, c.detached),
        (s.created, s.destroyed, s.detached)
    );
    // Every guard ended exactly once: recycled (or refused), discarded or
    // detached.
    assert_eq!(s.hits + s.misses, c.recycle_calls + c.discards + c.detached);
    assert!(s.created > 0 && s.hits > 0, "{s:?}");
    if let Some(limit) = max_live {
        assert!(ledger.max_existing() <= limit as u64);
    }
    ledger.assert_no_errors();

    assert_eq!(Arc::strong_count(&pool), 1);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn stress_many_threads() {
    stress(6, 4, 32, None);
}

#[test]
fn stress_tiny_batches_and_depot() {
    stress(4, 1, 2, None);
}

#[test]
fn stress_with_max_live() {
    stress(5, 2, 8, Some(24));
}

#[test]
fn thread_exit_returns_its_cache_to_the_depot() {
    let (pool, ledger) = pool(4, 64, None);
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        let guards: Vec<_> = (0..6).map(|_| p.get_owned().unwrap()).collect();
        drop(guards);
        let s = p.stats();
        assert_eq!((s.idle_cached(), s.idle_depot), (6, 0), "{s:?}");
    })
    .join()
    .unwrap();
    let s = pool.stats();
    assert_eq!((s.idle, s.idle_depot, s.created), (6, 6, 6), "{s:?}");

    // Another thread reuses all six without creating.
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        let guards: Vec<_> = (0..6).map(|_| Held::new(p.get_owned().unwrap())).collect();
        let s = p.stats();
        assert_eq!((s.created, s.live, s.idle), (6, 6, 0), "{s:?}");
        drop(guards);
    })
    .join()
    .unwrap();
    let s = pool.stats();
    assert_eq!((s.created, s.misses, s.hits), (6, 6, 6), "{s:?}");
    assert_eq!((s.idle, s.idle_depot), (6, 6), "{s:?}");
    drop(pool);
    assert_eq!(ledger.counts().destroyed, 6);
    ledger.assert_all_accounted();
}

#[test]
fn thread_exit_destroys_what_the_depot_cannot_take() {
    // Depot of one batch; the exiting thread caches two.
    let (pool, ledger) = pool(4, 4, None);
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        let guards: Vec<_> = (0..8).map(|_| p.get_owned().unwrap()).collect();
        drop(guards);
        assert_eq!(p.stats().idle_cached(), 8);
    })
    .join()
    .unwrap();
    let s = pool.stats();
    assert_eq!((s.idle, s.idle_depot, s.destroyed), (4, 4, 4), "{s:?}");
    assert_eq!(ledger.counts().destroyed, 4);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn short_lived_threads_reuse_ids_slots_and_objects() {
    let (pool, ledger) = pool(4, 64, None);
    for round in 0..scaled(40, 6) {
        let p = Arc::clone(&pool);
        thread::spawn(move || {
            let guards: Vec<_> = (0..5).map(|_| Held::new(p.get_owned().unwrap())).collect();
            drop(guards);
        })
        .join()
        .unwrap();
        let s = pool.stats();
        assert_eq!(s.created, 5, "round {round}: {s:?}");
        assert_eq!(
            (s.idle, s.idle_depot, s.live),
            (5, 5, 0),
            "round {round}: {s:?}"
        );
    }
    // Two at a time.
    for _ in 0..scaled(20, 4) {
        let barrier = Arc::new(Barrier::new(2));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let p = Arc::clone(&pool);
                let b = Arc::clone(&barrier);
                thread::spawn(move || {
                    let guards: Vec<_> =
                        (0..5).map(|_| Held::new(p.get_owned().unwrap())).collect();
                    b.wait();
                    drop(guards);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let s = pool.stats();
        // Whenever a thread creates, its cache and the depot are empty: at
        // most 10 objects are live and the other thread caches two batches.
        assert!(s.created <= 10 + 2 * 4, "{s:?}");
        assert_eq!(s.destroyed, 0, "the depot never overflowed: {s:?}");
        assert_eq!(
            (s.idle, s.idle_depot, s.live),
            (s.existing(), s.idle, 0),
            "{s:?}"
        );
    }
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn dropping_the_pool_destroys_a_parked_threads_cache_once() {
    let (pool, ledger) = pool(4, 64, None);
    let (ready_tx, ready_rx) = channel::<()>();
    let (go_tx, go_rx) = channel::<()>();
    let p = Arc::clone(&pool);
    let parked = thread::spawn(move || {
        let guards: Vec<_> = (0..6).map(|_| Held::new(p.get_owned().unwrap())).collect();
        drop(guards);
        drop(p); // keep no strong reference while parked
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        // Exits now: the pool is gone, its cache must not be touched.
    });
    ready_rx.recv().unwrap();
    // Main also caches some, and the depot holds some.
    let guards: Vec<_> = (0..12)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    drop(guards);
    let s = pool.stats();
    assert_eq!(s.created, 18, "{s:?}");
    assert_eq!(s.idle, 18, "{s:?}");
    assert_eq!(s.idle_cached(), 6 + 8, "{s:?}");
    assert_eq!(Arc::strong_count(&pool), 1);
    drop(pool);
    assert_eq!(ledger.counts().destroyed, 18);
    ledger.assert_no_errors();
    go_tx.send(()).unwrap();
    parked.join().unwrap();
    assert_eq!(ledger.counts().destroyed, 18);
    ledger.assert_all_accounted();
}

#[test]
fn last_owned_guard_dropped_on_another_thread_drops_the_pool() {
    let (pool, ledger) = pool(2, 4, None);
    let guards: Vec<_> = (0..7).map(|_| pool.get_owned().unwrap()).collect();
    drop(pool);
    let (tx, rx) = channel();
    let h = thread::spawn(move || {
        for g in rx {
            drop::<tidepool::OwnedPooled<Counting>>(g);
        }
    });
    for g in guards {
        tx.send(g).unwrap();
    }
    drop(tx);
    h.join().unwrap();
    let c = ledger.counts();
    assert_eq!((c.created, c.destroyed), (7, 7));
    ledger.assert_all_accounted();
}

thread_local! {
    static STASH: RefCell<Vec<Stashed>> = const { RefCell::new(Vec::new()) };
}

enum Stashed {
    /// Dropped (put back) from a TLS destructor.
    Guard(#[allow(dead_code)] Held),
    /// Gets (and puts back) an object from a TLS destructor.
    GetOnDrop(Arc<P>),
}

impl Drop for Stashed {
    fn drop(&mut self) {
        if let Stashed::GetOnDrop(pool) = self {
            let g = pool.get_owned().expect("get from a TLS destructor");
            drop(Held::new(g));
        }
    }
}

/// Guards dropped, and gets made, while the thread's thread-locals are being
/// destroyed (before or after the pool's own thread-local, whichever order
/// the platform uses) are counted and end up in the depot.
#[test]
fn guards_dropped_in_tls_destructors_are_returned() {
    let (pool, ledger) = pool(2, 16, None);
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        // Registered before the pool's thread-local: destroyed after it on
        // platforms that run TLS destructors in reverse order.
        STASH.with(|s| s.borrow_mut().clear());
        let a = Held::new(p.get_owned().unwrap());
        let b = Held::new(p.get_owned().unwrap());
        drop(a);
        STASH.with(|s| {
            let mut s = s.borrow_mut();
            s.push(Stashed::Guard(b));
            s.push(Stashed::GetOnDrop(Arc::clone(&p)));
        });
    })
    .join()
    .unwrap();
    let s = pool.stats();
    assert_eq!(
        (s.created, s.misses),
        (2, 2),
        "no creation in the destructor: {s:?}"
    );
    assert_eq!(s.hits, 1, "{s:?}");
    assert_eq!((s.live, s.idle, s.idle_depot), (0, 2, 2), "{s:?}");
    assert_eq!(Arc::strong_count(&pool), 1);
    drop(pool);
    ledger.assert_all_accounted();
}

/// Caches taken from live, busy owners, natively (the loom models check the
/// protocol; this runs it on real cores): workers hammer the pool while
/// another thread keeps taking every cache back (`drain`) and signalling
/// critical pressure. No object may be held twice, and every count must
/// balance at the end.
#[test]
fn caches_taken_from_busy_owners() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tidepool::pressure::Level;

    let (pool, ledger) = pool(4, 64, None);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|k| {
            let pool = Arc::clone(&pool);
            let ledger = Arc::clone(&ledger);
            thread::spawn(move || {
                let mut rng = Rng::new(seed() ^ k);
                for _ in 0..scaled(20_000, 15) {
                    let n = 1 + rng.below(12);
                    let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
                    for g in &guards {
                        ledger.check_out(g.id());
                    }
                    for g in guards {
                        ledger.check_in(g.id());
                    }
                }
            })
        })
        .collect();
    let taker = {
        let pool = Arc::clone(&pool);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if rounds % 4 == 3 {
                    pool.pressure(Level::Critical);
                } else {
                    pool.drain();
                }
                rounds += 1;
                thread::yield_now();
            }
            rounds
        })
    };
    for w in workers {
        w.join().expect("worker panicked");
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = taker.join().unwrap();
    assert!(rounds > 0);

    let s = pool.stats();
    let c = ledger.counts();
    assert_eq!(ledger.in_use(), 0);
    assert_eq!(s.live, 0, "{s:?}");
    assert_eq!(s.existing(), s.idle, "{s:?}");
    assert!(s.caches_taken > 0, "the taker found caches to take: {s:?}");
    assert_eq!(
        (c.created, c.destroyed, c.detached),
        (s.created, s.destroyed, s.detached)
    );
    assert_eq!(s.hits + s.misses, c.recycle_calls + c.discards + c.detached);
    ledger.assert_no_errors();
    drop(pool);
    ledger.assert_all_accounted();
}
