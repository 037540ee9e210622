//! Interleavings at `max_live` that could strand a waiter beside an idle
//! object (`tests/get_async.rs`' stress test hung that way, about once in
//! a thousand runs), forced with the `probe::arm` hook, which holds a
//! thread at a chosen point (a cache access, the depot), so each test fails
//! the same way every time without its fix.

use std::convert::Infallible;
use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;

use crate::probe::{arm, Point, WAITED_OUT};
use crate::{Manage, Pool, Stats};

type Error = crate::Error<Infallible>;

/// Where a test holds a thread, and when it lets it go.
struct Gate {
    held: AtomicBool,
    go: AtomicBool,
}

impl Gate {
    const fn new() -> Self {
        Self {
            held: AtomicBool::new(false),
            go: AtomicBool::new(false),
        }
    }

    /// On the held thread (inside or just before an access): allocates
    /// nothing (see `bracket_alloc`).
    fn hold(&self) {
        self.held.store(true, SeqCst);
        wait_for(&self.go);
    }

    fn wait_held(&self) {
        wait_for(&self.held);
    }
}

/// Spins until `flag` is set (a test's own hand-shakes).
fn wait_for(flag: &AtomicBool) {
    while !flag.load(SeqCst) {
        thread::yield_now();
    }
}

fn seven() -> u32 {
    7
}

/// A pool of one kind of object at `max_live`, no reclaimer thread.
fn pool(max_live: usize) -> Pool<fn() -> u32> {
    with_manager(seven as fn() -> u32, max_live)
}

fn with_manager<M: Manage>(manager: M, max_live: usize) -> Pool<M> {
    Pool::builder(manager)
        .max_live(max_live)
        .background(false)
        .build()
        .unwrap()
}

/// The waiter's poll after the race: it must have been served; `stats`
/// (taken then) says what the pool held if not.
fn assert_served<G: Deref<Target = u32>>(polled: Poll<Result<G, Error>>, stats: Stats) {
    match polled {
        Poll::Ready(Ok(guard)) => assert_eq!(*guard, 7),
        Poll::Ready(Err(e)) => panic!("{e}"),
        Poll::Pending => panic!("the waiter was stranded beside what it waited for: {stats:?}"),
    }
}

/// Runs `holder` on a thread of its own, which it holds at `gate`; a
/// waiter queues and looks once meanwhile, finding nothing. Once the
/// holder is let go and done, the waiter must have been served. Returns
/// what `holder` returned.
fn waiter_queues_while_held<M, R>(
    pool: &Pool<M>,
    gate: &Gate,
    holder: impl FnOnce() -> R + Send,
) -> R
where
    M: Manage<Item = u32, Error = Infallible>,
    R: Send,
{
    let mut cx = Context::from_waker(Waker::noop());
    thread::scope(|s| {
        let holder = s.spawn(holder);
        gate.wait_held();
        let mut waiting = Box::pin(pool.get_async());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        gate.go.store(true, SeqCst);
        let out = holder.join().unwrap();
        assert_served(waiting.as_mut().poll(&mut cx), pool.stats());
        out
    })
}

/// `(created, live, idle, waiting)` at the end of a test.
fn assert_counts<M: Manage>(pool: &Pool<M>, want: (u64, u64, u64, u64)) {
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle, s.waiting), want, "{s:?}");
}

/// A thread that takes the pool's one object and gives it back, held by
/// `hold` inside the access that caches it.
fn owner_inside_push(pool: &Arc<Pool<fn() -> u32>>, hold: fn()) -> thread::JoinHandle<()> {
    let pool = Arc::clone(pool);
    thread::spawn(move || {
        let guard = pool.get().unwrap();
        arm(Point::InsideAccess, 0, hold);
        drop(guard);
    })
}

static INSIDE_PUSH: Gate = Gate::new();

/// A `get` at `max_live` while the one idle object is being cached: its
/// owner is inside the access that pushes it. The `get` must wait the
/// access out and take the object. Asking the owner to flush and failing
/// would not do: a flush waits for the owner's next access, and a waiter
/// whose one look was such a `get` would sleep beside the object until
/// then, forever if the owner's next call was a wait of its own.
#[test]
fn a_get_at_max_live_waits_out_an_owner_caching_the_object() {
    let pool = Arc::new(pool(1));
    let owner = owner_inside_push(&pool, || INSIDE_PUSH.hold());
    INSIDE_PUSH.wait_held();
    let waited_before = WAITED_OUT.load(SeqCst);
    let getter = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || pool.get().map(|guard| *guard))
    };
    // Keep the owner inside until the getter has decided: it answered
    // (without waiting the owner out), or it is waiting the owner out.
    while !getter.is_finished() && WAITED_OUT.load(SeqCst) == waited_before {
        thread::yield_now();
    }
    INSIDE_PUSH.go.store(true, SeqCst);
    owner.join().unwrap();
    let got = getter.join().unwrap();
    assert!(
        matches!(got, Ok(7)),
        "the get failed while the object was being cached: {got:?}"
    );
    assert_counts(&pool, (1, 0, 1, 0));
}

static BEFORE_SLOW_PUSH: Gate = Gate::new();

/// A put whose last look at the waiters came before a waiter queued, and
/// whose cache was revoked before it pushed: it re-claims the cache in
/// `put_slow`. The waiter's one look (as it queued) found nothing, so the
/// put must look at the waiters again after the claim, or it caches the
/// object and the waiter sleeps beside it.
#[test]
fn a_put_that_reclaims_its_cache_serves_a_waiter_queued_meanwhile() {
    let pool = Arc::new(pool(1));
    let flag = || Arc::new(AtomicBool::new(false));
    let (got, taken, put, looked) = (flag(), flag(), flag(), flag());
    let owner = {
        let (pool, got, taken) = (Arc::clone(&pool), Arc::clone(&got), Arc::clone(&taken));
        let (put, looked) = (Arc::clone(&put), Arc::clone(&looked));
        thread::spawn(move || {
            let guard = pool.get().unwrap();
            got.store(true, SeqCst);
            wait_for(&taken);
            // The put's first access (its fast push) finds the cache
            // revoked; the put then looks at the waiters (none yet) and
            // tries again: held just before that second access.
            arm(Point::BeforeAccess, 1, || BEFORE_SLOW_PUSH.hold());
            drop(guard);
            // Alive until the waiter has been looked at: this thread's exit
            // would hand its cache to the waiter.
            put.store(true, SeqCst);
            wait_for(&looked);
        })
    };
    // Revoke the owner's (empty) cache while it holds the object.
    wait_for(&got);
    pool.drain();
    taken.store(true, SeqCst);
    BEFORE_SLOW_PUSH.wait_held();
    // A waiter queues and looks once: nothing to find.
    let mut cx = Context::from_waker(Waker::noop());
    let mut waiting = Box::pin(pool.get_async());
    let first = waiting.as_mut().poll(&mut cx);
    assert!(
        first.is_pending(),
        "{:?} {:?}",
        first.map(|r| r.map(|g| *g)),
        pool.stats()
    );
    assert_eq!(pool.stats().waiting, 1);
    BEFORE_SLOW_PUSH.go.store(true, SeqCst);
    wait_for(&put);
    // The put is over: the object must have been handed to the waiter.
    let second = waiting.as_mut().poll(&mut cx);
    let then = pool.stats();
    looked.store(true, SeqCst);
    owner.join().unwrap();
    assert_served(second, then);
    assert_counts(&pool, (1, 0, 1, 0));
}

static BEFORE_SHELVING: Gate = Gate::new();

/// A `get_async` future dropped after it was handed an object passes the
/// object on: to the next waiter, else to the depot. A waiter that queued
/// in between looked (once) in a depot without it, so once the object is
/// shelved the waiters must be served from the depot, or it stays there
/// and the waiter sleeps beside it.
#[test]
fn an_object_passed_on_to_the_depot_serves_a_waiter_queued_meanwhile() {
    let pool = pool(1);
    let mut cx = Context::from_waker(Waker::noop());
    let guard = pool.get().unwrap();
    let mut first = Box::pin(pool.get_async());
    assert!(first.as_mut().poll(&mut cx).is_pending());
    // Handed straight to the queued future, which is not polled again.
    drop(guard);
    // A second waiter queues and looks once while the object is in the
    // canceller's hands. The canceller's thread is then gone (its exit
    // handed over nothing: it never used the pool's caches), so the object
    // must be the waiter's.
    waiter_queues_while_held(&pool, &BEFORE_SHELVING, move || {
        arm(Point::Shelve, 0, || BEFORE_SHELVING.hold());
        drop(first);
    });
    assert_counts(&pool, (1, 0, 1, 0));
}

static IN_PURGE: Gate = Gate::new();

/// Holds its pool's purge until the test says go.
struct SlowPurge;

impl crate::Manage for SlowPurge {
    type Item = u32;
    type Error = std::convert::Infallible;

    fn create(&self) -> Result<u32, Self::Error> {
        Ok(7)
    }

    fn purge(&self, _: &mut u32) {
        IN_PURGE.hold();
    }
}

/// A purge takes idle objects out of the depot and puts them back purged.
/// A waiter that queued meanwhile looked in the depot without them, so
/// once they are back the waiters must be served, or they stay and the
/// waiter sleeps beside them.
#[test]
fn objects_back_from_a_purge_serve_a_waiter_queued_meanwhile() {
    let pool = with_manager(SlowPurge, 2);
    // One object held here, one idle in the depot (handed over at its
    // thread's exit): the pool is at `max_live`.
    let held = pool.get().unwrap();
    thread::scope(|s| s.spawn(|| drop(pool.get().unwrap())).join().unwrap());
    assert_eq!(pool.stats().idle_depot, 1);
    assert_eq!(
        waiter_queues_while_held(&pool, &IN_PURGE, || pool.purge()),
        1
    );
    drop(held);
    assert_counts(&pool, (2, 0, 2, 0));
}

static BEFORE_RELEASE: Gate = Gate::new();

/// A place under `max_live` freed (here by a detach) when nobody waited
/// goes back to the count. A waiter that queued in between looked for a
/// place before it was free, so once it is back the waiters must be
/// served a place, or it stays free and the waiter sleeps.
#[test]
fn a_place_freed_serves_a_waiter_queued_meanwhile() {
    let pool = pool(1);
    let guard = pool.get().unwrap();
    // The waiter's look finds every place taken.
    let detached = waiter_queues_while_held(&pool, &BEFORE_RELEASE, move || {
        arm(Point::ReleasePlace, 0, || BEFORE_RELEASE.hold());
        guard.detach()
    });
    assert_eq!(detached, 7);
    assert_eq!(pool.stats().detached, 1);
    assert_counts(&pool, (2, 0, 1, 0));
}

static REFILL_FROM_DEPOT: Gate = Gate::new();
static REFILL_FROM_BURST: Gate = Gate::new();

/// A `get` that refills its cache takes a whole batch from the depot,
/// keeps one object and installs the rest as its cache's loaded batch. A
/// waiter whose one look came in between found the depot empty and that
/// cache empty; its look takes (revokes) the empty cache too, so the
/// install fails and the rest goes back to the depot, which serves the
/// waiter. A look that passed over empty caches would leave the rest to
/// be installed out of the waiter's sight, and the waiter asleep beside it.
#[test]
fn a_refill_from_the_depot_in_flight_serves_a_waiter_queued_meanwhile() {
    let pool = refilling_pool(1);
    // One object held here; two idle in the depot as one full batch
    // (handed over at their thread's exit): the pool is at `max_live`.
    let held = pool.get().unwrap();
    thread::scope(|s| {
        s.spawn(|| drop([pool.get().unwrap(), pool.get().unwrap()]))
            .join()
            .unwrap()
    });
    assert_eq!(pool.stats().idle_depot, 2);
    refill_meets_a_waiter(&pool, || REFILL_FROM_DEPOT.hold(), &REFILL_FROM_DEPOT);
    drop(held);
    assert_counts(&pool, (3, 0, 3, 0));
}

/// As [`a_refill_from_the_depot_in_flight_serves_a_waiter_queued_meanwhile`],
/// with a refill the `get` created: a burst of two, one kept, one to be
/// installed, the burst's places making the pool full.
#[test]
fn a_refill_from_a_burst_in_flight_serves_a_waiter_queued_meanwhile() {
    let pool = refilling_pool(2);
    let held = pool.get().unwrap();
    assert_eq!(pool.stats().idle, 1, "the burst's second object is cached");
    // Back to one live object, none idle: the next burst fills the pool.
    pool.drain();
    refill_meets_a_waiter(&pool, || REFILL_FROM_BURST.hold(), &REFILL_FROM_BURST);
    drop(held);
    assert_eq!(pool.stats().destroyed, 1, "drained");
    assert_counts(&pool, (4, 0, 3, 0));
}

/// At most three objects, batches of two, bursts of `burst`.
fn refilling_pool(burst: usize) -> Pool<fn() -> u32> {
    Pool::builder(seven as fn() -> u32)
        .max_live(3)
        .batch_size(2)
        .burst(burst)
        .background(false)
        .build()
        .unwrap()
}

/// A thread's `get` held (by `hold`, at `gate`) with a refill in hand; a
/// waiter queues and looks meanwhile, and must be served once the `get`
/// is over, while its thread still holds what it got.
fn refill_meets_a_waiter(pool: &Pool<fn() -> u32>, hold: fn(), gate: &Gate) {
    let flag = || AtomicBool::new(false);
    let (got, looked) = (flag(), flag());
    let mut cx = Context::from_waker(Waker::noop());
    thread::scope(|s| {
        let refiller = s.spawn(|| {
            arm(Point::Refill, 0, hold);
            let guard = pool.get().unwrap();
            got.store(true, SeqCst);
            // Held, and the thread alive, until the waiter has been looked
            // at: a put or this thread's exit would serve it either way.
            wait_for(&looked);
            drop(guard);
        });
        gate.wait_held();
        // A waiter queues and looks once: the refill is in the refiller's
        // hands.
        let mut waiting = Box::pin(pool.get_async());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        gate.go.store(true, SeqCst);
        wait_for(&got);
        let polled = waiting.as_mut().poll(&mut cx);
        let then = pool.stats();
        looked.store(true, SeqCst);
        refiller.join().unwrap();
        assert_served(polled, then);
    });
}

/// Cases that fork: skipped under ThreadSanitizer (`--skip fork::`), which
/// cannot fork a multi-threaded process, and under miri.
#[cfg(unix)]
mod fork {
    use super::*;

    static INSIDE_AT_FORK: Gate = Gate::new();

    /// A thread inside an access when another forks is inside it for good
    /// in the child, where it does not exist. A `get` at `max_live` there
    /// must not wait for it (it hung: the child never answered); it finds
    /// the pool as the fork left it and says `Exhausted`.
    #[test]
    #[cfg_attr(miri, ignore = "miri cannot fork")]
    fn a_get_at_max_live_in_a_forked_child_does_not_wait_for_a_parent_thread() {
        let pool = Arc::new(pool(1));
        let owner = owner_inside_push(&pool, || INSIDE_AT_FORK.hold());
        INSIDE_AT_FORK.wait_held();
        // SAFETY: the child only calls into the pool (whose locks the
        // crate's fork handlers keep consistent) and then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = match pool.get() {
                Err(crate::Error::Exhausted { .. }) => 0,
                _ => 1,
            };
            // SAFETY: ends the child at once, running nothing of the
            // parent's (no destructors, no test harness).
            unsafe { libc::_exit(code) };
        }
        INSIDE_AT_FORK.go.store(true, SeqCst);
        owner.join().unwrap();
        // The child's answer, or a kill after a generous wait: a hang.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: our own child; `status` is a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: our own child, not yet reaped; then reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child hung in get");
            }
            thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's get did not answer Exhausted (status {status})"
        );
    }
}

static CREDITS_OUT: Gate = Gate::new();

/// Places parked unused in a thread's credits are recalled (here by
/// `reclaim_unused`): taken from every slot, then given back to the count.
/// A waiter whose one look came in between saw neither, so once they are
/// back the waiters must be served, or they stay free and the waiter
/// sleeps.
#[test]
fn recalled_credits_serve_a_waiter_queued_meanwhile() {
    let pool = Pool::builder(seven as fn() -> u32)
        .max_live(64)
        .burst(1)
        .background(false)
        .build()
        .unwrap();
    let (parked, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let mut cx = Context::from_waker(Waker::noop());
    /// Lets the parking thread go however the scope ends (a failed
    /// assertion too: the scope joins it).
    struct Release<'a>(&'a AtomicBool);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    thread::scope(|s| {
        let _release = Release(&done);
        // Far from the limit, a detached object's place stays with its
        // thread, as a credit; the thread stays (its exit would give it
        // back).
        s.spawn(|| {
            pool.get().unwrap().detach();
            parked.store(true, SeqCst);
            wait_for(&done);
        });
        wait_for(&parked);
        // Every other place is taken here.
        let held: Vec<_> = (0..63).map(|_| pool.get().unwrap()).collect();
        let recaller = s.spawn(|| {
            arm(Point::ReturnCredits, 0, || CREDITS_OUT.hold());
            pool.reclaim_unused();
        });
        CREDITS_OUT.wait_held();
        let mut waiting = Box::pin(pool.get_async());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        CREDITS_OUT.go.store(true, SeqCst);
        recaller.join().unwrap();
        assert_served(waiting.as_mut().poll(&mut cx), pool.stats());
        drop(held);
    });
    assert_eq!(pool.stats().detached, 1);
    assert_counts(&pool, (65, 0, 64, 0));
}
