//! Thread ids and the thread-exit hook.
//!
//! Every thread that uses a pool gets a small id, recycled smallest-first when
//! the thread exits, so the per-pool slot tables stay dense however many
//! short-lived threads come and go (the policy of `thread_local`'s
//! `ThreadIdManager` and sharded-slab's `tid`). The id is kept in a
//! constant-initialised, destructor-free thread-local, so reading it on the
//! fast path is one load with no lazy-init check.
//!
//! A second, lazily created thread-local ([`ThreadGuard`]) owns the id and the
//! list of pools this thread keeps a cache in. Its destructor hands each cache
//! back to its pool ([`ThreadExit::thread_exit`]), then frees the id. Pools are
//! held as `Weak`: a pool that is already gone destroyed this thread's cache
//! itself (see `Shared`'s `Drop`), and a pool that is still alive cannot be
//! dropped while the upgraded reference flushes into it, so the two never
//! touch the same cache at once.
//!
//! TLS destructors run in no fixed order, so a guard dropped by another
//! thread-local's destructor may reach a pool after this thread's
//! [`ThreadGuard`] is gone. The id is cleared first, so such late calls see no
//! id, fail to register, and take the pool's slot-less path straight to the
//! depot.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ptr::NonNull;
use std::sync::Weak;

#[cfg(not(loom))]
use crate::sync::fork_safe;
#[cfg(all(unix, not(loom)))]
use crate::sync::process::Ordering as ProcessOrdering;
#[cfg(loom)]
use crate::sync::Mutex;

/// The id of a thread that has none.
const NO_TID: usize = usize::MAX;

/// A pool that keeps per-thread caches and wants them back when a thread exits.
pub(crate) trait ThreadExit: Send + Sync {
    /// Called on the exiting thread `tid`, from its TLS destructor, for each
    /// pool it lists and each a sweep dropped from its list (maybe more than
    /// once for one pool: a later call finds no slot, or one an earlier call
    /// could not free, and tries again): move its cache back to the depot,
    /// and free its slot.
    fn thread_exit(&self, tid: usize);

    /// Called on thread `tid` by a sweep of its list ([`watch`]): whether
    /// its cache in this pool is still claimed. A cache the reclaimer took
    /// back (it holds nothing) is given up instead, as at thread exit, and
    /// the answer is `false`: the pool leaves the list, and the thread may
    /// take a cache elsewhere (its slot stays until the exit: the sweep
    /// may run inside this pool's own operation, which holds it).
    fn still_cached(&self, tid: usize) -> bool;
}

/// This thread's id, and the slot it last looked up: the table it belongs
/// to (by [`SlotTable`](super::SlotTable) id, never reused, 0 for none) and
/// where it is. The fast path finds its slot here with two loads and a
/// compare instead of the table walk.
struct Hot {
    tid: Cell<usize>,
    table: Cell<u64>,
    /// Dangling, never null, while nothing is remembered: the fast path
    /// then tests only the table id (a null test as well cost the guard's
    /// drop its inlining).
    slot: Cell<NonNull<()>>,
    /// New caches this thread, at its fill of them, refuses before it
    /// sweeps its list again ([`refuse_cheaply`]): nonzero only while the
    /// list is full. Here, not in [`Watched`], so that a refusal is a
    /// load and a store on a line the thread already has.
    refusals_left: Cell<usize>,
    /// The table (by id, 0 for none) in which this thread last looked for
    /// its slot and found none: a thread with no cache in a pool then
    /// skips the lookups its cold paths would repeat. Only a thread
    /// allocates its own slots, and it forgets this when it does
    /// ([`forget_absent`]), so a match means the slot is still absent.
    absent: Cell<u64>,
}

impl Hot {
    const fn new() -> Self {
        Self {
            tid: Cell::new(NO_TID),
            table: Cell::new(0),
            slot: Cell::new(NonNull::dangling()),
            refusals_left: Cell::new(0),
            absent: Cell::new(0),
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static HOT: Hot = const { Hot::new() };
}

#[cfg(loom)]
loom::thread_local! {
    static HOT: Hot = Hot::new();
}

crate::sync::thread_local! {
    static GUARD: ThreadGuard = ThreadGuard::new();
}

/// This thread's id, if it has registered with some pool and is not exiting.
#[inline(always)]
pub(crate) fn current_tid() -> Option<usize> {
    let tid = HOT.try_with(|hot| hot.tid.get()).unwrap_or(NO_TID);
    (tid != NO_TID).then_some(tid)
}

/// The slot this thread remembered last: `(table id, slot)`; table 0 and
/// a dangling slot if none. Cleared when the thread starts to exit, with
/// its id.
#[inline(always)]
pub(crate) fn remembered() -> (u64, NonNull<()>) {
    HOT.try_with(|hot| (hot.table.get(), hot.slot.get()))
        .unwrap_or((0, NonNull::dangling()))
}

/// Remembers `slot`, this thread's slot in the table `table`, looked up
/// with the id [`current_tid`] returned (which stays this thread's until
/// it exits, when this is forgotten).
#[inline]
pub(crate) fn remember(table: u64, slot: NonNull<()>) {
    let _ = HOT.try_with(|hot| {
        if hot.tid.get() != NO_TID {
            hot.table.set(table);
            hot.slot.set(slot);
        }
    });
}

/// Forgets the remembered slot if it is the one in the table `table`:
/// this thread is about to free it (`SlotTable::retire`).
#[inline]
pub(crate) fn forget(table: u64) {
    let _ = HOT.try_with(|hot| {
        if hot.table.get() == table {
            hot.table.set(0);
            hot.slot.set(NonNull::dangling());
        }
    });
}

/// Thread ids that [`slot_bit`] gives a bit: a pool's head keeps one
/// word with a bit per such id (`Head::slotted`).
pub(crate) const SLOT_BITS: usize = u64::BITS as usize;

/// The bit of a pool's `slotted` word that says the thread with id `tid`
/// has a slot there; 0 for ids past [`SLOT_BITS`], which the word does
/// not cover.
#[inline(always)]
pub(crate) fn slot_bit(tid: usize) -> u64 {
    if tid < SLOT_BITS {
        1 << tid
    } else {
        0
    }
}

/// Whether this thread surely has no slot in the table `table`, whose
/// pool's `slotted` word is `slotted`: the table is the one this thread
/// last found no slot in ([`note_absent`]), or this thread's id has a bit there and it is clear. Only a
/// thread allocates its own slot, and it sets its bit when it does, so a
/// clear bit holds until this very thread changes it. `true` only for a
/// registered thread that is not exiting (both are cleared at its exit).
/// One thread-local access and no look at the table: the slot-less get
/// and put ask this first.
#[inline(always)]
pub(crate) fn surely_slotless(table: u64, slotted: u64) -> bool {
    HOT.try_with(|hot| {
        let bit = slot_bit(hot.tid.get());
        hot.absent.get() == table || (bit != 0 && slotted & bit == 0)
    })
    .unwrap_or(false)
}

/// Notes that this thread has no slot in the table `table`.
#[inline]
pub(crate) fn note_absent(table: u64) {
    let _ = HOT.try_with(|hot| {
        if hot.tid.get() != NO_TID {
            hot.absent.set(table);
        }
    });
}

/// This thread is about to allocate a slot: what [`note_absent`] noted may no
/// longer hold.
#[inline]
pub(crate) fn forget_absent() {
    let _ = HOT.try_with(|hot| hot.absent.set(0));
}

/// Whether this thread, at its fill of caches, refuses one more without
/// asking its list: `true` (and counted) for the [`REFUSALS_AT_FILL`]
/// calls after the list fills, and the [`REFUSALS_PER_SWEEP`] after each
/// sweep that leaves it full; then `false` once, when [`watch`] must
/// decide (a sweep is due). A thread with no cache in a pool asks this
/// once it has found it has no slot there, so its get or put goes to the
/// depot at the cost of one thread-local load and store.
#[inline]
pub(crate) fn refuse_cheaply() -> bool {
    HOT.try_with(|hot| {
        let left = hot.refusals_left.get();
        hot.refusals_left.set(left.saturating_sub(1));
        left > 0
    })
    .unwrap_or(false)
}

/// Arms [`refuse_cheaply`] for the refusals until the next full sweep.
fn refuse_next(n: usize) {
    let _ = HOT.try_with(|hot| hot.refusals_left.set(n));
}

/// This thread's id, registering the thread if needed. `None` while the
/// thread's thread-locals are being destroyed.
#[cold]
pub(crate) fn current_tid_or_register() -> Option<usize> {
    current_tid().or_else(|| {
        GUARD
            .try_with(|guard| (!guard.exited.get()).then_some(guard.tid))
            .ok()
            .flatten()
    })
}

/// Runs this thread's exit hand-off now rather than from its TLS destructor.
///
/// Only for loom models: a loom `join` returns before the joined thread's
/// thread-locals are destroyed (unlike `std`'s), so models call this last
/// thing in each thread to make the flush part of what `join` waits for.
#[cfg(loom)]
pub(crate) fn exit_now() {
    let _ = GUARD.try_with(ThreadGuard::exit);
}

/// The most thread caches one thread keeps, across all pools.
///
/// A thread cache pays off when its thread comes back to the pool while
/// the cache is still in the CPU's caches. A thread that moves among
/// thousands of pools comes back to each too seldom for that: a cache in
/// each would only multiply the memory it touches (a cache's slot, its
/// batch and objects, per pool) until every get misses. So a thread keeps
/// at most this many; in the other pools it gets and puts through the
/// depot (the slot-less path: one lock, as a locked free list costs). A
/// cache the reclaimer takes back for sitting idle makes room at the
/// thread's next sweep (see [`Watched`]), so the caches go to the pools
/// the thread keeps using.
pub(crate) const MAX_CACHES: usize = 1024;

/// Asks for `pool.thread_exit(tid)` when this thread exits, and admits a
/// new cache in `pool` ([`MAX_CACHES`]). Returns `false` (and asks
/// nothing) when the thread has its fill of caches, or while its
/// thread-locals are being destroyed: the caller then takes the slot-less
/// path.
///
/// The caller asks once per cache: a slot remembers that its thread is
/// watching ([`LocalSlot::is_watched`](super::LocalSlot::is_watched)), so
/// a thread that re-claims its cache after the reclaimer took it back does
/// not come here again. A thread at its fill asks [`refuse_cheaply`] first,
/// and comes here only when a sweep is due. Each call is O(1), amortized
/// (see [`Watched`]).
#[cold]
pub(crate) fn watch(pool: impl FnOnce() -> Weak<dyn ThreadExit>) -> bool {
    let Ok((tid, admit)) = GUARD.try_with(|guard| (guard.tid, guard.pools.borrow_mut().admit()))
    else {
        return false;
    };
    match admit {
        Admit::Yes => {}
        Admit::AfterSweep(list) => {
            // Outside the borrow: `still_cached` runs no user code, but the
            // last reference to a pool may be dropped here (its drop is).
            let mut kept = Vec::with_capacity(list.len());
            let mut gone = Vec::new();
            for weak in list {
                if let Some(strong) = weak.upgrade() {
                    if strong.still_cached(tid) {
                        kept.push(weak);
                    } else {
                        gone.push(weak);
                    }
                }
            }
            let room = GUARD
                .try_with(|guard| guard.pools.borrow_mut().after_sweep(kept, gone))
                .unwrap_or(false);
            if !room {
                refuse_next(REFUSALS_PER_SWEEP);
                return false;
            }
        }
    }
    GUARD
        .try_with(|guard| guard.pools.borrow_mut().push(pool()))
        .is_ok()
}

/// What [`Watched::admit`] decided.
enum Admit {
    Yes,
    /// Full, and due for a sweep: the list, taken out.
    AfterSweep(Vec<Weak<dyn ThreadExit>>),
}

/// The pools this thread keeps a cache in (claimed, or taken back by the
/// reclaimer and not yet given up), as `Weak`s.
///
/// Two kinds of sweep keep it short, each run after more cheap calls than
/// it visits entries, so every call is O(1) amortized:
///
/// * a push sweeps out dropped pools when the list has doubled since the
///   last push sweep left it, so the list holds at most twice the live
///   pools this thread caches in (plus [`MIN_SWEEP`]) however many pools
///   come and go;
/// * a thread at [`MAX_CACHES`] asks each pool whether its cache is still
///   claimed ([`ThreadExit::still_cached`]) once it has been refused
///   [`REFUSALS_PER_SWEEP`] new caches, and forgets those that are not.
///   The refusals in between are counted down in the thread's hot
///   thread-local ([`refuse_cheaply`]), armed when the list fills (for
///   [`REFUSALS_AT_FILL`]) and after each sweep that leaves it full; they
///   never come here.
#[derive(Default)]
struct Watched {
    pools: Vec<Weak<dyn ThreadExit>>,
    /// The length at which the next push sweeps.
    sweep_at: usize,
    /// Pools a sweep dropped from `pools` whose slot this thread still
    /// holds: the sweep runs inside some pool's operation (a get's claim,
    /// maybe under a user callback that pool called), which may hold that
    /// very slot, so the slot is freed only at the thread's exit, with the
    /// others ([`ThreadExit::thread_exit`] on a slot already freed, or
    /// re-claimed and listed again, does nothing more). Pruned of dropped
    /// pools and duplicates when it has doubled since the last prune.
    given_up: Vec<Weak<dyn ThreadExit>>,
    /// The length at which `given_up` is pruned next.
    prune_at: usize,
    /// Entries pushed and visited by sweeps, and calls to
    /// [`admit`](Self::admit), for the tests' work counts.
    #[cfg(test)]
    work: (u64, u64, u64),
}

/// The smallest list that is swept.
const MIN_SWEEP: usize = 16;

/// Refusals between two sweeps of a full list that the last sweep found
/// all claimed: each sweep visits up to [`MAX_CACHES`] pools (an atomic
/// increment and a likely cache miss on each), so this many refusals keep
/// that to one visit in 64. A cache comes back to the reclaimer only after
/// a whole reclaim interval idle; a pool dropped since holds its entry
/// until the next sweep.
pub(crate) const REFUSALS_PER_SWEEP: usize = 64 * MAX_CACHES;

/// Refusals from the moment the list fills to its first sweep: fewer, as a
/// list that has just filled may hold pools dropped while it grew (push
/// sweeps run only when it doubles), which that sweep clears out.
pub(crate) const REFUSALS_AT_FILL: usize = 8 * MAX_CACHES;

impl Watched {
    /// Room for one more, or (full: the cheap refusals are spent) a
    /// sweep.
    fn admit(&mut self) -> Admit {
        #[cfg(test)]
        {
            self.work.2 += 1;
        }
        if self.pools.len() < MAX_CACHES {
            return Admit::Yes;
        }
        #[cfg(test)]
        {
            self.work.1 += self.pools.len() as u64;
        }
        Admit::AfterSweep(std::mem::take(&mut self.pools))
    }

    /// Puts back what a full sweep kept; `true` if there is room now.
    /// Pools watched meanwhile (by a drop the sweep caused) stay. `gone`:
    /// the live pools the sweep dropped, whose slots wait for the exit.
    fn after_sweep(
        &mut self,
        mut kept: Vec<Weak<dyn ThreadExit>>,
        mut gone: Vec<Weak<dyn ThreadExit>>,
    ) -> bool {
        kept.append(&mut self.pools);
        self.pools = kept;
        self.given_up.append(&mut gone);
        if self.given_up.len() >= self.prune_at {
            self.given_up.retain(|p| p.strong_count() > 0);
            self.given_up
                .sort_unstable_by_key(|p| p.as_ptr().cast::<()>());
            self.given_up
                .dedup_by(|a, b| std::ptr::addr_eq(a.as_ptr(), b.as_ptr()));
            self.prune_at = (2 * self.given_up.len()).max(MIN_SWEEP);
        }
        self.sweep_at = self.next_sweep();
        self.pools.len() < MAX_CACHES
    }

    /// The length at which a push sweeps next: twice the list now.
    fn next_sweep(&self) -> usize {
        (2 * (self.pools.len() + 1)).max(MIN_SWEEP)
    }

    fn push(&mut self, pool: Weak<dyn ThreadExit>) {
        #[cfg(test)]
        {
            self.work.0 += 1;
        }
        if self.pools.len() + 1 >= self.sweep_at {
            #[cfg(test)]
            {
                self.work.1 += self.pools.len() as u64;
            }
            self.pools.retain(|p| p.strong_count() > 0);
            self.sweep_at = self.next_sweep();
        }
        self.pools.push(pool);
        if self.pools.len() == MAX_CACHES {
            refuse_next(REFUSALS_AT_FILL);
        }
    }
}

/// This thread's watch work so far: `(pushes, entries visited by sweeps)`,
/// and the list's length now.
#[cfg(test)]
pub(crate) fn watch_work() -> (u64, u64, usize) {
    GUARD
        .try_with(|guard| {
            let w = guard.pools.borrow();
            (w.work.0, w.work.1, w.pools.len())
        })
        .unwrap_or_default()
}

/// How many times this thread has asked its list for a new cache.
#[cfg(test)]
pub(crate) fn watch_calls() -> u64 {
    GUARD
        .try_with(|guard| guard.pools.borrow().work.2)
        .unwrap_or_default()
}

/// Owns this thread's id and its list of pools; dropped at thread exit.
struct ThreadGuard {
    tid: usize,
    pools: RefCell<Watched>,
    /// The id has been given back; nothing may use it any more.
    exited: Cell<bool>,
}

impl ThreadGuard {
    fn new() -> Self {
        #[cfg(all(unix, not(loom)))]
        fork_safety::install();
        let tid = ids().lock().acquire();
        let _ = HOT.try_with(|hot| hot.tid.set(tid));
        Self {
            tid,
            pools: RefCell::new(Watched::default()),
            exited: Cell::new(false),
        }
    }

    /// Hands every cache back and frees the id; once.
    fn exit(&self) {
        if self.exited.replace(true) {
            return;
        }
        // From here on this thread uses no slot (see the module docs).
        let _ = HOT.try_with(|hot| {
            hot.tid.set(NO_TID);
            hot.table.set(0);
            hot.slot.set(NonNull::dangling());
            hot.refusals_left.set(0);
            hot.absent.set(0);
        });
        let (pools, given_up) = {
            let mut watched = self.pools.borrow_mut();
            (
                std::mem::take(&mut watched.pools),
                std::mem::take(&mut watched.given_up),
            )
        };
        for pool in pools.into_iter().chain(given_up) {
            if let Some(pool) = pool.upgrade() {
                pool.thread_exit(self.tid);
            }
        }
        ids().lock().release(self.tid);
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.exit();
    }
}

/// Hands out the smallest free id.
#[derive(Debug, Default)]
struct Ids {
    next: usize,
    free: BinaryHeap<Reverse<usize>>,
}

impl Ids {
    const fn new() -> Self {
        Self {
            next: 0,
            free: BinaryHeap::new(),
        }
    }

    fn acquire(&mut self) -> usize {
        if let Some(Reverse(id)) = self.free.pop() {
            return id;
        }
        let id = self.next;
        self.next += 1;
        id
    }

    fn release(&mut self, id: usize) {
        self.free.push(Reverse(id));
    }
}

/// The id registry. Its lock is held across `fork` (`fork_safety`):
/// `std`'s ([`fork_safe`] says why).
#[cfg(not(loom))]
fn ids() -> &'static fork_safe::Mutex<Ids> {
    static IDS: fork_safe::Mutex<Ids> = fork_safe::Mutex::new(Ids::new());
    &IDS
}

/// `fork(2)`: the id registry's lock is held across it, so a forked child
/// inherits it unlocked and consistent (see `reclaim/fork.rs` for the
/// contract).
#[cfg(all(unix, not(loom)))]
mod fork_safety {
    use std::cell::RefCell;
    use std::sync::Once;

    use super::{ids, Ids};
    use crate::sync::process::{AtomicU64, Ordering};

    std::thread_local! {
        static HELD: RefCell<Option<super::fork_safe::MutexGuard<'static, Ids>>> =
            const { RefCell::new(None) };
    }

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // Without the handlers, a fork while another thread registers
            // could leave the child's id lock held: reported, not fatal.
            if let Err(e) = crate::os::fork::at_fork(prepare, release, child) {
                crate::callbacks::warn(format_args!(
                    "tidepool: cannot install fork handlers for thread ids ({e})"
                ));
            }
        });
    }

    extern "C" fn prepare() {
        let _ = HELD.try_with(|held| *held.borrow_mut() = Some(ids().lock()));
    }

    extern "C" fn release() {
        drop(HELD.try_with(|held| held.borrow_mut().take()));
    }

    extern "C" fn child() {
        FORKS.fetch_add(1, Ordering::Relaxed);
        release();
    }

    /// Forks this process is a child of, since the handlers went in.
    pub(super) static FORKS: AtomicU64 = AtomicU64::new(0);
}

/// How many forks this process is a child of (since the first thread
/// registered): a slot claimed under another value was claimed by a thread
/// of a parent, which does not exist here.
pub(crate) fn fork_generation() -> u64 {
    #[cfg(all(unix, not(loom)))]
    return fork_safety::FORKS.load(ProcessOrdering::Relaxed);
    #[cfg(not(all(unix, not(loom))))]
    0
}

/// The id registry, modelled: handing a freed id to the next thread is what
/// orders a slot's successive owners. Loom tears its statics down before the
/// model's main thread runs its TLS destructors, so models use pools only
/// from spawned threads.
#[cfg(loom)]
fn ids() -> &'static Mutex<Ids> {
    loom::lazy_static! {
        static ref IDS: Mutex<Ids> = Mutex::new(Ids::new());
    }
    &IDS
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ids_are_recycled_smallest_first() {
        let mut ids = Ids::new();
        assert_eq!((ids.acquire(), ids.acquire(), ids.acquire()), (0, 1, 2));
        ids.release(2);
        ids.release(0);
        assert_eq!(ids.acquire(), 0);
        assert_eq!(ids.acquire(), 2);
        assert_eq!(ids.acquire(), 3);
    }

    #[test]
    fn a_thread_gets_an_id_on_registration() {
        std::thread::spawn(|| {
            assert_eq!(current_tid(), None);
            let tid = current_tid_or_register().unwrap();
            assert_eq!(current_tid(), Some(tid));
            assert_eq!(current_tid_or_register(), Some(tid));
        })
        .join()
        .unwrap();
    }
}
