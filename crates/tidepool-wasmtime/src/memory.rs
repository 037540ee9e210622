//! One fiber stack handed to wasmtime: a [`StackMemory`] that is either lent
//! by the pool or mapped for this fiber alone.

use std::fmt;
use std::ops::Range;

use tidepool::stack::{GuardedStack, PooledStack};
use wasmtime::StackMemory;

/// A fiber stack given to wasmtime by a
/// [`PooledStackCreator`](crate::PooledStackCreator).
///
/// wasmtime owns it while a store's fiber runs (and while the store keeps
/// it for its next async call) and drops it when done: a pooled stack then
/// goes back to its pool, on whichever thread the store is dropped; an
/// unpooled one is unmapped.
///
/// ```text
///  guard_range()        range()                                  top()
///  │ guard (PROT_NONE) │ usable (RW)       ◄── the fiber grows down ── │
///  └───────────────────┴──────────────────────────────────────────────┘
/// ```
pub struct PooledFiberStack {
    stack: Source,
}

enum Source {
    /// Lent by the pool; dropping it returns it.
    Pooled(PooledStack),
    /// Mapped for one fiber (a size larger than the pool's);
    /// dropping it unmaps it.
    Unpooled(GuardedStack),
}

impl PooledFiberStack {
    pub(crate) fn pooled(stack: PooledStack) -> Self {
        Self {
            stack: Source::Pooled(stack),
        }
    }

    pub(crate) fn unpooled(stack: GuardedStack) -> Self {
        Self {
            stack: Source::Unpooled(stack),
        }
    }

    /// Whether this stack came from the pool (and goes back to it on drop).
    pub fn is_pooled(&self) -> bool {
        matches!(self.stack, Source::Pooled(_))
    }

    /// The stack's mapping: its addresses and sizes.
    pub fn stack(&self) -> &GuardedStack {
        match &self.stack {
            Source::Pooled(stack) => stack,
            Source::Unpooled(stack) => stack,
        }
    }
}

// SAFETY: wasmtime's contract, point by point:
// * page-aligned, a whole number of pages: `GuardedStack` maps whole pages
//   from a page-aligned start, so `top`, `range` and `guard_range` all begin
//   and end on page boundaries;
// * a guard page: the `guard_size` bytes below `bottom` are PROT_NONE for
//   the mapping's whole life, and `guard_range` reports exactly them, so
//   wasmtime's signal handler recognises an overflow of this stack;
// * owned by wasmtime while it holds this value: a `PooledStack` is lent to
//   one holder at a time and the pool touches its pages again (purge,
//   reuse, unmap) only after it is dropped; an unpooled `GuardedStack` is
//   ours alone and unmapped on drop;
// * `Send + Sync`: both stack types are (an owned address range; `&self`
//   only reads its bounds).
unsafe impl StackMemory for PooledFiberStack {
    fn top(&self) -> *mut u8 {
        self.stack().top().as_ptr()
    }

    fn range(&self) -> Range<usize> {
        self.stack().usable()
    }

    fn guard_range(&self) -> Range<*mut u8> {
        let stack = self.stack();
        stack.limit().as_ptr()..stack.bottom().as_ptr()
    }
}

impl fmt::Debug for PooledFiberStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledFiberStack")
            .field("pooled", &self.is_pooled())
            .field("stack", self.stack())
            .finish()
    }
}
