//! One linear memory handed to wasmtime: a [`LinearMemory`] over a
//! [`Region`], lent by the pool or reserved for this memory alone.

use std::fmt;

use tidepool::region::{Region, RegionManager};
use tidepool::OwnedPooled;
use wasmtime::LinearMemory;

/// A WebAssembly linear memory given to wasmtime by a
/// [`PooledMemoryCreator`](crate::PooledMemoryCreator).
///
/// Its region is reserved at `capacity + guard` bytes: the first
/// [`byte_size`](LinearMemory::byte_size) are read-write, the rest
/// `PROT_NONE`, so an access past the memory's size faults and wasmtime
/// turns it into a trap. Growing opens pages in place (the base never
/// moves). When wasmtime drops it, a pooled region goes back to its pool,
/// which zeroes it for the next instance; an unpooled one is unmapped.
pub struct PooledLinearMemory {
    region: Source,
    /// Bytes wasm may grow to without the base moving: the reservation.
    capacity: usize,
    /// The memory type's maximum, in bytes, if it has one.
    maximum: Option<usize>,
    /// The size wasm sees: `region.accessible()` rounded to OS pages.
    size: usize,
}

pub(crate) enum Source {
    Pooled(OwnedPooled<RegionManager>),
    Unpooled(Region),
}

impl PooledLinearMemory {
    pub(crate) fn new(
        region: Source,
        capacity: usize,
        minimum: usize,
        maximum: Option<usize>,
    ) -> std::io::Result<Self> {
        let mut memory = Self {
            region,
            capacity,
            maximum,
            size: 0,
        };
        memory.region_mut().set_accessible(minimum)?;
        memory.size = minimum;
        Ok(memory)
    }

    pub(crate) fn pooled(region: OwnedPooled<RegionManager>) -> Source {
        Source::Pooled(region)
    }

    pub(crate) fn unpooled(region: Region) -> Source {
        Source::Unpooled(region)
    }

    /// Whether the region came from the pool (and goes back on drop).
    pub fn is_pooled(&self) -> bool {
        matches!(self.region, Source::Pooled(_))
    }

    /// The region behind the memory.
    pub fn region(&self) -> &Region {
        match &self.region {
            Source::Pooled(region) => region,
            Source::Unpooled(region) => region,
        }
    }

    fn region_mut(&mut self) -> &mut Region {
        match &mut self.region {
            Source::Pooled(region) => region,
            Source::Unpooled(region) => region,
        }
    }
}

// SAFETY: wasmtime's contract:
// * `as_ptr` is the region's start, which never moves: the region is one
//   reservation of `capacity + guard` bytes, and growing only changes the
//   protection of pages inside it;
// * the first `byte_size()` bytes are read-write and zero-filled at
//   creation (a new reservation's pages, or a pooled region reset by the
//   pool: cleared in place or released, which reads back as zeros), and
//   every byte from there to the end of the reservation is `PROT_NONE`,
//   so compiled code that elides bounds checks against the guard faults
//   past the size;
// * growth never passes `byte_capacity()`, the reservation wasmtime asked
//   for, nor the type's maximum;
// * the region is owned by this value alone until it is dropped, and is
//   `Send + Sync` (an owned address range).
unsafe impl LinearMemory for PooledLinearMemory {
    fn byte_size(&self) -> usize {
        self.size
    }

    fn byte_capacity(&self) -> usize {
        self.capacity
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        if new_size > self.capacity || self.maximum.is_some_and(|max| new_size > max) {
            return Err(wasmtime::format_err!(
                "cannot grow a linear memory to {new_size} bytes: its reservation is {} bytes{}",
                self.capacity,
                self.maximum
                    .map(|m| format!(" and its maximum {m}"))
                    .unwrap_or_default()
            ));
        }
        self.region_mut()
            .set_accessible(new_size)
            .map_err(wasmtime::Error::new)?;
        self.size = new_size;
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.region().as_ptr()
    }
}

impl fmt::Debug for PooledLinearMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledLinearMemory")
            .field("pooled", &self.is_pooled())
            .field("size", &self.size)
            .field("capacity", &self.capacity)
            .field("region", self.region())
            .finish()
    }
}
