//! Reading memory pressure: the machine-wide sources tidepool listens to,
//! behind a gate the lab opens only in the `pressure` scenario, and the
//! sensitive PSI trigger that scenario arms.
//!
//! # Why a gate
//!
//! tidepool watches the system's PSI and its cgroup's pressure by default,
//! and PSI is machine-wide: a build or a copy anywhere on the machine stalls
//! memory, and the pools react (drain, hold). The seed policies ignore
//! pressure, so in the throughput scenarios only tidepool would pay for
//! someone else's stall. Every policy must see the same conditions, so:
//!
//! * the lab runs with `TIDEPOOL_PRESSURE=manual` (set by `main` before the
//!   first pool; tidepool then watches no source on its own), and
//! * [`isolation`] watches the library's own default sources
//!   ([`PsiTrigger::system_defaults`](tidepool::pressure::PsiTrigger::system_defaults), [`PsiTrigger::cgroup_defaults`](tidepool::pressure::PsiTrigger::cgroup_defaults),
//!   [`CgroupV1Pressure::own_defaults`](tidepool::pressure::CgroupV1Pressure::own_defaults)) through a [`Gated`] wrapper that
//!   passes their signals on only while a [`GateOpen`] lives.
//!
//! The `pressure` scenario opens the gate in each run from the moment it
//! delivers its signal to the end of the run: then tidepool hears exactly
//! what it would hear on its own, plus the scenario's trigger. Everywhere
//! else (and before the delivery) the signals are counted ([`totals`]) but
//! withheld, and the report says how many.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tidepool::pressure::{self, Level, Source};

use crate::procfs;

/// The PSI file the scenario's trigger is armed on.
pub const PSI_FILE: &str = procfs::PSI_MEMORY;
/// Stall within a window that fires the scenario's trigger.
pub const PSI_THRESHOLD: Duration = Duration::from_millis(10);
/// The trigger's window (the shortest allowed without `CAP_SYS_RESOURCE`).
pub const PSI_WINDOW: Duration = Duration::from_secs(2);
/// Names of gated sources end with this.
pub const GATED_SUFFIX: &str = " [lab gate]";

/// Opens of the gate that are still alive.
static OPEN: AtomicUsize = AtomicUsize::new(0);
/// Manual signals the lab delivered ([`notify_critical`]).
static NOTIFIED: AtomicU64 = AtomicU64::new(0);
/// Every gated source, with its counts.
static WATCHED: Mutex<Vec<Arc<Counter>>> = Mutex::new(Vec::new());

#[derive(Debug)]
struct Counter {
    name: String,
    raised: AtomicU64,
    withheld: AtomicU64,
}

/// A source whose signals reach the pools only while the gate is open.
#[derive(Debug)]
pub struct Gated<S> {
    inner: S,
    counter: Arc<Counter>,
}

impl<S: Source> Source for Gated<S> {
    fn name(&self) -> String {
        self.counter.name.clone()
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inner.fd()
    }

    fn interest(&self) -> pressure::Interest {
        self.inner.interest()
    }

    fn on_ready(&mut self) -> std::io::Result<Option<Level>> {
        let level = self.inner.on_ready()?;
        if level.is_some() {
            self.counter.raised.fetch_add(1, Ordering::Relaxed);
            if OPEN.load(Ordering::Acquire) == 0 {
                self.counter.withheld.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        }
        Ok(level)
    }
}

/// Has tidepool's reclaimer watch `source` through the gate.
fn watch_gated<S: Source>(source: S) -> String {
    let counter = Arc::new(Counter {
        name: format!("{}{GATED_SUFFIX}", source.name()),
        raised: AtomicU64::new(0),
        withheld: AtomicU64::new(0),
    });
    let name = counter.name.clone();
    WATCHED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Arc::clone(&counter));
    pressure::watch(Box::new(Gated {
        inner: source,
        counter,
    }));
    name
}

/// Whether machine-wide pressure is kept away from the pools outside the
/// `pressure` scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// The library's default sources are watched through the gate.
    Gated {
        /// The sources watched.
        watched: Vec<String>,
        /// Default sources this machine does not have, and why.
        unavailable: Vec<String>,
    },
    /// tidepool watches its default sources itself: every scenario gets
    /// whatever pressure the machine has.
    Ungated {
        /// Why.
        why: String,
    },
}

impl Isolation {
    /// One sentence for a report.
    pub fn describe(&self) -> String {
        match self {
            Isolation::Gated {
                watched,
                unavailable,
            } => {
                let mut s = format!(
                    "machine-wide memory pressure reaches tidepool's pools only in the pressure \
                     scenario, from the moment a run delivers its signal to the run's end: \
                     tidepool's {} default source(s) are watched through a gate that is open then \
                     and closed otherwise, so everywhere else all policies run without pressure \
                     signals (signals raised meanwhile are counted as withheld)",
                    watched.len()
                );
                if !unavailable.is_empty() {
                    s.push_str(&format!(
                        "; not on this machine: {}",
                        unavailable.join("; ")
                    ));
                }
                s
            }
            Isolation::Ungated { why } => format!(
                "NOT isolated: {why}; machine-wide memory pressure (another process's build, a \
                 copy) may reach tidepool's pools in any scenario, and only tidepool reacts to it"
            ),
        }
    }

    /// Whether the gate is in place.
    pub fn is_gated(&self) -> bool {
        matches!(self, Isolation::Gated { .. })
    }
}

/// Installs the gate once per process (see the module docs) and says
/// whether it is in place.
pub fn isolation() -> &'static Isolation {
    static ISOLATION: OnceLock<Isolation> = OnceLock::new();
    ISOLATION.get_or_init(|| {
        if std::env::var_os("TIDEPOOL_PRESSURE").is_none_or(|v| v != "manual") {
            return Isolation::Ungated {
                why: "TIDEPOOL_PRESSURE was not `manual` when the lab started, so tidepool \
                      watches its default sources itself"
                    .to_owned(),
            };
        }
        let mut watched = Vec::new();
        let mut unavailable = Vec::new();
        install_defaults(&mut watched, &mut unavailable);
        Isolation::Gated {
            watched,
            unavailable,
        }
    })
}

#[cfg(target_os = "linux")]
fn install_defaults(watched: &mut Vec<String>, unavailable: &mut Vec<String>) {
    use tidepool::pressure::{CgroupV1Pressure, PsiTrigger};
    let mut add = |r: std::io::Result<Box<dyn FnOnce() -> String>>, what: &str| match r {
        Ok(watch) => watched.push(watch()),
        Err(e) => unavailable.push(format!("{what}: {e}")),
    };
    fn later<S: Source>(s: S) -> Box<dyn FnOnce() -> String> {
        Box::new(move || watch_gated(s))
    }
    for r in PsiTrigger::system_defaults() {
        add(r.map(later), "system PSI trigger");
    }
    match PsiTrigger::cgroup_defaults() {
        Ok(list) => list
            .into_iter()
            .for_each(|r| add(r.map(later), "cgroup v2 PSI trigger")),
        Err(e) => add(Err(e), "cgroup v2 memory.pressure"),
    }
    match CgroupV1Pressure::own_defaults() {
        Ok(list) => list
            .into_iter()
            .for_each(|r| add(r.map(later), "cgroup v1 memory.pressure_level")),
        Err(e) => add(Err(e), "cgroup v1 memory.pressure_level"),
    }
}

#[cfg(not(target_os = "linux"))]
fn install_defaults(_watched: &mut Vec<String>, unavailable: &mut Vec<String>) {
    unavailable.push("not Linux: no PSI, no cgroups".to_owned());
}

/// Lets gated signals through while it lives.
#[derive(Debug)]
#[must_use = "the gate closes when this is dropped"]
pub struct GateOpen(());

/// Opens the gate until the returned value is dropped.
pub fn open_gate() -> GateOpen {
    OPEN.fetch_add(1, Ordering::AcqRel);
    GateOpen(())
}

impl Drop for GateOpen {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the gate is open now.
pub fn gate_is_open() -> bool {
    OPEN.load(Ordering::Acquire) > 0
}

/// Delivers critical pressure by hand (`tidepool::pressure::notify`),
/// counted in [`totals`].
pub fn notify_critical() {
    NOTIFIED.fetch_add(1, Ordering::Relaxed);
    pressure::notify(Level::Critical);
}

/// Pressure signals so far in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Raised by the gated sources, plus the lab's manual signals.
    pub raised: u64,
    /// Of the gated sources' signals, those the closed gate held back.
    pub withheld: u64,
}

impl Totals {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Totals) -> Totals {
        Totals {
            raised: self.raised.saturating_sub(earlier.raised),
            withheld: self.withheld.saturating_sub(earlier.withheld),
        }
    }
}

/// The counts so far.
pub fn totals() -> Totals {
    let watched = WATCHED.lock().unwrap_or_else(PoisonError::into_inner);
    let mut t = Totals {
        raised: NOTIFIED.load(Ordering::Relaxed),
        withheld: 0,
    };
    for c in watched.iter() {
        t.raised += c.raised.load(Ordering::Relaxed);
        t.withheld += c.withheld.load(Ordering::Relaxed);
    }
    t
}

/// Each gated source's name and the signals it raised so far.
pub fn events() -> Vec<(String, u64)> {
    WATCHED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|c| (c.name.clone(), c.raised.load(Ordering::Relaxed)))
        .collect()
}

/// Signals raised so far by the gated source named `name`.
pub fn events_of(name: &str) -> u64 {
    events()
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, e)| e)
}

/// The sources with more signals in `now` than in `before`.
pub fn fired_between(before: &[(String, u64)], now: &[(String, u64)]) -> Vec<String> {
    now.iter()
        .filter(|(name, events)| {
            let b = before
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, e)| *e);
            *events > b
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Arms the scenario's PSI trigger (`some 10000 2000000` on
/// `/proc/pressure/memory`, signalling [`Level::Critical`]) once per
/// process, behind the gate, and returns its name; later calls return the
/// first outcome.
///
/// # Errors
///
/// Why the trigger could not be armed or watched.
pub fn arm_trigger() -> Result<String, String> {
    static ARMED: OnceLock<Result<String, String>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            #[cfg(target_os = "linux")]
            {
                use tidepool::pressure::{PsiTrigger, Stall};
                let trigger = PsiTrigger::new(
                    PSI_FILE,
                    Stall::Some,
                    PSI_THRESHOLD,
                    PSI_WINDOW,
                    Level::Critical,
                )
                .map_err(|e| format!("arm the PSI trigger: {e}"))?;
                let name = watch_gated(trigger);
                // The reclaimer thread starts with the first pool: make sure
                // it runs (and polls the trigger) even if no tidepool pool is
                // built before a seed policy's run.
                drop(tidepool::stack::StackPool::new(64 * 1024));
                match pressure::sources().into_iter().find(|s| s.name == name) {
                    Some(st) if st.error.is_none() => Ok(name),
                    Some(st) => Err(format!(
                        "watch the PSI trigger: {}",
                        st.error.unwrap_or_default()
                    )),
                    None => Err("watch the PSI trigger: not listed by the reclaimer".to_owned()),
                }
            }
            #[cfg(not(target_os = "linux"))]
            {
                Err("arm the PSI trigger: not Linux".to_owned())
            }
        })
        .clone()
}

/// Whether any source tidepool watches is *not* behind the gate (the
/// library's own default sources, when `TIDEPOOL_PRESSURE` is not
/// `manual`).
pub fn ungated_sources() -> Vec<String> {
    pressure::sources()
        .into_iter()
        .filter(|s| s.error.is_none() && !s.name.ends_with(GATED_SUFFIX))
        .map(|s| s.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    struct Fake {
        fd: UnixStream,
        level: Option<Level>,
    }

    impl Source for Fake {
        fn name(&self) -> String {
            "fake".to_owned()
        }
        fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.fd.as_fd()
        }
        fn interest(&self) -> pressure::Interest {
            pressure::Interest::Readable
        }
        fn on_ready(&mut self) -> std::io::Result<Option<Level>> {
            Ok(self.level)
        }
    }

    #[test]
    fn the_gate_withholds_signals_while_closed_and_counts_them() {
        let (fd, _other) = UnixStream::pair().unwrap();
        let counter = Arc::new(Counter {
            name: "fake [lab gate]".to_owned(),
            raised: AtomicU64::new(0),
            withheld: AtomicU64::new(0),
        });
        let mut gated = Gated {
            inner: Fake {
                fd,
                level: Some(Level::Critical),
            },
            counter: Arc::clone(&counter),
        };
        assert!(!gate_is_open());
        assert_eq!(gated.on_ready().unwrap(), None, "closed: withheld");
        {
            let _open = open_gate();
            assert_eq!(
                gated.on_ready().unwrap(),
                Some(Level::Critical),
                "open: passed on"
            );
        }
        assert_eq!(gated.on_ready().unwrap(), None, "closed again");
        assert_eq!(counter.raised.load(Ordering::Relaxed), 3);
        assert_eq!(counter.withheld.load(Ordering::Relaxed), 2);
        // A source with nothing to say counts nothing.
        gated.inner.level = None;
        assert_eq!(gated.on_ready().unwrap(), None);
        assert_eq!(counter.raised.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn totals_subtract() {
        let a = Totals {
            raised: 5,
            withheld: 2,
        };
        let b = Totals {
            raised: 9,
            withheld: 2,
        };
        assert_eq!(
            b.since(a),
            Totals {
                raised: 4,
                withheld: 0
            }
        );
    }
}
