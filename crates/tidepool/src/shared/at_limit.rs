//! What a `get` does when creating would pass `max_live`: it looks for an
//! idle object everywhere before it says [`Exhausted`](crate::Error::Exhausted).
//!
//! ```text
//!  create refused (max_live)
//!    1. the depot           another thread may have donated since we looked
//!    2. other threads' caches  steal one (the revocation protocol of
//!                           cache/slot.rs, waiting out an owner inside an
//!                           access), its batches go to the depot
//!    3. pending destroys    `flush_pending_destroys` (destroy.rs)
//!    then the caller's get loop tries again; after ROUNDS fruitless
//!    rounds (or when nothing at all turned up) the answer is Exhausted
//! ```
//!
//! So a `get` never fails while an idle object sits in a cache or the depot
//! of its pool (FreeBSD UMA and vnlru recycle before they fail or sleep).
//! Without a process-wide barrier (`membarrier(2)`: non-Linux, seccomp)
//! another thread's cache cannot be taken while its owner runs; the owner
//! is asked to flush at its next operation, and until then the `get` fails.
//!
//! `get_timeout` does the same, then joins the FIFO queue of `waiters.rs`
//! and sleeps until it is handed an object or a place, or time runs out.
//! `get_async` joins the same queue with its task's waker and returns
//! `Pending`; dropped while queued, it leaves the queue and passes on what
//! it was handed meanwhile (to the next waiter, else the depot).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::head::Head;
use super::waiters::{Handoff, TaskTicket};
use super::Shared;
use crate::callbacks::Site;
use crate::{Error, Manage};

/// How many times one `get` goes round the recycle-then-retry loop before
/// it gives up: other threads may take what a round freed.
pub(crate) const ROUNDS: usize = 4;

impl<M: Manage> Shared<M> {
    /// Called when `create` was refused for `max_live`. Brings idle objects
    /// where the caller's get loop will find them, or frees places under
    /// `max_live`: `true` if it did (or the depot has objects already), so
    /// the caller should try again; `false` if the pool truly holds no idle
    /// object it can reach, and the answer is `Exhausted`. `me` is the
    /// caller's thread id (its own cache is empty; it is not stolen from).
    #[cold]
    pub(crate) fn recycle_before_failing(&self, me: Option<usize>) -> bool {
        // 1. Donated to the depot since the caller looked.
        if self.head().depot.counts().idle > 0 {
            return true;
        }
        // 2. Another thread's cache: its batches go to the depot; what the
        // depot refuses (past `max_idle`) is destroyed, which frees places.
        let stolen = self.steal_cache(me);
        if !stolen.is_empty() {
            let refused = self.donate_all(stolen);
            // The caller holds nothing yet: a panic may reach it.
            self.destroy_batches(refused, Site::Caller);
            return true;
        }
        // 3. Destroys still under way.
        self.flush_pending_destroys()
    }
}

impl<M: Manage> Shared<M> {
    /// A get that waits up to `timeout` at `max_live`, FIFO-fair with the
    /// other waiters (see `waiters.rs`).
    pub(crate) fn get_timeout(
        this: &Arc<Self>,
        timeout: Duration,
    ) -> Result<M::Item, Error<M::Error>> {
        // Nobody waits: the plain get, recycling included. Somebody does:
        // join the queue behind them without taking anything first.
        if !this.head().waiters.any() {
            match Self::get(this, this.head()) {
                Err(Error::Exhausted { .. }) => {}
                done => return done,
            }
        }
        let limit = this.config.max_live.unwrap_or(usize::MAX);
        let deadline = Instant::now().checked_add(timeout);
        let (ticket, first) = this.head().waiters.enqueue();
        if first {
            // A put that saw no waiter just before we queued left its object
            // where a get finds it: look once more. (Behind other waiters
            // there is no such gap: every put since they queued served them.)
            match Self::get(this, this.head()) {
                Err(Error::Exhausted { .. }) => {}
                done => {
                    if let Some(handoff) = this.head().waiters.cancel(ticket) {
                        this.pass_on(handoff);
                    }
                    return done;
                }
            }
        }
        match this.head().waiters.wait(ticket, deadline) {
            Some(handoff) => this.redeem(handoff),
            None => Err(Error::Timeout { limit }),
        }
    }

    /// One poll of a `get_async` future whose place in the queue is
    /// `ticket` (`None`: not queued yet). As `get_timeout`, without the
    /// sleep: `Pending` with the task's waker queued.
    pub(crate) fn poll_get(
        this: &Arc<Self>,
        ticket: &mut Option<TaskTicket>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<M::Item, Error<M::Error>>> {
        if let Some(t) = ticket {
            return match this.head().waiters.poll_served(t, cx.waker()) {
                Some(handoff) => {
                    *ticket = None;
                    Poll::Ready(this.redeem(handoff))
                }
                None => Poll::Pending,
            };
        }
        if !this.head().waiters.any() {
            match Self::get(this, this.head()) {
                Err(Error::Exhausted { .. }) => {}
                done => return Poll::Ready(done),
            }
        }
        let (t, first) = this.head().waiters.enqueue_task(cx.waker());
        if first {
            // The gap `get_timeout` closes the same way.
            match Self::get(this, this.head()) {
                Err(Error::Exhausted { .. }) => {}
                done => {
                    this.cancel_get(t);
                    return Poll::Ready(done);
                }
            }
        }
        *ticket = Some(t);
        Poll::Pending
    }

    /// A `get_async` future dropped while queued: leaves the queue, and
    /// what it was handed meanwhile goes to the next waiter or the pool.
    pub(crate) fn cancel_get(&self, ticket: TaskTicket) {
        if let Some(handoff) = self.head().waiters.cancel_task(ticket) {
            self.pass_on(handoff);
        }
    }

    /// What a served waiter does with its hand-off.
    fn redeem(&self, handoff: Handoff<M::Item>) -> Result<M::Item, Error<M::Error>> {
        let item = match handoff {
            Handoff::Object(item) => item,
            Handoff::Place => self.create_reserved(super::Reservation(self, 1))?,
        };
        self.counters.waiter_gets.add(1);
        Ok(self.upkeep_holding(item, false))
    }

    /// A hand-off its waiter does not need (it found an object itself):
    /// to the next waiter, else back to the pool.
    fn pass_on(&self, handoff: Handoff<M::Item>) {
        match handoff {
            Handoff::Place => self.release_place(),
            Handoff::Object(item) => {
                if let Err(Handoff::Object(item)) = self.head().waiters.serve(Handoff::Object(item))
                {
                    if let Err(item) = self.shelve(item) {
                        self.destroy_batches(vec![vec![item]], Site::Upkeep);
                    }
                }
            }
        }
    }

    /// Shelves one object in the depot, then serves the waiters from it;
    /// gives the object back if the depot is at its cap (the caller
    /// destroys it). A waiter that queued since the caller last looked at
    /// the queue made its one look before the object got here.
    pub(crate) fn shelve(&self, item: M::Item) -> Result<(), M::Item> {
        probe!(Shelve);
        self.head().depot.put_one(item)?;
        self.after_shelving(self.head());
        Ok(())
    }

    /// [`shelve`](Self::shelve) for a return by a thread with no cache
    /// here, counted by the depot as one (refused or not).
    /// `head` is this pool's.
    #[inline(always)]
    pub(crate) fn shelve_lone(&self, head: &Head<M::Item>, item: M::Item) -> Result<(), M::Item> {
        probe!(Shelve);
        head.depot.put_lone(item, &head.lone)?;
        self.after_shelving(head);
        Ok(())
    }

    /// An object was just shelved: serve whoever waits for it (`head` is
    /// this pool's).
    #[inline(always)]
    fn after_shelving(&self, head: &Head<M::Item>) {
        if head.waiters_after_freeing() {
            self.serve_waiters_from_depot();
        }
    }

    /// [`Head::waiters_after_freeing`].
    pub(crate) fn waiters_after_freeing(&self) -> bool {
        self.head().waiters_after_freeing()
    }

    /// A guard's object, recycled, goes to the oldest waiter if there is
    /// one (counted as a return; the waiter counts the get). Gives it back
    /// if nobody waits.
    #[cold]
    pub(crate) fn hand_to_waiter(&self, item: M::Item) -> Option<M::Item> {
        match self.head().waiters.serve(Handoff::Object(item)) {
            Ok(()) => {
                self.counters.waiter_returns.add(1);
                None
            }
            Err(Handoff::Object(item)) => Some(item),
            Err(Handoff::Place) => unreachable!("served an object"),
        }
    }

    /// Objects that reached the depot while waiters wait (a thread's exit,
    /// a revoked cache) go to the waiters, oldest first.
    #[cold]
    pub(crate) fn serve_waiters_from_depot(&self) {
        while self.head().waiters.any() {
            let Some(item) = self.head().depot.take_one() else {
                return;
            };
            if let Err(Handoff::Object(item)) = self.head().waiters.serve(Handoff::Object(item)) {
                // They left meanwhile: back where it was, and round again,
                // as `shelve` does (one may have queued since).
                if let Err(item) = self.head().depot.put_one(item) {
                    self.destroy_batches(vec![vec![item]], Site::Upkeep);
                    return;
                }
            }
        }
    }
}
