//! `tidepool_config`: one sized struct for every kind of pool, and how its
//! fields become a [`tidepool::Builder`] or a `StackPoolBuilder`.

use std::ffi::{c_int, c_void};
use std::mem::offset_of;
use std::time::Duration;

use crate::sized::SizedStruct;
use crate::status::{tidepool_status::TIDEPOOL_ERR_CONFIG, Error, Result};

/// Makes one object for an object pool (never `NULL` in a config that
/// needs it): store it in `*out` and return 0, or
/// return non-zero (any value; it is reported in the message) to fail.
/// Called on the thread that calls `tidepool_obj_get` or
/// `tidepool_pool_prefill`, never while tidepool holds a lock.
pub type tidepool_create_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, out: *mut *mut c_void) -> c_int>;

/// Unmakes one object the pool lets go. May run on any thread:
/// the one calling `put`, `reclaim_unused`, `reclaim`, `drain` or `destroy`, a thread
/// that is exiting, or tidepool's reclaimer thread (unless the pool was
/// built with `TIDEPOOL_NO_BACKGROUND`). Never while tidepool holds a lock.
pub type tidepool_destroy_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, obj: *mut c_void)>;

/// Releases what an idle object holds without unmaking it (e.g. `madvise`
/// its memory away): the object must stay fit to be handed out again. Same
/// threads as [`tidepool_destroy_fn`].
pub type tidepool_purge_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, obj: *mut c_void)>;

/// Config flag: the process-wide reclaimer thread does not look after this
/// pool. Reclaim then runs only when threads visit the pool's depot or call
/// `tidepool_pool_reclaim`, memory pressure only through
/// `tidepool_pool_pressure`, and no callback runs on a thread of
/// tidepool's. Without it, a pool's creation starts that thread if it is
/// not running yet: it is named `tidepool-reclaim` and blocks every
/// signal but SIGSEGV, SIGILL, SIGFPE and SIGTRAP, so a signal the application's threads block (to read it from a
/// `signalfd` or `sigwait`) is never delivered to it.
pub const TIDEPOOL_NO_BACKGROUND: u64 = 1;

/// Config flag, object pools: no tracking of objects. A get and a put are
/// then the core pool's fast paths and little more, but nothing detects a
/// foreign pointer, a double put or a put to the wrong pool: such a put
/// corrupts the pool's counts and hands the object out twice. For callers
/// that, like QEMU's coroutine code, never get those wrong.
pub const TIDEPOOL_OBJ_UNCHECKED: u64 = 2;

/// Config flag, object pools: `tidepool_obj_put` takes in an object the
/// pool never handed out (one the caller made after `TIDEPOOL_EMPTY`), as
/// `tidepool_obj_adopt` would, instead of refusing it as foreign.
pub const TIDEPOOL_OBJ_ACCEPT_FOREIGN: u64 = 4;

/// Config flag, stack pools: guard pages are `PROT_NONE` pages (two
/// memory areas per stack) even where the kernel has guard-page markers
/// (Linux 6.13+, one area per stack at worst), e.g. to compare the two.
/// Default: markers where the kernel has them.
pub const TIDEPOOL_STACK_GUARD_PROTECT: u64 = 8;

/// Every config flag this version knows.
const KNOWN_FLAGS: u64 = TIDEPOOL_NO_BACKGROUND
    | TIDEPOOL_OBJ_UNCHECKED
    | TIDEPOOL_OBJ_ACCEPT_FOREIGN
    | TIDEPOOL_STACK_GUARD_PROTECT;

/// The flags that apply to object pools only.
const OBJ_FLAGS: u64 = TIDEPOOL_OBJ_UNCHECKED | TIDEPOOL_OBJ_ACCEPT_FOREIGN;

/// How to build a pool. Zero-initialise it, set `size` to `sizeof` it and
/// the fields you need; every field left 0 takes its default:
///
/// ```c
/// tidepool_config cfg = { .size = sizeof cfg, .object_size = 64 * 1024 };
/// ```
///
/// One struct serves the three kinds of pool; a field that does not apply to
/// the kind being built must be left 0 (a non-zero one is refused with
/// `TIDEPOOL_ERR_CONFIG`, naming it, as are values that cannot work).
///
/// Versions: `TIDEPOOL_CONFIG_SIZE_VER0` ends after `destroy`;
/// `TIDEPOOL_CONFIG_SIZE_VER1` adds `purge`; `TIDEPOOL_CONFIG_SIZE_VER2`
/// adds `burst`, `teardown_threads`, `teardown_chunk`, `maps_per_object`
/// and `purge_delay_ms`; `TIDEPOOL_CONFIG_SIZE_VER3` adds `release_step`. See `tidepool_status`'s `TIDEPOOL_ERR_STRUCT_SIZE`
/// for sizes that are refused.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tidepool_config {
    /// `sizeof(tidepool_config)` as the caller was compiled: the version.
    pub size: usize,
    /// `TIDEPOOL_NO_BACKGROUND`, `TIDEPOOL_OBJ_UNCHECKED`,
    /// `TIDEPOOL_OBJ_ACCEPT_FOREIGN` (the last two for object pools), or 0.
    pub flags: u64,
    /// Stack pools: usable bytes per stack (rounded up to whole pages; a
    /// guard page is added below). Buffer pools: bytes per buffer. Object
    /// pools: 0. Required for stacks and buffers.
    pub object_size: usize,
    /// Buffer pools: alignment of each buffer, a power of two up to 4096;
    /// 0 or anything below 16 means 16. Others: 0.
    pub align: usize,
    /// Stack pools: bytes at the top of an idle stack that a purge leaves
    /// resident (default 0: a purge releases every page). Others: 0.
    pub keep_resident: usize,
    /// Objects moved between a thread's cache and the shared depot at a
    /// time (default 32; at most 65536). Each thread caches at most two
    /// batches.
    pub batch_size: usize,
    /// Cap on idle objects in the depot (default 1024 for buffers and
    /// objects; for stacks, `max_live`). At least `batch_size`.
    pub max_idle: usize,
    /// Cap on objects in existence, live or idle; past it `get` fails with
    /// `TIDEPOOL_ERR_EXHAUSTED`. Default (0): no cap for buffers and
    /// objects; for stacks on Linux and Android, the map-count budget,
    /// `(vm.max_map_count - 5000) / 2`. `SIZE_MAX`: no cap, for stacks too.
    pub max_live: usize,
    /// A reserve of idle objects that reclaim and memory pressure never go
    /// below (default 0); fill it with `tidepool_pool_prefill`.
    pub min_idle: usize,
    /// How often the pool measures its working set, in ms (default 15000;
    /// at least 1).
    pub reclaim_interval_ms: u64,
    /// How long critical memory pressure holds the pool at `min_idle`, in
    /// ms, after every critical signal (default 0: none for a single
    /// signal, 2/15 of the reclaim interval while signals persist).
    pub pressure_hold_ms: u64,
    /// Object pools: passed to every callback. tidepool never reads it.
    pub ctx: *mut c_void,
    /// Object pools: makes an object. Required.
    pub create: tidepool_create_fn,
    /// Object pools: unmakes an object. Required.
    pub destroy: tidepool_destroy_fn,
    /// Object pools: releases an idle object's memory, keeping it usable
    /// (optional; called by `tidepool_pool_purge` and reclaim). Since
    /// version 1.
    pub purge: tidepool_purge_fn,
    /// Objects a get that finds none makes at once, the rest cached for
    /// the next gets (default 1; at most `batch_size`). Since version 2.
    pub burst: usize,
    /// Most threads destroying one pool's objects at once when it tears
    /// many down (default: no limit). Since version 2.
    pub teardown_threads: usize,
    /// Objects per piece of such a teardown (default 256). Since version 2.
    pub teardown_chunk: usize,
    /// Object pools: kernel memory areas (VMAs) each object holds, e.g. 2
    /// for a coroutine with a guarded stack. On Linux the pool then derives
    /// `max_live` (unless set) and `max_idle` (unless set) from
    /// `vm.max_map_count`, as a stack pool does (0: none). Since version 2.
    pub maps_per_object: usize,
    /// How long an idle object keeps its pages before a purge releases
    /// them, in ms (0: the default, 1000 for stacks and none for the other
    /// kinds; `UINT64_MAX`: none). Since version 2.
    pub purge_delay_ms: u64,
    /// Stack pools: the most bytes one system call releases when stacks
    /// are torn down (0: the default, 4 MiB). A slab losing its last
    /// stacks has their pages released this much at a time (`madvise`),
    /// then its emptied range unmapped, so that the `munmap` frees nothing
    /// while it holds the process's address-space lock for write, which
    /// every other thread's `mmap` and `munmap` waits for. `SIZE_MAX`: no
    /// bound, one `munmap` per slab with its pages, the fastest teardown
    /// when no other thread maps memory meanwhile. Others: 0. Since
    /// version 3.
    pub release_step: usize,
}

/// The size of the first version of [`tidepool_config`] (up to `destroy`).
pub(crate) const CONFIG_SIZE_VER0: usize = offset_of!(tidepool_config, purge);

/// The size of version 1 (up to `purge`).
pub(crate) const CONFIG_SIZE_VER1: usize = offset_of!(tidepool_config, burst);

/// The size of version 2 (up to `purge_delay_ms`).
pub(crate) const CONFIG_SIZE_VER2: usize = offset_of!(tidepool_config, release_step);

// SAFETY: `#[repr(C)]`, `size: usize` first, and all-zero bytes are valid for
// every field (integers, a raw pointer, `Option`s of function pointers).
unsafe impl SizedStruct for tidepool_config {
    const NAME: &'static str = "tidepool_config";
    const VERSIONS: &'static [usize] = &[CONFIG_SIZE_VER0, CONFIG_SIZE_VER1, CONFIG_SIZE_VER2];
}

/// The kind of pool a config is for, to check which fields apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Stack,
    Buf,
    Obj,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Stack => "stack",
            Kind::Buf => "buffer",
            Kind::Obj => "object",
        }
    }
}

/// The settings every kind shares, zeros turned into "default".
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Common {
    pub(crate) batch_size: Option<usize>,
    pub(crate) max_idle: Option<usize>,
    /// `Some(None)`: explicitly no cap (`SIZE_MAX`).
    pub(crate) max_live: Option<Option<usize>>,
    pub(crate) min_idle: Option<usize>,
    pub(crate) reclaim_interval: Option<Duration>,
    pub(crate) pressure_hold: Option<Duration>,
    pub(crate) background: bool,
    pub(crate) burst: Option<usize>,
    pub(crate) teardown_threads: Option<usize>,
    pub(crate) teardown_chunk: Option<usize>,
    pub(crate) maps_per_object: Option<usize>,
    /// `Some(Duration::MAX)`: explicitly none.
    pub(crate) purge_delay: Option<Duration>,
}

fn config_error(field: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        TIDEPOOL_ERR_CONFIG,
        format_args!("invalid tidepool setting `{field}`: {why}"),
    )
}

/// Turns a core [`tidepool::ConfigError`] into an error naming the C field.
pub(crate) fn from_core(e: tidepool::ConfigError) -> Error {
    let field = match e.field() {
        "usable_size" => "object_size",
        "reclaim_interval" => "reclaim_interval_ms",
        "pressure_hold" => "pressure_hold_ms",
        other => other,
    };
    config_error(field, e.reason())
}

impl tidepool_config {
    /// Checks the fields that are the same for every kind and those that
    /// must be 0 for `kind`; returns the shared settings.
    pub(crate) fn common(&self, kind: Kind) -> Result<Common> {
        if self.flags & !KNOWN_FLAGS != 0 {
            return Err(config_error(
                "flags",
                format_args!(
                    "has unknown bits {:#x} (known: TIDEPOOL_NO_BACKGROUND, \
                     TIDEPOOL_OBJ_UNCHECKED, TIDEPOOL_OBJ_ACCEPT_FOREIGN, \
                     TIDEPOOL_STACK_GUARD_PROTECT)",
                    self.flags & !KNOWN_FLAGS
                ),
            ));
        }
        if kind != Kind::Obj && self.flags & OBJ_FLAGS != 0 {
            return Err(config_error(
                "flags",
                format_args!(
                    "TIDEPOOL_OBJ_UNCHECKED and TIDEPOOL_OBJ_ACCEPT_FOREIGN are for object \
                     pools, not {} pools",
                    kind.name()
                ),
            ));
        }
        if kind != Kind::Stack && self.flags & TIDEPOOL_STACK_GUARD_PROTECT != 0 {
            return Err(config_error(
                "flags",
                format_args!(
                    "TIDEPOOL_STACK_GUARD_PROTECT is for stack pools, not {} pools",
                    kind.name()
                ),
            ));
        }
        let unused = |field: &str, set: bool| {
            if set {
                Err(config_error(
                    field,
                    format_args!("does not apply to {} pools; leave it 0", kind.name()),
                ))
            } else {
                Ok(())
            }
        };
        unused("object_size", kind == Kind::Obj && self.object_size != 0)?;
        unused("align", kind != Kind::Buf && self.align != 0)?;
        unused(
            "keep_resident",
            kind != Kind::Stack && self.keep_resident != 0,
        )?;
        unused(
            "release_step",
            kind != Kind::Stack && self.release_step != 0,
        )?;
        unused("ctx", kind != Kind::Obj && !self.ctx.is_null())?;
        unused("create", kind != Kind::Obj && self.create.is_some())?;
        unused("destroy", kind != Kind::Obj && self.destroy.is_some())?;
        unused("purge", kind != Kind::Obj && self.purge.is_some())?;
        unused(
            "maps_per_object",
            kind != Kind::Obj && self.maps_per_object != 0,
        )?;
        if kind != Kind::Obj && self.object_size == 0 {
            return Err(config_error(
                "object_size",
                format_args!("must be at least 1 for {} pools", kind.name()),
            ));
        }
        let nonzero = |n: usize| (n != 0).then_some(n);
        let ms = |n: u64| (n != 0).then(|| Duration::from_millis(n));
        Ok(Common {
            batch_size: nonzero(self.batch_size),
            max_idle: nonzero(self.max_idle),
            max_live: match self.max_live {
                0 => None,
                usize::MAX => Some(None),
                n => Some(Some(n)),
            },
            min_idle: nonzero(self.min_idle),
            reclaim_interval: ms(self.reclaim_interval_ms),
            pressure_hold: ms(self.pressure_hold_ms),
            background: self.flags & TIDEPOOL_NO_BACKGROUND == 0,
            burst: nonzero(self.burst),
            teardown_threads: nonzero(self.teardown_threads),
            teardown_chunk: nonzero(self.teardown_chunk),
            maps_per_object: nonzero(self.maps_per_object),
            purge_delay: match self.purge_delay_ms {
                0 => None,
                u64::MAX => Some(Duration::MAX),
                n => Some(Duration::from_millis(n)),
            },
        })
    }
}

/// Applies [`Common`] to a builder of any kind (a stack pool's builder is
/// the core [`tidepool::Builder`] too).
pub(crate) fn apply_common<M>(mut b: tidepool::Builder<M>, c: &Common) -> tidepool::Builder<M> {
    if let Some(n) = c.batch_size {
        b = b.batch_size(n);
    }
    if let Some(n) = c.max_idle {
        b = b.max_idle(n);
    }
    if let Some(Some(n)) = c.max_live {
        b = b.max_live(n);
    }
    if let Some(n) = c.min_idle {
        b = b.min_idle(n);
    }
    if let Some(d) = c.reclaim_interval {
        b = b.reclaim_interval(d);
    }
    if let Some(d) = c.pressure_hold {
        b = b.pressure_hold(d);
    }
    if let Some(n) = c.burst {
        b = b.burst(n);
    }
    if let Some(n) = c.teardown_threads {
        b = b.teardown_threads(n);
    }
    if let Some(n) = c.teardown_chunk {
        b = b.teardown_chunk(n);
    }
    if let Some(d) = c.purge_delay {
        b = b.purge_delay(d);
    }
    b.background(c.background)
}

/// Reads and checks a config for `kind`: the sized-struct rules, then the
/// shared fields.
///
/// # Safety
///
/// `config` must be null or point to a readable struct of at least the
/// size its `size` field says.
pub(crate) unsafe fn read(
    config: *const tidepool_config,
    kind: Kind,
) -> Result<(tidepool_config, Common)> {
    if config.is_null() {
        return Err(Error::new(
            crate::status::tidepool_status::TIDEPOOL_ERR_NULL,
            "config is NULL",
        ));
    }
    // SAFETY: non-null; the rest is the caller's promise.
    let config = unsafe { crate::sized::read_in(config) }?;
    let common = config.common(kind)?;
    Ok((config, common))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> tidepool_config {
        tidepool_config {
            size: std::mem::size_of::<tidepool_config>(),
            ..SizedStruct::zeroed()
        }
    }

    #[test]
    fn fields_of_other_kinds_are_named() {
        let c = tidepool_config {
            object_size: 64,
            align: 64,
            ..zeroed()
        };
        let err = c.common(Kind::Stack).unwrap_err();
        assert_eq!(err.status, TIDEPOOL_ERR_CONFIG);
        assert!(err.message.contains("`align`"), "{}", err.message);
        assert!(c.common(Kind::Buf).is_ok());
        let err = c.common(Kind::Obj).unwrap_err();
        assert!(err.message.contains("`object_size`"), "{}", err.message);
    }

    #[test]
    fn zeros_are_defaults_and_size_max_is_no_cap() {
        let c = tidepool_config {
            object_size: 1,
            max_live: usize::MAX,
            flags: TIDEPOOL_NO_BACKGROUND,
            ..zeroed()
        };
        let common = c.common(Kind::Buf).unwrap();
        assert_eq!(common.batch_size, None);
        assert_eq!(common.max_live, Some(None));
        assert!(!common.background);
        let err = tidepool_config {
            flags: 1 << 40,
            ..c
        }
        .common(Kind::Buf)
        .unwrap_err();
        assert!(err.message.contains("`flags`"), "{}", err.message);
    }

    #[test]
    fn versions_end_where_documented() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(CONFIG_SIZE_VER0 + word, CONFIG_SIZE_VER1);
        assert_eq!(CONFIG_SIZE_VER1 + 4 * word + 8, CONFIG_SIZE_VER2);
        assert_eq!(
            CONFIG_SIZE_VER2 + word,
            std::mem::size_of::<tidepool_config>()
        );
    }

    #[test]
    fn the_guard_flag_is_for_stack_pools() {
        let c = tidepool_config {
            object_size: 64,
            flags: TIDEPOOL_STACK_GUARD_PROTECT,
            ..zeroed()
        };
        assert!(c.common(Kind::Stack).is_ok());
        for kind in [Kind::Buf, Kind::Obj] {
            let err = c.common(kind).unwrap_err();
            assert!(
                err.message.contains("TIDEPOOL_STACK_GUARD_PROTECT"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn object_flags_are_for_object_pools() {
        let c = tidepool_config {
            object_size: 64,
            flags: TIDEPOOL_OBJ_UNCHECKED,
            ..zeroed()
        };
        let err = c.common(Kind::Buf).unwrap_err();
        assert!(err.message.contains("`flags`"), "{}", err.message);
        let c = tidepool_config {
            object_size: 64,
            maps_per_object: 2,
            ..zeroed()
        };
        let err = c.common(Kind::Buf).unwrap_err();
        assert!(err.message.contains("`maps_per_object`"), "{}", err.message);
    }
}
