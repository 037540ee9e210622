//! The queue of `get_timeout` callers waiting at `max_live`: FIFO-fair,
//! one wake-up per object (FreeBSD UMA's `uz_max_items` sleep queue).
//!
//! ```text
//!  get_timeout ─ Exhausted ─► enqueue (ticket n, its own condvar) ─► wait
//!                                 ▲ oldest first                     │
//!  put (waiters > 0) ─── object ──┤  served under the queue lock:     │
//!  destroy/detach ────── place ───┤  one waiter, one notify           │
//!  thread exit, steals ─ depot ───┘                                   ▼
//!                                          object: return it; place: create
//! ```
//!
//! While anyone waits, a returning thread hands its object straight to the
//! oldest waiter instead of its own cache (UMA bypasses its per-CPU
//! buckets the same way), and a place under `max_live` freed by a destroy
//! or detach goes to the oldest waiter, who creates with it. Every
//! hand-off happens under the queue lock, and no user code runs under it:
//! a waiter that times out takes the lock, and either finds itself served
//! (and keeps what it got) or leaves the queue. So nothing handed to a
//! waiter is ever lost, and a place given to a waiter is still counted in
//! `max_live` until the waiter's `create` returns or fails.
//!
//! `count` is read with one `Relaxed` load on every `put` (and destroy):
//! a cache line that is written only when a waiter comes or goes.
//!
//! `get_async` futures queue in the same line with a `Waker` instead of a
//! condvar ([`Wake`]). A served task's waker is woken after the queue lock
//! is dropped (it is the executor's code). A future dropped while queued
//! leaves the queue under the lock, and passes on whatever it was served
//! with meanwhile (`at_limit.rs`): cancelling loses nothing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex};

/// What a waiter was served with.
#[derive(Debug)]
pub(crate) enum Handoff<T> {
    /// An object given back by another thread (or found idle).
    Object(T),
    /// A place under `max_live`, reserved for the waiter: it creates.
    Place,
}

/// The waiting `get_timeout` callers of one pool.
#[derive(Debug)]
/// `repr(C)`: the count, read on every put, leads, and the queue is boxed,
/// so the two words sit on the first line of the pool's head (`Head`) and
/// leave the rest of it to what a get and a put read.
#[repr(C)]
pub(crate) struct Waiters<T> {
    /// Waiters queued and not yet served: read without the lock on the put
    /// and destroy paths; written under it.
    count: AtomicUsize,
    queue: Box<Mutex<Queue<T>>>,
}

/// How a queued waiter is woken.
#[derive(Debug)]
enum Wake {
    /// A thread in `get_timeout`, asleep on its own condvar.
    Thread(Arc<Condvar>),
    /// A `get_async` future: its task's latest waker.
    Task(Waker),
}

#[derive(Debug)]
struct Queue<T> {
    next_ticket: u64,
    /// Oldest first: each waiter's ticket and how to wake it.
    waiting: VecDeque<(u64, Wake)>,
    /// Served and not yet picked up (at most a few: a served waiter picks
    /// its hand-off up as soon as it runs).
    served: Vec<(u64, Handoff<T>)>,
}

/// A place in the queue; redeemed with [`Waiters::wait`].
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    wake: Arc<Condvar>,
}

/// A `get_async` future's place in the queue; redeemed with
/// [`Waiters::poll_served`], given up with [`Waiters::cancel_task`].
#[derive(Debug)]
pub(crate) struct TaskTicket {
    id: u64,
}

impl<T> Waiters<T> {
    pub(crate) fn new() -> Self {
        Self {
            count: AtomicUsize::new(0),
            queue: Box::new(Mutex::new(Queue {
                next_ticket: 0,
                waiting: VecDeque::new(),
                served: Vec::new(),
            })),
        }
    }

    /// Whether anyone is waiting (a hint, for the put and destroy paths:
    /// a waiter that enqueues concurrently checks the pool again itself).
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// Waiters queued now.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Joins the tail of the queue; `true` if nobody was queued before.
    pub(crate) fn enqueue(&self) -> (Ticket, bool) {
        let wake = Arc::new(Condvar::new());
        let (id, first) = self.push(Wake::Thread(Arc::clone(&wake)));
        (Ticket { id, wake }, first)
    }

    /// As [`enqueue`](Waiters::enqueue), for a task woken by `waker`.
    pub(crate) fn enqueue_task(&self, waker: &Waker) -> (TaskTicket, bool) {
        let (id, first) = self.push(Wake::Task(waker.clone()));
        (TaskTicket { id }, first)
    }

    fn push(&self, wake: Wake) -> (u64, bool) {
        let mut q = self.queue.lock();
        let id = q.next_ticket;
        q.next_ticket += 1;
        q.waiting.push_back((id, wake));
        // `SeqCst`, then the caller looks at the pool once more: a put that
        // read `count == 0` before this put its object where that look
        // finds it. The fence pairs with `Head::waiters_after_freeing`'s
        // (a place or object made available by atomics alone, no lock).
        let before = self.count.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        (id, before == 0)
    }

    /// Serves the oldest waiter with `handoff` and wakes it (only it).
    /// Gives `handoff` back if nobody waits.
    pub(crate) fn serve(&self, handoff: Handoff<T>) -> Result<(), Handoff<T>> {
        let mut q = self.queue.lock();
        let Some((id, wake)) = q.waiting.pop_front() else {
            return Err(handoff);
        };
        self.count.fetch_sub(1, Ordering::Relaxed);
        q.served.push((id, handoff));
        match wake {
            Wake::Thread(cv) => {
                cv.notify_one();
            }
            Wake::Task(waker) => {
                // The executor's code: not under our lock.
                drop(q);
                waker.wake();
            }
        }
        Ok(())
    }

    /// What the task's ticket was served with, if it was; else keeps
    /// `waker` as the one to wake (the task may have moved).
    pub(crate) fn poll_served(&self, ticket: &TaskTicket, waker: &Waker) -> Option<Handoff<T>> {
        let mut q = self.queue.lock();
        if let Some(i) = q.served.iter().position(|(id, _)| *id == ticket.id) {
            return Some(q.served.swap_remove(i).1);
        }
        if let Some((_, Wake::Task(w))) = q.waiting.iter_mut().find(|(id, _)| *id == ticket.id) {
            if !w.will_wake(waker) {
                // The old waker is dropped under the lock: a waker's drop
                // is a reference count, not a wake.
                *w = waker.clone();
            }
        }
        None
    }

    /// A dropped future leaves the queue: `None` if it was still waiting;
    /// what it was served with if a server got there first.
    pub(crate) fn cancel_task(&self, ticket: TaskTicket) -> Option<Handoff<T>> {
        let mut q = self.queue.lock();
        Self::leave(&self.count, &mut q, ticket.id)
    }

    /// Waits until the ticket is served or `deadline` passes (`None`: no
    /// deadline). `None` if it timed out: the ticket has left the queue.
    pub(crate) fn wait(&self, ticket: Ticket, deadline: Option<Instant>) -> Option<Handoff<T>> {
        let mut q = self.queue.lock();
        loop {
            if let Some(i) = q.served.iter().position(|(id, _)| *id == ticket.id) {
                return Some(q.served.swap_remove(i).1);
            }
            let timed_out;
            (q, timed_out) = ticket.wake.wait_until(q, deadline);
            if timed_out {
                return Self::leave(&self.count, &mut q, ticket.id);
            }
        }
    }

    /// Leaves the queue: `None` if the ticket was still waiting; what it
    /// was served with if a server got there first.
    pub(crate) fn cancel(&self, ticket: Ticket) -> Option<Handoff<T>> {
        let mut q = self.queue.lock();
        Self::leave(&self.count, &mut q, ticket.id)
    }

    fn leave(count: &AtomicUsize, q: &mut Queue<T>, ticket: u64) -> Option<Handoff<T>> {
        if let Some(i) = q.served.iter().position(|(id, _)| *id == ticket) {
            return Some(q.served.swap_remove(i).1);
        }
        if let Some(i) = q.waiting.iter().position(|(id, _)| *id == ticket) {
            q.waiting.remove(i);
            count.fetch_sub(1, Ordering::Relaxed);
        }
        None
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn served_oldest_first_and_a_cancelled_ticket_keeps_what_it_was_served() {
        let w = Waiters::<u32>::new();
        let (a, first) = w.enqueue();
        assert!(first);
        let (b, c) = (w.enqueue().0, w.enqueue().0);
        assert_eq!(w.len(), 3);
        w.serve(Handoff::Object(7)).unwrap();
        assert!(matches!(w.wait(a, None), Some(Handoff::Object(7))));
        // b times out with nothing; c is served next.
        assert!(w.wait(b, Some(Instant::now())).is_none());
        w.serve(Handoff::Place).unwrap();
        assert_eq!(w.len(), 0);
        assert!(matches!(w.cancel(c), Some(Handoff::Place)));
        assert!(matches!(
            w.serve(Handoff::Object(8)),
            Err(Handoff::Object(8))
        ));
    }
}
