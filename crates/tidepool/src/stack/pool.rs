//! The front door for stacks: [`StackPool`] and the [`PooledStack`] it
//! lends.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

use crate::os;
use crate::pressure::Level;
use crate::stack::{
    registry, GuardedStack, MapBudget, StackError, StackManager, StackPoolBuilder, StackStats,
};
use crate::{Config, ConfigError, OwnedPooled, Pool};

/// A pool of guarded stacks of one size; cheap to clone (an `Arc`).
///
/// `get` takes a stack from this thread's cache (no lock, no syscall) or,
/// when there is none, from the shared depot, and carves a new one from a
/// slab (see [Slabs](super#slabs)) only when both are empty. A [`PooledStack`] goes back to the pool when dropped, on
/// whichever thread that happens.
///
/// By default (on Linux) the pool never holds more stacks than the
/// process's map-count budget allows ([`MapBudget`]), so it cannot be what
/// runs the process into `vm.max_map_count`; and if the kernel refuses a
/// mapping anyway, `get` returns an error rather than aborting.
///
/// Only stacks this pool mapped ever enter it: the generic [`Pool`] behind
/// it is not handed out, and a [`PooledStack`] lends its [`GuardedStack`]
/// by shared reference only, so no stack of another size (or another
/// pool's) can be swapped in:
///
/// ```compile_fail,E0594
/// # use tidepool::stack::{GuardedStack, StackPool};
/// # let pool = StackPool::new(64 * 1024).unwrap();
/// let mut lent = pool.get().unwrap();
/// *lent = GuardedStack::new(4096).unwrap(); // error: `PooledStack` is not `DerefMut`
/// ```
///
/// ```
/// use tidepool::stack::StackPool;
///
/// let pool = StackPool::new(64 * 1024)?;
/// let stack = pool.get()?;
/// assert_eq!(stack.usable_size(), 64 * 1024);
/// let top = stack.top();
/// drop(stack); // back to this thread's cache
///
/// let again = pool.get()?;
/// assert_eq!(again.top(), top, "the same mapping, reused");
/// assert_eq!(pool.stats().mapped, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct StackPool {
    // Never handed out: `Pool::get` would give `&mut GuardedStack` access,
    // through which a foreign stack could be swapped into the pool.
    pool: Arc<Pool<StackManager>>,
}

impl StackPool {
    /// A pool of stacks with `usable_size` bytes each (rounded up to whole
    /// pages) and the default settings ([`StackPoolBuilder`]).
    ///
    /// # Errors
    ///
    /// As for [`StackPoolBuilder::build`].
    pub fn new(usable_size: usize) -> Result<Self, ConfigError> {
        Self::builder(usable_size).build()
    }

    /// A builder for stacks of `usable_size` bytes each (rounded up to
    /// whole pages).
    pub fn builder(usable_size: usize) -> StackPoolBuilder {
        StackPoolBuilder::stacks(usable_size)
    }

    pub(crate) fn from_pool(pool: Arc<Pool<StackManager>>) -> Self {
        Self { pool }
    }

    /// Takes an idle stack, or carves a new one (a free slot of a slab, or
    /// a new slab).
    ///
    /// If the kernel refuses the mapping for lack of a resource (`ENOMEM`:
    /// the map count or memory), every stack pool in the process gives up
    /// the idle stacks it can (`drain`), and the mapping is tried once more.
    ///
    /// # Errors
    ///
    /// [`StackError::Exhausted`] when the pool holds `max_live` stacks;
    /// after the retry, [`StackError::MapCountReached`] or
    /// [`StackError::OutOfMemory`]; [`StackError::Os`] for anything else.
    /// Nothing is left mapped by a failure.
    // Always inlined: left to the compiler, a caller that is itself out of
    // line (a trait object, a runtime's spawn function) called this and got
    // the `Result` back through memory, which costs instructions on every
    // get + drop (budget `stack_get_drop_apart`).
    #[inline(always)]
    pub fn get(&self) -> Result<PooledStack, StackError> {
        match self.pool.get_owned() {
            Ok(inner) => Ok(PooledStack::lent(inner)),
            Err(e) => self.get_after_failure(e.into()),
        }
    }

    /// Gives a stack back through this handle: what dropping it does, but
    /// cheaper, since the handle keeps the pool alive and the stack's own
    /// end need not ([`Pool::put`]; budgets `stack_get_put` against
    /// `stack_get_drop` in `crates/tidepool-bench/budget.toml`). A stack of
    /// another pool is dropped as usual.
    ///
    /// ```
    /// let pool = tidepool::stack::StackPool::new(64 * 1024)?;
    /// let stack = pool.get()?;
    /// pool.put(stack);
    /// assert_eq!(pool.stats().pool.idle, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    pub fn put(&self, stack: PooledStack) {
        self.pool.put(stack.into_guard());
    }

    /// Like [`get`](StackPool::get), but at `max_live` waits up to
    /// `timeout` for a stack to be given back, first come, first served
    /// ([`Pool::get_timeout`]).
    ///
    /// # Errors
    ///
    /// [`StackError::Timeout`] if none was handed over in time; otherwise
    /// as for [`get`](StackPool::get).
    pub fn get_timeout(&self, timeout: std::time::Duration) -> Result<PooledStack, StackError> {
        match self.pool.get_owned_timeout(timeout) {
            Ok(inner) => Ok(PooledStack::lent(inner)),
            Err(e) => self.get_after_failure(e.into()),
        }
    }

    #[cold]
    fn get_after_failure(&self, error: StackError) -> Result<PooledStack, StackError> {
        if !error.is_resource_limit() {
            return Err(error);
        }
        self.manager().count_reclaim_retry();
        registry::reclaim_idle_stacks();
        match self.pool.get_owned() {
            Ok(inner) => Ok(PooledStack::lent(inner)),
            Err(e) => Err(e.into()),
        }
    }

    /// Releases the memory of idle stacks in the depot while keeping them
    /// mapped and pooled ([`Manage::purge`](crate::Manage::purge)): each
    /// gives back its pages below the top `keep_resident` bytes (`madvise`:
    /// see [Per OS](super#per-os)), costing nothing until reused. Returns
    /// how many were purged. Stacks in thread caches are hot and left
    /// alone.
    ///
    /// This also happens by itself: every reclaim interval (default 15 s,
    /// [`StackPoolBuilder::reclaim_interval`](super::StackPoolBuilder::reclaim_interval))
    /// the pool purges the stacks that sat idle in the depot through the
    /// whole interval, and destroys those idle through two (see
    /// [`crate::reclaim`]). Call this to purge now, e.g. when memory is
    /// short.
    ///
    /// ```
    /// # use tidepool::stack::StackPool;
    /// let pool = StackPool::builder(64 * 1024).batch_size(1).max_idle(8).build()?;
    /// let stacks: Vec<_> = (0..4).map(|_| pool.get()).collect::<Result<_, _>>()?;
    /// drop(stacks); // two stay in this thread's cache, two reach the depot
    /// assert_eq!(pool.purge(), 2);
    /// assert_eq!(pool.stats().purged, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn purge(&self) -> usize {
        self.pool.purge()
    }

    /// Hands the calling thread's cached stacks back to the depot now
    /// ([`Pool::trim_local`]); a thread does this on its own when it
    /// exits. Returns how many stacks left the cache.
    pub fn trim_local(&self) -> usize {
        self.pool.trim_local()
    }

    /// Drops this handle like [`Pool::close`]: every idle stack is unmapped
    /// before it returns, once tidepool's own threads (and other clones of
    /// this handle) have let go of the pool, waiting up to `timeout`.
    /// `false` if something still held it then.
    pub fn close(self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut pool = self.pool;
        loop {
            match Arc::try_unwrap(pool) {
                Ok(pool) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    return pool.close(left);
                }
                Err(shared) if std::time::Instant::now() < deadline => {
                    pool = shared;
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                Err(_) => return false,
            }
        }
    }

    /// Destroys the calling thread's cached stacks now
    /// ([`Pool::destroy_local`]). Returns how many.
    pub fn destroy_local(&self) -> usize {
        self.pool.destroy_local()
    }

    /// The cap on idle stacks in the depot now ([`Pool::max_idle`]).
    pub fn max_idle(&self) -> usize {
        self.pool.max_idle()
    }

    /// Changes the cap on idle stacks at run time ([`Pool::set_max_idle`]).
    ///
    /// # Errors
    ///
    /// As for [`Pool::set_max_idle`].
    pub fn set_max_idle(&self, max_idle: usize) -> Result<usize, ConfigError> {
        self.pool.set_max_idle(max_idle)
    }

    /// Adds `delta` to the cap on idle stacks ([`Pool::adjust_max_idle`]).
    ///
    /// # Errors
    ///
    /// As for [`Pool::adjust_max_idle`].
    pub fn adjust_max_idle(&self, delta: isize) -> Result<usize, ConfigError> {
        self.pool.adjust_max_idle(delta)
    }

    /// Reclaims every idle stack this thread can reach: the depot's and
    /// this thread's cached stacks go to the pool's destroy queue
    /// ([`Pool::drain`]), which releases their pages and unmaps each slab
    /// whose last stack they were; this call runs at most one chunk of it,
    /// the reclaimer thread or the next callers the rest. Returns how many
    /// stacks it took. The pool's own reclaim, which destroys only stacks
    /// its working set does not need, is [`reclaim`](StackPool::reclaim).
    pub fn drain(&self) -> usize {
        self.pool.drain()
    }

    /// Like [`drain`](StackPool::drain), but every stack it takes is
    /// unmapped or released by the time it returns
    /// ([`Pool::drain_blocking`]).
    pub fn drain_blocking(&self) -> usize {
        self.pool.drain_blocking()
    }

    /// Runs the reclaim pass if one is due ([`Pool::reclaim`]): purges the
    /// stacks idle in the depot for a whole interval, destroys those idle
    /// for two, and takes back idle thread caches. Returns how many stacks
    /// were destroyed. The reclaimer thread does this on its own unless the pool
    /// was built with [`background(false)`](StackPoolBuilder::background);
    /// then call it from a timer of your own, at least once per
    /// [`reclaim_interval`](StackPoolBuilder::reclaim_interval).
    pub fn reclaim(&self) -> usize {
        self.pool.reclaim()
    }

    /// Destroys the idle stacks the depot did not need since the last
    /// call ([`Pool::reclaim_unused`]). Returns how many.
    pub fn reclaim_unused(&self) -> usize {
        self.pool.reclaim_unused()
    }

    /// Applies a memory-pressure level to this pool now ([`Pool::pressure`]).
    /// Returns how many idle stacks were destroyed.
    pub fn pressure(&self, level: Level) -> usize {
        self.pool.pressure(level)
    }

    /// Maps stacks into the depot until it holds `min_idle`
    /// ([`Pool::prefill`]). Returns how many were mapped.
    ///
    /// # Errors
    ///
    /// As for [`get`](StackPool::get), less the reclaim and retry; the
    /// stacks mapped before the error stay.
    pub fn prefill(&self) -> Result<usize, StackError> {
        self.pool.prefill().map_err(StackError::from)
    }

    /// Counts, in stacks, VMAs and bytes.
    pub fn stats(&self) -> StackStats {
        let pool = self.pool.stats();
        let manager = self.manager();
        let mapped = pool.existing();
        let unpurged_idle = pool.idle.saturating_sub(pool.idle_purged);
        let usable = manager.usable_size() as u64;
        let keep = manager.keep_resident() as u64;
        let slabs = manager.slab_counts();
        StackStats {
            pool,
            mapped,
            vmas: slabs.vmas,
            slabs: slabs.slabs,
            slots: slabs.slots,
            idle_resident_max: unpurged_idle * usable + pool.idle_purged * keep,
            purged: pool.idle_purged,
            reclaim_retries: manager.reclaim_retries(),
            purge_failures: slabs.release_failures,
            unmap_failures: os::unmap_failures(),
            mmap_calls: slabs.mmap,
            mprotect_calls: slabs.mprotect,
            guard_calls: slabs.guard,
            madvise_calls: slabs.madvise,
            munmap_calls: slabs.munmap,
        }
    }

    /// Bytes of this pool's stacks that are in RAM now, measured with
    /// `mincore` over every slab the pool has mapped: stacks in use, idle
    /// stacks (cached or in the depot) and free slots alike. Unlike
    /// [`StackStats::idle_resident_max`], a measurement, not a bound. A
    /// snapshot for diagnostics and experiments (the lab subtracts what its
    /// live requests touched to get the idle stacks' share); it takes the
    /// slab lock and one `mincore` per slab, so do not call it on a hot
    /// path.
    ///
    /// # Errors
    ///
    /// What `mincore` reported; not expected for the pool's own mappings.
    pub fn resident_bytes(&self) -> std::io::Result<u64> {
        self.manager().resident_bytes()
    }

    /// The map-count budget the pool was built with (its caps come from it
    /// unless set explicitly): always one on Linux and Android; on systems
    /// without a map count, `None` unless one was given
    /// ([`map_budget`](StackPoolBuilder::map_budget)).
    pub fn budget(&self) -> Option<MapBudget> {
        self.manager().budget()
    }

    /// The pool's caps and batch size.
    pub fn config(&self) -> &Config {
        self.pool.config()
    }

    /// The stack manager: sizes and counters.
    pub fn manager(&self) -> &StackManager {
        self.pool.manager()
    }
}

impl fmt::Debug for StackPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackPool")
            .field("manager", self.manager())
            .field("config", self.config())
            .field("budget", &self.budget())
            .finish_non_exhaustive()
    }
}

/// A stack lent by a [`StackPool`]: `'static` and `Send`, it holds the pool
/// alive and goes back to it when dropped, on any thread. Derefs to the
/// [`GuardedStack`] for its addresses.
///
/// With the `corosensei` feature it is a `corosensei::stack::Stack`, so a
/// coroutine can own it, and returns it to the pool when the coroutine is
/// dropped:
///
/// ```
/// # #[cfg(feature = "corosensei")] {
/// use corosensei::{Coroutine, CoroutineResult};
/// use tidepool::stack::StackPool;
///
/// let pool = StackPool::new(64 * 1024).unwrap();
/// let mut co = Coroutine::with_stack(pool.get().unwrap(), |yielder, x: u32| {
///     let y = yielder.suspend(x + 1);
///     y * 2
/// });
/// assert!(matches!(co.resume(1), CoroutineResult::Yield(2)));
/// assert!(matches!(co.resume(5), CoroutineResult::Return(10)));
/// drop(co);
/// assert_eq!(pool.stats().pool.idle, 1, "the stack is back in the pool");
/// # }
/// ```
pub struct PooledStack {
    /// The stack, counted out of the pool its slab set knows
    /// (`Slabs::pool`) until this handle ends. The pool is not kept here:
    /// two words are moved in registers wherever the handle goes (a
    /// three-word one goes through memory in 16-byte pieces, and the first
    /// read after each move waited on the store; see `implementation`).
    /// Sound because the stack cannot be swapped for another: the handle
    /// gives `&GuardedStack` only (no `DerefMut`, `AsMut`), so its slab set
    /// always names the pool that lent it.
    stack: ManuallyDrop<GuardedStack>,
}

// Two pointers: the stack's start and its slab set.
const _: () = assert!(std::mem::size_of::<PooledStack>() == 2 * std::mem::size_of::<usize>());

impl PooledStack {
    /// The handle for a stack just counted out of the pool: the owned
    /// guard's parts, less the pool, which the stack's slab set knows.
    #[inline(always)]
    fn lent(guard: OwnedPooled<StackManager>) -> Self {
        let (pool, stack) = guard.into_parts();
        debug_assert!(
            stack.slabs().pool()
                == (
                    pool.shared_ptr().cast::<()>(),
                    pool.head_ptr().as_ptr().cast::<()>()
                )
        );
        PooledStack {
            stack: ManuallyDrop::new(stack),
        }
    }

    /// The owned guard this handle stands for, to end it with.
    #[inline(always)]
    fn into_guard(self) -> OwnedPooled<StackManager> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the stack is taken out once.
        let stack = unsafe { ManuallyDrop::take(&mut this.stack) };
        Self::owned_guard(stack)
    }

    /// The owned guard of a lent stack.
    #[inline(always)]
    fn owned_guard(stack: GuardedStack) -> OwnedPooled<StackManager> {
        // SAFETY: the pool counts `stack` out until the guard made here
        // ends (`lender`).
        unsafe { OwnedPooled::new(Self::lender(&stack), stack) }
    }

    /// An uncounted handle on the pool that lent `stack`, whose shared
    /// state and head its slab set records (the builder records them
    /// before lending any): bit for bit the alias `get_owned` made (and
    /// `lent` dropped, owning nothing).
    ///
    /// # Safety
    ///
    /// `stack` is counted out of that pool (so the pool is alive) for as
    /// long as the handle is used.
    #[inline(always)]
    unsafe fn lender(stack: &GuardedStack) -> ManuallyDrop<Pool<StackManager>> {
        let (shared, head) = stack.slabs().pool();
        // SAFETY: the slab set records the lending pool's `shared_ptr` and
        // its head's pointer (neither null: the builder records both before
        // lending any stack, and only a pool's stacks become lent ones),
        // alive by our caller's promise.
        unsafe { Pool::alias_of(shared.cast(), head.cast()) }
    }

    /// Destroys the stack instead of returning it to the pool, e.g. after a
    /// coroutine on it was found to have misbehaved: its pages are
    /// released and its slot freed (its slab unmapped if it was the last).
    pub fn discard(self) {
        self.into_guard().discard()
    }

    /// Takes the stack out of the pool: it is yours, not counted by
    /// the pool, and given back to its slab when the returned value drops
    /// (the slab stays mapped until then).
    pub fn detach(self) -> GuardedStack {
        self.into_guard().detach()
    }

    /// Makes every usable byte read as zero, clearing in place what the
    /// last user touched in the top `keep_resident` bytes and releasing
    /// the rest (see [`GuardedStack::zero`]): for callers that promise a
    /// zeroed stack, such as wasmtime's `async_stack_zeroing`.
    ///
    /// # Errors
    ///
    /// As [`GuardedStack::zero`]: the stack is zeroed all the same.
    pub fn zero(&mut self, keep_resident: usize) -> std::io::Result<()> {
        self.stack.zero(keep_resident)
    }

    /// The pool this stack came from (a new handle on it).
    pub fn pool(&self) -> StackPool {
        // SAFETY: the pool counts this stack out while it is borrowed, for
        // as long as the alias is used (to count a new handle).
        let pool = unsafe { Self::lender(&self.stack) };
        StackPool::from_pool(Arc::new(pool.new_handle()))
    }
}

impl Drop for PooledStack {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the stack is taken out once: this is the handle's end
        // (`into_guard` forgets the handle, so never both).
        let stack = unsafe { ManuallyDrop::take(&mut self.stack) };
        let mut guard = ManuallyDrop::new(Self::owned_guard(stack));
        // SAFETY: the guard's only end: it is `ManuallyDrop`, never used
        // again. Unlike a dropped owned guard's, this end is inlined into
        // the handle's drop and that into its caller, where `panicking` is
        // best checked inside the put (`Shared::put_fast`): faster that way
        // than with the check first (criterion `get_drop/stack`).
        unsafe { guard.end_dropped::<false>() }
    }
}

impl Deref for PooledStack {
    type Target = GuardedStack;

    #[inline]
    fn deref(&self) -> &GuardedStack {
        &self.stack
    }
}

impl fmt::Debug for PooledStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PooledStack").field(&*self.stack).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Settings that need nothing of the OS but mappings (so that miri
    /// runs it): the budget given, `mprotect` guards.
    fn pool() -> StackPool {
        StackPool::builder(4096)
            .map_budget(crate::stack::MapBudget::with_max_map_count(65_530))
            .guard_mode(crate::stack::GuardMode::Protect)
            .background(false)
            .build()
            .unwrap()
    }

    /// `(live, idle, destroyed, detached)`.
    fn counts(pool: &StackPool) -> (u64, u64, u64, u64) {
        let s = pool.stats().pool;
        (s.live, s.idle, s.destroyed, s.detached)
    }

    /// A lent stack's handle holds no pool: it finds it through the
    /// stack's slab set (`Slabs::pool`, `Pool::alias_of`) on every way it
    /// ends, and for `pool()`. Run under miri too (`--lib`), for the
    /// address turned back into a handle.
    #[test]
    fn a_stack_handle_finds_its_pool_every_way_it_ends() {
        let (a, b) = (pool(), pool());
        let stack = a.get().unwrap();
        assert_eq!(counts(&stack.pool()), (1, 0, 0, 0), "its own pool");
        drop(stack);
        assert_eq!(counts(&a), (0, 1, 0, 0));
        // Through its own pool, and through another: home either way.
        a.put(a.get().unwrap());
        b.put(a.get().unwrap());
        assert_eq!((counts(&a), counts(&b)), ((0, 1, 0, 0), (0, 0, 0, 0)));
        a.get().unwrap().discard();
        assert_eq!(counts(&a), (0, 0, 1, 0));
        let own = a.get().unwrap().detach();
        assert_eq!(counts(&a), (0, 0, 1, 1));
        drop(own);
        // Outliving every handle: the pool waits for it, and a handle
        // taken from it then is the pool's last.
        let stack = a.get().unwrap();
        drop(a);
        let again = stack.pool();
        assert_eq!(counts(&again), (1, 0, 1, 1));
        again.put(stack);
        assert_eq!(counts(&again), (0, 1, 1, 1));
        let stack = again.get().unwrap();
        drop(again);
        drop(stack);
        drop(b);
    }

    /// The slab set records the lending pool's shared state and head, and
    /// the handle a returned stack rebuilds from them is that pool's, in
    /// each of two pools.
    #[test]
    fn a_lent_stack_finds_its_pools_head_beside_its_shared_state() {
        let (a, b) = (pool(), pool());
        for p in [&a, &b] {
            let stack = p.get().unwrap();
            let (shared, head) = stack.stack.slabs().pool();
            assert_eq!(shared, p.pool.shared_ptr().cast::<()>());
            assert_eq!(head, p.pool.head_ptr().as_ptr().cast::<()>());
            // SAFETY: the pool counts `stack` out while the alias is used.
            let alias = unsafe { PooledStack::lender(&stack.stack) };
            assert!(std::ptr::eq(alias.head(), p.pool.head()));
            assert!(std::ptr::eq(alias.shared_ptr(), p.pool.shared_ptr()));
            drop(stack);
        }
        assert_eq!((counts(&a), counts(&b)), ((0, 1, 0, 0), (0, 1, 0, 0)));
    }
}
