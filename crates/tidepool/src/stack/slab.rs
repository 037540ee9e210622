//! Stacks carved from slabs: one reservation holds up to
//! [`MAX_STACKS_PER_SLAB`] stacks of a pool, each with its guard page right
//! below it, and is unmapped with one `munmap` once its last stack is gone.
//!
//! ```text
//!  base                                                          base + len
//!  │ guard │ stack 0 │ guard │ stack 1 │ ... │ guard │ stack k-1 │
//!  └─────── slot 0 ──┴─────── slot 1 ──┘     └──── slot k-1 ─────┘
//!    each slot is `stride = guard + usable` bytes; a stack grows down
//!    into its own guard, never into the stack below
//! ```
//!
//! A slab is one `mmap` of the whole range, then one call per stack when
//! its slot is first used: `1 + k` calls for `k` stacks instead of `2k`.
//! Two kinds ([`GuardMode`](super::GuardMode)):
//!
//! * **Guard markers** (Linux 6.13+): mapped writable (`MAP_NORESERVE`),
//!   and opening a slot turns its guard page into a page-table marker
//!   (`madvise(MADV_GUARD_INSTALL)`). The slab stays one VMA. If the kernel
//!   refuses a marker (`EINVAL`: memory locked by `mlockall`), that guard
//!   is made `PROT_NONE` with `mprotect` (a `split` slot, two more VMAs)
//!   and the set maps its later slabs the other way.
//! * **`PROT_NONE` guards**: mapped `PROT_NONE` (no memory, no overcommit
//!   charge), and opening a slot makes its usable part writable
//!   (`mprotect`). Slots are opened from the top down, so the guard of the
//!   lowest opened slot merges with the unopened rest below it and a slab
//!   with `p` open slots is exactly `2p` VMAs, what `p` separate stacks
//!   cost.
//!
//! [`Slab::vmas`] counts either exactly (runs of equal protection); the
//! map-count budget counts VMAs, and a slab's stay mapped until its
//! `munmap`.
//!
//! A slot is in one of four states, in bit masks per slab:
//!
//! ```text
//!       claim (guard or mprotect, outside the lock)     free: madvise the pages
//!   raw ───────────────────────────────────► used ──────────────────────► ready
//!   (PROT_NONE, free)                         ▲   (outside the lock,     (open, free)
//!                                             │    then under it)           │
//!                                             └──────── claim, no syscall ──┘
//!   used == 0 ──► the slab leaves the set and is unmapped (one munmap)
//! ```
//!
//! Invariants, under the set's lock, for every slab:
//!
//! ```text
//! raw & ready == 0          raw & opened == 0          ready ⊆ opened
//! used == all & !raw & !ready
//! used != 0                 (a slab whose last stack went is unmapped)
//! set.slots == Σ slab.slots
//! ```
//!
//! and outside the lock: every stack of a slab (a [`GuardedStack`], which
//! holds an `Arc` of the set) owns one `used` slot, exclusively; a slot is `used` while a
//! thread opens or releases it, so no one else can hand it out or unmap the
//! slab meanwhile. A slab is removed from the set (under the lock) before
//! its `munmap`, by the one thread that saw `used` reach 0, so it is
//! unmapped exactly once and no stack can be carved from it afterwards.
//!
//! A freed slot's pages are released before the slot becomes `ready`
//! (`madvise`, one call per run of adjacent freed stacks), so destroying a
//! stack gives its memory back even while its slab lives on; reusing a
//! `ready` slot costs no syscall at all. New stacks come from `ready` slots
//! first, then `raw` ones, then a new slab, lowest address first, so the
//! other slabs can empty and go.
//!
//! Slab size: at most [`MAX_STACKS_PER_SLAB`] stacks and at most
//! [`MAX_SLAB_BYTES`] of address space, and never more slots than the
//! pool's `max_live` leaves room for (a burst near the budget is shrunk;
//! at least one slot, so the pool's own cap is what refuses stacks).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::os::{self, MapFailure, MapStep};
use crate::stack::zero_depth::ZeroDepth;
use crate::stack::{GuardedStack, StackError};
use crate::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use crate::sync::Mutex;

/// The most stacks one slab holds: the seed's burst of 32 (DragonFly grew
/// its zone allocator 32 pages at a time). With 32 stacks an `munmap`
/// retires 32 stacks; past that the saving flattens (1/32 of today's
/// `munmap`s is already 97% fewer), while a slab pinned by one long-lived
/// stack keeps more VMAs and address space mapped, and the slot masks stay
/// one `u32`.
pub const MAX_STACKS_PER_SLAB: usize = 32;

/// The most address space one slab reserves, so big stacks come fewer to
/// a slab: 8 MiB, a default thread stack. A slab costs no memory until its
/// stacks are touched, but it stays reserved while any of its stacks lives,
/// and address-space limits (`RLIMIT_AS`) count it all. 64 KiB stacks come
/// 32 to a slab, 256 KiB ones 31, 1 MiB ones 7, and stacks of 4 MiB or more
/// one to a slab (a slab is then just a stack's own mapping).
pub const MAX_SLAB_BYTES: usize = 8 << 20;

/// Whether one `madvise` may cover several adjacent stacks and the guards
/// between them. On Linux the advice ignores protection; elsewhere only
/// writable memory is advised, one stack at a time.
const MERGE_ACROSS_GUARDS: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// One bit per slot.
type Mask = u32;
const _: () = assert!(MAX_STACKS_PER_SLAB <= Mask::BITS as usize);

/// Stacks per slab for slots of `stride` bytes (guard included).
pub(crate) fn stacks_per_slab(stride: usize) -> usize {
    (MAX_SLAB_BYTES / stride.max(1)).clamp(1, MAX_STACKS_PER_SLAB)
}

fn all_slots(slots: u32) -> Mask {
    if slots >= Mask::BITS {
        Mask::MAX
    } else {
        (1 << slots) - 1
    }
}

/// The highest set bit of a non-zero mask.
fn highest(mask: Mask) -> u32 {
    debug_assert_ne!(mask, 0);
    Mask::BITS - 1 - mask.leading_zeros()
}

/// One reservation of `slots` slots. See the module notes for the masks.
struct Slab {
    base: NonNull<u8>,
    slots: u32,
    /// Mapped writable whole, its guards page-table markers
    /// (`MADV_GUARD_INSTALL`), so it stays one VMA; otherwise mapped
    /// `PROT_NONE` and each stack opened with `mprotect`.
    markers: bool,
    /// In a `markers` slab: slots whose guard the kernel refused as a
    /// marker and that were made `PROT_NONE` instead (each splits the VMA).
    split: Mask,
    /// Slots whose usable part is writable.
    opened: Mask,
    /// Free slots never opened: all `PROT_NONE`.
    raw: Mask,
    /// Free slots already opened (their pages released).
    ready: Mask,
}

// SAFETY: a `Slab` is bookkeeping about an address range (nothing in it is
// tied to a thread), only ever touched under the set's lock.
unsafe impl Send for Slab {}

impl Slab {
    fn used(&self) -> Mask {
        all_slots(self.slots) & !self.raw & !self.ready
    }

    /// The VMAs the slab is now: runs of equal protection over
    /// `guard 0, stack 0, guard 1, stack 1, ...`. A `PROT_NONE` slab: each
    /// open slot adds its stack and splits off the guard above it, except
    /// the top slot, which has no guard above. A slab with guard markers:
    /// one VMA (markers live in the page tables), plus the splits of any
    /// guard that fell back to `mprotect`. An upper bound: the kernel may
    /// merge an edge with a neighbouring mapping.
    fn vmas(&self) -> u64 {
        let writable = |seg: u32| {
            let (slot, is_guard) = (seg / 2, seg % 2 == 0);
            let bit = 1 << slot;
            match (self.markers, is_guard) {
                (true, true) => self.split & bit == 0,
                (true, false) => true,
                (false, true) => false,
                (false, false) => self.opened & bit != 0,
            }
        };
        let changes = (1..2 * self.slots)
            .filter(|&seg| writable(seg) != writable(seg - 1))
            .count();
        1 + changes as u64
    }

    fn len(&self, stride: usize) -> usize {
        self.slots as usize * stride
    }
}

#[derive(Default)]
struct State {
    /// Every mapped slab, by base address.
    slabs: BTreeMap<usize, Slab>,
    /// Slabs with a `ready` slot, and with a `raw` one.
    with_ready: BTreeSet<usize>,
    with_raw: BTreeSet<usize>,
    /// Slots in all slabs.
    slots: usize,
}

impl State {
    fn slab(&mut self, key: usize) -> &mut Slab {
        self.slabs
            .get_mut(&key)
            .expect("tidepool: a slab with a stack in use is in the set")
    }

    /// Takes slab `key` out of the set, for unmapping.
    fn remove(&mut self, key: usize) -> Option<Slab> {
        let slab = self.slabs.remove(&key)?;
        self.with_ready.remove(&key);
        self.with_raw.remove(&key);
        self.slots -= slab.slots as usize;
        Some(slab)
    }

    /// Brings the indexes up to date with slab `key`'s masks.
    fn reindex(&mut self, key: usize) {
        let (ready, raw) = {
            let slab = self.slab(key);
            (slab.ready != 0, slab.raw != 0)
        };
        for (set, on) in [(&mut self.with_ready, ready), (&mut self.with_raw, raw)] {
            if on {
                set.insert(key);
            } else {
                set.remove(&key);
            }
        }
    }
}

/// System calls made for a set's stacks, and releases that failed.
struct Calls {
    mmap: AtomicU64,
    mprotect: AtomicU64,
    guard: AtomicU64,
    madvise: AtomicU64,
    munmap: AtomicU64,
    release_failures: AtomicU64,
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A snapshot of a [`Slabs`]: what is mapped, and the system calls made so
/// far (failed ones included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlabCounts {
    pub(crate) slabs: u64,
    pub(crate) slots: u64,
    pub(crate) vmas: u64,
    pub(crate) mmap: u64,
    pub(crate) mprotect: u64,
    pub(crate) guard: u64,
    pub(crate) madvise: u64,
    pub(crate) munmap: u64,
    pub(crate) release_failures: u64,
}

/// The slabs of one pool's stacks (one per [`StackManager`](super::StackManager):
/// stacks of different pools never share a slab).
pub(crate) struct Slabs {
    guard: usize,
    usable: usize,
    /// `guard + usable`: a slot.
    stride: usize,
    /// The most bytes one `madvise` of a free or teardown releases (whole
    /// pages, at least one; 0: no bound, and a slab is unmapped without
    /// releasing its pages first). See [`Slabs::with_release_step`].
    release_step: usize,
    /// Slots a new slab gets, before the budget shrinks it.
    per_slab: usize,
    /// The pool's `max_live`: slots in all slabs stay within it, bar the
    /// one a `create` always gets.
    max_slots: Option<usize>,
    /// New slabs get guard markers (see [`Slab::markers`]). Cleared, for
    /// good, the first time the kernel refuses a marker.
    markers: AtomicBool,
    /// The pool the stacks are lent from (its shared state and its head,
    /// opaque here), found through here by a lent stack's two-word handle
    /// ([`PooledStack`](super::PooledStack)). Set once, by the builder,
    /// before any stack is lent; never read after the pool is gone (a
    /// stack detached from it does not look). Both null for a stack of its
    /// own (`GuardedStack::new`), which no pool lends.
    lender: Lender,
    state: Mutex<State>,
    calls: Calls,
    /// How deep the set's zeroed stacks were touched.
    zero_depth: ZeroDepth,
}

/// The lending pool's shared state and head ([`Slabs::pool`]), on one line
/// (16 bytes aligned to 16 never straddle two): a returned stack reads both
/// there, and its put reads nothing of the shared state to reach the head.
#[repr(C, align(16))]
struct Lender {
    shared: AtomicPtr<()>,
    head: AtomicPtr<()>,
}

/// A stretch of a slab to `madvise`: `[start, end)` as offsets from the
/// slab's base.
#[derive(Clone, Copy)]
struct Piece {
    start: usize,
    end: usize,
}

impl Slabs {
    /// A set for stacks of `usable` bytes above `guard` bytes (both whole
    /// pages; their sum was checked by the builder), at most `max_slots` of
    /// them; guards are page-table markers if `markers` (the kernel has
    /// them: [`os::guard_markers_supported`]), `PROT_NONE` pages otherwise.
    pub(crate) fn new(
        guard: usize,
        usable: usize,
        max_slots: Option<usize>,
        markers: bool,
    ) -> Self {
        let stride = guard + usable;
        Self {
            guard,
            usable,
            stride,
            release_step: crate::DEFAULT_RELEASE_STEP,
            per_slab: stacks_per_slab(stride),
            max_slots,
            markers: AtomicBool::new(markers),
            lender: Lender {
                shared: AtomicPtr::new(std::ptr::null_mut()),
                head: AtomicPtr::new(std::ptr::null_mut()),
            },
            state: Mutex::new(State::default()),
            calls: Calls {
                mmap: AtomicU64::new(0),
                mprotect: AtomicU64::new(0),
                guard: AtomicU64::new(0),
                madvise: AtomicU64::new(0),
                munmap: AtomicU64::new(0),
                release_failures: AtomicU64::new(0),
            },
            zero_depth: ZeroDepth::new(),
        }
    }

    /// Bounds what one system call of a teardown releases to `bytes`
    /// (rounded up to whole pages; 0: no bound). A slab whose stacks may
    /// still hold pages then has them released `bytes` at a time
    /// (`madvise`, which takes the address-space lock for read, or only
    /// the area's own lock on Linux 6.16+), and only its emptied range is
    /// unmapped: an `munmap` holds the lock for write while it frees
    /// every page, and every `mmap`, `munmap` and `mprotect` of the
    /// process waits behind it.
    pub(crate) fn with_release_step(mut self, bytes: usize) -> Self {
        self.release_step = bytes.next_multiple_of(os::page_size());
        self
    }

    /// Counts `n` page releases made for one of the set's stacks outside
    /// the set's own paths ([`GuardedStack::zero`](super::GuardedStack::zero)).
    pub(crate) fn count_releases(&self, n: u64) {
        bump(&self.calls.madvise, n);
    }

    /// How deep the set's zeroed stacks were touched (see [`ZeroDepth`]).
    pub(crate) fn zero_depth(&self) -> &ZeroDepth {
        &self.zero_depth
    }

    pub(crate) fn release_step(&self) -> usize {
        self.release_step
    }

    /// Records the pool the stacks are lent from, its shared state and its
    /// head (see the field).
    pub(crate) fn set_pool(&self, shared: *const (), head: *const ()) {
        debug_assert!(self.pool().0.is_null(), "a slab set serves one pool");
        debug_assert!(!shared.is_null() && !head.is_null(), "a pool's pointers");
        self.lender
            .shared
            .store(shared.cast_mut(), Ordering::Relaxed);
        self.lender.head.store(head.cast_mut(), Ordering::Relaxed);
    }

    /// The pool recorded by [`set_pool`](Self::set_pool), `(shared, head)`,
    /// both null before. `Relaxed`: a handle reaching here was lent after
    /// the builder stored them, and came to its thread through the pool's
    /// own synchronisation.
    #[inline(always)]
    pub(crate) fn pool(&self) -> (*const (), *const ()) {
        (
            self.lender.shared.load(Ordering::Relaxed),
            self.lender.head.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn guard_size(&self) -> usize {
        self.guard
    }

    pub(crate) fn usable_size(&self) -> usize {
        self.usable
    }

    /// A slot: guard and stack.
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// Stacks a new slab holds when the budget leaves room.
    pub(crate) fn per_slab(&self) -> usize {
        self.per_slab
    }

    /// Whether new slabs get guard markers (see [`Slab::markers`]).
    pub(crate) fn markers(&self) -> bool {
        self.markers.load(Ordering::Relaxed)
    }

    pub(crate) fn counts(&self) -> SlabCounts {
        let (slabs, slots, vmas) = {
            let st = self.state.lock();
            let vmas = st.slabs.values().map(Slab::vmas).sum();
            (st.slabs.len() as u64, st.slots as u64, vmas)
        };
        let c = &self.calls;
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SlabCounts {
            slabs,
            slots,
            vmas,
            mmap: read(&c.mmap),
            mprotect: read(&c.mprotect),
            guard: read(&c.guard),
            madvise: read(&c.madvise),
            munmap: read(&c.munmap),
            release_failures: read(&c.release_failures),
        }
    }

    /// Bytes of every slab that are in RAM now (`mincore` over each whole
    /// slab: stacks in use, idle stacks and free slots; guard pages are
    /// never resident). A diagnostic (the lab samples it), not a hot path:
    /// the slab list is copied under the set's lock and counted outside it,
    /// so that creates and destroys are not held up by the page-table walk.
    /// A slab unmapped meanwhile counts as nothing (`mincore` reports
    /// `ENOMEM` for it).
    pub(crate) fn resident_bytes(&self) -> std::io::Result<u64> {
        let slabs: Vec<(NonNull<u8>, usize)> = {
            let st = self.state.lock();
            st.slabs
                .values()
                .map(|slab| (slab.base, slab.len(self.stride)))
                .collect()
        };
        let mut total = 0u64;
        for (base, len) in slabs {
            // SAFETY: `mincore` only reads page tables, never the memory;
            // the range was one of our slabs a moment ago, and if it has
            // been unmapped since, the call fails with `ENOMEM` (no other
            // effect).
            match unsafe { os::resident_bytes(base, len) } {
                Ok(n) => total += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    // === carving ===

    /// Makes up to `n` stacks: `ready` slots first (no syscall), then `raw`
    /// ones (one `mprotect` each), then new slabs (one `mmap` each), all
    /// claimed under the lock and opened outside it. The contract of
    /// [`Manage::create_batch`](crate::Manage::create_batch): `Ok` with
    /// 1 to `n` stacks (fewer after a failure part-way), or the error if
    /// there are none. Nothing is left half-made: a slot that failed to
    /// open goes back to `raw`, and a slab left without stacks is unmapped.
    pub(crate) fn carve(self: &Arc<Self>, n: usize) -> Result<Vec<GuardedStack>, StackError> {
        let mut stacks = Vec::with_capacity(n.min(4 * MAX_STACKS_PER_SLAB));
        let mut to_open: Vec<(usize, NonNull<u8>, u32, bool)> = Vec::new();
        let mut failure: Option<(MapFailure, usize)> = None;
        {
            let mut st = self.state.lock();
            while stacks.len() < n {
                let Some(&key) = st.with_ready.first() else {
                    break;
                };
                let slab = st.slab(key);
                let slot = highest(slab.ready);
                let bit = 1 << slot;
                slab.ready &= !bit;
                let base = slab.base;
                st.reindex(key);
                stacks.push(self.stack(base, slot));
            }
            while stacks.len() + to_open.len() < n {
                if st.with_raw.is_empty() {
                    // A burst stops at the budget; only a lone stack may
                    // pass it (see `reserve_slab`).
                    let got = stacks.len() + to_open.len();
                    if got > 0 && self.room(&st) == 0 {
                        break;
                    }
                    if let Err(f) = self.reserve_slab(&mut st) {
                        failure = Some(f);
                        break;
                    }
                }
                let key = *st.with_raw.first().expect("a slab with a raw slot");
                let slab = st.slab(key);
                let slot = highest(slab.raw);
                slab.raw &= !(1 << slot);
                // Optimistic: undone below if opening fails.
                slab.opened |= 1 << slot;
                let (base, markers) = (slab.base, slab.markers);
                st.reindex(key);
                to_open.push((key, base, slot, markers));
            }
        }

        let mut failed = Vec::new();
        let mut split = Vec::new();
        for (key, base, slot, markers) in to_open {
            if failed.is_empty() {
                // SAFETY: the slot is `used` (claimed above), so this thread
                // alone touches it, and its slab stays mapped.
                let opened = unsafe { self.open(base, slot, markers) };
                match opened {
                    Ok(fell_back) => {
                        if fell_back {
                            split.push((key, slot));
                        }
                        stacks.push(self.stack(base, slot));
                        continue;
                    }
                    Err(f) => {
                        failure.get_or_insert((f, self.stride));
                    }
                }
            }
            // After one refusal (the map count, memory), the next would
            // fail the same way: give the slots back untried.
            failed.push((key, slot));
        }
        if !split.is_empty() {
            let mut st = self.state.lock();
            for (key, slot) in split {
                st.slab(key).split |= 1 << slot;
            }
        }
        if !failed.is_empty() {
            self.unclaim(&failed);
        }
        match failure {
            Some((failure, bytes)) if stacks.is_empty() && n > 0 => {
                Err(StackError::from_map_failure(failure, bytes))
            }
            // A partial burst keeps what it made: the next call meets the
            // error again.
            _ => Ok(stacks),
        }
    }

    /// Opens claimed slot `slot` of the slab at `base`: installs its guard
    /// marker (a `markers` slab) or makes its stack writable (`mprotect`).
    /// `Ok(true)` if the kernel refused the marker and the guard was made
    /// `PROT_NONE` instead; from then on new slabs of the set use
    /// `mprotect` (an old kernel: `EINVAL`; or memory locked with
    /// `mlockall`, which markers do not support).
    ///
    /// # Safety
    ///
    /// pre: the slot is claimed (`used`) by the calling thread, not yet
    /// handed out, and its slab is mapped.
    unsafe fn open(&self, base: NonNull<u8>, slot: u32, markers: bool) -> Result<bool, MapFailure> {
        // SAFETY: `slot < slots`, so the slot lies inside the slab's mapping.
        let start = unsafe { base.add(slot as usize * self.stride) };
        if !markers {
            // SAFETY: the guard is inside the slot.
            let usable = unsafe { start.add(self.guard) };
            bump(&self.calls.mprotect, 1);
            // SAFETY: the slot is ours alone (caller's contract).
            return unsafe { os::make_writable(usable, self.usable) }
                .map(|()| false)
                .map_err(|error| MapFailure {
                    step: MapStep::Protect,
                    error,
                });
        }
        // A marker slab whose set has given up on markers (refused once)
        // goes straight to `mprotect`.
        if self.markers() {
            bump(&self.calls.guard, 1);
            // SAFETY: the slot is ours alone (caller's contract), in a slab
            // mapped writable; its guard page holds nothing anyone needs.
            match unsafe { os::install_guard(start, self.guard) } {
                Ok(()) => return Ok(false),
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                    if self.markers.swap(false, Ordering::Relaxed) {
                        log::warn!(
                            "tidepool: the kernel refused a guard marker ({error}); \
                             this pool's guards use mprotect from now on"
                        );
                    }
                }
                Err(error) => {
                    return Err(MapFailure {
                        step: MapStep::Guard,
                        error,
                    })
                }
            }
        }
        bump(&self.calls.mprotect, 1);
        // SAFETY: as above; nothing points into the guard page.
        unsafe { os::make_inaccessible(start, self.guard) }
            .map(|()| true)
            .map_err(|error| MapFailure {
                step: MapStep::Protect,
                error,
            })
    }

    /// Maps a new slab into the set, all slots `raw`: as many as the budget
    /// leaves room for (at least one), at most `per_slab`. Under the lock,
    /// so no two threads map slabs past the budget; the kernel serialises
    /// `mmap`s of one process anyway.
    ///
    /// Past the budget a slab of one is still mapped: the pool's
    /// `max_live` already let this stack through, so the slots over it
    /// belong to stacks the pool does not count (detached ones).
    fn reserve_slab(&self, st: &mut State) -> Result<(), (MapFailure, usize)> {
        let mut slots = self.per_slab.min(self.room(st)).max(1);
        let markers = self.markers();
        let access = if markers {
            os::Access::ReadWrite
        } else {
            os::Access::None
        };
        loop {
            let len = slots * self.stride;
            bump(&self.calls.mmap, 1);
            match os::reserve(len, access) {
                Ok(base) => {
                    let key = base.as_ptr() as usize;
                    let slots = slots as u32;
                    st.slabs.insert(
                        key,
                        Slab {
                            base,
                            slots,
                            markers,
                            split: 0,
                            opened: 0,
                            raw: all_slots(slots),
                            ready: 0,
                        },
                    );
                    st.slots += slots as usize;
                    st.reindex(key);
                    return Ok(());
                }
                // Maybe only the address space for one is left.
                Err(_) if slots > 1 => slots = 1,
                Err(error) => {
                    let step = MapStep::Reserve;
                    return Err((MapFailure { step, error }, len));
                }
            }
        }
    }

    /// Slots the budget leaves for new slabs.
    fn room(&self, st: &State) -> usize {
        self.max_slots
            .map_or(usize::MAX, |max| max.saturating_sub(st.slots))
    }

    /// Puts slots that failed to open back to `raw`; unmaps a slab left
    /// with no stack.
    fn unclaim(&self, failed: &[(usize, u32)]) {
        let mut dead = Vec::new();
        {
            let mut st = self.state.lock();
            for &(key, slot) in failed {
                let slab = st.slab(key);
                slab.opened &= !(1 << slot);
                slab.split &= !(1 << slot);
                slab.raw |= 1 << slot;
                if slab.used() == 0 {
                    dead.extend(st.remove(key));
                } else {
                    st.reindex(key);
                }
            }
        }
        for slab in dead {
            self.unmap(slab);
        }
    }

    fn stack(self: &Arc<Self>, base: NonNull<u8>, slot: u32) -> GuardedStack {
        // SAFETY: `slot < slots`, so the slot lies inside the slab's mapping.
        let start = unsafe { base.add(slot as usize * self.stride) };
        GuardedStack::in_slab(start, Arc::clone(self))
    }

    /// The slab holding `addr` and the slot it falls in. Under the lock.
    fn locate(&self, st: &State, addr: usize) -> Option<(usize, u32)> {
        let (&key, slab) = st.slabs.range(..=addr).next_back()?;
        let slot = (addr - key) / self.stride;
        (slot < slab.slots as usize).then_some((key, slot as u32))
    }

    // === freeing ===

    /// Gives back the slot of one stack (its drop).
    pub(crate) fn free_one(&self, start: NonNull<u8>) {
        self.free(&mut [Freed::new(start)]);
    }

    /// Gives back the slots of stacks that are going away, all of this set.
    /// Per slab: if they are its last stacks, the slab is unmapped (one
    /// `munmap`); otherwise their pages are released (one `madvise` per run
    /// of adjacent stacks) and then the slots become `ready`. Two
    /// passes under the lock, the system calls between and after them.
    fn free(&self, freed: &mut [Freed]) {
        let mut dead = Vec::new();
        {
            let mut st = self.state.lock();
            for f in freed.iter_mut() {
                match self.locate(&st, f.start.as_ptr() as usize) {
                    Some((key, slot)) => (f.key, f.slot) = (key, slot),
                    // Runs in drops: an impossible state leaks the slot
                    // rather than panic (which could abort an unwinding
                    // thread).
                    None => debug_assert!(false, "freeing a stack of no slab of this set"),
                }
            }
            freed.sort_unstable_by_key(|f| (f.key, f.slot));
            for group in freed.chunk_by_mut(|a, b| a.key == b.key) {
                let key = group[0].key;
                let mask = group.iter().fold(0, |m, f| m | 1 << f.slot);
                let Some(slab) = st.slabs.get(&key) else {
                    continue; // not found above
                };
                debug_assert_eq!(slab.used() & mask, mask, "freeing slots not in use");
                if slab.used() == mask {
                    // Its last stacks: the slab goes, no release needed.
                    dead.extend(st.remove(key));
                    group.iter_mut().for_each(|f| f.key = GONE);
                }
            }
        }
        for slab in dead.drain(..) {
            self.unmap(slab);
        }

        // The slots left are still `used`: nobody else hands them out or
        // unmaps their slabs while their pages are released.
        let mut pieces = Vec::new();
        // (slab, slots freed) per slab that stays.
        let mut back: Vec<(usize, Mask)> = Vec::new();
        for group in freed.chunk_by(|a, b| a.key == b.key) {
            let key = group[0].key;
            if key == GONE {
                continue;
            }
            pieces.clear();
            // Whole stacks: whoever held one may have touched any page
            // (a purge since is no proof: a pool lends stacks out without
            // telling the manager).
            pieces.extend(group.iter().map(|f| {
                let top = (f.slot as usize + 1) * self.stride;
                Piece {
                    start: top - self.usable,
                    end: top,
                }
            }));
            let mask = group.iter().fold(0, |m, f| m | 1 << f.slot);
            // The slab's base, with the provenance of a stack of it.
            // SAFETY: the slab starts `slot * stride` bytes below a slot.
            let base = unsafe { group[0].start.sub(group[0].slot as usize * self.stride) };
            // A failed release (a locked process) is counted; the slot is
            // reused all the same (stacks carry nothing across reuse).
            self.release(base, &pieces);
            back.push((key, mask));
        }
        if back.is_empty() {
            return;
        }

        {
            let mut st = self.state.lock();
            for (key, mask) in back {
                // Still in the set: our slots kept it `used`.
                let slab = st.slab(key);
                slab.ready |= mask;
                if slab.used() == 0 {
                    // Another thread freed the slab's other stacks meanwhile.
                    dead.extend(st.remove(key));
                } else {
                    st.reindex(key);
                }
            }
        }
        for slab in dead {
            self.unmap(slab);
        }
    }

    /// `madvise`s `pieces` of the slab at `base` (sorted by address), one
    /// call per run of pieces separated by exactly a guard. Counts the
    /// calls, and the stacks of runs that failed (a process that locked its
    /// memory: the pages stay, the stacks stay usable).
    fn release(&self, base: NonNull<u8>, pieces: &[Piece]) {
        let mut i = 0;
        while i < pieces.len() {
            let mut j = i + 1;
            while MERGE_ACROSS_GUARDS
                && j < pieces.len()
                && pieces[j].start == pieces[j - 1].end + self.guard
                && (self.release_step == 0 || pieces[j].end - pieces[i].start <= self.release_step)
            {
                j += 1;
            }
            let run = &pieces[i..j];
            let (mut start, end) = (run[0].start, run[run.len() - 1].end);
            // A stack bigger than the step goes in steps of its own.
            let step = match self.release_step {
                0 => end - start,
                step => step,
            };
            let mut failed = false;
            while start < end {
                let len = step.min(end - start);
                // SAFETY: `start` is an offset inside the slab's mapping.
                let ptr = unsafe { base.add(start) };
                bump(&self.calls.madvise, 1);
                // SAFETY: the range lies in the run, which covers the
                // usable parts of stacks the caller holds exclusively
                // (being freed, or `&mut` for a purge) and, on Linux only,
                // the guards between adjacent ones (PROT_NONE or markers,
                // holding nothing; MADV_DONTNEED keeps markers); no
                // reference points into it; stacks carry nothing across
                // reuse.
                failed |= unsafe { os::release_pages(ptr, len) }.is_err();
                start += len;
            }
            if failed {
                bump(&self.calls.release_failures, run.len() as u64);
            }
            i = j;
        }
    }

    /// Unmaps a slab taken out of the set (one `munmap` for all its slots).
    /// With a [release step](Self::with_release_step), the stacks that may
    /// still hold pages (those `used` when it was taken out) have them
    /// released first, a step at a time, so that the `munmap` frees no
    /// page.
    fn unmap(&self, slab: Slab) {
        let resident = slab.used();
        if self.release_step != 0 && resident != 0 {
            let pieces: Vec<Piece> = (0..slab.slots)
                .filter(|slot| resident & (1 << slot) != 0)
                .map(|slot| {
                    let top = (slot as usize + 1) * self.stride;
                    Piece {
                        start: top - self.usable,
                        end: top,
                    }
                })
                .collect();
            self.release(slab.base, &pieces);
        }
        bump(&self.calls.munmap, 1);
        // SAFETY: the slab was removed from the set with no slot `used`:
        // no stack refers to it, and no slot can be carved from it again;
        // `[base, base + len)` is the whole range `reserve` mapped.
        if unsafe { os::unmap(slab.base, slab.len(self.stride)) }.is_err() {
            os::count_unmap_failure();
        }
    }

    // === purging ===

    /// Releases the pages of `stacks`, all of this set, below their top
    /// `keep` bytes, one `madvise` per run of adjacent stacks of one slab
    /// (runs form only when `keep` is 0: a kept top separates two stacks).
    /// `&mut`: nothing runs on them, nobody points into them.
    fn purge_own(&self, stacks: &mut [&mut GuardedStack], keep: usize) {
        // (slab, slot) of each stack: one look-up under the lock.
        let mut at: Vec<(usize, u32, usize)> = {
            let st = self.state.lock();
            stacks
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let (key, slot) = self.locate(&st, s.limit().as_ptr() as usize)?;
                    Some((key, slot, i))
                })
                .collect()
        };
        at.sort_unstable();
        let mut pieces = Vec::new();
        for group in at.chunk_by(|a, b| a.0 == b.0) {
            let (_, slot0, i0) = group[0];
            // SAFETY: the slab starts `slot * stride` bytes below its slot.
            let base = unsafe { stacks[i0].limit().sub(slot0 as usize * self.stride) };
            pieces.clear();
            pieces.extend(group.iter().map(|&(_, slot, _)| {
                let top = (slot as usize + 1) * self.stride;
                Piece {
                    start: top - self.usable,
                    end: top - keep,
                }
            }));
            self.release(base, &pieces);
        }
    }
}

/// Releases the pages of `stacks` below their top `keep` bytes, grouped by
/// slab set: one `madvise` per run of adjacent stacks of one slab. Each set
/// counts its own calls.
pub(crate) fn purge_stacks(stacks: &mut [GuardedStack], keep: usize) {
    let mut todo: Vec<&mut GuardedStack> = stacks
        .iter_mut()
        .filter(|s| s.usable_size() > keep)
        .collect();
    todo.sort_unstable_by_key(|s| Arc::as_ptr(s.slabs()));
    for group in todo.chunk_by_mut(|a, b| Arc::ptr_eq(a.slabs(), b.slabs())) {
        let slabs = Arc::clone(group[0].slabs());
        slabs.purge_own(group, keep);
    }
}

/// Gives back every stack of `stacks` (a batch teardown), grouped by slab
/// set and slab: one `munmap` per slab that loses its last stacks, one
/// `madvise` per run of adjacent stacks in the slabs that stay.
pub(crate) fn destroy_stacks(stacks: Vec<GuardedStack>) {
    let mut parts: Vec<(Arc<Slabs>, Freed)> = stacks
        .into_iter()
        .map(|s| {
            let (start, slabs) = s.into_parts();
            (slabs, Freed::new(start))
        })
        .collect();
    parts.sort_unstable_by_key(|(slabs, _)| Arc::as_ptr(slabs));
    let mut freed = Vec::new();
    for group in parts.chunk_by(|a, b| Arc::ptr_eq(&a.0, &b.0)) {
        freed.clear();
        freed.extend(group.iter().map(|(_, f)| *f));
        group[0].0.free(&mut freed);
    }
    // The `Arc`s go last: a set may outlive its pool through its stacks.
}

/// A stack being freed: its slot's start; its slab and slot, filled in
/// under the lock.
#[derive(Clone, Copy)]
struct Freed {
    start: NonNull<u8>,
    key: usize,
    slot: u32,
}

/// The `key` of a stack whose slab was unmapped (address 0 is never a slab).
const GONE: usize = 0;

impl Freed {
    fn new(start: NonNull<u8>) -> Self {
        Self {
            start,
            key: GONE,
            slot: 0,
        }
    }
}

impl Drop for Slabs {
    fn drop(&mut self) {
        // Every stack holds the set alive, and a slab goes the moment its
        // last stack does, so nothing should be left. If something is, no
        // stack can refer to it: unmap it rather than leak it.
        let st = std::mem::take(&mut *self.state.lock());
        debug_assert!(st.slabs.is_empty(), "slabs outlived their stacks");
        for (_, slab) in st.slabs {
            self.unmap(slab);
        }
    }
}

impl fmt::Debug for Slabs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slabs")
            .field("per_slab", &self.per_slab)
            .field("max_slots", &self.max_slots)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slab_size_follows_the_stack_size() {
        let page = 4096;
        assert_eq!(stacks_per_slab(2 * page), 32);
        assert_eq!(stacks_per_slab(64 * 1024 + page), 32);
        assert_eq!(stacks_per_slab(256 * 1024 + page), 31);
        assert_eq!(stacks_per_slab(1024 * 1024 + page), 7);
        assert_eq!(stacks_per_slab(4 * 1024 * 1024 + page), 1);
        assert_eq!(stacks_per_slab(usize::MAX / 2), 1);
    }

    fn slab(slots: u32, opened: Mask) -> Slab {
        Slab {
            base: NonNull::dangling(),
            slots,
            markers: false,
            split: 0,
            opened,
            raw: all_slots(slots) & !opened,
            ready: 0,
        }
    }

    #[test]
    fn vmas_are_runs_of_equal_protection() {
        // guard|stack pairs, bottom first; `o` = opened (rw), `-` = none.
        assert_eq!(slab(4, 0b0000).vmas(), 1, "all PROT_NONE");
        assert_eq!(slab(4, 0b1000).vmas(), 2, "top: guard merges below");
        assert_eq!(slab(4, 0b1100).vmas(), 4);
        assert_eq!(slab(4, 0b1111).vmas(), 8, "full: 2 per stack");
        assert_eq!(slab(4, 0b0001).vmas(), 3, "bottom: rest above splits");
        assert_eq!(slab(4, 0b0101).vmas(), 5);
        assert_eq!(slab(1, 0b1).vmas(), 2, "a slab of one is a plain stack");
        assert_eq!(slab(32, Mask::MAX).vmas(), 64);
    }

    #[test]
    fn a_slab_with_guard_markers_is_one_vma_but_for_refused_markers() {
        let markers = |slots, opened, split| Slab {
            markers: true,
            split,
            ..slab(slots, opened)
        };
        assert_eq!(markers(4, 0b0000, 0).vmas(), 1);
        assert_eq!(markers(4, 0b1111, 0).vmas(), 1, "markers split nothing");
        assert_eq!(markers(32, Mask::MAX, 0).vmas(), 1);
        // Guards made PROT_NONE after a refusal: each splits the rest.
        assert_eq!(markers(4, 0b1100, 0b1000).vmas(), 3);
        assert_eq!(markers(4, 0b1100, 0b1100).vmas(), 5);
        assert_eq!(
            markers(4, 0b0001, 0b0001).vmas(),
            2,
            "bottom guard: one split"
        );
    }

    #[test]
    fn masks() {
        assert_eq!(all_slots(32), u32::MAX);
        assert_eq!(all_slots(3), 0b111);
        assert_eq!(highest(0b1011), 3);
        let s = Slab {
            ready: 0b0010,
            ..slab(4, 0b0110)
        };
        assert_eq!(s.used(), 0b0100);
    }

    /// Three stacks of 4 pages (and a guard page each) in one slab, freed
    /// in a batch: the `madvise` calls made, and the `munmap`s.
    fn teardown_calls(step_pages: usize, free_first: usize) -> (u64, u64) {
        let page = os::page_size();
        let slabs =
            Arc::new(Slabs::new(page, 4 * page, None, false).with_release_step(step_pages * page));
        let mut stacks = slabs.carve(3).unwrap();
        assert_eq!(slabs.counts().slabs, 1);
        let rest = stacks.split_off(free_first);
        destroy_stacks(stacks);
        let first = slabs.counts();
        destroy_stacks(rest);
        let c = slabs.counts();
        assert_eq!((c.slabs, c.munmap), (0, 1));
        assert_eq!(first.munmap, 0, "a slab with stacks left stays");
        (first.madvise, c.madvise)
    }

    #[test]
    fn a_torn_down_slab_gives_its_pages_back_a_step_at_a_time_before_its_munmap() {
        // Two calls per stack of 4 pages at a step of 2 pages.
        assert_eq!(teardown_calls(2, 0), (0, 6));
        // A step past a stack: adjacent stacks (and the guards between
        // them, on Linux) go together up to the step.
        let merged = if MERGE_ACROSS_GUARDS { 1 } else { 3 };
        assert_eq!(teardown_calls(64, 0), (0, merged));
        // No step: the munmap frees the pages.
        assert_eq!(teardown_calls(0, 0), (0, 0));
    }

    #[test]
    fn stacks_freed_from_a_slab_that_stays_are_released_in_steps_too() {
        // Two of three freed (2 calls each), then the last with its slab.
        assert_eq!(teardown_calls(2, 2), (4, 6));
        let merged = if MERGE_ACROSS_GUARDS { 1 } else { 2 };
        assert_eq!(teardown_calls(64, 2), (merged, merged + 1));
        // No step: one call per run of adjacent stacks in a slab that
        // stays, none for the slab that goes.
        assert_eq!(teardown_calls(0, 2), (merged, merged));
    }

    #[test]
    fn a_failed_open_gives_the_slot_back_and_unmaps_an_empty_slab() {
        let page = os::page_size();
        let slabs = Arc::new(Slabs::new(page, page, None, false));
        let mut stacks = slabs.carve(3).unwrap();
        assert_eq!(stacks.len(), 3);
        // As if the third had failed to open: never handed out, its slot
        // back to raw (the bookkeeping `carve` does on a failed mprotect).
        let third = stacks.pop().unwrap();
        let (key, slot) = slabs
            .locate(&slabs.state.lock(), third.limit().as_ptr() as usize)
            .unwrap();
        let _ = third.into_parts();
        slabs.unclaim(&[(key, slot)]);
        let c = slabs.counts();
        assert_eq!((c.slabs, c.vmas), (1, 4));
        drop(stacks);
        let c = slabs.counts();
        assert_eq!((c.slabs, c.munmap), (0, 1), "no stack left: unmapped");
    }
}
