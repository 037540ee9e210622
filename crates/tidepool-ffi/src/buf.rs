//! Buffer pools: fixed-size, aligned blocks of memory, each with a header
//! just below the bytes the caller sees.
//!
//! ```text
//!  allocation: │ pad │ BufHeader (32 B) │ buffer (object_size B) ...
//!                    ▲                  ▲ the pointer C gets, `align`-aligned
//!                    └ magic, state (IDLE/LIVE), pool id, the guard while LIVE
//! ```
//!
//! The header is found from the buffer pointer alone, at a fixed offset, so a
//! `put` checks, before touching the pool: the magic (foreign pointer), the
//! pool id (wrong pool), and the state word, which it moves LIVE → IDLE with
//! one compare-and-swap (double put; two racing puts of one buffer: exactly
//! one wins). While a buffer is out, its header holds the core pool's guard,
//! so handing it out and taking it back allocate nothing.

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fmt;
use std::mem::{size_of, MaybeUninit};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tidepool::{Manage, Pool, Pooled};

use crate::config::{self, apply_common, tidepool_config};
use crate::stats::tidepool_stats;
use crate::status::tidepool_status::*;
use crate::status::{Error, Result};

const BUF_MAGIC: u32 = 0x7442_7546; // "tBuF"
const IDLE: u32 = 1;
const LIVE: u32 = 2;
/// The smallest alignment of a buffer (and of the header below it).
pub(crate) const MIN_ALIGN: usize = 16;
/// The largest alignment accepted: a page.
const MAX_ALIGN: usize = 4096;

/// The core pool's guard for a buffer that is out; kept in its header.
type BufGuard = Pooled<'static, BufManager>;

/// Sits right below every buffer.
#[repr(C)]
struct BufHeader {
    magic: AtomicU32,
    state: AtomicU32,
    pool: AtomicU64,
    /// Initialised exactly while `state == LIVE`.
    guard: UnsafeCell<MaybeUninit<BufGuard>>,
}

const HEADER: usize = size_of::<BufHeader>();
const _: () =
    assert!(HEADER <= MIN_ALIGN * 2 && MIN_ALIGN % std::mem::align_of::<BufHeader>() == 0);

/// A pooled buffer: its header (the buffer follows it).
pub(crate) struct Buf(NonNull<BufHeader>);

// SAFETY: a `Buf` owns its allocation; nothing in it is tied to the thread
// that allocated it, and the allocator frees on any thread.
unsafe impl Send for Buf {}

/// Allocates and frees the buffers of one pool.
pub(crate) struct BufManager {
    id: u64,
    layout: Layout,
    /// Bytes from the allocation's start to the buffer.
    data_offset: usize,
}

/// A buffer allocation failed.
#[derive(Debug)]
pub(crate) struct BufError {
    bytes: usize,
}

impl fmt::Display for BufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "allocating a {}-byte buffer failed", self.bytes)
    }
}

impl std::error::Error for BufError {}

impl Manage for BufManager {
    type Item = Buf;
    type Error = BufError;

    fn create(&self) -> std::result::Result<Buf, BufError> {
        // SAFETY: the layout's size is at least `HEADER`, not zero.
        let base = unsafe { std::alloc::alloc(self.layout) };
        if base.is_null() {
            return Err(BufError {
                bytes: self.layout.size(),
            });
        }
        // SAFETY: `data_offset - HEADER` is within the allocation and
        // aligned for the header (`data_offset` is a multiple of `MIN_ALIGN`
        // no smaller than `HEADER`, and the allocation is `MIN_ALIGN`-aligned).
        let header = unsafe { base.add(self.data_offset - HEADER) }.cast::<BufHeader>();
        // SAFETY: in bounds and aligned, as above; nothing else sees it yet.
        unsafe {
            header.write(BufHeader {
                magic: AtomicU32::new(BUF_MAGIC),
                state: AtomicU32::new(IDLE),
                pool: AtomicU64::new(self.id),
                guard: UnsafeCell::new(MaybeUninit::uninit()),
            });
        }
        // SAFETY: derived from a non-null allocation.
        Ok(Buf(unsafe { NonNull::new_unchecked(header) }))
    }

    fn destroy(&self, buf: Buf) {
        let header = buf.0.as_ptr();
        // SAFETY: the header is ours and idle (the pool destroys only idle
        // buffers). Clearing the magic makes a put after this likely to be
        // caught, for as long as the allocator leaves the bytes alone.
        unsafe { (*header).magic.store(0, Ordering::Relaxed) };
        // SAFETY: `header` is `data_offset - HEADER` bytes into the
        // allocation made in `create` with `self.layout`.
        unsafe {
            let base = header.cast::<u8>().sub(self.data_offset - HEADER);
            std::alloc::dealloc(base, self.layout);
        }
    }
}

/// The buffer-pool side of a [`tidepool_pool`](crate::tidepool_pool).
pub(crate) struct BufKind {
    pub(crate) pool: Pool<BufManager>,
    id: u64,
}

impl BufKind {
    pub(crate) fn build(
        config: &tidepool_config,
        common: &config::Common,
        id: u64,
    ) -> Result<Self> {
        let align = config.align.max(MIN_ALIGN);
        if !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(Error::new(
                TIDEPOOL_ERR_CONFIG,
                format_args!(
                    "invalid tidepool setting `align`: is {}, must be a power of two up to {MAX_ALIGN}",
                    config.align
                ),
            ));
        }
        let data_offset = HEADER.next_multiple_of(align);
        let layout = data_offset
            .checked_add(config.object_size)
            .and_then(|size| Layout::from_size_align(size, align).ok())
            .ok_or_else(|| {
                Error::new(
                    TIDEPOOL_ERR_CONFIG,
                    format_args!(
                        "invalid tidepool setting `object_size`: {} bytes is too large to allocate",
                        config.object_size
                    ),
                )
            })?;
        let manager = BufManager {
            id,
            layout,
            data_offset,
        };
        let pool = apply_common(Pool::builder(manager), common)
            .build()
            .map_err(config::from_core)?;
        Ok(Self { pool, id })
    }

    /// A buffer; at `max_live`, waiting up to `timeout` if there is one.
    pub(crate) fn get(&'static self, timeout: Option<Duration>) -> Result<NonNull<c_void>> {
        let got = match timeout {
            None => self.pool.get(),
            Some(t) => self.pool.get_timeout(t),
        };
        let guard = got.map_err(|e| match e {
            tidepool::Error::Create(e) => Error::new(TIDEPOOL_ERR_NO_MEMORY, e),
            other => crate::status::limit_error(other),
        })?;
        let header = guard.0.as_ptr();
        // SAFETY: the buffer was handed to us alone; until its state says
        // LIVE no put touches its guard slot. The guard (which borrows the
        // pool for `'static`, see `handle`) moves into the slot, and the
        // Release store publishes it to the put that will read it.
        unsafe {
            (*(*header).guard.get()).write(guard);
            (*header).state.store(LIVE, Ordering::Release);
            Ok(NonNull::new_unchecked(
                header.cast::<u8>().add(HEADER).cast(),
            ))
        }
    }

    /// # Safety
    ///
    /// `ptr` is null, or the 32 bytes below it are readable.
    pub(crate) unsafe fn put(&self, ptr: *mut c_void) -> Result {
        if ptr.is_null() {
            return Err(Error::new(TIDEPOOL_ERR_NULL, "buffer is NULL"));
        }
        if ptr as usize % MIN_ALIGN != 0 {
            return Err(Error::new(
                TIDEPOOL_ERR_FOREIGN,
                format_args!("{ptr:p} is not a buffer from a tidepool buffer pool (misaligned)"),
            ));
        }
        let header = ptr.cast::<u8>().wrapping_sub(HEADER).cast::<BufHeader>();
        // SAFETY: readable per the contract, and aligned (checked above);
        // every field is an atomic or an `UnsafeCell<MaybeUninit>`, valid
        // for any bytes, so even a foreign pointer's bytes make a valid
        // (if meaningless) header to look at.
        let header = unsafe { &*header };
        if header.magic.load(Ordering::Relaxed) != BUF_MAGIC {
            return Err(Error::new(
                TIDEPOOL_ERR_FOREIGN,
                format_args!("{ptr:p} is not a buffer from a tidepool buffer pool"),
            ));
        }
        let owner = header.pool.load(Ordering::Relaxed);
        if owner != self.id {
            return Err(Error::new(
                TIDEPOOL_ERR_WRONG_POOL,
                format_args!(
                    "buffer {ptr:p} belongs to buffer pool #{owner}, not to this pool (#{})",
                    self.id
                ),
            ));
        }
        if header
            .state
            .compare_exchange(LIVE, IDLE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(Error::new(
                TIDEPOOL_ERR_DOUBLE_PUT,
                format_args!("buffer {ptr:p} was already put back"),
            ));
        }
        // SAFETY: the state was LIVE, so the slot holds the guard written by
        // `get` (the Acquire above pairs with its Release); our CAS won, so
        // no other put reads it.
        let guard = unsafe { (*header.guard.get()).assume_init_read() };
        drop(guard);
        Ok(TIDEPOOL_OK)
    }

    pub(crate) fn stats(&self) -> tidepool_stats {
        tidepool_stats::from_core(&self.pool.stats())
    }
}
