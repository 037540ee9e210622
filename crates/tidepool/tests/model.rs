//! Model-based tests: random operation sequences run against a pool and
//! against a reference model of the documented design (two batches per
//! thread cache, Bonwick-style; a LIFO depot of whole batches capped at
//! `max_idle`, donations past the cap refused whole; `reclaim_unused` destroying the
//! oldest batches that sat unused since the previous call; `drain` destroying
//! the depot and every thread cache whose owner is not inside an operation,
//! which here means all of them, since operations run one at a time; thread
//! exit donating the cache; a `get` at `max_live` taking the other thread's
//! cache before it fails).
//!
//! Everything here runs one operation at a time (a second thread, when there
//! is one, runs while the main thread waits for it), so every figure in
//! `Stats` is exact and compared exactly, as are the ids handed out.

mod common;

use std::mem;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use common::{Counting, CreateFailed, Ledger, Obj};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use tidepool::{Error, OwnedPooled, Pool, Pooled};

type P = Pool<Counting>;

// === the reference model ===

#[derive(Clone, Copy, Debug)]
struct Cfg {
    batch: usize,
    max_idle: usize,
    max_live: Option<usize>,
}

impl Cfg {
    fn build(self) -> (P, Arc<Ledger>) {
        let (manager, ledger) = Counting::new();
        // Exact counts: no process-wide reclaimer, whose real memory-pressure
        // signals (or 15 s passes) would rightly change them mid-test.
        let mut b = Pool::builder(manager)
            .batch_size(self.batch)
            .max_idle(self.max_idle)
            .background(false);
        if let Some(n) = self.max_live {
            b = b.max_live(n);
        }
        (b.build().expect("valid config"), ledger)
    }
}

fn cfgs() -> impl Strategy<Value = Cfg> {
    (1usize..=4)
        .prop_flat_map(|batch| {
            (
                Just(batch),
                batch..=4 * batch,
                // A batch never exceeds max_live (refused at build).
                prop::option::weighted(0.3, batch..=12),
            )
        })
        .prop_map(|(batch, max_idle, max_live)| Cfg {
            batch,
            max_idle,
            max_live,
        })
}

/// One thread's cache: `loaded` and `spare`.
#[derive(Debug, Default)]
struct Cache {
    loaded: Vec<u64>,
    spare: Vec<u64>,
}

impl Cache {
    fn len(&self) -> usize {
        self.loaded.len() + self.spare.len()
    }

    fn pop(&mut self) -> Option<u64> {
        if let Some(id) = self.loaded.pop() {
            return Some(id);
        }
        if self.spare.is_empty() {
            return None;
        }
        mem::swap(&mut self.loaded, &mut self.spare);
        self.loaded.pop()
    }

    fn push(&mut self, id: u64, batch: usize) -> Result<(), u64> {
        if self.loaded.len() < batch {
            self.loaded.push(id);
            return Ok(());
        }
        if self.spare.len() < batch {
            mem::swap(&mut self.loaded, &mut self.spare);
            self.loaded.push(id);
            return Ok(());
        }
        Err(id)
    }
}

#[derive(Debug)]
struct Shelf {
    items: Vec<u64>,
    purged: bool,
}

/// What a `get` must return.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Id(u64),
    Exhausted,
    CreateFailed,
}

#[derive(Debug)]
struct Model {
    cfg: Cfg,
    caches: Vec<Cache>,
    /// Oldest first.
    depot: Vec<Shelf>,
    low_water: usize,
    exchanges: u64,
    next_id: u64,
    created: u64,
    destroyed: u64,
    detached: u64,
    misses: u64,
    gets: u64,
    returns: u64,
    discarded: u64,
    recycle_calls: u64,
    /// Caches taken by gets at `max_live`.
    caches_taken: u64,
}

impl Model {
    fn new(cfg: Cfg, threads: usize) -> Self {
        Self {
            cfg,
            caches: (0..threads).map(|_| Cache::default()).collect(),
            depot: Vec::new(),
            low_water: 0,
            exchanges: 0,
            next_id: 0,
            created: 0,
            destroyed: 0,
            detached: 0,
            misses: 0,
            gets: 0,
            returns: 0,
            discarded: 0,
            recycle_calls: 0,
            caches_taken: 0,
        }
    }

    fn depot_objects(&self) -> usize {
        self.depot.iter().map(|s| s.items.len()).sum()
    }

    fn depot_purged(&self) -> usize {
        self.depot
            .iter()
            .filter(|s| s.purged)
            .map(|s| s.items.len())
            .sum()
    }

    fn existing(&self) -> u64 {
        self.created - self.destroyed - self.detached
    }

    fn live(&self) -> u64 {
        self.gets - self.returns - self.discarded - self.detached
    }

    fn idle(&self) -> u64 {
        (self.depot_objects() + self.caches.iter().map(Cache::len).sum::<usize>()) as u64
    }

    /// A `get` on thread `t`; `create_fails` if the manager's `create` would
    /// fail were it called.
    fn get(&mut self, t: usize, create_fails: bool) -> Outcome {
        if let Some(id) = self.caches[t].pop() {
            self.gets += 1;
            return Outcome::Id(id);
        }
        if let Some(shelf) = self.depot.pop() {
            self.exchanges += 1;
            self.low_water = self.low_water.min(self.depot_objects());
            let cache = &mut self.caches[t];
            assert!(cache.loaded.is_empty() && cache.spare.is_empty());
            cache.loaded = shelf.items;
            let id = cache.pop().expect("depot batches are never empty");
            self.gets += 1;
            return Outcome::Id(id);
        }
        if let Some(limit) = self.cfg.max_live {
            if self.existing() >= limit as u64 {
                // Recycle before failing: another thread's cache goes to the
                // depot (what it refuses is destroyed), then try again.
                let Some(u) = (0..self.caches.len())
                    .map(|i| (t + 1 + i) % self.caches.len())
                    .find(|&u| u != t && self.caches[u].len() > 0)
                else {
                    return Outcome::Exhausted;
                };
                let cache = mem::take(&mut self.caches[u]);
                for batch in [cache.loaded, cache.spare] {
                    if batch.is_empty() {
                        continue;
                    }
                    if let Some(refused) = self.donate(batch) {
                        self.destroyed += refused.len() as u64;
                    }
                }
                self.caches_taken += 1;
                return self.get(t, create_fails);
            }
        }
        if create_fails {
            return Outcome::CreateFailed;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.created += 1;
        self.misses += 1;
        self.gets += 1;
        Outcome::Id(id)
    }

    /// Offers a batch to the depot; returns it if refused.
    fn donate(&mut self, batch: Vec<u64>) -> Option<Vec<u64>> {
        if self.depot_objects() + batch.len() > self.cfg.max_idle {
            return Some(batch);
        }
        self.exchanges += 1;
        self.depot.push(Shelf {
            items: batch,
            purged: false,
        });
        None
    }

    /// A guard holding `id` dropped on thread `t`; `recycle` says `recycle_ok`.
    fn put(&mut self, t: usize, id: u64, recycle_ok: bool) {
        self.recycle_calls += 1;
        if !recycle_ok {
            self.discard();
            return;
        }
        let batch = self.cfg.batch;
        if let Err(id) = self.caches[t].push(id, batch) {
            let full = mem::take(&mut self.caches[t].spare);
            let refused = self.donate(full);
            self.caches[t]
                .push(id, batch)
                .expect("room after donating the spare batch");
            if let Some(refused) = refused {
                self.destroyed += refused.len() as u64;
            }
        }
        self.returns += 1;
    }

    fn discard(&mut self) {
        self.discarded += 1;
        self.destroyed += 1;
    }

    fn detach(&mut self) {
        self.detached += 1;
    }

    fn reclaim_unused(&mut self) -> usize {
        let mut budget = self.low_water;
        let mut n = 0;
        while let Some(shelf) = self.depot.get(n) {
            if shelf.items.len() > budget {
                break;
            }
            budget -= shelf.items.len();
            n += 1;
        }
        let removed: usize = self.depot.drain(..n).map(|s| s.items.len()).sum();
        self.destroyed += removed as u64;
        self.low_water = self.depot_objects();
        removed
    }

    /// `drain` on any thread takes every thread cache (the caller's and
    /// those of owners parked outside an operation, which is every other
    /// thread here) and the whole depot.
    fn drain(&mut self) -> usize {
        let cached: usize = self.caches.iter().map(Cache::len).sum();
        let n = cached + self.depot_objects();
        self.caches.iter_mut().for_each(|c| *c = Cache::default());
        self.depot.clear();
        self.low_water = 0;
        self.destroyed += n as u64;
        n
    }

    /// Purging leaves every object (and the low-water mark) where it was.
    fn purge(&mut self) -> usize {
        let mut n = 0;
        for shelf in &mut self.depot {
            if !shelf.purged {
                shelf.purged = true;
                n += shelf.items.len();
            }
        }
        n
    }

    fn thread_exit(&mut self, t: usize) {
        let cache = mem::take(&mut self.caches[t]);
        for batch in [cache.loaded, cache.spare] {
            if batch.is_empty() {
                continue;
            }
            if let Some(refused) = self.donate(batch) {
                self.destroyed += refused.len() as u64;
            }
        }
    }

    fn drop_pool(&mut self) {
        let idle = self.idle();
        self.destroyed += idle;
        self.caches.iter_mut().for_each(|c| *c = Cache::default());
        self.depot.clear();
    }

    /// Compares the pool's stats and the manager's counts with the model.
    fn check(
        &self,
        pool: &P,
        ledger: &Ledger,
        holders: usize,
        threads: usize,
    ) -> Result<(), TestCaseError> {
        let s = pool.stats();
        let c = ledger.counts();
        prop_assert_eq!(s.created, self.created, "created; model {:?}", self);
        prop_assert_eq!(s.destroyed, self.destroyed, "destroyed; model {:?}", self);
        prop_assert_eq!(s.detached, self.detached, "detached");
        prop_assert_eq!(s.misses, self.misses, "misses");
        prop_assert_eq!(s.hits, self.gets - self.misses, "hits");
        prop_assert_eq!(s.live, self.live(), "live");
        prop_assert_eq!(s.live, holders as u64, "live == guards held");
        prop_assert_eq!(s.idle, self.idle(), "idle; model {:?}", self);
        prop_assert_eq!(
            s.idle,
            self.created - self.destroyed - self.detached - holders as u64,
            "idle == created - destroyed - detached - live"
        );
        prop_assert_eq!(s.live + s.idle, s.existing());
        prop_assert_eq!(s.idle_depot, self.depot_objects() as u64, "idle_depot");
        prop_assert_eq!(s.idle_purged, self.depot_purged() as u64, "idle_purged");
        prop_assert_eq!(s.depot_exchanges, self.exchanges, "depot_exchanges");
        prop_assert_eq!(s.caches_taken, self.caches_taken, "caches_taken");
        prop_assert!(s.idle_depot <= self.cfg.max_idle as u64);
        prop_assert!(s.idle as usize <= self.cfg.max_idle + threads * 2 * self.cfg.batch);
        prop_assert!(s.idle as usize <= pool.config().idle_bound(threads));
        if let Some(limit) = self.cfg.max_live {
            prop_assert!(s.existing() <= limit as u64);
        }
        // The manager agrees.
        prop_assert_eq!(c.created, s.created);
        prop_assert_eq!(c.destroyed, s.destroyed);
        prop_assert_eq!(c.detached, s.detached);
        prop_assert_eq!(c.recycle_calls, self.recycle_calls);
        prop_assert_eq!(c.recycle_calls, c.recycled + c.refused);
        ledger.assert_no_errors();
        Ok(())
    }
}

// === operations ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Main,
    Helper,
}

impl On {
    fn index(self) -> usize {
        match self {
            On::Main => 0,
            On::Helper => 1,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Get(On),
    /// A `get` while the manager's `create` fails.
    GetFailing(On),
    /// Drop guard `i` (on the given thread).
    PutBack(Index, On),
    /// Drop guard `i` while the manager's `recycle` refuses it.
    PutRefused(Index, On),
    Discard(Index, On),
    Detach(Index, On),
    ReclaimUnused(On),
    Drain(On),
    Purge(On),
    Stats,
    /// The helper thread exits (a new one starts on its next operation).
    HelperExit,
}

fn on(two_threads: bool) -> BoxedStrategy<On> {
    if two_threads {
        prop_oneof![Just(On::Main), Just(On::Helper)].boxed()
    } else {
        Just(On::Main).boxed()
    }
}

fn ops(two_threads: bool, purge: bool) -> impl Strategy<Value = Vec<Op>> {
    let t = || on(two_threads);
    let i = any::<Index>;
    let mut choices: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (6, t().prop_map(Op::Get).boxed()),
        (1, t().prop_map(Op::GetFailing).boxed()),
        (5, (i(), t()).prop_map(|(i, t)| Op::PutBack(i, t)).boxed()),
        (
            1,
            (i(), t()).prop_map(|(i, t)| Op::PutRefused(i, t)).boxed(),
        ),
        (1, (i(), t()).prop_map(|(i, t)| Op::Discard(i, t)).boxed()),
        (1, (i(), t()).prop_map(|(i, t)| Op::Detach(i, t)).boxed()),
        (1, t().prop_map(Op::ReclaimUnused).boxed()),
        (1, t().prop_map(Op::Drain).boxed()),
        (1, Just(Op::Stats).boxed()),
    ];
    if purge {
        choices.push((1, t().prop_map(Op::Purge).boxed()));
    }
    if two_threads {
        choices.push((1, Just(Op::HelperExit).boxed()));
    }
    prop::collection::vec(prop::strategy::Union::new_weighted(choices), 1..160)
}

fn expect_get<G: std::ops::Deref<Target = Obj>>(
    got: Result<G, Error<CreateFailed>>,
    want: Outcome,
    cfg: Cfg,
) -> Result<Option<G>, TestCaseError> {
    match (got, want) {
        (Ok(g), Outcome::Id(id)) => {
            prop_assert_eq!(g.id(), id, "wrong object handed out");
            Ok(Some(g))
        }
        (Err(Error::Exhausted { limit }), Outcome::Exhausted) => {
            prop_assert_eq!(Some(limit), cfg.max_live);
            Ok(None)
        }
        (Err(Error::Create(e)), Outcome::CreateFailed) => {
            prop_assert!(e.call > 0);
            Ok(None)
        }
        (Ok(g), want) => Err(TestCaseError::fail(format!(
            "got object {}, model expected {want:?}",
            g.id()
        ))),
        (Err(e), want) => Err(TestCaseError::fail(format!(
            "get failed with {e:?}, model expected {want:?}"
        ))),
    }
}

// === single thread, borrowed guards ===

fn run_single(cfg: Cfg, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (pool, ledger) = cfg.build();
    let mut model = Model::new(cfg, 1);
    {
        let mut guards: Vec<Pooled<'_, Counting>> = Vec::new();
        for op in ops {
            let before = pool.stats();
            match op {
                Op::Get(_) | Op::GetFailing(_) => {
                    let failing = matches!(op, Op::GetFailing(_));
                    if failing {
                        ledger.fail_create.arm(1);
                    }
                    let want = model.get(0, failing);
                    let got = pool.get();
                    ledger.fail_create.disarm();
                    if let Some(g) = expect_get(got, want, cfg)? {
                        ledger.check_out(g.id());
                        guards.push(g);
                    } else {
                        let after = pool.stats();
                        prop_assert_eq!(after.created, before.created);
                        prop_assert_eq!(after.misses, before.misses);
                        prop_assert_eq!(after.hits, before.hits);
                    }
                }
                Op::PutBack(i, _) | Op::PutRefused(i, _) if !guards.is_empty() => {
                    let ok = matches!(op, Op::PutBack(..));
                    let g = guards.swap_remove(i.index(guards.len()));
                    ledger.check_in(g.id());
                    model.put(0, g.id(), ok);
                    if !ok {
                        ledger.refuse_recycle.arm(1);
                    }
                    drop(g);
                    ledger.refuse_recycle.disarm();
                }
                Op::Discard(i, _) if !guards.is_empty() => {
                    let g = guards.swap_remove(i.index(guards.len()));
                    let id = g.id();
                    ledger.check_in(id);
                    model.discard();
                    g.discard();
                    prop_assert!(ledger.is_destroyed(id));
                }
                Op::Detach(i, _) if !guards.is_empty() => {
                    let g = guards.swap_remove(i.index(guards.len()));
                    let id = g.id();
                    ledger.note_detach(id);
                    model.detach();
                    let obj = g.detach();
                    prop_assert_eq!(obj.id(), id);
                }
                Op::ReclaimUnused(_) => {
                    let want = model.reclaim_unused();
                    let n = pool.reclaim_unused();
                    prop_assert_eq!(n, want, "reclaim_unused()");
                    let after = pool.stats();
                    prop_assert_eq!(before.idle - after.idle, n as u64);
                    prop_assert_eq!(after.destroyed - before.destroyed, n as u64);
                }
                Op::Drain(_) => {
                    let want = model.drain();
                    let n = pool.drain();
                    prop_assert_eq!(n, want, "drain()");
                    let after = pool.stats();
                    prop_assert_eq!(before.idle - after.idle, n as u64);
                    prop_assert_eq!(after.destroyed - before.destroyed, n as u64);
                    prop_assert_eq!(after.idle, 0, "one thread: drain empties the pool");
                }
                Op::Purge(_) => {
                    let want = model.purge();
                    prop_assert_eq!(pool.purge(), want, "purge()");
                    prop_assert_eq!(pool.stats().idle, before.idle);
                }
                Op::Stats => {
                    prop_assert_eq!(pool.stats(), before, "stats() changes nothing");
                }
                _ => {}
            }
            model.check(&pool, &ledger, guards.len(), 1)?;
        }
        for g in guards.drain(..) {
            ledger.check_in(g.id());
            model.put(0, g.id(), true);
            drop(g);
        }
        model.check(&pool, &ledger, 0, 1)?;
    }
    model.drop_pool();
    drop(pool);
    let c = ledger.counts();
    prop_assert_eq!(c.created, model.created);
    prop_assert_eq!(c.destroyed, model.destroyed);
    prop_assert_eq!(c.created, c.destroyed + c.detached);
    ledger.assert_all_accounted();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 6 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn single_thread_matches_model(cfg in cfgs(), ops in ops(false, false)) {
        run_single(cfg, ops)?;
    }

    #[test]
    fn single_thread_with_purge_matches_model(cfg in cfgs(), ops in ops(false, true)) {
        run_single(cfg, ops)?;
    }
}

// === two threads, owned guards ===

type G = OwnedPooled<Counting>;

enum Cmd {
    Get,
    Put(G),
    Discard(G),
    Detach(G),
    ReclaimUnused,
    Drain,
    Purge,
}

enum Reply {
    Got(Result<G, Error<CreateFailed>>),
    Count(usize),
    Detached(Obj),
    Done,
}

/// A second thread that runs one pool operation per command and replies. It
/// holds the pool only weakly between commands, so the main thread can drop
/// the pool while the helper is alive.
struct Helper {
    tx: Sender<Cmd>,
    rx: Receiver<Reply>,
    handle: JoinHandle<()>,
}

impl Helper {
    fn spawn(pool: Weak<P>) -> Self {
        let (tx, cmds) = channel::<Cmd>();
        let (replies, rx) = channel::<Reply>();
        let handle = std::thread::spawn(move || {
            while let Ok(cmd) = cmds.recv() {
                let pool = pool.upgrade().expect("pool alive while commanded");
                let reply = match cmd {
                    Cmd::Get => Reply::Got(pool.get_owned()),
                    Cmd::Put(g) => {
                        drop(g);
                        Reply::Done
                    }
                    Cmd::Discard(g) => {
                        g.discard();
                        Reply::Done
                    }
                    Cmd::Detach(g) => Reply::Detached(g.detach()),
                    Cmd::ReclaimUnused => Reply::Count(pool.reclaim_unused()),
                    Cmd::Drain => Reply::Count(pool.drain()),
                    Cmd::Purge => Reply::Count(pool.purge()),
                };
                drop(pool);
                if replies.send(reply).is_err() {
                    break;
                }
            }
        });
        Self { tx, rx, handle }
    }

    fn call(&self, cmd: Cmd) -> Reply {
        self.tx.send(cmd).expect("helper alive");
        self.rx.recv().expect("helper replied")
    }

    /// Exits the thread and waits until its thread-locals are gone.
    fn exit(self) {
        drop(self.tx);
        self.handle.join().expect("helper thread panicked");
    }
}

fn count(reply: Reply) -> usize {
    match reply {
        Reply::Count(n) => n,
        _ => panic!("expected a count"),
    }
}

fn run_two(cfg: Cfg, ops: Vec<Op>, drop_pool_first: bool) -> Result<(), TestCaseError> {
    let (pool, ledger) = cfg.build();
    let pool = Arc::new(pool);
    let mut model = Model::new(cfg, 2);
    let mut helper: Option<Helper> = None;
    let mut guards: Vec<G> = Vec::new();
    macro_rules! helper {
        () => {
            helper.get_or_insert_with(|| Helper::spawn(Arc::downgrade(&pool)))
        };
    }
    for op in ops {
        let before = pool.stats();
        match op {
            Op::Get(t) | Op::GetFailing(t) => {
                let failing = matches!(op, Op::GetFailing(_));
                if failing {
                    ledger.fail_create.arm(1);
                }
                let want = model.get(t.index(), failing);
                let got = match t {
                    On::Main => pool.get_owned(),
                    On::Helper => match helper!().call(Cmd::Get) {
                        Reply::Got(r) => r,
                        _ => panic!("expected a guard"),
                    },
                };
                ledger.fail_create.disarm();
                if let Some(g) = expect_get(got, want, cfg)? {
                    ledger.check_out(g.id());
                    guards.push(g);
                }
            }
            Op::PutBack(i, t) | Op::PutRefused(i, t) if !guards.is_empty() => {
                let ok = matches!(op, Op::PutBack(..));
                let g = guards.swap_remove(i.index(guards.len()));
                ledger.check_in(g.id());
                model.put(t.index(), g.id(), ok);
                if !ok {
                    ledger.refuse_recycle.arm(1);
                }
                match t {
                    On::Main => drop(g),
                    On::Helper => {
                        helper!().call(Cmd::Put(g));
                    }
                }
                ledger.refuse_recycle.disarm();
            }
            Op::Discard(i, t) if !guards.is_empty() => {
                let g = guards.swap_remove(i.index(guards.len()));
                let id = g.id();
                ledger.check_in(id);
                model.discard();
                match t {
                    On::Main => g.discard(),
                    On::Helper => {
                        helper!().call(Cmd::Discard(g));
                    }
                }
                prop_assert!(ledger.is_destroyed(id));
            }
            Op::Detach(i, t) if !guards.is_empty() => {
                let g = guards.swap_remove(i.index(guards.len()));
                let id = g.id();
                ledger.note_detach(id);
                model.detach();
                let obj = match t {
                    On::Main => g.detach(),
                    On::Helper => match helper!().call(Cmd::Detach(g)) {
                        Reply::Detached(obj) => obj,
                        _ => panic!("expected the object"),
                    },
                };
                prop_assert_eq!(obj.id(), id);
            }
            Op::ReclaimUnused(t) => {
                let want = model.reclaim_unused();
                let n = match t {
                    On::Main => pool.reclaim_unused(),
                    On::Helper => count(helper!().call(Cmd::ReclaimUnused)),
                };
                prop_assert_eq!(n, want, "reclaim_unused()");
                prop_assert_eq!(before.idle - pool.stats().idle, n as u64);
            }
            Op::Drain(t) => {
                let want = model.drain();
                let n = match t {
                    On::Main => pool.drain(),
                    On::Helper => count(helper!().call(Cmd::Drain)),
                };
                prop_assert_eq!(n, want, "drain()");
                let after = pool.stats();
                prop_assert_eq!(before.idle - after.idle, n as u64);
                prop_assert_eq!(after.idle_depot, 0);
                // The other thread was parked between operations: its cache
                // was taken too, so nothing idle is left anywhere.
                prop_assert_eq!(after.idle, 0, "drain takes every parked thread's cache");
            }
            Op::Purge(t) => {
                let want = model.purge();
                let n = match t {
                    On::Main => pool.purge(),
                    On::Helper => count(helper!().call(Cmd::Purge)),
                };
                prop_assert_eq!(n, want, "purge()");
            }
            Op::Stats => {
                prop_assert_eq!(pool.stats(), before, "stats() changes nothing");
            }
            Op::HelperExit => {
                if let Some(h) = helper.take() {
                    h.exit();
                    model.thread_exit(On::Helper.index());
                    prop_assert_eq!(pool.stats().idle_cached(), model.caches[0].len() as u64);
                }
            }
            _ => {}
        }
        model.check(&pool, &ledger, guards.len(), 2)?;
    }
    for g in guards.drain(..) {
        ledger.check_in(g.id());
        model.put(0, g.id(), true);
        drop(g);
    }
    model.check(&pool, &ledger, 0, 2)?;
    if drop_pool_first {
        // The helper (if any) is parked with objects in its cache: the pool's
        // drop destroys them, and the helper's exit later touches nothing.
        drop(pool);
        model.drop_pool();
        prop_assert_eq!(ledger.counts().destroyed, model.destroyed);
        if let Some(h) = helper.take() {
            h.exit();
        }
    } else {
        if let Some(h) = helper.take() {
            h.exit();
            model.thread_exit(On::Helper.index());
            model.check(&pool, &ledger, 0, 2)?;
        }
        prop_assert_eq!(Arc::strong_count(&pool), 1);
        drop(pool);
        model.drop_pool();
    }
    let c = ledger.counts();
    prop_assert_eq!(c.destroyed, model.destroyed);
    prop_assert_eq!(c.created, c.destroyed + c.detached);
    ledger.assert_all_accounted();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 128 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn two_threads_match_model(
        cfg in cfgs(),
        ops in ops(true, false),
        drop_pool_first in any::<bool>(),
    ) {
        run_two(cfg, ops, drop_pool_first)?;
    }

    #[test]
    fn two_threads_with_purge_match_model(
        cfg in cfgs(),
        ops in ops(true, true),
        drop_pool_first in any::<bool>(),
    ) {
        run_two(cfg, ops, drop_pool_first)?;
    }
}

// === fixed scenarios of the documented semantics ===

fn fill(pool: &P, n: usize) {
    let guards: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
    drop(guards);
}

#[test]
fn a_thread_caches_two_batches_and_donates_the_rest() {
    let cfg = Cfg {
        batch: 2,
        max_idle: 8,
        max_live: None,
    };
    let (pool, ledger) = cfg.build();
    fill(&pool, 8);
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle), (8, 0, 8));
    assert_eq!(s.idle_depot, 4, "two spare batches were donated");
    assert_eq!(s.idle_cached(), 4, "the cache keeps two batches");
    // Gets are served from the cache first, then from the depot, creating
    // nothing.
    fill(&pool, 8);
    let s = pool.stats();
    assert_eq!((s.created, s.hits, s.misses), (8, 8, 8));
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn donations_past_max_idle_are_destroyed_whole() {
    let cfg = Cfg {
        batch: 2,
        max_idle: 2,
        max_live: None,
    };
    let (pool, ledger) = cfg.build();
    fill(&pool, 10);
    let s = pool.stats();
    // Cache: 4; depot: one batch of 2; the other two spare batches refused.
    assert_eq!((s.idle_cached(), s.idle_depot), (4, 2));
    assert_eq!(s.destroyed, 4);
    assert_eq!(ledger.counts().destroyed, 4);
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn trim_destroys_only_batches_unused_since_the_previous_trim() {
    let cfg = Cfg {
        batch: 2,
        max_idle: 8,
        max_live: None,
    };
    let (pool, ledger) = cfg.build();
    fill(&pool, 8); // depot: 2 batches
    assert_eq!(pool.reclaim_unused(), 0, "no full period has passed yet");
    assert_eq!(pool.stats().idle_depot, 4);
    // Take one batch out of the depot (and give it back): the other one sat
    // unused for the whole period.
    fill(&pool, 6);
    assert_eq!(pool.stats().idle_depot, 4);
    assert_eq!(pool.reclaim_unused(), 2);
    assert_eq!(pool.stats().idle_depot, 2);
    // Nothing touched the depot since: all of it goes.
    assert_eq!(pool.reclaim_unused(), 2);
    let s = pool.stats();
    assert_eq!((s.idle_depot, s.idle, s.destroyed), (0, 4, 4));
    assert_eq!(pool.reclaim_unused(), 0);
    assert_eq!(pool.drain(), 4, "the thread's own cache");
    assert_eq!(pool.stats().idle, 0);
    drop(pool);
    ledger.assert_all_accounted();
}

/// `purge` keeps objects pooled and does not use them, so it must not hide
/// them from the next `reclaim_unused`.
#[test]
fn purge_does_not_shield_idle_batches_from_trim() {
    let cfg = Cfg {
        batch: 2,
        max_idle: 8,
        max_live: None,
    };
    let (pool, ledger) = cfg.build();
    fill(&pool, 8); // depot: 2 batches, cache: 2 batches
    assert_eq!(
        pool.reclaim_unused(),
        0,
        "first period: nothing sat idle yet"
    );
    assert_eq!(pool.purge(), 4);
    let s = pool.stats();
    assert_eq!((s.idle_depot, s.idle_purged, s.idle), (4, 4, 8));
    assert_eq!(pool.purge(), 0, "purged objects are not purged twice");
    // No thread used the depot since the previous call: both batches sat
    // unused the whole period.
    assert_eq!(
        pool.reclaim_unused(),
        4,
        "trim after purge must still destroy the batches that sat unused"
    );
    drop(pool);
    ledger.assert_all_accounted();
}

#[test]
fn drain_takes_parked_threads_caches_too() {
    let cfg = Cfg {
        batch: 2,
        max_idle: 16,
        max_live: None,
    };
    let (pool, ledger) = cfg.build();
    let pool = Arc::new(pool);
    let helper = Helper::spawn(Arc::downgrade(&pool));
    // The helper caches 4 objects, then parks on its command channel (alive).
    let guards: Vec<G> = (0..4)
        .map(|_| match helper.call(Cmd::Get) {
            Reply::Got(g) => g.unwrap(),
            _ => unreachable!(),
        })
        .collect();
    let helper_ids: Vec<u64> = guards.iter().map(|g| g.id()).collect();
    for g in guards {
        assert!(matches!(helper.call(Cmd::Put(g)), Reply::Done));
    }
    fill(&pool, 8); // main: 4 cached, 4 in the depot
    let s = pool.stats();
    assert_eq!((s.idle, s.idle_depot, s.idle_cached()), (12, 4, 8));
    assert_eq!(
        pool.drain(),
        12,
        "depot + main's cache + the parked helper's cache"
    );
    let s = pool.stats();
    assert_eq!((s.idle, s.idle_depot, s.destroyed), (0, 0, 12));
    assert_eq!(s.reclaimed, 0, "drain is not counted as reclaim");
    for id in helper_ids {
        assert!(
            ledger.is_destroyed(id),
            "helper's cached object {id} destroyed"
        );
    }
    // The helper's cache was taken while it was alive: it works on, creating
    // afresh, and its exit gives back what it cached since.
    let g = match helper.call(Cmd::Get) {
        Reply::Got(g) => g.unwrap(),
        _ => unreachable!(),
    };
    assert_eq!(g.id(), 12, "a new object: the old ones are gone");
    assert!(matches!(helper.call(Cmd::Put(g)), Reply::Done));
    let s = pool.stats();
    assert_eq!((s.created, s.live, s.idle, s.idle_cached()), (13, 0, 1, 1));
    helper.exit();
    let s = pool.stats();
    assert_eq!(
        (s.idle, s.idle_depot),
        (1, 1),
        "exit gave the new cache back"
    );
    drop(pool);
    ledger.assert_all_accounted();
}
