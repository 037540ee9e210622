//! `Pool::trim_local`: a thread hands its cache back to the depot without
//! exiting; other threads reuse those objects, and nothing is lost or
//! destroyed twice.

mod common;

use std::sync::Arc;

use common::{Counting, Held};
use tidepool::Pool;

fn pool() -> (Arc<Pool<Counting>>, Arc<common::Ledger>) {
    let (manager, ledger) = Counting::new();
    let pool = Pool::builder(manager)
        .batch_size(4)
        .background(false)
        .build()
        .unwrap();
    (Arc::new(pool), ledger)
}

#[test]
fn released_objects_are_reused_by_another_thread_without_creating() {
    let (pool, ledger) = pool();
    let ids: Vec<u64> = {
        let held: Vec<_> = (0..3)
            .map(|_| Held::new(pool.get_owned().unwrap()))
            .collect();
        held.iter().map(Held::id).collect()
    };
    let s = pool.stats();
    assert_eq!((s.created, s.idle_cached()), (3, 3), "{s:?}");

    assert_eq!(pool.trim_local(), 3);
    let s = pool.stats();
    assert_eq!(
        (s.idle_cached(), s.idle_depot, s.destroyed),
        (0, 3, 0),
        "{s:?}"
    );
    // Nothing to release twice.
    assert_eq!(pool.trim_local(), 0);

    let other = Arc::clone(&pool);
    let mut reused: Vec<u64> = std::thread::spawn(move || {
        let held: Vec<_> = (0..3)
            .map(|_| Held::new(other.get_owned().unwrap()))
            .collect();
        held.iter().map(Held::id).collect()
    })
    .join()
    .unwrap();
    reused.sort_unstable();
    let mut ids = ids;
    ids.sort_unstable();
    assert_eq!(reused, ids, "the other thread got the released objects");
    assert_eq!(pool.stats().created, 3, "and created none");

    // This thread uses the pool again after releasing: a new cache.
    drop(Held::new(pool.get_owned().unwrap()));
    let s = pool.stats();
    assert_eq!(s.live + s.idle, s.created - s.destroyed, "{s:?}");
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_full_depot_destroys_what_it_cannot_take() {
    let (manager, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(manager)
            .batch_size(2)
            .max_idle(2)
            .background(false)
            .build()
            .unwrap(),
    );
    // Four idle in this thread's cache (two batches of two); the depot has
    // room for one batch.
    let held: Vec<_> = (0..4)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    drop(held);
    let before = pool.stats();
    assert_eq!(before.idle, 4, "{before:?}");
    let released = pool.trim_local();
    let s = pool.stats();
    assert_eq!(released, 4);
    assert!(s.idle_depot <= 2, "{s:?}");
    assert_eq!(s.idle_cached(), 0, "{s:?}");
    assert_eq!(s.destroyed, 4 - s.idle_depot, "{s:?}");
    assert_eq!(s.live + s.idle, s.created - s.destroyed, "{s:?}");
    drop(pool);
    ledger.assert_all_accounted();
}
