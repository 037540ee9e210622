//! The pool core calls the batch forms of `Manage`: a miss with a burst
//! configured refills through one `create_batch`, a teardown of a batch
//! goes through one `destroy_batch`, a purge of a batch through one
//! `purge_batch`; a panicking `destroy_batch` or `purge_batch` leaves every
//! count exact and every object destroyed exactly once.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use common::{panic_text, Counting, CreateFailed, Ledger, Obj, INJECTED};
use tidepool::{Manage, Pool, Stats};

/// A [`Counting`] manager that records its batch calls, and can make
/// `destroy_batch` or `purge_batch` panic (after doing all their work, as
/// the contract asks: nothing is left behind).
#[derive(Debug)]
struct Batching {
    inner: Counting,
    calls: Arc<Calls>,
}

#[derive(Debug, Default)]
struct Calls {
    create_batch: Mutex<Vec<usize>>,
    destroy_batch: Mutex<Vec<usize>>,
    purge_batch: Mutex<Vec<usize>>,
    panic_destroy_batch: AtomicBool,
    panic_purge_batch: AtomicBool,
    destroy_batch_panics: AtomicU64,
}

impl Batching {
    fn new() -> (Self, Arc<Ledger>, Arc<Calls>) {
        let (inner, ledger) = Counting::new();
        let calls = Arc::new(Calls::default());
        let m = Self {
            inner,
            calls: Arc::clone(&calls),
        };
        (m, ledger, calls)
    }
}

impl Manage for Batching {
    type Item = Obj;
    type Error = CreateFailed;

    fn create(&self) -> Result<Obj, CreateFailed> {
        self.inner.create()
    }

    fn purge(&self, item: &mut Obj) {
        self.inner.purge(item)
    }

    fn destroy(&self, item: Obj) {
        self.inner.destroy(item)
    }

    fn create_batch(&self, n: usize) -> Result<Vec<Obj>, CreateFailed> {
        self.calls.create_batch.lock().unwrap().push(n);
        (0..n).map(|_| self.inner.create()).collect()
    }

    fn destroy_batch(&self, items: Vec<Obj>) {
        self.calls.destroy_batch.lock().unwrap().push(items.len());
        for item in items {
            self.inner.destroy(item);
        }
        if self.calls.panic_destroy_batch.swap(false, SeqCst) {
            self.calls.destroy_batch_panics.fetch_add(1, SeqCst);
            panic!("{INJECTED}: destroy_batch");
        }
    }

    fn purge_batch(&self, items: &mut [Obj]) {
        self.calls.purge_batch.lock().unwrap().push(items.len());
        for item in items.iter_mut() {
            self.inner.purge(item);
        }
        if self.calls.panic_purge_batch.swap(false, SeqCst) {
            panic!("{INJECTED}: purge_batch");
        }
    }
}

fn balanced(s: &Stats) {
    assert_eq!(s.live + s.idle, s.existing(), "{s:#?}");
}

#[test]
fn a_miss_with_a_burst_refills_the_cache_with_one_create_batch() {
    let (m, ledger, calls) = Batching::new();
    let pool = Pool::builder(m)
        .batch_size(8)
        .burst(8)
        .background(false)
        .build()
        .unwrap();
    let held: Vec<_> = (0..8).map(|_| pool.get().unwrap()).collect();
    assert_eq!(*calls.create_batch.lock().unwrap(), vec![8]);
    let s = pool.stats();
    assert_eq!((s.created, s.misses, s.hits), (8, 1, 7), "{s:#?}");
    assert_eq!(ledger.counts().create_calls, 8);
    drop(held);
    balanced(&pool.stats());
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_burst_never_passes_max_live() {
    let (m, ledger, calls) = Batching::new();
    let pool = Pool::builder(m)
        .batch_size(4)
        .burst(4)
        .max_live(6)
        .background(false)
        .build()
        .unwrap();
    let held: Vec<_> = (0..6).map(|_| pool.get().unwrap()).collect();
    assert_eq!(
        *calls.create_batch.lock().unwrap(),
        vec![4, 2],
        "the second burst gets only the room left"
    );
    assert!(matches!(
        pool.get().map(drop),
        Err(tidepool::Error::Exhausted { limit: 6 })
    ));
    assert_eq!(ledger.max_existing(), 6);
    drop(held);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn the_default_burst_creates_one_at_a_time() {
    let (m, ledger, calls) = Batching::new();
    let pool = Pool::builder(m).background(false).build().unwrap();
    drop(pool.get().unwrap());
    assert!(calls.create_batch.lock().unwrap().is_empty());
    assert_eq!(pool.stats().created, 1);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_burst_past_batch_size_is_refused_naming_the_field() {
    let (m, _, _) = Batching::new();
    let e = Pool::builder(m).batch_size(4).burst(5).build().unwrap_err();
    assert_eq!(e.field(), "burst");
    let (m, _, _) = Batching::new();
    assert_eq!(
        Pool::builder(m).burst(0).build().unwrap_err().field(),
        "burst"
    );
}

/// A pool that moves objects in batches of 4, with no background reclaimer
/// (the tests drive every teardown themselves).
fn pool_of_batches_of_4(m: Batching) -> Arc<Pool<Batching>> {
    Arc::new(
        Pool::builder(m)
            .batch_size(4)
            .background(false)
            .build()
            .unwrap(),
    )
}

/// Fills `pool`'s depot with `n` idle objects (a helper thread's cache,
/// handed over at its exit).
fn fill_depot(pool: &Arc<Pool<Batching>>, n: usize) {
    let p = Arc::clone(pool);
    std::thread::spawn(move || drop((0..n).map(|_| p.get().unwrap()).collect::<Vec<_>>()))
        .join()
        .unwrap();
}

#[test]
fn a_drain_tears_down_whole_batches_with_destroy_batch() {
    let (m, ledger, calls) = Batching::new();
    let pool = pool_of_batches_of_4(m);
    fill_depot(&pool, 16);
    assert_eq!(pool.drain_blocking(), 16);
    let sizes = calls.destroy_batch.lock().unwrap().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 16, "{sizes:?}");
    assert!(
        sizes.iter().all(|&n| n >= 2),
        "batches, not singles: {sizes:?}"
    );
    assert_eq!(ledger.counts().destroyed, 16);
    balanced(&pool.stats());
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_panicking_destroy_batch_leaves_counts_exact_and_resumes_on_the_caller() {
    let (m, ledger, calls) = Batching::new();
    let pool = pool_of_batches_of_4(m);
    fill_depot(&pool, 16);
    calls.panic_destroy_batch.store(true, SeqCst);
    let panic = catch_unwind(AssertUnwindSafe(|| pool.drain_blocking())).unwrap_err();
    assert!(panic_text(&*panic).contains(INJECTED));
    let s = pool.stats();
    assert_eq!((s.created, s.destroyed, s.idle), (16, 16, 0), "{s:#?}");
    assert_eq!(s.callback_panics, 1);
    assert_eq!(calls.destroy_batch_panics.load(SeqCst), 1);
    balanced(&s);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_panicking_destroy_batch_in_the_pool_drop_is_contained() {
    let (m, ledger, calls) = Batching::new();
    let pool = pool_of_batches_of_4(m);
    fill_depot(&pool, 12);
    calls.panic_destroy_batch.store(true, SeqCst);
    drop(pool); // must not unwind
    assert_eq!(calls.destroy_batch_panics.load(SeqCst), 1);
    ledger.assert_all_accounted();
}

#[test]
fn a_purge_goes_through_purge_batch_and_a_panic_destroys_the_batch() {
    let (m, ledger, calls) = Batching::new();
    let pool = pool_of_batches_of_4(m);
    fill_depot(&pool, 8);
    assert_eq!(pool.purge(), 8);
    assert_eq!(*calls.purge_batch.lock().unwrap(), vec![4, 4]);
    assert_eq!(pool.stats().idle_purged, 8);

    let (m2, ledger2, calls2) = Batching::new();
    let pool2 = pool_of_batches_of_4(m2);
    fill_depot(&pool2, 8);
    calls2.panic_purge_batch.store(true, SeqCst);
    let panic = catch_unwind(AssertUnwindSafe(|| pool2.purge())).unwrap_err();
    assert!(panic_text(&*panic).contains(INJECTED));
    let s = pool2.stats();
    assert_eq!(s.destroyed, 4, "the batch whose purge panicked: {s:#?}");
    assert_eq!((s.idle, s.idle_purged), (4, 4), "{s:#?}");
    balanced(&s);
    drop((pool, pool2));
    ledger.assert_all_accounted();
    ledger2.assert_all_accounted();
}
