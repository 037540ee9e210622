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

impl LabStack {
    /// This stack, laid down in memory the way its caller will copy it:
    /// what every policy's [`Local::get`](crate::policy::Local::get)
    /// returns.
    ///
    /// A `Local::get` is called through a trait object and returns its
    /// `Result` through memory; the caller copies the three-word stack out
    /// in 16-byte pieces. A stack built from registers (tidepool's
    /// two-word handle, then its tag) is stored a word at a time, and the
    /// caller's first 16-byte load then waits until both words it spans
    /// have left the store buffer (a store-forwarding stall). A stack
    /// popped from a `Vec` (the QEMU policies') is copied 16 bytes at a
    /// time already. That one load is a harness artefact, not a policy's
    /// cost (`fio_ab` and `bin/perf-by-chunk.py` show it; the figures are
    /// in `tidepool::performance`), so every policy's stack comes back
    /// laid out this way.
    #[inline(always)]
    pub fn lent(self) -> Self {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            const _: () = assert!(std::mem::size_of::<LabStack>() == 24);
            let stack = std::mem::ManuallyDrop::new(self);
            let words = std::ptr::from_ref::<LabStack>(&stack).cast::<*const u8>();
            let mut out = std::mem::MaybeUninit::<LabStack>::uninit();
            let dst = out.as_mut_ptr().cast::<u8>();
            // SAFETY: a `LabStack` is three words (asserted above): a
            // `DefaultStack`'s three word-sized fields, or a `PooledStack`'s
            // two words beside the zero that marks the variant in the
            // `DefaultStack`'s non-zero `base`; either way no byte is
            // padding, so each word is initialised and may be read as a
            // pointer, provenance included. `dst` is valid for the 24
            // bytes written. The value read is forgotten (`ManuallyDrop`)
            // and `out` holds its bytes, so it is owned once.
            unsafe {
                let (w0, w1, w2) = (words.read(), words.add(1).read(), words.add(2).read());
                std::arch::asm!(
                    "movq {a}, {w0}",
                    "movq {b}, {w1}",
                    "punpcklqdq {a}, {b}",
                    "movups xmmword ptr [{dst}], {a}",
                    "mov qword ptr [{dst} + 16], {w2}",
                    w0 = in(reg) w0,
                    w1 = in(reg) w1,
                    w2 = in(reg) w2,
                    dst = in(reg) dst,
                    a = out(xmm_reg) _,
                    b = out(xmm_reg) _,
                    options(nostack, preserves_flags),
                );
                out.assume_init()
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        self
    }
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

    /// `lent` hands back the same stack, of either kind, owned once: a
    /// pooled one goes back to its pool exactly once, a fresh one still
    /// runs a request.
    #[test]
    fn a_lent_stack_is_the_same_stack_owned_once() {
        let fresh = LabStack::Fresh(DefaultStack::new(4096).unwrap());
        let (base, limit) = (fresh.base(), fresh.limit());
        let fresh = fresh.lent();
        assert!(matches!(fresh, LabStack::Fresh(_)));
        assert_eq!((fresh.base(), fresh.limit()), (base, limit));
        let (_, fresh) = start(fresh, 1, Touch::Small).complete();
        assert_eq!(fresh.base(), base);

        let pool = tidepool::stack::StackPool::new(4096).unwrap();
        let pooled = LabStack::Pooled(pool.get().unwrap());
        let (base, limit) = (pooled.base(), pooled.limit());
        let pooled = pooled.lent();
        assert!(matches!(pooled, LabStack::Pooled(_)));
        assert_eq!((pooled.base(), pooled.limit()), (base, limit));
        assert_eq!(pool.stats().pool.live, 1);
        drop(pooled);
        let stats = pool.stats().pool;
        assert_eq!((stats.live, stats.idle, stats.created), (0, 1, 1));
    }

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
