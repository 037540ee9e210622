//! `Pool::close`: when it returns, every object of the pool has been
//! destroyed, even while a thread that used the pool is exiting and holds
//! it (its hand-back of its cache, forced here with the `probe` hook). A
//! plain drop of the handle returns before that thread's last reference
//! goes, and with it the last destroys; the C API's `tidepool_pool_destroy`
//! promises the callbacks are over when it returns, so it closes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::probe::{arm, Point};
use crate::{Manage, Pool};

static HELD: AtomicBool = AtomicBool::new(false);
static GO: AtomicBool = AtomicBool::new(false);

fn hold() {
    HELD.store(true, SeqCst);
    while !GO.load(SeqCst) {
        thread::yield_now();
    }
}

struct Counted(Arc<AtomicU64>);

impl Manage for Counted {
    type Item = u64;
    type Error = std::convert::Infallible;

    fn create(&self) -> Result<u64, Self::Error> {
        self.0.fetch_add(1, SeqCst);
        Ok(1)
    }

    fn destroy(&self, _: u64) {
        self.0.fetch_sub(1, SeqCst);
    }
}

#[test]
fn close_returns_once_an_exiting_thread_has_let_go() {
    let alive = Arc::new(AtomicU64::new(0));
    let pool = Arc::new(
        Pool::builder(Counted(alive.clone()))
            .background(false)
            .build()
            .unwrap(),
    );
    let user = {
        let pool = Arc::downgrade(&pool);
        thread::spawn(move || {
            let pool = pool.upgrade().unwrap();
            drop(pool.get().unwrap()); // one object in this thread's cache
            drop(pool);
            // Held in the hand-back at this thread's exit, holding the pool.
            arm(Point::ThreadExit, 0, hold);
        })
    };
    while !HELD.load(SeqCst) {
        thread::yield_now();
    }
    let Ok(pool) = Arc::try_unwrap(pool) else {
        panic!("the test's handle is the only one");
    };
    // What `close` reports, and how many objects were still alive the
    // moment it returned: none, since it waits for the exiting thread.
    let count = alive.clone();
    let closer = thread::spawn(move || {
        let closed = pool.close(Duration::from_secs(30));
        (closed, count.load(SeqCst))
    });
    // Give a `close` that did not wait the chance to return first.
    thread::sleep(Duration::from_millis(50));
    GO.store(true, SeqCst);
    assert_eq!(closer.join().unwrap(), (true, 0));
    user.join().unwrap();
}
