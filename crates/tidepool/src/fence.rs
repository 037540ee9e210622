//! The asymmetric fence pair: a cheap *light* fence on the owner's side and
//! a process-wide *heavy* fence (`membarrier(2)`) on the remote side.
//!
//! An owner that stores "busy" and then loads "revoked?" needs a full fence
//! between the two, unless the remote thread that stores "revoked" and then
//! loads "busy" runs a barrier on every running thread in between: then one
//! of the two always sees the other's store. The owner runs on every `get`
//! and `put`; the remote side runs when a pool closes or a cache is taken
//! over, so the cost goes where it is rare.
//!
//! Under loom and miri, which cannot run `membarrier`, both halves are
//! `SeqCst` fences: the same guarantee, so the models check the protocols
//! built on the pair. This sits above [`crate::os`] (which makes the call)
//! and [`crate::sync`] (whose fence loom swaps in).

/// The owner's half: keeps the compiler from moving the owner's "busy"
/// store after its "revoked?" load. The CPU may still reorder them;
/// [`heavy_fence`] on the remote side covers that.
#[inline(always)]
pub(crate) fn light_fence() {
    #[cfg(any(loom, miri))]
    crate::sync::atomic::fence(crate::sync::atomic::Ordering::SeqCst);
    #[cfg(not(any(loom, miri)))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// The remote half: a barrier on every running thread of the process.
/// `false` where the OS offers none.
pub(crate) fn heavy_fence() -> bool {
    #[cfg(any(loom, miri))]
    {
        crate::sync::atomic::fence(crate::sync::atomic::Ordering::SeqCst);
        true
    }
    #[cfg(all(not(any(loom, miri)), target_os = "linux"))]
    return crate::os::membarrier::heavy_fence();
    #[cfg(all(not(any(loom, miri)), not(target_os = "linux")))]
    return false;
}

/// Whether [`heavy_fence`] works here, decided once per process: code that
/// relies on the pair must check this before it skips the light side's
/// hardware fence. Models always have the pair.
pub(crate) fn heavy_fence_available() -> bool {
    #[cfg(any(loom, miri))]
    return true;
    #[cfg(all(not(any(loom, miri)), target_os = "linux"))]
    return crate::os::membarrier::available();
    #[cfg(all(not(any(loom, miri)), not(target_os = "linux")))]
    return false;
}
