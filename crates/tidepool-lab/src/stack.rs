//! The resource every policy pools: a guarded coroutine stack, and the
//! request (a corosensei coroutine) that runs on it.
//!
//! A seed policy's stack is what QEMU's `qemu_alloc_stack` makes: an `mmap`
//! of the stack plus one page, the lowest page then `mprotect`ed to
//! `PROT_NONE` as the guard (corosensei's [`DefaultStack`] does exactly
//! this), costing two VMAs. tidepool's is a [`PooledStack`] from a
//! [`StackPool`](tidepool::stack::StackPool): the same layout, mapped by the
//! library. Both run the same request code ([`InFlight`]).

use std::hint::black_box;

use corosensei::stack::{DefaultStack, Stack, StackPointer};
use corosensei::{Coroutine, CoroutineResult, Yielder};
use tidepool::stack::PooledStack;

/// A stack, whoever made it.
pub enum LabStack {
    /// Mapped by corosensei, as QEMU maps its coroutine stacks; unmapped
    /// when dropped.
    Fresh(DefaultStack),
    /// Lent by a tidepool `StackPool`; goes back to it when dropped.
    Pooled(PooledStack),
}

impl std::fmt::Debug for LabStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            LabStack::Fresh(_) => "Fresh",
            LabStack::Pooled(_) => "Pooled",
        };
        f.debug_struct("LabStack")
            .field("kind", &kind)
            .field("base", &self.base())
            .finish()
    }
}

// SAFETY: both variants are corosensei stacks whose contracts hold for as
// long as they live; this only forwards to them.
unsafe impl Stack for LabStack {
    #[inline]
    fn base(&self) -> StackPointer {
        match self {
            LabStack::Fresh(s) => s.base(),
            LabStack::Pooled(s) => s.base(),
        }
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        match self {
            LabStack::Fresh(s) => s.limit(),
            LabStack::Pooled(s) => s.limit(),
        }
    }
}

/// How many bytes of its stack a request writes (and so makes resident):
/// the frames of real request handling. Chosen per scenario, the same for
/// every policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Touch {
    /// 256 bytes: fits the one-page stacks of `map-count`.
    Small,
    /// 16 KiB: four pages of a 1 MiB QEMU-sized stack.
    Large,
}

impl Touch {
    /// Bytes written on the stack by one request.
    pub fn bytes(self) -> usize {
        match self {
            Touch::Small => 256,
            Touch::Large => 16 * 1024,
        }
    }
}

type Co = Coroutine<(), (), u64, LabStack>;

/// A request in flight: a coroutine that ran until it submitted its "I/O"
/// and now waits, suspended, for the completion.
pub struct InFlight {
    co: Co,
}

// SAFETY: corosensei leaves `Send` to the user: a suspended coroutine may
// move to another thread if everything on its stack is `Send`. Ours holds a
// byte array, integers, and corosensei's own `Yielder` reference into the
// coroutine (which moves with it); no thread-locals, no `Rc`, no locks.
unsafe impl Send for InFlight {}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight").finish_non_exhaustive()
    }
}

fn body<const N: usize>(yielder: &Yielder<(), ()>, id: u64) -> u64 {
    // Request parsing: fill a frame-sized buffer (touches its pages).
    let mut frame = [0u8; N];
    frame.fill(id as u8);
    frame[0] = (id >> 8) as u8;
    black_box(&mut frame);
    // Submit the I/O and wait for its completion.
    yielder.suspend(());
    // Completion: a checksum over the frame, one byte per cache line.
    let frame = black_box(&frame);
    frame.iter().step_by(64).map(|&b| u64::from(b)).sum::<u64>() ^ id
}

/// Starts request `id` on `stack`: runs it until it submits its I/O.
///
/// # Panics
///
/// If the request returns before suspending, which the code above never does.
pub fn start(stack: LabStack, id: u64, touch: Touch) -> InFlight {
    let mut co: Co = match touch {
        Touch::Small => {
            Coroutine::with_stack(stack, move |y: &Yielder<(), ()>, ()| body::<256>(y, id))
        }
        Touch::Large => Coroutine::with_stack(stack, move |y: &Yielder<(), ()>, ()| {
            body::<{ 16 * 1024 }>(y, id)
        }),
    };
    match co.resume(()) {
        CoroutineResult::Yield(()) => InFlight { co },
        CoroutineResult::Return(_) => unreachable!("a request suspends once before it returns"),
    }
}

impl InFlight {
    /// Delivers the completion: runs the request to its end and gives its
    /// stack back, with the request's checksum.
    ///
    /// # Panics
    ///
    /// If the request suspends again, which the code above never does.
    pub fn complete(mut self) -> (u64, LabStack) {
        match self.co.resume(()) {
            CoroutineResult::Return(sum) => (sum, self.co.into_stack()),
            CoroutineResult::Yield(()) => unreachable!("a request suspends only once"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_runs_on_a_one_page_stack_and_gives_it_back() {
        let stack = LabStack::Fresh(DefaultStack::new(4096).unwrap());
        let base = stack.base();
        let req = start(stack, 7, Touch::Small);
        let (sum, stack) = req.complete();
        assert_eq!(stack.base(), base);
        // 256 bytes of 7 except byte 0 (= 7 >> 8 = 0): 4 sampled bytes of 7.
        assert_eq!(sum, (3 * 7) ^ 7);
    }

    #[test]
    fn a_request_can_complete_on_another_thread() {
        let stack = LabStack::Fresh(DefaultStack::new(64 * 1024).unwrap());
        let req = start(stack, 300, Touch::Large);
        let (sum, _stack) = std::thread::spawn(move || req.complete()).join().unwrap();
        let byte = u64::from(300u64 as u8);
        let first = u64::from((300u64 >> 8) as u8);
        assert_eq!(sum, (first + byte * (16 * 1024 / 64 - 1)) ^ 300);
    }
}
