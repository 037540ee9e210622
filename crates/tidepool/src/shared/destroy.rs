//! The one path by which a pool's objects end: [`Shared::destroy_all`].
//! Every destruction (refused donations, reclaim, pressure, drain, thread
//! exit, pool drop, discarded guards) goes through it, so the accounting is
//! written once: each object is counted as destroyed, and its `max_live`
//! place given back, after its `destroy` (or its batch's `destroy_batch`)
//! returns *or unwinds*.
//!
//! A batch of two or more objects goes to the manager's `destroy_batch` in
//! one call (a stack manager unmaps a whole slab with one `munmap`); a lone
//! object to `destroy`. A chunk of the destroy queue is one batch, all its
//! queued batches together (see [`merge`]).

use super::Shared;
use crate::callbacks::{Caught, Site};
use crate::Manage;

impl<M: Manage> Shared<M> {
    /// Destroys every object of `batches`, a batch per `destroy_batch`
    /// call, even if some calls panic (caught into `caught`, for the caller
    /// to settle once its work is done). Returns how many.
    pub(crate) fn destroy_all(
        &self,
        batches: impl IntoIterator<Item = Vec<M::Item>>,
        caught: &mut Caught,
    ) -> usize {
        let callbacks = self.callbacks();
        let local = self.local();
        let mut total = 0;
        for mut batch in batches {
            let n = batch.len();
            match n {
                0 => continue,
                1 => callbacks.destroy(batch.pop().expect("one object"), caught),
                _ => callbacks.destroy_batch(batch, caught),
            }
            total += n;
            match &local {
                Some(slot) => slot.count_destroyed(n as u64),
                None => self.counters.destroyed.add(n as u64),
            }
            // Only now are the resources gone: a `create` under `max_live`
            // may take their places.
            for _ in 0..n {
                self.release_place();
            }
        }
        total
    }

    /// Destroys every object of `batches`, then settles the panics at
    /// `site`. Returns how many.
    pub(crate) fn destroy_batches(&self, batches: Vec<Vec<M::Item>>, site: Site) -> usize {
        if batches.is_empty() {
            return 0;
        }
        let mut caught = Caught::default();
        let n = self.destroy_all(batches, &mut caught);
        self.settle(caught, site);
        n
    }

    /// Queues `batches`, which the pool decided to destroy, and runs up to
    /// `chunks` chunks of the destroy queue on this thread
    /// (`usize::MAX`: until it is empty), if a permit is free (see
    /// `teardown.rs`). Panics are settled at `site`. Returns how many
    /// objects were queued.
    pub(crate) fn tear_down(&self, batches: Vec<Vec<M::Item>>, chunks: usize, site: Site) -> usize {
        let n = if batches.is_empty() {
            0
        } else {
            self.teardown.push(batches)
        };
        self.run_teardown(chunks, false, site);
        n
    }

    /// Runs up to `chunks` chunks of the destroy queue here (with `wait`,
    /// waiting for a permit), then settles panics at `site`; wakes the
    /// reclaimer for work it left behind. Returns how many objects it
    /// destroyed.
    pub(crate) fn run_teardown(&self, chunks: usize, wait: bool, site: Site) -> usize {
        if self.teardown.queued() == 0 {
            return 0;
        }
        let mut caught = Caught::default();
        let run = self.teardown.run(chunks, wait, |chunk| {
            self.destroy_all([merge(chunk)], &mut caught)
        });
        if run.left_behind {
            self.wake_for_teardown();
        }
        self.settle(caught, site);
        run.destroyed
    }

    /// The hook a `get` at `max_live` calls before it gives up
    /// (`at_limit.rs`): finishes the destroy queue, so the places of the
    /// objects in it come free. Returns whether any object was queued or
    /// being destroyed.
    #[cold]
    pub(crate) fn flush_pending_destroys(&self) -> bool {
        if self.teardown.destroying() == 0 {
            return false;
        }
        self.flush_teardown(Site::Caller);
        true
    }

    /// Destroys everything in the destroy queue before returning, on this
    /// thread and the others running it (waiting for a permit if all are
    /// taken). Returns how many objects this thread destroyed. A `get` at
    /// `max_live` calls this before failing; so may anything else that
    /// needs the places back (a live-limit credit, say).
    pub(crate) fn flush_teardown(&self, site: Site) -> usize {
        self.run_teardown(usize::MAX, true, site)
    }

    /// Work was left in the queue: the reclaimer finishes it (the next
    /// callers' slow paths run a chunk each too, see `upkeep`).
    fn wake_for_teardown(&self) {
        #[cfg(not(loom))]
        if self.config.background && self.teardown.needs_wake() {
            self.wake_reclaimer(0);
        }
    }

    /// Ends a guard by destroying its object. A panic from `destroy`
    /// reaches the caller, unless its thread is already unwinding.
    #[cold]
    pub(crate) fn discard(&self, item: M::Item) {
        self.counters.discarded.add(1);
        let mut caught = Caught::default();
        self.destroy_all([vec![item]], &mut caught);
        self.settle(caught, Site::Caller);
    }

    /// Ends a guard by letting its object go.
    pub(crate) fn count_detach(&self) {
        self.counters.detached.add(1);
        self.release_place();
    }
}

/// A chunk of the destroy queue as one batch, for one `destroy_batch`
/// call: batches that were queued apart (each cache's overflow, say) may
/// hold the two parts of one stack slab, which the manager can then unmap
/// whole (one `munmap`) rather than release part now (`madvise`) and unmap
/// later. The chunk's objects are destroyed all the same; only the
/// callback's granularity changes.
fn merge<T>(mut chunk: Vec<Vec<T>>) -> Vec<T> {
    if chunk.len() == 1 {
        return chunk.pop().expect("one batch");
    }
    let mut all = Vec::with_capacity(chunk.iter().map(Vec::len).sum());
    chunk.into_iter().for_each(|b| all.extend(b));
    all
}
