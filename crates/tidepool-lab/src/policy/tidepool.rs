//! `tidepool`: the library under test, [`tidepool::stack::StackPool`] with
//! its defaults: per-thread caches of at most two batches over a depot
//! capped by the map-count budget (`(max_map_count - 5000) / 2`, seed 000's
//! cap), reclaim of what sat idle through two intervals (seed 001's period
//! of 15 s, scaled like every other period in the lab), and the response to
//! memory pressure of `tidepool::pressure` (seed 003's aggressive shrink).
//!
//! The only setting the lab makes is time: the reclaim interval, scaled by
//! `--time-scale` exactly as QEMU 2021's resize period is. The pressure hold
//! is the library's default, which follows the interval by itself (none
//! for a single critical signal, 2/15 of the interval while critical
//! signals keep coming).

use tidepool::stack::StackPool;

use crate::policy::{Counts, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// tidepool's stack pool.
#[derive(Debug)]
pub struct Tidepool {
    pool: StackPool,
    /// Bytes a request leaves resident on its stack (measured with
    /// `mincore` on a stack of a throwaway pool), when asked to measure
    /// idle resident memory ([`PolicyEnv::resident_touch`]).
    per_request: Option<u64>,
}

impl Tidepool {
    /// A stack pool of `env.stack_size`-byte stacks reclaiming every
    /// `env.reclaim_interval`, its purge delay scaled with it (the default
    /// delay is a fifteenth of the default interval) or off
    /// ([`PolicyEnv::idle_decay`]); every other setting
    /// is the library's default (caps from this process's map-count
    /// budget, the pressure hold).
    ///
    /// # Errors
    ///
    /// If tidepool refuses the settings.
    pub fn new(env: &PolicyEnv) -> Result<Self, String> {
        let scale = tidepool::DEFAULT_RECLAIM_INTERVAL.as_secs_f64()
            / tidepool::DEFAULT_PURGE_DELAY.as_secs_f64();
        let purge_delay = if env.idle_decay {
            env.reclaim_interval
                .div_f64(scale)
                .max(tidepool::MIN_RECLAIM_INTERVAL)
        } else {
            std::time::Duration::MAX
        };
        let pool = StackPool::builder(env.stack_size)
            .reclaim_interval(env.reclaim_interval)
            .purge_delay(purge_delay)
            .build()
            .map_err(|e| e.to_string())?;
        let per_request = match env.resident_touch {
            Some(touch) => Some(request_resident(env.stack_size, touch)?),
            None => None,
        };
        Ok(Tidepool { pool, per_request })
    }

    /// The pool, for its own statistics.
    pub fn pool(&self) -> &StackPool {
        &self.pool
    }
}

impl Policy for Tidepool {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Tidepool
    }

    fn local(&self) -> Box<dyn Local + '_> {
        // tidepool keeps its thread caches in real thread-locals; the
        // handle only needs the pool.
        Box::new(TidepoolLocal { pool: &self.pool })
    }

    fn counts(&self) -> Counts {
        let stats = self.pool.stats().pool;
        Counts {
            created: stats.created,
            destroyed: stats.destroyed + stats.detached,
        }
    }

    fn pressure_signals(&self) -> u64 {
        let stats = self.pool.stats().pool;
        stats.pressure_medium + stats.pressure_critical
    }

    /// `mincore` over every slab of the pool (stacks in use, idle, free
    /// slots), less what the `live` requests keep resident on theirs: each
    /// request touches the same pages of its stack, measured once
    /// (`request_resident`). Free slots hold nothing (their pages were
    /// released when their stacks were destroyed).
    fn idle_resident_bytes(&self, live: u64) -> Option<u64> {
        let per_request = self.per_request?;
        let all = self.pool.resident_bytes().ok()?;
        Some(all.saturating_sub(live.saturating_mul(per_request)))
    }
}

/// The bytes one request leaves resident on a stack of `stack_size` bytes:
/// a request with `touch` runs to its end on a fresh stack of a pool of its
/// own (no reclaimer), and `mincore` counts its pages.
fn request_resident(stack_size: usize, touch: crate::stack::Touch) -> Result<u64, String> {
    let pool = StackPool::builder(stack_size)
        .background(false)
        .build()
        .map_err(|e| e.to_string())?;
    let stack = pool.get().map_err(|e| e.to_string())?;
    let (_, stack) = crate::stack::start(LabStack::Pooled(stack), 1, touch).complete();
    match &stack {
        LabStack::Pooled(s) => s
            .resident_bytes()
            .map(|b| b as u64)
            .map_err(|e| e.to_string()),
        LabStack::Fresh(_) => Err("a pooled stack came back fresh".to_owned()),
    }
}

struct TidepoolLocal<'a> {
    pool: &'a StackPool,
}

impl Local for TidepoolLocal<'_> {
    fn take(&mut self) -> Result<LabStack, StackFailure> {
        self.pool
            .get()
            .map(LabStack::Pooled)
            .map_err(|e| StackFailure {
                message: e.to_string(),
            })
    }

    fn put(&mut self, stack: LabStack) {
        // Through the pool, which this handle holds anyway (as the seed
        // policies give stacks back to theirs): cheaper than dropping the
        // stack, which would have to keep the pool alive by itself.
        match stack {
            LabStack::Pooled(stack) => self.pool.put(stack),
            fresh @ LabStack::Fresh(_) => drop(fresh),
        }
    }
}
