//! The process-wide reclaimer thread: when it runs, how it sleeps, and who
//! makes sure it is there.
//!
//! # Rounds and deadlines
//!
//! One thread for every pool in the process. Each round it delivers pending
//! pressure (to every pool), ticks the pools that are due (each runs its
//! due pass and says when it next needs looking at: its new deadline, kept
//! in the registry's heap), then sleeps in `poll(2)` until the earliest
//! deadline, a pressure source firing, or a wake-up (an eventfd on Linux, a
//! socket pair elsewhere: [`wake`]). A round's work is the pools due in it,
//! not every pool: thousands of pools whose deadlines fall at different
//! times cost a tick each per interval, however many there are.
//!
//! A pool with nothing beyond its reserve has no deadline; it is
//! *disarmed*, and arms itself when it next creates an object
//! ([`wake_pool`]: due now, and a wake-up). A pool is due at once when it
//! registers, arms itself, leaves teardown work, or is put under a
//! pressure hold, so the sleep always ends at the earliest deadline of all
//! pools (a 50 ms pool never waits out another pool's 15 s).
//!
//! # Supervision
//!
//! The thread is started by the first background pool's registration.
//! Nothing a pool does can kill it: manager callbacks are contained
//! (`callbacks.rs`), and so is anything else that panics inside a round.
//! Should it still be gone (it could not be spawned, or this is a forked
//! child: see `fork.rs`), [`ensure_running`] starts a new one; it is called
//! on every registration, `notify`, object creation, and lazy reclaim pass
//! of a background pool. [`status`] says whether it runs and how often it
//! was restarted.
//!
//! # Under miri
//!
//! Miri emulates neither `poll(2)` nor the pressure sources' files, so there
//! (as on a non-Unix target) the thread sleeps on a condition variable with
//! the same deadlines and wake-ups, and watches no sources.

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::fork;
use super::registry::{self, Background, DefaultSources, Orphan, Registry, Ticket, Watched};
use super::ReclaimerStatus;
use crate::callbacks;
use crate::signal::{Level, Source, SourceStatus};
use crate::sync::process::{AtomicBool, AtomicU64, Ordering};

/// A reclaimer thread of the current fork generation is alive.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// Threads started, the first one included.
static STARTS: AtomicU64 = AtomicU64::new(0);
/// Rounds run.
static ROUNDS: AtomicU64 = AtomicU64::new(0);
/// A failed spawn was reported.
static SPAWN_REPORTED: AtomicBool = AtomicBool::new(false);

#[cfg(all(unix, not(miri)))]
static WAKER: crate::os::event::WakeFd = crate::os::event::WakeFd::new();

/// Adds a pool, starting the thread if need be. The pool must
/// [`close`] the ticket when it drops.
pub(crate) fn register(pool: Weak<dyn Background>, defaults: DefaultSources) -> Ticket {
    let mut registry = registry::lock();
    registry.default_sources.get_or_insert(defaults);
    let ticket = registry.add_pool(pool);
    let stale = start_if_needed(&mut registry);
    // A new pool holds nothing to reclaim: the reclaimer needs a round
    // only for sources it has not picked up yet (the first pool's).
    let news = !registry.incoming.is_empty();
    registry::unlock(registry);
    drop(stale);
    if news {
        wake();
    }
    ticket
}

/// The pool holding `ticket` is dropping: waits for a tick in progress on
/// it on another thread, then forgets it.
pub(crate) fn close(ticket: &Ticket) {
    registry::close(ticket, fork::generation());
}

/// Delivers `level` to every pool at the next round.
pub(crate) fn notify(level: Level) {
    let mut registry = registry::lock();
    // With no pool to tell, there is nothing to do; a pool built later must
    // not inherit a stale signal.
    if registry.pool_count() == 0 {
        return;
    }
    let stale = start_if_needed(&mut registry);
    registry.pending = registry.pending.max(Some(level));
    registry::unlock(registry);
    drop(stale);
    wake();
}

/// Hands `source` to the reclaimer thread.
pub(crate) fn watch(source: Box<dyn Source>) {
    // User code: outside the lock.
    let name = callbacks::source_name(&*source);
    let mut registry = registry::lock();
    registry.add_source(name, Ok(source));
    registry::unlock(registry);
    wake();
}

/// Every source tried so far, watched or not.
pub(crate) fn sources() -> Vec<SourceStatus> {
    registry::lock().statuses.clone()
}

/// Makes sure a reclaimer thread runs if any pool wants one. Costs an
/// atomic load when it does.
#[inline]
pub(crate) fn ensure_running() {
    if !RUNNING.load(Ordering::Acquire) {
        ensure_running_slow();
    }
}

#[cold]
fn ensure_running_slow() {
    let mut registry = registry::lock();
    let stale = start_if_needed(&mut registry);
    registry::unlock(registry);
    drop(stale);
}

/// Hands the reclaimer a dropped pool's unfinished teardown, run in its
/// next round (contained: see `callbacks.rs`).
pub(crate) fn adopt(orphan: Orphan) {
    let mut registry = registry::lock();
    registry.orphans.push(orphan);
    let stale = start_if_needed(&mut registry);
    registry::unlock(registry);
    drop(stale);
    wake();
}

/// The pool holding `ticket` wants a tick `after` from now (it armed
/// itself: at its next pass; it left teardown work: now). Wakes the
/// thread only if it sleeps past that (a syscall), and makes sure it runs.
pub(crate) fn wake_pool(ticket: &Ticket, after: Duration) {
    let now = Instant::now();
    // A deadline past what an `Instant` holds is as good as a year away.
    let at = now.checked_add(after.min(FAR)).unwrap_or(now);
    let sooner = registry::lock().schedule(ticket.key(), at);
    if sooner {
        wake();
    } else {
        ensure_running();
    }
}

/// Wakes the thread for a new round (starting it if it is missing).
pub(crate) fn wake() {
    ensure_running();
    #[cfg(all(unix, not(miri)))]
    WAKER.signal();
    #[cfg(any(not(unix), miri))]
    fallback::wake();
}

/// What the reclaimer is doing.
pub(crate) fn status() -> ReclaimerStatus {
    let pools = registry::lock().pool_count();
    ReclaimerStatus {
        running: RUNNING.load(Ordering::Acquire),
        restarts: STARTS.load(Ordering::Relaxed).saturating_sub(1),
        rounds: ROUNDS.load(Ordering::Relaxed),
        pools,
        panics: callbacks::stray_panics(),
    }
}

/// From the `fork` child handler: the thread did not survive, and the
/// wake-up descriptor is the parent's. Async-signal-safe.
pub(crate) fn forget_after_fork() {
    RUNNING.store(false, Ordering::Release);
    #[cfg(all(unix, not(miri)))]
    WAKER.forget_after_fork();
}

/// Starts the thread unless it runs or there is nothing for it to do.
/// Returns sources a forked child inherited and does not watch, for the
/// caller to drop after releasing the lock.
#[must_use = "drop the sources outside the lock"]
fn start_if_needed(registry: &mut Registry) -> Vec<Watched> {
    if RUNNING.load(Ordering::Acquire) || registry.pool_count() == 0 {
        return Vec::new();
    }
    if let Some(report) = fork::install(forget_after_fork) {
        registry.reports.push(report);
    }
    let generation = fork::generation();
    let stale = if registry.generation != generation {
        registry.reset_for(generation)
    } else {
        Vec::new()
    };
    if !registry.defaults_opened {
        registry.defaults_opened = true;
        if std::env::var_os("TIDEPOOL_PRESSURE").is_none_or(|v| v != "manual") {
            open_default_sources(registry);
        }
    }
    #[cfg(all(unix, not(miri)))]
    if let Err(error) = WAKER.open() {
        // `wait` then naps on a short timer instead.
        registry.reports.push(format!(
            "tidepool: no wake-up descriptor for the reclaimer ({error}); it polls every 100 ms"
        ));
    }
    RUNNING.store(true, Ordering::Release);
    // Every signal blocked: the application's signals are not ours to take.
    let spawned = crate::os::thread::spawn_quiet("tidepool-reclaim", move || run(generation));
    match spawned {
        Ok(_) => {
            STARTS.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => {
            RUNNING.store(false, Ordering::Release);
            if !SPAWN_REPORTED.swap(true, Ordering::Relaxed) {
                registry.reports.push(format!(
                    "tidepool: cannot start the reclaimer thread ({error}); reclaim runs \
                     only on depot visits until a later attempt succeeds"
                ));
            }
        }
    }
    stale
}

/// Opens the default sources: tidepool's own code (PSI, cgroup files), so
/// it may run under the registry lock.
fn open_default_sources(registry: &mut Registry) {
    let Some(defaults) = registry.default_sources else {
        return;
    };
    for source in defaults() {
        let name = match &source {
            Ok(source) => source.name(),
            Err(_) => "default source".to_owned(),
        };
        registry.add_source(name, source);
    }
}

/// Marks the thread gone when it ends, by unwinding or otherwise.
struct Alive {
    generation: u64,
}

impl Drop for Alive {
    fn drop(&mut self) {
        if fork::generation() == self.generation {
            RUNNING.store(false, Ordering::Release);
        }
    }
}

/// The furthest deadline kept: later ones (a pool's clock far ahead) are
/// set to this, and the pool says again when it is ticked.
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// How often the reclaimer reads the CPU count again (`os/thread.rs`).
const CPUS_REFRESH: Duration = Duration::from_secs(1);

/// How long a pool whose tick panicked waits for the next one (a pool
/// left armed by the panic would otherwise never come back).
const RETRY_AFTER_PANIC: Duration = Duration::from_secs(1);

/// The thread's body.
fn run(generation: u64) {
    let _alive = Alive { generation };
    fork::enter_reclaimer();
    let mut sources: Vec<Watched> = Vec::new();
    let mut cpus_read = Instant::now();
    loop {
        ROUNDS.fetch_add(1, Ordering::Relaxed);
        // The CPU count new pools size their teardown by can change at any
        // time; it is read again here, at most once a second.
        if cpus_read.elapsed() >= CPUS_REFRESH {
            cpus_read = Instant::now();
            crate::os::thread::refresh_cpus();
        }
        let (mut due, pending, orphans, all) = {
            let mut registry = registry::lock();
            sources.append(&mut registry.incoming);
            let orphans = std::mem::take(&mut registry.orphans);
            let pending = registry.pending.take();
            // Pressure reaches every pool, and each then ticks (a hold's
            // end is a new deadline).
            let all = if pending.is_some() {
                registry.open_pools()
            } else {
                Vec::new()
            };
            // In a round: deadlines set from here on are read below.
            registry.sleeping_until = None;
            (registry.take_due(Instant::now()), pending, orphans, all)
        };
        for orphan in orphans {
            callbacks::contain_stray("finishing a dropped pool's teardown", orphan);
        }
        if let Some(level) = pending {
            for &pool in &all {
                callbacks::contain_stray("delivering memory pressure", || {
                    registry::with_pool(pool, generation, |p| p.background_pressure(level))
                });
            }
            due.extend(all);
            due.sort_unstable();
            due.dedup();
        }
        // Only the pools that are due (see the registry's deadlines).
        let mut next = Vec::with_capacity(due.len());
        for key in due {
            let after = callbacks::contain_stray("running a reclaim pass", || {
                registry::with_pool(key, generation, |p| p.background_tick())
            });
            match after {
                Some(Some(Some(after))) => {
                    let now = Instant::now();
                    next.push((key, now.checked_add(after.min(FAR)).unwrap_or(now)));
                }
                // Disarmed (it arms itself again), or gone.
                Some(_) => {}
                None => next.push((key, Instant::now() + RETRY_AFTER_PANIC)),
            }
        }
        let deadline = {
            let mut registry = registry::lock();
            for (key, at) in next {
                let _ = registry.schedule(key, at);
            }
            let deadline = registry.next_deadline();
            registry.sleeping_until = Some(deadline);
            deadline
        };
        let timeout = deadline.map(|at| at.saturating_duration_since(Instant::now()));
        if let Some(level) = wait(&mut sources, timeout) {
            let mut registry = registry::lock();
            registry.pending = registry.pending.max(Some(level));
        }
    }
}

/// Sleeps until `timeout`, a wake-up or a source firing; returns the highest
/// level signalled. Sources that fail (or panic) are reported once and
/// dropped.
#[cfg(all(unix, not(miri)))]
fn wait(sources: &mut Vec<Watched>, timeout: Option<Duration>) -> Option<Level> {
    use crate::os::event::PollFor;
    use crate::signal::Interest;

    let mut failed: Vec<(usize, String)> = Vec::new();
    let mut fired = None;
    {
        let mut fds = Vec::with_capacity(sources.len());
        let mut polled = Vec::with_capacity(sources.len());
        for (i, watched) in sources.iter().enumerate() {
            match callbacks::source_wait_spec(&*watched.source) {
                Ok((fd, interest)) => {
                    let what = match interest {
                        Interest::Readable => PollFor::Readable,
                        Interest::Priority => PollFor::Priority,
                    };
                    fds.push((fd, what));
                    polled.push(i);
                }
                Err(why) => failed.push((i, why)),
            }
        }
        let ready = match WAKER.poll_with(&fds, timeout) {
            Some(Ok(ready)) => ready,
            // No wake-up descriptor, or `poll` itself failed: come back on a short
            // timer instead of spinning.
            None | Some(Err(_)) => {
                let nap = Duration::from_millis(100);
                std::thread::sleep(timeout.map_or(nap, |t| t.min(nap)));
                Vec::new()
            }
        };
        drop(fds);
        for (k, r) in ready.iter().enumerate().skip(1) {
            let i = polled[k - 1];
            if r.failed {
                failed.push((i, "its descriptor reported an error".to_owned()));
            } else if r.ready {
                match callbacks::source_on_ready(&mut *sources[i].source) {
                    Ok(Some(level)) => {
                        let status = sources[i].status;
                        if let Some(s) = registry::lock().statuses.get_mut(status) {
                            s.events += 1;
                        }
                        fired = fired.max(Some(level));
                    }
                    Ok(None) => {}
                    Err(e) => failed.push((i, e.to_string())),
                }
            }
        }
    }
    failed.sort_by_key(|&(i, _)| std::cmp::Reverse(i));
    failed.dedup_by_key(|(i, _)| *i);
    for (i, why) in failed {
        let watched = sources.remove(i);
        let mut registry = registry::lock();
        if let Some(status) = registry.statuses.get_mut(watched.status) {
            let report = format!(
                "tidepool: memory-pressure source {} stopped ({why}); not watched from now on",
                status.name
            );
            status.error = Some(why);
            registry.reports.push(report);
        }
        registry::unlock(registry);
        // The source's own drop is user code: outside the lock.
        drop(watched);
    }
    fired
}

#[cfg(any(not(unix), miri))]
fn wait(_: &mut Vec<Watched>, timeout: Option<Duration>) -> Option<Level> {
    fallback::wait(timeout);
    None
}

#[cfg(any(not(unix), miri))]
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
