//! Shared test support: a counting, fault-injecting [`Manage`]r whose objects
//! carry unique ids, and a ledger that catches double destroys, objects held
//! by two guards at once, and objects used after they were destroyed.
//!
//! Every test binary uses a different part of this module.
#![allow(dead_code)]

pub mod child;

use std::collections::HashSet;
use std::fmt;
use std::panic;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::thread::JoinHandle;

use tidepool::Manage;

/// Waits (yielding) until `n` callers are queued at `pool`'s limit
/// (`get_timeout`, `get_async`): the order of arrival is made by
/// sequencing, not by timing.
pub fn until_waiting<M: Manage>(pool: &tidepool::Pool<M>, n: u64) {
    while pool.stats().waiting != n {
        std::thread::yield_now();
    }
}

/// A timeout long enough never to run out in a test: the outcome is decided
/// by the hand-offs, not by the clock.
pub const FOREVER: std::time::Duration = std::time::Duration::from_secs(600);

/// Every panic injected by [`Counting`] carries this text, so the panic hook
/// installed by [`quiet_injected_panics`] can keep the test output readable.
pub const INJECTED: &str = "tidepool-test: injected panic";

/// Silences the default panic message for panics injected by [`Counting`];
/// every other panic is reported as usual.
pub fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.contains(INJECTED) {
                default(info);
            }
        }));
    });
}

/// The text of a panic payload, if it is a string.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A pooled object: just a unique id (ids start at 0 and count up in
/// creation order).
#[derive(Debug, PartialEq, Eq)]
pub struct Obj {
    id: u64,
}

impl Obj {
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// What a failing `create` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateFailed {
    /// Which `create` call failed (1-based).
    pub call: u64,
}

impl fmt::Display for CreateFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "create call {} failed on purpose", self.call)
    }
}

impl std::error::Error for CreateFailed {}

/// A fault to inject: fires on `times` calls, after letting `skip` calls pass.
#[derive(Debug, Default)]
pub struct Trigger {
    state: Mutex<(u64, u64)>,
}

impl Trigger {
    /// Fire on the next `times` calls.
    pub fn arm(&self, times: u64) {
        self.arm_after(0, times);
    }

    /// Let `skip` calls pass, then fire on the next `times` calls. `arm_after(n - 1, 1)`
    /// fires on the n-th call from now.
    pub fn arm_after(&self, skip: u64, times: u64) {
        *lock(&self.state) = (skip, times);
    }

    /// Fire on every call from now on.
    pub fn always(&self) {
        self.arm(u64::MAX);
    }

    pub fn disarm(&self) {
        self.arm(0);
    }

    /// Whether this call is one to fail.
    pub fn fire(&self) -> bool {
        let mut s = lock(&self.state);
        if s.0 > 0 {
            s.0 -= 1;
            return false;
        }
        if s.1 > 0 {
            s.1 -= 1;
            return true;
        }
        false
    }
}

/// Locks ignoring poison: a panicking test thread must not hide the ledger
/// from the checks that follow.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which ids are where, and every inconsistency seen.
#[derive(Debug, Default)]
struct Book {
    created: HashSet<u64>,
    destroyed: HashSet<u64>,
    detached: HashSet<u64>,
    /// Ids currently held by a guard (as told by the test).
    in_use: HashSet<u64>,
    /// How many times each id was purged.
    purges: std::collections::HashMap<u64, u64>,
    /// Violations seen inside manager calls, which cannot always panic (the
    /// pool may call them from a TLS destructor or under `catch_unwind`).
    errors: Vec<String>,
}

/// Counts and fault switches of a [`Counting`] manager; outlives the pool.
#[derive(Debug, Default)]
pub struct Ledger {
    next_id: AtomicU64,
    create_calls: AtomicU64,
    created: AtomicU64,
    recycle_calls: AtomicU64,
    recycled: AtomicU64,
    refused: AtomicU64,
    destroy_calls: AtomicU64,
    discards: AtomicU64,
    purge_calls: AtomicU64,
    /// created - destroyed - detached, as the manager sees it (detaches are
    /// reported by the test with [`Ledger::note_detach`] *before* detaching,
    /// so this never exceeds the pool's own count).
    existing: AtomicU64,
    max_existing: AtomicU64,
    book: Mutex<Book>,
    /// `create` returns `Err(CreateFailed)` when this fires.
    pub fail_create: Trigger,
    /// `create` panics when this fires.
    pub panic_create: Trigger,
    /// `recycle` panics when this fires.
    pub panic_recycle: Trigger,
    /// `recycle` returns `false` when this fires.
    pub refuse_recycle: Trigger,
    /// `destroy` panics (after recording the destroy) when this fires.
    pub panic_destroy: Trigger,
    /// `purge` panics (after recording the purge) when this fires.
    pub panic_purge: Trigger,
}

/// A snapshot of a [`Ledger`]'s counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub create_calls: u64,
    pub created: u64,
    pub recycle_calls: u64,
    pub recycled: u64,
    pub refused: u64,
    pub destroyed: u64,
    pub detached: u64,
    /// Guards discarded through [`Held::discard`].
    pub discards: u64,
    /// Calls to `purge` (one per object purged).
    pub purged: u64,
}

impl Ledger {
    pub fn counts(&self) -> Counts {
        let book = lock(&self.book);
        Counts {
            create_calls: self.create_calls.load(SeqCst),
            created: self.created.load(SeqCst),
            recycle_calls: self.recycle_calls.load(SeqCst),
            recycled: self.recycled.load(SeqCst),
            refused: self.refused.load(SeqCst),
            destroyed: self.destroy_calls.load(SeqCst),
            detached: book.detached.len() as u64,
            discards: self.discards.load(SeqCst),
            purged: self.purge_calls.load(SeqCst),
        }
    }

    /// The most objects that existed at once (as the manager saw them).
    pub fn max_existing(&self) -> u64 {
        self.max_existing.load(SeqCst)
    }

    pub fn is_destroyed(&self, id: u64) -> bool {
        lock(&self.book).destroyed.contains(&id)
    }

    pub fn destroyed_ids(&self) -> HashSet<u64> {
        lock(&self.book).destroyed.clone()
    }

    /// Ids created and neither destroyed nor detached yet.
    pub fn existing_ids(&self) -> HashSet<u64> {
        let book = lock(&self.book);
        book.created
            .iter()
            .filter(|id| !book.destroyed.contains(id) && !book.detached.contains(id))
            .copied()
            .collect()
    }

    /// How many times object `id` was purged.
    pub fn purges_of(&self, id: u64) -> u64 {
        lock(&self.book).purges.get(&id).copied().unwrap_or(0)
    }

    /// Records that a guard now holds `id`. Fails the test if another guard
    /// holds it, or if it was never created, destroyed, or detached.
    pub fn check_out(&self, id: u64) {
        let mut book = lock(&self.book);
        assert!(book.created.contains(&id), "got object {id}, never created");
        assert!(
            !book.destroyed.contains(&id),
            "got object {id}, already destroyed"
        );
        assert!(
            !book.detached.contains(&id),
            "got object {id}, already detached"
        );
        assert!(
            book.in_use.insert(id),
            "object {id} is held by two guards at once"
        );
    }

    /// Records that the guard holding `id` is about to end (drop, discard).
    pub fn check_in(&self, id: u64) {
        assert!(
            lock(&self.book).in_use.remove(&id),
            "object {id} returned but not checked out"
        );
    }

    /// Records that `id` is about to be detached (call before `detach`). Also
    /// checks it in if it was checked out.
    pub fn note_detach(&self, id: u64) {
        let mut book = lock(&self.book);
        book.in_use.remove(&id);
        assert!(
            !book.destroyed.contains(&id),
            "detaching object {id}, already destroyed"
        );
        assert!(book.detached.insert(id), "object {id} detached twice");
        self.existing.fetch_sub(1, SeqCst);
    }

    /// Ids currently checked out.
    pub fn in_use(&self) -> usize {
        lock(&self.book).in_use.len()
    }

    /// Fails the test if any manager call saw an inconsistency (double
    /// destroy, destroy of a held object, recycle of a destroyed one, ...).
    pub fn assert_no_errors(&self) {
        let book = lock(&self.book);
        assert!(
            book.errors.is_empty(),
            "manager saw errors: {:?}",
            book.errors
        );
    }

    /// After the pool dropped: every created object was destroyed exactly once
    /// or detached, never both, and nothing was seen twice.
    pub fn assert_all_accounted(&self) {
        self.assert_no_errors();
        let book = lock(&self.book);
        assert!(
            book.in_use.is_empty(),
            "still checked out: {:?}",
            book.in_use
        );
        let overlap: Vec<_> = book.destroyed.intersection(&book.detached).collect();
        assert!(overlap.is_empty(), "destroyed and detached: {overlap:?}");
        let mut ended: HashSet<u64> = book.destroyed.clone();
        ended.extend(&book.detached);
        let leaked: Vec<_> = book.created.difference(&ended).collect();
        assert!(
            leaked.is_empty(),
            "never destroyed nor detached: {leaked:?}"
        );
        assert_eq!(ended.len(), book.created.len());
        let c = self.created.load(SeqCst);
        let d = self.destroy_calls.load(SeqCst);
        assert_eq!(
            c,
            d + book.detached.len() as u64,
            "created == destroyed + detached"
        );
        assert_eq!(self.existing.load(SeqCst), 0);
    }

    fn error(&self, book: &mut Book, msg: String) {
        let _ = self;
        book.errors.push(msg);
    }
}

/// A [`Manage`]r that counts, checks and misbehaves on demand; its
/// [`Ledger`] is shared with the test and outlives the pool.
#[derive(Debug)]
pub struct Counting {
    ledger: Arc<Ledger>,
}

impl Counting {
    pub fn new() -> (Self, Arc<Ledger>) {
        quiet_injected_panics();
        let ledger = Arc::new(Ledger::default());
        (
            Self {
                ledger: Arc::clone(&ledger),
            },
            ledger,
        )
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}

impl Manage for Counting {
    type Item = Obj;
    type Error = CreateFailed;

    fn create(&self) -> Result<Obj, CreateFailed> {
        let l = &*self.ledger;
        let call = l.create_calls.fetch_add(1, SeqCst) + 1;
        if l.panic_create.fire() {
            panic!("{INJECTED}: create call {call}");
        }
        if l.fail_create.fire() {
            return Err(CreateFailed { call });
        }
        let id = l.next_id.fetch_add(1, SeqCst);
        lock(&l.book).created.insert(id);
        l.created.fetch_add(1, SeqCst);
        let now = l.existing.fetch_add(1, SeqCst) + 1;
        l.max_existing.fetch_max(now, SeqCst);
        Ok(Obj { id })
    }

    fn recycle(&self, item: &mut Obj) -> bool {
        let l = &*self.ledger;
        l.recycle_calls.fetch_add(1, SeqCst);
        {
            let mut book = lock(&l.book);
            if book.destroyed.contains(&item.id) {
                let msg = format!("recycle of destroyed object {}", item.id);
                l.error(&mut book, msg);
            }
        }
        if l.panic_recycle.fire() {
            panic!("{INJECTED}: recycle of object {}", item.id);
        }
        if l.refuse_recycle.fire() {
            l.refused.fetch_add(1, SeqCst);
            return false;
        }
        l.recycled.fetch_add(1, SeqCst);
        true
    }

    fn purge(&self, item: &mut Obj) {
        let l = &*self.ledger;
        l.purge_calls.fetch_add(1, SeqCst);
        let mut book = lock(&l.book);
        let id = item.id;
        if !book.created.contains(&id) {
            l.error(&mut book, format!("purge of unknown object {id}"));
        }
        if book.destroyed.contains(&id) {
            l.error(&mut book, format!("purge of destroyed object {id}"));
        }
        if book.in_use.contains(&id) {
            l.error(&mut book, format!("purge of object {id} held by a guard"));
        }
        *book.purges.entry(id).or_default() += 1;
        drop(book);
        if l.panic_purge.fire() {
            panic!("{INJECTED}: purge of object {id}");
        }
    }

    fn destroy(&self, item: Obj) {
        let l = &*self.ledger;
        l.destroy_calls.fetch_add(1, SeqCst);
        {
            let mut book = lock(&l.book);
            let id = item.id;
            if !book.created.contains(&id) {
                l.error(&mut book, format!("destroy of unknown object {id}"));
            }
            if !book.destroyed.insert(id) {
                l.error(&mut book, format!("object {id} destroyed twice"));
            }
            if book.detached.contains(&id) {
                l.error(&mut book, format!("destroy of detached object {id}"));
            }
            if book.in_use.contains(&id) {
                l.error(&mut book, format!("destroy of object {id} held by a guard"));
            }
        }
        l.existing.fetch_sub(1, SeqCst);
        if l.panic_destroy.fire() {
            panic!("{INJECTED}: destroy of object {}", item.id);
        }
    }
}

/// An owned guard checked out in a [`Ledger`]: checked in again whenever it
/// ends, on whichever thread (drop, discard, detach, or a dropped channel).
#[derive(Debug)]
pub struct Held {
    guard: Option<tidepool::OwnedPooled<Counting>>,
    ledger: Arc<Ledger>,
}

impl Held {
    pub fn new(guard: tidepool::OwnedPooled<Counting>) -> Self {
        let ledger = Arc::clone(guard.pool().manager().ledger());
        ledger.check_out(guard.id());
        Self {
            guard: Some(guard),
            ledger,
        }
    }

    pub fn id(&self) -> u64 {
        self.guard.as_ref().expect("held").id()
    }

    /// The pool the guard came from (alive while the guard is).
    pub fn pool(&self) -> &tidepool::Pool<Counting> {
        self.guard.as_ref().expect("held").pool()
    }

    pub fn discard(mut self) {
        let guard = self.guard.take().expect("held");
        self.ledger.check_in(guard.id());
        self.ledger.discards.fetch_add(1, SeqCst);
        guard.discard();
    }

    /// Gives the object back through `pool` ([`tidepool::Pool::put`]).
    pub fn put_into(mut self, pool: &tidepool::Pool<Counting>) {
        let guard = self.guard.take().expect("held");
        self.ledger.check_in(guard.id());
        pool.put(guard);
    }

    pub fn detach(mut self) -> Obj {
        let guard = self.guard.take().expect("held");
        self.ledger.note_detach(guard.id());
        guard.detach()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            self.ledger.check_in(guard.id());
            drop(guard);
        }
    }
}

/// A loop count: `native` normally, `miri` under miri (bin/sanitize.sh),
/// which interprets every step and checks every access, so runs are
/// about a thousand times slower. The smaller count must still take every
/// path the test is about.
pub const fn scaled(native: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        native
    }
}

/// A small, seedable random number generator (xorshift64*), so tests need
/// no extra dependency and failures can be replayed from a printed seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

// === a thread that uses a pool, then parks (alive) on a channel ===

type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs the jobs it is sent one at a time and, between them,
/// blocks on its channel, alive, outside every pool operation: its thread
/// caches stay claimed while the test does other things.
pub struct Worker {
    jobs: Option<Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn spawn() -> Self {
        let (jobs, rx) = channel::<Job>();
        let handle = std::thread::spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        });
        Self {
            jobs: Some(jobs),
            handle: Some(handle),
        }
    }

    /// Runs `f` on the worker and waits for its result.
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.jobs.as_ref().unwrap().send(job).expect("worker alive");
        rx.recv().expect("worker ran the job")
    }

    /// Ends the thread and waits until it has exited (its thread-locals,
    /// and with them its caches, flushed).
    pub fn exit(mut self) {
        drop(self.jobs.take());
        self.handle.take().unwrap().join().expect("worker panicked");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
