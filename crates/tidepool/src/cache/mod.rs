//! The thread cache layer: what a `get` or `put` touches on the fast path.
//!
//! * [`thread`]: thread ids and the thread-exit hook.
//! * [`table`]: a pool's caches, indexed by thread id.
//! * [`slot`]: one thread's cache in one pool, and the proof of ownership
//!   ([`LocalSlot`]) needed to touch it.
//! * [`local`]: the owner-only pair of batches.
//! * [`credit`]: the slot's share of the pool's `max_live` budget.

pub(crate) mod credit;
pub(crate) mod local;
pub(crate) mod slot;
pub(crate) mod table;
pub(crate) mod thread;
pub(crate) mod words;

pub(crate) use slot::{IfBusy, LocalSlot, Slot};
pub(crate) use table::{SlotTable, Walk};
pub(crate) use thread::ThreadExit;
