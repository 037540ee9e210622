//! `tidepool`: the library under test, [`tidepool::stack::StackPool`] with
//! its defaults: per-thread caches of at most two batches over a depot
//! capped by the map-count budget (`(max_map_count - 5000) / 2`, seed 000's
//! cap), reclaim of what sat idle through two intervals (seed 001's period
//! of 15 s, scaled like every other period in the lab), and the response to
//! memory pressure of `tidepool::pressure` (seed 003's aggressive shrink).
//!
//! The only settings the lab makes are time: the reclaim interval, scaled
//! by `--time-scale` exactly as QEMU 2021's resize period is, and the
//! pressure hold, scaled by the same factor (so it stays the same fraction
//! of the interval as in the library's defaults).

use tidepool::stack::StackPool;

use crate::policy::{Counts, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// tidepool's stack pool.
#[derive(Debug)]
pub struct Tidepool {
    pool: StackPool,
}

impl Tidepool {
    /// A stack pool of `env.stack_size`-byte stacks reclaiming every
    /// `env.reclaim_interval` and holding `env.pressure_hold` after critical
    /// pressure; every other setting is the library's default (caps from
    /// this process's map-count budget).
    ///
    /// # Errors
    ///
    /// If tidepool refuses the settings.
    pub fn new(env: &PolicyEnv) -> Result<Self, String> {
        let pool = StackPool::builder(env.stack_size)
            .reclaim_interval(env.reclaim_interval)
            .pressure_hold(env.pressure_hold)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Tidepool { pool })
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
}

struct TidepoolLocal<'a> {
    pool: &'a StackPool,
}

impl Local for TidepoolLocal<'_> {
    fn get(&mut self) -> Result<LabStack, StackFailure> {
        self.pool
            .get()
            .map(LabStack::Pooled)
            .map_err(|e| StackFailure {
                message: e.to_string(),
            })
    }

    fn put(&mut self, stack: LabStack) {
        // A pooled stack goes back to its pool when dropped, on this thread.
        drop(stack);
    }
}
