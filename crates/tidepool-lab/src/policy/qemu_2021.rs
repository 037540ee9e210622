//! `qemu-2021`: seed 001, "coroutine: resize pool periodically instead of
//! limiting size" (Stefan Hajnoczi, Sept 2021): one unbounded pool per
//! thread, no global pool, and a timer in every thread's event loop that
//! every 15 s shrinks the thread's pool to the peak it needed in the slice
//! just ended.
//!
//! Transcribed from the `+` lines of seed 001's diff, bookkeeping included
//! exactly as shipped (`unsigned int`, so it wraps):
//!
//! ```c
//! static __thread unsigned int alloc_pool_size;
//! static __thread unsigned int num_coroutines;
//! static __thread unsigned int max_coroutines_this_slice;
//!
//! create: pop alloc_pool if any, else qemu_coroutine_new();
//!         num_coroutines++;
//!         if (num_coroutines > max_coroutines_this_slice)
//!             max_coroutines_this_slice = num_coroutines;
//! delete: num_coroutines--; push alloc_pool; alloc_pool_size++;
//! every 15 s (coroutine_pool_timer_cb, also once at init):
//!         unsigned pool_size_target = max_coroutines_this_slice - num_coroutines;
//!         max_coroutines_this_slice = num_coroutines;
//!         while (alloc_pool_size > pool_size_target) delete one;
//! thread exit: coroutine_pool_cleanup() deletes the alloc_pool.
//! ```
//!
//! The flaw the lab shows, in Stefan's words when the patch was dropped
//! from the pull request (systems-anchors §1): "Coroutines are created in
//! one thread and then destroyed in another, so the thread-local book
//! keeping that assumed coroutines live in a single thread was getting out
//! of sync." A thread that only terminates coroutines sees
//! `num_coroutines` wrap below zero, so its target becomes the number it
//! terminated in the last slice, not a peak; the creating thread never finds
//! a pooled stack and maps a new one every time.

use std::time::{Duration, Instant};

use crate::policy::{Counts, Factory, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// The seed's period: `15 * NANOSECONDS_PER_SECOND` (before time scaling).
pub const RESIZE_PERIOD: Duration = Duration::from_secs(15);

/// The 2021 pool: per-thread, unbounded, resized every period.
#[derive(Debug)]
pub struct Qemu2021 {
    factory: Factory,
    period: Duration,
}

impl Qemu2021 {
    /// The policy for stacks of `env.stack_size` bytes, resized every
    /// `env.reclaim_interval` (15 s scaled by `--time-scale`).
    pub fn new(env: &PolicyEnv) -> Self {
        Qemu2021 {
            factory: Factory::new(env.stack_size),
            period: env.reclaim_interval,
        }
    }
}

impl Policy for Qemu2021 {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Qemu2021
    }

    fn local(&self) -> Box<dyn Local + '_> {
        let mut local = Local2021 {
            policy: self,
            // Room for a pool at the map-count limit, so that pushing never
            // reallocates (a realloc there could need a new mapping).
            alloc_pool: Vec::with_capacity(40_000),
            num_coroutines: 0,
            max_coroutines_this_slice: 0,
            next_resize: Instant::now(),
        };
        // coroutine_pool_timer_init() runs the callback once right away.
        local.on_timer(Instant::now());
        Box::new(local)
    }

    fn counts(&self) -> Counts {
        self.factory.counts()
    }
}

struct Local2021<'a> {
    policy: &'a Qemu2021,
    alloc_pool: Vec<LabStack>,
    num_coroutines: u32,
    max_coroutines_this_slice: u32,
    next_resize: Instant,
}

impl Local2021<'_> {
    /// `qemu_coroutine_pool_periodic_resize()`.
    fn periodic_resize(&mut self) {
        let pool_size_target = self
            .max_coroutines_this_slice
            .wrapping_sub(self.num_coroutines);
        self.max_coroutines_this_slice = self.num_coroutines;
        while self.alloc_pool.len() as u64 > u64::from(pool_size_target) {
            let Some(stack) = self.alloc_pool.pop() else {
                break;
            };
            self.policy.factory.destroy(stack);
        }
    }
}

impl Local for Local2021<'_> {
    fn take(&mut self) -> Result<LabStack, StackFailure> {
        let stack = match self.alloc_pool.pop() {
            Some(stack) => stack,
            None => self.policy.factory.create()?,
        };
        self.num_coroutines = self.num_coroutines.wrapping_add(1);
        if self.num_coroutines > self.max_coroutines_this_slice {
            self.max_coroutines_this_slice = self.num_coroutines;
        }
        Ok(stack)
    }

    fn put(&mut self, stack: LabStack) {
        self.num_coroutines = self.num_coroutines.wrapping_sub(1);
        self.alloc_pool.push(stack);
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.next_resize)
    }

    fn on_timer(&mut self, now: Instant) {
        if now >= self.next_resize {
            self.periodic_resize();
            // timer_mod(now + 15 s): the next slice starts now.
            self.next_resize = now + self.policy.period;
        }
    }
}

impl Drop for Local2021<'_> {
    fn drop(&mut self) {
        // coroutine_pool_cleanup(): the thread's alloc_pool is deleted.
        self.policy.factory.destroy_all(self.alloc_pool.drain(..));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> PolicyEnv {
        PolicyEnv {
            stack_size: 4096,
            reclaim_interval: Duration::from_secs(3600),
            pressure_hold: Duration::from_secs(2),
            max_map_count: 65530,
            resident_touch: None,
            idle_decay: true,
        }
    }

    #[test]
    fn same_thread_bookkeeping_keeps_the_slice_peak_then_frees() {
        let policy = Qemu2021::new(&env());
        let mut local = policy.local();
        let stacks: Vec<_> = (0..10).map(|_| local.get().unwrap()).collect();
        for s in stacks {
            local.put(s);
        }
        let t = Instant::now() + Duration::from_secs(7200);
        local.on_timer(t); // peak 10, 0 live: keep 10
        assert_eq!(policy.counts().existing(), 10);
        local.on_timer(t + Duration::from_secs(7200)); // idle slice: free all
        assert_eq!(policy.counts().existing(), 0);
    }

    #[test]
    fn cross_thread_frees_desynchronise_the_counters() {
        let policy = Qemu2021::new(&env());
        let mut creator = policy.local();
        let mut terminator = policy.local();
        for _ in 0..3 {
            let stacks: Vec<_> = (0..10).map(|_| creator.get().unwrap()).collect();
            for s in stacks {
                terminator.put(s);
            }
        }
        // The creator never saw a stack come back: it mapped all 30.
        assert_eq!(policy.counts().created, 30);
        // The terminator's counter wrapped below zero; its "peak" is the
        // 30 it terminated, so a resize keeps all of them.
        let t = Instant::now() + Duration::from_secs(7200);
        terminator.on_timer(t);
        assert_eq!(policy.counts().existing(), 30);
    }
}
