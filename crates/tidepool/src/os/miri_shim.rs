//! What [`reserve`](super::reserve), [`make_writable`](super::make_writable),
//! [`release_pages`](super::release_pages) and [`unmap`](super::unmap) do
//! under miri (`bin/sanitize.sh`), which runs no `mmap` with `PROT_NONE`, no
//! `mprotect` and no `madvise`.
//!
//! A reservation is one zeroed, page-aligned heap allocation; opening pages
//! does nothing (they are readable already: the shim cannot fault on a
//! guard page, which only the native tests check); releasing pages zeroes
//! them, as `MADV_DONTNEED` does for private anonymous memory on Linux; and
//! unmapping frees the allocation, so it must be given exactly what one
//! `reserve` returned. That is stricter than `munmap` (which also takes a
//! part of a mapping), and it is what the stack slabs do: miri then checks
//! every slab's memory is freed exactly once, with its own bounds, and never
//! touched after.
//!
//! pre: as for the real functions, plus: `unmap` takes whole reservations.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;

use super::page_size;

fn layout(len: usize) -> io::Result<Layout> {
    Layout::from_size_align(len, page_size())
        .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// A zeroed, page-aligned allocation of `len` bytes.
pub(super) fn reserve(len: usize) -> io::Result<NonNull<u8>> {
    let layout = layout(len)?;
    // SAFETY: `len` is non-zero (checked by the caller).
    let raw = unsafe { alloc::alloc_zeroed(layout) };
    NonNull::new(raw).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// Zeroes the pages, as `MADV_DONTNEED` leaves them.
///
/// # Safety
///
/// pre: the region lies inside one live reservation and nothing borrows it.
pub(super) unsafe fn release_pages(start: NonNull<u8>, len: usize) {
    // SAFETY: by the contract, `len` bytes from `start` are ours to write.
    unsafe { start.as_ptr().write_bytes(0, len) };
}

/// Frees a whole reservation.
///
/// # Safety
///
/// pre: `start` and `len` are exactly what one [`reserve`] returned and was
/// given, not yet freed, and nothing touches the region again.
pub(super) unsafe fn unmap(start: NonNull<u8>, len: usize) -> io::Result<()> {
    let layout = layout(len)?;
    // SAFETY: by the contract, allocated by `reserve` with this layout.
    unsafe { alloc::dealloc(start.as_ptr(), layout) };
    Ok(())
}
