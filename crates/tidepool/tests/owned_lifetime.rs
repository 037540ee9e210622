//! Owned guards outliving the pool handle (`src/lifetime.rs`): the pool's
//! state lives until the last of {handle, owned guards} is gone, without a
//! reference count per guard. Every test checks with the counting manager
//! that each object is destroyed exactly once (or detached), that no object
//! is destroyed while a guard holds it, and that everything is gone by the
//! time the last party lets go.
//!
//! The random runs print their seed; set `TIDEPOOL_STRESS_SEED` to replay one.

mod common;

use std::cell::RefCell;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::channel;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use common::{Counting, Held, Ledger, Rng};
use tidepool::{Manage, Pool};

type P = Pool<Counting>;

fn pool(batch: usize, max_idle: usize) -> (Arc<P>, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    let pool = Pool::builder(manager)
        .batch_size(batch)
        .max_idle(max_idle)
        .background(false)
        .build()
        .unwrap();
    (Arc::new(pool), ledger)
}

fn seed() -> u64 {
    let seed = std::env::var("TIDEPOOL_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("TIDEPOOL_STRESS_SEED={seed}");
    seed
}

#[test]
fn owned_guards_keep_the_pool_after_its_handle_is_dropped() {
    let (pool, ledger) = pool(2, 4);
    let mut guards: Vec<Held> = (0..10)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    drop(pool);
    // The state is all there: stats, and gets through a guard's pool.
    let s = guards[0].pool().stats();
    assert_eq!((s.created, s.live), (10, 10), "{s:?}");
    {
        let extra = guards[0].pool().get().unwrap();
        assert!(!guards.iter().any(|g| g.id() == extra.id()));
    }
    // Half of the guards end on other threads, one way or another.
    let last = guards.pop().unwrap();
    let (tx, rx) = channel::<Held>();
    let ender = thread::spawn(move || {
        for (i, g) in rx.into_iter().enumerate() {
            match i % 3 {
                0 => drop(g),
                1 => g.discard(),
                _ => drop(g.detach()),
            }
        }
    });
    for g in guards.drain(..5) {
        tx.send(g).unwrap();
    }
    drop(tx);
    ender.join().unwrap();
    drop(guards);
    // One guard left: the pool is still whole, and counts it.
    let s = last.pool().stats();
    assert_eq!(s.live, 1, "{s:?}");
    assert!(ledger.existing_ids().contains(&last.id()));
    ledger.assert_no_errors();
    drop(last);
    // The last guard took the pool with it: everything destroyed once.
    ledger.assert_all_accounted();
    let c = ledger.counts();
    assert_eq!(c.created, 11);
    assert_eq!(c.destroyed + c.detached, 11);
}

#[test]
fn pool_without_guards_out_is_freed_by_its_handle_at_once() {
    let (pool, ledger) = pool(4, 16);
    let guards: Vec<Held> = (0..8)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    drop(guards);
    drop(pool);
    // No deferral when nothing is out.
    ledger.assert_all_accounted();
    assert_eq!(ledger.counts().destroyed, 8);
}

/// `Pool::put` gives an owned guard's object back as its drop would: it is
/// recycled into the calling thread's cache and taken again by the next
/// get, on the thread that took it or on another.
#[test]
fn put_through_the_handle_caches_the_object_as_a_drop_does() {
    let (pool, ledger) = pool(4, 16);
    let held: Vec<Held> = (0..3)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    let ids: Vec<u64> = held.iter().map(Held::id).collect();
    for h in held {
        h.put_into(&pool);
    }
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle), (3, 0, 3), "{s:?}");
    assert_eq!(ledger.counts().recycled, 3);
    // This thread's cache: the last one in comes out first.
    let again = Held::new(pool.get_owned().unwrap());
    assert_eq!(again.id(), ids[2]);
    // Taken here, put back on another thread.
    let p = Arc::clone(&pool);
    thread::spawn(move || again.put_into(&p)).join().unwrap();
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle), (3, 0, 3), "{s:?}");
    drop(pool);
    ledger.assert_all_accounted();
    assert_eq!(ledger.counts().destroyed, 3);
}

/// A guard put through another pool's handle goes back to its own pool.
#[test]
fn put_of_another_pools_guard_goes_back_to_its_own_pool() {
    let (a, ledger_a) = pool(4, 16);
    let (b, ledger_b) = pool(4, 16);
    let from_b = Held::new(b.get_owned().unwrap());
    from_b.put_into(&a);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.created, sa.idle), (0, 0), "{sa:?}");
    assert_eq!((sb.created, sb.live, sb.idle), (1, 0, 1), "{sb:?}");
    drop((a, b));
    ledger_a.assert_all_accounted();
    ledger_b.assert_all_accounted();
    assert_eq!(ledger_b.counts().destroyed, 1);
}

/// With the handle gone, a guard's pool (an alias valid while that guard is
/// out) may take another guard back; the last guard to end frees the pool.
#[test]
fn put_through_a_guards_pool_after_the_handle_is_dropped() {
    let (pool, ledger) = pool(2, 8);
    let first = Held::new(pool.get_owned().unwrap());
    let second = Held::new(pool.get_owned().unwrap());
    drop(pool);
    second.put_into(first.pool());
    let s = first.pool().stats();
    assert_eq!((s.created, s.live, s.idle), (2, 1, 1), "{s:?}");
    assert_eq!(ledger.counts().destroyed, 0, "the pool lives on");
    drop(first);
    ledger.assert_all_accounted();
    assert_eq!(ledger.counts().destroyed, 2);
}

/// A put while the thread panics (a destructor running during unwinding)
/// destroys the object, as a guard dropped then does: it may be
/// half-updated.
#[test]
fn put_while_the_thread_panics_destroys_the_object() {
    struct PutOnDrop(Option<Held>, Arc<P>);
    impl Drop for PutOnDrop {
        fn drop(&mut self) {
            if let Some(h) = self.0.take() {
                h.put_into(&self.1);
            }
        }
    }
    let (pool, ledger) = pool(4, 16);
    let held = Held::new(pool.get_owned().unwrap());
    let p = Arc::clone(&pool);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _put = PutOnDrop(Some(held), p);
        panic!("{}: unwinding through a put", common::INJECTED);
    }));
    assert!(unwound.is_err());
    let s = pool.stats();
    assert_eq!(
        (s.created, s.live, s.idle, s.destroyed),
        (1, 0, 0, 1),
        "{s:?}"
    );
    drop(pool);
    ledger.assert_all_accounted();
    assert_eq!(ledger.counts().destroyed, 1);
}

/// Other threads busy ending owned guards of *other* pools must not delay a
/// pool whose own guards are all back: its objects are destroyed by the drop
/// of its handle, every time.
#[test]
fn busy_guards_of_other_pools_do_not_delay_a_pool_drop() {
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let (other, _ledger) = pool(2, 8);
                let mut n = 0u64;
                while !stop.load(SeqCst) {
                    let gs: Vec<_> = (0..3).map(|_| other.get_owned().unwrap()).collect();
                    drop(gs);
                    n += 1;
                }
                n
            })
        })
        .collect();
    for _ in 0..200 {
        let (pool, ledger) = pool(2, 8);
        let gs: Vec<Held> = (0..5)
            .map(|_| Held::new(pool.get_owned().unwrap()))
            .collect();
        drop(gs);
        drop(pool);
        ledger.assert_all_accounted();
    }
    stop.store(true, SeqCst);
    for b in busy {
        assert!(b.join().unwrap() > 0);
    }
}

/// The stress test: the handle is dropped while many threads end owned
/// guards (drop, discard, detach, and gets through a guard's pool), over
/// and over. Each round checks every object was destroyed exactly once or
/// detached, none while held, and all by the time every thread is done.
#[test]
fn handle_dropped_while_many_threads_end_guards() {
    let threads = 8;
    let rounds = if cfg!(miri) { 3 } else { 300 };
    let per_thread = if cfg!(miri) { 3 } else { 12 };
    let mut rng = Rng::new(seed());
    for round in 0..rounds {
        let batch = 1 + rng.below(4);
        let (pool, ledger) = pool(batch, batch * (1 + rng.below(3)));
        let start = Arc::new(Barrier::new(threads + 1));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let guards: Vec<Held> = (0..per_thread)
                    .map(|_| Held::new(pool.get_owned().unwrap()))
                    .collect();
                let start = Arc::clone(&start);
                let mut rng = Rng::new(rng.next_u64() ^ t as u64);
                thread::spawn(move || {
                    start.wait();
                    for g in guards {
                        match rng.below(8) {
                            0 => g.discard(),
                            1 => drop(g.detach()),
                            2 => {
                                // A get and put through the guard's pool,
                                // maybe after the handle is gone.
                                let p = g.pool();
                                drop(p.get().unwrap());
                                drop(g);
                            }
                            _ => drop(g),
                        }
                        if rng.below(4) == 0 {
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        start.wait();
        if round % 2 == 0 {
            thread::yield_now();
        }
        drop(pool);
        for w in workers {
            w.join().expect("worker panicked");
        }
        ledger.assert_all_accounted();
    }
}

thread_local! {
    static STASH: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// The last guard ends in a thread-local destructor, when this thread may
/// have given back its marker: the end is counted in the pool instead, and
/// still frees the pool.
#[test]
fn last_guard_ending_in_a_tls_destructor_frees_the_pool() {
    for _ in 0..20 {
        let (pool, ledger) = pool(2, 4);
        let guards: Vec<Held> = (0..3)
            .map(|_| Held::new(pool.get_owned().unwrap()))
            .collect();
        let (ready_tx, ready_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let t = thread::spawn(move || {
            // An end first, so the thread has a marker to give back.
            let mut guards = guards;
            drop(guards.pop());
            STASH.with(|s| s.borrow_mut().extend(guards));
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        ready_rx.recv().unwrap();
        drop(pool);
        assert!(ledger.counts().destroyed < 3, "guards still out");
        go_tx.send(()).unwrap();
        t.join().unwrap();
        ledger.assert_all_accounted();
    }
}

/// A manager whose `recycle` drops the last handle of its own pool: the
/// close runs inside the end of an owned guard of that very pool, and the
/// pool is freed when that end is done, not before.
struct DropsItsPool {
    handle: Arc<Mutex<Option<Arc<Pool<DropsItsPool>>>>>,
    created: Arc<AtomicU64>,
    destroyed: Arc<AtomicU64>,
}

impl Manage for DropsItsPool {
    type Item = u64;
    type Error = Infallible;

    fn create(&self) -> Result<u64, Infallible> {
        Ok(self.created.fetch_add(1, SeqCst))
    }

    fn recycle(&self, _: &mut u64) -> bool {
        let handle = self.handle.lock().unwrap().take();
        drop(handle);
        true
    }

    fn destroy(&self, _: u64) {
        self.destroyed.fetch_add(1, SeqCst);
    }
}

#[test]
fn the_last_handle_dropped_inside_an_end_frees_the_pool_after_it() {
    for on_other_thread in [false, true] {
        let handle = Arc::new(Mutex::new(None));
        let created = Arc::new(AtomicU64::new(0));
        let destroyed = Arc::new(AtomicU64::new(0));
        let pool = Arc::new(
            Pool::builder(DropsItsPool {
                handle: Arc::clone(&handle),
                created: Arc::clone(&created),
                destroyed: Arc::clone(&destroyed),
            })
            .background(false)
            .build()
            .unwrap(),
        );
        let a = pool.get_owned().unwrap();
        let b = pool.get_owned().unwrap();
        *handle.lock().unwrap() = Some(pool);
        // `a`'s end drops the handle (in `recycle`): `b` is still out.
        drop(a);
        assert!(handle.lock().unwrap().is_none());
        assert_eq!(destroyed.load(SeqCst), 0);
        assert_eq!(b.pool().stats().live, 1);
        if on_other_thread {
            thread::spawn(move || drop(b)).join().unwrap();
        } else {
            drop(b);
        }
        assert_eq!(created.load(SeqCst), 2);
        assert_eq!(destroyed.load(SeqCst), 2, "freed with the last guard");
    }
}

/// Parks the thread in `destroy` once armed, and records when the pool
/// (which owns the manager) is freed.
struct ParksInDestroy {
    armed: Arc<AtomicBool>,
    parked: Mutex<std::sync::mpsc::Sender<()>>,
    resume: Mutex<std::sync::mpsc::Receiver<()>>,
    freed: Arc<AtomicBool>,
    destroyed: Arc<AtomicU64>,
}

impl Manage for ParksInDestroy {
    type Item = u64;
    type Error = Infallible;

    fn create(&self) -> Result<u64, Infallible> {
        Ok(0)
    }

    fn destroy(&self, _: u64) {
        self.destroyed.fetch_add(1, SeqCst);
        if self.armed.swap(false, SeqCst) {
            self.parked.lock().unwrap().send(()).unwrap();
            self.resume.lock().unwrap().recv().unwrap();
            assert!(
                !self.freed.load(SeqCst),
                "pool freed while an end was still inside it"
            );
        }
    }
}

impl Drop for ParksInDestroy {
    fn drop(&mut self) {
        self.freed.store(true, SeqCst);
    }
}

/// The last guard's end is counted before it is done with the pool: with a
/// full depot, its put donates a batch, the depot refuses it, and the put
/// destroys the batch *after* counting the return. The handle dropped right
/// then must not free the pool under it; the end frees it when it leaves.
#[test]
fn handle_dropped_while_the_last_end_is_in_its_tail() {
    let armed = Arc::new(AtomicBool::new(false));
    let freed = Arc::new(AtomicBool::new(false));
    let destroyed = Arc::new(AtomicU64::new(0));
    let (parked_tx, parked_rx) = channel();
    let (resume_tx, resume_rx) = channel();
    let pool = Arc::new(
        Pool::builder(ParksInDestroy {
            armed: Arc::clone(&armed),
            parked: Mutex::new(parked_tx),
            resume: Mutex::new(resume_rx),
            freed: Arc::clone(&freed),
            destroyed: Arc::clone(&destroyed),
        })
        .batch_size(1)
        .max_idle(1)
        .background(false)
        .build()
        .unwrap(),
    );
    let guards: Vec<_> = (0..4).map(|_| pool.get_owned().unwrap()).collect();
    armed.store(true, SeqCst);
    let ender = thread::spawn(move || {
        // Batches of one: the 1st and 2nd fill this thread's cache, the 3rd
        // donates one to the depot (now full), the 4th donates one that the
        // depot refuses, and destroys it after counting its own return.
        for g in guards {
            drop(g);
        }
    });
    parked_rx.recv().unwrap();
    drop(pool);
    assert!(
        !freed.load(SeqCst),
        "the handle freed the pool while the last end was inside it"
    );
    resume_tx.send(()).unwrap();
    ender.join().expect("the end saw the pool freed under it");
    assert!(freed.load(SeqCst), "the last end freed the pool");
    assert_eq!(destroyed.load(SeqCst), 4);
}
