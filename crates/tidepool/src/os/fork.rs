//! `pthread_atfork(3)`: handlers that run around `fork(2)`.
//!
//! `prepare` runs in the forking thread just before the fork, `parent` in
//! the parent and `child` in the child just after it (in the child, only
//! the forking thread exists). Handlers registered later run their
//! `prepare` earlier and their `parent`/`child` later, like nested locks.
//!
//! pre: the handlers must not unwind (they are `extern "C"`: a panic would
//! abort); `child` should do little beyond releasing locks and resetting
//! flags.

use std::io;

/// Registers the three handlers for every later `fork` of this process.
pub(crate) fn at_fork(
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) -> io::Result<()> {
    // Miri cannot fork (nor run `pthread_atfork`): with no fork, there is
    // nothing for the handlers to do.
    #[cfg(miri)]
    let rc = {
        let _ = (prepare, parent, child);
        0
    };
    super::fault::check(super::fault::Call::Atfork)?;
    #[cfg(not(miri))]
    // SAFETY: three plain function pointers with the C ABI that `pthread_atfork`
    // expects; they live for the whole program.
    let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}
