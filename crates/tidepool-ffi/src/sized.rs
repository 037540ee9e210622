//! Sized structs: how a caller's struct of one version meets this library's
//! struct of another.
//!
//! Every struct that crosses the boundary by pointer starts with `size_t
//! size`, set by the caller to `sizeof` the struct it was compiled with (the
//! Linux `openat2`/`clone3`/`sched_setattr` convention, also mimalloc's and
//! Vulkan's). Fields are only ever appended, so a size names a version:
//!
//! * **In** (a config): a smaller struct from an older header is accepted if
//!   its size is one of the versions listed; the fields it lacks take their
//!   defaults (zero). A bigger struct from a newer header is accepted only if
//!   every byte past this library's struct is zero, i.e. the caller asked for
//!   nothing this library does not know; otherwise `TIDEPOOL_ERR_STRUCT_SIZE`
//!   (Linux's `E2BIG`). Any other size is refused the same way.
//! * **Out** (stats): the library writes the fields that fit in the caller's
//!   size (at least the first version's), zeroes any bytes of a bigger struct
//!   that it does not know, and sets `size` to how many bytes it filled.

use std::mem::{size_of, MaybeUninit};

use crate::status::{tidepool_status::TIDEPOOL_ERR_STRUCT_SIZE, Error, Result};

/// A `#[repr(C)]` struct that starts with `size: usize` and for which all
/// zero bytes are a valid value.
///
/// # Safety
///
/// Implementors must be `#[repr(C)]`, have a `usize` as their first field,
/// and be valid when every byte is zero (integers, raw pointers and
/// `Option`s of function pointers qualify).
pub(crate) unsafe trait SizedStruct: Sized {
    /// What the struct is called in messages, e.g. `"tidepool_config"`.
    const NAME: &'static str;
    /// The sizes of every earlier version, smallest first; the current
    /// version, `size_of::<Self>()`, is implied.
    const VERSIONS: &'static [usize];

    /// A value with every field zero.
    fn zeroed() -> Self {
        // SAFETY: the implementor promises all-zero bytes are a valid value.
        unsafe { MaybeUninit::<Self>::zeroed().assume_init() }
    }
}

/// Reads the caller's `size` field.
///
/// # Safety
///
/// `src` must be non-null, aligned for `usize` and readable for one.
unsafe fn size_field<T: SizedStruct>(src: *const T) -> usize {
    // SAFETY: per the contract; the first field of `T` is a `usize`.
    unsafe { src.cast::<usize>().read() }
}

/// Copies a caller's input struct of whatever version into this library's
/// `T`, fields it lacks zeroed.
///
/// # Safety
///
/// `src` must be non-null, aligned, and readable for the number of bytes its
/// own `size` field says.
pub(crate) unsafe fn read_in<T: SizedStruct>(src: *const T) -> Result<T> {
    // SAFETY: per this function's contract.
    let size = unsafe { size_field(src) };
    let ours = size_of::<T>();
    let known = T::VERSIONS.contains(&size) || size == ours;
    if !known && size <= ours {
        return Err(size_error::<T>(
            size,
            "is not the size of any version of it",
        ));
    }
    if size > ours {
        // SAFETY: the caller's struct is `size` bytes long.
        let tail = unsafe { std::slice::from_raw_parts(src.cast::<u8>().add(ours), size - ours) };
        if let Some(at) = tail.iter().position(|&b| b != 0) {
            return Err(size_error::<T>(
                size,
                format_args!(
                    "is larger than this library's {ours} bytes and byte {} past them is \
                     not zero: the caller sets a field this version of tidepool does not know",
                    ours + at
                ),
            ));
        }
    }
    let mut value = T::zeroed();
    let n = size.min(ours);
    // SAFETY: `n` bytes are readable at `src` (it is `size` bytes long) and
    // writable at `value` (`n <= size_of::<T>()`); any bytes are a valid
    // prefix of `T`'s fields, which are plain integers, pointers and
    // optional function pointers (the caller vouches for those values).
    unsafe {
        std::ptr::copy_nonoverlapping(src.cast::<u8>(), (&raw mut value).cast::<u8>(), n);
    }
    Ok(value)
}

/// Writes `value` into the caller's output struct of whatever version.
///
/// # Safety
///
/// `dst` must be non-null, aligned, readable for a `usize`, and writable for
/// the number of bytes its own `size` field says.
pub(crate) unsafe fn write_out<T: SizedStruct>(dst: *mut T, mut value: T) -> Result<()> {
    // SAFETY: per this function's contract.
    let size = unsafe { size_field(dst) };
    let first = T::VERSIONS.first().copied().unwrap_or(size_of::<T>());
    if size < first {
        return Err(size_error::<T>(
            size,
            format_args!("is smaller than its first version ({first} bytes)"),
        ));
    }
    let ours = size_of::<T>();
    let n = size.min(ours);
    // SAFETY: `value`'s first field is its `usize` size.
    unsafe { (&raw mut value).cast::<usize>().write(n) };
    // SAFETY: `n` bytes of `value` are readable; the caller's struct is
    // `size >= n` bytes long and writable; past ours, its bytes are zeroed.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const value).cast::<u8>(), dst.cast::<u8>(), n);
        if size > ours {
            std::ptr::write_bytes(dst.cast::<u8>().add(ours), 0, size - ours);
        }
    }
    Ok(())
}

fn size_error<T: SizedStruct>(size: usize, why: impl std::fmt::Display) -> Error {
    Error::new(
        TIDEPOOL_ERR_STRUCT_SIZE,
        format_args!(
            "{}.size = {size} {why} (this library knows sizes {:?} and {})",
            T::NAME,
            T::VERSIONS,
            size_of::<T>()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Debug, PartialEq)]
    struct Demo {
        size: usize,
        a: u64,
        b: u64,
    }

    // SAFETY: `#[repr(C)]`, `usize` first, integers only.
    unsafe impl SizedStruct for Demo {
        const NAME: &'static str = "demo";
        const VERSIONS: &'static [usize] = &[16];
    }

    #[test]
    fn an_older_struct_gets_defaults_for_what_it_lacks() {
        let old: [u64; 2] = [16, 7];
        // SAFETY: 16 readable bytes, aligned.
        let got = unsafe { read_in(old.as_ptr().cast::<Demo>()) }.unwrap();
        assert_eq!(
            got,
            Demo {
                size: 16,
                a: 7,
                b: 0
            }
        );
    }

    #[test]
    fn a_newer_struct_is_accepted_only_with_a_zero_tail() {
        let mut new: [u64; 4] = [32, 1, 2, 0];
        // SAFETY: 32 readable bytes, aligned.
        let got = unsafe { read_in(new.as_ptr().cast::<Demo>()) }.unwrap();
        assert_eq!((got.a, got.b), (1, 2));
        new[3] = 9;
        // SAFETY: as above.
        let err = unsafe { read_in(new.as_ptr().cast::<Demo>()) }.unwrap_err();
        assert_eq!(err.status, TIDEPOOL_ERR_STRUCT_SIZE);
        assert!(err.message.contains("byte 24"), "{}", err.message);
    }

    #[test]
    fn sizes_between_versions_and_too_small_are_refused() {
        for size in [0u64, 8, 12, 20] {
            let raw: [u64; 3] = [size, 0, 0];
            // SAFETY: 24 readable bytes, aligned.
            let err = unsafe { read_in(raw.as_ptr().cast::<Demo>()) }.unwrap_err();
            assert_eq!(err.status, TIDEPOOL_ERR_STRUCT_SIZE, "size {size}");
        }
    }

    #[test]
    fn output_fills_what_fits_and_zeroes_what_it_does_not_know() {
        let value = || Demo {
            size: 0,
            a: 5,
            b: 6,
        };
        let mut old: [u64; 2] = [16, 0];
        // SAFETY: 16 writable bytes, aligned.
        unsafe { write_out(old.as_mut_ptr().cast::<Demo>(), value()) }.unwrap();
        assert_eq!(old, [16, 5]);

        let mut new: [u64; 4] = [32, 0, 0, 0xff];
        // SAFETY: 32 writable bytes, aligned.
        unsafe { write_out(new.as_mut_ptr().cast::<Demo>(), value()) }.unwrap();
        assert_eq!(new, [24, 5, 6, 0]);

        let mut tiny: [u64; 2] = [8, 0];
        // SAFETY: 16 writable bytes.
        let err = unsafe { write_out(tiny.as_mut_ptr().cast::<Demo>(), value()) }.unwrap_err();
        assert_eq!(err.status, TIDEPOOL_ERR_STRUCT_SIZE);
        assert_eq!(tiny, [8, 0], "nothing written");
    }
}
