//! Moving an object between a batch and a guard in whole machine words.
//!
//! A round trip moves the object twice through memory: `pop` copies it from
//! the batch into the caller's guard, the guard's drop copies it back. Left
//! to itself, LLVM copies a 24-byte object (a `Vec`, a stack and its slab set) as
//! 8 + 16 bytes in one place and 16 + 8 in another. A load that spans two
//! earlier stores cannot take its data from the store buffer: it waits until
//! both stores reach the cache (a store-forwarding stall, some 10-20 cycles
//! on the machines measured). A get right after a put hits that twice per
//! round trip, on the batch slot and on the guard.
//!
//! Objects whose size is a small multiple of a word and that are word-aligned
//! are therefore copied here one word at a time, each load matching one
//! earlier store exactly. The loads and stores are volatile only so that
//! LLVM keeps them word-sized (it would merge adjacent ones into a vector
//! move again); the words are `MaybeUninit`, so padding and pointer
//! provenance are copied as they are. On 64-bit x86, `move_to` does the
//! same word moves in one `asm!` block instead ([`move_words_asm`]), which
//! keeps the guard's drop small enough to inline. Every other object is
//! moved with a plain `ptr::read`/`write`.
//!
//! The other direction, a value handed to the caller, is the caller's
//! code: it copies anything bigger than two words in 16-byte pieces, so a
//! handle handed out by value is kept to two words, which are moved in
//! registers (`stack::PooledStack`). In short: loads no wider than the
//! stores they read.

use std::mem::{align_of, size_of, MaybeUninit};
use std::ptr;

type Word = MaybeUninit<usize>;

/// Largest object moved word by word: four words (a `Vec` is three).
const MAX_WORDS: usize = 4;
const _: () = assert!(MAX_WORDS == 4, "move_words_asm copies at most four words");

/// Whether `T` is moved word by word.
const fn by_words<T>() -> bool {
    size_of::<T>() != 0
        && size_of::<T>() % size_of::<Word>() == 0
        && size_of::<T>() <= MAX_WORDS * size_of::<Word>()
        && align_of::<T>() >= align_of::<Word>()
}

/// Moves the object at `src` to `dst`.
///
/// # Safety
///
/// As for `ptr::copy_nonoverlapping(src, dst, 1)`: `src` is valid for reads
/// and `dst` for writes of one `T`, both aligned, not overlapping. The object
/// is moved: the caller treats `src` as uninitialised afterwards.
#[inline(always)]
pub(crate) unsafe fn move_to<T>(src: *const T, dst: *mut T) {
    #[cfg(all(
        target_arch = "x86_64",
        target_pointer_width = "64",
        not(miri),
        not(tidepool_sanitize)
    ))]
    if by_words::<T>() {
        // SAFETY: `src` and `dst` are valid, aligned, apart, for one `T`
        // (our caller's contract), and `T` is a whole number of aligned
        // words (`by_words`), so they are valid for that many words.
        return unsafe {
            move_words_asm(src.cast(), dst.cast(), size_of::<T>() / size_of::<Word>())
        };
    }
    if by_words::<T>() {
        let (src, dst) = (src.cast::<Word>(), dst.cast::<Word>());
        for i in 0..size_of::<T>() / size_of::<Word>() {
            // SAFETY: `T` is a whole number of words and word-aligned
            // (`by_words`), so word `i` lies inside both objects and is
            // aligned; `src` and `dst` are valid (our caller's promise).
            // A `MaybeUninit` word may hold padding or a pointer.
            unsafe { ptr::write_volatile(dst.add(i), ptr::read_volatile(src.add(i))) };
        }
    } else {
        // SAFETY: our caller's promise.
        unsafe { ptr::copy_nonoverlapping(src, dst, 1) };
    }
}

/// [`move_to`]'s word copy as one `asm!` block on x86-64: the same word
/// loads and stores as the volatile ones, but one opaque statement where
/// those are `2n`, which is what the inliner charges for. The guard's drop,
/// whose fast path ends in this copy, fits the default inline threshold
/// with it and not with the volatile copies, and a round trip runs faster
/// (`tidepool-bench`, `round_trip/tidepool`). Not under Miri, which cannot run it, nor under
/// ThreadSanitizer (`--cfg tidepool_sanitize`, set by `bin/sanitize.sh`),
/// which cannot see into it.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `words` aligned words,
/// not overlapping.
#[cfg(all(
    target_arch = "x86_64",
    target_pointer_width = "64",
    not(miri),
    not(tidepool_sanitize)
))]
#[inline(always)]
unsafe fn move_words_asm(src: *const Word, dst: *mut Word, words: usize) {
    /// One `asm!` block moving the words at the given byte offsets, each
    /// through the scratch register `t`.
    macro_rules! move_words {
        ($($offset:literal),+) => {
            std::arch::asm!(
                $(
                    concat!("mov {t}, qword ptr [{src} + ", $offset, "]"),
                    concat!("mov qword ptr [{dst} + ", $offset, "], {t}"),
                )+
                src = in(reg) src, dst = in(reg) dst, t = out(reg) _,
                options(nostack, preserves_flags),
            )
        };
    }
    // SAFETY: our caller's promise, for every block: each offset is below
    // `words` words. `t` is a scratch register; no flags, no stack.
    unsafe {
        match words {
            1 => move_words!(0),
            2 => move_words!(0, 8),
            3 => move_words!(0, 8, 16),
            _ => move_words!(0, 8, 16, 24),
        }
    }
}

/// Reads the object at `src` out, word by word when `T` allows.
///
/// # Safety
///
/// As for `ptr::read(src)`.
#[inline(always)]
pub(crate) unsafe fn read<T>(src: *const T) -> T {
    if !by_words::<T>() {
        // SAFETY: our caller's promise.
        return unsafe { ptr::read(src) };
    }
    let mut out = MaybeUninit::<T>::uninit();
    let (src, dst) = (src.cast::<Word>(), out.as_mut_ptr().cast::<Word>());
    for i in 0..size_of::<T>() / size_of::<Word>() {
        // SAFETY: as in `move_to`; `out` is a fresh local. Only the loads
        // are volatile: the words then live in registers, and the object
        // is stored wherever the caller puts it a word at a time.
        unsafe { dst.add(i).write(ptr::read_volatile(src.add(i))) };
    }
    // SAFETY: every byte of `out` was copied from the object at `src`.
    unsafe { out.assume_init() }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// Moves `value` out through `read`, into a slot through `move_to`, and
    /// back out: what a get after a put does.
    fn round_trip<T>(value: T) -> T {
        let src = MaybeUninit::new(value);
        // SAFETY: `src` holds a value, read out once and never used again.
        let mid = unsafe { read(src.as_ptr()) };
        let mid = MaybeUninit::new(mid);
        let mut dst = MaybeUninit::<T>::uninit();
        // SAFETY: `mid` holds a value; `dst` is a distinct local; `mid` is
        // not used again.
        unsafe {
            move_to(mid.as_ptr(), dst.as_mut_ptr());
            dst.assume_init()
        }
    }

    #[test]
    fn word_sized_objects_take_the_word_path_and_others_do_not() {
        assert!(by_words::<Vec<u8>>());
        assert!(by_words::<(u8, u64)>(), "padding is copied as it is");
        assert!(by_words::<[usize; 4]>());
        assert!(!by_words::<[usize; 5]>(), "too big: a plain move");
        assert!(!by_words::<[u8; 3]>());
        assert!(!by_words::<[u32; 3]>(), "not word-aligned");
        assert!(!by_words::<()>());
    }

    #[test]
    fn every_kind_of_object_arrives_whole() {
        let mut v = Vec::with_capacity(10);
        v.extend_from_slice(b"tide");
        let ptr = v.as_ptr();
        let v = round_trip(v);
        assert_eq!(
            (v.as_slice(), v.capacity(), v.as_ptr()),
            (&b"tide"[..], 10, ptr)
        );
        assert_eq!(round_trip((7u8, u64::MAX)), (7, u64::MAX));
        assert_eq!(round_trip([1usize, 2, 3, 4, 5]), [1, 2, 3, 4, 5]);
        assert_eq!(round_trip(*b"abc"), *b"abc");
        assert_eq!(round_trip(Box::new(9)), Box::new(9));
        round_trip(());
    }

    #[test]
    fn a_moved_object_is_dropped_exactly_once() {
        let drops = Rc::new(Cell::new(0));
        struct Counted(Rc<Cell<u32>>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        assert!(by_words::<Counted>());
        let moved = round_trip(Counted(Rc::clone(&drops)));
        assert_eq!(drops.get(), 0);
        drop(moved);
        assert_eq!(drops.get(), 1);
    }
}
