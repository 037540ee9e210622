//! Object pools: opaque C objects made and unmade by C callbacks — the
//! drop-in for a coroutine pool like QEMU's, which pools whole coroutines
//! (control block, guarded stack, context) and returns them on whichever
//! thread a coroutine ends.
//!
//! * `get` takes an idle object or calls `create`; with
//!   `TIDEPOOL_GET_NO_CREATE` it calls nothing and says `TIDEPOOL_EMPTY`, so
//!   the caller can build the object its own way and hand it over with
//!   `tidepool_obj_adopt`. From then on it is the pool's: `put` takes it
//!   back and `destroy` is called when the pool lets it go.
//! * Objects are tracked in the process-wide live set ([`crate::live`]),
//!   which is what detects foreign pointers, wrong pools and double puts.
//! * An adopted object put back waits in the pool's *inbox* until the next
//!   `get` that finds no idle object, which takes it instead of calling
//!   `create` (the core pool has no way to take in an object it did not
//!   make). The inbox is bounded by `max_idle` (past it, adopted objects are
//!   destroyed when put back), counted in `idle`, and emptied by
//!   `tidepool_pool_drain`, critical pressure and `tidepool_pool_destroy`.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tidepool::pressure::Level;
use tidepool::{Manage, Pool, Pooled};

use crate::config::{self, apply_common, tidepool_config, tidepool_purge_fn};
use crate::handle::{self, Kind as PoolKind};
use crate::live::{self, PutError, State};
use crate::stats::tidepool_stats;
use crate::status::tidepool_status::{self, *};
use crate::status::{entry, Error, Result};

/// `tidepool_obj_get` flag: if no idle object is at hand, make none; return
/// `TIDEPOOL_EMPTY` with `*out == NULL` instead.
pub const TIDEPOOL_GET_NO_CREATE: u32 = 1;

const KNOWN_GET_FLAGS: u32 = TIDEPOOL_GET_NO_CREATE;

type CreateFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// The core pool's guard for an object that is out; kept in the live set.
pub(crate) type ObjGuard = Pooled<'static, ObjManager>;

/// A C object, as the core pool holds it.
pub(crate) struct Obj(pub(crate) NonNull<c_void>);

// SAFETY: the object is opaque to tidepool, which only passes its address to
// the C callbacks; the C side promises they may run on any thread.
unsafe impl Send for Obj {}

std::thread_local! {
    /// Set around a `get` with `TIDEPOOL_GET_NO_CREATE`: `create` (which the
    /// core pool calls on this thread, inside that `get`) then makes nothing.
    static NO_CREATE: Cell<bool> = const { Cell::new(false) };
}

/// Calls the C callbacks; counts what they did.
pub(crate) struct ObjManager {
    id: u64,
    ctx: *mut c_void,
    create: CreateFn,
    destroy: DestroyFn,
    purge: tidepool_purge_fn,
    /// Adopted objects put back, waiting for a `get` that misses.
    inbox: Mutex<Vec<Obj>>,
    created: AtomicU64,
    destroyed: AtomicU64,
    adopted: AtomicU64,
    /// Adopted objects not yet put back.
    adopted_live: AtomicU64,
}

// SAFETY: `ctx` and the callbacks are the C side's, which promises (in the
// header) that the callbacks may be called from any thread, concurrently,
// with that `ctx`. The rest is atomics and a mutex.
unsafe impl Send for ObjManager {}
// SAFETY: as above.
unsafe impl Sync for ObjManager {}

/// Why `create` gave no object.
#[derive(Debug)]
pub(crate) enum ObjError {
    /// `TIDEPOOL_GET_NO_CREATE` was set.
    NoCreate,
    /// The callback returned this non-zero value.
    Failed(c_int),
    /// The callback returned 0 but left `*out` NULL.
    Null,
    /// The callback returned an object some pool already tracks.
    AlreadyPooled { obj: usize, pool: u64 },
}

impl fmt::Display for ObjError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjError::NoCreate => f.write_str("no idle object, and TIDEPOOL_GET_NO_CREATE"),
            ObjError::Failed(rc) => write!(f, "the create callback failed, returning {rc}"),
            ObjError::Null => f.write_str("the create callback returned 0 but no object (NULL)"),
            ObjError::AlreadyPooled { obj, pool } => write!(
                f,
                "the create callback returned {obj:#x}, which object pool #{pool} already holds"
            ),
        }
    }
}

impl std::error::Error for ObjError {}

impl ObjManager {
    /// Destroys one object the pool lets go: forgets it, then calls back.
    fn destroy_now(&self, obj: NonNull<c_void>) {
        // An idle object has no guard, so the entry drops nothing.
        drop(live::remove(obj));
        self.destroyed.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the C side's callback, called with its own `ctx` and an
        // object its `create` made (or it adopted), exactly once.
        unsafe { (self.destroy)(self.ctx, obj.as_ptr()) };
    }

    /// Takes every object out of the inbox and destroys them (outside its
    /// lock). Returns how many.
    fn empty_inbox(&self) -> usize {
        let objs = std::mem::take(&mut *self.inbox.lock());
        let n = objs.len();
        for obj in objs {
            self.destroy_now(obj.0);
        }
        n
    }
}

impl Manage for ObjManager {
    type Item = Obj;
    type Error = ObjError;

    fn create(&self) -> std::result::Result<Obj, ObjError> {
        let adopted = self.inbox.lock().pop();
        if let Some(obj) = adopted {
            return Ok(obj);
        }
        if NO_CREATE.with(Cell::get) {
            return Err(ObjError::NoCreate);
        }
        let mut out = std::ptr::null_mut();
        // SAFETY: the C side's callback with its own `ctx` and a valid
        // out-pointer; no lock of ours is held.
        let rc = unsafe { (self.create)(self.ctx, &mut out) };
        if rc != 0 {
            return Err(ObjError::Failed(rc));
        }
        let obj = NonNull::new(out).ok_or(ObjError::Null)?;
        live::insert(obj, self.id, State::Idle).map_err(|(pool, _)| ObjError::AlreadyPooled {
            obj: obj.as_ptr() as usize,
            pool,
        })?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(Obj(obj))
    }

    fn purge(&self, obj: &mut Obj) {
        if let Some(purge) = self.purge {
            // SAFETY: the C side's callback with its own `ctx` and one of its
            // idle objects.
            unsafe { purge(self.ctx, obj.0.as_ptr()) };
        }
    }

    fn destroy(&self, obj: Obj) {
        self.destroy_now(obj.0);
    }
}

impl Drop for ObjManager {
    fn drop(&mut self) {
        // The pool is going: its core objects are destroyed already (the
        // core pool drops before its manager); the inbox's go now.
        self.empty_inbox();
    }
}

/// The object-pool side of a [`tidepool_pool`](crate::tidepool_pool).
pub(crate) struct ObjKind {
    pub(crate) pool: Pool<ObjManager>,
    id: u64,
}

/// Restores `NO_CREATE` when a `get` ends, even by unwinding.
struct NoCreateScope(bool);

impl Drop for NoCreateScope {
    fn drop(&mut self) {
        NO_CREATE.with(|c| c.set(self.0));
    }
}

impl ObjKind {
    fn build(config: &tidepool_config, common: &config::Common, id: u64) -> Result<Self> {
        let missing = |field: &str| {
            Error::new(
                TIDEPOOL_ERR_CONFIG,
                format_args!(
                    "invalid tidepool setting `{field}`: object pools need one (it is NULL)"
                ),
            )
        };
        let create = config.create.ok_or_else(|| missing("create"))?;
        let destroy = config.destroy.ok_or_else(|| missing("destroy"))?;
        let manager = ObjManager {
            id,
            ctx: config.ctx,
            create,
            destroy,
            purge: config.purge,
            inbox: Mutex::new(Vec::new()),
            created: AtomicU64::new(0),
            destroyed: AtomicU64::new(0),
            adopted: AtomicU64::new(0),
            adopted_live: AtomicU64::new(0),
        };
        let pool = apply_common!(Pool::builder(manager), common)
            .build()
            .map_err(config::from_core)?;
        Ok(Self { pool, id })
    }

    fn manager(&self) -> &ObjManager {
        self.pool.manager()
    }

    /// An object; at `max_live`, waiting up to `timeout` if there is one.
    fn get(&'static self, flags: u32, timeout: Option<Duration>) -> Result<*mut c_void> {
        if flags & !KNOWN_GET_FLAGS != 0 {
            return Err(Error::new(
                TIDEPOOL_ERR_INVALID_ARGUMENT,
                format_args!("unknown get flags {:#x}", flags & !KNOWN_GET_FLAGS),
            ));
        }
        let no_create = flags & TIDEPOOL_GET_NO_CREATE != 0;
        let got = {
            let _scope = NoCreateScope(NO_CREATE.with(|c| c.replace(no_create)));
            match timeout {
                None => self.pool.get(),
                Some(t) => self.pool.get_timeout(t),
            }
        };
        let guard = match got {
            Ok(guard) => guard,
            Err(tidepool::Error::Create(ObjError::NoCreate)) => return Ok(std::ptr::null_mut()),
            Err(tidepool::Error::Create(e)) => return Err(Error::new(TIDEPOOL_ERR_CREATE, e)),
            Err(e) => return Err(crate::status::limit_error(e)),
        };
        let obj = guard.0;
        if let Err(guard) = live::lend(obj, self.id, guard) {
            drop(guard);
            return Err(Error::new(
                TIDEPOOL_ERR_PANIC,
                format_args!("internal error: {obj:p} came from the pool but was not idle in it"),
            ));
        }
        Ok(obj.as_ptr())
    }

    fn adopt(&self, obj: *mut c_void) -> Result {
        let obj =
            NonNull::new(obj).ok_or_else(|| Error::new(TIDEPOOL_ERR_NULL, "object is NULL"))?;
        if let Err((pool, live)) = live::insert(obj, self.id, State::Live(None)) {
            return Err(Error::new(
                TIDEPOOL_ERR_ALREADY_POOLED,
                format_args!(
                    "{obj:p} is already {} object pool #{pool}",
                    if live { "lent out by" } else { "idle in" }
                ),
            ));
        }
        let m = self.manager();
        m.adopted.fetch_add(1, Ordering::Relaxed);
        m.adopted_live.fetch_add(1, Ordering::Relaxed);
        Ok(TIDEPOOL_OK)
    }

    fn put(&self, obj: *mut c_void) -> Result {
        let obj =
            NonNull::new(obj).ok_or_else(|| Error::new(TIDEPOOL_ERR_NULL, "object is NULL"))?;
        let guard = live::take_back(obj, self.id).map_err(|e| match e {
            PutError::Foreign => Error::new(
                TIDEPOOL_ERR_FOREIGN,
                format_args!("{obj:p} was never handed out by (or adopted into) an object pool"),
            ),
            PutError::WrongPool(owner) => Error::new(
                TIDEPOOL_ERR_WRONG_POOL,
                format_args!(
                    "{obj:p} belongs to object pool #{owner}, not to this pool (#{})",
                    self.id
                ),
            ),
            PutError::DoublePut => Error::new(
                TIDEPOOL_ERR_DOUBLE_PUT,
                format_args!("{obj:p} was already put back"),
            ),
        })?;
        match guard {
            // Back to the core pool (this thread's cache); outside the live
            // set's lock, since it may destroy objects.
            Some(guard) => drop(guard),
            None => self.put_adopted(obj),
        }
        Ok(TIDEPOOL_OK)
    }

    #[cold]
    fn put_adopted(&self, obj: NonNull<c_void>) {
        let m = self.manager();
        m.adopted_live.fetch_sub(1, Ordering::Relaxed);
        let refused = {
            let mut inbox = m.inbox.lock();
            if inbox.len() < self.pool.config().max_idle() {
                inbox.push(Obj(obj));
                None
            } else {
                Some(obj)
            }
        };
        if let Some(obj) = refused {
            m.destroy_now(obj);
        }
    }

    pub(crate) fn drain(&self) -> usize {
        self.pool.drain_blocking() + self.manager().empty_inbox()
    }

    pub(crate) fn pressure(&self, level: Level) -> usize {
        let n = self.pool.pressure(level);
        match level {
            Level::Critical => n + self.manager().empty_inbox(),
            _ => n,
        }
    }

    pub(crate) fn prefill(&self) -> Result<usize> {
        let _scope = NoCreateScope(NO_CREATE.with(|c| c.replace(false)));
        self.pool.prefill().map_err(|e| match e {
            tidepool::Error::Create(e) => Error::new(TIDEPOOL_ERR_CREATE, e),
            other => Error::new(TIDEPOOL_ERR_EXHAUSTED, other),
        })
    }

    pub(crate) fn stats(&self) -> tidepool_stats {
        let m = self.manager();
        // Objects move from the inbox to the core pool: reading the inbox
        // first may count one twice but never misses one. Exact when no
        // thread is inside the pool.
        let inbox = m.inbox.lock().len() as u64;
        let core = self.pool.stats();
        let mut s = tidepool_stats::from_core(&core);
        s.created = m.created.load(Ordering::Relaxed);
        s.destroyed = m.destroyed.load(Ordering::Relaxed);
        s.adopted = m.adopted.load(Ordering::Relaxed);
        s.live = core.live + m.adopted_live.load(Ordering::Relaxed);
        s.idle = core.idle + inbox;
        s
    }
}

/// Builds a pool of C objects made by `config->create` and unmade by
/// `config->destroy` (both required), with `config->ctx` passed to each
/// call. On success `*out` is the new pool.
///
/// The callbacks may be called from any thread, concurrently (see
/// `tidepool_destroy_fn` for which), never while tidepool holds a lock of
/// its own, so they may call tidepool themselves. They must not unwind
/// (C++ exceptions, `longjmp` out).
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_STRUCT_SIZE`, `TIDEPOOL_ERR_CONFIG`
/// (naming the field).
///
/// # Safety
///
/// `config` must point to a readable `tidepool_config` of at least the size
/// its `size` field says; `out` must be writable; the callbacks must be
/// valid functions of the declared types, safe to call as described above
/// for as long as the pool lives.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_pool_new(
    config: *const tidepool_config,
    out: *mut *mut crate::tidepool_pool,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: the caller's promise.
        let (config, common) = unsafe { config::read(config, config::Kind::Obj) }?;
        let pool = handle::new_pool(|id| ObjKind::build(&config, &common, id).map(PoolKind::Obj))?;
        // SAFETY: checked non-null; the caller's promise.
        unsafe { out.write(pool) };
        Ok(TIDEPOOL_OK)
    })
}

/// Takes an idle object (this thread's cache first), or makes one with the
/// `create` callback — unless `flags` has `TIDEPOOL_GET_NO_CREATE`: then,
/// with no idle object at hand, it returns `TIDEPOOL_EMPTY` and
/// `*out == NULL`, and the caller may make the object itself and hand it
/// over with [`tidepool_obj_adopt`].
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`, `TIDEPOOL_ERR_INVALID_ARGUMENT` (unknown
/// flags), `TIDEPOOL_ERR_CREATE` (the callback failed),
/// `TIDEPOOL_ERR_EXHAUSTED` (`max_live`). `*out` is `NULL` on failure.
///
/// # Safety
///
/// `pool` must be `NULL` or a pool from `tidepool_*_pool_new` not yet
/// destroyed; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_get(
    pool: *mut crate::tidepool_pool,
    flags: u32,
    out: *mut *mut c_void,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, flags, out, None) }
}

/// As [`tidepool_obj_get`], but at `max_live` it waits up to `timeout_ns`
/// nanoseconds for an object to be given back (or a place to free up under
/// the limit), first come, first served: the oldest waiter is handed the
/// next object put back on any thread, and one put wakes one waiter.
/// `timeout_ns == 0` does not wait: `TIDEPOOL_ERR_TIMEOUT` at once when
/// nothing is free (where `tidepool_obj_get` says `TIDEPOOL_ERR_EXHAUSTED`).
///
/// ```c
/// void *conn;
/// tidepool_status s = tidepool_obj_get_timeout(pool, 0, 2000000000ull, &conn); // 2 s
/// if (s == TIDEPOOL_ERR_TIMEOUT) {
///     // every connection still out after 2 s
/// }
/// ```
///
/// # Errors
///
/// As [`tidepool_obj_get`], and `TIDEPOOL_ERR_TIMEOUT` if the wait ran out.
///
/// # Safety
///
/// As [`tidepool_obj_get`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_get_timeout(
    pool: *mut crate::tidepool_pool,
    flags: u32,
    timeout_ns: u64,
    out: *mut *mut c_void,
) -> tidepool_status {
    // SAFETY: the caller's promise.
    unsafe { get_into(pool, flags, out, Some(Duration::from_nanos(timeout_ns))) }
}

/// The body of both object gets.
///
/// # Safety
///
/// As [`tidepool_obj_get`].
unsafe fn get_into(
    pool: *mut crate::tidepool_pool,
    flags: u32,
    out: *mut *mut c_void,
    timeout: Option<Duration>,
) -> tidepool_status {
    entry(|| {
        let out = handle::out_ptr(out)?;
        // SAFETY: checked non-null; the caller's promise.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        let obj = pool.obj()?.get(flags, timeout)?;
        // SAFETY: as above.
        unsafe { out.write(obj) };
        Ok(if obj.is_null() {
            TIDEPOOL_EMPTY
        } else {
            TIDEPOOL_OK
        })
    })
}

/// Hands an object the caller made itself to the pool: it is now one of the
/// pool's objects, out with the caller. Put it back with
/// [`tidepool_obj_put`] like any other; the pool reuses it and, when it lets
/// it go, unmakes it with the `destroy` callback.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`, `TIDEPOOL_ERR_ALREADY_POOLED` (some object
/// pool already tracks this address).
///
/// # Safety
///
/// `pool` as for [`tidepool_obj_get`]; `obj` must be fit to pass to the
/// pool's callbacks.
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_adopt(
    pool: *mut crate::tidepool_pool,
    obj: *mut c_void,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        pool.obj()?.adopt(obj)
    })
}

/// Gives an object back to its pool, on any thread.
///
/// # Errors
///
/// `TIDEPOOL_ERR_NULL`, `TIDEPOOL_ERR_INVALID_POOL`,
/// `TIDEPOOL_ERR_WRONG_KIND`; `TIDEPOOL_ERR_FOREIGN` if no object pool
/// handed it out or adopted it, `TIDEPOOL_ERR_WRONG_POOL` if another one
/// did, `TIDEPOOL_ERR_DOUBLE_PUT` if it is already back. tidepool never reads
/// the object, so none of these checks can crash.
///
/// # Safety
///
/// `pool` as for [`tidepool_obj_get`].
#[no_mangle]
pub unsafe extern "C" fn tidepool_obj_put(
    pool: *mut crate::tidepool_pool,
    obj: *mut c_void,
) -> tidepool_status {
    entry(|| {
        // SAFETY: the caller's promise.
        let pool = unsafe { handle::pool(pool) }?;
        pool.obj()?.put(obj)
    })
}
