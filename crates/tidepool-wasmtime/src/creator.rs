//! wasmtime asks for a fiber stack: [`PooledStackCreator`] serves it from a
//! [`StackPool`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tidepool::stack::{GuardedStack, StackPool};
use wasmtime::{Config, StackCreator, StackMemory};

use crate::{PooledFiberStack, PooledMemoryCreator};

/// wasmtime's [`StackCreator`] over a [`StackPool`]: install it with
/// [`Config::with_host_stack`], or in one line with
/// [`ConfigExt::pooled_stacks`].
///
/// wasmtime's on-demand instance allocator (the default) asks its stack
/// creator for a stack when a store first runs wasm on a fiber
/// (`call_async`, `instantiate_async`), keeps it with the store for the
/// store's next async calls, and drops it with the store. Without a
/// creator, each of those stacks is a fresh `mmap` + `mprotect`, faulted in
/// page by page, and an `munmap` at the end; with this one, a store-per-
/// request server takes a warm stack from this thread's cache instead.
///
/// A request is served from the pool when it asks for at most the pool's
/// stack size. Pooled stacks hold whatever their last fiber left, which is
/// what wasmtime expects when zeroing is off (compiled wasm never reads a
/// stack slot before writing it). With [`Config::async_stack_zeroing`] on,
/// which multi-tenant hosts set so that one guest cannot read another's
/// stack, wasmtime asks for zeroed stacks, and a pooled stack is zeroed
/// before it is lent, at the cost of what its last fiber touched
/// ([`PooledStack::zero`](tidepool::stack::PooledStack::zero)): the pages in
/// its top [`keep_resident`](tidepool::stack::StackManager::keep_resident)
/// bytes that are in RAM are cleared in place, the rest released with one
/// `madvise` (wasmtime's pooling allocator does the same with its
/// `async_stack_keep_resident`).
///
/// A request for more than the pool's
/// [`usable_size`](tidepool::stack::StackManager::usable_size) (wasmtime's
/// [`Config::async_stack_size`] set above the pool's size: the pool makes
/// stacks of one size only) gets a stack mapped for it alone (fresh pages
/// read as zeros), unmapped when wasmtime drops it, and counted in
/// [`unpooled`](PooledStackCreator::unpooled).
///
/// When the pool cannot lend a stack — it holds `max_live` stacks, or the
/// kernel refuses a mapping even after every stack pool gave back its idle
/// ones — the async call fails with an error whose source is the
/// [`StackError`](tidepool::stack::StackError); nothing aborts.
#[derive(Debug)]
pub struct PooledStackCreator {
    pool: StackPool,
    unpooled: AtomicU64,
}

impl PooledStackCreator {
    /// A creator lending stacks from `pool`.
    pub fn new(pool: StackPool) -> Self {
        Self {
            pool,
            unpooled: AtomicU64::new(0),
        }
    }

    /// The pool the stacks come from: its stats say how many stacks exist,
    /// how many were reused, and how many are idle.
    pub fn pool(&self) -> &StackPool {
        &self.pool
    }

    /// Stacks mapped outside the pool because wasmtime asked for more than
    /// the pool's stack size (see the type's docs).
    pub fn unpooled(&self) -> u64 {
        self.unpooled.load(Ordering::Relaxed)
    }

    /// A stack for a fiber of `size` bytes, from the pool when it can be,
    /// every byte zero if `zeroed`.
    ///
    /// # Errors
    ///
    /// What [`StackPool::get`] or [`GuardedStack::new`] returned.
    pub fn stack(
        &self,
        size: usize,
        zeroed: bool,
    ) -> Result<PooledFiberStack, tidepool::stack::StackError> {
        let manager = self.pool.manager();
        if size > manager.usable_size() {
            return self.stack_unpooled_slow(size);
        }
        let mut stack = self.pool.get()?;
        if zeroed {
            // A failed `mincore` or `madvise` (not expected) makes `zero`
            // clear the whole stack in place: zeroed either way.
            let _ = stack.zero(manager.keep_resident());
        }
        Ok(PooledFiberStack::pooled(stack))
    }

    #[cold]
    fn stack_unpooled_slow(
        &self,
        size: usize,
    ) -> Result<PooledFiberStack, tidepool::stack::StackError> {
        let stack = GuardedStack::new(size)?;
        self.unpooled.fetch_add(1, Ordering::Relaxed);
        Ok(PooledFiberStack::unpooled(stack))
    }
}

// SAFETY: every stack handed out is a `PooledFiberStack`, which meets
// `StackMemory`'s contract (see its impl): page-aligned, a whole number of
// pages, at least `size` usable bytes (the pool's stacks are at least as
// large as requested; unpooled ones are mapped at `size` rounded up to
// pages) above a PROT_NONE guard page, owned by wasmtime until dropped and
// zero-filled when `zeroed` is asked (a pooled stack by `PooledStack::zero`,
// an unpooled one as a fresh anonymous mapping).
unsafe impl StackCreator for PooledStackCreator {
    fn new_stack(&self, size: usize, zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
        match self.stack(size, zeroed) {
            Ok(stack) => Ok(Box::new(stack)),
            Err(e) => Err(wasmtime::Error::new(e)),
        }
    }
}

/// Pooled fiber stacks in one line of wasmtime [`Config`].
pub trait ConfigExt {
    /// Runs every async fiber of engines made from this config on stacks
    /// from `pool`: sets [`Config::async_stack_size`] to the pool's stack
    /// size and installs a [`PooledStackCreator`] with
    /// [`Config::with_host_stack`].
    ///
    /// The pool's stack size must be at least [`Config::max_wasm_stack`]
    /// (512 KiB unless set), or `Engine::new` refuses the config; what lies
    /// above `max_wasm_stack` is what host functions get.
    ///
    /// For the creator's own count of unpooled stacks, build a
    /// [`PooledStackCreator`] and install it yourself.
    fn pooled_stacks(&mut self, pool: StackPool) -> &mut Self;

    /// Gives every instance's linear memory a region from `creator`'s pool
    /// (see [`PooledMemoryCreator`]): sets
    /// [`Config::memory_reservation`] and [`Config::memory_guard_size`] to
    /// the creator's, turns off [`Config::memory_init_cow`] (copy-on-write
    /// images need wasmtime's own mappings; data segments are copied in at
    /// instantiation instead), and installs the creator with
    /// [`Config::with_host_memory`]. Keep the `Arc` to read the pool's stats.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tidepool_wasmtime::{ConfigExt, PooledMemoryCreator};
    ///
    /// let memories = Arc::new(PooledMemoryCreator::new()?);
    /// let mut config = wasmtime::Config::new();
    /// config.pooled_memories(memories.clone());
    /// let engine = wasmtime::Engine::new(&config)?;
    /// let module = wasmtime::Module::new(&engine, "(module (memory 1))")?;
    /// for _ in 0..3 {
    ///     let mut store = wasmtime::Store::new(&engine, ());
    ///     wasmtime::Instance::new(&mut store, &module, &[])?;
    /// }
    /// let s = memories.pool().stats();
    /// assert_eq!((s.created, s.hits), (1, 2), "one region served all three");
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    fn pooled_memories(&mut self, creator: Arc<PooledMemoryCreator>) -> &mut Self;
}

impl ConfigExt for Config {
    fn pooled_stacks(&mut self, pool: StackPool) -> &mut Self {
        let size = pool.manager().usable_size();
        self.async_stack_size(size)
            .with_host_stack(Arc::new(PooledStackCreator::new(pool)))
    }

    fn pooled_memories(&mut self, creator: Arc<PooledMemoryCreator>) -> &mut Self {
        self.memory_reservation(creator.reservation() as u64)
            .memory_guard_size(creator.guard() as u64)
            .memory_init_cow(false)
            .with_host_memory(creator)
    }
}
