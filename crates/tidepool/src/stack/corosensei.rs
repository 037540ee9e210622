//! Pooled stacks as corosensei stacks (feature `corosensei`).
//!
//! `Coroutine::with_stack` wants an owned `S: Stack + 'static`:
//! [`PooledStack`] is one (it keeps its pool alive and goes back to it
//! on drop), and so is a detached [`GuardedStack`] (unmapped on drop).

use std::ptr::NonNull;

use corosensei::stack::{Stack, StackPointer, MIN_STACK_SIZE, STACK_ALIGNMENT};

use crate::stack::{GuardedStack, PooledStack};

// Page alignment implies the stack alignment, and one page is at least the
// minimum stack: corosensei's requirements hold for every size we map.
const _: () = assert!(STACK_ALIGNMENT <= 4096 && MIN_STACK_SIZE <= 4096);

fn pointer(p: NonNull<u8>) -> StackPointer {
    p.addr()
}

// SAFETY: `base` is the top of the mapping and `limit` its bottom, guard
// included; both are page-aligned (page size >= 4096 >= STACK_ALIGNMENT);
// below `bottom()` lies a PROT_NONE guard page; the usable part is at least
// one page (>= MIN_STACK_SIZE) and stays mapped, readable and writable while
// `self` lives (a purge releases pages only of stacks idle in the pool).
unsafe impl Stack for GuardedStack {
    #[inline]
    fn base(&self) -> StackPointer {
        pointer(self.top())
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        pointer(GuardedStack::limit(self))
    }
}

// SAFETY: as for `GuardedStack`, which a `PooledStack` holds for its whole
// life.
unsafe impl Stack for PooledStack {
    #[inline]
    fn base(&self) -> StackPointer {
        Stack::base(&**self)
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        Stack::limit(&**self)
    }
}
