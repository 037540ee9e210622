//! Loom models of the cache <-> depot hand-offs and of thread exit.
//!
//! Run with `bin/loom.sh`. Pools here are tiny (batch 1, depot of 1 or 2) so
//! a handful of operations already crosses every path: cache hit, spare
//! swap, refill from the depot, donation, refused donation, thread-exit
//! flush. Each model checks that no object is handed to two holders at once,
//! that the counts balance, and that every object is destroyed exactly once.
//!
//! Two things loom does differently from `std`, and how the models cope:
//!
//! * A loom `join` returns before the joined thread's thread-locals are
//!   destroyed, so its exit flush could still be running. Each model thread
//!   therefore ends with `exit_now()`, which runs the same hand-off the TLS
//!   destructor runs (that destructor then finds nothing left to do), so that
//!   `join` waits for it. The exactly-once check runs when the manager itself
//!   is dropped, with the pool's last reference.
//! * Pools are shared through `std::sync::Arc` and `Weak`, which loom cannot
//!   see (loom's `Arc` has no `Weak`), so the race between a pool's drop and
//!   a thread's exit is argued in the `implementation` notes and exercised by
//!   `tests/stress.rs` rather than model-checked.

use crate::sync::process::{AtomicU64, Ordering::Relaxed};
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use loom::thread;

use crate::{Manage, Pool};

/// Hands out numbered objects and checks, when dropped with its pool, that
/// each was destroyed exactly once.
struct Ledger {
    state: Mutex<LedgerState>,
}

/// Ledgers made and checked: equal once every model execution has finished.
static LEDGERS_MADE: AtomicU64 = AtomicU64::new(0);
static LEDGERS_CHECKED: AtomicU64 = AtomicU64::new(0);

impl Ledger {
    fn new() -> Self {
        LEDGERS_MADE.fetch_add(1, Relaxed);
        Self {
            state: Mutex::default(),
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap();
        assert!(s.alive.is_empty(), "leaked {:?}", s.alive);
        assert_eq!(s.destroyed, s.next);
        LEDGERS_CHECKED.fetch_add(1, Relaxed);
    }
}

#[derive(Default)]
struct LedgerState {
    next: u32,
    alive: HashSet<u32>,
    destroyed: u32,
}

impl Manage for Ledger {
    type Item = u32;
    type Error = Infallible;

    fn create(&self) -> Result<u32, Infallible> {
        let mut s = self.state.lock().unwrap();
        s.next += 1;
        let id = s.next;
        s.alive.insert(id);
        Ok(id)
    }

    fn destroy(&self, id: u32) {
        let mut s = self.state.lock().unwrap();
        assert!(s.alive.remove(&id), "object {id} destroyed twice");
        s.destroyed += 1;
    }
}

/// Ids currently held by a guard, to catch an object handed out twice.
#[derive(Default)]
struct Holders(Mutex<HashSet<u32>>);

impl Holders {
    fn take(&self, id: u32) {
        assert!(self.0.lock().unwrap().insert(id), "object {id} held twice");
    }
    fn give(&self, id: u32) {
        assert!(self.0.lock().unwrap().remove(&id));
    }
}

fn pool(max_idle: usize) -> Arc<Pool<Ledger>> {
    Arc::new(
        Pool::builder(Ledger::new())
            .batch_size(1)
            .max_idle(max_idle)
            .build()
            .unwrap(),
    )
}

/// Gets `n` objects at once, then gives them all back.
fn burst(pool: &Pool<Ledger>, holders: &Holders, n: usize) {
    let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
    for g in &guards {
        holders.take(**g);
    }
    for g in guards {
        holders.give(*g);
    }
}

/// Runs `f` on a new model thread that hands its cache back before `join`
/// returns (see the module docs).
fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> thread::JoinHandle<T> {
    thread::spawn(move || {
        let out = f();
        crate::cache::thread::exit_now();
        out
    })
}

/// Checks the counts balance and lets the pool go; the ledger checks the
/// objects when the last reference drops.
fn finish(pool: Arc<Pool<Ledger>>) {
    let stats = pool.stats();
    assert_eq!(stats.live, 0);
    assert_eq!(stats.live + stats.idle, stats.existing());
    drop(pool);
}

fn run_model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.max_branches = 100_000;
    let made = LEDGERS_MADE.load(Relaxed);
    builder.check(f);
    let made = LEDGERS_MADE.load(Relaxed) - made;
    assert_eq!(LEDGERS_CHECKED.load(Relaxed), LEDGERS_MADE.load(Relaxed));
    println!("{name}: {made} executions checked");
}

#[test]
fn exchange_through_the_depot() {
    run_model("exchange_through_the_depot", || {
        let pool = pool(1);
        let holders = Arc::new(Holders::default());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let pool = Arc::clone(&pool);
                let holders = Arc::clone(&holders);
                // Three at once: both batches fill, the third put donates
                // a batch; with two threads one donation may be refused.
                spawn(move || burst(&pool, &holders, 3))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let stats = pool.stats();
        assert!(stats.idle_depot <= 1, "{stats:?}");
        finish(pool);
    });
}

#[test]
fn thread_exit_returns_the_cache() {
    run_model("thread_exit_returns_the_cache", || {
        let pool = pool(2);
        let holders = Arc::new(Holders::default());
        let worker = {
            let pool = Arc::clone(&pool);
            let holders = Arc::clone(&holders);
            spawn(move || burst(&pool, &holders, 2))
        };
        // Meanwhile another thread uses the pool too.
        let other = {
            let pool = Arc::clone(&pool);
            let holders = Arc::clone(&holders);
            spawn(move || burst(&pool, &holders, 1))
        };
        worker.join().unwrap();
        other.join().unwrap();
        // Both threads' cached objects went to the depot as they exited:
        // the depot holds two, whatever was created beyond that was
        // destroyed.
        let stats = pool.stats();
        assert_eq!(stats.idle_depot, 2, "{stats:?}");
        assert_eq!(stats.idle, 2, "{stats:?}");
        // Another thread reuses them without creating.
        let created = stats.created;
        let reuser = {
            let pool = Arc::clone(&pool);
            let holders = Arc::clone(&holders);
            spawn(move || burst(&pool, &holders, 2))
        };
        reuser.join().unwrap();
        assert_eq!(pool.stats().created, created);
        finish(pool);
    });
}

#[test]
fn objects_dropped_on_another_thread() {
    run_model("objects_dropped_on_another_thread", || {
        let pool = pool(1);
        let taker = {
            let pool = Arc::clone(&pool);
            spawn(move || {
                let a = pool.get_owned().unwrap();
                let b = pool.get_owned().unwrap();
                assert_ne!(*a, *b);
                (a, b)
            })
        };
        let (a, b) = taker.join().unwrap();
        // Freed on threads that did not take them: they join those threads'
        // caches, and go to the depot (or are destroyed past max_idle) as
        // the threads exit; meanwhile a third thread takes and returns one.
        let t1 = spawn(move || drop(a));
        let t2 = spawn(move || drop(b));
        let t3 = {
            let pool = Arc::clone(&pool);
            spawn(move || drop(pool.get().unwrap()))
        };
        for t in [t1, t2, t3] {
            t.join().unwrap();
        }
        let stats = pool.stats();
        assert!(stats.idle_depot <= 1, "{stats:?}");
        finish(pool);
    });
}

/// An owner thread runs `bursts` on a pool of `max_idle` 2 while another
/// thread runs `other` on the same pool; then the counts must balance.
fn owner_races(bursts: &'static [usize], other: fn(&Pool<Ledger>)) {
    let pool = pool(2);
    let holders = Arc::new(Holders::default());
    let owner = {
        let pool = Arc::clone(&pool);
        let holders = Arc::clone(&holders);
        spawn(move || {
            for &n in bursts {
                burst(&pool, &holders, n);
            }
        })
    };
    let other = {
        let pool = Arc::clone(&pool);
        spawn(move || other(&pool))
    };
    owner.join().unwrap();
    other.join().unwrap();
    finish(pool);
}

#[test]
fn cache_taken_while_its_owner_works() {
    run_model("cache_taken_while_its_owner_works", || {
        // The owner fills its cache, then keeps using it while the other
        // takes it if it is between accesses, or leaves it a flush request
        // if it is inside one.
        owner_races(&[2, 1], |pool| {
            pool.drain();
        });
    });
}

#[test]
fn critical_pressure_while_its_owner_works() {
    run_model("critical_pressure_while_its_owner_works", || {
        // An explicit hold: by default a single critical signal holds
        // nothing (the hold follows repeated signals), and what the owner
        // gives back after the drain may then stay in the depot.
        let pool = Arc::new(
            Pool::builder(Ledger::new())
                .batch_size(1)
                .max_idle(2)
                .pressure_hold(std::time::Duration::from_secs(60))
                .build()
                .unwrap(),
        );
        let holders = Arc::new(Holders::default());
        let owner = {
            let pool = Arc::clone(&pool);
            let holders = Arc::clone(&holders);
            spawn(move || {
                burst(&pool, &holders, 1);
                burst(&pool, &holders, 1);
            })
        };
        let signal = {
            let pool = Arc::clone(&pool);
            spawn(move || {
                pool.pressure(crate::pressure::Level::Critical);
            })
        };
        owner.join().unwrap();
        signal.join().unwrap();
        // Held at min_idle (0): nothing idle may stay in the depot.
        let stats = pool.stats();
        assert_eq!(stats.idle_depot, 0, "{stats:?}");
        finish(pool);
    });
}

#[test]
fn critical_pressure_without_a_hold_drains_a_busy_cache_late() {
    run_model(
        "critical_pressure_without_a_hold_drains_a_busy_cache_late",
        || {
            // The default: a single critical signal holds nothing. A cache
            // whose owner was inside an access when the signal came is asked
            // to flush; what it held must not go to the depot when the owner
            // serves that (it did, and stayed idle there until a pass).
            let pool = Arc::new(
                Pool::builder(Ledger::new())
                    .batch_size(1)
                    .max_idle(2)
                    .build()
                    .unwrap(),
            );
            let holders = Arc::new(Holders::default());
            let signal = {
                let pool = Arc::clone(&pool);
                spawn(move || {
                    pool.pressure(crate::pressure::Level::Critical);
                })
            };
            let owner = {
                let pool = Arc::clone(&pool);
                let holders = Arc::clone(&holders);
                spawn(move || {
                    let held = pool.get().unwrap();
                    holders.take(*held);
                    burst(&pool, &holders, 1);
                    signal.join().unwrap();
                    // An access after the signal: a flush request is served.
                    holders.give(*held);
                    drop(held);
                    let stats = pool.stats();
                    assert_eq!(stats.idle_depot, 0, "{stats:?}");
                })
            };
            owner.join().unwrap();
            finish(pool);
        },
    );
}

/// Asks every owned cache of `pool` to give back `n` objects, as a pass
/// does for a busy cache that held them unused through two intervals.
fn request_trims(pool: &Pool<Ledger>, n: usize) {
    pool.shared.slots.for_each(|_, slot| {
        if slot.is_owned() {
            slot.all_unused_for_test();
            slot.request_trim(n, 0);
        }
    });
}

#[test]
fn trim_requested_while_its_owner_works() {
    run_model("trim_requested_while_its_owner_works", || {
        // The owner fills its cache, then keeps using part of it while a
        // trim is asked of it: it serves the request at an access.
        owner_races(&[2, 1, 1], |pool| request_trims(pool, 1));
    });
}

#[test]
fn trim_overtaken_by_a_take_back() {
    run_model("trim_overtaken_by_a_take_back", || {
        // A trim request, then the whole cache taken (or asked to flush),
        // in either order with the owner's accesses.
        owner_races(&[2, 1], |pool| {
            request_trims(pool, 1);
            pool.drain();
        });
    });
}

#[test]
fn cache_taken_at_max_live_while_its_owner_works() {
    run_model("cache_taken_at_max_live_while_its_owner_works", || {
        // A `get` at `max_live` takes another thread's cache, waiting out
        // an access under way rather than leaving a flush request: loom's
        // cell checks catch a take that overlaps the owner's access. Once
        // the owner's last put has returned, the take must find its object.
        use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let pool = pool(2);
        let holders = Arc::new(Holders::default());
        let cached = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let owner = {
            let (pool, holders) = (Arc::clone(&pool), Arc::clone(&holders));
            let (cached, done) = (Arc::clone(&cached), Arc::clone(&done));
            spawn(move || {
                burst(&pool, &holders, 1);
                burst(&pool, &holders, 1);
                cached.store(true, SeqCst);
                // Stay (its exit would hand the cache over) until the
                // other has looked.
                while !done.load(SeqCst) {
                    thread::yield_now();
                }
            })
        };
        let was_cached = cached.load(SeqCst);
        let taken = pool.shared.steal_cache(None);
        done.store(true, SeqCst);
        if was_cached {
            assert_eq!(taken.iter().map(Vec::len).sum::<usize>(), 1);
        }
        for batch in &taken {
            for id in batch {
                // Not held by anyone: `take` panics on a double hand-out.
                holders.take(*id);
                holders.give(*id);
            }
        }
        let refused = pool.shared.donate_all(taken);
        pool.shared
            .destroy_batches(refused, crate::callbacks::Site::Caller);
        owner.join().unwrap();
        finish(pool);
    });
}
