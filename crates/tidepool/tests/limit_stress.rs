//! Threads at `max_live`, mixing `get`, `get_timeout`, puts on the taking
//! thread and on others, discards, and thread exits (waves of threads).
//! Every object is checked out to one holder at a time (the ledger fails
//! the test on a duplicate), the limit is never passed, the counts are
//! exact at the end, and every object is destroyed exactly once.

mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{Counting, Held, Rng};
use tidepool::{Error, Pool};

const MAX_LIVE: usize = 8;
const THREADS: usize = 6;
const WAVES: usize = 3;
const OPS: usize = 3_000;

#[test]
fn threads_at_the_limit_lose_and_duplicate_nothing() {
    let (manager, ledger) = Counting::new();
    let pool = Arc::new(
        Pool::builder(manager)
            .batch_size(2)
            .max_idle(4)
            .max_live(MAX_LIVE)
            .background(false)
            .build()
            .unwrap(),
    );
    // Objects passed between threads: put back by whoever takes them out.
    let mailbox: Arc<Mutex<Vec<Held>>> = Arc::default();
    let (mut served, mut timeouts, mut exhausted) = (0u64, 0u64, 0u64);
    for wave in 0..WAVES {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, mailbox) = (Arc::clone(&pool), Arc::clone(&mailbox));
                thread::spawn(move || {
                    let mut rng = Rng::new((wave * THREADS + t) as u64 + 1);
                    let mut held: Vec<Held> = Vec::new();
                    let (mut served, mut timeouts, mut exhausted) = (0u64, 0u64, 0u64);
                    for _ in 0..OPS {
                        match rng.below(6) {
                            0 | 1 if held.len() < 2 => {
                                let got = if rng.below(2) == 0 {
                                    pool.get_owned()
                                } else {
                                    let ms = rng.below(3) as u64;
                                    pool.get_owned_timeout(Duration::from_millis(ms))
                                };
                                match got {
                                    Ok(g) => {
                                        served += 1;
                                        held.push(Held::new(g));
                                    }
                                    Err(Error::Exhausted { .. }) => exhausted += 1,
                                    Err(Error::Timeout { .. }) => timeouts += 1,
                                    Err(e) => panic!("{e:?}"),
                                }
                            }
                            2 => drop(held.pop()),
                            3 => {
                                if let Some(h) = held.pop() {
                                    mailbox.lock().unwrap().push(h);
                                }
                            }
                            4 => {
                                // Put back on this thread an object taken
                                // on another.
                                let h = mailbox.lock().unwrap().pop();
                                drop(h);
                            }
                            _ => {
                                if let Some(h) = held.pop() {
                                    h.discard();
                                }
                            }
                        }
                    }
                    // Exits holding some: they go back as the thread ends.
                    drop(held);
                    (served, timeouts, exhausted)
                })
            })
            .collect();
        for w in workers {
            let (s, t, e) = w.join().unwrap();
            served += s;
            timeouts += t;
            exhausted += e;
        }
        // Whatever is still in the mailbox goes back from this thread.
        mailbox.lock().unwrap().clear();
        let s = pool.stats();
        assert_eq!(s.live, 0, "wave {wave}: {s:?}");
        assert_eq!(s.waiting, 0, "wave {wave}: {s:?}");
        assert_eq!(s.live + s.idle, s.existing(), "wave {wave}: {s:?}");
        assert!(s.existing() <= MAX_LIVE as u64, "wave {wave}: {s:?}");
        let c = ledger.counts();
        assert_eq!((c.created, c.destroyed), (s.created, s.destroyed));
        ledger.assert_no_errors();
    }
    assert!(
        ledger.max_existing() <= MAX_LIVE as u64,
        "max_live passed: {} objects at once",
        ledger.max_existing()
    );
    // The run did reach the limit and wait there.
    assert!(served > 0 && ledger.max_existing() == MAX_LIVE as u64);
    eprintln!("served {served}, timed out {timeouts}, exhausted {exhausted}");
    drop(pool);
    ledger.assert_all_accounted();
}
