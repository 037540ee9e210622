//! The one path by which a pool's objects end: [`Shared::destroy_all`].
//! Every destruction (refused donations, reclaim, pressure, drain, thread
//! exit, pool drop, discarded guards) goes through it, so the accounting is
//! written once: each object is counted as destroyed, and its `max_live`
//! place given back, after its `destroy` returns *or unwinds*.
//!
//! Today it calls `destroy` once per object; a batch callback or a per-pool
//! destroy queue would slot in here without touching the callers.

use super::Shared;
use crate::callbacks::{Caught, Site};
use crate::sync::atomic::Ordering;
use crate::Manage;

impl<M: Manage> Shared<M> {
    /// Destroys every object in `items`, even if some `destroy` calls panic
    /// (caught into `caught`, for the caller to settle once its work is
    /// done). Returns how many.
    pub(crate) fn destroy_all(
        &self,
        items: impl IntoIterator<Item = M::Item>,
        caught: &mut Caught,
    ) -> usize {
        let callbacks = self.callbacks();
        let mut n = 0;
        for item in items {
            callbacks.destroy(item, caught);
            n += 1;
            self.counters.destroyed.add(1);
            // Only now is the resource gone: a `create` under `max_live` may
            // take its place.
            self.counters.existing.fetch_sub(1, Ordering::Relaxed);
        }
        n
    }

    /// Destroys every object of `batches`, then settles the panics at
    /// `site`. Returns how many.
    pub(crate) fn destroy_batches(&self, batches: Vec<Vec<M::Item>>, site: Site) -> usize {
        if batches.is_empty() {
            return 0;
        }
        let mut caught = Caught::default();
        let n = self.destroy_all(batches.into_iter().flatten(), &mut caught);
        self.settle(caught, site);
        n
    }

    /// Ends a guard by destroying its object. A panic from `destroy`
    /// reaches the caller, unless its thread is already unwinding.
    #[cold]
    pub(crate) fn discard(&self, item: M::Item) {
        self.counters.discarded.add(1);
        let mut caught = Caught::default();
        self.destroy_all(Some(item), &mut caught);
        self.settle(caught, Site::Caller);
    }

    /// Ends a guard by letting its object go.
    pub(crate) fn count_detach(&self) {
        self.counters.detached.add(1);
        self.counters.existing.fetch_sub(1, Ordering::Relaxed);
    }
}
