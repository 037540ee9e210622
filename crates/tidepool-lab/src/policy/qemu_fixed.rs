//! `qemu-fixed`: QEMU's coroutine pool before 2021, the code seed 001
//! replaced ("the hardcoded size limit of 64 for thread-local pools and 128
//! for the global pool is insufficient for the fio benchmark").
//!
//! Transcribed from the `-` lines of seed 001's diff of
//! `util/qemu-coroutine.c`:
//!
//! ```c
//! enum { POOL_BATCH_SIZE = 64, };
//! static QSLIST_HEAD(, Coroutine) release_pool;          /* global */
//! static unsigned int release_pool_size;
//! static __thread QSLIST_HEAD(, Coroutine) alloc_pool;   /* per thread */
//! static __thread unsigned int alloc_pool_size;
//!
//! create: co = QSLIST_FIRST(&alloc_pool);
//!         if (!co && release_pool_size > POOL_BATCH_SIZE) {
//!             alloc_pool_size = qatomic_xchg(&release_pool_size, 0);
//!             QSLIST_MOVE_ATOMIC(&alloc_pool, &release_pool);   /* take all */
//!             co = QSLIST_FIRST(&alloc_pool);
//!         }
//!         if (co) pop; else qemu_coroutine_new();
//! delete: if (release_pool_size < POOL_BATCH_SIZE * 2) push global;
//!         else if (alloc_pool_size < POOL_BATCH_SIZE) push local;
//!         else qemu_coroutine_delete(co);
//! thread exit: coroutine_pool_cleanup() deletes the alloc_pool.
//! ```
//!
//! QEMU's global list is lock-free (`QSLIST_INSERT_HEAD_ATOMIC`); here it
//! is a mutex-protected `Vec` with an atomic size read outside the lock,
//! the same decisions at a slightly different cost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::policy::{Counts, Factory, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// `POOL_BATCH_SIZE`: the thread-local limit, and the global size above
/// which a thread takes the whole global list.
pub const POOL_BATCH_SIZE: usize = 64;
/// The global `release_pool` limit, `POOL_BATCH_SIZE * 2`.
pub const RELEASE_POOL_MAX: usize = POOL_BATCH_SIZE * 2;

/// The pre-2021 QEMU pool: 64 per thread, 128 global, then destroy.
#[derive(Debug)]
pub struct QemuFixed {
    factory: Factory,
    release_pool: Mutex<Vec<LabStack>>,
    release_pool_size: AtomicUsize,
}

impl QemuFixed {
    /// The policy for stacks of `env.stack_size` bytes.
    pub fn new(env: &PolicyEnv) -> Self {
        QemuFixed {
            factory: Factory::new(env.stack_size),
            release_pool: Mutex::new(Vec::with_capacity(RELEASE_POOL_MAX + 64)),
            release_pool_size: AtomicUsize::new(0),
        }
    }

    fn global(&self) -> std::sync::MutexGuard<'_, Vec<LabStack>> {
        self.release_pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Policy for QemuFixed {
    fn kind(&self) -> PolicyKind {
        PolicyKind::QemuFixed
    }

    fn local(&self) -> Box<dyn Local + '_> {
        Box::new(FixedLocal {
            policy: self,
            alloc_pool: Vec::with_capacity(POOL_BATCH_SIZE + RELEASE_POOL_MAX + 64),
        })
    }

    fn counts(&self) -> Counts {
        self.factory.counts()
    }
}

impl Drop for QemuFixed {
    fn drop(&mut self) {
        // The process exits: whatever the global list holds is unmapped.
        let stacks = std::mem::take(&mut *self.global());
        self.factory.destroy_all(stacks);
    }
}

struct FixedLocal<'a> {
    policy: &'a QemuFixed,
    alloc_pool: Vec<LabStack>,
}

impl Local for FixedLocal<'_> {
    fn take(&mut self) -> Result<LabStack, StackFailure> {
        let p = self.policy;
        if self.alloc_pool.is_empty()
            && p.release_pool_size.load(Ordering::Relaxed) > POOL_BATCH_SIZE
        {
            let mut global = p.global();
            p.release_pool_size.store(0, Ordering::Relaxed);
            self.alloc_pool.append(&mut global);
        }
        match self.alloc_pool.pop() {
            Some(stack) => Ok(stack),
            None => p.factory.create(),
        }
    }

    fn put(&mut self, stack: LabStack) {
        let p = self.policy;
        if p.release_pool_size.load(Ordering::Relaxed) < RELEASE_POOL_MAX {
            let mut global = p.global();
            global.push(stack);
            p.release_pool_size.fetch_add(1, Ordering::Relaxed);
        } else if self.alloc_pool.len() < POOL_BATCH_SIZE {
            self.alloc_pool.push(stack);
        } else {
            p.factory.destroy(stack);
        }
    }
}

impl Drop for FixedLocal<'_> {
    fn drop(&mut self) {
        // coroutine_pool_cleanup(): the thread's alloc_pool is deleted.
        self.policy.factory.destroy_all(self.alloc_pool.drain(..));
    }
}
