//! Loom model of a `get_async` future's cancel racing a hand-off
//! (`shared/waiters.rs`): a queued task drops its future while another
//! thread serves the queue with an object. Whichever wins, the object ends
//! up in exactly one place — handed to the task and passed back by its
//! cancel, or refused by `serve` (nobody waiting) — and the queue is empty.

use std::sync::Arc;
use std::task::Waker;

use loom::thread;

use crate::shared::waiters::{Handoff, Waiters};

#[test]
fn cancel_against_hand_off_loses_nothing() {
    loom::model(|| {
        let w = Arc::new(Waiters::<u32>::new());
        let (ticket, first) = w.enqueue_task(Waker::noop());
        assert!(first);
        let server = {
            let w = Arc::clone(&w);
            thread::spawn(move || match w.serve(Handoff::Object(7)) {
                Ok(()) => None,
                Err(Handoff::Object(o)) => Some(o),
                Err(Handoff::Place) => unreachable!("served an object"),
            })
        };
        // The task is polled once more (maybe served), then dropped.
        let polled = w.poll_served(&ticket, Waker::noop());
        let cancelled = match polled {
            Some(h) => Some(h),
            None => w.cancel_task(ticket),
        };
        let refused = server.join().unwrap();
        let with_task = match cancelled {
            Some(Handoff::Object(o)) => Some(o),
            Some(Handoff::Place) => unreachable!("served an object"),
            None => None,
        };
        // Exactly one holder of the object.
        assert_eq!(
            [with_task, refused].iter().flatten().collect::<Vec<_>>(),
            [&7]
        );
        assert!(!w.any(), "the queue is empty");
    });
}
