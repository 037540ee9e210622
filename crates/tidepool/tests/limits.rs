//! `max_live`: a `get` at the limit recycles before it fails (depot, other
//! threads' caches), so it never reports a false `Exhausted`.

mod common;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use common::{Counting, Held, Ledger};
use tidepool::{Error, Pool};

type P = Pool<Counting>;

fn pool_live(batch: usize, max_idle: usize, max_live: usize) -> (Arc<P>, Arc<Ledger>) {
    let (manager, ledger) = Counting::new();
    // Exact counts: no process-wide reclaimer taking caches on its own.
    let pool = Pool::builder(manager)
        .batch_size(batch)
        .max_idle(max_idle)
        .max_live(max_live)
        .background(false)
        .build()
        .unwrap();
    (Arc::new(pool), ledger)
}

/// A thread that runs one get-and-give-back per command and replies with
/// the id it got (or the error), then waits, alive, with its cache.
struct Worker {
    tx: Sender<()>,
    rx: Receiver<Result<u64, Error<common::CreateFailed>>>,
    handle: JoinHandle<()>,
}

impl Worker {
    fn spawn(pool: &Arc<P>) -> Self {
        let pool = Arc::clone(pool);
        let (tx, cmd) = channel::<()>();
        let (reply, rx) = channel();
        let handle = thread::spawn(move || {
            while cmd.recv().is_ok() {
                let got = pool.get_owned().map(|g| Held::new(g).id());
                reply.send(got).unwrap();
            }
        });
        Self { tx, rx, handle }
    }

    fn get_and_put(&self) -> Result<u64, Error<common::CreateFailed>> {
        self.tx.send(()).unwrap();
        self.rx.recv().unwrap()
    }

    fn stop(self) {
        drop(self.tx);
        self.handle.join().unwrap();
    }
}

#[test]
fn no_false_exhausted_when_the_idle_object_is_in_another_threads_cache() {
    const N: usize = 4;
    let (pool, ledger) = pool_live(2, 8, N);
    // N - 1 objects live on this thread.
    let held: Vec<_> = (0..N - 1)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    let workers: Vec<_> = (0..3).map(|_| Worker::spawn(&pool)).collect();
    // The N-th object: created on worker 0, now idle in its cache.
    let last = workers[0].get_and_put().unwrap();
    assert_eq!(pool.stats().created, N as u64);
    // Every other thread in turn, then worker 0 again, then this thread:
    // each takes the one idle object from the cache of the thread before.
    for round in 0..2 {
        for (i, w) in workers.iter().enumerate().skip(1).chain([(0, &workers[0])]) {
            match w.get_and_put() {
                Ok(id) => assert_eq!(id, last, "round {round}, worker {i}: the idle object"),
                Err(e) => panic!("round {round}, worker {i}: false {e:?}"),
            }
        }
        let mine = Held::new(pool.get_owned().expect("this thread: no false Exhausted"));
        assert_eq!(mine.id(), last);
        drop(mine);
    }
    let s = pool.stats();
    assert_eq!(s.created, N as u64, "nothing created past the limit");
    assert_eq!(s.live, (N - 1) as u64);
    assert_eq!(s.live + s.idle, s.existing());
    assert_eq!(s.caches_taken, 8, "one steal per get after the first");
    // A true exhaustion still fails, fast: the idle object is live too.
    let extra = Held::new(pool.get_owned().unwrap());
    assert!(matches!(pool.get(), Err(Error::Exhausted { limit: N })));
    for w in &workers {
        assert!(matches!(
            w.get_and_put(),
            Err(Error::Exhausted { limit: N })
        ));
    }
    drop((extra, held));
    for w in workers {
        w.stop();
    }
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn a_get_at_the_limit_takes_a_depot_batch_first() {
    // Idle objects in the depot (an exited thread's cache) are found
    // before anything is stolen.
    let (pool, ledger) = pool_live(2, 8, 4);
    let p = Arc::clone(&pool);
    thread::spawn(move || {
        let g: Vec<_> = (0..4).map(|_| p.get_owned().unwrap()).collect();
        drop(g);
    })
    .join()
    .unwrap();
    let all: Vec<_> = (0..4)
        .map(|_| Held::new(pool.get_owned().unwrap()))
        .collect();
    let s = pool.stats();
    assert_eq!((s.created, s.caches_taken), (4, 0));
    drop(all);
    drop(pool);
    ledger.assert_all_accounted();
}
