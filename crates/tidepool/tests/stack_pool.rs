//! `StackPool` behaviour that does not depend on the process's VMA count:
//! settings, reuse, ownership, stats, errors, and corosensei. Built on every
//! Unix; the parts that read Linux's `/proc` are marked.
#![cfg(unix)]

use std::sync::Arc;

use tidepool::pressure::Level;
#[cfg(target_os = "linux")]
use tidepool::stack::{BudgetSource, RESERVED_VMAS};
use tidepool::stack::{
    GuardMode, GuardedStack, MapBudget, PooledStack, StackError, StackPool, VMAS_PER_STACK,
};

const PAGE: usize = 4096;

/// Fills the usable part of `stack` with `byte`.
fn fill(stack: &GuardedStack, byte: u8) {
    // SAFETY: the usable part is readable and writable, and nothing else
    // uses this stack while we hold it.
    unsafe {
        stack
            .bottom()
            .as_ptr()
            .write_bytes(byte, stack.usable_size())
    }
}

/// Is `range` mapped on its own? Linux only (`/proc/self/maps`); `true`
/// elsewhere, where the checks that use it are skipped.
fn is_mapped(range: std::ops::Range<usize>) -> bool {
    #[cfg(target_os = "linux")]
    return maps_line(range).is_some();
    #[cfg(not(target_os = "linux"))]
    {
        let _ = range;
        true
    }
}

/// Can [`is_mapped`] see unmapping?
const SEES_UNMAPPING: bool = cfg!(target_os = "linux");

/// The `/proc/self/maps` line whose range is exactly `range`, if any.
#[cfg(target_os = "linux")]
fn maps_line(range: std::ops::Range<usize>) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let want = format!("{:x}-{:x} ", range.start, range.end);
    maps.lines()
        .find(|l| l.starts_with(&want))
        .map(str::to_owned)
}

#[test]
fn sizes_are_page_rounded_and_addresses_aligned() {
    let pool = StackPool::new(10_000).unwrap();
    let stack = pool.get().unwrap();
    assert_eq!(stack.usable_size(), 3 * PAGE);
    assert_eq!(stack.guard_size(), PAGE);
    assert_eq!(stack.top().as_ptr() as usize % PAGE, 0);
    assert_eq!(stack.limit().as_ptr() as usize % PAGE, 0);
    assert_eq!(stack.guard().end, stack.usable().start);
    assert_eq!(stack.usable().len(), 3 * PAGE);
    assert_eq!(stack.guard().start, stack.limit().as_ptr() as usize);
    // Every usable byte is writable.
    fill(&stack, 0x5a);
}

/// The `/proc/self/maps` line whose range holds all of `range`, if any.
#[cfg(target_os = "linux")]
fn maps_line_holding(range: std::ops::Range<usize>) -> Option<(std::ops::Range<usize>, String)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().find_map(|l| {
        let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
        let lo = usize::from_str_radix(lo, 16).ok()?;
        let hi = usize::from_str_radix(hi, 16).ok()?;
        (lo <= range.start && range.end <= hi).then(|| (lo..hi, l.to_owned()))
    })
}

#[test]
#[cfg(target_os = "linux")]
fn the_guard_and_the_usable_part_are_separate_mappings() {
    // An odd size no other test maps, so the ranges are ours.
    let pool = StackPool::builder(37 * PAGE)
        .batch_size(4)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    let per_slab = pool.manager().stacks_per_slab();
    assert!(per_slab >= 3, "{per_slab}");
    // The top stack of a slab, one in the middle, and the one below it.
    let stacks: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    for stack in &stacks {
        let usable = maps_line(stack.usable()).expect("usable part mapped on its own");
        assert!(usable.split_whitespace().nth(1) == Some("rw-p"), "{usable}");
        // The guard is a PROT_NONE mapping that ends where the stack
        // starts; the lowest open stack's guard is merged with the rest of
        // the slab below it, not opened yet.
        let (range, guard) = maps_line_holding(stack.guard()).expect("guard mapped");
        assert!(guard.split_whitespace().nth(1) == Some("---p"), "{guard}");
        assert_eq!(range.end, stack.usable().start, "{guard}");
    }
    // Stacks of one slab: each one's guard sits right on the one below's
    // top.
    assert_eq!(stacks[1].top().as_ptr() as usize, stacks[0].guard().start);
    assert_eq!(stacks[2].top().as_ptr() as usize, stacks[1].guard().start);
    assert_eq!(
        maps_line(stacks[1].guard()).map(|l| l.contains("---p")),
        Some(true),
        "a guard between two open stacks is a mapping of its own"
    );
    assert_eq!(pool.stats().vmas, 6, "two VMAs per stack");
}

#[test]
#[cfg(target_os = "linux")]
fn with_guard_markers_a_slab_is_one_mapping() {
    if !GuardMode::markers_supported() {
        eprintln!("no guard markers on this kernel");
        return;
    }
    // An odd size no other test maps, so the ranges are ours.
    let pool = StackPool::builder(39 * PAGE)
        .batch_size(4)
        .guard_mode(GuardMode::Markers)
        .build()
        .unwrap();
    let stacks: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    let (slab, line) = maps_line_holding(stacks[0].usable()).expect("slab mapped");
    assert!(line.split_whitespace().nth(1) == Some("rw-p"), "{line}");
    for stack in &stacks {
        // Guard and stack alike: inside the one writable mapping (the
        // guard is a page-table marker, invisible in the maps file).
        assert!(slab.start <= stack.guard().start && stack.usable().end <= slab.end);
    }
    let s = pool.stats();
    assert_eq!((s.slabs, s.vmas), (1, 1), "one VMA per slab");
    assert_eq!((s.mmap_calls, s.guard_calls, s.mprotect_calls), (1, 3, 0));
}

#[test]
fn bad_settings_are_errors_naming_the_setting() {
    assert_eq!(StackPool::new(0).unwrap_err().field(), "usable_size");
    let huge = StackPool::new(usize::MAX - 10).unwrap_err();
    assert_eq!(huge.field(), "usable_size");
    assert!(huge.to_string().contains("too large"), "{huge}");

    let no_room = StackPool::builder(PAGE)
        .map_budget(MapBudget::with_max_map_count(4000))
        .build()
        .unwrap_err();
    assert_eq!(no_room.field(), "max_live");
    assert!(no_room.to_string().contains("4000"), "{no_room}");

    // Explicit caps need no budget.
    let explicit = StackPool::builder(PAGE)
        .map_budget(MapBudget::with_max_map_count(4000))
        .max_live(8)
        .build()
        .unwrap();
    assert_eq!(explicit.config().max_live(), Some(8));

    let zero_live = StackPool::builder(PAGE).max_live(0).build().unwrap_err();
    assert_eq!(zero_live.field(), "max_live");
    let zero_batch = StackPool::builder(PAGE).batch_size(0).build().unwrap_err();
    assert_eq!(zero_batch.field(), "batch_size");
}

#[test]
fn settings_that_cannot_work_together_are_refused_by_the_stack_builder_too() {
    use std::time::Duration;
    let e = StackPool::builder(PAGE)
        .max_live(4)
        .min_idle(5)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "min_idle");
    let e = StackPool::builder(PAGE)
        .max_live(4)
        .batch_size(8)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "batch_size");
    let e = StackPool::builder(PAGE)
        .reclaim_interval(Duration::MAX)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "reclaim_interval");
    let e = StackPool::builder(PAGE)
        .pressure_hold(Duration::MAX)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "pressure_hold");
    // The map-count budget gives max_live; a reserve above it cannot be had.
    let e = StackPool::builder(PAGE)
        .map_budget(MapBudget::with_max_map_count(5000 + 2 * 20))
        .guard_mode(GuardMode::Protect)
        .min_idle(21)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "min_idle");
    if GuardMode::markers_supported() {
        // One VMA per stack: the same budget has room for 40.
        let e = StackPool::builder(PAGE)
            .map_budget(MapBudget::with_max_map_count(5000 + 2 * 20))
            .guard_mode(GuardMode::Markers)
            .min_idle(41)
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "min_idle");
    } else {
        let e = StackPool::builder(PAGE)
            .guard_mode(GuardMode::Markers)
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "guard_mode");
    }
}

#[test]
#[cfg(target_os = "linux")]
fn caps_default_to_the_map_count_budget_on_linux() {
    let os = MapBudget::from_os();
    let pool = StackPool::new(PAGE).unwrap();
    assert_eq!(pool.budget().unwrap().max_map_count(), os.max_map_count());
    let stacks = os.stacks_with(pool.manager().guard_mode());
    assert_eq!(pool.config().max_live(), Some(stacks));
    assert_eq!(pool.config().max_idle(), stacks);
    let protect = StackPool::builder(PAGE)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    assert_eq!(
        protect.config().max_live(),
        Some(os.stacks()),
        "2 VMAs each"
    );
    if GuardMode::markers_supported() {
        assert_eq!(stacks, os.max_map_count() - RESERVED_VMAS, "1 VMA each");
    }
    if std::path::Path::new("/proc/sys/vm/max_map_count").exists() {
        assert_eq!(os.source(), BudgetSource::Os);
    }
}

#[test]
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn without_a_map_count_there_is_no_budget_and_no_max_live() {
    let pool = StackPool::new(PAGE).unwrap();
    assert_eq!(pool.budget(), None);
    assert_eq!(pool.config().max_live(), None);
    assert_eq!(pool.config().max_idle(), tidepool::DEFAULT_MAX_IDLE);
}

#[test]
fn caps_follow_a_given_budget_and_explicit_caps() {
    let given = StackPool::builder(PAGE)
        .map_budget(MapBudget::with_max_map_count(5000 + 2 * 20))
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    assert_eq!(given.config().max_live(), Some(20));
    assert_eq!(given.config().max_idle(), 20);
    assert_eq!(
        given.config().batch_size(),
        2,
        "batch lowered to an eighth of the cap"
    );

    let explicit_live = StackPool::builder(PAGE).max_live(100).build().unwrap();
    assert_eq!(
        explicit_live.config().max_idle(),
        100,
        "idle cap follows max_live"
    );

    let unbounded = StackPool::builder(PAGE).unbounded().build().unwrap();
    assert_eq!(unbounded.config().max_live(), None);
}

#[test]
fn keep_resident_is_rounded_and_clamped() {
    let pool = StackPool::builder(8 * PAGE)
        .keep_resident(1)
        .build()
        .unwrap();
    assert_eq!(pool.manager().keep_resident(), PAGE);
    let pool = StackPool::builder(8 * PAGE)
        .keep_resident(usize::MAX)
        .build()
        .unwrap();
    assert_eq!(pool.manager().keep_resident(), 8 * PAGE);
}

#[test]
fn a_returned_stack_is_reused_by_the_next_get() {
    let pool = StackPool::new(16 * PAGE).unwrap();
    let first = pool.get().unwrap();
    let top = first.top();
    fill(&first, 1);
    drop(first);
    let again = pool.get().unwrap();
    assert_eq!(again.top(), top);
    let s = pool.stats();
    assert_eq!((s.pool.created, s.pool.hits, s.mapped), (1, 1, 1));
}

#[test]
fn a_stack_put_back_through_its_pool_is_reused_and_one_of_another_pool_goes_home() {
    let pool = StackPool::new(16 * PAGE).unwrap();
    let other = StackPool::new(16 * PAGE).unwrap();
    let first = pool.get().unwrap();
    let top = first.top();
    pool.put(first);
    let s = pool.stats().pool;
    assert_eq!((s.created, s.live, s.idle), (1, 0, 1), "{s:?}");
    let again = pool.get().unwrap();
    assert_eq!(again.top(), top);
    // Put through the wrong pool: back to its own, as a drop would.
    pool.put(other.get().unwrap());
    let (mine, theirs) = (pool.stats().pool, other.stats().pool);
    assert_eq!((mine.created, mine.live, mine.idle), (1, 1, 0), "{mine:?}");
    assert_eq!(
        (theirs.created, theirs.live, theirs.idle),
        (1, 0, 1),
        "{theirs:?}"
    );
    pool.put(again);
    assert_eq!(pool.stats().pool.hits, 1);
}

/// Holds a stack and ends it when dropped: given back through its pool
/// (`StackPool::put`, what an event loop holding the pool does) if `put`,
/// else dropped. Here, while unwinding.
struct EndOnDrop<'a> {
    pool: &'a StackPool,
    stack: Option<PooledStack>,
    put: bool,
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        if let (true, Some(stack)) = (self.put, self.stack.take()) {
            self.pool.put(stack);
        }
    }
}

#[test]
fn a_stack_given_back_while_its_warm_thread_panics_is_destroyed() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let pool = StackPool::new(16 * PAGE).unwrap();
    // Dropped while unwinding, then given back through the pool.
    for (n, put) in [(1, false), (2, true)] {
        // Warm: this thread's cache is remembered and it has a lifetime
        // marker, so either end could take its fast path.
        drop(pool.get().unwrap());
        pool.put(pool.get().unwrap());
        let s = pool.stats().pool;
        assert_eq!((s.created, s.idle, s.destroyed), (n, 1, n - 1), "{s:?}");
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _held = EndOnDrop {
                pool: &pool,
                stack: Some(pool.get().unwrap()),
                put,
            };
            panic!("injected: test body");
        }));
        assert!(r.is_err());
        let s = pool.stats().pool;
        assert_eq!(
            (s.created, s.destroyed, s.live, s.idle),
            (n, n, 0, 0),
            "put {put}: {s:?}"
        );
    }
}

#[test]
fn max_live_gives_exhausted_and_recovers_when_a_stack_returns() {
    let pool = StackPool::builder(PAGE).max_live(2).build().unwrap();
    let a = pool.get().unwrap();
    let _b = pool.get().unwrap();
    let err = pool.get().unwrap_err();
    assert!(matches!(err, StackError::Exhausted { limit: 2 }), "{err:?}");
    assert!(err.to_string().contains("max_live"), "{err}");
    assert!(!err.is_resource_limit());
    assert_eq!(pool.stats().reclaim_retries, 0, "a cap is not retried");
    drop(a);
    assert!(pool.get().is_ok());
    assert_eq!(pool.stats().mapped, 2);
}

#[test]
fn a_stack_dropped_on_another_thread_goes_back_to_the_pool() {
    let pool = StackPool::new(4 * PAGE).unwrap();
    let stacks: Vec<_> = (0..10).map(|_| pool.get().unwrap()).collect();
    std::thread::spawn(move || drop(stacks)).join().unwrap();
    let s = pool.stats();
    assert_eq!((s.pool.live, s.pool.idle, s.mapped), (0, 10, 10));
    let vmas = match pool.manager().guard_mode() {
        GuardMode::Markers => s.slabs,
        _ => 10 * VMAS_PER_STACK as u64,
    };
    assert_eq!(s.vmas, vmas);
    assert_eq!(
        pool.drain(),
        10,
        "the exited thread's cache reached the depot"
    );
    assert_eq!(pool.stats().mapped, 0);
}

#[test]
fn stats_bound_idle_resident_bytes() {
    let usable = 16 * PAGE;
    let pool = StackPool::builder(usable)
        .keep_resident(2 * PAGE)
        .batch_size(1)
        .max_idle(8)
        .build()
        .unwrap();
    let stacks: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
    assert_eq!(pool.stats().idle_resident_max, 0, "nothing idle");
    drop(stacks);
    let s = pool.stats();
    assert_eq!(s.pool.idle, 4);
    assert_eq!(s.idle_resident_max, 4 * usable as u64);
    assert_eq!(pool.purge(), 2, "two in the depot, two cached");
    let s = pool.stats();
    assert_eq!(s.purged, 2);
    assert_eq!(s.idle_resident_max, (2 * usable + 2 * 2 * PAGE) as u64);
    assert_eq!((s.purge_failures, s.unmap_failures), (0, 0));
}

#[test]
fn discard_unmaps_and_detach_hands_over_ownership() {
    // An odd size no other test maps, so the ranges are ours; `PROT_NONE`
    // guards, so the stack's usable part is a maps line of its own.
    let pool = StackPool::builder(41 * PAGE)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    let discarded = pool.get().unwrap();
    let range = discarded.usable();
    discarded.discard();
    assert!(
        !SEES_UNMAPPING || !is_mapped(range),
        "discarded stack unmapped"
    );
    assert_eq!(pool.stats().pool.destroyed, 1);

    let detached = pool.get().unwrap().detach();
    let range = detached.usable();
    let s = pool.stats();
    assert_eq!((s.mapped, s.pool.detached), (0, 1), "no longer the pool's");
    assert!(is_mapped(range.clone()));
    fill(&detached, 3);
    drop(detached);
    assert!(
        !SEES_UNMAPPING || !is_mapped(range),
        "detached stack unmapped on drop"
    );
}

#[test]
fn a_lone_guarded_stack_maps_and_refuses_nonsense() {
    let stack = GuardedStack::new(1).unwrap();
    assert_eq!(stack.usable_size(), PAGE);
    fill(&stack, 9);
    let err = GuardedStack::new(usize::MAX).unwrap_err();
    assert!(
        matches!(err, StackError::Os { call: "mmap", .. }),
        "{err:?}"
    );
}

#[test]
fn error_messages_name_the_limit_that_was_hit() {
    let map_count = StackError::MapCountReached {
        vmas: 65_500,
        max_map_count: 65_530,
        call: "mprotect",
    };
    assert!(map_count.is_resource_limit());
    assert_eq!(
        map_count.to_string(),
        "vm.max_map_count reached (65500 VMAs mapped of 65530): mprotect of a stack failed with ENOMEM"
    );
    let oom = StackError::OutOfMemory {
        bytes: 8192,
        vmas: 300,
        max_map_count: 65_530,
        call: "mmap",
    };
    assert!(oom.to_string().starts_with("out of memory"), "{oom}");
    assert!(oom.to_string().contains("not the map count"), "{oom}");
    // What systems without a map count report: no VMA figures to give.
    let oom = StackError::OutOfMemory {
        bytes: 8192,
        vmas: 0,
        max_map_count: 0,
        call: "mmap",
    };
    assert_eq!(
        oom.to_string(),
        "out of memory: mmap of a 8192-byte stack failed with ENOMEM"
    );
}

#[test]
fn a_lent_stack_leads_back_to_its_pool() {
    let pool = StackPool::builder(PAGE).batch_size(1).build().unwrap();
    let other = StackPool::builder(PAGE).batch_size(1).build().unwrap();
    let stack = pool.get().unwrap();
    let handle = stack.pool();
    assert_eq!(handle.stats().pool.live, 1, "the same pool");
    assert_eq!(other.stats().pool.live, 0);
    drop(stack);
    assert_eq!(handle.stats().pool.idle, 1);
    assert_eq!(pool.stats().pool.idle, 1);
}

/// No `&mut GuardedStack` can be had from a lent stack, so no stack the pool
/// did not make (another size, another pool's) can be swapped into it. This
/// compiles only if `PooledStack` implements none of the traits that would
/// give one (the `static_assertions::assert_not_impl_any` trick: with one of
/// them implemented, the `_` below would be ambiguous).
#[test]
fn a_lent_stack_gives_no_mutable_access_to_its_mapping() {
    use std::borrow::BorrowMut;
    use std::ops::DerefMut;
    use tidepool::stack::PooledStack;

    trait AmbiguousIfImpl<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfImpl<()> for T {}
    struct ViaDerefMut;
    struct ViaAsMut;
    struct ViaBorrowMut;
    impl<T: ?Sized + DerefMut> AmbiguousIfImpl<ViaDerefMut> for T {}
    impl<T: ?Sized + AsMut<GuardedStack>> AmbiguousIfImpl<ViaAsMut> for T {}
    impl<T: ?Sized + BorrowMut<GuardedStack>> AmbiguousIfImpl<ViaBorrowMut> for T {}
    <PooledStack as AmbiguousIfImpl<_>>::check();

    // What it does lend: shared access, enough to run on the stack.
    let pool = StackPool::new(PAGE).unwrap();
    let lent = pool.get().unwrap();
    let shared: &GuardedStack = &lent;
    assert_eq!(shared.usable_size(), PAGE);
}

/// The controls the generic pool had (`pool()` no longer hands it out).
#[test]
fn reclaim_pressure_trim_and_prefill_reach_the_stacks() {
    let pool = StackPool::builder(PAGE)
        .batch_size(1)
        .max_idle(8)
        .min_idle(2)
        .background(false)
        .build()
        .unwrap();
    assert_eq!(pool.prefill().unwrap(), 2);
    let s = pool.stats();
    assert_eq!((s.mapped, s.pool.idle_depot), (2, 2));
    let held: Vec<_> = (0..6).map(|_| pool.get().unwrap()).collect();
    drop(held);
    assert_eq!(pool.stats().mapped, 6);
    // Not due yet: the first interval has not ended.
    assert_eq!(pool.reclaim(), 0);
    // Critical pressure drains to min_idle, thread caches included.
    assert_eq!(pool.pressure(Level::Critical), 4);
    assert_eq!(pool.stats().mapped, 2);
    assert_eq!(pool.stats().pool.pressure_critical, 1);
    // Everything left is the reserve: trim keeps it.
    assert_eq!(pool.reclaim_unused(), 0);
    assert_eq!(pool.stats().mapped, 2);
}

/// The C API keeps a lent `PooledStack` in a 64-byte header at the top of
/// the stack, next to 24 bytes of its own; and a handle of two words moves
/// in registers (the pool is found through the stack's slab set).
#[test]
fn a_pooled_stack_is_two_words() {
    use std::mem::size_of;
    assert_eq!(size_of::<PooledStack>(), 2 * size_of::<usize>());
    assert_eq!(size_of::<GuardedStack>(), 2 * size_of::<usize>());
}

#[test]
fn pools_and_stacks_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<StackPool>();
    send_sync::<tidepool::stack::PooledStack>();
    send_sync::<GuardedStack>();
    let pool = Arc::new(StackPool::new(PAGE).unwrap());
    let p = Arc::clone(&pool);
    std::thread::spawn(move || drop(p.get().unwrap()))
        .join()
        .unwrap();
    assert_eq!(pool.stats().pool.live, 0);
}

#[cfg(feature = "corosensei")]
mod corosensei_stacks {
    use corosensei::stack::Stack;
    use corosensei::{Coroutine, CoroutineResult};

    use super::*;

    #[test]
    fn pooled_stack_is_a_corosensei_stack() {
        let pool = StackPool::new(PAGE).unwrap();
        let stack = pool.get().unwrap();
        assert_eq!(Stack::base(&stack).get(), stack.top().as_ptr() as usize);
        assert_eq!(Stack::limit(&stack).get(), stack.guard().start);
        assert_eq!(
            Stack::base(&stack).get() % corosensei::stack::STACK_ALIGNMENT,
            0
        );
        let usable = Stack::base(&stack).get() - Stack::limit(&stack).get() - stack.guard_size();
        assert!(usable >= corosensei::stack::MIN_STACK_SIZE);
    }

    #[test]
    fn a_coroutine_runs_on_the_pooled_stack_and_gives_it_back() {
        let pool = StackPool::new(32 * PAGE).unwrap();
        let stack = pool.get().unwrap();
        let range = stack.usable();
        let mut co = Coroutine::with_stack(stack, |yielder, n: usize| {
            let local = 0u64;
            let at = std::hint::black_box(&local) as *const u64 as usize;
            let more = yielder.suspend(at);
            n + more
        });
        let at = match co.resume(1) {
            CoroutineResult::Yield(at) => at,
            CoroutineResult::Return(_) => panic!("returned before yielding"),
        };
        assert!(range.contains(&at), "{at:#x} not in {range:#x?}");
        assert!(matches!(co.resume(2), CoroutineResult::Return(3)));
        // Done: the stack can be taken back and reused by another coroutine.
        let stack = co.into_stack();
        assert_eq!(stack.usable(), range);
        let mut again: Coroutine<(), (), u32, _> = Coroutine::with_stack(stack, |_, ()| 7);
        assert!(matches!(again.resume(()), CoroutineResult::Return(7)));
        drop(again);
        let s = pool.stats();
        assert_eq!((s.pool.live, s.pool.idle, s.pool.created), (0, 1, 1));
    }

    #[test]
    fn dropping_an_unfinished_coroutine_returns_its_stack() {
        let pool = StackPool::new(32 * PAGE).unwrap();
        let mut co = Coroutine::with_stack(pool.get().unwrap(), |yielder, ()| {
            yielder.suspend(());
            unreachable!("never resumed a second time")
        });
        assert!(matches!(co.resume(()), CoroutineResult::Yield(())));
        drop(co); // force-unwinds the coroutine, then drops the stack
        let s = pool.stats();
        assert_eq!((s.pool.live, s.pool.idle), (0, 1));
    }
}

#[test]
fn a_handle_from_a_lent_stack_keeps_the_pool_open_until_it_drops() {
    // An odd size no other test maps, so the ranges are ours.
    let pool = StackPool::builder(43 * PAGE)
        .batch_size(1)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    let stack = pool.get().unwrap();
    let range = stack.usable();
    let handle = stack.pool();
    drop(pool);
    drop(stack);
    assert_eq!(
        handle.stats().pool.idle,
        1,
        "back in the pool `handle` holds"
    );
    assert!(is_mapped(range.clone()));
    drop(handle);
    assert!(
        !SEES_UNMAPPING || !is_mapped(range),
        "the last handle's drop destroyed the idle stack"
    );
}

/// A pool closed with a stack out; a new handle taken from the stack;
/// the stack given back (`give_back`) while only that handle holds the
/// pool, which keeps it until the handle drops, and then lets it go.
fn a_handle_taken_after_the_pool_closed(give_back: impl FnOnce(&StackPool, PooledStack)) {
    let pool = StackPool::builder(47 * PAGE)
        .batch_size(1)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    let stack = pool.get().unwrap();
    let range = stack.usable();
    // Closed with a stack out: parked until the stack is back.
    drop(pool);
    let handle = stack.pool();
    assert_eq!(handle.stats().pool.live, 1);
    give_back(&handle, stack);
    assert!(is_mapped(range.clone()), "the new handle holds the pool");
    let s = handle.stats().pool;
    assert_eq!((s.live, s.idle, s.destroyed), (0, 1, 0));
    drop(handle);
    assert!(
        !SEES_UNMAPPING || !is_mapped(range),
        "the last handle's drop destroyed the idle stack"
    );
}

#[test]
fn a_handle_taken_after_the_pool_closed_holds_it_until_it_drops() {
    a_handle_taken_after_the_pool_closed(|_, stack| drop(stack));
}

/// `put` skips the lifetime marker, so it never looks at the first close's
/// parked pool: the handle's own close lets that go too (before it did,
/// the stack stayed mapped for good).
#[test]
fn a_stack_put_through_a_handle_taken_after_the_pool_closed_is_freed_with_it() {
    a_handle_taken_after_the_pool_closed(|handle, stack| handle.put(stack));
}
