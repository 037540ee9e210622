//! A pool's destroy queue: batches the pool decided to destroy, run in
//! chunks outside every lock by at most `limit` threads at a time.
//!
//! ```text
//!  reclaim, pressure, a refused donation, drain, thread exit, pool drop
//!       │ push (under the queue's lock: pointer moves only)
//!       ▼
//!  queue  [batch][batch][batch] ...      queued  = objects in it
//!       │ take a chunk (<= chunk objects)        destroying = queued +
//!       ▼                                          objects being destroyed
//!  at most `limit` runners (a permit each, try-acquired: nobody waits on
//!  a permit, so no wake-up storm) ──► destroy_batch per batch
//! ```
//!
//! DragonFly's 2017 fix for mass pipe teardown put the same bound (a
//! per-CPU queued lock: at most `ncpus` tear down at once) in front of the
//! kernel map; a thread that cannot get a permit leaves its work in the
//! queue and goes on, and a runner looks at the queue again after giving
//! its permit back. That hand-off is the one subtle step:
//!
//! ```text
//!  pusher:  queued += n  (SeqCst)   then  try to take a permit (SeqCst)
//!  runner:  give permit back (SeqCst) then  read queued       (SeqCst)
//! ```
//!
//! Either the pusher gets a permit (and runs its own work), or the runner's
//! read comes after the push in the single order of `SeqCst` operations and
//! sees the work. So a batch is never stranded while some runner is about
//! to stop; it is left behind only by a runner that stopped on purpose
//! (its chunk budget spent), which then reports it (`Run::left_behind`) so
//! the pool can wake the reclaimer. `src/tests/loom_teardown.rs` checks
//! both.
//!
//! Invariants (objects):
//!
//! ```text
//! queued     == sum(len of the queue's batches)
//! destroying == queued + objects taken out by runners, not yet destroyed
//! running    <= limit
//! ```

use std::collections::VecDeque;

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::Mutex;

/// What one call of [`Teardown::run`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Run {
    /// Objects it destroyed.
    pub(crate) destroyed: usize,
    /// It stopped with objects still queued (its budget spent), and no
    /// runner was then seen to take them.
    pub(crate) left_behind: bool,
}

/// A pool's destroy queue.
#[derive(Debug)]
pub(crate) struct Teardown<T> {
    queue: Mutex<VecDeque<Vec<T>>>,
    /// Objects in the queue.
    queued: AtomicUsize,
    /// Objects queued or being destroyed (`Stats::destroying`).
    destroying: AtomicUsize,
    /// Threads holding a permit.
    running: AtomicUsize,
    /// The reclaimer was asked to finish the queue and has not yet.
    wake_pending: AtomicBool,
    /// Most threads running chunks at once.
    limit: usize,
    /// Most objects per chunk (a whole batch is never split).
    chunk: usize,
}

impl<T> Teardown<T> {
    pub(crate) fn new(limit: usize, chunk: usize) -> Self {
        Self {
            queue: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            destroying: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            wake_pending: AtomicBool::new(false),
            limit: limit.max(1),
            chunk: chunk.max(1),
        }
    }

    /// Objects queued or being destroyed.
    pub(crate) fn destroying(&self) -> usize {
        self.destroying.load(Ordering::Relaxed)
    }

    /// Objects in the queue.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Queues `batches`; returns how many objects.
    pub(crate) fn push(&self, batches: impl IntoIterator<Item = Vec<T>>) -> usize {
        let mut queue = self.queue.lock();
        let mut n = 0;
        for batch in batches {
            if !batch.is_empty() {
                n += batch.len();
                queue.push_back(batch);
            }
        }
        // Counted while the batches are under the lock, so no runner can
        // take (and subtract) them before they are added.
        self.destroying.fetch_add(n, Ordering::Relaxed);
        self.queued.fetch_add(n, Ordering::SeqCst);
        n
    }

    /// Takes whole batches from the front, up to `chunk` objects (at least
    /// one batch). Empty when the queue is.
    fn take_chunk(&self) -> Vec<Vec<T>> {
        let mut queue = self.queue.lock();
        let mut chunk = Vec::new();
        let mut n = 0;
        while let Some(front) = queue.front() {
            if n > 0 && n + front.len() > self.chunk {
                break;
            }
            n += front.len();
            chunk.push(queue.pop_front().expect("just seen"));
        }
        self.queued.fetch_sub(n, Ordering::SeqCst);
        chunk
    }

    fn try_enter(&self) -> bool {
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                (now < self.limit).then_some(now + 1)
            })
            .is_ok()
    }

    fn leave(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    /// Runs up to `max_chunks` chunks of the queue, each through `destroy`
    /// (which must not unwind, and returns how many it destroyed), if a
    /// permit is free; returns at once otherwise (the permit holders will
    /// see this thread's work). With `wait`, waits for a permit (yielding,
    /// so nobody is woken) and runs until the queue is empty or the budget
    /// is spent.
    pub(crate) fn run(
        &self,
        max_chunks: usize,
        wait: bool,
        mut destroy: impl FnMut(Vec<Vec<T>>) -> usize,
    ) -> Run {
        let mut run = Run::default();
        let mut chunks = 0;
        while chunks < max_chunks && self.queued() > 0 {
            if !self.try_enter() {
                if wait {
                    crate::sync::yield_now();
                    continue;
                }
                // A permit holder will look at the queue after it leaves.
                return run;
            }
            while chunks < max_chunks {
                let chunk = self.take_chunk();
                if chunk.is_empty() {
                    break;
                }
                let n: usize = chunk.iter().map(Vec::len).sum();
                let done = destroy(chunk);
                debug_assert_eq!(done, n);
                self.destroying.fetch_sub(n, Ordering::Relaxed);
                run.destroyed += done;
                chunks += 1;
            }
            self.leave();
            // Loops (the `while` above) if work came in meanwhile.
        }
        // Only a run that stopped on its budget leaves work behind: one that
        // saw the queue empty may see a push made since, whose pusher then
        // takes a permit itself (loom found the false alarm).
        run.left_behind = chunks >= max_chunks && self.queued() > 0;
        run
    }

    /// Whether the reclaimer must be woken for work left behind: true
    /// once until [`woken`](Teardown::woken).
    pub(crate) fn needs_wake(&self) -> bool {
        !self.wake_pending.swap(true, Ordering::AcqRel)
    }

    /// The reclaimer is about to run the queue: the next work left behind
    /// wakes it again.
    pub(crate) fn woken(&self) {
        self.wake_pending.store(false, Ordering::Release);
    }

    /// Everything still queued, for a pool's drop to hand off.
    pub(crate) fn take_all(&self) -> Vec<Vec<T>> {
        let mut queue = self.queue.lock();
        let batches: Vec<Vec<T>> = queue.drain(..).collect();
        let n: usize = batches.iter().map(Vec::len).sum();
        self.queued.fetch_sub(n, Ordering::SeqCst);
        self.destroying.fetch_sub(n, Ordering::Relaxed);
        batches
    }
}
