//! `tidepool`: the library under test, [`tidepool::stack::StackPool`] with
//! its defaults: per-thread caches of at most two batches over a depot
//! capped by the map-count budget (`(max_map_count - 5000) / 2`, seed 000's
//! cap), reclaim of what sat idle through two intervals (seed 001's period
//! of 15 s, scaled like every other period in the lab), and the response to
//! memory pressure of `tidepool::pressure` (seed 003's aggressive shrink).
//!
//! The only setting the lab makes is the reclaim interval, scaled by
//! `--time-scale` exactly as QEMU 2021's resize period is.

use std::sync::Arc;

use tidepool::stack::{GuardedStack, MapBudget, StackError};
use tidepool::{Manage, Pool};

use crate::policy::{Counts, Local, Policy, PolicyEnv, PolicyKind, StackFailure};
use crate::stack::LabStack;

/// Maps tidepool's guarded stacks for a plain [`tidepool::Pool`].
///
/// A stand-in for `tidepool::stack::StackPool` while its builder has no
/// `reclaim_interval` (the lab must scale the period like QEMU 2021's): the
/// same stacks ([`GuardedStack`]), the same caps as `StackPool`'s defaults
/// (the map-count budget as `max_live` and `max_idle`), tidepool's reclaim
/// and pressure response; without `StackPool`'s purge of idle pages and its
/// drain-and-retry on `ENOMEM`.
#[derive(Debug)]
pub struct GuardedStacks {
    usable_size: usize,
}

impl Manage for GuardedStacks {
    type Item = GuardedStack;
    type Error = StackError;

    fn create(&self) -> Result<GuardedStack, StackError> {
        GuardedStack::new(self.usable_size)
    }
}

/// tidepool's pool of stacks.
#[derive(Debug)]
pub struct Tidepool {
    pool: Arc<Pool<GuardedStacks>>,
}

impl Tidepool {
    /// A pool of `env.stack_size`-byte stacks reclaiming every
    /// `env.reclaim_interval`, capped by the map-count budget.
    ///
    /// # Errors
    ///
    /// If tidepool refuses the settings.
    pub fn new(env: &PolicyEnv) -> Result<Self, String> {
        let budget = MapBudget::with_max_map_count(env.max_map_count as usize).stacks();
        let pool = Pool::builder(GuardedStacks {
            usable_size: env.stack_size,
        })
        .max_live(budget.max(1))
        .max_idle(budget.max(tidepool::DEFAULT_BATCH_SIZE))
        .reclaim_interval(env.reclaim_interval)
        .build()
        .map_err(|e| e.to_string())?;
        Ok(Tidepool {
            pool: Arc::new(pool),
        })
    }

    /// The pool, for its own statistics.
    pub fn pool(&self) -> &Pool<GuardedStacks> {
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
        let stats = self.pool.stats();
        Counts {
            created: stats.created,
            destroyed: stats.destroyed + stats.detached,
        }
    }
}

struct TidepoolLocal<'a> {
    pool: &'a Arc<Pool<GuardedStacks>>,
}

impl Local for TidepoolLocal<'_> {
    fn get(&mut self) -> Result<LabStack, StackFailure> {
        self.pool
            .get_owned()
            .map(LabStack::Tidepool)
            .map_err(|e| StackFailure {
                message: e.to_string(),
            })
    }

    fn put(&mut self, stack: LabStack) {
        // A pooled stack goes back to its pool when dropped, on this thread.
        drop(stack);
    }
}
