//! The depot's loose place: one idle object held beside the lock, when the
//! object is small enough to cost the depot nothing.
//!
//! The place is one word. It holds an `Option<T>` when that fits in a word
//! (a `Box`, a reference-counted or non-null pointer: types with a niche),
//! and nothing for any other `T`: a pool of big objects by value must not
//! carry one inline in its shared state, nor copy it when the pool is built.
//! For those, [`replace`](Loose::replace) gives the object back and the
//! depot puts it on a batch as before.

use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};

/// One word that holds an `Option<T>` when [`Loose::FITS`].
pub(crate) struct Loose<T> {
    /// With `FITS`: an initialised `Option<T>`, from `new` on. Without:
    /// never written nor read.
    word: MaybeUninit<usize>,
    /// Owns the `T` the word may hold (drop check, `Send`, `Sync`).
    _owns: PhantomData<T>,
}

impl<T> Loose<T> {
    /// Whether an `Option<T>` fits in the word, size and alignment.
    const FITS: bool = size_of::<Option<T>>() <= size_of::<usize>()
        && align_of::<Option<T>>() <= align_of::<usize>();

    pub(crate) fn new() -> Self {
        let mut word = MaybeUninit::<usize>::uninit();
        if Self::FITS {
            // SAFETY: `FITS`: an `Option<T>` fits in the word and is aligned
            // for it, and the word is ours.
            unsafe { word.as_mut_ptr().cast::<Option<T>>().write(None) };
        }
        Self {
            word,
            _owns: PhantomData,
        }
    }

    /// The `Option<T>` in the word, if `T` fits.
    fn place(&mut self) -> Option<&mut Option<T>> {
        if !Self::FITS {
            return None;
        }
        // SAFETY: `FITS`, so `new` wrote an `Option<T>` into the word, and
        // every access since (through this `&mut`) leaves one there; the
        // borrow is tied to `&mut self`.
        Some(unsafe { &mut *self.word.as_mut_ptr().cast::<Option<T>>() })
    }

    /// Takes the object held, if any.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.place()?.take()
    }

    /// Holds `item` and returns the object held before, if any; gives
    /// `item` back if `T` does not fit.
    pub(crate) fn replace(&mut self, item: T) -> Result<Option<T>, T> {
        match self.place() {
            Some(place) => Ok(place.replace(item)),
            None => Err(item),
        }
    }

    /// Whether an object is held.
    pub(crate) fn is_some(&mut self) -> bool {
        self.place().is_some_and(|place| place.is_some())
    }
}

impl<T> Drop for Loose<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl<T> fmt::Debug for Loose<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loose").field("fits", &Self::FITS).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_boxed_object_is_held_in_one_word_and_dropped_once() {
        use std::rc::Rc;
        const { assert!(Loose::<Box<u8>>::FITS) };
        assert_eq!(size_of::<Loose<Box<[u8; 256]>>>(), size_of::<usize>());
        let counted = Rc::new(());
        let mut loose = Loose::new();
        assert!(!loose.is_some());
        assert_eq!(loose.replace(Rc::clone(&counted)).ok(), Some(None));
        assert!(loose.is_some());
        let before = loose.replace(Rc::clone(&counted)).unwrap();
        assert!(before.is_some());
        drop(before);
        assert_eq!(Rc::strong_count(&counted), 2);
        drop(loose);
        assert_eq!(Rc::strong_count(&counted), 1, "dropped with the place");
    }

    #[test]
    fn big_or_nicheless_objects_are_given_back_and_cost_a_word() {
        const { assert!(!Loose::<[u8; 1 << 20]>::FITS) };
        // `Option<u64>` needs two words.
        const { assert!(!Loose::<u64>::FITS) };
        assert_eq!(size_of::<Loose<[u8; 1 << 20]>>(), size_of::<usize>());
        let mut loose = Loose::<u64>::new();
        assert_eq!(loose.replace(7), Err(7));
        assert_eq!(loose.take(), None);
        assert!(!loose.is_some());
    }
}
