//! Every call from tidepool into user code, in one file: the manager's
//! `create`, `recycle`, `purge` and `destroy`, their batch forms
//! (`create_batch`, `purge_batch`, `destroy_batch`), its own `Drop`, and a
//! pressure [`Source`]'s methods. Grep this file to find every call site's
//! contract; nothing else in the crate calls a [`Manage`] or [`Source`]
//! method.
//!
//! # The contract
//!
//! 1. **No lock held.** No callback runs while tidepool holds one of its
//!    own locks (depot, reclaim state, registry, thread ids) or has a thread
//!    cache's access bracket open. Callers collect the work under their
//!    lock, release it, then call in here.
//! 2. **Contained where nobody can take the panic.** `recycle`, `purge` and
//!    `destroy` run under `catch_unwind`; a caught panic is recorded in a
//!    [`Caught`], and the operation carries on to its end (every object
//!    destroyed or put back, every count exact). What then becomes of the
//!    first panic depends on the [`Site`]:
//!    * [`Site::Caller`] (the caller's own `get`, guard drop, `reclaim_unused`,
//!      `drain`, `purge`, `reclaim`, `pressure`, `prefill`): it is resumed
//!      on the caller, unless that thread is already unwinding;
//!    * every other site (the reclaimer thread, a lazy reclaim pass on a
//!      `get`/`put`, the pool's drop, a thread's exit): it is *contained*:
//!      counted, reported once per pool with `log::warn!` (no logger
//!      needed), never resumed. Destructors never unwind.
//!
//!    Either way the panic is counted in
//!    [`Stats::callback_panics`](crate::Stats::callback_panics), and the
//!    object whose callback panicked is treated as destroyed: counted as
//!    destroyed and never handed out again.
//! 3. **`create` and `create_batch` are not caught**: they run only on the
//!    caller's path (`get`, `prefill`), and the caller's `max_live` places
//!    are given back by a guard if they unwind.
//!
//!    The batch forms: `destroy_batch` runs under `catch_unwind` like
//!    `destroy`, and every object of its `Vec` counts as destroyed whether it
//!    returns or unwinds (the `Vec` was handed over; one panic is counted per
//!    call). A panicking `purge_batch` leaves every object of its slice
//!    suspect: all of them are destroyed.
//! 4. **Sources** are called only on the reclaimer thread; a panic from one
//!    counts as the source failing (it is dropped and reported).
//! 5. Panics caught outside any pool's callbacks on the reclaimer thread (a
//!    user [`Clock`](crate::reclaim::Clock), say) are counted in
//!    [`ReclaimerStatus::panics`](crate::reclaim::ReclaimerStatus::panics)
//!    and reported once per process.

use std::any::Any;
use std::fmt;
use std::io;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::signal::{Interest, Level, Source};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::SharedCounter;
use crate::Manage;

/// A caught panic's payload.
pub(crate) type Panic = Box<dyn Any + Send>;

/// Where tidepool is when it calls back, which decides what a panic does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Site {
    /// The caller's own operation: the panic is resumed on it at the end.
    Caller,
    /// The process-wide reclaimer thread.
    Reclaimer,
    /// Upkeep on a `get` or `put` that is not the caller's business: a due
    /// reclaim pass run lazily, a batch given back after a revocation race.
    Upkeep,
    /// The pool's drop (it may run in a thread-local destructor).
    PoolDrop,
    /// A thread's exit (its thread-local destructors).
    ThreadExit,
}

impl Site {
    /// Whether a panic here must be contained rather than resumed.
    fn contains(self) -> bool {
        self != Site::Caller || std::thread::panicking()
    }

    fn describe(self) -> &'static str {
        match self {
            Site::Caller => "while its thread was unwinding",
            Site::Reclaimer => "on the reclaimer thread",
            Site::Upkeep => "in a reclaim pass run on a get or put",
            Site::PoolDrop => "while the pool was dropped",
            Site::ThreadExit => "while a thread exited",
        }
    }
}

/// Which callback panicked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Callback {
    Recycle,
    Purge,
    Destroy,
    DestroyBatch,
    PurgeBatch,
    /// The manager's own `Drop`.
    DropManager,
}

impl fmt::Display for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Callback::Recycle => "recycle",
            Callback::Purge => "purge",
            Callback::Destroy => "destroy",
            Callback::DestroyBatch => "destroy_batch",
            Callback::PurgeBatch => "purge_batch",
            Callback::DropManager => "drop of the manager",
        })
    }
}

/// A pool's record of panics caught from its callbacks.
#[derive(Debug)]
pub(crate) struct PanicRecord {
    /// The manager's type, for reports.
    pool: &'static str,
    caught: SharedCounter,
    reported: AtomicBool,
}

impl PanicRecord {
    pub(crate) fn new<M>() -> Self {
        Self {
            pool: std::any::type_name::<M>(),
            caught: SharedCounter::default(),
            reported: AtomicBool::new(false),
        }
    }

    /// Panics caught so far.
    pub(crate) fn count(&self) -> u64 {
        self.caught.read()
    }
}

/// Panics caught during one operation on one pool; [`settle`](Caught::settle)
/// decides their fate once the operation is done.
#[derive(Default)]
#[must_use = "settle what was caught"]
pub(crate) struct Caught {
    first: Option<(Callback, Panic)>,
    count: u64,
}

impl Caught {
    /// One panic, caught from `what`.
    #[cold]
    fn one(what: Callback, panic: Panic) -> Self {
        Self {
            first: Some((what, panic)),
            count: 1,
        }
    }

    /// Runs `f`, catching a panic.
    fn catch<R>(&mut self, what: Callback, f: impl FnOnce() -> R) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => Some(r),
            Err(panic) => {
                self.count += 1;
                match self.first {
                    None => self.first = Some((what, panic)),
                    Some(_) => drop_payload(panic),
                }
                None
            }
        }
    }

    /// Counts what was caught in `record`, then resumes the first panic
    /// (at [`Site::Caller`], on a thread not already unwinding) or
    /// contains it (everywhere else: reported once per pool, dropped).
    pub(crate) fn settle(self, site: Site, record: &PanicRecord) {
        let Some((what, panic)) = self.first else {
            return;
        };
        record.caught.add(self.count);
        if !site.contains() {
            resume_unwind(panic);
        }
        if !record.reported.swap(true, Ordering::Relaxed) {
            let why = panic_message(&panic);
            warn(format_args!(
                "tidepool: a `{what}` callback of a pool of `{}` panicked {} ({why}); \
                 the object was counted as destroyed and the work went on. Later panics \
                 of this pool are counted in Stats::callback_panics, not reported.",
                record.pool,
                site.describe(),
            ));
        }
        drop_payload(panic);
    }
}

/// The manager's callbacks, called only from here.
pub(crate) struct Callbacks<'a, M> {
    manager: &'a M,
}

impl<'a, M: Manage> Callbacks<'a, M> {
    pub(crate) fn new(manager: &'a M) -> Self {
        Self { manager }
    }

    /// `create`, not caught (see the module docs).
    #[inline]
    pub(crate) fn create(&self) -> Result<M::Item, M::Error> {
        self.manager.create()
    }

    /// `recycle`: `Some(keep)`, or `None` if it panicked (the caller then
    /// destroys the object).
    #[inline]
    pub(crate) fn recycle(&self, item: &mut M::Item, caught: &mut Caught) -> Option<bool> {
        caught.catch(Callback::Recycle, || self.manager.recycle(item))
    }

    /// `recycle` for the put fast path: `Ok(keep)`, or the panic caught,
    /// made only if there was one (no `Caught` to set up and pass around on
    /// the way that does not panic).
    #[inline(always)]
    pub(crate) fn try_recycle(&self, item: &mut M::Item) -> Result<bool, Caught> {
        match catch_unwind(AssertUnwindSafe(|| self.manager.recycle(item))) {
            Ok(keep) => Ok(keep),
            Err(panic) => Err(Caught::one(Callback::Recycle, panic)),
        }
    }

    /// `purge`: `false` if it panicked (the object, half-purged, must then
    /// be destroyed).
    pub(crate) fn purge(&self, item: &mut M::Item, caught: &mut Caught) -> bool {
        caught
            .catch(Callback::Purge, || self.manager.purge(item))
            .is_some()
    }

    /// `create_batch(n)` (`n >= 2`), not caught, like `create`.
    #[inline]
    pub(crate) fn create_batch(&self, n: usize) -> Result<Vec<M::Item>, M::Error> {
        self.manager.create_batch(n)
    }

    /// `destroy` of one object; whether it panicked or not, the object is
    /// gone.
    pub(crate) fn destroy(&self, item: M::Item, caught: &mut Caught) {
        let _ = caught.catch(Callback::Destroy, || self.manager.destroy(item));
    }

    /// `destroy_batch` of a whole batch; whether it panicked or not, every
    /// object of it is gone (handed over: the manager's contract).
    pub(crate) fn destroy_batch(&self, items: Vec<M::Item>, caught: &mut Caught) {
        let _ = caught.catch(Callback::DestroyBatch, || self.manager.destroy_batch(items));
    }

    /// `purge_batch` over `items`: `false` if it panicked (which of them it
    /// left half-purged cannot be told: all must then be destroyed).
    pub(crate) fn purge_batch(&self, items: &mut [M::Item], caught: &mut Caught) -> bool {
        caught
            .catch(Callback::PurgeBatch, || self.manager.purge_batch(items))
            .is_some()
    }
}

/// Drops the manager (user code) in a destructor context: contained.
pub(crate) fn drop_manager<M>(manager: &mut ManuallyDrop<M>, site: Site, record: &PanicRecord) {
    let mut caught = Caught::default();
    let _ = caught.catch(Callback::DropManager, || {
        // SAFETY: called once, from the pool's `Drop`, after which nothing
        // touches the manager again.
        unsafe { ManuallyDrop::drop(manager) }
    });
    caught.settle(site, record);
}

/// Finishes a dropped pool's teardown on the reclaimer thread: destroys
/// what was left in its queue (a `destroy_batch` per batch), then drops the
/// manager; every panic contained (the pool's counts are gone with it; the
/// first panic is reported).
pub(crate) fn finish_orphan<M: Manage>(manager: M, batches: Vec<Vec<M::Item>>) {
    let mut manager = ManuallyDrop::new(manager);
    let record = PanicRecord::new::<M>();
    let mut caught = Caught::default();
    let callbacks = Callbacks::new(&*manager);
    for mut batch in batches {
        match batch.len() {
            0 => {}
            1 => callbacks.destroy(batch.pop().expect("one"), &mut caught),
            _ => callbacks.destroy_batch(batch, &mut caught),
        }
    }
    caught.settle(Site::PoolDrop, &record);
    drop_manager(&mut manager, Site::PoolDrop, &record);
}

// === pressure sources ===

/// A source's name; a placeholder if `name` panics.
pub(crate) fn source_name(source: &dyn Source) -> String {
    catch_unwind(AssertUnwindSafe(|| source.name()))
        .unwrap_or_else(|panic| format!("unnamed source ({})", consume(panic)))
}

/// What to poll a source for; `Err` (why) if it panicked.
#[cfg(unix)]
pub(crate) fn source_wait_spec(
    source: &dyn Source,
) -> Result<(std::os::fd::BorrowedFd<'_>, Interest), String> {
    catch_unwind(AssertUnwindSafe(|| (source.fd(), source.interest())))
        .map_err(|panic| format!("its fd or interest panicked: {}", consume(panic)))
}

/// A source's `on_ready`; a panic counts as a failure.
pub(crate) fn source_on_ready(source: &mut dyn Source) -> io::Result<Option<Level>> {
    catch_unwind(AssertUnwindSafe(|| source.on_ready())).unwrap_or_else(|panic| {
        Err(io::Error::other(format!(
            "on_ready panicked: {}",
            consume(panic)
        )))
    })
}

// === everything else the reclaimer runs ===

/// Panics caught on the reclaimer thread outside any pool's callbacks.
static STRAY: crate::sync::process::AtomicU64 = crate::sync::process::AtomicU64::new(0);
static STRAY_REPORTED: crate::sync::process::AtomicBool =
    crate::sync::process::AtomicBool::new(false);

/// Runs `f` on the reclaimer thread, catching a panic (user code reached
/// outside the manager callbacks, e.g. a pool's clock): counted, reported
/// once per process, and the reclaimer goes on. `None` if it panicked.
pub(crate) fn contain_stray<R>(what: &str, f: impl FnOnce() -> R) -> Option<R> {
    use crate::sync::process::Ordering::Relaxed;
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(panic) => {
            STRAY.fetch_add(1, Relaxed);
            if !STRAY_REPORTED.swap(true, Relaxed) {
                let why = panic_message(&panic);
                warn(format_args!(
                    "tidepool: a panic on the reclaimer thread while {what} ({why}); \
                     the reclaimer went on. Later ones are counted in \
                     tidepool::reclaim::status().panics, not reported."
                ));
            }
            drop_payload(panic);
            None
        }
    }
}

/// Panics [`contain_stray`] caught.
pub(crate) fn stray_panics() -> u64 {
    STRAY.load(crate::sync::process::Ordering::Relaxed)
}

// === reporting ===

/// `log::warn!`, which runs the application's logger (user code): contained.
pub(crate) fn warn(args: fmt::Arguments<'_>) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| log::warn!("{args}"))) {
        drop_payload(panic);
    }
}

/// The text of a panic payload, if it has one.
fn panic_message(panic: &Panic) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_owned())
}

/// The message of a payload, which is then dropped.
fn consume(panic: Panic) -> String {
    let why = panic_message(&panic);
    drop_payload(panic);
    why
}

/// Drops a panic payload, whose `Drop` is user code too: a payload that
/// panics while dropped is leaked rather than let unwind.
fn drop_payload(panic: Panic) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(panic))) {
        std::mem::forget(again);
    }
}
