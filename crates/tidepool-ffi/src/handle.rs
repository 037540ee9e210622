//! `tidepool_pool`: the handle C holds, how a pointer to one is checked,
//! and the list of live pools that `tidepool_thread_exit` walks.
//!
//! A handle is an `Arc<tidepool_pool>` turned into a raw pointer. The
//! objects a pool lends hold its core guard, which borrows the core pool for
//! `'static`: that is sound because a pool is freed only by
//! `tidepool_pool_destroy`, which refuses (`TIDEPOOL_ERR_BUSY`) while any
//! object is out, and C promises not to use a handle after destroying it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::buf::BufKind;
use crate::obj::ObjKind;
#[cfg(unix)]
use crate::stack::StackKind;
use crate::stats::tidepool_stats;
use crate::status::tidepool_status::*;
use crate::status::{Error, Result};

const POOL_MAGIC: u64 = 0x7469_6465_706f_6f6c; // "tidepool"
const DEAD_MAGIC: u64 = 0x6465_6164_706f_6f6c; // "deadpool"

/// A pool of one kind, made by `tidepool_stack_pool_new`,
/// `tidepool_buf_pool_new` or `tidepool_obj_pool_new` and freed by
/// `tidepool_pool_destroy`. Opaque to C; safe to share between threads.
#[allow(non_camel_case_types)]
pub struct tidepool_pool {
    /// `POOL_MAGIC` while the pool lives; a best-effort check that a pointer
    /// is a pool (and not destroyed).
    magic: AtomicU64,
    pub(crate) kind: Kind,
}

impl std::fmt::Debug for tidepool_pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("tidepool_pool")
            .field("kind", &self.kind.name())
            .field("stats", &self.kind.stats())
            .finish_non_exhaustive()
    }
}

/// What a pool holds.
pub(crate) enum Kind {
    #[cfg(unix)]
    Stack(StackKind),
    Buf(BufKind),
    Obj(ObjKind),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            #[cfg(unix)]
            Kind::Stack(_) => "a stack pool",
            Kind::Buf(_) => "a buffer pool",
            Kind::Obj(_) => "an object pool",
        }
    }
}

/// Every pool not yet destroyed, for `tidepool_thread_exit`. Weak, so the
/// list never keeps a pool alive.
static POOLS: Mutex<Vec<Weak<tidepool_pool>>> = Mutex::new(Vec::new());

/// Pool ids, unique in the process: objects record theirs.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Builds a pool with a fresh id and returns its handle.
pub(crate) fn new_pool(build: impl FnOnce(u64) -> Result<Kind>) -> Result<*mut tidepool_pool> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let pool = Arc::new(tidepool_pool {
        magic: AtomicU64::new(POOL_MAGIC),
        kind: build(id)?,
    });
    {
        let mut pools = POOLS.lock();
        pools.retain(|p| p.strong_count() > 0);
        pools.push(Arc::downgrade(&pool));
    }
    Ok(Arc::into_raw(pool).cast_mut())
}

/// Every live pool, strongly held for the caller (outside the list's lock,
/// since what the caller does with them runs callbacks).
pub(crate) fn live_pools() -> Vec<Arc<tidepool_pool>> {
    let pools = POOLS.lock();
    pools.iter().filter_map(Weak::upgrade).collect()
}

/// Checks `ptr` and borrows the pool it points to.
///
/// The `'static` lifetime is what lets lent objects keep their core guards
/// (see the module docs).
///
/// # Safety
///
/// `ptr` must be null or point to readable memory at least as large and
/// aligned as a `tidepool_pool`; if it is a pool's handle, that pool must
/// not be destroyed while the returned reference or any object it lends is
/// in use.
#[inline]
pub(crate) unsafe fn pool(ptr: *const tidepool_pool) -> Result<&'static tidepool_pool> {
    if ptr.is_null() {
        return Err(Error::new(TIDEPOOL_ERR_NULL, "pool is NULL"));
    }
    if ptr as usize % std::mem::align_of::<tidepool_pool>() != 0 {
        return Err(invalid_pool(ptr));
    }
    // SAFETY: readable and aligned per the contract; `magic` is an atomic,
    // valid for any bytes, and is the only field read before it matches.
    let magic = unsafe { (*std::ptr::addr_of!((*ptr).magic)).load(Ordering::Relaxed) };
    if magic != POOL_MAGIC {
        return Err(invalid_pool(ptr));
    }
    // SAFETY: the magic says this is a live pool's handle; the caller does
    // not destroy it while the reference is used.
    Ok(unsafe { &*ptr })
}

#[cold]
fn invalid_pool(ptr: *const tidepool_pool) -> Error {
    Error::new(
        TIDEPOOL_ERR_INVALID_POOL,
        format_args!("{ptr:p} is not a live tidepool pool (never made, or destroyed)"),
    )
}

/// Checks an out-pointer.
pub(crate) fn out_ptr<T>(out: *mut T) -> Result<*mut T> {
    if out.is_null() {
        Err(Error::new(TIDEPOOL_ERR_NULL, "the out-pointer is NULL"))
    } else {
        Ok(out)
    }
}

/// Frees a pool whose objects are all back.
///
/// # Safety
///
/// As for [`pool`]; no other thread may use the pool during or after this.
pub(crate) unsafe fn destroy(ptr: *mut tidepool_pool) -> Result {
    // SAFETY: the caller's promise.
    let pool = unsafe { pool(ptr) }?;
    let out = pool.kind.live();
    if out > 0 {
        return Err(Error::new(
            TIDEPOOL_ERR_BUSY,
            format_args!(
                "{} still has {out} object(s) out; put them back before destroying it",
                pool.kind.name()
            ),
        ));
    }
    pool.magic.store(DEAD_MAGIC, Ordering::Relaxed);
    // SAFETY: `ptr` came from `Arc::into_raw` in `new_pool` (the magic
    // matched) and this is the one `from_raw` for it: C gives up the handle.
    let mut arc = unsafe { Arc::from_raw(ptr.cast_const()) };
    // `tidepool_thread_exit` may hold the pool for a moment; then the core
    // pool's own close waits for tidepool's threads, so that no callback
    // runs after this returns.
    let deadline = Instant::now() + CLOSE_TIMEOUT;
    let pool = loop {
        match Arc::try_unwrap(arc) {
            Ok(pool) => break pool,
            Err(held) if Instant::now() < deadline => {
                arc = held;
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(held) => {
                log::warn!(
                    "tidepool: a pool destroyed while still held; its last destroys run later"
                );
                drop(held);
                return Ok(TIDEPOOL_OK);
            }
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if !pool.kind.close(left) {
        log::warn!("tidepool: a pool destroyed while still held; its last destroys run later");
    }
    Ok(TIDEPOOL_OK)
}

/// How long `tidepool_pool_destroy` waits for tidepool's own threads to let
/// go of the pool (they hold it for a bounded piece of work).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

impl tidepool_pool {
    #[cold]
    fn wrong_kind(&self, wanted: &str) -> Error {
        Error::new(
            TIDEPOOL_ERR_WRONG_KIND,
            format_args!("this is {}, not {wanted}", self.kind.name()),
        )
    }

    #[inline]
    pub(crate) fn buf(&'static self) -> Result<&'static BufKind> {
        match &self.kind {
            Kind::Buf(b) => Ok(b),
            _ => Err(self.wrong_kind("a buffer pool")),
        }
    }

    #[inline]
    pub(crate) fn obj(&'static self) -> Result<&'static ObjKind> {
        match &self.kind {
            Kind::Obj(o) => Ok(o),
            _ => Err(self.wrong_kind("an object pool")),
        }
    }

    #[cfg(unix)]
    #[inline]
    pub(crate) fn stack(&'static self) -> Result<&'static StackKind> {
        match &self.kind {
            Kind::Stack(s) => Ok(s),
            _ => Err(self.wrong_kind("a stack pool")),
        }
    }
}

/// The operations every kind has, dispatched.
impl Kind {
    pub(crate) fn stats(&self) -> tidepool_stats {
        let (mut stats, max_idle) = match self {
            #[cfg(unix)]
            Kind::Stack(s) => (s.stats(), s.pool.max_idle()),
            Kind::Buf(b) => (b.stats(), b.pool.max_idle()),
            Kind::Obj(o) => (o.stats(), o.pool.max_idle()),
        };
        stats.max_idle = max_idle as u64;
        stats
    }

    /// Objects out (handed out, or adopted, and not put back).
    pub(crate) fn live(&self) -> u64 {
        self.stats().live
    }

    pub(crate) fn reclaim_unused(&self) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.reclaim_unused(),
            Kind::Buf(b) => b.pool.reclaim_unused(),
            Kind::Obj(o) => o.pool.reclaim_unused(),
        }
    }

    pub(crate) fn reclaim(&self) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.reclaim(),
            Kind::Buf(b) => b.pool.reclaim(),
            Kind::Obj(o) => o.pool.reclaim(),
        }
    }

    pub(crate) fn purge(&self) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.purge(),
            Kind::Buf(b) => b.pool.purge(),
            Kind::Obj(o) => o.pool.purge(),
        }
    }

    pub(crate) fn trim_local(&self) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.trim_local(),
            Kind::Buf(b) => b.pool.trim_local(),
            Kind::Obj(o) => o.pool.trim_local(),
        }
    }

    /// Drops the pool, destroying its idle objects before returning
    /// ([`tidepool::Pool::close`]).
    pub(crate) fn close(self, timeout: Duration) -> bool {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.close(timeout),
            Kind::Buf(b) => b.pool.close(timeout),
            Kind::Obj(o) => o.pool.close(timeout),
        }
    }

    pub(crate) fn destroy_local(&self) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.destroy_local(),
            Kind::Buf(b) => b.pool.destroy_local(),
            Kind::Obj(o) => o.pool.destroy_local(),
        }
    }

    /// Changes `max_idle` to `to(now)`; returns the new cap.
    pub(crate) fn resize_max_idle(&self, delta: Option<isize>, to: usize) -> Result<usize> {
        fn resize<M: tidepool::Manage>(
            pool: &tidepool::Pool<M>,
            delta: Option<isize>,
            to: usize,
        ) -> std::result::Result<usize, tidepool::ConfigError> {
            match delta {
                Some(d) => pool.adjust_max_idle(d),
                None => pool.set_max_idle(to),
            }?;
            Ok(pool.max_idle())
        }
        let resized = match self {
            #[cfg(unix)]
            Kind::Stack(s) => match delta {
                Some(d) => s.pool.adjust_max_idle(d),
                None => s.pool.set_max_idle(to),
            }
            .map(|_| s.pool.max_idle()),
            Kind::Buf(b) => resize(&b.pool, delta, to),
            Kind::Obj(o) => resize(&o.pool, delta, to),
        };
        resized.map_err(|e| {
            Error::new(
                TIDEPOOL_ERR_INVALID_ARGUMENT,
                format_args!("invalid `max_idle`: {}", e.reason()),
            )
        })
    }

    pub(crate) fn drain(&self) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.drain_blocking(),
            Kind::Buf(b) => b.pool.drain_blocking(),
            Kind::Obj(o) => o.drain(),
        }
    }

    pub(crate) fn pressure(&self, level: tidepool::pressure::Level) -> usize {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.pressure(level),
            Kind::Buf(b) => b.pool.pressure(level),
            Kind::Obj(o) => o.pressure(level),
        }
    }

    pub(crate) fn prefill(&self) -> Result<usize> {
        match self {
            #[cfg(unix)]
            Kind::Stack(s) => s.pool.prefill().map_err(crate::stack::stack_error),
            Kind::Buf(b) => b.pool.prefill().map_err(|e| match e {
                tidepool::Error::Create(e) => Error::new(TIDEPOOL_ERR_NO_MEMORY, e),
                other => Error::new(TIDEPOOL_ERR_EXHAUSTED, other),
            }),
            Kind::Obj(o) => o.prefill(),
        }
    }
}
