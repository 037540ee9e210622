//! The dense store of the pools' heads ([`Head`](super::head::Head)): cells
//! of [`CELL`] bytes, carved from chunks of [`CHUNK`] bytes that are never
//! given back, and reused through a free list once their pool is dropped.
//!
//! A process with thousands of pools whose threads move between them
//! touches each pool's head on every get and put. Inside each pool's own
//! allocation, the heads would sit a whole shared state apart, each on a
//! page of its own for the TLB; here they sit side by side, ten or so to a
//! page, and the pages of the heads in use stay few.
//!
//! ```text
//!  chunk:  [ cell ][ cell ][ cell ] ... [ cell ][ not yet carved ]
//!  free:   cell ─► cell ─► cell ─► null   (the next pointer in the cell)
//! ```
//!
//! Invariants, under the lock:
//! * every cell carved is either handed out or on `free`, never both;
//!   cells on `free` hold only the link;
//! * `free` lists each cell at most once.
//!
//! The lock is a leaf: nothing else is locked inside it and no user code
//! runs under it (a chunk is allocated outside it: the global allocator may
//! be the program's). It is held across `fork(2)` ([`fork_safety`]), so a
//! child inherits it unlocked and can build and drop pools. Its handlers
//! are installed at the first pool's build, before any other of
//! tidepool's (the reclaimer's are installed when a pool registers, after
//! its head is made), so its *prepare* runs last, once the others hold
//! their locks; since nothing waits for another lock while holding this
//! one, that order cannot deadlock.

use std::ptr::NonNull;

use crate::sync::fork_safe::{Mutex, MutexGuard};

/// Bytes of one cell: a head fits, and cells keep the 128-byte alignment
/// of line pairs.
pub(crate) const CELL: usize = 384;

/// The alignment every cell has.
pub(crate) const CELL_ALIGN: usize = 128;

/// Bytes carved at a time.
const CHUNK: usize = 64 * 1024;

/// Cells in a chunk.
#[cfg(test)]
pub(crate) const CELLS_PER_CHUNK: usize = CHUNK / CELL;

const _: () = assert!(CELL % CELL_ALIGN == 0 && CHUNK >= CELL);

struct State {
    /// The last cell given back, linked through each free cell's first word.
    free: Option<NonNull<u8>>,
    /// The newest chunk, from whose pointer its cells are made.
    chunk: Option<NonNull<u8>>,
    /// `carved <= CHUNK`: the bytes of the newest chunk handed out as
    /// cells; the rest is unused.
    carved: usize,
    /// Chunks carved so far.
    chunks: usize,
}

// SAFETY: the pointers are to memory this module owns, reached only under
// the lock.
unsafe impl Send for State {}

static STATE: Mutex<State> = Mutex::new(State {
    free: None,
    chunk: None,
    carved: CHUNK,
    chunks: 0,
});

fn lock() -> MutexGuard<'static, State> {
    STATE.lock()
}

/// A cell of [`CELL`] bytes aligned to [`CELL_ALIGN`], uninitialised, or
/// `None` if no chunk can be had (the caller then boxes its head).
pub(crate) fn alloc() -> Option<NonNull<u8>> {
    fork_safety::install();
    let layout = std::alloc::Layout::from_size_align(CHUNK, CELL_ALIGN).ok()?;
    loop {
        if let Some(cell) = take(&mut lock()) {
            return Some(cell);
        }
        // A new chunk, allocated outside the lock: the global allocator may
        // be the program's own code.
        // SAFETY: `layout` has a non-zero size.
        let chunk = NonNull::new(unsafe { std::alloc::alloc(layout) })?;
        let mut state = lock();
        if state.free.is_some() || CHUNK - state.carved >= CELL {
            // Another thread made room meanwhile: use it, and give this
            // chunk back, outside the lock.
            drop(state);
            // SAFETY: allocated just above with `layout`, never used.
            unsafe { std::alloc::dealloc(chunk.as_ptr(), layout) };
            continue;
        }
        state.chunk = Some(chunk);
        state.carved = 0;
        state.chunks += 1;
        return take(&mut state);
    }
}

/// A cell from the free list, or carved from the newest chunk.
fn take(state: &mut State) -> Option<NonNull<u8>> {
    if let Some(cell) = state.free {
        // SAFETY: a cell on the free list holds the link in its first word,
        // written by `free`, and is ours until handed out.
        state.free = unsafe { cell.cast::<Option<NonNull<u8>>>().as_ptr().read() };
        return Some(cell);
    }
    let chunk = state.chunk.filter(|_| CHUNK - state.carved >= CELL)?;
    // SAFETY: `carved + CELL <= CHUNK`, just checked: the cell lies inside
    // the chunk, and `carved` is a multiple of `CELL`, so of `CELL_ALIGN`.
    let cell = unsafe { chunk.add(state.carved) };
    state.carved += CELL;
    Some(cell)
}

/// Gives `cell` back for reuse.
///
/// # Safety
///
/// `cell` came from [`alloc`], is not on the free list, and nothing reads
/// or writes it after this call (its contents were dropped).
pub(crate) unsafe fn free(cell: NonNull<u8>) {
    let mut state = lock();
    // SAFETY: the cell is ours again (the caller's contract), aligned and
    // large enough for the link.
    unsafe {
        cell.cast::<Option<NonNull<u8>>>()
            .as_ptr()
            .write(state.free)
    };
    state.free = Some(cell);
}

/// Chunks carved so far: the arena holds this many times `CHUNK` bytes.
#[cfg(test)]
pub(crate) fn chunks() -> usize {
    lock().chunks
}

/// `fork(2)`: the lock is held across it, so a forked child inherits it
/// unlocked (see `reclaim/fork.rs` for the contract).
mod fork_safety {
    use std::cell::RefCell;
    use std::sync::Once;

    use crate::sync::fork_safe::MutexGuard;

    use super::State;

    std::thread_local! {
        static HELD: RefCell<Option<MutexGuard<'static, State>>> = const { RefCell::new(None) };
    }

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            #[cfg(unix)]
            if let Err(e) = crate::os::fork::at_fork(prepare, release, release) {
                crate::callbacks::warn(format_args!(
                    "tidepool: cannot install fork handlers for the pools' heads ({e})"
                ));
            }
        });
    }

    extern "C" fn prepare() {
        let _ = HELD.try_with(|held| *held.borrow_mut() = Some(super::lock()));
    }

    extern "C" fn release() {
        drop(HELD.try_with(|held| held.borrow_mut().take()));
    }
}
