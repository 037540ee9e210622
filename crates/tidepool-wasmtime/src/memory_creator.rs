//! wasmtime asks for a linear memory: [`PooledMemoryCreator`] serves it
//! from a pool of [`Region`]s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tidepool::region::{page_size, Region, RegionManager};
use tidepool::{ConfigError, Pool};
use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

use crate::linear_memory::PooledLinearMemory;

/// wasmtime's [`MemoryCreator`] over a pool of reserved [`Region`]s:
/// install it with [`ConfigExt::pooled_memories`](crate::ConfigExt::pooled_memories).
///
/// With wasmtime's default (on-demand) instance allocator, every instance's
/// linear memory is a fresh reservation (`mmap` of the reservation and its
/// guard, `mprotect` of its initial pages, page faults as wasm touches
/// them, `munmap` when the store drops). This creator lends a region from
/// the pool instead, and the pool resets it when wasmtime drops the memory:
/// the pages the pool's instances touch are cleared in place and stay
/// resident (up to [`RegionManager::keep_resident`]; one reset in 32 asks
/// the kernel which those are, the others clear as deep as it found them
/// and release the rest), so the next instance's first touches fault
/// nothing in. The pool sizes itself like every tidepool
/// pool: no slot counts to configure, idle regions reclaimed by working set
/// and memory pressure, purged (pages released, mapping kept) when idle
/// through a reclaim interval, and capped from `vm.max_map_count` (two VMAs
/// a region).
///
/// Served from the pool: memories whose reservation and guard are the
/// creator's (what [`ConfigExt::pooled_memories`](crate::ConfigExt::pooled_memories)
/// sets the engine to). Others get a region reserved for them alone,
/// unmapped on drop, and counted in [`unpooled`](PooledMemoryCreator::unpooled).
/// Not supported (an error at instantiation): shared memories, and page
/// sizes below the OS page (the custom-page-sizes proposal).
#[derive(Debug)]
pub struct PooledMemoryCreator {
    pool: Arc<Pool<RegionManager>>,
    reservation: usize,
    guard: usize,
    unpooled: AtomicU64,
}

/// wasmtime's default `memory_reservation` on 64-bit hosts: 4 GiB.
pub const DEFAULT_RESERVATION: usize = 4 << 30;
/// wasmtime's default `memory_guard_size` on 64-bit hosts: 32 MiB.
pub const DEFAULT_GUARD: usize = 32 << 20;

impl PooledMemoryCreator {
    /// A creator with wasmtime's default reservation (4 GiB) and guard
    /// (32 MiB), and a pool with tidepool's defaults, the map-count caps
    /// and an idle region's pages released a second after its last use
    /// ([`DEFAULT_PURGE_DELAY`](tidepool::DEFAULT_PURGE_DELAY)).
    ///
    /// # Errors
    ///
    /// As for [`with_pool`](PooledMemoryCreator::with_pool).
    pub fn new() -> Result<Self, ConfigError> {
        let manager = RegionManager::new(DEFAULT_RESERVATION + DEFAULT_GUARD);
        let pool = Pool::builder(manager)
            .maps_per_object(2)
            .purge_delay(tidepool::DEFAULT_PURGE_DELAY)
            .build()?;
        Self::with_pool(pool, DEFAULT_RESERVATION, DEFAULT_GUARD)
    }

    /// A creator lending regions of `pool`, for memories of `reservation`
    /// bytes followed by `guard` bytes of guard (the engine's
    /// `memory_reservation` and `memory_guard_size`).
    ///
    /// ```
    /// use tidepool::region::RegionManager;
    /// use tidepool_wasmtime::PooledMemoryCreator;
    ///
    /// let (reservation, guard) = (64 << 20, 2 << 20);
    /// let pool = tidepool::Pool::builder(
    ///     RegionManager::new(reservation + guard).keep_resident(256 << 10),
    /// )
    /// .maps_per_object(2)
    /// .build()?;
    /// let creator = PooledMemoryCreator::with_pool(pool, reservation, guard)?;
    /// assert_eq!(creator.reservation(), reservation);
    /// # Ok::<(), tidepool::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The pool's regions are not `reservation + guard` bytes, or either is
    /// not a whole number of OS pages (naming the setting).
    pub fn with_pool(
        pool: Pool<RegionManager>,
        reservation: usize,
        guard: usize,
    ) -> Result<Self, ConfigError> {
        let page = page_size();
        let check = |field: &'static str, n: usize| {
            if !n.is_multiple_of(page) {
                return Err(ConfigError::new(
                    field,
                    format!("is {n}, not a whole number of {page}-byte pages"),
                ));
            }
            Ok(())
        };
        check("reservation", reservation)?;
        check("guard", guard)?;
        if reservation.checked_add(guard) != Some(pool.manager().len()) {
            return Err(ConfigError::new(
                "reservation",
                format!(
                    "is {reservation} + guard {guard}, but the pool's regions are {} bytes",
                    pool.manager().len()
                ),
            ));
        }
        Ok(Self {
            pool: Arc::new(pool),
            reservation,
            guard,
            unpooled: AtomicU64::new(0),
        })
    }

    /// The pool the regions come from: its stats say how many exist, how
    /// many were reused and how many are idle.
    pub fn pool(&self) -> &Arc<Pool<RegionManager>> {
        &self.pool
    }

    /// The reservation of each pooled memory: the most it grows to in place.
    pub fn reservation(&self) -> usize {
        self.reservation
    }

    /// The guard after each pooled memory's reservation.
    pub fn guard(&self) -> usize {
        self.guard
    }

    /// Memories reserved outside the pool (another reservation or guard
    /// than the creator's).
    pub fn unpooled(&self) -> u64 {
        self.unpooled.load(Ordering::Relaxed)
    }

    fn memory(
        &self,
        ty: &MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved: Option<usize>,
        guard: usize,
    ) -> Result<PooledLinearMemory, String> {
        if ty.is_shared() {
            return Err("tidepool-wasmtime: shared memories are not supported".into());
        }
        if (1usize << ty.page_size_log2()) < page_size() {
            return Err(format!(
                "tidepool-wasmtime: wasm pages of {} bytes are smaller than the OS page",
                1u64 << ty.page_size_log2()
            ));
        }
        let capacity = reserved.unwrap_or(maximum.unwrap_or(minimum));
        let source = if reserved == Some(self.reservation) && guard == self.guard {
            let mut region = self.pool.get_owned().map_err(|e| e.to_string())?;
            self.pool.manager().lend(&mut region);
            PooledLinearMemory::pooled(region)
        } else {
            let len = capacity
                .checked_add(guard)
                .ok_or_else(|| "tidepool-wasmtime: reservation overflows".to_string())?;
            let region = Region::reserve(len).map_err(|e| e.to_string())?;
            self.unpooled.fetch_add(1, Ordering::Relaxed);
            PooledLinearMemory::unpooled(region)
        };
        PooledLinearMemory::new(source, capacity, minimum, maximum).map_err(|e| e.to_string())
    }
}

// SAFETY: every memory handed out is a `PooledLinearMemory`, which meets
// `LinearMemory`'s contract (see its impl); it is zero-filled (a new
// reservation, or a pooled region the pool reset), reserves `reserved`
// bytes (or, without a reservation, the maximum or minimum) followed by
// `guard` bytes that stay `PROT_NONE` for its whole life, and never moves.
unsafe impl MemoryCreator for PooledMemoryCreator {
    fn new_memory(
        &self,
        ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        self.memory(
            &ty,
            minimum,
            maximum,
            reserved_size_in_bytes,
            guard_size_in_bytes,
        )
        .map(|m| Box::new(m) as Box<dyn LinearMemory>)
    }
}
