//! Test hooks compiled into the library's own unit tests only (never into
//! a build anyone links): what a test needs to see inside the pool, and a
//! way to hold a thread at a chosen point so that a race is forced rather
//! than hoped for (`tests/limit_races.rs`).

use std::cell::Cell;
use std::sync::atomic::AtomicUsize;

std::thread_local! {
    /// Whether this thread is inside a bracketed cache access, so a test
    /// allocator can check that nothing allocates there (`bracket_alloc`).
    pub(crate) static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// Holds this thread at one of its next points (see [`Pause`]).
    static PAUSE: Cell<Option<Pause>> = const { Cell::new(None) };
}

/// Times a revoker found a cache's owner inside an access and waited it
/// out (`IfBusy::WaitOut`).
pub(crate) static WAITED_OUT: AtomicUsize = AtomicUsize::new(0);

/// Where a thread can be held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// At the start of a cache access, still outside it.
    BeforeAccess,
    /// Inside a cache access, once entered.
    InsideAccess,
    /// Just before an object is shelved in the depot (`Shared::shelve`).
    Shelve,
    /// Just before a freed place under `max_live` goes back to the count
    /// (`Shared::release_place`), no waiter having been there to take it.
    ReleasePlace,
    /// Between taking every thread's credits (unused places) and giving
    /// them back to the count (`Places::recall`).
    ReturnCredits,
    /// Just before a refill becomes a `get`'s cache's loaded batch: a
    /// batch taken from the depot or the rest of a burst it created, less
    /// the object it keeps (`Shared::get_slow`).
    Refill,
    /// An exiting thread's hand-back of its cache, holding the pool
    /// (`Shared::thread_exit`).
    ThreadExit,
}

/// A test's hold on a thread: `then` runs once, at the thread's next
/// `point` after `skip` others. A plain `fn`, so arming and running it
/// allocate nothing (`bracket_alloc` counts allocations inside brackets).
#[derive(Clone, Copy)]
struct Pause {
    point: Point,
    skip: u32,
    then: fn(),
}

/// Holds this thread, with `then`, at its next `point` after `skip` others.
pub(crate) fn arm(point: Point, skip: u32, then: fn()) {
    PAUSE.set(Some(Pause { point, skip, then }));
}

/// Runs this thread's armed pause if `point` is its own.
pub(crate) fn pause(point: Point) {
    let Some(p) = PAUSE.get() else { return };
    if p.point != point {
        return;
    }
    if p.skip > 0 {
        PAUSE.set(Some(Pause {
            skip: p.skip - 1,
            ..p
        }));
        return;
    }
    PAUSE.set(None);
    (p.then)();
}
