//! The one place tidepool takes its synchronization primitives from.
//!
//! Under `cfg(loom)` every atomic, cell, lock and thread-local comes from
//! [loom](https://docs.rs/loom), so the models in `src/tests/loom_*.rs` explore
//! every interleaving of the cache <-> depot hand-offs. Nothing else in the
//! crate imports `std::sync::atomic`, `std::cell::UnsafeCell` or a mutex.

#[cfg(loom)]
mod inner {
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{
            fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize,
        };
        pub(crate) use std::sync::atomic::Ordering;
    }
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::MutexGuard;
    pub(crate) use loom::thread::yield_now;
    pub(crate) use loom::thread_local;

    /// Loom explores every schedule: a yield is all a wait needs.
    pub(crate) fn back_off(_round: &mut u32) {
        yield_now();
    }

    /// loom's mutex, with parking_lot's poison-free `lock()` signature.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }

        pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    /// loom's reader-writer lock, with the poison-free signatures of the
    /// `std` build's: a blocking `read`, a `try_write` that never waits.
    #[derive(Debug)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }

        pub(crate) fn try_write(&self) -> Option<loom::sync::RwLockWriteGuard<'_, T>> {
            self.0.try_write().ok()
        }
    }
    pub(crate) use loom::sync::RwLockReadGuard;

    /// loom's condition variable; loom has no time, so a deadline is
    /// ignored (a model never times out).
    #[derive(Debug)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Self(loom::sync::Condvar::new())
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }

        /// Waits for a notification; `true` if the deadline passed (never,
        /// under loom).
        pub(crate) fn wait_until<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            _deadline: Option<std::time::Instant>,
        ) -> (MutexGuard<'a, T>, bool) {
            let guard = self.0.wait(guard).unwrap_or_else(|p| p.into_inner());
            (guard, false)
        }
    }
}

#[cfg(not(loom))]
mod inner {
    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{
            fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering,
        };
    }
    pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard};
    pub(crate) use std::thread::yield_now;
    pub(crate) use std::thread_local;

    /// One round of waiting for another thread to finish a few
    /// instructions: a yield at first, then a short sleep, which gives the
    /// CPU up even to a thread of lower real-time priority (a yield would
    /// not) so the wait cannot starve what it waits for.
    pub(crate) fn back_off(round: &mut u32) {
        *round = round.saturating_add(1);
        if *round <= 64 {
            yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// parking_lot's condition variable, with the guard passed by value as
    /// loom's wants it.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Self(parking_lot::Condvar::new())
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }

        /// Waits for a notification or `deadline` (`None`: none); `true` if
        /// the deadline passed.
        pub(crate) fn wait_until<'a, T>(
            &self,
            mut guard: MutexGuard<'a, T>,
            deadline: Option<std::time::Instant>,
        ) -> (MutexGuard<'a, T>, bool) {
            let timed_out = match deadline {
                Some(deadline) => self.0.wait_until(&mut guard, deadline).timed_out(),
                None => {
                    self.0.wait(&mut guard);
                    false
                }
            };
            (guard, timed_out)
        }
    }

    /// `std::cell::UnsafeCell` with loom's closure-based API, so the same code
    /// compiles against both (loom's README, "Handling Loom API differences").
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

pub(crate) use inner::*;

/// Locks that a `pthread_atfork` handler holds across `fork(2)` and
/// releases in the child (`reclaim/fork.rs`): `std`'s, under every cfg,
/// poison ignored.
///
/// A `std` lock's whole state is its lock word (a futex on Linux, a
/// pthread lock elsewhere, which POSIX lets the locking thread unlock in
/// the child), so its unlock in the child frees it whoever waited for it
/// in the parent. parking_lot's does not: the unlock of a lock other
/// threads were parked on may hand it straight to the first of them
/// (eventual fairness), and in the child that thread does not exist, so the
/// lock stays held for ever.
pub(crate) mod fork_safe {
    use std::sync::PoisonError;
    pub(crate) use std::sync::{Condvar, MutexGuard, RwLockReadGuard, RwLockWriteGuard};

    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// Waits on `condvar` with `guard`'s lock released meanwhile.
    pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(std::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

/// Atomics for process-wide statics that no loom model covers (the
/// reclaimer thread's flags, its wake-up descriptor, OS failure counts):
/// loom's atomics cannot live in a `static`, so these stay `std`'s under
/// every cfg.
pub(crate) mod process {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
}

/// A counter with a single writer: the owner bumps it with a plain load and
/// store (no read-modify-write, so no locked instruction on the fast path);
/// any thread may read it. Readers see a value that lags the owner by at most
/// the operation it is in the middle of.
#[derive(Debug, Default)]
pub(crate) struct OwnerCounter(atomic::AtomicU64);

impl OwnerCounter {
    /// Adds one, publishing the owner's earlier writes to whoever reads the
    /// new value with [`read_acquire`](OwnerCounter::read_acquire). Only the
    /// owning thread may call this.
    #[inline(always)]
    pub(crate) fn bump_release(&self) {
        use atomic::Ordering::{Relaxed, Release};
        self.0.store(self.0.load(Relaxed) + 1, Release);
    }

    /// Adds `n`; as [`bump_release`](OwnerCounter::bump_release).
    #[inline(always)]
    pub(crate) fn add_release(&self, n: u64) {
        use atomic::Ordering::{Relaxed, Release};
        self.0.store(self.0.load(Relaxed) + n, Release);
    }

    #[inline]
    pub(crate) fn read(&self) -> u64 {
        self.0.load(atomic::Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn read_acquire(&self) -> u64 {
        self.0.load(atomic::Ordering::Acquire)
    }
}

/// A counter any thread may bump: used on slow paths only.
#[derive(Debug, Default)]
pub(crate) struct SharedCounter(atomic::AtomicU64);

impl SharedCounter {
    /// `Release` (the same instruction as `Relaxed` on x86): a reader that
    /// sees the new value after an `Acquire` fence also sees what the
    /// bumping thread did before, as `Shared::live_bound` needs.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, atomic::Ordering::Release);
    }

    #[inline]
    pub(crate) fn read(&self) -> u64 {
        self.0.load(atomic::Ordering::Relaxed)
    }
}
