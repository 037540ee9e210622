//! Everything reclaim does to one pool: interval passes, pressure
//! responses, holds, taking back idle thread caches, `reclaim_unused`, `drain`,
//! `purge`; and the tick the process-wide reclaimer calls. The policy is
//! described in the [`reclaim`](crate::reclaim) module docs.
//!
//! Each operation takes what it needs under the pool's locks, releases them,
//! then runs the manager's callbacks (`callbacks.rs`), and settles what they
//! panicked at its [`Site`] only once all of its objects are destroyed or
//! back in the depot: a panicking `destroy` never loses the objects taken
//! out alongside it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{IfBusy, Slot, Walk};
use crate::callbacks::{Caught, Site};
use crate::depot::MAX_WINDOW;
use crate::reclaim::fork;
use crate::reclaim::Clock;
use crate::shared::Shared;
use crate::signal::Level;
use crate::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, SharedCounter};
use crate::Manage;

/// A pool's reclaim state: when the next pass is due, any pressure hold,
/// whether the reclaimer knows the pool needs it, and the counts of what
/// reclaim did.
pub(crate) struct ReclaimShared {
    pub(crate) clock: Arc<dyn Clock>,
    /// When the next interval pass is due, in clock nanoseconds.
    next_pass: AtomicU64,
    /// When the next purge tick is due (`purge_delay`), in clock
    /// nanoseconds; `u64::MAX` without one.
    next_purge: AtomicU64,
    /// The purge delay in nanoseconds; 0 without one.
    purge_delay: u64,
    /// Until when critical pressure holds the depot at `min_idle`, in clock
    /// nanoseconds; 0 when there is no hold.
    hold_until: AtomicU64,
    /// When the last critical signal came, in clock nanoseconds; `u64::MAX`
    /// before the first. A default (unset) hold starts only for a signal that
    /// follows another within an interval: pressure that persists.
    last_critical: AtomicU64,
    /// The reclaimer counts this pool in its next deadline. Cleared by the
    /// reclaimer's tick when the pool has nothing to reclaim; set again
    /// (waking the reclaimer) when it creates an object or is put under a
    /// hold. See `arm_background`.
    armed: AtomicBool,
    /// Serialises passes, pressure responses and cache take-backs (two
    /// revokers must never work on one slot at once).
    lock: Mutex<PassState>,
    pub(crate) reclaimed: SharedCounter,
    pub(crate) passes: SharedCounter,
    pub(crate) pressure_medium: SharedCounter,
    pub(crate) pressure_critical: SharedCounter,
    pub(crate) caches_taken: SharedCounter,
    /// Objects busy thread caches gave back to the depot on a trim request.
    pub(crate) trimmed: SharedCounter,
    /// Depot exchanges by `get` and `put` (counted on their slow paths):
    /// every [`WINDOW_EXCHANGES`] of them end a traffic window.
    window_exchanges: AtomicU64,
    /// Objects those exchanges moved (a batch each, whatever its size
    /// was then).
    moved: AtomicU64,
}

/// What the passes remember about each thread cache, indexed by thread id.
#[derive(Default)]
struct PassState {
    /// The cache's `(gets, returns)` at the last pass.
    seen: Vec<(u64, u64)>,
    /// The operation count at which the cache was last taken back: a cache
    /// still at that count is empty, and is left alone.
    taken_at: Vec<u64>,
    /// Objects `get` and `put` had moved through the depot when the current
    /// traffic window began: the batch size adapts to their share of the
    /// window's operations.
    moved: u64,
    /// `ReclaimShared::trimmed` at each of the last passes, the latest
    /// last (at most [`MAX_WINDOW`] + 2).
    trimmed: VecDeque<u64>,
    /// The depot's working-set window, in intervals: 2, or longer once
    /// what a tick reclaimed was made again (see `adapt_window`).
    idle_window: usize,
    /// Intervals ended so far.
    intervals: u64,
    /// The last tick that reclaimed objects: the interval count then, and
    /// the window it used.
    reclaimed_at: Option<(u64, usize)>,
    /// Objects created, at the last pass.
    created: u64,
    /// Intervals since the window last grew.
    window_kept: u64,
    /// The sum of the pool's other counts of use at the last pass (see
    /// `other_uses`; each only grows, so the sum moves when any does):
    /// with the caches' counts, whether anything used the pool since.
    others_seen: u64,
    /// Intervals since the last pass that saw the pool used (see
    /// `tick_window`).
    quiet: u64,
    /// The longest such pause, shorter than [`MAX_WINDOW`], that the pool
    /// has shown and then been used again after: a pool quiet for longer
    /// has stopped being used, as far as its history tells. Lowered by
    /// one after every [`WINDOW_SHRINK_AFTER`] intervals of use, as the
    /// window is.
    longest_quiet: u64,
    /// Intervals of use since `longest_quiet` last grew or was lowered.
    quiet_kept: u64,
    /// The batch grew at the end of the last window: caches pick the new
    /// size up only at their next depot visit, so the window after a
    /// growth still carries exchanges of the old size. It only settles
    /// (never grows the batch).
    settling: bool,
    /// Each cache's `(gets, returns)` when the current traffic window
    /// began (`u64::MAX` gets: a cache new since then, counted from zero).
    window: Vec<(u64, u64)>,
    /// The pool's clock (ns) when the current traffic window began, and
    /// the depot exchanges counted then: a one-way flow's rate is its
    /// objects over the window's length, judged on windows of at least
    /// half [`WINDOW_EXCHANGES`] (a pass may end one just begun).
    window_began: u64,
    window_exchanges: u64,
    /// Each cache's unused objects over its last period (`Slot::period`):
    /// what it held through that period without needing.
    low: Vec<usize>,
    /// The cache's `(gets, returns)` at the last purge tick, and the
    /// operation count at which a purge tick last took it.
    purge_seen: Vec<(u64, u64)>,
    purge_taken_at: Vec<u64>,
    /// The serial of the slot each id's records are about
    /// ([`Slot::serial`]): another slot for the id (its next owner's, the
    /// first freed at its thread's exit) starts with fresh records.
    serials: Vec<u64>,
}

impl PassState {
    /// Makes room for `tid`'s records, fresh ones if they were about
    /// another slot than the one with `serial`.
    fn track(&mut self, tid: usize, serial: u64) {
        if self.serials.len() <= tid {
            let ids = tid + 1;
            self.serials.resize(ids, u64::MAX);
            self.seen.resize(ids, (u64::MAX, u64::MAX));
            self.taken_at.resize(ids, u64::MAX);
            self.low.resize(ids, 0);
            self.window.resize(ids, (u64::MAX, 0));
            self.purge_seen.resize(ids, (u64::MAX, u64::MAX));
            self.purge_taken_at.resize(ids, u64::MAX);
        }
        if self.serials[tid] != serial {
            self.serials[tid] = serial;
            self.seen[tid] = (u64::MAX, u64::MAX);
            self.taken_at[tid] = u64::MAX;
            self.low[tid] = 0;
            self.window[tid] = (u64::MAX, 0);
            self.purge_seen[tid] = (u64::MAX, u64::MAX);
            self.purge_taken_at[tid] = u64::MAX;
        }
    }

    /// Forgets the ids from `ids` on, which have no slot (their threads
    /// exited, and the slots were freed), once they are most
    /// of what is kept: a pool whose threads have gone keeps no memory per
    /// thread. A slot made later for such an id starts afresh, as another
    /// slot for a kept id does (`track`).
    fn fit_ids(&mut self, ids: usize) {
        if self.serials.len() <= 2 * ids {
            return;
        }
        fn fit<T>(v: &mut Vec<T>, ids: usize) {
            v.truncate(ids);
            v.shrink_to_fit();
        }
        fit(&mut self.seen, ids);
        fit(&mut self.taken_at, ids);
        fit(&mut self.low, ids);
        fit(&mut self.window, ids);
        fit(&mut self.purge_seen, ids);
        fit(&mut self.purge_taken_at, ids);
        fit(&mut self.serials, ids);
    }
}

/// The working-set window of a pool that has not seen a reclaim undone:
/// kmem's two intervals.
const MIN_WINDOW: usize = 2;

/// After this many intervals with no reclaim undone, the window shrinks by
/// one interval (towards [`MIN_WINDOW`]).
const WINDOW_SHRINK_AFTER: u64 = 4 * MAX_WINDOW as u64;

/// The batch grows when more than one in `GROW_SHARE` of a traffic
/// window's gets and puts went through the depot (each exchange moves a
/// batch).
const GROW_SHARE: u64 = 8;

/// A one-way flow (gets on some threads, puts on others) grows the batch
/// while a cache of two doubled batches holds no more than the flow moves
/// in this long: at a high rate a bigger batch halves the depot visits and
/// lets a returned object rest longer before it is handed out again (on
/// another core; the lab's `fio-cross-thread` measures it), while a trickle keeps its
/// small batch, since every object a consumer's cache holds is one a
/// producer has to create. Time on the pool's clock (the monotonic clock
/// unless a test injects one), not in reclaim intervals: depot traffic is
/// a matter of rate.
const ONE_WAY_HOLD: Duration = Duration::from_millis(10);

/// A traffic window also ends after this many depot exchanges (not only at
/// a reclaim pass): a pool under heavy depot traffic grows its batch within
/// milliseconds, not one interval per doubling. At the default batch, 64
/// exchanges move 2,048 objects; a pool that rarely visits the depot never
/// gets here between passes.
const WINDOW_EXCHANGES: u64 = 64;

/// Adds `intervals` to `kept`, the intervals `value` has held; once they
/// reach [`WINDOW_SHRINK_AFTER`], lowers `value` by one towards `floor`
/// and starts counting again. What the pass learnt (the window, the
/// longest pause) so fades when nothing renews it.
fn shrink_when_kept<N>(value: &mut N, floor: N, kept: &mut u64, intervals: u64)
where
    N: Copy + PartialOrd + std::ops::SubAssign + From<u8>,
{
    *kept = kept.saturating_add(intervals);
    if *kept >= WINDOW_SHRINK_AFTER && *value > floor {
        *value -= N::from(1);
        *kept = 0;
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ReclaimShared {
    pub(crate) fn new(clock: Arc<dyn Clock>, interval: Duration, purge: Option<Duration>) -> Self {
        let now = nanos(clock.now());
        let first = now.saturating_add(nanos(interval));
        let purge_delay = purge.map_or(0, |d| nanos(d).max(1));
        Self {
            clock,
            next_pass: AtomicU64::new(first),
            next_purge: AtomicU64::new(match purge_delay {
                0 => u64::MAX,
                d => now.saturating_add(d),
            }),
            purge_delay,
            hold_until: AtomicU64::new(0),
            last_critical: AtomicU64::new(u64::MAX),
            armed: AtomicBool::new(false),
            lock: Mutex::new(PassState {
                window_began: now,
                idle_window: MIN_WINDOW,
                ..PassState::default()
            }),
            reclaimed: SharedCounter::default(),
            passes: SharedCounter::default(),
            pressure_medium: SharedCounter::default(),
            pressure_critical: SharedCounter::default(),
            caches_taken: SharedCounter::default(),
            trimmed: SharedCounter::default(),
            window_exchanges: AtomicU64::new(0),
            moved: AtomicU64::new(0),
        }
    }

    /// The pool's clock, in nanoseconds. User code (a custom [`Clock`]):
    /// never called under a lock.
    fn now(&self) -> u64 {
        nanos(self.clock.now())
    }
}

impl<M: Manage> Shared<M> {
    /// Runs the interval pass if one is due, on behalf of `site`. Returns
    /// how many objects it destroyed.
    pub(crate) fn pass_if_due(&self, site: Site) -> usize {
        let now = self.reclaim.now();
        if now >= self.reclaim.next_pass.load(Ordering::Relaxed) {
            return self.pass(now, site);
        }
        if now >= self.reclaim.next_purge.load(Ordering::Relaxed) {
            self.purge_tick(now, site);
        }
        0
    }

    /// A purge tick (`purge_delay`): thread caches untouched since the last
    /// tick are taken (their objects idle), and the depot's objects unused
    /// since then are purged: their pages go back to the OS a short delay
    /// after their last use, while the working-set reclaim decides, over
    /// whole intervals, when the objects themselves go.
    #[cold]
    fn purge_tick(&self, now: u64, site: Site) {
        let taken = {
            let _gate = fork::gate();
            let Some(mut state) = self.reclaim.lock.try_lock() else {
                return;
            };
            if now < self.reclaim.next_purge.load(Ordering::Relaxed) {
                return;
            }
            self.reclaim.next_purge.store(
                now.saturating_add(self.reclaim.purge_delay),
                Ordering::Relaxed,
            );
            // The slots taken below stay allocated while `walk` lives.
            let walk = self.slots.walk();
            let mut quiet = Vec::new();
            walk.for_each(|tid, slot| {
                state.track(tid, slot.serial());
                let counts = slot.counts();
                let busy = std::mem::replace(&mut state.purge_seen[tid], counts) != counts;
                let ops = counts.0 + counts.1;
                if slot.is_owned() && !busy && state.purge_taken_at[tid] != ops {
                    quiet.push(slot);
                    state.purge_taken_at[tid] = ops;
                }
            });
            self.reclaim.caches_taken.add(quiet.len() as u64);
            Slot::revoke_remote(quiet, IfBusy::Flush)
        };
        let mut caught = Caught::default();
        // Idle since the last tick at least: they join the depot as idle,
        // so this tick purges them too.
        let refused = self.donate_all_idle(taken);
        self.reclaim_batches(refused, site, &mut caught);
        self.purge_batches(self.head().depot.purge_tick(), &mut caught);
        self.settle(caught, site);
    }

    /// For a background pool: makes sure the reclaimer runs (an atomic
    /// load when it does). Called on every operation but a cache hit, so
    /// that a reclaimer that died, or did not survive a `fork`, comes back.
    #[inline]
    pub(crate) fn supervise(&self) {
        #[cfg(not(loom))]
        if self.config.background {
            crate::reclaim::scheduler::ensure_running();
        }
    }

    #[cold]
    fn pass(&self, now: u64, site: Site) -> usize {
        let (taken, passing, tick) = {
            let _gate = fork::gate();
            // Whoever holds the lock is already doing this (or a pressure
            // response, which is at least as thorough).
            let Some(mut state) = self.reclaim.lock.try_lock() else {
                return 0;
            };
            let due = self.reclaim.next_pass.load(Ordering::Relaxed);
            if now < due {
                return 0;
            }
            let interval = nanos(self.config.reclaim_interval).max(1);
            let intervals = 1 + (now - due) / interval;
            self.reclaim.next_pass.store(
                due.saturating_add(intervals.saturating_mul(interval)),
                Ordering::Relaxed,
            );
            self.end_hold_if_over(now);

            // Thread caches untouched since the last pass, a whole interval
            // ago, are taken, their objects idle; so are those that only
            // gave back, their objects in transit to the threads that take
            // (a put-only cache never needs what it holds). Every other busy
            // cache begins a new period, and gives back the objects it held
            // without needing through this period and the last.
            let walk = self.slots.walk();
            let mut quiet = Vec::new();
            let mut put_only = Vec::new();
            let mut used = false;
            // One past the highest id with a slot here.
            let mut ids = 0;
            // Objects created, read as `lifetime_counts` reads them.
            let mut created = self.counters.created.read();
            walk.for_each(|tid, slot| {
                ids = tid + 1;
                created += slot.lifetime_counts().0;
                state.track(tid, slot.serial());
                let (gets, returns) = slot.counts();
                let ops = gets + returns;
                slot.note_pass_seen(ops);
                let (seen_gets, seen_returns) = state.seen[tid];
                state.seen[tid] = (gets, returns);
                let busy = (seen_gets, seen_returns) != (gets, returns);
                used |= busy;
                let (low, removed) = slot.period();
                let before = std::mem::replace(&mut state.low[tid], low);
                if !slot.is_owned() {
                    return;
                }
                if !busy {
                    if state.taken_at[tid] != ops {
                        quiet.push(slot);
                        state.taken_at[tid] = ops;
                    }
                } else if gets == seen_gets || (seen_gets == u64::MAX && gets == 0 && returns > 0) {
                    put_only.push(slot);
                    state.taken_at[tid] = ops;
                    state.low[tid] = 0;
                } else {
                    let unused = before.saturating_sub(removed).min(low);
                    slot.request_trim(unused, removed);
                    // What the trim takes leaves the cache: it is not
                    // counted unused through the next period too.
                    state.low[tid] = low - unused;
                }
            });
            self.reclaim
                .caches_taken
                .add((quiet.len() + put_only.len()) as u64);
            let taken = Slot::revoke_remote(quiet, IfBusy::Flush);
            let passing = Slot::revoke_remote(put_only, IfBusy::Flush);
            drop(walk);
            state.fit_ids(ids);
            self.adapt_window(&mut state, intervals, created);
            let others = self.other_uses();
            used |= std::mem::replace(&mut state.others_seen, others) != others;
            let window = Self::tick_window(&mut state, used, intervals);
            let tick = self
                .head()
                .depot
                .tick(intervals, self.config.min_idle, window);
            let reclaiming: u64 = tick.reclaim.iter().map(|b| b.len() as u64).sum();
            if reclaiming > 0 {
                // How long the reclaimed objects had sat unused: the window,
                // or the whole pause of a pool nobody used (`quiet` is 0
                // after a pass that saw use).
                let unused = window.max(state.quiet as usize).min(MAX_WINDOW);
                state.reclaimed_at = Some((state.intervals, unused));
            }
            // Objects trimmed from busy caches within the window are
            // reclaimed now if nobody took them: that is the trim working,
            // not a sign the batch is too big (halving it would bring back
            // the depot traffic that grew it, and the growth the hoard).
            let trimmed = self.reclaim.trimmed.read();
            state.trimmed.push_back(trimmed);
            while state.trimmed.len() > MAX_WINDOW + 2 {
                state.trimmed.pop_front();
            }
            // Trimmed in the interval before the window began, or since.
            let back = (state.idle_window + 1).min(state.trimmed.len() - 1);
            let trimmed_since = trimmed - state.trimmed[state.trimmed.len() - 1 - back];
            self.adapt_batch(&mut state, reclaiming > trimmed_since, now);
            self.reclaim.passes.add(1);
            (taken, passing, tick)
        };

        // Outside every lock: managers run here. Every object taken above is
        // destroyed or back in the depot before a panic is settled.
        let mut caught = Caught::default();
        // The quiet caches' objects sat unused through the interval this
        // pass ended: they go in as idle, so the next pass reclaims what is
        // still unused then (two intervals in all, as for the depot's own).
        let refused = self.donate_all_idle(taken);
        // A put-only cache's objects were moving, not idle: the depot
        // counts them from now.
        let refused_passing = self.donate_all(passing);
        let doomed: Vec<_> = tick
            .reclaim
            .into_iter()
            .chain(refused)
            .chain(refused_passing)
            .collect();
        let reclaimed = self.reclaim_batches(doomed, site, &mut caught);
        self.reclaim.reclaimed.add(reclaimed as u64);
        self.purge_batches(tick.purge, &mut caught);
        self.settle(caught, site);
        reclaimed
    }

    /// Lengthens the depot's working-set window when objects a tick
    /// reclaimed are made again soon after: a load whose need recurs every
    /// few intervals (a peak every third; the depot's level swinging by a
    /// batch as objects flow from one thread to another slower than a batch
    /// an interval) would otherwise have the same objects reclaimed and
    /// made again every period. Creates in the `intervals` just ended, `d`
    /// intervals after a tick with window `w` reclaimed, say the reclaimed
    /// objects were needed `w + d` intervals after their last use: the
    /// window becomes that long (at most [`MAX_WINDOW`]). Linux's
    /// workingset code measures the same refault distance for pages. Each
    /// [`WINDOW_SHRINK_AFTER`] intervals without such creates shrink it by
    /// one, back towards [`MIN_WINDOW`]. Under the pass lock; `created`:
    /// the objects created so far.
    fn adapt_window(&self, state: &mut PassState, intervals: u64, created: u64) {
        state.intervals += intervals;
        let made = created.saturating_sub(std::mem::replace(&mut state.created, created));
        if let Some((at, window)) = state.reclaimed_at {
            let distance = state.intervals - at;
            if distance > MAX_WINDOW as u64 {
                state.reclaimed_at = None;
            } else if made > 0 {
                // One reclaim teaches the window once: creates after it
                // (a pool still growing, say) do not lengthen it further.
                state.reclaimed_at = None;
                // At least double: a load's cycles can be longer than one
                // distance shows (several flows, each with its own period).
                let needed = (window as u64 + distance)
                    .max(2 * state.idle_window as u64)
                    .min(MAX_WINDOW as u64) as usize;
                if needed > state.idle_window {
                    state.idle_window = needed;
                    state.window_kept = 0;
                    return;
                }
            }
        }
        shrink_when_kept(
            &mut state.idle_window,
            MIN_WINDOW,
            &mut state.window_kept,
            intervals,
        );
    }

    /// The counts of use that no cache's `(gets, returns)` holds: the
    /// depot's lone gets and returns, and the slot-less gets that created
    /// or adopted plus the objects handed to and from waiters. Under the
    /// pass lock (the lone counts take the depot's).
    fn other_uses(&self) -> u64 {
        let (gets, returns) = self.head().depot.lone_counts(&self.head().lone);
        [
            gets,
            returns,
            self.slotless.gets.read(),
            self.counters.waiter_gets.read(),
            self.counters.waiter_returns.read(),
            self.counters.adopted.read(),
            // What threads that have exited since did here after the last
            // pass saw their slots.
            self.counters.retired_unseen.read(),
        ]
        .into_iter()
        .fold(0, u64::wrapping_add)
    }

    /// The window this pass's tick uses: the working-set window, or
    /// [`MIN_WINDOW`] for a pool nobody has used (no count of a get or put
    /// moved: a cache's, the depot's lone ones, a waiter's, an adoption)
    /// through more whole intervals than any pause it has shown and then
    /// been used again after, and through at least [`MIN_WINDOW`] of them.
    /// A window lengthened by a load that recurs keeps objects for that
    /// load's next need; a pool that went quiet for longer than the load
    /// ever paused has no next need it knows of, and its idle objects go
    /// down to `min_idle` as a fresh pool's would. A pool that does come
    /// back then learns its pause (and, through what it makes again, its
    /// window), so a load with quiet gaps learns them as one that only dips
    /// learns its period; a pause of [`MAX_WINDOW`] or more is not learnt,
    /// since no window keeps objects that long. Under the pass lock;
    /// `used`: something used the pool in the `intervals` just ended.
    fn tick_window(state: &mut PassState, used: bool, intervals: u64) -> usize {
        if used {
            // The pause ended somewhere in those intervals: at most this long.
            let pause = state.quiet.saturating_add(intervals - 1);
            state.quiet = 0;
            if pause > state.longest_quiet && pause < MAX_WINDOW as u64 {
                state.longest_quiet = pause;
                state.quiet_kept = 0;
            } else {
                shrink_when_kept(
                    &mut state.longest_quiet,
                    0,
                    &mut state.quiet_kept,
                    intervals,
                );
            }
            return state.idle_window;
        }
        state.quiet = state.quiet.saturating_add(intervals);
        if state.quiet > state.longest_quiet && state.quiet >= MIN_WINDOW as u64 {
            MIN_WINDOW
        } else {
            state.idle_window
        }
    }

    /// Counts a depot exchange of `objects` by `get` or `put` (their slow
    /// paths, once per batch): every [`WINDOW_EXCHANGES`] of them end a
    /// traffic window early, so that the batch grows as fast as the traffic
    /// asks (the kmem magazine layer resizes on contention, not on a
    /// timer). Returns whether this one ends a window: the caller ends it
    /// in its upkeep ([`upkeep`](Self::upkeep)), once the objects of the
    /// exchange are where they belong, since it reads the pool's clock.
    #[inline]
    #[must_use]
    pub(crate) fn note_exchange(&self, objects: usize) -> bool {
        self.reclaim
            .moved
            .fetch_add(objects as u64, Ordering::Relaxed);
        let n = self
            .reclaim
            .window_exchanges
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        n % WINDOW_EXCHANGES == 0 && self.batch() < self.config.max_batch
    }

    /// The upkeep at the end of a `get` or `put` slow path (the operation
    /// itself succeeded): the traffic window `note_exchange` said is due,
    /// the lazy pass if one is due (contained, like every pass), and a
    /// chunk of teardown work left behind (the next callers help, a chunk
    /// each: all a pool without the reclaimer thread has). Also makes sure
    /// the reclaimer runs, for a background pool. The window and the pass
    /// read the pool's clock, user code whose panic reaches the caller
    /// (see [`Clock`]): a caller with an object in hand uses
    /// [`upkeep_holding`](Self::upkeep_holding).
    pub(crate) fn upkeep(&self, window_due: bool) {
        if window_due {
            self.end_window_slow();
        }
        self.supervise();
        self.pass_if_due(Site::Upkeep);
        self.run_teardown(1, false, Site::Upkeep);
    }

    /// [`upkeep`](Self::upkeep) for a `get` that holds the object it is
    /// about to hand out: if the clock panics, the object is destroyed
    /// (counted, as a discarded guard's) before the panic goes on to the
    /// caller, so none is lost.
    pub(crate) fn upkeep_holding(&self, item: M::Item, window_due: bool) -> M::Item {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.upkeep(window_due))) {
            Ok(()) => item,
            Err(panic) => {
                self.discard(item);
                std::panic::resume_unwind(panic)
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn end_window_slow(&self) {
        // Before the lock: the clock may be user code.
        let now = self.reclaim.now();
        let _gate = fork::gate();
        let Some(mut state) = self.reclaim.lock.try_lock() else {
            return;
        };
        self.adapt_batch(&mut state, false, now);
    }

    /// The caches' gets and returns since the traffic window began,
    /// `balanced` (per cache, the lesser of its gets and returns, twice),
    /// and how many caches some thread owns; starts the next window. Under
    /// the pass lock.
    fn window_traffic(&self, state: &mut PassState) -> (u64, u64, usize) {
        let (mut total_ops, mut balanced, mut owners) = (0, 0, 0);
        self.slots.for_each(|tid, slot| {
            let owned = slot.is_owned();
            state.track(tid, slot.serial());
            let (gets, returns) = slot.counts();
            // A cache new since the window began counts from zero.
            let (seen_gets, seen_returns) = match state.window[tid] {
                (u64::MAX, _) => (0, 0),
                seen => seen,
            };
            let mut used = false;
            if gets >= seen_gets && returns >= seen_returns {
                let g = gets - seen_gets;
                let r = returns - seen_returns;
                balanced += 2 * g.min(r);
                total_ops += g + r;
                used = g + r > 0;
            }
            // A cache the pass just took (it only gave back) still has a
            // thread that uses the pool.
            owners += usize::from(owned || used);
            state.window[tid] = (gets, returns);
        });
        (total_ops, balanced, owners)
    }

    /// The largest batch `max_live` leaves room for with `owners` threads
    /// using the pool: their caches, two batches each, hold at most half
    /// of the limit, so a thread that only gives back never holds what the
    /// threads that take need (they would have to steal its cache). No
    /// bound without a limit, or for a batch the user fixed.
    /// Two batches also fit in the depot's `max_idle`, which
    /// `Pool::set_max_idle` may have lowered since the build.
    fn limit_batch(&self, owners: usize) -> usize {
        let idle = (self.head().depot.max_idle() / 2).max(self.config.batch_size);
        match self.config.max_live {
            Some(limit) if !self.config.batch_fixed => idle.min(limit / (4 * owners.max(1))),
            _ => idle,
        }
    }

    /// The least the batch shrinks to: a burst must fit in it.
    fn least_batch(&self) -> usize {
        self.config.burst.max(1)
    }

    /// Sizes the batch to the depot traffic of the window just over (the
    /// kmem magazine layer's resizing, driven by traffic; the design page's
    /// "Batch size" has the reasons). A window ends at every reclaim pass
    /// and after every [`WINDOW_EXCHANGES`] depot exchanges.
    ///
    /// * Doubles the batch, up to `max_batch` and
    ///   [`limit_batch`](Self::limit_batch), when more than one in
    ///   [`GROW_SHARE`] of the caches' operations went through the depot
    ///   and the caches both took and gave back (`balanced`), or, for a
    ///   one-way flow, while two doubled batches move in [`ONE_WAY_HOLD`]
    ///   or less (`now` times the window).
    /// * Halves it, down to the configured size, when idle objects sat
    ///   unused through the window (`idle_unused`).
    /// * Leaves the window after a doubling to settle: caches pick the new
    ///   size up only at their next depot visit.
    ///
    /// Under the pass lock.
    fn adapt_batch(&self, state: &mut PassState, idle_unused: bool, now: u64) {
        let (ops, balanced, owners) = self.window_traffic(state);
        // A clock read before the lock may be older than the last window's
        // end: it gives this window no rate (nor does a clock that has not
        // moved), and the next window is timed from the later end.
        let elapsed = now.saturating_sub(state.window_began);
        state.window_began = state.window_began.max(now);
        let exchanges = self.reclaim.window_exchanges.load(Ordering::Relaxed);
        let sampled =
            exchanges.saturating_sub(std::mem::replace(&mut state.window_exchanges, exchanges));
        let total = self.reclaim.moved.load(Ordering::Relaxed);
        let through_depot = total.saturating_sub(state.moved);
        state.moved = total;
        let batch = self.batch();
        let busy = ops > 0 && through_depot.saturating_mul(GROW_SHARE) > ops;
        let two_way = balanced.saturating_mul(2) >= ops;
        // A one-way flow counts each object twice (given back, taken), so
        // it moves `through_depot / 2` objects in `elapsed`; a cache of two
        // doubled batches holds `4 * batch`.
        let fast = sampled >= WINDOW_EXCHANGES / 2
            && elapsed > 0
            && (batch as u128) * 8 * u128::from(elapsed)
                <= u128::from(through_depot) * ONE_WAY_HOLD.as_nanos();
        let settling = std::mem::take(&mut state.settling);
        let most = self.config.max_batch.min(self.limit_batch(owners));
        if batch > most {
            // More threads use the pool than the batch leaves room for
            // under `max_live`.
            self.set_batch(most.max(self.least_batch()));
        } else if idle_unused {
            self.set_batch((batch / 2).max(self.config.batch_size).min(batch));
        } else if busy && (two_way || fast) && !settling && batch < most {
            self.set_batch((batch * 2).min(most));
            state.settling = true;
        }
    }

    /// Applies a memory-pressure level to this pool (see [`crate::pressure`])
    /// on behalf of `site`. Returns how many idle objects were destroyed.
    pub(crate) fn pressure(&self, level: Level, site: Site) -> usize {
        let floor = self.config.min_idle;
        let mut caught = Caught::default();
        let destroyed = match level {
            Level::Medium => {
                let unused = self.head().depot.reclaim_unused(floor);
                let n = self.reclaim_batches(unused, site, &mut caught);
                // What the working set keeps in the depot stays, its pages
                // released (the next pass would purge it an interval from
                // now): the cheap step first, no object destroyed for it.
                // Thread caches, the hot end, are left alone.
                self.purge_batches(self.head().depot.take_unpurged(usize::MAX), &mut caught);
                n
            }
            Level::Critical => {
                let now = self.reclaim.now();
                let hold = self.critical_hold(now);
                let taken = {
                    let _gate = fork::gate();
                    let state = self.reclaim.lock.lock();
                    if !hold.is_zero() {
                        let until = now.saturating_add(nanos(hold));
                        self.reclaim
                            .hold_until
                            .store(until.max(1), Ordering::Relaxed);
                        self.head().depot.set_cap(floor);
                    }
                    let walk = self.slots.walk();
                    let owned = Self::owned_slots(&walk);
                    self.reclaim.caches_taken.add(owned.len() as u64);
                    let taken = Slot::revoke_remote(owned, IfBusy::Flush);
                    drop(walk);
                    drop(state);
                    taken
                };
                // Everything above `min_idle` goes. The caches' batches do
                // not pass through the depot on their way: their owners,
                // whose caches were just taken, refill from it meanwhile
                // and would keep them (in the lab's `fio-pressure`, up to
                // 3/4 of a drain was lost that way). Only what `min_idle`
                // asks for is shelved (none under a hold: the cap refuses).
                let mut doomed = self.head().depot.take_down_to(floor);
                let mut room = floor.saturating_sub(self.head().depot.counts().idle);
                let mut keep = Vec::new();
                for batch in taken {
                    if batch.len() <= room {
                        room -= batch.len();
                        keep.push(batch);
                    } else {
                        doomed.push(batch);
                    }
                }
                doomed.extend(self.donate_all(keep));
                let n = self.reclaim_batches(doomed, site, &mut caught);
                // The hold's end is a deadline the reclaimer must know.
                if site == Site::Caller {
                    self.arm_background();
                }
                n
            }
        };
        self.reclaim.reclaimed.add(destroyed as u64);
        // The signal is counted once its response is done (`Release`): a
        // `Stats` that counts it shows what it reclaimed and queued.
        match level {
            Level::Medium => self.reclaim.pressure_medium.add(1),
            Level::Critical => self.reclaim.pressure_critical.add(1),
        }
        self.settle(caught, site);
        destroyed
    }

    /// Whether a cache flushed now is destroyed rather than given to the
    /// depot: a critical signal came less than an interval ago, and the
    /// depot holds `min_idle` already. Such a flush is of a cache that was
    /// busy when the signal drained the pool (its owner inside an access:
    /// `Slot::revoke_remote` leaves it a flush request); its objects are as
    /// idle as those the drain destroyed, and without a hold (a single
    /// signal holds nothing) the depot would keep them. Slow path only.
    #[cold]
    pub(crate) fn drains_late_flushes(&self) -> bool {
        let last = self.reclaim.last_critical.load(Ordering::Relaxed);
        last != u64::MAX
            && self.reclaim.now().saturating_sub(last) < nanos(self.config.reclaim_interval)
            && self.head().depot.counts().idle >= self.config.min_idle
    }

    /// How long the critical signal arriving at `now` holds the depot at
    /// `min_idle`: the hold set with `pressure_hold`, always; by default,
    /// none for a signal with no other in the interval before it, and the
    /// interval-proportional hold for one that follows another (the
    /// pressure persists). Records `now` as the last signal.
    fn critical_hold(&self, now: u64) -> Duration {
        let last = self.reclaim.last_critical.swap(now, Ordering::Relaxed);
        if let Some(fixed) = self.config.fixed_pressure_hold() {
            return fixed;
        }
        let persists =
            last != u64::MAX && now.saturating_sub(last) < nanos(self.config.reclaim_interval);
        if persists {
            self.config.pressure_hold()
        } else {
            Duration::ZERO
        }
    }

    /// Whether a critical-pressure hold is on at the clock's now (ending it
    /// if it is over). Read on slow paths only.
    pub(crate) fn holding(&self) -> bool {
        if self.reclaim.hold_until.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let now = self.reclaim.now();
        if now < self.reclaim.hold_until.load(Ordering::Relaxed) {
            return true;
        }
        let _gate = fork::gate();
        let _state = self.reclaim.lock.lock();
        self.end_hold_if_over(now);
        false
    }

    /// Lifts a hold that is over; under the reclaim lock, so a hold set by a
    /// concurrent critical signal is not lifted by mistake.
    fn end_hold_if_over(&self, now: u64) {
        let until = self.reclaim.hold_until.load(Ordering::Relaxed);
        if until != 0 && now >= until {
            self.reclaim.hold_until.store(0, Ordering::Relaxed);
            self.head().depot.set_cap(usize::MAX);
        }
    }

    /// Every thread cache that some thread owns right now.
    fn owned_slots<'w>(walk: &'w Walk<'_, M::Item>) -> Vec<&'w Slot<M::Item>> {
        let mut owned = Vec::new();
        walk.for_each(|_, slot| {
            if slot.is_owned() {
                owned.push(slot);
            }
        });
        owned
    }

    // === what users call directly ===

    /// Destroys the depot's objects that sat unused since the previous call
    /// (never below `min_idle`).
    pub(crate) fn reclaim_unused(&self) -> usize {
        self.recall_credits();
        let trimmed = self
            .head()
            .depot
            .take_unused_since_mark(self.config.min_idle);
        let mut caught = Caught::default();
        let n = self.destroy_all(trimmed, &mut caught);
        self.reclaim.reclaimed.add(n as u64);
        self.settle(caught, Site::Caller);
        n
    }

    /// Takes the depot's objects and every thread cache it can take.
    fn take_all_idle(&self) -> Vec<Vec<M::Item>> {
        let caches = {
            let _gate = fork::gate();
            let _state = self.reclaim.lock.lock();
            let walk = self.slots.walk();
            Slot::revoke_remote(Self::owned_slots(&walk), IfBusy::Flush)
        };
        let depot = self.head().depot.take_down_to(0);
        caches.into_iter().chain(depot).collect()
    }

    /// Sends every idle object it can take to the destroy queue, and runs
    /// one chunk of it here. Returns how many objects it took.
    pub(crate) fn drain(&self) -> usize {
        self.recall_credits();
        self.tear_down(self.take_all_idle(), 1, Site::Caller)
    }

    /// Destroys every idle object it can take, here, under a teardown
    /// permit (waiting in line for one when `min(ncpus, teardown_threads)`
    /// threads already tear down, so many threads draining at once stay
    /// within the bound), then helps until the destroy queue is empty.
    /// Returns how many objects it took (all destroyed by then).
    pub(crate) fn drain_blocking(&self) -> usize {
        self.recall_credits();
        let own = self.take_all_idle();
        let n = own.iter().map(Vec::len).sum();
        let mut caught = Caught::default();
        self.teardown
            .run_own(own, |chunk| self.destroy_all(chunk, &mut caught));
        self.settle(caught, Site::Caller);
        n
    }

    /// Destroys `batches` taken by reclaim or pressure on behalf of
    /// `site`: on the caller's own path here (it is told how many were
    /// destroyed); anywhere else through the destroy queue, all of it on
    /// the reclaimer thread, one chunk in a lazy pass on a `get` or `put`.
    /// Returns how many objects.
    fn reclaim_batches(
        &self,
        batches: Vec<Vec<M::Item>>,
        site: Site,
        caught: &mut Caught,
    ) -> usize {
        match site {
            Site::Caller => self.destroy_all(batches, caught),
            Site::Reclaimer => self.tear_down(batches, usize::MAX, site),
            _ => self.tear_down(batches, 1, site),
        }
    }

    /// Takes one other thread's cache for a `get` at `max_live`
    /// (`at_limit.rs`): the first owned slot, after the caller's own id
    /// (`me`, never taken) and wrapping round, whose revocation yields
    /// objects. Returns its batches (empty if none could be taken: every
    /// cache is empty, or the OS has no barrier and the owners were only
    /// asked to flush).
    ///
    /// An owner inside an access is waited out, not asked to flush: it may
    /// be caching the very object this `get` is after, and a flush waits
    /// for the owner's next access, which may never come (the owner's next
    /// call may be a wait of its own, queued behind ours).
    ///
    /// Empty caches on the way are taken too, and must be: their owner may
    /// hold a refill in hand (a batch from the depot, the rest of a burst)
    /// that it is about to install. Taken, the cache refuses it, and the
    /// refill goes back to the depot, which serves the waiters; passed
    /// over, the refill would land in a cache this `get` (a waiter's one
    /// look) already found empty (`tests/limit_races.rs`, `a_refill_*`).
    ///
    /// One barrier per slot tried: costly, but only at the limit, and it
    /// stops at the first cache with objects.
    pub(crate) fn steal_cache(&self, me: Option<usize>) -> Vec<Vec<M::Item>> {
        let _gate = fork::gate();
        let _state = self.reclaim.lock.lock();
        let walk = self.slots.walk();
        let mut others = Vec::new();
        walk.for_each(|tid, slot| {
            if Some(tid) != me && slot.is_owned() {
                others.push((tid, slot));
            }
        });
        // Start after our own id, so that threads at the limit do not all
        // pick on the lowest one.
        let start = me.map_or(0, |me| others.partition_point(|&(tid, _)| tid < me));
        others.rotate_left(start);
        for (_, slot) in others {
            let taken = Slot::revoke_remote([slot], IfBusy::WaitOut);
            if !taken.is_empty() {
                self.reclaim.caches_taken.add(1);
                // The caches held what the limit left for the threads that
                // take: smaller batches, so that stealing stays the rare
                // fallback it is meant to be.
                if !self.config.batch_fixed {
                    let batch = self.batch();
                    self.set_batch((batch / 2).max(self.least_batch()).min(batch));
                }
                return taken;
            }
        }
        Vec::new()
    }

    /// Purges the depot's not-yet-purged objects, oldest first, up to
    /// `limit`. Returns how many were purged.
    pub(crate) fn purge(&self, limit: usize) -> usize {
        let mut caught = Caught::default();
        let n = self.purge_batches(self.head().depot.take_unpurged(limit), &mut caught);
        self.settle(caught, Site::Caller);
        n
    }

    /// Purges `batches` (taken from the depot) outside every lock, one
    /// `purge_batch` call per batch, and hands them back; destroys a batch
    /// whose purge panicked (which of its objects are half-purged cannot be
    /// told), and what does not fit any more. Returns how many were purged.
    fn purge_batches(&self, batches: Vec<Vec<M::Item>>, caught: &mut Caught) -> usize {
        if batches.is_empty() {
            return 0;
        }
        let callbacks = self.callbacks();
        let mut purged = 0;
        let mut broken = Vec::new();
        let mut kept = Vec::with_capacity(batches.len());
        for mut batch in batches {
            let ok = match batch.as_mut_slice() {
                [] => continue,
                [one] => callbacks.purge(one, caught),
                all => callbacks.purge_batch(all, caught),
            };
            if ok {
                purged += batch.len();
                kept.push(batch);
            } else {
                broken.push(batch);
            }
        }
        let refused = self.head().depot.restore_purged(kept);
        // A waiter that queued while they were out looked in the depot
        // without them.
        if self.waiters_after_freeing() {
            self.serve_waiters_from_depot();
        }
        self.destroy_all(broken.into_iter().chain(refused), caught);
        purged
    }

    /// Fills the depot up to `min_idle` with new objects. Returns how many
    /// were created.
    pub(crate) fn prefill(&self) -> Result<usize, crate::Error<M::Error>> {
        let mut created = 0;
        while self.head().depot.counts().idle < self.config.min_idle {
            let item = self.create()?;
            created += 1;
            if let Err(item) = self.shelve(item) {
                self.destroy_batches(vec![vec![item]], Site::Caller);
                break;
            }
        }
        Ok(created)
    }

    // === the process-wide reclaimer ===

    /// Tells the reclaimer this pool may need it (it has objects beyond its
    /// reserve, or a hold to lift), waking it unless it already knows.
    ///
    /// Pairs with the tick below, which clears `armed` and then reads
    /// `existing`: both sides store, run a `SeqCst` fence, then load, so
    /// either the tick sees our new object or we see `armed` cleared and
    /// wake it. Costs a fence and a load per object created; the wake-up
    /// (a syscall) happens once per disarmed-to-armed change.
    pub(crate) fn arm_background(&self) {
        #[cfg(not(loom))]
        if self.config.background {
            fence(Ordering::SeqCst);
            if !self.reclaim.armed.load(Ordering::Relaxed)
                && !self.reclaim.armed.swap(true, Ordering::Relaxed)
            {
                let now = self.reclaim.now();
                self.wake_reclaimer(self.next_tick(now).saturating_sub(now));
            }
        }
    }

    /// Asks the reclaimer for a tick of this pool `after` from now (waking
    /// it if it sleeps past that).
    #[cfg(not(loom))]
    #[cold]
    pub(crate) fn wake_reclaimer(&self, after: u64) {
        match self.life.ticket() {
            Some(ticket) => {
                crate::reclaim::scheduler::wake_pool(ticket, Duration::from_nanos(after))
            }
            None => crate::reclaim::scheduler::wake(),
        }
    }

    /// When this pool next needs a tick, on its clock: its next pass,
    /// purge, or the end of a hold, whichever comes first.
    fn next_tick(&self, now: u64) -> u64 {
        let mut next = self.reclaim.next_pass.load(Ordering::Relaxed);
        next = next.min(self.reclaim.next_purge.load(Ordering::Relaxed));
        let hold = self.reclaim.hold_until.load(Ordering::Relaxed);
        if hold != 0 {
            next = next.min(hold);
        }
        next.max(now)
    }

    /// For the reclaimer thread: runs a due pass and says when to come back
    /// (`None`: this pool holds nothing to reclaim and no hold to lift; it
    /// disarms until it creates again).
    pub(crate) fn background_tick(&self) -> Option<Duration> {
        // Teardown work left behind (a mass release, a drain): finished
        // here, as far as no other runner has it.
        self.teardown.woken();
        self.run_teardown(usize::MAX, false, Site::Reclaimer);
        self.reclaim.armed.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let holding = self.holding();
        if !holding && self.existing() <= self.config.min_idle as u64 {
            return None;
        }
        self.reclaim.armed.store(true, Ordering::Relaxed);
        self.pass_if_due(Site::Reclaimer);
        let now = self.reclaim.now();
        Some(Duration::from_nanos(self.next_tick(now) - now))
    }
}

#[cfg(not(loom))]
impl<M: Manage> crate::reclaim::registry::Background for Shared<M> {
    fn background_tick(&self) -> Option<Duration> {
        Shared::background_tick(self)
    }

    fn background_pressure(&self, level: Level) {
        self.pressure(level, Site::Reclaimer);
    }
}
