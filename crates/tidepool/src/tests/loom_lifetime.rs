//! Loom models of owned guards outliving the pool handle (`shared/lifetime.rs`):
//! the handle is dropped while guards end on other threads. Each model
//! checks that no object is destroyed while a guard holds it, that each is
//! destroyed exactly once, and that the pool is gone (its manager dropped)
//! by the time every thread is done.
//!
//! Run with `bin/loom.sh`. As in `loom_cache.rs`, pools are used only from
//! spawned threads, each of which ends with `exit_now()`; the main model
//! thread only drops the handle, which needs no thread-local of its own.
//! A thread's exit flush reaches the pool through a `std` `Weak`, whose
//! synchronisation loom cannot see, so the enders exit only once every end
//! and the handle's drop are done (`Gate`): the models race the guards'
//! ends against each other and against the handle's drop; the exits come
//! after, and find the pool freed.

use crate::sync::process::{AtomicU64, Ordering::Relaxed};
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

// The ledger's lock is loom's, so that a model can switch threads inside a
// `destroy` (between an end's count and the rest of its tail).
use loom::sync::Mutex;

use loom::thread;

use crate::{Manage, Pool};

/// Numbered objects; checks, when dropped with its pool, that each was
/// destroyed exactly once, and counts itself freed.
struct Ledger {
    state: Arc<Mutex<LedgerState>>,
}

#[derive(Default)]
struct LedgerState {
    next: u32,
    alive: HashSet<u32>,
    held: HashSet<u32>,
    destroyed: u32,
    freed: bool,
}

/// Ledgers made and freed: equal once every model execution has finished.
static MADE: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

impl Drop for Ledger {
    fn drop(&mut self) {
        let mut s = self.state.lock().unwrap();
        assert!(s.alive.is_empty(), "leaked {:?}", s.alive);
        assert_eq!(s.destroyed, s.next);
        s.freed = true;
        FREED.fetch_add(1, Relaxed);
    }
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
        assert!(!s.held.contains(&id), "object {id} destroyed while held");
        assert!(s.alive.remove(&id), "object {id} destroyed twice");
        s.destroyed += 1;
    }
}

fn pool(batch: usize, max_idle: usize) -> (Arc<Pool<Ledger>>, Arc<Mutex<LedgerState>>) {
    MADE.fetch_add(1, Relaxed);
    let state = Arc::new(Mutex::new(LedgerState::default()));
    let pool = Pool::builder(Ledger {
        state: Arc::clone(&state),
    })
    .batch_size(batch)
    .max_idle(max_idle)
    .build()
    .unwrap();
    (Arc::new(pool), state)
}

fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> thread::JoinHandle<T> {
    thread::spawn(move || {
        let out = f();
        crate::cache::thread::exit_now();
        out
    })
}

/// Holds model threads back from exiting until every end and the handle's
/// drop are done (blocking, not spinning, to keep the models small).
struct Gate {
    ended: (loom::sync::mpsc::Sender<()>, loom::sync::mpsc::Receiver<()>),
    go: Vec<loom::sync::mpsc::Sender<()>>,
}

impl Gate {
    fn new() -> Self {
        Self {
            ended: loom::sync::mpsc::channel(),
            go: Vec::new(),
        }
    }

    /// Runs `f` on a new model thread that reports its end done, then
    /// waits for [`open`](Gate::open) before its exit flush.
    fn spawn(&mut self, f: impl FnOnce() + 'static) -> thread::JoinHandle<()> {
        let ended = self.ended.0.clone();
        // A channel, not a `Notify`: loom lets a `Notify` wake spuriously.
        let (go, wait) = loom::sync::mpsc::channel();
        self.go.push(go);
        thread::spawn(move || {
            f();
            ended.send(()).unwrap();
            wait.recv().unwrap();
            crate::cache::thread::exit_now();
        })
    }

    /// Waits for every spawned end, then lets the threads exit.
    fn open(self) {
        for _ in &self.go {
            self.ended.1.recv().unwrap();
        }
        for go in &self.go {
            go.send(()).unwrap();
        }
    }
}

fn run_model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.max_branches = 100_000;
    let made = MADE.load(Relaxed);
    builder.check(f);
    assert_eq!(FREED.load(Relaxed), MADE.load(Relaxed));
    println!("{name}: {} executions checked", MADE.load(Relaxed) - made);
}

#[test]
fn handle_dropped_while_a_guard_ends_elsewhere() {
    run_model("handle_dropped_while_a_guard_ends_elsewhere", || {
        let (pool, state) = pool(1, 1);
        let taker = {
            let pool = Arc::clone(&pool);
            let state = Arc::clone(&state);
            spawn(move || {
                let g = pool.get_owned().unwrap();
                state.lock().unwrap().held.insert(*g);
                g
            })
        };
        let g = taker.join().unwrap();
        let mut gate = Gate::new();
        let ender = {
            let state = Arc::clone(&state);
            gate.spawn(move || {
                // Through the guard's pool, maybe after the handle is gone.
                assert_eq!(g.pool().stats().live, 1);
                state.lock().unwrap().held.remove(&*g);
                drop(g);
            })
        };
        drop(pool);
        gate.open();
        ender.join().unwrap();
        assert!(state.lock().unwrap().freed, "the last party freed the pool");
    });
}

#[test]
fn handle_dropped_while_two_guards_end() {
    run_model("handle_dropped_while_two_guards_end", || {
        let (pool, state) = pool(1, 1);
        let taker = {
            let pool = Arc::clone(&pool);
            spawn(move || (pool.get_owned().unwrap(), pool.get_owned().unwrap()))
        };
        let (a, b) = taker.join().unwrap();
        // One is put back, the other discarded (destroyed in its end).
        let mut gate = Gate::new();
        let enders = [gate.spawn(move || drop(a)), gate.spawn(move || b.discard())];
        drop(pool);
        gate.open();
        for e in enders {
            e.join().unwrap();
        }
        assert!(state.lock().unwrap().freed, "the last party freed the pool");
    });
}

/// The last end's tail: with batches of one and a depot of one, the 4th
/// put of a thread donates a batch the depot refuses, and destroys it
/// *after* counting its own return. The handle's drop racing that tail
/// must not free the pool (and drop the ledger) under it.
#[test]
fn handle_dropped_while_the_last_end_destroys_a_refused_batch() {
    run_model(
        "handle_dropped_while_the_last_end_destroys_a_refused_batch",
        || {
            let (pool, state) = pool(1, 1);
            let taker = {
                let pool = Arc::clone(&pool);
                spawn(move || {
                    (0..4)
                        .map(|_| pool.get_owned().unwrap())
                        .collect::<Vec<_>>()
                })
            };
            let guards = taker.join().unwrap();
            let mut gate = Gate::new();
            let ender = gate.spawn(move || drop(guards));
            drop(pool);
            gate.open();
            ender.join().unwrap();
            assert!(state.lock().unwrap().freed, "the last party freed the pool");
        },
    );
}

/// An unmarked end (`lifetime`, unmarked ends): the ender remembers its
/// cache (a get) and registers its marker (`h`'s end, marked), so that its
/// drop of `g` caches the object without marking itself, counting it back
/// as its last touch of the pool, then looks for parked pools. The
/// handle's drop races both: whoever is last frees the pool, and never
/// under an end.
#[test]
fn handle_dropped_while_a_guard_ends_unmarked() {
    run_model("handle_dropped_while_a_guard_ends_unmarked", || {
        // Batches of 4: `g` goes into the loaded batch, not through a swap.
        let (pool, state) = pool(4, 4);
        let taker = {
            let pool = Arc::clone(&pool);
            let state = Arc::clone(&state);
            spawn(move || {
                let (g, h) = (pool.get_owned().unwrap(), pool.get_owned().unwrap());
                state.lock().unwrap().held.insert(*g);
                (g, h)
            })
        };
        let (g, h) = taker.join().unwrap();
        let mut gate = Gate::new();
        let ender = {
            let state = Arc::clone(&state);
            gate.spawn(move || {
                // A get through the guard's pool (legal after the close: `g`
                // keeps it alive) makes this thread remember its cache.
                drop(g.pool().get().unwrap());
                drop(h);
                state.lock().unwrap().held.remove(&*g);
                drop(g);
            })
        };
        drop(pool);
        gate.open();
        ender.join().unwrap();
        assert!(state.lock().unwrap().freed, "the last party freed the pool");
    });
}
