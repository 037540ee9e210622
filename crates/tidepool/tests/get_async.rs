//! `Pool::get_async`: a future in the same FIFO queue as `get_timeout`,
//! driven here by a minimal hand-written executor (no runtime dependency).
//! Cancel-safety: a future dropped while queued leaves the queue, and what
//! it was handed meanwhile goes on to the next waiter or back to the pool.

mod common;

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

use common::{child, until_waiting, Counting, Held, Ledger, FOREVER};
use tidepool::{Error, Pool};

type P = Pool<Counting>;

fn pool_live(max_live: usize) -> (Arc<P>, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    let pool = Pool::builder(manager)
        .batch_size(1)
        .max_idle(4)
        .max_live(max_live)
        .background(false)
        .build()
        .unwrap();
    (Arc::new(pool), ledger)
}

/// A waker that counts its wakes and unparks the thread that made it.
struct Unpark {
    thread: thread::Thread,
    wakes: AtomicUsize,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        self.thread.unpark();
    }
}

fn unpark_waker() -> (Arc<Unpark>, Waker) {
    let u = Arc::new(Unpark {
        thread: thread::current(),
        wakes: AtomicUsize::new(0),
    });
    (Arc::clone(&u), Waker::from(u))
}

/// The minimal executor: polls `fut` on this thread, parking between polls.
fn block_on<F: Future>(fut: F) -> F::Output {
    let (_, waker) = unpark_waker();
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(waker))
}

#[test]
fn below_the_limit_it_is_ready_at_once() {
    let (pool, ledger) = pool_live(2);
    let got = block_on(pool.get_async()).unwrap();
    let id = got.id();
    drop(got);
    let (_, waker) = unpark_waker();
    let mut fut = Box::pin(pool.get_async());
    let Poll::Ready(again) = poll_once(fut.as_mut(), &waker) else {
        panic!("an idle object is at hand")
    };
    assert_eq!(again.unwrap().id(), id, "this thread's cached object");
    drop(fut);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn threads_and_tasks_share_one_fifo_queue_one_wake_each() {
    let (pool, ledger) = pool_live(1);
    let only = Held::new(pool.get_owned().unwrap());
    let id = only.id();
    // First in line: a thread in get_timeout.
    let p = Arc::clone(&pool);
    let thread_waiter = thread::spawn(move || {
        let got = p.get_timeout(FOREVER).unwrap();
        got.id()
        // Dropped here: handed to the next in line, the task.
    });
    until_waiting(&pool, 1);
    // Second: a task.
    let (wakes, waker) = unpark_waker();
    let mut fut = Box::pin(pool.get_async());
    assert!(poll_once(fut.as_mut(), &waker).is_pending());
    assert_eq!(pool.stats().waiting, 2);
    // Polled again while queued: still pending, still one place in line.
    assert!(poll_once(fut.as_mut(), &waker).is_pending());
    assert_eq!(pool.stats().waiting, 2);
    assert_eq!(wakes.wakes.load(SeqCst), 0);
    drop(only); // to the thread, which drops it: to the task
    assert_eq!(thread_waiter.join().unwrap(), id, "the oldest waiter first");
    assert_eq!(wakes.wakes.load(SeqCst), 1, "the task woken once");
    let Poll::Ready(got) = poll_once(fut.as_mut(), &waker) else {
        panic!("served and woken, so ready")
    };
    let got = got.unwrap();
    assert_eq!(got.id(), id, "the one object, handed on");
    assert!(matches!(pool.get(), Err(Error::Exhausted { limit: 1 })));
    drop(got);
    drop(fut);
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle, s.waiting), (1, 0, 1, 0));
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_future_dropped_after_being_served_passes_its_object_on() {
    let (pool, ledger) = pool_live(1);
    let only = Held::new(pool.get_owned().unwrap());
    let id = only.id();
    let (a_wakes, a_waker) = unpark_waker();
    let (b_wakes, b_waker) = unpark_waker();
    let mut a = Box::pin(pool.get_async());
    let mut b = Box::pin(pool.get_async());
    assert!(poll_once(a.as_mut(), &a_waker).is_pending());
    assert!(poll_once(b.as_mut(), &b_waker).is_pending());
    assert_eq!(pool.stats().waiting, 2);
    drop(only); // handed to `a`, the oldest
    assert_eq!(
        (a_wakes.wakes.load(SeqCst), b_wakes.wakes.load(SeqCst)),
        (1, 0)
    );
    drop(a); // cancelled with the object in hand: on to `b`
    assert_eq!(b_wakes.wakes.load(SeqCst), 1);
    let Poll::Ready(got) = poll_once(b.as_mut(), &b_waker) else {
        panic!("handed on by the cancelled future")
    };
    assert_eq!(got.unwrap().id(), id);
    drop(b);
    // And with nobody behind it: back to the pool.
    let only = Held::new(pool.get_owned().unwrap());
    let (_, waker) = unpark_waker();
    let mut c = Box::pin(pool.get_async());
    assert!(poll_once(c.as_mut(), &waker).is_pending());
    drop(only);
    drop(c);
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle, s.waiting), (1, 0, 1, 0));
    assert_eq!(pool.get().unwrap().id(), id, "nothing lost");
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_future_dropped_while_queued_leaves_the_queue() {
    let (pool, ledger) = pool_live(1);
    let only = Held::new(pool.get_owned().unwrap());
    let (wakes, waker) = unpark_waker();
    let mut a = Box::pin(pool.get_async());
    assert!(poll_once(a.as_mut(), &waker).is_pending());
    assert_eq!(pool.stats().waiting, 1);
    drop(a);
    assert_eq!(pool.stats().waiting, 0);
    drop(only); // nobody waits: to this thread's cache
    assert_eq!(wakes.wakes.load(SeqCst), 0);
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle), (1, 0, 1));
    drop(pool);
    ledger.assert_all_accounted();
}

/// Holds a borrowed guard a moment (the ledger fails the test if another
/// thread holds the same object meanwhile), then puts it back.
fn hold(ledger: &Ledger, guard: tidepool::Pooled<'_, Counting>) {
    ledger.check_out(guard.id());
    for _ in 0..3 {
        thread::yield_now();
    }
    ledger.check_in(guard.id());
    drop(guard);
}

/// Threads at `max_live` mixing `get_async` futures (some dropped while
/// queued, served or not, without another poll), `get_timeout` and plain
/// gets, with guards held a moment and some dropped on another thread:
/// no object is held twice at once (the ledger checks), every cancelled
/// future left the queue, and all of `max_live` is reachable at the end.
///
/// A lost hand-off shows as a hang (a waiter served by nobody), so the body
/// runs in a child process (this test binary, by name) given two minutes.
#[test]
fn stress_cancel_against_hand_off() {
    const NAME: &str = "stress_cancel_against_hand_off";
    if child::is_child(NAME) {
        return child::run_with(NAME, child::TIMEOUT, &[], stress_body);
    }
    let out = child::spawn(NAME, Duration::from_secs(120), &[]);
    out.assert_finished();
    assert!(
        out.stderr.contains("futures dropped while queued"),
        "{}",
        out.stderr
    );
}

fn stress_body() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 3_000;
    let (pool, ledger) = pool_live(2);
    let (tx, rx) = std::sync::mpsc::channel::<Held>();
    // A thread that drops guards others send it (a cross-thread put).
    let dropper = thread::spawn(move || {
        while let Ok(held) = rx.recv() {
            thread::yield_now();
            drop(held);
        }
    });
    // A thread that purges the depot now and then: its objects are out
    // while it runs, and come back while waiters wait.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let purger = {
        let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(SeqCst) {
                pool.purge();
                thread::yield_now();
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (pool, tx, ledger) = (Arc::clone(&pool), tx.clone(), Arc::clone(&ledger));
            thread::spawn(move || {
                let (_, waker) = unpark_waker();
                let mut cancelled = 0u64;
                for i in 0..ROUNDS {
                    match (i + t) % 4 {
                        // Wait it out.
                        0 => hold(&ledger, block_on(pool.get_async()).unwrap()),
                        // Poll once; if queued, let others run (a put may
                        // serve it meanwhile), then drop it unpolled.
                        1 => {
                            let mut fut = Box::pin(pool.get_async());
                            match poll_once(fut.as_mut(), &waker) {
                                Poll::Ready(got) => hold(&ledger, got.unwrap()),
                                Poll::Pending => {
                                    thread::yield_now();
                                    cancelled += 1;
                                    drop(fut);
                                }
                            }
                        }
                        // A timed waiter whose guard is dropped elsewhere.
                        2 => {
                            if let Ok(g) = pool.get_owned_timeout(FOREVER) {
                                tx.send(Held::new(g)).unwrap();
                            }
                        }
                        // A plain get: fails fast or succeeds.
                        _ => match pool.get() {
                            Ok(g) => hold(&ledger, g),
                            Err(Error::Exhausted { .. }) => {}
                            Err(e) => panic!("{e}"),
                        },
                    }
                }
                cancelled
            })
        })
        .collect();
    let cancelled: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    drop(tx);
    dropper.join().unwrap();
    stop.store(true, SeqCst);
    purger.join().unwrap();
    let s = pool.stats();
    assert_eq!(s.waiting, 0, "every cancelled future left the queue");
    assert_eq!(s.live, 0);
    assert_eq!(s.live + s.idle + s.destroying, s.existing());
    assert!(ledger.max_existing() <= 2, "never past max_live");
    // All of max_live is reachable again: nothing was lost in a hand-off.
    {
        let all: Vec<_> = (0..2).map(|_| pool.get().expect("all back")).collect();
        assert!(matches!(pool.get(), Err(Error::Exhausted { limit: 2 })));
        drop(all);
    }
    eprintln!("{cancelled} futures dropped while queued");
    drop(pool);
    ledger.assert_all_accounted();
}
