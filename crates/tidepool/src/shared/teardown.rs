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
//!  at most `limit` runners (a permit each) ──► destroy_batch per chunk
//!       ▲ a permit given back goes to the first waiter, if any
//!  waiters (drain_blocking, a get at max_live): FIFO, one condvar each
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
//! # Waiting for a permit
//!
//! Most runners never wait: a thread that finds every permit taken leaves
//! its work to the holders. Those that must see the queue empty before
//! they return (`drain_blocking`, a `get` at `max_live` flushing the
//! queue) wait in a FIFO of their own (DragonFly's queued lock): each takes
//! a ticket and sleeps on its own condition variable; a runner that gives
//! its permit back hands it to the first waiter and wakes that one thread
//! only. No spinning, no thundering herd, waiters served in ticket order.
//! The same kind of hand-off, with the waiter count in place of `queued`:
//!
//! ```text
//!  waiter:  (gate locked) waiters += 1 (SeqCst), then try a permit;
//!           one it gets goes to the first in line (maybe itself)
//!  runner:  give permit back (SeqCst), then read waiters (SeqCst);
//!           if any: (gate locked) try a permit, hand it to the first
//! ```
//!
//! Either the waiter's try sees the permit come free, or the runner sees
//! the waiter and hands a permit on: nobody sleeps while a permit is free.
//! A non-waiting runner may still take a free permit first (it does the
//! same work); the permit then reaches the line when it leaves.
//!
//! A `destroy_batch` runs under its thread's permit, and may reach its own
//! pool's teardown again (`drain_blocking`, a `get` at `max_live`). That
//! thread never waits for a permit or for progress of this queue: the
//! permit it would wait for is its own, and the progress its own chunk.
//! Each thread records the queues whose permit it holds (`HELD`); a
//! re-entered run destroys what it took itself on the permit it already
//! holds and leaves the queue to the run it is inside of.
//!
//! Invariants (objects):
//!
//! ```text
//! queued     == sum(len of the queue's batches)
//! destroying == queued + objects taken out by runners, not yet destroyed
//! running    <= limit
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use crate::reclaim::fork;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex, MutexGuard};

/// What one call of [`Teardown::run`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Run {
    /// Objects it destroyed.
    pub(crate) destroyed: usize,
    /// It stopped with objects still queued (its budget spent), and no
    /// runner was then seen to take them.
    pub(crate) left_behind: bool,
}

/// A thread waiting in line for a permit.
#[derive(Debug)]
struct Waiter {
    /// Its position in line (tests check the line is served in order).
    #[cfg(test)]
    ticket: u64,
    /// Set, under the gate's lock, when a permit is handed to it.
    granted: AtomicBool,
    /// Its own condition variable: a hand-off wakes exactly this thread.
    wake: Condvar,
}

/// The line of waiters, in ticket order.
#[derive(Debug, Default)]
struct Line {
    #[cfg(test)]
    next_ticket: u64,
    waiting: VecDeque<Arc<Waiter>>,
    /// Tickets served so far, in order (tests only).
    #[cfg(test)]
    served: Vec<u64>,
}

/// A pool's destroy queue.
#[derive(Debug)]
pub(crate) struct Teardown<T> {
    queue: Mutex<VecDeque<Vec<T>>>,
    /// Threads waiting for a permit, FIFO.
    line: Mutex<Line>,
    /// Threads in `line` (read without its lock by a leaving runner).
    waiters: AtomicUsize,
    /// Chunks destroyed so far: progress a thread at `max_live` waits for
    /// when the queue is empty but other runners still hold objects.
    finished: AtomicUsize,
    /// Threads in [`wait_for_progress`](Teardown::wait_for_progress).
    watchers: AtomicUsize,
    /// Wakes them (with the line's lock) when a chunk is done.
    progress: Condvar,
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

#[cfg(not(loom))]
std::thread_local! {
    /// The queues (by address) whose permit this thread holds.
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(loom)]
loom::thread_local! {
    static HELD: std::cell::RefCell<Vec<usize>> = std::cell::RefCell::new(Vec::new());
}

/// Records, while it lives, that this thread holds a permit of the queue
/// at `addr` (nothing if the thread's locals are already gone: its exit).
struct Holding {
    addr: usize,
    recorded: bool,
}

impl Holding {
    fn new(addr: usize) -> Self {
        let recorded = HELD.try_with(|held| held.borrow_mut().push(addr)).is_ok();
        Self { addr, recorded }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if self.recorded {
            let _ = HELD.try_with(|held| {
                let mut held = held.borrow_mut();
                if let Some(i) = held.iter().rposition(|&a| a == self.addr) {
                    held.swap_remove(i);
                }
            });
        }
    }
}

impl<T> Teardown<T> {
    pub(crate) fn new(limit: usize, chunk: usize) -> Self {
        Self {
            queue: Mutex::new(VecDeque::new()),
            line: Mutex::new(Line::default()),
            waiters: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            watchers: AtomicUsize::new(0),
            progress: Condvar::new(),
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

    /// [`queued`](Teardown::queued) as a read-modify-write: after this
    /// thread gave a permit back, it is ordered after a pusher's `queued +=
    /// n` (and sees it) or before it (and that pusher's try then sees the
    /// permit free), without relying on SeqCst loads, which loom models as
    /// acquire loads.
    fn queued_after_leaving(&self) -> usize {
        self.queued.fetch_add(0, Ordering::SeqCst)
    }

    /// The queue's lock, under the fork gate on the reclaimer thread
    /// (`reclaim/fork.rs`): a fork never finds the reclaimer holding it.
    /// The line's lock is taken the same way where its holder waits for
    /// nothing; a section that waits (for a permit, for progress) is not
    /// gated, or `prepare` would wait with it.
    fn lock_queue(&self) -> fork::Gated<MutexGuard<'_, VecDeque<Vec<T>>>> {
        fork::gated(|| self.queue.lock())
    }

    /// Queues `batches`; returns how many objects.
    pub(crate) fn push(&self, batches: impl IntoIterator<Item = Vec<T>>) -> usize {
        let mut queue = self.lock_queue();
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
        let mut queue = self.lock_queue();
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

    /// Whether this thread holds one of this queue's permits: it is inside
    /// a `destroy_batch` this queue runs.
    fn held_here(&self) -> bool {
        let me = self as *const Self as usize;
        HELD.try_with(|held| held.borrow().contains(&me))
            .unwrap_or(false)
    }

    /// This thread holds a permit (taken or handed to it) until the
    /// returned record is dropped, after [`leave`](Teardown::leave).
    fn holding(&self) -> Holding {
        Holding::new(self as *const Self as usize)
    }

    /// Gives a permit back, then hands free permits on to the line.
    fn leave(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        // A read-modify-write, not a load: it is ordered after a waiter's
        // `waiters += 1` or before it (then that waiter's try sees this
        // permit), without relying on SeqCst loads (which loom models as
        // acquire).
        if self.waiters.fetch_add(0, Ordering::SeqCst) > 0 {
            let mut line = fork::gated(|| self.line.lock());
            self.hand_on(&mut line);
        }
    }

    /// Under the line's lock: while a permit is free and someone waits,
    /// takes the permit for the first in line and wakes it (it alone).
    fn hand_on(&self, line: &mut Line) {
        while !line.waiting.is_empty() && self.try_enter() {
            let first = line.waiting.pop_front().expect("not empty");
            self.waiters.fetch_sub(1, Ordering::SeqCst);
            #[cfg(test)]
            line.served.push(first.ticket);
            first.granted.store(true, Ordering::Relaxed);
            first.wake.notify_one();
        }
    }

    /// Waits in line until a permit is handed to this thread; returns
    /// holding it.
    #[cold]
    fn wait_for_permit(&self) {
        let mut line = self.line.lock();
        let me = Arc::new(Waiter {
            #[cfg(test)]
            ticket: line.next_ticket,
            granted: AtomicBool::new(false),
            wake: Condvar::new(),
        });
        #[cfg(test)]
        {
            line.next_ticket += 1;
        }
        line.waiting.push_back(Arc::clone(&me));
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // A permit may have come free since this thread's failed try, with
        // nobody seen waiting: take it for the line.
        self.hand_on(&mut line);
        while !me.granted.load(Ordering::Relaxed) {
            line = me.wake.wait_until(line, None).0;
        }
    }

    /// Chunks destroyed so far, for [`wait_for_progress`](Teardown::wait_for_progress).
    pub(crate) fn progress(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }

    /// A chunk is destroyed (its places given back): wakes the threads
    /// waiting for progress. They are threads at `max_live` with nothing
    /// left in the queue to run, each with places to retry: all of them.
    fn chunk_done(&self) {
        self.finished.fetch_add(1, Ordering::SeqCst);
        // A read-modify-write, as in `leave`.
        if self.watchers.fetch_add(0, Ordering::SeqCst) > 0 {
            let _line = fork::gated(|| self.line.lock());
            self.progress.notify_all();
        }
    }

    /// Sleeps until a chunk is destroyed after [`progress`](Teardown::progress)
    /// read `seen`, or nothing is being destroyed any more. For a thread at
    /// `max_live` that found the queue empty while other runners still
    /// destroy the objects whose places it needs. The same hand-off as the
    /// line's: `watchers += 1` then read `finished`, against `finished +=
    /// 1` then read `watchers`.
    #[cold]
    pub(crate) fn wait_for_progress(&self, seen: usize) {
        if self.held_here() {
            // The chunk in flight may be this thread's own.
            return;
        }
        let mut line = self.line.lock();
        self.watchers.fetch_add(1, Ordering::SeqCst);
        while self.finished.load(Ordering::SeqCst) == seen && self.destroying() > 0 {
            line = self.progress.wait_until(line, None).0;
        }
        self.watchers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Tickets served so far, in order.
    #[cfg(test)]
    fn served(&self) -> Vec<u64> {
        self.line.lock().served.clone()
    }

    /// Threads waiting in line now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiters.load(Ordering::SeqCst)
    }

    /// Runs up to `max_chunks` chunks of the queue, each through `destroy`
    /// (which must not unwind, and returns how many it destroyed), if a
    /// permit is free; returns at once otherwise (the permit holders will
    /// see this thread's work). With `wait`, waits in line for a permit
    /// (FIFO, asleep; see the module notes) and runs until the queue is
    /// empty or the budget is spent.
    pub(crate) fn run(
        &self,
        max_chunks: usize,
        wait: bool,
        mut destroy: impl FnMut(Vec<Vec<T>>) -> usize,
    ) -> Run {
        let mut run = Run::default();
        if self.held_here() {
            // Inside a run of this queue on this thread: that run goes on
            // with the queue when the callback returns.
            return run;
        }
        let mut chunks = 0;
        while chunks < max_chunks && self.queued_after_leaving() > 0 {
            if !self.try_enter() {
                if !wait {
                    // A permit holder will look at the queue after it leaves.
                    return run;
                }
                // Returns holding a permit.
                self.wait_for_permit();
            }
            let _holding = self.holding();
            while chunks < max_chunks {
                let chunk = self.take_chunk();
                if chunk.is_empty() {
                    break;
                }
                let n: usize = chunk.iter().map(Vec::len).sum();
                let done = destroy(chunk);
                debug_assert_eq!(done, n);
                self.destroying.fetch_sub(n, Ordering::Relaxed);
                self.chunk_done();
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

    /// Destroys `own` (objects this thread took, e.g. a pool's idle
    /// objects for `drain_blocking`) on this thread under a permit,
    /// waiting in line for one if all are taken, then runs the queue until
    /// it is empty, as [`run`](Teardown::run) with `wait`. `own` counts as
    /// `destroying` until it is destroyed. Returns what this thread
    /// destroyed; `own` is all destroyed by then.
    pub(crate) fn run_own(
        &self,
        own: Vec<Vec<T>>,
        mut destroy: impl FnMut(Vec<Vec<T>>) -> usize,
    ) -> Run {
        let n: usize = own.iter().map(Vec::len).sum();
        let mut run = Run::default();
        let reentered = self.held_here();
        if n > 0 {
            self.destroying.fetch_add(n, Ordering::Relaxed);
            // Re-entered: on the permit this thread already holds.
            let entered = !reentered && {
                if !self.try_enter() {
                    // Returns holding a permit.
                    self.wait_for_permit();
                }
                true
            };
            let holding = entered.then(|| self.holding());
            let done = destroy(own);
            debug_assert_eq!(done, n);
            self.destroying.fetch_sub(n, Ordering::Relaxed);
            self.chunk_done();
            drop(holding);
            if entered {
                self.leave();
            }
            run.destroyed = done;
        }
        let rest = self.run(usize::MAX, true, &mut destroy);
        run.destroyed += rest.destroyed;
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
        let mut queue = self.lock_queue();
        let batches: Vec<Vec<T>> = queue.drain(..).collect();
        let n: usize = batches.iter().map(Vec::len).sum();
        self.queued.fetch_sub(n, Ordering::SeqCst);
        self.destroying.fetch_sub(n, Ordering::Relaxed);
        batches
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Waits (polling) until `f` holds. A hang guard, not a speed check: it
    /// gives up after 30,000 polls a millisecond apart.
    fn until(f: impl Fn() -> bool) {
        for _ in 0..30_000 {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the condition never held: a thread is stuck");
    }

    /// Pushes one object and starts a runner that destroys it inside the
    /// queue's only permit, holding the permit until `release` is sent.
    /// Returns once the runner is inside its chunk.
    fn a_runner_holding_the_permit(
        queue: &Arc<Teardown<u32>>,
        object: u32,
    ) -> (std::thread::JoinHandle<Run>, mpsc::Sender<()>) {
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        queue.push([vec![object]]);
        let runner = {
            let queue = Arc::clone(queue);
            std::thread::spawn(move || {
                queue.run(1, false, |chunk| {
                    entered_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    chunk.iter().map(Vec::len).sum()
                })
            })
        };
        entered.recv().unwrap();
        (runner, release)
    }

    /// One runner holds the only permit; four threads line up for it, one
    /// after the other; each permit given back goes to the first in line,
    /// so they are served in the order they came, one at a time.
    #[test]
    fn waiters_are_served_in_the_order_they_came() {
        let queue = Arc::new(Teardown::<u32>::new(1, 1));
        let (holder, release) = a_runner_holding_the_permit(&queue, 100);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..4u32 {
            let (q, order) = (Arc::clone(&queue), Arc::clone(&order));
            waiters.push(std::thread::spawn(move || {
                q.push([vec![i]]);
                q.run(usize::MAX, true, |chunk| {
                    order.lock().push(i);
                    chunk.iter().map(Vec::len).sum()
                })
            }));
            // In line before the next comes.
            until(|| queue.waiting() == i as usize + 1);
        }
        release.send(()).unwrap();
        assert_eq!(holder.join().unwrap().destroyed, 1);
        let destroyed: usize = waiters
            .into_iter()
            .map(|w| w.join().unwrap().destroyed)
            .sum();
        assert_eq!(destroyed, 4, "each object destroyed once");
        assert_eq!(queue.served(), vec![0, 1, 2, 3], "FIFO");
        // The first waiter, handed the permit, runs the whole queue.
        assert_eq!(*order.lock(), vec![0, 0, 0, 0]);
        assert_eq!(
            (queue.queued(), queue.destroying(), queue.waiting()),
            (0, 0, 0)
        );
    }

    /// A thread waiting for progress sleeps until a chunk is done, and
    /// returns at once if nothing is being destroyed.
    #[test]
    fn waiting_for_progress_ends_when_a_chunk_is_done() {
        let queue = Arc::new(Teardown::<u32>::new(1, 1));
        queue.wait_for_progress(queue.progress()); // nothing in flight
        let (runner, release) = a_runner_holding_the_permit(&queue, 1);
        let seen = queue.progress();
        let watcher = {
            let queue = Arc::clone(&queue);
            std::thread::spawn(move || queue.wait_for_progress(seen))
        };
        until(|| queue.watchers.load(Ordering::SeqCst) == 1);
        assert!(!watcher.is_finished());
        release.send(()).unwrap();
        watcher.join().unwrap();
        assert_eq!(runner.join().unwrap().destroyed, 1);
        assert_eq!(queue.progress(), seen + 1);
    }
}
