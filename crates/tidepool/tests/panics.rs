//! Panic safety, failure paths and settings: a manager that fails or panics
//! in any method leaves the pool consistent, with its counts right and every
//! object destroyed exactly once; bad settings are refused by name.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;

use common::{panic_text, Counting, CreateFailed, Held, Ledger, INJECTED};
use tidepool::{ConfigError, Error, Pool, Stats, MAX_BATCH_SIZE};

type P = Pool<Counting>;

fn pool(batch: usize, max_idle: usize) -> (P, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    // Exact counts: no process-wide reclaimer (see tests/model.rs).
    let pool = Pool::builder(manager)
        .batch_size(batch)
        .max_idle(max_idle)
        .background(false)
        .build()
        .unwrap();
    (pool, ledger)
}

fn pool_live(batch: usize, max_idle: usize, max_live: usize) -> (P, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    let pool = Pool::builder(manager)
        .batch_size(batch)
        .max_idle(max_idle)
        .max_live(max_live)
        .background(false)
        .build()
        .unwrap();
    (pool, ledger)
}

/// Gets `n` objects and gives them all back.
fn fill(pool: &P, n: usize) {
    let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
    drop(guards);
}

/// The stats invariants that hold whenever no thread is inside the pool.
fn consistent(pool: &P, ledger: &Ledger) -> Stats {
    let s = pool.stats();
    let c = ledger.counts();
    assert_eq!(s.live + s.idle, s.existing(), "{s:?}");
    assert!(s.idle_depot <= s.idle, "{s:?}");
    assert!(s.idle_depot <= pool.config().max_idle() as u64, "{s:?}");
    assert_eq!(
        (c.created, c.destroyed, c.detached),
        (s.created, s.destroyed, s.detached),
        "manager and stats disagree: {c:?} vs {s:?}"
    );
    assert_eq!(s.misses, s.created, "{s:?}");
    ledger.assert_no_errors();
    s
}

fn expect_injected(result: thread::Result<impl Sized>, what: &str) {
    match result {
        Ok(_) => panic!("expected the injected {what} panic to propagate"),
        Err(payload) => {
            let text = panic_text(&*payload);
            assert!(text.contains(INJECTED), "other panic: {text}");
            assert!(text.contains(what), "wrong panic: {text}");
        }
    }
}

// === create ===

#[test]
fn panicking_create_counts_nothing_and_the_next_get_works() {
    let (pool, ledger) = pool_live(1, 4, 1);
    ledger.panic_create.arm(1);
    expect_injected(
        catch_unwind(AssertUnwindSafe(|| pool.get().map(drop))),
        "create",
    );
    let s = consistent(&pool, &ledger);
    assert_eq!(
        (s.created, s.misses, s.hits, s.live, s.idle),
        (0, 0, 0, 0, 0)
    );
    // The max_live place reserved for it was given back.
    let g = pool.get().expect("get after a panicking create");
    assert_eq!(g.id(), 0);
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.live), (1, 1));
    drop(g);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn failing_create_returns_the_error_and_counts_nothing() {
    let (pool, ledger) = pool_live(1, 4, 1);
    ledger.fail_create.arm(2);
    for call in 1..=2 {
        match pool.get() {
            Err(Error::Create(e)) => assert_eq!(e, CreateFailed { call }),
            other => panic!("expected Error::Create, got {other:?}"),
        }
    }
    ledger.fail_create.arm(1);
    let err = pool.get().map(|g| g.id()).unwrap_err();
    // A leaf error: the manager's message is in `Display`, once, and not
    // repeated as a `source()` (a reporter walking the chain prints it once).
    let text = err.to_string();
    assert_eq!(
        text.matches("create call 3 failed on purpose").count(),
        1,
        "{text}"
    );
    assert!(std::error::Error::source(&err).is_none());
    assert_eq!(err.create_error(), Some(&CreateFailed { call: 3 }));
    assert_eq!(err.into_create_error(), Some(CreateFailed { call: 3 }));
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.misses, s.hits, s.live), (0, 0, 0, 0));
    let g = pool.get().expect("the limit place was given back");
    assert_eq!(consistent(&pool, &ledger).live, 1);
    drop(g);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_failed_create_on_another_thread_leaves_counts_right() {
    let (pool, ledger) = pool(2, 4);
    let pool = Arc::new(pool);
    ledger.fail_create.arm(1);
    let p = Arc::clone(&pool);
    let r = thread::spawn(move || p.get_owned().map(|g| g.id()))
        .join()
        .unwrap();
    assert!(matches!(r, Err(Error::Create(_))));
    let p = Arc::clone(&pool);
    thread::spawn(move || drop(Held::new(p.get_owned().unwrap())))
        .join()
        .unwrap();
    let s = pool.stats();
    assert_eq!(
        (s.created, s.live, s.idle, s.idle_depot),
        (1, 0, 1, 1),
        "{s:?}"
    );
    drop(pool);
    ledger.assert_all_accounted();
}

// === recycle ===

#[test]
fn panicking_recycle_destroys_once_and_propagates() {
    let (pool, ledger) = pool(2, 4);
    fill(&pool, 3);
    let g = pool.get().unwrap();
    let id = g.id();
    let before = consistent(&pool, &ledger);
    ledger.panic_recycle.arm(1);
    expect_injected(catch_unwind(AssertUnwindSafe(|| drop(g))), "recycle");
    assert!(ledger.is_destroyed(id));
    let s = consistent(&pool, &ledger);
    assert_eq!(s.destroyed, before.destroyed + 1);
    assert_eq!(s.live, 0);
    assert_eq!(s.idle, before.idle, "nothing else changed");
    assert_eq!(ledger.counts().destroyed, 1);
    // The pool works on.
    fill(&pool, 4);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn panicking_recycle_of_an_owned_guard_on_another_thread() {
    let (pool, ledger) = pool(2, 4);
    let pool = Arc::new(pool);
    let g = pool.get_owned().unwrap();
    let id = g.id();
    ledger.panic_recycle.arm(1);
    let r = thread::spawn(move || drop(g)).join();
    expect_injected(r, "recycle");
    assert!(ledger.is_destroyed(id));
    let s = pool.stats();
    assert_eq!(
        (s.created, s.destroyed, s.live, s.idle),
        (1, 1, 0, 0),
        "{s:?}"
    );
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn refused_recycle_destroys_the_object() {
    let (pool, ledger) = pool(2, 4);
    let g = pool.get().unwrap();
    let id = g.id();
    ledger.refuse_recycle.arm(1);
    drop(g);
    assert!(ledger.is_destroyed(id));
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.destroyed, s.live, s.idle), (1, 1, 0, 0));
    let c = ledger.counts();
    assert_eq!((c.recycle_calls, c.refused, c.recycled), (1, 1, 0));
    // Not reused: the next get creates.
    let g = pool.get().unwrap();
    assert_ne!(g.id(), id);
    drop(g);
    drop(pool);
    ledger.assert_all_accounted();
}

// === destroy ===

/// Builds a pool with objects in the depot (2 batches of 2) and in this
/// thread's cache (4).
fn depot_and_cache() -> (P, Arc<Ledger>) {
    let (pool, ledger) = pool(2, 8);
    fill(&pool, 8);
    let s = pool.stats();
    assert_eq!((s.idle_depot, s.idle_cached()), (4, 4), "{s:?}");
    (pool, ledger)
}

#[test]
fn panicking_destroy_during_trim_still_destroys_every_batch() {
    let (pool, ledger) = depot_and_cache();
    assert_eq!(pool.reclaim_unused(), 0);
    ledger.panic_destroy.arm(2); // the first and second of four
    expect_injected(
        catch_unwind(AssertUnwindSafe(|| pool.reclaim_unused())),
        "destroy",
    );
    let s = consistent(&pool, &ledger);
    assert_eq!((s.destroyed, s.idle_depot, s.idle), (4, 0, 4), "{s:?}");
    assert_eq!(ledger.counts().destroyed, 4);
    assert_eq!(pool.reclaim_unused(), 0);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn panicking_destroy_during_drain_still_destroys_everything() {
    let (pool, ledger) = depot_and_cache();
    ledger.panic_destroy.arm_after(5, 1); // the last of eight
    expect_injected(catch_unwind(AssertUnwindSafe(|| pool.drain())), "destroy");
    let s = consistent(&pool, &ledger);
    assert_eq!((s.destroyed, s.idle_depot, s.idle), (8, 0, 0), "{s:?}");
    assert_eq!(pool.drain(), 0);
    fill(&pool, 2);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn panicking_destroy_of_a_refused_donation_propagates_from_the_put() {
    // Depot of one batch, already full; this thread's cache full too.
    let (pool, ledger) = pool(2, 2);
    let g = pool.get().unwrap();
    fill(&pool, 6);
    let s = consistent(&pool, &ledger);
    assert_eq!(
        (s.live, s.idle_depot, s.idle_cached(), s.destroyed),
        (1, 2, 4, 0)
    );
    ledger.panic_destroy.arm(1);
    // Putting `g` back donates a full batch the depot refuses: destroyed
    // whole, and the panic comes out of the put.
    expect_injected(catch_unwind(AssertUnwindSafe(|| drop(g))), "destroy");
    let s = consistent(&pool, &ledger);
    assert_eq!((s.live, s.destroyed), (0, 2), "{s:?}");
    assert_eq!(ledger.counts().destroyed, 2);
    assert_eq!(
        (s.idle, s.idle_depot, s.idle_cached()),
        (5, 2, 3),
        "the returned object itself was cached: {s:?}"
    );
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn panicking_destroy_in_discard_counts_the_object() {
    let (pool, ledger) = pool(2, 4);
    let g = pool.get().unwrap();
    let id = g.id();
    ledger.panic_destroy.arm(1);
    expect_injected(catch_unwind(AssertUnwindSafe(|| g.discard())), "destroy");
    assert!(ledger.is_destroyed(id));
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.destroyed, s.live, s.idle), (1, 1, 0, 0));
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn panicking_destroy_at_thread_exit_does_not_abort_and_counts() {
    // The exiting thread's second batch is refused by the full depot and
    // destroyed in its TLS destructor, where a panic must not escape.
    let (pool, ledger) = pool(2, 2);
    let pool = Arc::new(pool);
    let p = Arc::clone(&pool);
    let l = Arc::clone(&ledger);
    thread::spawn(move || {
        let guards: Vec<_> = (0..4).map(|_| p.get_owned().unwrap()).collect();
        drop(guards);
        assert_eq!(p.stats().idle_cached(), 4);
        l.panic_destroy.always();
    })
    .join()
    .expect("the exiting thread must not panic");
    ledger.panic_destroy.disarm();
    let s = pool.stats();
    assert_eq!((s.idle, s.idle_depot, s.destroyed), (2, 2, 2), "{s:?}");
    assert_eq!(ledger.counts().destroyed, 2);
    drop(pool);
    ledger.assert_all_accounted();
}

// === guards dropped while panicking ===

/// One round trip first (`warm`): this thread's cache is then remembered
/// and it has a lifetime marker, so the next end could take its fast path.
/// Then `panic_holding` takes an object and panics holding it: its end
/// during the unwinding must destroy the object, not recycle it.
fn ends_while_a_warm_thread_panics(
    warm: impl FnOnce(&Arc<P>),
    panic_holding: impl FnOnce(&Arc<P>),
) {
    let (pool, ledger) = pool(2, 4);
    let pool = Arc::new(pool);
    warm(&pool);
    assert_eq!(ledger.counts().recycle_calls, 1);
    let r = catch_unwind(AssertUnwindSafe(|| panic_holding(&pool)));
    expect_injected(r, "test body");
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.destroyed, s.live, s.idle), (1, 1, 0, 0));
    assert_eq!(ledger.counts().recycle_calls, 1, "not recycled");
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_guard_dropped_while_its_thread_panics_is_destroyed_not_recycled() {
    ends_while_a_warm_thread_panics(
        |pool| drop(pool.get().unwrap()),
        |pool| {
            let _g = pool.get().unwrap();
            panic!("{INJECTED}: test body");
        },
    );
}

#[test]
fn an_owned_guard_dropped_by_a_panicking_thread_is_destroyed() {
    let (pool, ledger) = pool(2, 4);
    let pool = Arc::new(pool);
    let g = pool.get_owned().unwrap();
    let id = g.id();
    // Also panics in `destroy`, while already unwinding: must not abort.
    ledger.panic_destroy.arm(1);
    let r = thread::spawn(move || {
        let _g = g;
        panic!("{INJECTED}: thread body");
    })
    .join();
    expect_injected(r, "thread body");
    assert!(ledger.is_destroyed(id));
    let s = pool.stats();
    assert_eq!(
        (s.created, s.destroyed, s.live, s.idle),
        (1, 1, 0, 0),
        "{s:?}"
    );
    assert_eq!(ledger.counts().recycle_calls, 0);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn an_owned_guard_dropped_while_its_warm_thread_panics_is_destroyed() {
    ends_while_a_warm_thread_panics(
        |pool| drop(pool.get_owned().unwrap()),
        |pool| {
            let _g = pool.get_owned().unwrap();
            panic!("{INJECTED}: test body");
        },
    );
}

#[test]
fn an_owned_guard_put_back_while_its_warm_thread_panics_is_destroyed() {
    /// Gives its guard back through the pool (`Pool::put`) when dropped.
    struct PutOnDrop<'a>(&'a Pool<Counting>, Option<tidepool::OwnedPooled<Counting>>);
    impl Drop for PutOnDrop<'_> {
        fn drop(&mut self) {
            if let Some(g) = self.1.take() {
                self.0.put(g);
            }
        }
    }
    ends_while_a_warm_thread_panics(
        |pool| pool.put(pool.get_owned().unwrap()),
        |pool| {
            let _held = PutOnDrop(pool, Some(pool.get_owned().unwrap()));
            panic!("{INJECTED}: test body");
        },
    );
}

// === max_live ===

#[test]
fn max_live_gives_exhausted_and_recovers() {
    let (pool, ledger) = pool_live(2, 4, 2);
    let a = pool.get().unwrap();
    let b = pool.get().unwrap();
    match pool.get() {
        Err(Error::Exhausted { limit }) => assert_eq!(limit, 2),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    let err = pool.get().unwrap_err();
    assert!(err.to_string().contains('2'), "{err}");
    assert!(err.into_create_error().is_none());
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.live, s.misses, s.hits), (2, 2, 2, 0));
    assert_eq!(ledger.counts().create_calls, 2, "create not called");
    // A put makes an idle object: reused, not created.
    let a_id = a.id();
    drop(a);
    let a = pool.get().unwrap();
    assert_eq!(a.id(), a_id);
    // A discard frees a place: created.
    b.discard();
    let b = pool.get().unwrap();
    assert_eq!(consistent(&pool, &ledger).created, 3);
    // A detach frees a place too.
    ledger.note_detach(b.id());
    let _obj = b.detach();
    let c = pool.get().unwrap();
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.detached, s.live), (4, 1, 2));
    assert!(pool.get().is_err());
    drop((a, c));
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn max_live_reuses_objects_idle_in_another_threads_cache() {
    let (pool, ledger) = pool_live(3, 8, 3);
    let pool = Arc::new(pool);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let p = Arc::clone(&pool);
    let h = thread::spawn(move || {
        let guards: Vec<_> = (0..3).map(|_| p.get_owned().unwrap()).collect();
        drop(guards); // cached on this thread
        drop(p);
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
    });
    ready_rx.recv().unwrap();
    // At the limit, the other thread's cache is taken (tests/limits.rs).
    let guards: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    assert!(matches!(pool.get(), Err(Error::Exhausted { limit: 3 })));
    go_tx.send(()).unwrap();
    h.join().unwrap();
    assert_eq!(pool.stats().created, 3);
    drop(guards);
    drop(pool);
    ledger.assert_all_accounted();
}

// === settings ===

fn build(batch: usize, max_idle: usize, max_live: Option<usize>) -> Result<P, ConfigError> {
    let (manager, _) = Counting::new();
    let mut b = Pool::builder(manager).batch_size(batch).max_idle(max_idle);
    if let Some(n) = max_live {
        b = b.max_live(n);
    }
    b.build()
}

fn refused(batch: usize, max_idle: usize, max_live: Option<usize>) -> ConfigError {
    build(batch, max_idle, max_live).expect_err("invalid settings accepted")
}

#[test]
fn invalid_settings_name_the_field() {
    let e = refused(0, 8, None);
    assert_eq!(e.field(), "batch_size");
    assert!(e.to_string().contains("`batch_size`"), "{e}");
    assert!(!e.reason().is_empty());

    let e = refused(MAX_BATCH_SIZE + 1, usize::MAX, None);
    assert_eq!(e.field(), "batch_size");

    let e = refused(8, 7, None);
    assert_eq!(e.field(), "max_idle");
    assert!(e.to_string().contains("`max_idle`"), "{e}");
    assert!(e.reason().contains('7'), "{e}");

    let e = refused(8, 0, None);
    assert_eq!(e.field(), "max_idle");

    let e = refused(8, 8, Some(0));
    assert_eq!(e.field(), "max_live");
    assert!(e.to_string().contains("`max_live`"), "{e}");

    // The first bad field is named.
    assert_eq!(refused(0, 0, Some(0)).field(), "batch_size");
    assert_eq!(refused(4, 3, Some(0)).field(), "max_idle");
}

#[test]
fn edge_settings_are_accepted() {
    let p = build(8, 8, Some(8)).expect("max_idle == batch_size == max_live");
    assert_eq!(
        (
            p.config().batch_size(),
            p.config().max_idle(),
            p.config().max_live()
        ),
        (8, 8, Some(8))
    );
    assert_eq!(p.config().idle_bound(3), 8 + 3 * 16);
    build(1, 1, None).expect("smallest pool");
    build(1, 8, Some(1)).expect("max_live 1");
    // Unasked, the batch follows a small max_live (an eighth of it) or
    // max_idle down.
    let (manager, _) = Counting::new();
    let p = Pool::builder(manager).max_live(3).build().unwrap();
    assert_eq!(p.config().batch_size(), 1);
    let (manager, _) = Counting::new();
    let p = Pool::builder(manager).max_live(64).build().unwrap();
    assert_eq!(p.config().batch_size(), 8);
    // A default batch holds the burst asked for, within max_live; a burst
    // past max_live is refused, naming burst.
    let (manager, _) = Counting::new();
    let p = Pool::builder(manager)
        .max_live(64)
        .burst(16)
        .build()
        .unwrap();
    assert_eq!((p.config().batch_size(), p.config().burst()), (16, 16));
    let (manager, _) = Counting::new();
    let err = Pool::builder(manager)
        .max_live(4)
        .burst(8)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "burst");
    let (manager, _) = Counting::new();
    let p = Pool::builder(manager).max_idle(5).build().unwrap();
    assert_eq!(p.config().batch_size(), 5);
    build(MAX_BATCH_SIZE, MAX_BATCH_SIZE, None).expect("largest batch");
    let p = Pool::new(Counting::new().0);
    assert_eq!(p.config(), &tidepool::Config::default());
    assert_eq!(p.config().max_live(), None);
}

// === panics in reclaim passes (issue 10) ===

/// A pool on a manual clock with `n` objects handed to the depot by a
/// helper thread's exit (one batch per object: batch size 1).
fn clocked(
    max_live: Option<usize>,
    max_idle: usize,
) -> (Arc<P>, Arc<Ledger>, Arc<tidepool::reclaim::ManualClock>) {
    let (manager, ledger) = Counting::new();
    let clock = Arc::new(tidepool::reclaim::ManualClock::new());
    let mut b = Pool::builder(manager)
        .batch_size(1)
        .max_idle(max_idle)
        .reclaim_interval(std::time::Duration::from_secs(1))
        .clock(clock.clone())
        .background(false);
    if let Some(n) = max_live {
        b = b.max_live(n);
    }
    (Arc::new(b.build().unwrap()), ledger, clock)
}

/// Has a helper thread get `n` objects and exit, so its cache goes to the
/// depot.
fn park_in_depot(pool: &Arc<P>, n: usize) {
    let p = Arc::clone(pool);
    thread::spawn(move || drop((0..n).map(|_| p.get().unwrap()).collect::<Vec<_>>()))
        .join()
        .unwrap();
}

/// A `destroy` that panics in the reclaim pass run lazily at the end of a
/// `get` must not cost the pool the `max_live` place of the object that
/// `get` was handing out. Before the fix the panic escaped `get`, the object
/// was dropped on the floor (never destroyed), and its place was lost for
/// good: with `max_live` 2, only one object could ever be had again.
#[test]
fn a_panicking_lazy_pass_loses_no_object_and_no_max_live_place() {
    let (pool, ledger, clock) = clocked(Some(2), 2);
    park_in_depot(&pool, 2);
    assert_eq!(pool.stats().idle_depot, 2);
    let second = std::time::Duration::from_secs(1);
    // Two interval ends: the depot's two objects sat idle through both.
    clock.advance(second);
    pool.reclaim();
    clock.advance(second);
    pool.reclaim();
    clock.advance(second);
    // The next `get` refills from the depot, then runs the due pass, which
    // destroys the older object: that `destroy` panics.
    ledger.panic_destroy.arm(1);
    let got = catch_unwind(AssertUnwindSafe(|| pool.get().map(|g| g.id())));
    ledger.panic_destroy.disarm();
    let s = pool.stats();
    assert_eq!(s.live + s.idle, s.existing(), "{s:?}");
    assert!(
        matches!(got, Ok(Ok(_))),
        "the get itself succeeded; the pass's panic is the reclaimer's business"
    );
    assert_eq!(s.callback_panics, 1, "{s:?}");
    // Both places of max_live can be had at once.
    let a = pool.get().expect("first place");
    let b = pool.get().expect("second place: no place was lost");
    drop((a, b));
    let s = consistent(&pool, &ledger);
    assert_eq!(s.live, 0);
    drop(pool);
    ledger.assert_all_accounted();
}

/// A `destroy` that panics during a reclaim pass: every object the pass had
/// taken out of the depot (to destroy or to purge) is destroyed or put back,
/// and counted. Before the fix the objects taken for purging were dropped on
/// the floor: 4 created, 2 destroyed, even after the pool dropped.
#[test]
fn a_panicking_destroy_in_a_reclaim_pass_loses_no_object() {
    let (pool, ledger, clock) = clocked(None, 8);
    park_in_depot(&pool, 4);
    let second = std::time::Duration::from_secs(1);
    clock.advance(second);
    pool.reclaim(); // interval 1 ends: nothing idle through a whole interval yet
                    // Interval 2: a thread uses the newest two objects (and its exit gives
                    // them back), so only the oldest two sat idle through it.
    let p = Arc::clone(&pool);
    thread::spawn(move || drop((0..2).map(|_| p.get().unwrap()).collect::<Vec<_>>()))
        .join()
        .unwrap();
    clock.advance(second);
    pool.reclaim(); // purges the oldest two
    assert_eq!(pool.stats().idle_purged, 2, "{:?}", pool.stats());
    clock.advance(second);
    // Interval 3 ends: the two purged ones sat idle through two intervals
    // (destroyed), the other two through one (purged).
    ledger.panic_destroy.arm(1);
    let r = catch_unwind(AssertUnwindSafe(|| pool.reclaim()));
    ledger.panic_destroy.disarm();
    expect_injected(r, "destroy");
    let s = consistent(&pool, &ledger);
    assert_eq!((s.created, s.destroyed, s.idle), (4, 2, 2), "{s:?}");
    assert_eq!(s.idle_purged, 2, "the other two were purged and put back");
    assert_eq!(s.callback_panics, 1, "{s:?}");
    drop(pool);
    ledger.assert_all_accounted();
}

/// A panic from a callback tidepool runs in a pool's drop (a destructor)
/// does not unwind out of the drop, and nothing is lost.
#[test]
fn panicking_destroy_during_pool_drop_does_not_unwind() {
    let (pool, ledger) = depot_and_cache();
    ledger.panic_destroy.arm_after(1, 3);
    let r = catch_unwind(AssertUnwindSafe(|| drop(pool)));
    assert!(r.is_ok(), "a pool's drop never unwinds");
    assert_eq!(ledger.counts().destroyed, 8);
    ledger.assert_all_accounted();
}

// === settings (issue 10) ===

fn builder() -> tidepool::Builder<Counting> {
    Pool::builder(Counting::new().0)
}

#[test]
fn settings_that_cannot_work_together_name_the_field() {
    let e = builder().max_live(4).min_idle(5).build().unwrap_err();
    assert_eq!(e.field(), "min_idle");
    assert!(e.reason().contains('5') && e.reason().contains('4'), "{e}");

    let e = builder().max_live(4).batch_size(8).build().unwrap_err();
    assert_eq!(e.field(), "batch_size");
    assert!(e.reason().contains("max_live"), "{e}");

    let e = builder()
        .reclaim_interval(std::time::Duration::MAX)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "reclaim_interval");

    let e = builder()
        .pressure_hold(std::time::Duration::MAX)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "pressure_hold");
}

#[test]
fn a_manual_clock_saturates_instead_of_wrapping() {
    let clock = tidepool::reclaim::ManualClock::new();
    clock.advance(std::time::Duration::from_secs(1));
    clock.advance(std::time::Duration::MAX);
    let far = tidepool::reclaim::Clock::now(&clock);
    assert!(
        far > std::time::Duration::from_secs(500 * 365 * 24 * 3600),
        "{far:?}"
    );
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(
        tidepool::reclaim::Clock::now(&clock),
        far,
        "stays at its end"
    );
}
