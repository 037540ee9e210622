//! Where reclaim gets the time from: the real monotonic clock, or one a test
//! moves by hand.

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicU64, Ordering};

/// A monotonic clock for reclaim intervals and pressure holds.
///
/// Inject one with [`Builder::clock`](crate::Builder::clock) to drive reclaim
/// deterministically in tests ([`ManualClock`]).
///
/// `now` is called on slow paths and on the reclaimer thread, never while
/// tidepool holds a lock. A panic from it reaches the caller of a pool
/// method (a `get` that had already taken its object destroys it first,
/// so none is lost), or, on the reclaimer thread, ends that pool's tick
/// only (counted in
/// [`ReclaimerStatus::panics`](crate::reclaim::ReclaimerStatus::panics)).
pub trait Clock: Send + Sync + 'static {
    /// Time since some fixed point; never decreases.
    fn now(&self) -> Duration;
}

/// The process's monotonic clock (`Instant`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed()
    }
}

/// A clock that moves only when told to.
///
/// ```
/// use std::time::Duration;
/// use tidepool::reclaim::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_secs(15));
/// assert_eq!(clock.now(), Duration::from_secs(15));
/// ```
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self {
            nanos: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward by `by`.
    ///
    /// The clock counts nanoseconds in a `u64` (about 584 years) and
    /// saturates there: advancing past the end leaves it at the end, it
    /// never wraps back to the start.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tidepool::reclaim::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::MAX);
    /// let end = clock.now();
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(clock.now(), end);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let mut now = self.nanos.load(Ordering::SeqCst);
        while let Err(seen) = self.nanos.compare_exchange_weak(
            now,
            now.saturating_add(by),
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            now = seen;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}
