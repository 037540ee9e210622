//! `fork(2)`: what survives it, and how.
//!
//! # The contract
//!
//! A process may fork at any moment, from any thread, with pools in use.
//! In the child:
//!
//! * every pool inherited from the parent, and every pool built there,
//!   works: `get`, `put` and the rest;
//! * the reclaimer runs again: the child's first registration, `notify`,
//!   or operation on a background pool other than a thread-cache hit (an
//!   object created, a depot visit, `stats`, `reclaim_unused`, ...) starts a fresh
//!   reclaimer thread with a fresh wake-up descriptor of its own, which
//!   looks after the inherited background pools and the new ones, on their
//!   intervals, and delivers `notify`;
//! * nothing the child does wakes the parent's reclaimer, and nothing the
//!   parent does wakes the child's;
//! * the default pressure sources are opened again for the child; sources
//!   given to [`pressure::watch`](crate::pressure::watch) in the parent are
//!   not carried over (their descriptors serve the parent).
//!
//! One limit is the standard library's: a thread's start and exit take a
//! lock of Rust's own (its records of the threads' stacks, for the
//! stack-overflow report). A child forked while another thread of the
//! parent was starting or exiting may inherit it held, and then every
//! thread the child starts, its reclaimer among them, blocks as it starts.
//! The child's pools still work on its own thread; their background
//! reclaim does not run.
//!
//! # How
//!
//! `pthread_atfork` handlers, installed when the first background pool
//! registers:
//!
//! * *prepare* takes the fork gate for writing (see below), then the
//!   registry lock, so that the child inherits both unlocked and consistent;
//!   *parent* and *child* release them;
//! * *child* also starts a new fork generation: it marks the reclaimer as
//!   not running (its thread did not survive) and closes the child's copy of
//!   the wake-up descriptor. Everything else (restarting, opening a new
//!   descriptor, forgetting the parent's sources) happens lazily, on the
//!   next call that needs the reclaimer, as for a reclaimer that died.
//!
//! The **fork gate** keeps the reclaimer thread from holding a pool's lock
//! (depot, reclaim state) at the moment of a fork, which would leave that
//! pool locked forever in the child. While on the reclaimer thread, every
//! such lock is taken with the gate held for reading ([`gate`]); those
//! sections are short and never run user code, so *prepare* waits for them
//! without risk of deadlock. Other threads' locks are not gated (that would
//! cost every depot visit a shared atomic): as for any structure with a
//! lock, a pool whose lock an *application* thread holds at the instant of
//! a fork is not usable in the child. The thread-id and stack registries
//! install handlers of their own for their locks. A slot table's walk lock
//! (`cache/table.rs`) is held for reading by walks, the reclaimer's under
//! the gate, and for writing only by a thread freeing its own slot at its
//! exit, for a few stores, with `try_write` and under a share of the gate
//! ([`hold_at_exit`]): a fork never finds it held for writing, and held for
//! reading it costs the child no more than a slot left in place.
//!
//! The locks the handlers hold across the fork are `std`'s
//! ([`fork_safe`](crate::sync::fork_safe)): their unlock in the child frees
//! them even when threads of the parent were waiting for them.

use std::cell::{Cell, RefCell};
use std::sync::{Once, OnceLock};

use super::registry::{self, Registry};
use crate::sync::fork_safe::{MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::sync::process::{AtomicU64, Ordering};

/// Forks so far that this process is a child of: bumped in each child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

static GATE: RwLock<()> = RwLock::new(());

std::thread_local! {
    /// This thread is the reclaimer: its pool locks are gated.
    static ON_RECLAIMER: Cell<bool> = const { Cell::new(false) };
    /// Gated sections the reclaimer is in.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The gate's read guard while the reclaimer is in a gated section.
    static READ: RefCell<Option<RwLockReadGuard<'static, ()>>> = const { RefCell::new(None) };
    /// What `prepare` holds across the fork, for `parent` or `child`.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

struct Held {
    // Released in this order: the registry, then the gate.
    _registry: MutexGuard<'static, Registry>,
    _gate: RwLockWriteGuard<'static, ()>,
}

/// The current fork generation.
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Marks the calling thread as the reclaimer.
pub(crate) fn enter_reclaimer() {
    ON_RECLAIMER.with(|on| on.set(true));
}

/// A share of the fork gate if this is the reclaimer thread, `None`
/// elsewhere. Hold it while holding a pool lock; never across user code.
/// Inlined: every depot visit asks, and on any thread but the reclaimer
/// the answer is one thread-local load.
#[inline(always)]
pub(crate) fn gate() -> Option<Share> {
    if ON_RECLAIMER.try_with(Cell::get).unwrap_or(false) {
        Some(gate_slow())
    } else {
        None
    }
}

/// A share of the fork gate, on the reclaimer thread. Gated sections nest
/// (a pass locks a depot inside its own gated section): the outermost
/// share takes the gate for reading and keeps the guard in a thread-local
/// (`READ`), the inner ones only count, so a nested section never waits
/// behind a `prepare` that waits for the outer one. A share is a marker
/// (no data), so a lock's guard that carries an `Option<Share>` grows by a
/// flag.
pub(crate) struct Share {
    _marker: (),
}

impl Drop for Share {
    /// Inlined, with all of its work out of line.
    #[inline(always)]
    fn drop(&mut self) {
        leave_slow();
    }
}

#[cold]
#[inline(never)]
fn gate_slow() -> Share {
    let outermost = DEPTH.with(|d| {
        let n = d.get();
        d.set(n + 1);
        n == 0
    });
    if outermost {
        // A thread whose thread-locals are being destroyed goes ungated.
        let _ = READ.try_with(|read| *read.borrow_mut() = Some(GATE.read()));
    }
    Share { _marker: () }
}

#[cold]
#[inline(never)]
fn leave_slow() {
    let last = DEPTH.with(|d| {
        let n = d.get() - 1;
        d.set(n);
        n == 0
    });
    if last {
        drop(READ.try_with(|read| read.borrow_mut().take()));
    }
}

/// A lock's guard and, on the reclaimer thread, the share of the fork gate
/// it was taken under ([`gated`]), released after the guard.
pub(crate) struct Gated<G> {
    guard: G,
    #[cfg(not(loom))]
    _gate: Option<Share>,
}

impl<G: std::ops::Deref> std::ops::Deref for Gated<G> {
    type Target = G::Target;

    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Gated<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// Takes a pool's lock with `lock`, under a share of the fork gate on the
/// reclaimer thread: a fork never finds the reclaimer holding it. For
/// sections that neither wait nor run user code.
#[inline(always)]
pub(crate) fn gated<G>(lock: impl FnOnce() -> G) -> Gated<G> {
    #[cfg(not(loom))]
    let gate = gate();
    Gated {
        guard: lock(),
        #[cfg(not(loom))]
        _gate: gate,
    }
}

/// The fork gate for reading, on any thread that is in no gated section:
/// for the few stores a thread makes at its exit holding a lock no walk
/// may see held in a child (a slot table's walk lock, for writing). Never
/// across user code.
#[cold]
pub(crate) fn hold_at_exit() -> RwLockReadGuard<'static, ()> {
    GATE.read()
}

/// What the child handler runs after starting a new generation: the
/// scheduler's "the thread did not survive" (async-signal-safe). Handed in
/// by [`install`], so this module needs nothing from the scheduler.
static FORGET_IN_CHILD: OnceLock<fn()> = OnceLock::new();

/// Installs the handlers, once per process; the child handler calls
/// `forget_in_child`. Says why not, the first time that fails.
pub(crate) fn install(forget_in_child: fn()) -> Option<String> {
    static ONCE: Once = Once::new();
    let mut failed = None;
    ONCE.call_once(|| {
        let _ = FORGET_IN_CHILD.set(forget_in_child);
        #[cfg(unix)]
        if let Err(e) = crate::os::fork::at_fork(prepare, parent, child) {
            failed = Some(format!(
                "tidepool: cannot install fork handlers ({e}); a forked child may \
                 inherit tidepool's registry locked"
            ));
        }
    });
    failed
}

extern "C" fn prepare() {
    // A thread whose thread-locals are being destroyed cannot keep the
    // guards: it forks without them.
    let _ = HELD.try_with(|held| {
        let gate = GATE.write();
        let registry = registry::lock_for_fork();
        *held.borrow_mut() = Some(Held {
            _registry: registry,
            _gate: gate,
        });
    });
}

extern "C" fn parent() {
    drop(HELD.try_with(|held| held.borrow_mut().take()));
}

extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(forget) = FORGET_IN_CHILD.get() {
        forget();
    }
    drop(HELD.try_with(|held| held.borrow_mut().take()));
}
