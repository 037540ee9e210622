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
//! the gate, and for writing only by an application thread freeing its own
//! slot, for a few stores, with `try_write`: held for reading at a fork it
//! costs the child no more than a slot left in place; for writing, it is
//! that application-thread case.

use std::cell::{Cell, RefCell};
use std::sync::{Once, OnceLock};

use parking_lot::{MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::registry::{self, Registry};
use crate::sync::process::{AtomicU64, Ordering};

/// Forks so far that this process is a child of: bumped in each child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

static GATE: RwLock<()> = RwLock::new(());

std::thread_local! {
    /// This thread is the reclaimer: its pool locks are gated.
    static ON_RECLAIMER: Cell<bool> = const { Cell::new(false) };
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
pub(crate) fn gate() -> Option<RwLockReadGuard<'static, ()>> {
    if ON_RECLAIMER.try_with(Cell::get).unwrap_or(false) {
        Some(gate_slow())
    } else {
        None
    }
}

#[cold]
#[inline(never)]
fn gate_slow() -> RwLockReadGuard<'static, ()> {
    // `read_recursive`: a gated section may nest in another on the same
    // thread even while `prepare` waits to write.
    GATE.read_recursive()
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
