//! Every stack pool in the process, so that one pool that hits a kernel
//! limit can make the others give back their idle stacks.
//!
//! The map count is a limit of the process, not of a pool: when `mmap`
//! fails in one pool, the idle stacks that would let it succeed may sit in
//! another. A pool only maps a new stack when its own depot and this
//! thread's cache are empty, so draining just itself would rarely help.

use std::sync::{Arc, Weak};

use crate::stack::StackManager;
use crate::sync::fork_safe::Mutex;
use crate::Pool;

static POOLS: Mutex<Vec<Weak<Pool<StackManager>>>> = Mutex::new(Vec::new());

/// Adds `pool` to the registry, forgetting pools that have been dropped.
pub(crate) fn register(pool: &Arc<Pool<StackManager>>) {
    fork_safety::install();
    let mut pools = POOLS.lock();
    pools.retain(|p| p.strong_count() > 0);
    pools.push(Arc::downgrade(pool));
}

/// Destroys the idle stacks every live stack pool can give up from this
/// thread ([`Pool::drain_blocking`]: its depot and this thread's cache). Returns how
/// many were unmapped.
pub(crate) fn reclaim_idle_stacks() -> usize {
    let live: Vec<Arc<Pool<StackManager>>> = {
        let pools = POOLS.lock();
        pools.iter().filter_map(Weak::upgrade).collect()
    };
    // Outside the registry lock: draining unmaps, and may drop a pool whose
    // last other handle went away meanwhile.
    live.iter().map(|pool| pool.drain_blocking()).sum()
}

/// `fork(2)`: the registry's lock is held across it, so a forked child
/// inherits it unlocked (see `reclaim/fork.rs` for the contract).
mod fork_safety {
    use std::cell::RefCell;
    use std::sync::{Once, Weak};

    use super::POOLS;
    use crate::stack::StackManager;
    use crate::sync::fork_safe::MutexGuard;
    use crate::Pool;

    type Guard = MutexGuard<'static, Vec<Weak<Pool<StackManager>>>>;

    std::thread_local! {
        static HELD: RefCell<Option<Guard>> = const { RefCell::new(None) };
    }

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            if let Err(e) = crate::os::fork::at_fork(prepare, release, release) {
                crate::callbacks::warn(format_args!(
                    "tidepool: cannot install fork handlers for the stack registry ({e})"
                ));
            }
        });
    }

    extern "C" fn prepare() {
        let _ = HELD.try_with(|held| {
            *held.borrow_mut() = Some(POOLS.lock());
        });
    }

    extern "C" fn release() {
        drop(HELD.try_with(|held| held.borrow_mut().take()));
    }
}
