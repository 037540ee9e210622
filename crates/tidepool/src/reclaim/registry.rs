//! The process-wide registry: the pools the reclaimer looks after, the
//! pressure sources waiting to be watched, their statuses, and the pressure
//! level waiting to be delivered.
//!
//! One lock ([`lock`]), held for a few moves at a time and never while user
//! code runs. The reclaimer reaches a pool through [`with_pool`]: it upgrades
//! the pool's `Weak` and marks the entry busy under the lock, then runs the
//! pool's tick *without* it. A dropping pool [`close`]s its entry: under the
//! lock it forgets the `Weak` and waits (on a condition variable, which
//! releases the lock) until no other thread is busy with it. So:
//!
//! * the reclaimer never holds the last reference of a pool that another
//!   thread drops: the pool's objects are destroyed by its own drop, on the
//!   dropping thread, before that drop returns;
//! * a callback run by the reclaimer may drop its own pool or build a new
//!   one: `close` on the reclaimer's own thread does not wait for itself
//!   (the pool then finishes dropping on the reclaimer thread, right after
//!   the tick), and registering takes the lock, which nobody holds;
//! * a `busy` mark left by a reclaimer that did not survive a `fork` belongs
//!   to an older fork generation and is ignored.
//!
//! # Deadlines
//!
//! Each entry keeps the time its pool next wants a tick (`due`), and the
//! timers order those times, so a round ticks only the pools that are due:
//! with P pools, one due costs O(log P) at most, not a walk over all P.
//! Deadlines mostly come in order (each tick asks for now plus its
//! interval, and pools share intervals): one no sooner than the last in
//! order joins a FIFO (`in_order`, O(1) to add and take), any other the
//! heap (`timers`). A pool that disarms has no deadline and no timer until
//! it arms itself ([`Registry::schedule`]). A timer whose time differs from
//! its entry's `due` (a sooner one was set, or the entry went) is stale and
//! skipped when it comes up.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::{Arc, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::signal::{Level, Source, SourceStatus};
use crate::sync::fork_safe::{self, Condvar, Mutex, MutexGuard};

/// A pool the reclaimer looks after.
pub(crate) trait Background: Send + Sync {
    /// Runs a due pass; says when to come back (`None`: nothing to do until
    /// the pool arms itself again, see `shared/pass.rs`).
    fn background_tick(&self) -> Option<Duration>;
    /// Applies a pressure level.
    fn background_pressure(&self, level: Level);
}

/// Where the default pressure sources come from: given by the pools (the
/// pressure module), so that reclaim need not name them.
pub(crate) type DefaultSources = fn() -> Vec<io::Result<Box<dyn Source>>>;

/// A pool's place in the registry, held by the pool and closed by its drop.
#[derive(Debug)]
pub(crate) struct Ticket(Key);

impl Ticket {
    /// The pool's entry.
    pub(crate) fn key(&self) -> Key {
        self.0
    }
}

/// An entry's index, and a serial so a reused index is not mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    index: usize,
    serial: u64,
}

struct Entry {
    serial: u64,
    /// `None` once closed.
    pool: Option<Weak<dyn Background>>,
    /// Who is running the pool's tick right now.
    busy: Option<Busy>,
    /// When the pool next wants a tick; `None` while it is disarmed (or
    /// its tick is running: the round sets the next one after it).
    due: Option<Instant>,
}

#[derive(Clone, Copy)]
struct Busy {
    thread: ThreadId,
    generation: u64,
}

/// A source handed to the reclaimer, and the index of its status.
pub(crate) struct Watched {
    pub(crate) source: Box<dyn Source>,
    pub(crate) status: usize,
}

/// Everything behind the registry lock.
pub(crate) struct Registry {
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    next_serial: u64,
    /// Entries whose pool is open (added and not closed).
    open: usize,
    /// Timers set sooner than the last one in `in_order`, soonest first;
    /// stale ones are skipped (see the module docs).
    timers: BinaryHeap<Reverse<Timer>>,
    /// Timers set in order, each no sooner than the one before: soonest
    /// at the front.
    in_order: VecDeque<Timer>,
    /// What the reclaimer sleeps until: `Some(None)` for no timeout,
    /// `None` while it is in a round (it reads the timers again before it
    /// sleeps). A deadline set sooner than this needs a wake-up; any
    /// other, none ([`Registry::schedule`]).
    pub(crate) sleeping_until: Option<Option<Instant>>,
    /// Sources not yet picked up by the reclaimer thread, which owns them
    /// from then on (so it can poll them without this lock).
    pub(crate) incoming: Vec<Watched>,
    pub(crate) statuses: Vec<SourceStatus>,
    pub(crate) pending: Option<Level>,
    /// The fork generation this state belongs to (`reclaim/fork.rs`).
    pub(crate) generation: u64,
    pub(crate) default_sources: Option<DefaultSources>,
    /// The default sources were opened in this generation.
    pub(crate) defaults_opened: bool,
    /// Reports made under the lock, emitted by [`unlock`] once it is
    /// released (the logger is user code).
    pub(crate) reports: Vec<String>,
    /// Teardowns of dropped pools, left for the reclaimer thread to finish
    /// (`scheduler::adopt`).
    pub(crate) orphans: Vec<Orphan>,
    /// Threads in [`close`] waiting for a tick to end: a tick's end wakes
    /// them only when there are some (a wake-up is a system call, and a
    /// round ends thousands of ticks). Never below the true number; a
    /// fork child may inherit a parent's waiter here, which costs it
    /// wake-ups nobody needs and nothing else.
    closing: usize,
}

/// A deadline: `(due, index, serial)` of an entry.
type Timer = (Instant, usize, u64);

/// The rest of a dropped pool's destroy queue, with its manager: run once
/// by the reclaimer thread.
pub(crate) type Orphan = Box<dyn FnOnce() + Send>;

static REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());

impl Registry {
    const fn new() -> Self {
        Self {
            entries: Vec::new(),
            free: Vec::new(),
            next_serial: 0,
            open: 0,
            timers: BinaryHeap::new(),
            in_order: VecDeque::new(),
            sleeping_until: Some(None),
            incoming: Vec::new(),
            statuses: Vec::new(),
            pending: None,
            generation: 0,
            default_sources: None,
            defaults_opened: false,
            reports: Vec::new(),
            orphans: Vec::new(),
            closing: 0,
        }
    }
}

/// Signalled when a tick ends while a `close` waits (`Registry::closing`).
static TICK_DONE: Condvar = Condvar::new();

/// The registry, locked.
pub(crate) fn lock() -> MutexGuard<'static, Registry> {
    REGISTRY.lock()
}

/// Releases the registry lock, then emits the reports made under it.
pub(crate) fn unlock(mut registry: MutexGuard<'static, Registry>) {
    let reports = std::mem::take(&mut registry.reports);
    drop(registry);
    for report in reports {
        crate::callbacks::warn(format_args!("{report}"));
    }
}

impl Registry {
    /// Adds a pool, with no deadline (it has nothing to reclaim until it
    /// arms itself); the caller keeps the ticket and closes it on drop.
    pub(crate) fn add_pool(&mut self, pool: Weak<dyn Background>) -> Ticket {
        let serial = self.next_serial;
        self.next_serial += 1;
        self.open += 1;
        let entry = Some(Entry {
            serial,
            pool: Some(pool),
            busy: None,
            due: None,
        });
        let index = match self.free.pop() {
            Some(index) => {
                self.entries[index] = entry;
                index
            }
            None => {
                self.entries.push(entry);
                self.entries.len() - 1
            }
        };
        Ticket(Key { index, serial })
    }

    /// Asks for a tick of the pool behind `key` at `at`, or sooner if it
    /// already has a sooner deadline. Returns whether the reclaimer must
    /// be woken for it: it sleeps past `at`.
    #[must_use = "wake the reclaimer if asked to"]
    pub(crate) fn schedule(&mut self, key: Key, at: Instant) -> bool {
        let Some(entry) = self.entry_mut(key) else {
            return false;
        };
        if entry.pool.is_none() || entry.due.is_some_and(|due| due <= at) {
            return false;
        }
        entry.due = Some(at);
        let timer = (at, key.index, key.serial);
        match self.in_order.back() {
            Some(&(last, _, _)) if at < last => self.timers.push(Reverse(timer)),
            _ => self.in_order.push_back(timer),
        }
        match self.sleeping_until {
            None => false,
            Some(None) => true,
            Some(Some(until)) => at < until,
        }
    }

    /// The pools due by `now`, their deadlines cleared (each round sets
    /// the next one from the tick's answer).
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Key> {
        let mut due = Vec::new();
        while let Some(&(at, index, serial)) = self.in_order.front() {
            if at > now {
                break;
            }
            self.in_order.pop_front();
            self.take_if_current(Key { index, serial }, at, &mut due);
        }
        while let Some(&Reverse((at, index, serial))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            self.take_if_current(Key { index, serial }, at, &mut due);
        }
        due
    }

    /// A timer for `key` at `at` came up: the pool is due if that is still
    /// its deadline (else the timer is stale).
    fn take_if_current(&mut self, key: Key, at: Instant, due: &mut Vec<Key>) {
        if let Some(entry) = self.entry_mut(key) {
            if entry.due == Some(at) && entry.pool.is_some() {
                entry.due = None;
                due.push(key);
            }
        }
    }

    /// The soonest deadline, if any pool has one (maybe a stale item's:
    /// the round it ends finds nothing due and sleeps again).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let heap = self.timers.peek().map(|&Reverse((at, _, _))| at);
        let fifo = self.in_order.front().map(|&(at, _, _)| at);
        heap.into_iter().chain(fifo).min()
    }

    /// The pools still registered, for one round of the reclaimer.
    pub(crate) fn open_pools(&self) -> Vec<Key> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, e)| {
                let e = e.as_ref()?;
                let open = e.pool.as_ref().is_some_and(|w| w.strong_count() > 0);
                open.then_some(Key {
                    index,
                    serial: e.serial,
                })
            })
            .collect()
    }

    /// Threads waiting in [`close`] for a tick to end.
    #[cfg(test)]
    pub(crate) fn closing(&self) -> usize {
        self.closing
    }

    /// How many pools are registered and not closed.
    pub(crate) fn pool_count(&self) -> usize {
        self.open
    }

    fn entry_mut(&mut self, key: Key) -> Option<&mut Entry> {
        self.entries
            .get_mut(key.index)?
            .as_mut()
            .filter(|e| e.serial == key.serial)
    }

    /// Frees a closed entry nobody is busy with.
    fn free_if_done(&mut self, key: Key, generation: u64) {
        let Some(entry) = self.entry_mut(key) else {
            return;
        };
        let busy = entry.busy.is_some_and(|b| b.generation == generation);
        if entry.pool.is_none() && !busy {
            self.entries[key.index] = None;
            self.free.push(key.index);
        }
    }

    /// Records a source (under its `name`, taken before the lock), or why
    /// it could not be had.
    pub(crate) fn add_source(&mut self, name: String, source: io::Result<Box<dyn Source>>) {
        match source {
            Ok(source) => {
                self.statuses.push(SourceStatus {
                    name,
                    error: None,
                    events: 0,
                });
                let status = self.statuses.len() - 1;
                self.incoming.push(Watched { source, status });
            }
            Err(error) => {
                self.reports.push(format!(
                    "tidepool: memory-pressure source {name} unavailable, continuing \
                     without it: {error}"
                ));
                self.statuses.push(SourceStatus {
                    name,
                    error: Some(error.to_string()),
                    events: 0,
                });
            }
        }
    }

    /// In a forked child, before its first reclaimer starts: the parent's
    /// sources belong to the parent's reclaimer (their descriptors are
    /// shared with it), and its pending level was the parent's. Returns the
    /// sources not yet handed over, for the caller to drop (closing the
    /// child's copies of their descriptors) once it has released the lock:
    /// a source's `Drop` is user code.
    #[must_use = "drop the sources outside the lock"]
    pub(crate) fn reset_for(&mut self, generation: u64) -> Vec<Watched> {
        self.statuses.clear();
        self.pending = None;
        self.defaults_opened = false;
        self.generation = generation;
        std::mem::take(&mut self.incoming)
    }
}

/// Runs `f` on the pool behind `key`, if it is still registered and alive,
/// without holding the registry lock while `f` runs (see the module docs).
pub(crate) fn with_pool<R>(
    key: Key,
    generation: u64,
    f: impl FnOnce(&dyn Background) -> R,
) -> Option<R> {
    let pool = {
        let mut registry = lock();
        let entry = registry.entry_mut(key)?;
        let pool = entry.pool.as_ref()?.upgrade()?;
        entry.busy = Some(Busy {
            thread: std::thread::current().id(),
            generation,
        });
        pool
    };

    /// Ends the tick, also on unwind: our reference goes first (it is the
    /// last one only if the pool was closed from inside the tick, on this
    /// thread: the pool then drops here, outside the lock), then the mark.
    struct Done {
        key: Key,
        generation: u64,
        pool: Option<Arc<dyn Background>>,
    }
    impl Drop for Done {
        fn drop(&mut self) {
            drop(self.pool.take());
            let mut registry = lock();
            if let Some(entry) = registry.entry_mut(self.key) {
                entry.busy = None;
            }
            registry.free_if_done(self.key, self.generation);
            // Read under the lock, which a closer holds from its count to
            // its wait: it is waiting, or has not yet looked at `busy`.
            let closing = registry.closing > 0;
            drop(registry);
            if closing {
                TICK_DONE.notify_all();
            }
        }
    }

    let done = Done {
        key,
        generation,
        pool: Some(pool),
    };
    let out = f(&**done.pool.as_ref().expect("set above"));
    drop(done);
    Some(out)
}

/// The pool behind `ticket` is going away: forget it, and wait for a tick in
/// progress on it on another thread (see the module docs).
pub(crate) fn close(ticket: &Ticket, generation: u64) {
    let key = ticket.0;
    let me = std::thread::current().id();
    let mut registry = lock();
    let Some(entry) = registry.entry_mut(key) else {
        return;
    };
    if entry.pool.take().is_some() {
        registry.open -= 1;
    }
    while let Some(entry) = registry.entry_mut(key) {
        match entry.busy {
            Some(b) if b.generation == generation && b.thread != me => {
                registry.closing += 1;
                registry = fork_safe::wait(&TICK_DONE, registry);
                registry.closing -= 1;
            }
            _ => break,
        }
    }
    registry.free_if_done(key, generation);
}

/// For the `fork` handlers: the registry lock, held across `fork`.
pub(crate) fn lock_for_fork() -> MutexGuard<'static, Registry> {
    REGISTRY.lock()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Idle;

    impl Background for Idle {
        fn background_tick(&self) -> Option<Duration> {
            None
        }
        fn background_pressure(&self, _: Level) {}
    }

    /// Every due pool once, stale timers skipped, the rest kept in order,
    /// whether deadlines come in order (the FIFO) or not (the heap).
    #[test]
    fn take_due_gives_each_due_pool_once_in_order_or_not() {
        for n in [1, 10, 300] {
            let pool: Arc<dyn Background> = Arc::new(Idle);
            let mut r = Registry::new();
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let keys: Vec<Key> = (0..2 * n)
                .map(|_| r.add_pool(Arc::downgrade(&pool)).key())
                .collect();
            let (first, second) = keys.split_at(n);
            // The first half asks in order for 1 s on (the FIFO), then
            // out of order for sooner times, due by 100 ms (the heap; the
            // FIFO's timers go stale); the second half in order, for 2 s on.
            for (i, &key) in first.iter().enumerate() {
                let _ = r.schedule(key, at(1000 + i as u64));
            }
            for (i, &key) in first.iter().enumerate().rev() {
                let _ = r.schedule(key, at(i as u64 % 100));
            }
            for (i, &key) in second.iter().enumerate() {
                let _ = r.schedule(key, at(2000 + i as u64));
            }
            assert_eq!(r.in_order.len(), 2 * n, "n = {n}");
            let mut due = r.take_due(at(100));
            due.sort_unstable();
            assert_eq!(due, first, "n = {n}");
            assert!(r.take_due(at(100)).is_empty(), "each once");
            assert!(r.take_due(at(1500)).is_empty(), "stale timers skipped");
            assert_eq!(r.next_deadline(), Some(at(2000)), "the rest kept");
            let mut later = r.take_due(at(10_000));
            later.sort_unstable();
            assert_eq!(later, second);
            assert_eq!(r.next_deadline(), None);
        }
    }
}
