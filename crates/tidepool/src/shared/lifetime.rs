//! How owned guards keep their pool alive without a reference count.
//!
//! An [`OwnedPooled`](crate::OwnedPooled) (and so every
//! [`PooledStack`](crate::stack::PooledStack), which stands for one and
//! finds the pointers below through its stack's slab set) is `'static`: it may outlive
//! the [`Pool`](crate::Pool) handle, on any thread. A clone of the pool's
//! `Arc` in each guard would cost a `lock incq` when taken and a `lock
//! decq` when dropped, on one cache line that every thread writes. So a
//! guard holds a plain copy of the handle's pointers, and the shared state
//! lives until the last of {the pool handle, the owned guards} is gone,
//! which is found without any per-object read-modify-write. The scheme is
//! Linux's `percpu_ref` (per-CPU counts, summed once the reference is
//! killed) with user-space RCU in liburcu's `membarrier` flavour standing
//! in for its grace periods:
//!
//! * **The count is the pool's own accounting.** Objects out of the pool
//!   are `gets - returns - discarded - detached`, kept per thread cache
//!   (single writer) and in slow-path counters; `Shared::live_bound` reads
//!   them so that the figure is never below the truth. Once the handle is
//!   gone no owned guard can be taken (`get_owned` needs it), so when the
//!   figure reaches zero every owned guard has counted its end.
//! * **Ends are read-side critical sections.** Ending an owned guard (drop,
//!   `discard`, `detach`) may touch the shared state after the end is
//!   counted (a full cache donates a batch to the depot and may run a
//!   reclaim pass). So each end ([`Ending`]) runs between a plain store of
//!   the pool's address into this thread's *marker* and a plain store of
//!   zero, except the common drop, which counts last (unmarked ends,
//!   below). Ends nest when one runs user code that ends another guard: the
//!   outermost end marks and unmarks, and a nested end of another pool
//!   widens the marker to `ANY`.
//! * **Closing.** When the handle drops after owned guards were handed out,
//!   the pool is flagged closed. It is free to go once (1) its live bound is
//!   zero, (2) no counted end of it is in flight (`inflight`), and (3) no
//!   marker holds its address or `ANY`. If that holds already, the
//!   handle's drop frees it there and then, as before (other pools' ends
//!   are no concern). Otherwise it is parked in a process-wide list of
//!   *orphans*, and the markers in its way are asked to *wake* (see
//!   liveness).
//! * **Ends through a handle.** [`Pool::put`](crate::Pool::put) ends a
//!   guard through a handle its caller holds, which keeps the pool alive,
//!   so it needs no marker. A pool closed before that handle was taken
//!   from a guard (`PooledStack::pool` after the last one went) stays
//!   parked while the handle lives; the handle's own close frees every
//!   orphan of the pool, the first close's included.
//! * **Unmarked ends.** The common drop of an owned guard (the object
//!   cached in this thread's cache) touches the pool last when it counts
//!   the object back: nothing after that count reaches the pool. So it
//!   runs without the marker, and afterwards looks at the count of parked
//!   pools (`pending`), processing its own if there are any. It does so
//!   only on a thread that has a marker (the closer's heavy fences work)
//!   while no pool is parked and the thread is not panicking; anything
//!   else it meets (no cache, a full batch, `recycle` refusing or
//!   panicking, waiters at `max_live`) goes on inside the marker, which it
//!   may take late: the object is still out.
//! * **Counted ends.** An end on a thread without a marker (no
//!   `membarrier` on this system, or a thread whose thread-locals are being
//!   destroyed) counts itself in the pool's `inflight` instead (a
//!   read-modify-write, off the fast path).
//! * **Whoever may be last processes its pool's orphan**: the closer; every
//!   counted end, after it is done; an unmarked end that finds an orphan
//!   pending after its count; and a reader whose marker is asked to
//!   wake (by a closer, by ending a guard of a closed pool, or by widening;
//!   a reader with an `ANY` marker processes every orphan). So a pool's
//!   objects are destroyed by the thread whose end or close let it go,
//!   before that returns, never by a bystander. Nobody waits for anybody,
//!   and no user code runs under the list's lock: a freed pool is dropped
//!   after it is released.
//!
//! The fast path of a marked end is a few plain loads and stores on this
//! thread's own lines, a load of the pool's closed flag, and compiler
//! fences; an unmarked end's is two loads of `pending` and a compiler
//! fence. While any pool stays parked (an owned guard kept long after its
//! pool's last handle went), `pending` is not zero and every owned end in
//! the process takes its marker, as before unmarked ends existed.
//!
//! # Invariant: a pool is freed only when nothing can touch it again
//!
//! Let `O` be a closed pool and `P` a thread that frees it (its closer, or
//! a processor of the list, under the list's lock). `P` reads, in this
//! order: `O`'s end counts, an `Acquire` fence, `O`'s start counts (that is
//! `live_bound`), `O.inflight`, every marker.
//!
//! * An owned guard that has not begun to end: its start was counted
//!   before the close, which happened before `P` looked: `live_bound > 0`.
//! * An end whose count `P` does not see: `live_bound > 0`.
//! * An end whose count `P` sees: the count is a `Release` store made after
//!   the end stored its marker (`O` or `ANY`), or incremented `inflight`
//!   (a slot-less return's count is an add under the depot's lock, which
//!   `P` takes to read it: the unlock orders it the same way), so
//!   `P` sees that marker (or increment), or a later value, and a marker
//!   changes to anything but `ANY` only once the end has stopped touching
//!   `O` (the decrement likewise). An unmarked end's count is its last
//!   touch of `O`.
//!
//! So safety rests on the counts and the markers alone; the closed flag,
//! the wake flags and the heavy fences only make sure that someone frees
//! the pool after the last blocker goes.
//!
//! # Liveness: every pool is freed once its last object is back
//!
//! An unmarked end loads `pending` after its count, with a compiler fence
//! between, and processes if it sees an orphan; the closer counts its
//! orphan pending before its first heavy fence and processes after the
//! second: either the end's load comes after the closer's fence took
//! effect on its thread and sees the orphan, or its count came before and
//! the closer's processing sees it.
//!
//! A counted end processes after its `SeqCst` decrement of `inflight` if
//! its `SeqCst` load sees an orphan pending; the closer counts its orphan
//! pending (`SeqCst`) before it reads `inflight`: one of the two sees the
//! other. For marked ends the closer, after parking its orphan, issues a
//! heavy fence (`membarrier(2)`, [`crate::fence::heavy_fence`]; the ends'
//! side of each pair is a compiler fence): an end that marked itself before
//! it shows its marker to the closer, which sets that marker's wake flag;
//! an end that marks itself after it sees the closed flag and wakes itself.
//! Then a second heavy fence, and the closer processes: an end woken above
//! either has cleared its marker before that fence, which the closer's
//! processing sees, or loads its wake flag after it, sees it, and
//! processes when it leaves. Processors take the list's lock one after
//! another, so the last sees every marker the others cleared.

use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::Shared;
use crate::fence::{heavy_fence, heavy_fence_available, light_fence};
use crate::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use crate::sync::Mutex;
use crate::Manage;

/// `Life::state`: an owned guard has been handed out.
const OWNED: u8 = 1;
/// `Life::state`: the pool handle is gone.
const CLOSED: u8 = 2;

/// A pool's side of the protocol (a field of `Shared`).
pub(crate) struct Life {
    /// `OWNED | CLOSED` bits; read on every end, written at most twice.
    state: AtomicU8,
    /// Ends in progress that are counted here rather than by a marker.
    inflight: AtomicUsize,
    /// Counted pool handles: one from the build, one more per
    /// [`Pool::new_handle`](crate::Pool). The last one to drop closes the
    /// pool; the others only release their `Arc`. A handle is dropped once,
    /// so this is off every fast path.
    handles: AtomicUsize,
    /// The pool's place in the reclaimer's registry, if it has one: closed
    /// by the last handle's drop. Kept here, not in the handle, so that the
    /// handle is two pointers (this state's and its head's), which owned
    /// guards copy.
    #[cfg(not(loom))]
    ticket: std::sync::OnceLock<crate::reclaim::registry::Ticket>,
}

impl Default for Life {
    fn default() -> Self {
        Self {
            state: AtomicU8::new(0),
            inflight: AtomicUsize::new(0),
            handles: AtomicUsize::new(1),
            #[cfg(not(loom))]
            ticket: std::sync::OnceLock::new(),
        }
    }
}

impl Life {
    /// Notes that an owned guard is being handed out (so the handle's drop
    /// must look for owned guards). A load on every `get_owned`, a store
    /// once per pool.
    #[inline(always)]
    pub(crate) fn note_owned(&self) {
        if self.state.load(Ordering::Relaxed) & OWNED == 0 {
            self.note_owned_slow();
        }
    }

    #[cold]
    fn note_owned_slow(&self) {
        self.state.fetch_or(OWNED, Ordering::Relaxed);
    }

    #[inline(always)]
    fn is_closed(&self) -> bool {
        self.state.load(Ordering::Relaxed) & CLOSED != 0
    }

    /// Records the pool's registry ticket (once, as the pool is built).
    #[cfg(not(loom))]
    pub(crate) fn set_ticket(&self, ticket: crate::reclaim::registry::Ticket) {
        let _ = self.ticket.set(ticket);
    }

    /// The pool's registry ticket, if it has one.
    #[cfg(not(loom))]
    pub(crate) fn ticket(&self) -> Option<&crate::reclaim::registry::Ticket> {
        self.ticket.get()
    }

    /// Counts one more pool handle.
    #[cfg(unix)]
    pub(crate) fn acquire_handle(&self) {
        self.handles.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a handle gone; `true` if it was the last, which then closes
    /// the pool. (`AcqRel`: the last handle sees what the others did.)
    pub(crate) fn release_handle(&self) -> bool {
        self.handles.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

// === readers ===

/// A marker's value while its thread is inside ends of more than one pool.
const ANY: usize = 1;

/// What other threads see of a reader, on a cache line of its own.
#[derive(Debug, Default)]
struct Marker(CachePadded<MarkerState>);

#[derive(Debug, Default)]
struct MarkerState {
    /// The address of the pool whose guard the thread is ending, `ANY`, or
    /// 0 while it is outside every end. Written only by the thread that
    /// owns the marker, which reads its own value back from here too
    /// (no copy in a thread-local to keep in step).
    held: AtomicUsize,
    /// Non-zero: the thread must process the orphans when its outermost end
    /// is done (set by a closer that found the marker in its way, or by the
    /// thread itself).
    wake: AtomicU8,
}

/// This thread's reader state, touched only by this thread.
struct Reader {
    /// This thread's marker, once registered.
    marker: Cell<Option<&'static Marker>>,
}

impl Reader {
    const fn new() -> Self {
        Self {
            marker: Cell::new(None),
        }
    }
}

// Constant-initialised and destructor-free: reaching it is an offset from
// the thread pointer, and it is never gone, not even in other
// thread-locals' destructors.
#[cfg(not(loom))]
std::thread_local! {
    static READER: Reader = const { Reader::new() };
}

#[cfg(loom)]
loom::thread_local! {
    static READER: Reader = Reader::new();
}

/// Hands this thread's marker back for reuse when the thread exits (the
/// marker list grows with the peak number of threads, not with every
/// thread ever started). Loom models leave markers to the model's end.
#[cfg(not(loom))]
struct Home;

#[cfg(not(loom))]
impl Drop for Home {
    fn drop(&mut self) {
        let _ = READER.try_with(|r| {
            // Not inside an end (thread-local destructors do not run in
            // one); if it ever were, the marker is simply never reused.
            if let Some(marker) = r.marker.get() {
                if marker.0.held.load(Ordering::Relaxed) == 0 {
                    r.marker.take();
                    markers().lock().free.push(marker);
                }
            }
        });
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static HOME: Home = const { Home };
}

/// Every marker handed out; free ones are reused. Markers are never freed:
/// one cache line per thread alive at the peak.
#[derive(Default)]
struct Markers {
    all: Vec<&'static Marker>,
    free: Vec<&'static Marker>,
}

#[cfg(not(loom))]
fn markers() -> &'static Mutex<Markers> {
    static MARKERS: Mutex<Markers> = Mutex::new(Markers {
        all: Vec::new(),
        free: Vec::new(),
    });
    &MARKERS
}

#[cfg(loom)]
fn markers() -> &'static Mutex<Markers> {
    loom::lazy_static! {
        static ref MARKERS: Mutex<Markers> = Mutex::new(Markers::default());
    }
    &MARKERS
}

/// Gives this thread a marker. `None` (ends stay counted) if the system has
/// no heavy fence, or the thread's thread-locals are being destroyed.
#[cold]
fn register(r: &Reader) -> Option<&'static Marker> {
    if !heavy_fence_available() {
        return None;
    }
    // Arms the hand-back at thread exit; fails once this thread's
    // thread-locals are being destroyed.
    #[cfg(not(loom))]
    HOME.try_with(|_| ()).ok()?;
    let mut markers = markers().lock();
    let marker = match markers.free.pop() {
        Some(marker) => marker,
        None => {
            let marker: &'static Marker = Box::leak(Box::default());
            markers.all.push(marker);
            marker
        }
    };
    r.marker.set(Some(marker));
    Some(marker)
}

/// No end is marked as inside the pool at `address`.
fn unmarked(marked: &[usize], address: usize) -> bool {
    !marked.iter().any(|&held| held == address || held == ANY)
}

/// What the markers hold now, zeros left out.
fn marked() -> Vec<usize> {
    markers()
        .lock()
        .all
        .iter()
        .map(|m| m.0.held.load(Ordering::Acquire))
        .filter(|&held| held != 0)
        .collect()
}

/// Asks every thread whose marker holds `address` (or `ANY`) to process
/// the orphans when it leaves its end.
fn wake_holders(address: usize) {
    for m in &markers().lock().all {
        let held = m.0.held.load(Ordering::Relaxed);
        if held == address || held == ANY {
            m.0.wake.store(1, Ordering::Relaxed);
        }
    }
}

// === orphans ===

/// Orphans in the list: counted ends check this before taking its lock.
#[cfg(not(loom))]
fn pending() -> &'static AtomicUsize {
    static PENDING: AtomicUsize = AtomicUsize::new(0);
    &PENDING
}

#[cfg(loom)]
fn pending() -> &'static AtomicUsize {
    loom::lazy_static! {
        static ref PENDING: AtomicUsize = AtomicUsize::new(0);
    }
    &PENDING
}

/// Whether an owned guard's drop may try its fast path without a marker
/// (module docs, unmarked ends): this thread has a marker, so the heavy
/// fence its closer pairs with works, and no pool is parked anywhere, so
/// the check after the end is a load that finds nothing (with orphans
/// about, every end would look at the list).
#[inline(always)]
pub(crate) fn may_end_unmarked() -> bool {
    pending().load(Ordering::Relaxed) == 0
        && READER
            .try_with(|r| r.marker.get().is_some())
            .unwrap_or(false)
}

/// After an unmarked end has counted its object back (its last touch of
/// the pool at `address`): if a pool was parked meanwhile, it may be that
/// one, and this end may be what it waits for. The compiler fence pairs
/// with the closer's heavy fence after it counts its orphan pending: either
/// this load sees the orphan, or the closer's processing sees this end's
/// count.
#[inline(always)]
pub(crate) fn after_unmarked_end(address: usize) {
    light_fence();
    if pending().load(Ordering::Relaxed) != 0 {
        process(address);
    }
}

/// A closed pool waiting for its owned guards.
trait Orphan: Send {
    /// Its address, as readers mark it.
    fn address(&self) -> usize;
    /// Every object is back and no counted end is in flight.
    fn quiet(&self) -> bool;
}

struct Orphaned<M: Manage> {
    /// The handle's reference, dropped when the orphan is freed.
    shared: Arc<Shared<M>>,
}

impl<M: Manage> Orphan for Orphaned<M> {
    fn address(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    fn quiet(&self) -> bool {
        // `live_bound` first: an end it sees counted shows its `inflight`
        // increment (or marker) to the reads that follow.
        self.shared.live_bound() == 0 && self.shared.life.inflight.load(Ordering::SeqCst) == 0
    }
}

#[cfg(not(loom))]
fn orphans() -> &'static Mutex<Vec<Box<dyn Orphan>>> {
    static ORPHANS: Mutex<Vec<Box<dyn Orphan>>> = Mutex::new(Vec::new());
    &ORPHANS
}

#[cfg(loom)]
fn orphans() -> &'static Mutex<Vec<Box<dyn Orphan>>> {
    loom::lazy_static! {
        static ref ORPHANS: Mutex<Vec<Box<dyn Orphan>>> = Mutex::new(Vec::new());
    }
    &ORPHANS
}

/// Frees the orphans at `scope` (an address, or `ANY` for all) that
/// nothing can touch any more (see the module docs). The pools are
/// dropped, destroying their objects, after the list's lock is released.
///
/// A thread processes only the orphans it may have been the last to hold
/// up, so that a pool's objects are destroyed by the thread whose end (or
/// close) let the pool go, before that end returns, and never later by a
/// bystander.
#[cold]
#[inline(never)]
fn process(scope: usize) {
    let freed: Vec<Box<dyn Orphan>> = {
        let mut list = orphans().lock();
        let quiet: Vec<bool> = list
            .iter()
            .map(|o| (scope == ANY || o.address() == scope) && o.quiet())
            .collect();
        if !quiet.contains(&true) {
            return;
        }
        // After the counts (see `quiet`).
        let marked = marked();
        let mut freed = Vec::new();
        let mut keep = Vec::with_capacity(list.len());
        for (orphan, quiet) in list.drain(..).zip(quiet) {
            if quiet && unmarked(&marked, orphan.address()) {
                freed.push(orphan);
            } else {
                keep.push(orphan);
            }
        }
        *list = keep;
        pending().fetch_sub(freed.len(), Ordering::SeqCst);
        freed
    };
    drop(freed);
}

// === ends and closes ===

/// An owned guard's end in progress: made by [`Ending::begin`] before the
/// guard gives its object back (or destroys or detaches it), dropped after,
/// also when that unwinds. While it lives, the pool stays alive however its
/// handle and other guards go on other threads.
pub(crate) struct Ending<M: Manage> {
    /// The pool. A pointer, not a reference: the pool may be freed by
    /// another thread as soon as this end stops protecting it, before
    /// the `Ending` is gone.
    shared: NonNull<Shared<M>>,
    /// How this end is protected, in one word: this thread's marker, which
    /// this (outermost) end clears when done; [`NESTED`] for an end inside
    /// another, whose marker covers it; or [`COUNTED`] for an end counted in
    /// the pool's `inflight`.
    marker: *const Marker,
}

/// `Ending::marker` of an end nested in another end on this thread.
const NESTED: *const Marker = std::ptr::null();
/// `Ending::marker` of an end counted in the pool's `inflight`.
const COUNTED: *const Marker = std::ptr::dangling();

impl<M: Manage> Ending<M> {
    /// Begins an end of an owned guard of `shared`.
    ///
    /// # Safety
    ///
    /// `shared` points to a pool's shared state that is alive now, and the
    /// calling guard is one that pool counts as out; the `Ending` is dropped
    /// on this thread after the guard's end (put, discard or detach) is
    /// done, and before anything else ends that guard.
    #[inline(always)]
    pub(crate) unsafe fn begin(shared: NonNull<Shared<M>>) -> Self {
        // Each way of beginning has `begin`'s own contract, which our
        // caller keeps: `shared` is alive, and its guard is out.
        let marker = READER
            .try_with(|r| match r.marker.get() {
                // SAFETY: see above.
                Some(marker) => unsafe { Self::mark(marker, shared) },
                // SAFETY: see above.
                None => unsafe { Self::begin_unmarked(r, shared) },
            })
            // SAFETY: see above (no thread-local: the end is counted).
            .unwrap_or_else(|_| unsafe { Self::count(shared) });
        Self { shared, marker }
    }

    /// The fast path: marks this thread as inside an end of the pool.
    /// Returns the marker if this is the outermost end, else [`NESTED`].
    ///
    /// # Safety
    ///
    /// As for [`begin`](Self::begin).
    #[inline(always)]
    unsafe fn mark(marker: &'static Marker, shared: NonNull<Shared<M>>) -> *const Marker {
        let address = shared.as_ptr() as usize;
        let held = marker.0.held.load(Ordering::Relaxed);
        let ending = if held == 0 {
            marker.0.held.store(address, Ordering::Relaxed);
            marker as *const Marker
        } else {
            if held != address {
                Self::widen(marker);
            }
            NESTED
        };
        // After the marker store (see the liveness notes).
        light_fence();
        // SAFETY: alive (our caller's promise), and the marker keeps it so
        // until this end is over.
        if unsafe { shared.as_ref() }.life.is_closed() {
            // This end may be the last: look when leaving.
            marker.0.wake.store(1, Ordering::Relaxed);
        }
        ending
    }

    /// A nested end of another pool: the marker now covers every pool.
    #[cold]
    fn widen(marker: &'static Marker) {
        if marker.0.held.load(Ordering::Relaxed) != ANY {
            marker.0.held.store(ANY, Ordering::Relaxed);
            marker.0.wake.store(1, Ordering::Relaxed);
        }
    }

    /// No marker yet: get one, or count the end in the pool.
    ///
    /// # Safety
    ///
    /// As for [`begin`](Self::begin).
    #[cold]
    #[inline(never)]
    unsafe fn begin_unmarked(r: &Reader, shared: NonNull<Shared<M>>) -> *const Marker {
        match register(r) {
            // SAFETY: `shared` is alive and its guard out (our caller's
            // contract, the same as `mark`'s).
            Some(marker) => unsafe { Self::mark(marker, shared) },
            // SAFETY: as above; no marker could be had, so the end is
            // counted in the pool instead.
            None => unsafe { Self::count(shared) },
        }
    }

    /// # Safety
    ///
    /// As for [`begin`](Self::begin).
    #[cold]
    unsafe fn count(shared: NonNull<Shared<M>>) -> *const Marker {
        // SAFETY: alive (our caller's promise); this increment keeps it so
        // until the matching decrement.
        unsafe { shared.as_ref() }
            .life
            .inflight
            .fetch_add(1, Ordering::Relaxed);
        COUNTED
    }

    #[cold]
    #[inline(never)]
    fn end_counted(&self) {
        // SAFETY: our increment kept the pool alive until this decrement,
        // its last use here.
        unsafe { self.shared.as_ref() }
            .life
            .inflight
            .fetch_sub(1, Ordering::SeqCst);
        if pending().load(Ordering::SeqCst) != 0 {
            process(self.shared.as_ptr() as usize);
        }
    }
}

impl<M: Manage> Drop for Ending<M> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.marker == NESTED {
            return;
        }
        if self.marker == COUNTED {
            return self.end_counted();
        }
        // SAFETY: a registered marker, never freed.
        let marker = unsafe { &*self.marker };
        // Our own value (only this thread writes it): the pool, or `ANY`.
        let held = marker.0.held.load(Ordering::Relaxed);
        marker.0.held.store(0, Ordering::Release);
        // The heavy side of this pair is the closer's (module docs,
        // liveness).
        light_fence();
        if marker.0.wake.load(Ordering::Relaxed) != 0 {
            leave_slow(marker, held);
        }
    }
}

/// The outermost end is done and was asked to look at the orphans.
#[cold]
#[inline(never)]
fn leave_slow(marker: &'static Marker, held: usize) {
    marker.0.wake.store(0, Ordering::Relaxed);
    process(held);
}

/// The pool handle is gone: frees the shared state now if no owned guard
/// is out or ending, else parks it until the last one has ended.
pub(crate) fn close<M: Manage>(shared: Arc<Shared<M>>) {
    if shared.life.state.load(Ordering::Relaxed) & OWNED == 0 {
        return drop(shared);
    }
    shared.life.state.fetch_or(CLOSED, Ordering::Relaxed);
    let orphan = Orphaned { shared };
    let address = orphan.address();
    // Every guard back and no end inside: free it here, so that its objects
    // are destroyed before the handle's drop returns (the same checks as
    // `process`, in the same order). Parked, another thread's `process`
    // could free it, and its objects, after this drop has returned.
    if orphan.quiet() && unmarked(&marked(), address) {
        // A handle taken after the pool closed (`Pool::new_handle`, from a
        // guard) closes it again: the first close's orphan, if nothing
        // freed it since, is this pool's too and just as quiet. Freed
        // first, so that ours is the last reference and the objects go
        // before this drop returns.
        if pending().load(Ordering::SeqCst) > 0 {
            process(address);
        }
        return drop(orphan);
    }
    {
        let mut list = orphans().lock();
        list.push(Box::new(orphan));
        pending().fetch_add(1, Ordering::SeqCst);
    }
    // Liveness (module docs). After this fence, an end that marked itself
    // before it shows its marker, and one that marks itself later sees
    // `CLOSED`. Without a heavy fence no reader has a marker (`register`).
    heavy_fence();
    wake_holders(address);
    // After this one, a holder woken above either sees its wake flag when
    // it leaves, or has left already, and the `process` below sees that.
    heavy_fence();
    process(address);
}
