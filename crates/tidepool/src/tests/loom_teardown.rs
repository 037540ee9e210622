//! Loom models of the destroy queue's hand-off (`shared/teardown.rs`): a
//! thread that finds every permit taken leaves its batch queued and goes
//! on; the permit holder must then see it after giving its permit back.
//! Checks: every object is destroyed exactly once, nothing is stranded
//! unless a runner that stopped on purpose reported it, and at most
//! `limit` threads destroy at once. And the line of waiters
//! (`drain_blocking`, a flush at `max_live`): a thread that must wait for a
//! permit sleeps on its own condition variable and is always handed one
//! (no lost wake-up, so no hang), still within the limit; a thread waiting
//! for another runner's progress is always woken.

use std::sync::Arc;

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Mutex;
use loom::thread;

use crate::shared::teardown::Teardown;

/// Runs `queue.run` recording what it destroys, and how many run at once.
fn runner(
    queue: &Teardown<u32>,
    done: &Mutex<Vec<u32>>,
    inside: &AtomicUsize,
    chunks: usize,
) -> crate::shared::teardown::Run {
    queue.run(chunks, false, |chunk| {
        let now = inside.fetch_add(1, SeqCst) + 1;
        assert!(now <= 1, "two runners at once with a limit of one");
        let mut n = 0;
        for batch in chunk {
            n += batch.len();
            done.lock().unwrap().extend(batch);
        }
        inside.fetch_sub(1, SeqCst);
        n
    })
}

#[test]
fn no_batch_is_stranded_between_a_pusher_and_a_leaving_runner() {
    loom::model(|| {
        let queue = Arc::new(Teardown::<u32>::new(1, 1));
        let done = Arc::new(Mutex::new(Vec::new()));
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2u32)
            .map(|i| {
                let (queue, done, inside) = (queue.clone(), done.clone(), inside.clone());
                thread::spawn(move || {
                    queue.push([vec![i]]);
                    runner(&queue, &done, &inside, usize::MAX)
                })
            })
            .collect();
        for t in threads {
            let run = t.join().unwrap();
            assert!(!run.left_behind, "an unbounded run leaves nothing behind");
        }
        let mut done = done.lock().unwrap().clone();
        done.sort_unstable();
        assert_eq!(done, vec![0, 1], "each object destroyed exactly once");
        assert_eq!((queue.queued(), queue.destroying()), (0, 0));
    });
}

#[test]
fn a_runner_that_stops_on_purpose_reports_what_it_left() {
    loom::model(|| {
        let queue = Arc::new(Teardown::<u32>::new(1, 1));
        let done = Arc::new(Mutex::new(Vec::new()));
        let inside = Arc::new(AtomicUsize::new(0));
        // Two batches up front: a one-chunk run cannot do both.
        queue.push([vec![0], vec![1]]);
        let other = {
            let (queue, done, inside) = (queue.clone(), done.clone(), inside.clone());
            thread::spawn(move || {
                queue.push([vec![2]]);
                runner(&queue, &done, &inside, 1)
            })
        };
        let mine = runner(&queue, &done, &inside, 1);
        let theirs = other.join().unwrap();
        let left = queue.queued();
        assert!(
            left == 0 || mine.left_behind || theirs.left_behind,
            "work left in the queue is reported by a runner"
        );
        // The reclaimer (or the next caller) finishes it.
        let rest = runner(&queue, &done, &inside, usize::MAX);
        assert_eq!(rest.destroyed, left);
        let mut done = done.lock().unwrap().clone();
        done.sort_unstable();
        assert_eq!(done, vec![0, 1, 2], "each object destroyed exactly once");
        assert_eq!(queue.destroying(), 0);
    });
}

#[test]
fn a_waiter_in_line_is_always_handed_a_permit() {
    loom::model(|| {
        let queue = Arc::new(Teardown::<u32>::new(1, 1));
        let done = Arc::new(Mutex::new(Vec::new()));
        let inside = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let (queue, done, inside) = (queue.clone(), done.clone(), inside.clone());
            thread::spawn(move || {
                // drain_blocking: its own objects under a permit, waiting
                // in line if the other thread holds it, then the queue.
                queue.run_own(vec![vec![1]], |chunk| {
                    let now = inside.fetch_add(1, SeqCst) + 1;
                    assert!(now <= 1, "two runners at once with a limit of one");
                    let n = chunk.iter().map(Vec::len).sum();
                    done.lock().unwrap().extend(chunk.into_iter().flatten());
                    inside.fetch_sub(1, SeqCst);
                    n
                })
            })
        };
        queue.push([vec![0]]);
        runner(&queue, &done, &inside, usize::MAX);
        waiter.join().unwrap();
        let mut done = done.lock().unwrap().clone();
        done.sort_unstable();
        assert_eq!(done, vec![0, 1], "each object destroyed exactly once");
        assert_eq!((queue.queued(), queue.destroying()), (0, 0));
    });
}

#[test]
fn a_thread_waiting_for_progress_is_always_woken() {
    loom::model(|| {
        let queue = Arc::new(Teardown::<u32>::new(1, 1));
        let done = Arc::new(Mutex::new(Vec::new()));
        let inside = Arc::new(AtomicUsize::new(0));
        queue.push([vec![0]]);
        let seen = queue.progress();
        let watcher = {
            let queue = queue.clone();
            // A get at max_live: the queue may look empty while the
            // runner destroys the object whose place it needs.
            thread::spawn(move || queue.wait_for_progress(seen))
        };
        runner(&queue, &done, &inside, usize::MAX);
        watcher.join().unwrap();
        assert_eq!(queue.progress(), seen + 1);
        assert_eq!(queue.destroying(), 0);
    });
}
