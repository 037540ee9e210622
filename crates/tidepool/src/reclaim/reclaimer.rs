//! The process-wide reclaimer thread.
//!
//! One thread for every pool in the process, started by the first pool
//! that wants it ([`register`]). Each round it delivers pending pressure,
//! runs the passes that are due, then sleeps in `poll(2)` until the earliest
//! next pass, a pressure source fires, or someone wakes it (an eventfd).
//! When no pool holds anything beyond its reserve it sleeps with no timeout:
//! a pool that creates an object wakes it ([`wake_if_parked`]).
//!
//! It holds each pool through a [`Handle`]: a `Weak` behind a lock, upgraded
//! only while the lock is held. A dropping pool empties its handle under the
//! same lock, so it waits for a pass in progress on it, and the reclaimer
//! never holds the last reference: the pool's objects are destroyed by the
//! pool's own drop, on the dropping thread, before it returns.

use crate::sync::process::{fence, AtomicBool, Ordering};
use std::io;
use std::sync::{Arc, Weak};

use std::time::Duration;

use parking_lot::Mutex;

use crate::pressure::{Level, Source, SourceStatus};

/// A pool the reclaimer looks after.
pub(crate) trait Background: Send + Sync {
    /// Runs a due pass; when to come back (`None`: nothing to do until woken).
    fn background_tick(&self) -> Option<Duration>;
    /// Applies a pressure level.
    fn background_pressure(&self, level: Level);
}

/// How the reclaimer reaches one pool.
pub(crate) struct Handle {
    pool: Mutex<Option<Weak<dyn Background>>>,
}

impl Handle {
    /// Runs `f` on the pool if it is still there; holds the handle's lock
    /// throughout, so [`close`](Handle::close) waits for it.
    fn with<R>(&self, f: impl FnOnce(&dyn Background) -> R) -> Option<R> {
        let guard = self.pool.lock();
        let pool = guard.as_ref()?.upgrade()?;
        let out = f(&*pool);
        // Dropped before the lock is released: never the last reference
        // once `close` has run.
        drop(pool);
        Some(out)
    }

    /// The pool is going away: wait for any pass on it, then forget it.
    pub(crate) fn close(&self) {
        *self.pool.lock() = None;
    }

    fn is_closed(&self) -> bool {
        self.pool
            .lock()
            .as_ref()
            .is_none_or(|p| p.strong_count() == 0)
    }
}

#[derive(Default)]
struct Registry {
    pools: Vec<Arc<Handle>>,
    /// Sources not yet picked up by the thread, which owns them from then
    /// on (so it can poll them without holding this lock).
    incoming: Vec<Watched>,
    statuses: Vec<SourceStatus>,
    pending: Option<Level>,
    started: bool,
}

struct Watched {
    source: Box<dyn Source>,
    status: usize,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pools: Vec::new(),
    incoming: Vec::new(),
    statuses: Vec::new(),
    pending: None,
    started: false,
});

/// Whether the thread sleeps with no deadline (or has not looked since the
/// last change): pools that gain objects must wake it.
static PARKED: AtomicBool = AtomicBool::new(true);

// Under miri (no `poll(2)`, no /proc) the reclaimer runs on the portable
// condvar fallback, with no default pressure sources.
#[cfg(all(target_os = "linux", not(miri)))]
fn waker() -> Option<&'static crate::os::event::EventFd> {
    static WAKER: std::sync::OnceLock<Option<crate::os::event::EventFd>> =
        std::sync::OnceLock::new();
    WAKER
        .get_or_init(|| crate::os::event::EventFd::new().ok())
        .as_ref()
}

/// Wakes the thread for a new round.
pub(crate) fn wake() {
    #[cfg(all(target_os = "linux", not(miri)))]
    if let Some(waker) = waker() {
        let _ = waker.signal();
    }
    #[cfg(any(not(target_os = "linux"), miri))]
    fallback::wake();
}

/// Wakes the thread if it sleeps with no deadline. Call after making
/// `existing` larger (an object was created).
pub(crate) fn wake_if_parked() {
    // Pairs with the fence in `run`: either the thread sees our new object
    // when it asks the pools, or we see it parked and wake it.
    fence(Ordering::SeqCst);
    if PARKED.load(Ordering::Relaxed) {
        wake();
    }
}

/// Adds a pool, starting the thread if need be. The pool must
/// [`close`](Handle::close) the handle when it drops.
pub(crate) fn register(pool: Weak<dyn Background>) -> Arc<Handle> {
    let handle = Arc::new(Handle {
        pool: Mutex::new(Some(pool)),
    });
    let mut registry = REGISTRY.lock();
    registry.pools.retain(|h| !h.is_closed());
    registry.pools.push(Arc::clone(&handle));
    start(&mut registry);
    drop(registry);
    wake();
    handle
}

pub(crate) fn notify(level: Level) {
    let mut registry = REGISTRY.lock();
    // With no pool to tell, there is nothing to do; a pool built later must
    // not inherit a stale signal.
    if !registry.started {
        return;
    }
    registry.pending = registry.pending.max(Some(level));
    drop(registry);
    wake();
}

pub(crate) fn watch(source: Box<dyn Source>) {
    let mut registry = REGISTRY.lock();
    add_source(&mut registry, Ok(source));
    drop(registry);
    wake();
}

pub(crate) fn sources() -> Vec<SourceStatus> {
    REGISTRY.lock().statuses.clone()
}

/// Records a source, or why it could not be had (reported once, on
/// standard error: the pools work on without it).
fn add_source(registry: &mut Registry, source: io::Result<Box<dyn Source>>) {
    match source {
        Ok(source) => {
            registry.statuses.push(SourceStatus {
                name: source.name(),
                error: None,
                events: 0,
            });
            let status = registry.statuses.len() - 1;
            registry.incoming.push(Watched { source, status });
        }
        Err(error) => {
            eprintln!(
                "tidepool: memory-pressure source unavailable, continuing without it: {error}"
            );
            registry.statuses.push(SourceStatus {
                name: "default source".into(),
                error: Some(error.to_string()),
                events: 0,
            });
        }
    }
}

fn start(registry: &mut Registry) {
    if registry.started {
        return;
    }
    registry.started = true;
    if std::env::var_os("TIDEPOOL_PRESSURE").is_none_or(|v| v != "manual") {
        add_default_sources(registry);
    }
    let spawned = std::thread::Builder::new()
        .name("tidepool-reclaim".into())
        .spawn(run);
    if let Err(error) = spawned {
        // Reclaim still runs on the pools' own slow paths.
        eprintln!("tidepool: cannot start the reclaimer thread, reclaim runs only on depot visits: {error}");
    }
}

#[cfg(all(target_os = "linux", not(miri)))]
fn add_default_sources(registry: &mut Registry) {
    use crate::pressure::{CgroupV1Pressure, PsiTrigger};

    fn boxed<S: Source>(r: io::Result<S>) -> io::Result<Box<dyn Source>> {
        r.map(|s| Box::new(s) as Box<dyn Source>)
    }
    for trigger in PsiTrigger::system_defaults() {
        add_source(registry, boxed(trigger));
    }
    // A process in no such cgroup simply has no such source: not an error.
    if let Ok(triggers) = PsiTrigger::cgroup_defaults() {
        for trigger in triggers {
            add_source(registry, boxed(trigger));
        }
    }
    if let Ok(listeners) = CgroupV1Pressure::own_defaults() {
        for listener in listeners {
            add_source(registry, boxed(listener));
        }
    }
}

#[cfg(any(not(target_os = "linux"), miri))]
fn add_default_sources(_: &mut Registry) {}

/// The thread's body.
fn run() {
    let mut sources: Vec<Watched> = Vec::new();
    loop {
        // Parked unless a pool proves otherwise below (see `wake_if_parked`).
        PARKED.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let (pools, pending) = {
            let mut registry = REGISTRY.lock();
            sources.append(&mut registry.incoming);
            registry.pools.retain(|h| !h.is_closed());
            (registry.pools.clone(), registry.pending.take())
        };
        if let Some(level) = pending {
            for pool in &pools {
                pool.with(|p| p.background_pressure(level));
            }
        }
        let next = pools
            .iter()
            .filter_map(|pool| pool.with(|p| p.background_tick()).flatten())
            .min();
        if next.is_some() {
            PARKED.store(false, Ordering::Relaxed);
        }
        drop(pools);
        let fired = wait(&mut sources, next);
        if let Some(level) = fired {
            let mut registry = REGISTRY.lock();
            registry.pending = registry.pending.max(Some(level));
        }
    }
}

/// Sleeps until `timeout`, a wake-up or a source firing; returns the highest
/// level signalled. Sources that fail are reported once and dropped.
#[cfg(all(target_os = "linux", not(miri)))]
fn wait(sources: &mut Vec<Watched>, timeout: Option<Duration>) -> Option<Level> {
    use std::os::fd::AsFd;

    use crate::os::event::poll;
    use crate::pressure::Interest;

    let Some(waker) = waker() else {
        // No eventfd: come back on a short timer instead.
        let nap = Duration::from_millis(100);
        std::thread::sleep(timeout.map_or(nap, |t| t.min(nap)));
        return None;
    };
    let mut fds = vec![(waker.as_fd(), Interest::Readable)];
    fds.extend(sources.iter().map(|w| (w.source.fd(), w.source.interest())));
    let ready = poll(&fds, timeout).unwrap_or_default();
    drop(fds);
    let _ = waker.drain();

    let mut fired = None;
    let mut failed = Vec::new();
    for (i, r) in ready.iter().enumerate().skip(1) {
        let watched = &mut sources[i - 1];
        if r.failed {
            failed.push((i - 1, "its descriptor reported an error".to_owned()));
        } else if r.ready {
            match watched.source.on_ready() {
                Ok(Some(level)) => {
                    REGISTRY.lock().statuses[watched.status].events += 1;
                    fired = fired.max(Some(level));
                }
                Ok(None) => {}
                Err(e) => failed.push((i - 1, e.to_string())),
            }
        }
    }
    for (i, why) in failed.into_iter().rev() {
        let watched = sources.remove(i);
        let mut registry = REGISTRY.lock();
        let status = &mut registry.statuses[watched.status];
        eprintln!(
            "tidepool: memory-pressure source {} stopped ({why}); no longer watched",
            status.name
        );
        status.error = Some(why);
    }
    fired
}

#[cfg(any(not(target_os = "linux"), miri))]
fn wait(_: &mut Vec<Watched>, timeout: Option<Duration>) -> Option<Level> {
    fallback::wait(timeout);
    None
}

#[cfg(any(not(target_os = "linux"), miri))]
mod fallback {
    use parking_lot::{Condvar, Mutex};
    use std::time::Duration;

    static WOKEN: Mutex<bool> = Mutex::new(false);
    static CONDVAR: Condvar = Condvar::new();

    pub(super) fn wake() {
        *WOKEN.lock() = true;
        CONDVAR.notify_one();
    }

    pub(super) fn wait(timeout: Option<Duration>) {
        let mut woken = WOKEN.lock();
        if !*woken {
            match timeout {
                Some(t) => {
                    CONDVAR.wait_for(&mut woken, t);
                }
                None => CONDVAR.wait(&mut woken),
            }
        }
        *woken = false;
    }
}
