//! `qemu-2024`: seed 000, "coroutine: cap per-thread local pool size"
//! (Stefan Hajnoczi, March 2024; QEMU's pool today): a global list of
//! batches, capped so that pooled stacks cannot use up `vm.max_map_count`,
//! and per-thread pools of at most two batches of 128.
//!
//! Transcribed from `util/qemu-coroutine.c` as merged (systems-anchors §1):
//!
//! ```c
//! enum { COROUTINE_POOL_BATCH_MAX_SIZE = 128, };
//! get:  pop the first local batch (free its header when it empties);
//!       if there is none, take the first global batch (under the lock).
//! put:  if the first local batch is full: if a second one exists, donate
//!       the full one to the global pool; start a new batch. Push.
//! put_global: under the lock, if global_pool_size <
//!       MIN(global_pool_max_size, global_pool_hard_max_size) insert the
//!       batch (overshooting by up to one batch), else delete it.
//! hard max: (max_map_count - 5000) / 2 if max_map_count > 5000, else 0
//!       ("each coroutine takes up 2 VMAs", 5000 left for everything else).
//! thread exit: local_pool_cleanup() deletes the thread's local batches.
//! ```
//!
//! `global_pool_max_size` starts at 128 and each virtio-blk device raises
//! it by `num_queues * queue_size / 2`; the lab models a guest with enough
//! devices that the hard cap is the binding one, the case seed 000 fixes.

use std::sync::Mutex;

use crate::policy::{Counts, Factory, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// `COROUTINE_POOL_BATCH_MAX_SIZE`.
pub const COROUTINE_POOL_BATCH_MAX_SIZE: usize = 128;
/// VMAs QEMU leaves for everything else in the process.
pub const RESERVED_VMAS: u64 = 5000;
/// VMAs per coroutine: the stack and its guard page.
pub const VMAS_PER_COROUTINE: u64 = 2;

/// `get_global_pool_hard_max_size()` on Linux.
pub fn global_pool_hard_max_size(max_map_count: u64) -> usize {
    if max_map_count > RESERVED_VMAS {
        ((max_map_count - RESERVED_VMAS) / VMAS_PER_COROUTINE) as usize
    } else {
        0
    }
}

type Batch = Vec<LabStack>;

#[derive(Debug)]
struct Global {
    /// The list's head is the last element.
    batches: Vec<Batch>,
    size: usize,
}

/// The 2024 QEMU pool: capped global batches, 2 local batches per thread.
#[derive(Debug)]
pub struct Qemu2024 {
    factory: Factory,
    global: Mutex<Global>,
    max: usize,
}

impl Qemu2024 {
    /// The policy for stacks of `env.stack_size` bytes, its global pool
    /// capped from `env.max_map_count`.
    pub fn new(env: &PolicyEnv) -> Self {
        let max = global_pool_hard_max_size(env.max_map_count);
        Qemu2024 {
            factory: Factory::new(env.stack_size),
            global: Mutex::new(Global {
                batches: Vec::with_capacity(max / COROUTINE_POOL_BATCH_MAX_SIZE + 8),
                size: 0,
            }),
            max,
        }
    }

    /// The global cap, `MIN(global_pool_max_size, global_pool_hard_max_size)`.
    pub fn global_cap(&self) -> usize {
        self.max
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Global> {
        self.global
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `coroutine_pool_put_global()`.
    fn put_global(&self, batch: Batch) {
        {
            let mut global = self.lock();
            if global.size < self.max {
                global.size += batch.len();
                global.batches.push(batch);
                return;
            }
        }
        self.factory.destroy_all(batch);
    }
}

impl Policy for Qemu2024 {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Qemu2024
    }

    fn local(&self) -> Box<dyn Local + '_> {
        Box::new(Local2024 {
            policy: self,
            local_pool: Vec::with_capacity(3),
        })
    }

    fn counts(&self) -> Counts {
        self.factory.counts()
    }
}

impl Drop for Qemu2024 {
    fn drop(&mut self) {
        let batches = std::mem::take(&mut self.lock().batches);
        self.factory.destroy_all(batches.into_iter().flatten());
    }
}

struct Local2024<'a> {
    policy: &'a Qemu2024,
    /// At most two batches; the head is the last element.
    local_pool: Vec<Batch>,
}

impl Local2024<'_> {
    /// `coroutine_pool_get_local()`.
    fn get_local(&mut self) -> Option<LabStack> {
        let batch = self.local_pool.last_mut()?;
        let co = batch.pop();
        if batch.is_empty() {
            self.local_pool.pop();
        }
        co
    }

    /// `coroutine_pool_refill_local()`.
    fn refill_local(&mut self) {
        let batch = {
            let mut global = self.policy.lock();
            let batch = global.batches.pop();
            if let Some(b) = &batch {
                global.size -= b.len();
            }
            batch
        };
        if let Some(batch) = batch {
            self.local_pool.push(batch);
        }
    }
}

impl Local for Local2024<'_> {
    fn take(&mut self) -> Result<LabStack, StackFailure> {
        let co = match self.get_local() {
            Some(co) => Some(co),
            None => {
                self.refill_local();
                self.get_local()
            }
        };
        match co {
            Some(co) => Ok(co),
            None => self.policy.factory.create(),
        }
    }

    fn put(&mut self, stack: LabStack) {
        if self.local_pool.is_empty() {
            self.local_pool
                .push(Vec::with_capacity(COROUTINE_POOL_BATCH_MAX_SIZE));
        }
        let head_full = self
            .local_pool
            .last()
            .is_some_and(|b| b.len() >= COROUTINE_POOL_BATCH_MAX_SIZE);
        if head_full {
            if self.local_pool.len() >= 2 {
                let full = self.local_pool.pop().unwrap_or_default();
                self.policy.put_global(full);
            }
            self.local_pool
                .push(Vec::with_capacity(COROUTINE_POOL_BATCH_MAX_SIZE));
        }
        if let Some(head) = self.local_pool.last_mut() {
            head.push(stack);
        }
    }
}

impl Drop for Local2024<'_> {
    fn drop(&mut self) {
        // local_pool_cleanup(): the thread's batches are deleted, not given
        // to the global pool.
        let batches = std::mem::take(&mut self.local_pool);
        self.policy
            .factory
            .destroy_all(batches.into_iter().flatten());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_hard_cap_follows_the_map_count() {
        assert_eq!(global_pool_hard_max_size(65530), 30265);
        assert_eq!(global_pool_hard_max_size(4000), 0);
    }

    #[test]
    fn a_thread_keeps_at_most_two_batches_and_donates_the_rest() {
        let env = PolicyEnv {
            stack_size: 4096,
            reclaim_interval: Duration::from_secs(15),
            pressure_hold: Duration::from_secs(2),
            max_map_count: 65530,
            resident_touch: None,
            idle_decay: true,
        };
        let policy = Qemu2024::new(&env);
        let mut local = policy.local();
        let n = 3 * COROUTINE_POOL_BATCH_MAX_SIZE + 5;
        let stacks: Vec<_> = (0..n).map(|_| local.get().unwrap()).collect();
        for s in stacks {
            local.put(s);
        }
        let global = policy.lock().size;
        assert_eq!(global, 2 * COROUTINE_POOL_BATCH_MAX_SIZE);
        drop(local); // thread exit: the local batches are deleted
        assert_eq!(policy.counts().existing() as usize, global);
    }
}
