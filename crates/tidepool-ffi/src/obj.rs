//! Object pools: opaque C objects made and unmade by C callbacks — the
//! drop-in for a coroutine pool like QEMU's, which pools whole coroutines
//! (control block, guarded stack, context) and returns them on whichever
//! thread a coroutine ends.
//!
//! * `get` takes an idle object or calls `create`; with
//!   `TIDEPOOL_GET_NO_CREATE` it calls nothing and says `TIDEPOOL_EMPTY`, so
//!   the caller can build the object its own way. An object made that way
//!   joins the pool through `tidepool_obj_adopt`, or, in a pool built with
//!   `TIDEPOOL_OBJ_ACCEPT_FOREIGN`, simply by being put. Either way it is an
//!   ordinary member from then on ([`Pool::adopt`]): reused, reclaimed,
//!   purged and counted like one the pool made.
//! * Checked pools (the default) track every object in the process-wide
//!   live set ([`crate::live`]), which is what detects foreign pointers,
//!   wrong pools and double puts. `TIDEPOOL_OBJ_UNCHECKED` skips it: a get
//!   and a put are then the core pool's fast paths and a little entry
//!   code, and puts are trusted.
//! * A lent object is the core pool's item taken out of its guard
//!   ([`Pooled::into_raw`]); a put turns it back ([`Pooled::from_raw`]) and
//!   drops the guard.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::ptr::NonNull;
use std::time::Duration;

use tidepool::pressure::Level;
use tidepool::{Manage, Pool, Pooled};

use crate::config::{self, apply_common, tidepool_config, tidepool_purge_fn};
use crate::live::{self, PutError};
use crate::stats::tidepool_stats;
use crate::status::tidepool_status::*;
use crate::status::{Error, Result};

/// `tidepool_obj_get` flag: if no idle object is at hand, make none; return
/// `TIDEPOOL_EMPTY` with `*out == NULL` instead. Never waits.
pub const TIDEPOOL_GET_NO_CREATE: u32 = 1;

const KNOWN_GET_FLAGS: u32 = TIDEPOOL_GET_NO_CREATE;

type CreateFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// A C object, as the core pool holds it.
pub(crate) struct Obj(pub(crate) NonNull<c_void>);

// SAFETY: the object is opaque to tidepool, which only passes its address to
// the C callbacks; the C side promises they may run on any thread.
unsafe impl Send for Obj {}

/// Calls the C callbacks.
pub(crate) struct ObjManager {
    id: u64,
    ctx: *mut c_void,
    create: Option<CreateFn>,
    destroy: DestroyFn,
    purge: tidepool_purge_fn,
    /// Objects are tracked in the live set.
    checked: bool,
}

// SAFETY: `ctx` and the callbacks are the C side's, which promises (in the
// header) that the callbacks may be called from any thread, concurrently,
// with that `ctx`.
unsafe impl Send for ObjManager {}
// SAFETY: as above.
unsafe impl Sync for ObjManager {}

/// Why `create` gave no object.
#[derive(Debug)]
pub(crate) enum ObjError {
    /// The pool was built without a `create` callback.
    NoCreateFn,
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
            ObjError::NoCreateFn => f.write_str(
                "no idle object, and the pool has no create callback \
                 (get with TIDEPOOL_GET_NO_CREATE and make the object yourself)",
            ),
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
    /// Calls `destroy` on an object the pool lets go (or never took in).
    fn destroy_now(&self, obj: NonNull<c_void>) {
        if self.checked {
            live::remove(obj);
        }
        // SAFETY: the C side's callback, called with its own `ctx` and an
        // object its `create` made (or it adopted), exactly once.
        unsafe { (self.destroy)(self.ctx, obj.as_ptr()) };
    }
}

impl Manage for ObjManager {
    type Item = Obj;
    type Error = ObjError;

    fn create(&self) -> std::result::Result<Obj, ObjError> {
        let create = self.create.ok_or(ObjError::NoCreateFn)?;
        let mut out = std::ptr::null_mut();
        // SAFETY: the C side's callback with its own `ctx` and a valid
        // out-pointer; no lock of ours is held.
        let rc = unsafe { create(self.ctx, &mut out) };
        if rc != 0 {
            return Err(ObjError::Failed(rc));
        }
        let obj = NonNull::new(out).ok_or(ObjError::Null)?;
        if self.checked {
            live::insert(obj, self.id, false).map_err(|(pool, _)| ObjError::AlreadyPooled {
                obj: obj.as_ptr() as usize,
                pool,
            })?;
        }
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

/// The object-pool side of a [`tidepool_pool`](crate::tidepool_pool).
pub(crate) struct ObjKind {
    pub(crate) pool: Pool<ObjManager>,
    id: u64,
    checked: bool,
    /// `TIDEPOOL_OBJ_ACCEPT_FOREIGN`.
    accept_foreign: bool,
}

/// The address standing for an object an unchecked pool counts out at a
/// `TIDEPOOL_EMPTY` (the one its caller is about to make): never passed to
/// a callback, never pooled.
fn placeholder() -> Obj {
    Obj(NonNull::dangling())
}

impl ObjKind {
    pub(crate) fn build(
        config: &tidepool_config,
        common: &config::Common,
        id: u64,
    ) -> Result<Self> {
        let destroy = config.destroy.ok_or_else(|| {
            Error::new(
                TIDEPOOL_ERR_CONFIG,
                "invalid tidepool setting `destroy`: object pools need one (it is NULL)",
            )
        })?;
        let checked = config.flags & config::TIDEPOOL_OBJ_UNCHECKED == 0;
        let manager = ObjManager {
            id,
            ctx: config.ctx,
            create: config.create,
            destroy,
            purge: config.purge,
            checked,
        };
        let mut builder = apply_common(Pool::builder(manager), common);
        if let Some(n) = common.maps_per_object {
            builder = builder.maps_per_object(n);
        }
        let pool = builder.build().map_err(config::from_core)?;
        Ok(Self {
            pool,
            id,
            checked,
            accept_foreign: config.flags & config::TIDEPOOL_OBJ_ACCEPT_FOREIGN != 0,
        })
    }

    fn manager(&self) -> &ObjManager {
        self.pool.manager()
    }

    /// An object; at `max_live`, waiting up to `timeout` if there is one.
    /// `NULL` for `TIDEPOOL_EMPTY`.
    #[inline]
    pub(crate) fn get(&self, flags: u32, timeout: Option<Duration>) -> Result<*mut c_void> {
        if flags & !KNOWN_GET_FLAGS != 0 {
            return Err(Error::new(
                TIDEPOOL_ERR_INVALID_ARGUMENT,
                format_args!("unknown get flags {:#x}", flags & !KNOWN_GET_FLAGS),
            ));
        }
        let guard = if flags & TIDEPOOL_GET_NO_CREATE != 0 {
            match self.pool.try_get() {
                Some(guard) => guard,
                None => return self.empty(),
            }
        } else {
            match timeout {
                None => self.pool.get(),
                Some(t) => self.pool.get_timeout(t),
            }
            .map_err(get_error)?
        };
        let obj = guard.into_raw().0;
        if self.checked && !live::lend(obj, self.id) {
            return Err(self.not_idle(obj));
        }
        Ok(obj.as_ptr())
    }

    /// A get with `TIDEPOOL_GET_NO_CREATE` found nothing. An unchecked pool
    /// that accepts foreign objects cannot tell the one its caller makes
    /// now from its own at the put, so it counts it out here, taking its
    /// place under `max_live`.
    #[cold]
    fn empty(&self) -> Result<*mut c_void> {
        if !self.checked && self.accept_foreign {
            let Ok(reserved) = self.pool.adopt(placeholder()) else {
                return Err(Error::new(
                    TIDEPOOL_ERR_EXHAUSTED,
                    format_args!(
                        "no idle object, and no room to make one: max_live ({}) objects exist",
                        self.pool.config().max_live().unwrap_or(usize::MAX)
                    ),
                ));
            };
            reserved.into_raw();
        }
        Ok(std::ptr::null_mut())
    }

    #[cold]
    fn not_idle(&self, obj: NonNull<c_void>) -> Error {
        // Back into the pool: it is ours, only the set disagrees.
        // SAFETY: just taken out of this pool's guard with `into_raw`.
        drop(unsafe { Pooled::from_raw(&self.pool, Obj(obj)) });
        Error::new(
            TIDEPOOL_ERR_PANIC,
            format_args!("internal error: {obj:p} came from the pool but was not idle in it"),
        )
    }

    pub(crate) fn adopt(&self, obj: *mut c_void) -> Result {
        let obj =
            NonNull::new(obj).ok_or_else(|| Error::new(TIDEPOOL_ERR_NULL, "object is NULL"))?;
        if self.checked {
            if let Err((pool, out)) = live::insert(obj, self.id, true) {
                return Err(Error::new(
                    TIDEPOOL_ERR_ALREADY_POOLED,
                    format_args!(
                        "{obj:p} is already {} object pool #{pool}",
                        if out { "lent out by" } else { "idle in" }
                    ),
                ));
            }
        }
        match self.pool.adopt(Obj(obj)) {
            Ok(guard) => {
                guard.into_raw();
                Ok(TIDEPOOL_OK)
            }
            Err(_) => {
                if self.checked {
                    live::remove(obj);
                }
                Err(self.full(obj, "it is still yours"))
            }
        }
    }

    fn full(&self, obj: NonNull<c_void>, then: &str) -> Error {
        Error::new(
            TIDEPOOL_ERR_EXHAUSTED,
            format_args!(
                "{obj:p} cannot join the pool: max_live ({}) objects exist; {then}",
                self.pool.config().max_live().unwrap_or(usize::MAX)
            ),
        )
    }

    #[inline]
    pub(crate) fn put(&self, obj: *mut c_void) -> Result {
        let Some(obj) = NonNull::new(obj) else {
            return Err(Error::new(TIDEPOOL_ERR_NULL, "object is NULL"));
        };
        if self.checked {
            if let Err(e) = live::take_back(obj, self.id) {
                return self.put_unknown(obj, e);
            }
        }
        // SAFETY: a checked pool found it out from this pool; an unchecked
        // one has the caller's promise that it is (see the header).
        drop(unsafe { Pooled::from_raw(&self.pool, Obj(obj)) });
        Ok(TIDEPOOL_OK)
    }

    /// A checked put of an object that is not out from this pool: taken in
    /// if it is foreign and the pool accepts that, refused otherwise.
    #[cold]
    fn put_unknown(&self, obj: NonNull<c_void>, e: PutError) -> Result {
        match e {
            PutError::Foreign if self.accept_foreign => {
                if let Err((pool, _)) = live::insert(obj, self.id, false) {
                    // Another thread handed it to a pool meanwhile.
                    return Err(wrong_pool(obj, pool, self.id));
                }
                match self.pool.adopt(Obj(obj)) {
                    Ok(guard) => drop(guard),
                    // At `max_live`: a put never hands an object back, so
                    // it is let go, as one past `max_idle` would be.
                    Err(Obj(obj)) => self.manager().destroy_now(obj),
                }
                Ok(TIDEPOOL_OK)
            }
            PutError::Foreign => Err(Error::new(
                TIDEPOOL_ERR_FOREIGN,
                format_args!(
                    "{obj:p} was never handed out by (or adopted into) an object pool, and \
                     this pool was built without TIDEPOOL_OBJ_ACCEPT_FOREIGN"
                ),
            )),
            PutError::WrongPool(owner) => Err(wrong_pool(obj, owner, self.id)),
            PutError::DoublePut => Err(Error::new(
                TIDEPOOL_ERR_DOUBLE_PUT,
                format_args!("{obj:p} was already put back"),
            )),
        }
    }

    /// Gives back the place a `TIDEPOOL_EMPTY` counted out, when the
    /// caller made no object after all.
    pub(crate) fn unreserve(&self) -> Result {
        if self.checked || !self.accept_foreign {
            return Err(Error::new(
                TIDEPOOL_ERR_INVALID_ARGUMENT,
                "this pool reserves nothing at TIDEPOOL_EMPTY (only pools built with both \
                 TIDEPOOL_OBJ_UNCHECKED and TIDEPOOL_OBJ_ACCEPT_FOREIGN do)",
            ));
        }
        if self.pool.stats().live == 0 {
            return Err(Error::new(
                TIDEPOOL_ERR_INVALID_ARGUMENT,
                "no object of this pool is out, so no place is reserved",
            ));
        }
        // SAFETY: the caller's promise that a `TIDEPOOL_EMPTY` counted this
        // out and nothing was put for it; the placeholder is never a real
        // object, and `detach` only counts it gone.
        unsafe { Pooled::from_raw(&self.pool, placeholder()) }.detach();
        Ok(TIDEPOOL_OK)
    }

    pub(crate) fn drain(&self) -> usize {
        self.pool.drain_blocking()
    }

    pub(crate) fn pressure(&self, level: Level) -> usize {
        self.pool.pressure(level)
    }

    pub(crate) fn prefill(&self) -> Result<usize> {
        self.pool.prefill().map_err(get_error)
    }

    pub(crate) fn stats(&self) -> tidepool_stats {
        let core = self.pool.stats();
        let mut s = tidepool_stats::from_core(&core);
        s.adopted = core.adopted;
        s
    }
}

fn wrong_pool(obj: NonNull<c_void>, owner: u64, this: u64) -> Error {
    Error::new(
        TIDEPOOL_ERR_WRONG_POOL,
        format_args!("{obj:p} belongs to object pool #{owner}, not to this pool (#{this})"),
    )
}

/// The status of a failed core get.
#[cold]
fn get_error(e: tidepool::Error<ObjError>) -> Error {
    match e {
        tidepool::Error::Create(e) => Error::new(TIDEPOOL_ERR_CREATE, e),
        e => crate::status::limit_error(e),
    }
}
