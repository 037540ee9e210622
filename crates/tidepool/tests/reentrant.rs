//! Managers that use the pool they manage: the pool promises to call them
//! outside every lock and never with a thread cache borrowed, so they may
//! `get`, `put`, `trim`, `drain` and read `stats` from any method, on any
//! path (cache put, refused donation, trim, drain, thread exit, pool drop).
//! A violation shows up as a deadlock (the depot lock is not re-entrant),
//! a double hand-out, or counts that do not balance.

use std::cell::Cell;
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;

use tidepool::{Manage, Pool};

thread_local! {
    /// Depth of nested manager calls on this thread, to bound the recursion.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

#[derive(Default)]
struct Book {
    next: AtomicU64,
    created: AtomicU64,
    destroyed: AtomicU64,
    reentered: AtomicU64,
    alive: Mutex<HashSet<u64>>,
    held: Mutex<HashSet<u64>>,
    errors: Mutex<Vec<String>>,
}

struct Reentrant {
    me: Arc<OnceLock<Weak<Pool<Reentrant>>>>,
    book: Arc<Book>,
}

impl Reentrant {
    /// Uses the pool from inside a manager call, one level deep.
    fn reenter(&self) {
        let Some(pool) = self.me.get().and_then(Weak::upgrade) else {
            return; // the pool is being dropped
        };
        if DEPTH.with(Cell::get) > 0 {
            return;
        }
        DEPTH.with(|d| d.set(1));
        self.book.reentered.fetch_add(1, SeqCst);
        let s = pool.stats();
        if s.idle_depot > pool.config().max_idle() as u64 {
            self.book
                .errors
                .lock()
                .unwrap()
                .push(format!("depot over max_idle: {s:?}"));
        }
        let a = pool.get_owned().unwrap();
        let b = pool.get_owned().unwrap();
        for id in [*a, *b] {
            if !self.book.held.lock().unwrap().insert(id) {
                self.book
                    .errors
                    .lock()
                    .unwrap()
                    .push(format!("object {id} handed out while held"));
            }
        }
        for id in [*a, *b] {
            self.book.held.lock().unwrap().remove(&id);
        }
        drop(a);
        b.discard();
        pool.reclaim_unused();
        DEPTH.with(|d| d.set(0));
        // Dropping the upgraded `Arc` may drop the pool here, if the test
        // let go of it meanwhile: fine, nothing else is borrowed.
    }
}

impl Manage for Reentrant {
    type Item = u64;
    type Error = Infallible;

    fn create(&self) -> Result<u64, Infallible> {
        let id = self.book.next.fetch_add(1, SeqCst);
        self.book.created.fetch_add(1, SeqCst);
        self.book.alive.lock().unwrap().insert(id);
        if let Some(pool) = self.me.get().and_then(Weak::upgrade) {
            let _ = pool.stats();
        }
        Ok(id)
    }

    fn recycle(&self, _: &mut u64) -> bool {
        self.reenter();
        true
    }

    fn destroy(&self, id: u64) {
        if !self.book.alive.lock().unwrap().remove(&id) {
            self.book
                .errors
                .lock()
                .unwrap()
                .push(format!("object {id} destroyed twice"));
        }
        self.book.destroyed.fetch_add(1, SeqCst);
        self.reenter();
    }
}

fn pool(batch: usize, max_idle: usize) -> (Arc<Pool<Reentrant>>, Arc<Book>) {
    let me = Arc::new(OnceLock::new());
    let book = Arc::new(Book::default());
    let pool = Arc::new(
        Pool::builder(Reentrant {
            me: Arc::clone(&me),
            book: Arc::clone(&book),
        })
        .batch_size(batch)
        .max_idle(max_idle)
        .background(false)
        .build()
        .unwrap(),
    );
    me.set(Arc::downgrade(&pool)).ok().unwrap();
    (pool, book)
}

fn check_balanced(book: &Book) {
    assert!(
        book.errors.lock().unwrap().is_empty(),
        "{:?}",
        book.errors.lock().unwrap()
    );
    assert_eq!(
        book.created.load(SeqCst),
        book.destroyed.load(SeqCst),
        "leaked: {:?}",
        book.alive.lock().unwrap()
    );
    assert!(book.alive.lock().unwrap().is_empty());
}

#[test]
fn a_manager_may_use_its_own_pool_on_every_path() {
    let (pool, book) = pool(2, 2);
    // Puts (recycle), refused donations (destroy in put_slow), discards.
    for round in 0..20 {
        let guards: Vec<_> = (0..3 + round % 5).map(|_| pool.get().unwrap()).collect();
        drop(guards);
        if round % 3 == 0 {
            pool.get().unwrap().discard();
        }
        if round % 4 == 0 {
            pool.reclaim_unused();
        }
        if round % 7 == 0 {
            pool.drain();
        }
        let s = pool.stats();
        assert_eq!(s.live, 0, "{s:?}");
        assert_eq!(s.live + s.idle, s.existing(), "{s:?}");
        assert_eq!(s.created, book.created.load(SeqCst));
        assert_eq!(s.destroyed, book.destroyed.load(SeqCst));
    }
    assert!(book.reentered.load(SeqCst) > 0);
    // Thread exit with a full depot: destroy runs in the TLS destructor.
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        let guards: Vec<_> = (0..6).map(|_| p.get_owned().unwrap()).collect();
        drop(guards);
    })
    .join()
    .unwrap();
    let s = pool.stats();
    assert_eq!(s.live, 0, "{s:?}");
    assert!(s.idle_depot <= 2, "{s:?}");
    assert!(
        s.idle_cached() <= 4,
        "only this thread's cache is left: {s:?}"
    );
    assert_eq!(s.destroyed, book.destroyed.load(SeqCst));
    // Pool drop: the manager finds its pool gone and does nothing.
    drop(pool);
    check_balanced(&book);
}

#[test]
fn a_manager_may_use_its_own_pool_from_many_threads() {
    let (pool, book) = pool(1, 2);
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let p = Arc::clone(&pool);
            thread::spawn(move || {
                // Fewer rounds under miri (bin/sanitize.sh), still with drains.
                let rounds = if cfg!(miri) { 24 } else { 200 };
                for i in 0..rounds {
                    let guards: Vec<_> = (0..1 + i % 4).map(|_| p.get_owned().unwrap()).collect();
                    drop(guards);
                    if i % (rounds / 4) == 0 {
                        p.drain();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.live, 0, "{s:?}");
    assert_eq!(s.idle, s.idle_depot, "{s:?}");
    drop(pool);
    check_balanced(&book);
}
