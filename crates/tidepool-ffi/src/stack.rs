//! Stack pools: guarded coroutine stacks from a
//! [`StackPool`](tidepool::stack::StackPool), described to C by a
//! `tidepool_stack`, with a 64-byte header in the top of each stack.
//!
//! ```text
//!  guard page │ usable (RW) ... ◄── grows down ──   │ StackHeader (64 B) │
//!             ▲ base                               ▲ top (what C gets)   ▲ mapping's top
//! ```
//!
//! The header holds a magic, the pool id, a lend generation, the state word
//! (LIVE/IDLE) and, while the stack is out, the core's `PooledStack`. The
//! `tidepool_stack` C gets carries the generation and a check word, a keyed
//! hash of `top` and the generation: `put` verifies the check word *before*
//! reading any memory, so a struct that did not come from `get` is refused
//! without touching `top`. Then the header tells a wrong pool (pool id), a
//! stale struct for a stack lent again since (generation), and a double put
//! (state, or a header zeroed by a purge).

#[cfg(unix)]
pub(crate) use unix::*;

use std::ffi::c_void;

/// A stack lent by a stack pool. Fill it with `tidepool_stack_get`; give it
/// back with `tidepool_stack_put`. Run code on the bytes `[base, top)`:
/// e.g. `uc_stack.ss_sp = base; uc_stack.ss_size = size;` for
/// `makecontext`. Below `base` is a guard page: running off the bottom
/// faults (`SIGSEGV`) instead of corrupting memory.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tidepool_stack {
    /// The lowest usable address, just above the guard page. Page-aligned.
    pub base: *mut c_void,
    /// One past the highest usable byte: where a stack pointer starts.
    /// 64-byte aligned (the 64 bytes above it are tidepool's).
    pub top: *mut c_void,
    /// `top - base`, in bytes.
    pub size: usize,
    /// Bytes of the inaccessible guard below `base`.
    pub guard_size: usize,
    /// Private: which lending of this stack this is.
    pub _gen: u64,
    /// Private: a check word over `top` and `_gen`.
    pub _check: u64,
}

#[cfg(unix)]
mod unix {
    use std::cell::UnsafeCell;
    use std::ffi::c_void;
    use std::hash::BuildHasher;
    use std::mem::{size_of, MaybeUninit};
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    use tidepool::stack::{GuardMode, PooledStack, StackError, StackPool};

    use super::tidepool_stack;
    use crate::config::{self, apply_common, tidepool_config};
    use crate::stats::tidepool_stats;
    use crate::status::tidepool_status::*;
    use crate::status::{Error, Result};

    const STACK_MAGIC: u32 = 0x7453_744b; // "tStK"
    const IDLE: u32 = 1;
    const LIVE: u32 = 2;

    /// The top 64 bytes of every lent stack.
    #[repr(C, align(64))]
    struct StackHeader {
        magic: AtomicU32,
        state: AtomicU32,
        pool: AtomicU64,
        gen: AtomicU64,
        /// Initialised exactly while `state == LIVE`.
        guard: UnsafeCell<MaybeUninit<PooledStack>>,
    }

    const HEADER: usize = size_of::<StackHeader>();
    const _: () = assert!(
        HEADER == 64,
        "the header must fit in the 64 bytes C is told about"
    );

    /// Lendings so far, process-wide: every lending gets a new generation.
    static GEN: AtomicU64 = AtomicU64::new(0);

    /// The key of the check word, random per process.
    fn secret() -> u64 {
        static SECRET: OnceLock<u64> = OnceLock::new();
        *SECRET.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eedu64))
    }

    /// The check word of a lending: a keyed mix of `top` and `gen`
    /// (splitmix64's finaliser).
    fn check(top: *const c_void, gen: u64) -> u64 {
        let mut z = (top as usize as u64) ^ gen.rotate_left(29) ^ secret();
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The stack-pool side of a [`tidepool_pool`](crate::tidepool_pool).
    pub(crate) struct StackKind {
        pub(crate) pool: StackPool,
        id: u64,
    }

    /// The status for a [`StackError`].
    pub(crate) fn stack_error(e: StackError) -> Error {
        let status = match &e {
            StackError::MapCountReached { .. } => TIDEPOOL_ERR_MAP_COUNT,
            StackError::OutOfMemory { .. } => TIDEPOOL_ERR_NO_MEMORY,
            StackError::Exhausted { .. } => TIDEPOOL_ERR_EXHAUSTED,
            StackError::Timeout { .. } => TIDEPOOL_ERR_TIMEOUT,
            _ => TIDEPOOL_ERR_OS,
        };
        Error::new(status, e)
    }

    impl StackKind {
        pub(crate) fn build(
            config: &tidepool_config,
            common: &config::Common,
            id: u64,
        ) -> Result<Self> {
            let mut builder = StackPool::builder(config.object_size);
            if config.keep_resident != 0 {
                builder = builder.keep_resident(config.keep_resident);
            }
            match config.release_step {
                0 => {}
                usize::MAX => builder = builder.release_step(0),
                n => builder = builder.release_step(n),
            }
            if common.max_live == Some(None) {
                builder = builder.unbounded();
            }
            if config.flags & config::TIDEPOOL_STACK_GUARD_PROTECT != 0 {
                builder = builder.guard_mode(GuardMode::Protect);
            }
            let pool = apply_common(builder, common)
                .build()
                .map_err(config::from_core)?;
            Ok(Self { pool, id })
        }

        /// A stack; at `max_live`, waiting up to `timeout` if there is one.
        pub(crate) fn get(&self, timeout: Option<Duration>) -> Result<tidepool_stack> {
            let stack = match timeout {
                None => self.pool.get(),
                Some(t) => self.pool.get_timeout(t),
            }
            .map_err(stack_error)?;
            let base = stack.bottom().as_ptr();
            // The usable part is at least one page, so the header fits.
            let top = stack.top().as_ptr().wrapping_sub(HEADER);
            let gen = GEN.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            let lent = tidepool_stack {
                base: base.cast(),
                top: top.cast(),
                size: top as usize - base as usize,
                guard_size: stack.guard_size(),
                _gen: gen,
                _check: check(top.cast(), gen),
            };
            // SAFETY: the top 64 bytes of the stack's usable part, which is
            // ours alone (just handed to this thread by the pool), mapped
            // read-write, and 64-aligned (the top is page-aligned).
            unsafe {
                top.cast::<StackHeader>().write(StackHeader {
                    magic: AtomicU32::new(STACK_MAGIC),
                    state: AtomicU32::new(LIVE),
                    pool: AtomicU64::new(self.id),
                    gen: AtomicU64::new(gen),
                    guard: UnsafeCell::new(MaybeUninit::new(stack)),
                });
            }
            Ok(lent)
        }

        /// # Safety
        ///
        /// If `lent` came from a `get` of any stack pool, the stack must still
        /// be mapped: not yet given back, or given back and still pooled.
        pub(crate) unsafe fn put(&self, lent: &tidepool_stack) -> Result {
            if lent.top.is_null() {
                return Err(Error::new(TIDEPOOL_ERR_NULL, "stack->top is NULL"));
            }
            if check(lent.top, lent._gen) != lent._check {
                return Err(Error::new(
                    TIDEPOOL_ERR_FOREIGN,
                    format_args!(
                        "the stack at top {:p} was not lent by a tidepool stack pool \
                         (its check word does not match)",
                        lent.top
                    ),
                ));
            }
            // SAFETY: the check word proves a stack pool lent a stack with
            // this top, whose header is 64-aligned at `top`; the caller
            // promises it is still mapped. Every field is an atomic or an
            // `UnsafeCell<MaybeUninit>`, valid for any bytes (a purge may
            // have zeroed them).
            let header = unsafe { &*lent.top.cast::<StackHeader>() };
            let magic = header.magic.load(Ordering::Relaxed);
            let double = |why: &str| {
                Error::new(
                    TIDEPOOL_ERR_DOUBLE_PUT,
                    format_args!("the stack at top {:p} was already put back{why}", lent.top),
                )
            };
            if magic == 0 {
                return Err(double(" (and purged since)"));
            }
            if magic != STACK_MAGIC {
                return Err(Error::new(
                    TIDEPOOL_ERR_FOREIGN,
                    format_args!(
                        "the 64 bytes above top {:p} are not tidepool's stack header: \
                         something above the stack's top overwrote it",
                        lent.top
                    ),
                ));
            }
            let owner = header.pool.load(Ordering::Relaxed);
            if owner != self.id {
                return Err(Error::new(
                    TIDEPOOL_ERR_WRONG_POOL,
                    format_args!(
                        "the stack at top {:p} belongs to stack pool #{owner}, not to this \
                         pool (#{})",
                        lent.top, self.id
                    ),
                ));
            }
            if header.gen.load(Ordering::Relaxed) != lent._gen {
                return Err(double(", and lent again since (this is a stale copy)"));
            }
            if header
                .state
                .compare_exchange(LIVE, IDLE, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                return Err(double(""));
            }
            // SAFETY: the state was LIVE, so the slot holds the stack `get`
            // wrote; our CAS won, so nothing else reads it.
            let stack = unsafe { (*header.guard.get()).assume_init_read() };
            // Through the pool, which the handle keeps alive: cheaper than
            // a drop (`StackPool::put`); the owner check above made sure it
            // is this pool's.
            self.pool.put(stack);
            Ok(TIDEPOOL_OK)
        }

        pub(crate) fn stats(&self) -> tidepool_stats {
            let s = self.pool.stats();
            tidepool_stats {
                mapped: s.mapped,
                vmas: s.vmas,
                idle_resident_max: s.idle_resident_max,
                reclaim_retries: s.reclaim_retries,
                purge_failures: s.purge_failures,
                unmap_failures: s.unmap_failures,
                mmap_calls: s.mmap_calls,
                mprotect_calls: s.mprotect_calls,
                guard_calls: s.guard_calls,
                madvise_calls: s.madvise_calls,
                munmap_calls: s.munmap_calls,
                ..tidepool_stats::from_core(&s.pool)
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use tidepool::stack::StackError;

    use super::stack_error;
    use crate::status::tidepool_status::*;

    /// Kernel failures C cannot provoke on demand still get their codes.
    #[test]
    fn every_stack_error_has_its_status() {
        let cases = [
            (
                StackError::MapCountReached {
                    vmas: 65530,
                    max_map_count: 65530,
                    call: "mmap",
                },
                TIDEPOOL_ERR_MAP_COUNT,
            ),
            (
                StackError::OutOfMemory {
                    bytes: 1 << 20,
                    vmas: 10,
                    max_map_count: 65530,
                    call: "mprotect",
                },
                TIDEPOOL_ERR_NO_MEMORY,
            ),
            (StackError::Exhausted { limit: 3 }, TIDEPOOL_ERR_EXHAUSTED),
            (
                StackError::Os {
                    call: "mmap",
                    source: std::io::Error::from_raw_os_error(22),
                },
                TIDEPOOL_ERR_OS,
            ),
        ];
        for (error, status) in cases {
            let text = error.to_string();
            let e = stack_error(error);
            assert_eq!(e.status, status);
            assert_eq!(e.message, text);
        }
    }
}
