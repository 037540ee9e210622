//! Stacks in slabs: one `mmap` per slab, one guard `madvise` (markers) or
//! one `mprotect` (`PROT_NONE` guards) per stack, one `munmap` per slab
//! exactly when its last stack goes, one `madvise` per run of adjacent
//! stacks; every stack destroyed exactly once; bursts within the budget; a
//! refused mapping is an error, not an abort. The cases that count calls
//! or VMAs run in both guard modes.
//!
//! The tests read `/proc/self/maps` and count VMAs, so they take turns
//! (`SERIAL`) and map sizes no other test binary uses.
#![cfg(target_os = "linux")]

use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tidepool::stack::{
    mapped_vmas, GuardMode, GuardedStack, MapBudget, StackError, StackManager, StackPool,
    StackStats, MAX_STACKS_PER_SLAB,
};
use tidepool::{Manage, Pool};

const PAGE: usize = 4096;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

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

/// The guard modes this kernel runs: `PROT_NONE` guards always, markers
/// where it has them.
fn modes() -> Vec<GuardMode> {
    let mut modes = vec![GuardMode::Protect];
    if GuardMode::markers_supported() {
        modes.push(GuardMode::Markers);
    }
    modes
}

/// (`mmap`, `mprotect`, guard `madvise`) calls so far.
fn opening_calls(s: &StackStats) -> (u64, u64, u64) {
    (s.mmap_calls, s.mprotect_calls, s.guard_calls)
}

/// The calls that map `slabs` slabs and open `stacks` stacks in `mode`.
fn expected_opening(mode: GuardMode, slabs: u64, stacks: u64) -> (u64, u64, u64) {
    match mode {
        GuardMode::Markers => (slabs, 0, stacks),
        _ => (slabs, stacks, 0),
    }
}

/// Is any byte of `range` mapped (`/proc/self/maps`)?
fn any_mapped(range: Range<usize>) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|l| {
        let (lo, hi) = l
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        let lo = usize::from_str_radix(lo, 16).unwrap();
        let hi = usize::from_str_radix(hi, 16).unwrap();
        lo < range.end && range.start < hi
    })
}

/// A whole stack's range, guard included.
fn whole(stack: &GuardedStack) -> Range<usize> {
    stack.guard().start..stack.usable().end
}

/// Gets `n` stacks from `pool` and detaches them: plain `GuardedStack`s
/// that were lent out (so their pages count as touched).
fn detached(pool: &StackPool, n: usize) -> Vec<GuardedStack> {
    let lent: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
    lent.into_iter().map(|s| s.detach()).collect()
}

#[test]
fn a_burst_is_one_mmap_and_one_guard_call_per_stack_in_one_slab() {
    let _turn = serial();
    for mode in modes() {
        a_burst_in(mode);
    }
}

fn a_burst_in(mode: GuardMode) {
    for step in [tidepool::DEFAULT_RELEASE_STEP, 0] {
        a_burst_with(mode, step);
    }
}

fn a_burst_with(mode: GuardMode, step: usize) {
    let pool = StackPool::builder(13 * PAGE)
        .guard_mode(mode)
        .release_step(step)
        .build()
        .unwrap();
    assert_eq!(pool.manager().release_step(), step);
    let k = pool.manager().stacks_per_slab();
    assert_eq!(k, MAX_STACKS_PER_SLAB, "56 KiB slots: 32 to a slab");
    let stacks = pool.manager().create_batch(k).unwrap();
    assert_eq!(stacks.len(), k);
    let s = pool.stats();
    assert_eq!((s.slabs, s.slots), (1, k as u64));
    assert_eq!(opening_calls(&s), expected_opening(mode, 1, k as u64));
    match mode {
        GuardMode::Markers => assert_eq!(s.vmas, 1, "markers keep the slab whole"),
        _ => assert_eq!(s.vmas, 2 * k as u64, "guards split the slab"),
    }
    // One slab: adjacent, each guard right on the stack below's top.
    let mut bottoms: Vec<_> = stacks.iter().map(|s| s.guard().start).collect();
    bottoms.sort_unstable();
    let stride = 14 * PAGE;
    assert!(bottoms.windows(2).all(|w| w[1] - w[0] == stride));
    for s in &stacks {
        fill(s, 7);
    }
    pool.manager().destroy_batch(stacks);
    let s = pool.stats();
    assert_eq!((s.slabs, s.slots, s.munmap_calls), (0, 0, 1));
    // 32 slots of 14 pages fit one release step: the slab's pages go back
    // in one call (across its guards), then it is unmapped. Without a
    // step, the munmap frees them.
    let released = u64::from(step != 0);
    assert_eq!(s.madvise_calls, released, "one step, then one munmap");
    assert_eq!(pool.manager().create_batch(0).unwrap().len(), 0);
}

#[test]
fn a_slab_is_unmapped_exactly_when_its_last_stack_goes() {
    let _turn = serial();
    for mode in modes() {
        a_slab_is_unmapped_in(mode);
    }
}

fn a_slab_is_unmapped_in(mode: GuardMode) {
    let pool = StackPool::builder(11 * PAGE)
        .batch_size(1)
        .guard_mode(mode)
        .build()
        .unwrap();
    let k = pool.manager().stacks_per_slab();
    let mut stacks = detached(&pool, k);
    let slab = stacks.iter().map(|s| s.guard().start).min().unwrap()
        ..stacks.iter().map(|s| s.usable().end).max().unwrap();
    assert_eq!(slab.len(), k * 12 * PAGE);
    let s = pool.stats();
    assert_eq!(s.slabs, 1);
    assert_eq!(opening_calls(&s), expected_opening(mode, 1, k as u64));

    // Every stack but one goes, one at a time, in no particular order.
    let last = stacks.remove(k / 2);
    let mut gone = Vec::new();
    while let Some(s) = stacks.pop() {
        fill(&s, 1);
        gone.push(whole(&s));
        drop(s);
        let st = pool.stats();
        assert_eq!(st.munmap_calls, 0, "the slab still has a stack");
        assert!(any_mapped(slab.clone()));
    }
    // Freed slots stay mapped (and counted) until the slab goes; their
    // pages were released, one `madvise` each (they were destroyed alone).
    assert!(gone.iter().all(|r| any_mapped(r.clone())));
    let st = pool.stats();
    assert_eq!(st.madvise_calls, k as u64 - 1);
    let vmas = match mode {
        GuardMode::Markers => 1,
        _ => 2 * k as u64,
    };
    assert_eq!(st.vmas, vmas, "freed slots still count");
    assert_eq!(st.slots, k as u64);
    assert_eq!(last.resident_bytes().unwrap(), 0, "never touched");

    drop(last);
    let st = pool.stats();
    assert_eq!((st.slabs, st.slots, st.vmas, st.munmap_calls), (0, 0, 0, 1));
    assert!(!any_mapped(slab), "the whole slab is gone");
    assert_eq!(st.unmap_failures, 0);
}

#[test]
fn destroy_batch_unmaps_whole_slabs_and_releases_runs_in_the_rest() {
    let _turn = serial();
    let pool = StackPool::builder(9 * PAGE).batch_size(1).build().unwrap();
    let m = pool.manager();
    let k = m.stacks_per_slab();
    // Two slabs' worth, all touched.
    let mut stacks = detached(&pool, 2 * k);
    stacks.iter().for_each(|s| fill(s, 3));
    stacks.sort_by_key(|s| s.guard().start);
    let before = pool.stats();
    assert_eq!((before.slabs, before.madvise_calls), (2, 0));
    // The upper slab whole, and from the lower one two runs: slots 0..4 and
    // 6..9 (adjacent stacks), leaving 4, 5 and 9.. alive.
    let upper: Vec<_> = stacks.drain(k..).collect();
    let lower_keep: Vec<_> = [4, 5].iter().map(|&i| whole(&stacks[i])).collect();
    let mut kept = stacks.split_off(9);
    let mut batch: Vec<_> = stacks.drain(6..).collect();
    kept.extend(stacks.drain(4..));
    batch.append(&mut stacks);
    let runs: Vec<_> = batch.iter().map(|s| s.usable()).collect();
    batch.extend(upper);
    batch.reverse(); // any order
    m.destroy_batch(batch);

    let after = pool.stats();
    assert_eq!(after.munmap_calls, 1, "the upper slab, in one call");
    // One per run of adjacent stacks, and the upper slab's pages in one
    // step (32 slots of 10 pages fit one) before its munmap.
    assert_eq!(after.madvise_calls, 3, "one per run, one per step");
    assert_eq!(after.slabs, 1);
    // The freed stacks' slots stay mapped with the slab.
    assert!(runs.into_iter().all(any_mapped));
    assert!(lower_keep.iter().all(|r| any_mapped(r.clone())));
    for s in &kept {
        assert_eq!(s.resident_bytes().unwrap(), s.usable_size(), "kept whole");
    }
    // Reuse: the freed slots come back without a syscall, zeroed.
    let calls = |s: &tidepool::stack::StackStats| {
        (
            s.mmap_calls,
            s.mprotect_calls,
            s.guard_calls,
            s.madvise_calls,
            s.munmap_calls,
        )
    };
    let again = m.create_batch(7).unwrap();
    assert_eq!(calls(&pool.stats()), calls(&after));
    for s in &again {
        assert_eq!(s.resident_bytes().unwrap(), 0, "released before reuse");
    }
    m.destroy_batch(again);
    m.destroy_batch(kept);
    let end = pool.stats();
    assert_eq!((end.slabs, end.munmap_calls, end.mmap_calls), (0, 2, 2));
}

#[test]
fn munmap_calls_per_thousand_stacks_are_one_per_slab() {
    let _turn = serial();
    let pool = StackPool::builder(16 * PAGE)
        .batch_size(64)
        .max_idle(4096)
        .background(false)
        .build()
        .unwrap();
    let k = pool.manager().stacks_per_slab() as u64;
    let held: Vec<_> = (0..1000).map(|_| pool.get().unwrap()).collect();
    held.iter().for_each(|s| fill(s, 9));
    drop(held);
    assert_eq!(pool.drain_blocking(), 1000);
    let s = pool.stats();
    assert_eq!(s.pool.destroyed, 1000);
    assert_eq!(s.mmap_calls, 1000_u64.div_ceil(k));
    assert_eq!(s.munmap_calls, s.mmap_calls, "every slab unmapped once");
    assert_eq!((s.slabs, s.mapped), (0, 0));
}

/// A manager that hands every create and destroy to a pool's
/// `StackManager` and keeps a ledger: a stack created twice (same address
/// while alive) or destroyed when not alive fails the test.
struct Ledgered {
    stacks: StackPool,
    alive: Arc<Mutex<HashSet<usize>>>,
}

impl Ledgered {
    fn enter(&self, s: &GuardedStack) {
        assert!(self
            .alive
            .lock()
            .unwrap()
            .insert(s.limit().as_ptr() as usize));
    }
    fn leave(&self, s: &GuardedStack) {
        assert!(
            self.alive
                .lock()
                .unwrap()
                .remove(&(s.limit().as_ptr() as usize)),
            "destroyed a stack that was not alive"
        );
    }
    fn inner(&self) -> &StackManager {
        self.stacks.manager()
    }
}

impl Manage for Ledgered {
    type Item = GuardedStack;
    type Error = StackError;

    fn create(&self) -> Result<GuardedStack, StackError> {
        let s = self.inner().create()?;
        self.enter(&s);
        Ok(s)
    }
    fn create_batch(&self, n: usize) -> Result<Vec<GuardedStack>, StackError> {
        let v = self.inner().create_batch(n)?;
        v.iter().for_each(|s| self.enter(s));
        Ok(v)
    }
    fn purge_batch(&self, items: &mut [GuardedStack]) {
        self.inner().purge_batch(items)
    }
    fn purge(&self, item: &mut GuardedStack) {
        self.inner().purge(item)
    }
    fn destroy(&self, item: GuardedStack) {
        self.leave(&item);
        self.inner().destroy(item)
    }
    fn destroy_batch(&self, items: Vec<GuardedStack>) {
        items.iter().for_each(|s| self.leave(s));
        self.inner().destroy_batch(items)
    }
}

#[test]
fn every_stack_is_destroyed_exactly_once_and_every_slab_unmapped_once() {
    let _turn = serial();
    let stacks = StackPool::builder(5 * PAGE).build().unwrap();
    let alive = Arc::new(Mutex::new(HashSet::new()));
    let pool = Pool::builder(Ledgered {
        stacks: stacks.clone(),
        alive: Arc::clone(&alive),
    })
    .batch_size(8)
    .max_idle(40)
    .build()
    .unwrap();
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for t in 0..3 {
            let (pool, alive) = (&pool, &alive);
            workers.push(s.spawn(move || {
                for round in 0..20 {
                    let held: Vec<_> = (0..30 + 7 * t).map(|_| pool.get().unwrap()).collect();
                    for (i, g) in held.into_iter().enumerate() {
                        match (i + round) % 7 {
                            0 => g.discard(),
                            1 => {
                                // No longer the pool's: out of the ledger.
                                let own = g.detach();
                                alive
                                    .lock()
                                    .unwrap()
                                    .remove(&(own.limit().as_ptr() as usize));
                            }
                            _ => drop(g),
                        }
                    }
                    if round % 5 == 4 {
                        pool.purge();
                        pool.reclaim_unused();
                    }
                }
                // Exits with a full cache: handed to the depot.
            }));
        }
        // Joined, not left to the scope's end: the scope returns once the
        // closures have, before the threads' thread-locals are destroyed,
        // so their caches' hand-over would race the checks below.
        workers.into_iter().for_each(|w| w.join().unwrap());
    });
    // Batches straight from the manager, too.
    let m = pool.manager();
    let batch = m.create_batch(50).unwrap();
    assert!(!batch.is_empty() && batch.len() <= 50);
    m.destroy_batch(batch);
    let s = pool.stats();
    assert_eq!(s.live, 0);
    drop(pool); // destroys every idle stack, other threads' caches included
    assert!(alive.lock().unwrap().is_empty(), "every stack destroyed");
    let st = stacks.stats();
    assert_eq!((st.slabs, st.slots), (0, 0));
    assert_eq!(st.munmap_calls, st.mmap_calls, "each slab unmapped once");
    assert_eq!(st.unmap_failures, 0);
}

#[test]
fn purge_batch_uses_one_madvise_per_run_of_adjacent_stacks() {
    let _turn = serial();
    let pool = StackPool::builder(7 * PAGE).batch_size(1).build().unwrap();
    let m = pool.manager();
    let mut stacks = detached(&pool, 8);
    stacks.iter().for_each(|s| fill(s, 5));
    stacks.sort_by_key(|s| s.guard().start);
    // Slots 0..3 and 4..8 of one slab, out of order: two runs.
    let mut batch: Vec<_> = stacks.drain(4..).collect();
    batch.extend(stacks.drain(..3));
    let before = pool.stats().madvise_calls;
    m.purge_batch(&mut batch);
    assert_eq!(pool.stats().madvise_calls - before, 2);
    for s in &batch {
        assert_eq!(s.resident_bytes().unwrap(), 0);
    }
    assert_eq!(
        stacks[0].resident_bytes().unwrap(),
        7 * PAGE,
        "not in the batch"
    );
    drop(batch);
    drop(stacks);
    assert_eq!(pool.stats().slabs, 0);

    // Stacks of two pools and a lone stack in one call: each pool's run is
    // one call, counted by its own pool.
    let other = StackPool::builder(7 * PAGE).batch_size(1).build().unwrap();
    let mut mixed = detached(&pool, 3);
    mixed.extend(detached(&other, 3));
    mixed.push(GuardedStack::new(7 * PAGE).unwrap());
    mixed.iter().for_each(|s| fill(s, 4));
    let (a, b) = (pool.stats().madvise_calls, other.stats().madvise_calls);
    m.purge_batch(&mut mixed);
    assert_eq!(pool.stats().madvise_calls - a, 1);
    assert_eq!(other.stats().madvise_calls - b, 1);
    assert!(mixed.iter().all(|s| s.resident_bytes().unwrap() == 0));
    drop(mixed);
    assert_eq!((pool.stats().slabs, other.stats().slabs), (0, 0));

    // With a kept top, neighbours are not contiguous: one call each.
    let keep = 2 * PAGE;
    let pool = StackPool::builder(7 * PAGE)
        .keep_resident(keep)
        .batch_size(1)
        .build()
        .unwrap();
    let mut stacks = detached(&pool, 4);
    stacks.iter().for_each(|s| fill(s, 5));
    pool.manager().purge_batch(&mut stacks);
    let s = pool.stats();
    assert_eq!((s.madvise_calls, s.purge_failures), (4, 0));
    for s in &stacks {
        assert_eq!(s.resident_bytes().unwrap(), keep);
    }
}

#[test]
fn purge_and_drain_through_the_pool_count_their_calls() {
    let _turn = serial();
    let pool = StackPool::builder(6 * PAGE)
        .batch_size(1)
        .max_idle(16)
        .background(false)
        .build()
        .unwrap();
    let held: Vec<_> = (0..6).map(|_| pool.get().unwrap()).collect();
    held.iter().for_each(|s| fill(s, 2));
    // Two stay in this thread's cache, four reach the depot.
    drop(held);
    // The pool purges one stack at a time (until it calls `purge_batch`).
    assert_eq!(pool.purge(), 4);
    assert_eq!(pool.stats().madvise_calls, 4);
    assert_eq!(pool.purge(), 0, "the depot remembers what it purged");
    // Queued as six batches of one, destroyed as one chunk: one
    // `destroy_batch` with the whole slab, so one `munmap`, after one
    // release step for the slab's six adjacent stacks (one at a time, six
    // `madvise`s would come first).
    assert_eq!(pool.drain(), 6);
    let s = pool.stats();
    assert_eq!((s.munmap_calls, s.slabs), (1, 0));
    assert_eq!(s.madvise_calls, 5, "one release step before the unmap");
}

#[test]
fn bursts_stay_within_max_live_and_the_map_budget() {
    let _turn = serial();
    // max_live 10: a slab of 10, and a burst of 32 gets those 10.
    let pool = StackPool::builder(3 * PAGE).max_live(10).build().unwrap();
    let m = pool.manager();
    let burst = m.create_batch(32).unwrap();
    assert_eq!(burst.len(), 10);
    let s = pool.stats();
    assert_eq!((s.slabs, s.slots, s.mmap_calls), (1, 10, 1));
    // A burst past the budget is shrunk to nothing but the one stack a
    // `create` is owed (the pool's own cap refuses those before they get
    // here; these come from detached stacks).
    let more = m.create_batch(5).unwrap();
    assert_eq!(more.len(), 1);
    assert_eq!(pool.stats().slots, 11);
    drop(more);
    drop(burst);
    assert_eq!(pool.stats().slabs, 0);

    // The default budget: max_live from the map count; slabs fill it and
    // never pass it.
    // `PROT_NONE` guards: 2 VMAs per stack, 45 stacks.
    let budget = MapBudget::with_max_map_count(5000 + 2 * 45);
    let pool = StackPool::builder(3 * PAGE)
        .map_budget(budget)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    assert_eq!(pool.config().max_live(), Some(45));
    let held: Vec<_> = (0..45).map(|_| pool.get().unwrap()).collect();
    let s = pool.stats();
    assert_eq!((s.slabs, s.slots), (2, 45), "32 + 13");
    assert!(s.vmas <= 2 * 45);
    assert!(matches!(
        pool.get(),
        Err(StackError::Exhausted { limit: 45 })
    ));
    drop(held);
    if !GuardMode::markers_supported() {
        return;
    }
    // Guard markers: a slab is one VMA, so the same budget is 90 stacks
    // (one VMA each at worst), and they take 3 VMAs.
    let pool = StackPool::builder(3 * PAGE)
        .map_budget(budget)
        .guard_mode(GuardMode::Markers)
        .build()
        .unwrap();
    assert_eq!(pool.config().max_live(), Some(90));
    let held: Vec<_> = (0..90).map(|_| pool.get().unwrap()).collect();
    let s = pool.stats();
    assert_eq!((s.slabs, s.slots, s.vmas), (3, 90, 3), "32 + 32 + 26");
    assert!(matches!(
        pool.get(),
        Err(StackError::Exhausted { limit: 90 })
    ));
    drop(held);
}

#[test]
fn vma_counts_match_the_maps_file() {
    let _turn = serial();
    for mode in modes() {
        let pool = StackPool::builder(17 * PAGE)
            .batch_size(1)
            .guard_mode(mode)
            .build()
            .unwrap();
        let baseline = mapped_vmas().unwrap();
        let held: Vec<_> = (0..5).map(|_| pool.get().unwrap()).collect();
        let s = pool.stats();
        let vmas = match mode {
            GuardMode::Markers => 1,
            _ => 10, // 2 per stack, the rest of the slab merged
        };
        assert_eq!(s.vmas, vmas as u64, "{mode}");
        let now = mapped_vmas().unwrap();
        // Other threads of this binary are idle (SERIAL); the allocator may
        // add a mapping or two, and the kernel may merge each edge of the
        // slab with a neighbour of the same kind (a PROT_NONE reservation
        // below, a thread's stack above): `vmas` is an upper bound.
        assert!(
            now + 2 >= baseline + vmas && now <= baseline + vmas + 4,
            "{mode}: {baseline} -> {now}"
        );
        drop(held);
    }
}

#[test]
fn stacks_of_different_pools_never_share_a_slab() {
    let _turn = serial();
    let a = StackPool::builder(2 * PAGE).batch_size(1).build().unwrap();
    let b = StackPool::builder(2 * PAGE).batch_size(1).build().unwrap();
    let mut all = Vec::new();
    for _ in 0..8 {
        all.push((0, a.get().unwrap()));
        all.push((1, b.get().unwrap()));
    }
    // Each slab is a contiguous range; a's and b's ranges do not overlap.
    let span = |p: usize| {
        let mine = all.iter().filter(|(q, _)| *q == p).map(|(_, s)| whole(s));
        let lo = mine.clone().map(|r| r.start).min().unwrap();
        let hi = mine.map(|r| r.end).max().unwrap();
        lo..hi
    };
    let (sa, sb) = (span(0), span(1));
    assert!(sa.end <= sb.start || sb.end <= sa.start, "{sa:x?} {sb:x?}");
    assert_eq!((a.stats().slabs, b.stats().slabs), (1, 1));
}

/// `RLIMIT_AS` makes `mmap` fail with `ENOMEM` well below the map count;
/// the pool must say `OutOfMemory`, not abort. In a child process: the
/// limit binds the whole process.
#[test]
fn out_of_address_space_is_an_error_in_a_child() {
    const NAME: &str = "out_of_address_space_is_an_error_in_a_child";
    const CHILD: &str = "TIDEPOOL_STACK_SLAB_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(NAME) {
        let pool = StackPool::builder(64 * 1024).unbounded().build().unwrap();
        let mut held = Vec::with_capacity(100_000);
        drop(pool.get().unwrap()); // warm up
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_kib: u64 = status
            .lines()
            .find(|l| l.starts_with("VmSize:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap();
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes `rl`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) }, 0);
        rl.rlim_cur = (vm_kib + 16 * 1024) * 1024; // 16 MiB more
                                                   // SAFETY: setrlimit only reads `rl`.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        let err = loop {
            match pool.get() {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
            assert!(held.len() < 100_000, "no limit hit");
        };
        let n = held.len();
        let out_of_memory = matches!(err, StackError::OutOfMemory { .. });
        held.clear();
        pool.drain_blocking();
        let s = pool.stats();
        eprintln!(
            "CHILD: {n} stacks, then {err}; oom={out_of_memory} slabs={} mmap={} munmap={}",
            s.slabs, s.mmap_calls, s.munmap_calls
        );
        assert!(out_of_memory, "{err:?}");
        assert!(n > 100, "{n}");
        assert_eq!((s.slabs, s.mapped), (0, 0));
        // Every slab mapped was unmapped; the refused calls count too.
        assert!(s.munmap_calls > 0 && s.munmap_calls < s.mmap_calls, "{s:?}");
        std::process::exit(0);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, NAME)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(stderr.contains("oom=true slabs=0"), "{stderr}");
}

#[test]
fn the_stack_builder_passes_the_teardown_bounds_on() {
    let pool = StackPool::builder(16 * 1024)
        .background(false)
        .teardown_threads(3)
        .teardown_chunk(7)
        .build()
        .unwrap();
    assert_eq!(pool.config().teardown_threads(), 3);
    assert_eq!(pool.config().teardown_chunk(), 7);
    let e = StackPool::builder(16 * 1024)
        .teardown_chunk(0)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "teardown_chunk");
}

/// Every usable byte of `stack` is 0.
fn all_zero(stack: &GuardedStack) -> bool {
    // SAFETY: the usable part is mapped and readable while `stack` lives.
    let bytes = unsafe { std::slice::from_raw_parts(stack.bottom().as_ptr(), stack.usable_size()) };
    bytes.iter().all(|&b| b == 0)
}

#[test]
fn a_reused_stack_zeroed_reads_as_zeros_and_keeps_its_touched_top_resident() {
    let _turn = serial();
    let pool = StackPool::builder(64 * PAGE)
        .batch_size(1)
        .background(false)
        .build()
        .unwrap();
    let first = pool.get().unwrap();
    let at = first.bottom();
    // The last user wrote its top 3 pages and one page deep down.
    let top = first.top().as_ptr();
    // SAFETY: the usable part is writable and ours.
    unsafe {
        top.sub(3 * PAGE).write_bytes(9, 3 * PAGE);
        first.bottom().as_ptr().add(2 * PAGE).write_bytes(9, PAGE);
    }
    drop(first);
    let mut again = pool.get().unwrap();
    assert_eq!(again.bottom(), at, "the same stack, reused");
    // SAFETY: as above (one byte: reading the rest would fault it in).
    assert_eq!(unsafe { top.sub(1).read() }, 9, "reused as it was left");
    let before = pool.stats().madvise_calls;
    // A kept top past 16 pages is cleared where it was touched.
    again.zero(32 * PAGE).unwrap();
    // The touched top pages inside the kept 32 were cleared in place and
    // stay; the deep page was released, with the rest, in one call.
    assert_eq!(pool.stats().madvise_calls - before, 1);
    assert_eq!(again.resident_bytes().unwrap(), 3 * PAGE);
    assert!(all_zero(&again), "every byte reads as zero");
    // Nothing kept: all released, one call.
    // SAFETY: as above.
    unsafe { again.top().as_ptr().sub(PAGE).write_bytes(5, PAGE) };
    again.zero(0).unwrap();
    assert_eq!(again.resident_bytes().unwrap(), 0);
    assert!(all_zero(&again));
    assert_eq!(pool.stats().madvise_calls - before, 2);
}

/// Writes page `n` counted from the top (1: the top page) of `stack`.
fn touch_from_top(stack: &GuardedStack, n: usize) {
    // SAFETY: a page of the usable part, writable and ours.
    unsafe { stack.top().as_ptr().sub(n * PAGE).write_bytes(9, PAGE) };
}

#[test]
fn between_exact_zeroings_the_recorded_depth_is_cleared_and_the_rest_released_in_one_call() {
    let _turn = serial();
    let pool = StackPool::builder(64 * PAGE)
        .batch_size(1)
        .background(false)
        .build()
        .unwrap();
    let mut stack = pool.get().unwrap();
    let calls = || pool.stats().madvise_calls;
    // The pool's first zeroing is exact: 3 touched pages found, kept.
    for n in 1..=3 {
        touch_from_top(&stack, n);
    }
    stack.zero(32 * PAGE).unwrap();
    assert_eq!(stack.resident_bytes().unwrap(), 3 * PAGE);
    // The next ones clear the top 3 pages and release the rest in one
    // call: a page touched deeper in the kept top, and one at the bottom,
    // are released, not kept.
    let before = calls();
    touch_from_top(&stack, 1);
    touch_from_top(&stack, 10);
    touch_from_top(&stack, 60);
    stack.zero(32 * PAGE).unwrap();
    assert_eq!(calls() - before, 1);
    assert_eq!(stack.resident_bytes().unwrap(), 3 * PAGE);
    assert!(all_zero(&stack), "every byte reads as zero");
    // Up to the next exact one (the 33rd), each is one call.
    for _ in 3..=32 {
        touch_from_top(&stack, 2);
        stack.zero(32 * PAGE).unwrap();
    }
    assert_eq!(calls() - before, 31);
    assert_eq!(stack.resident_bytes().unwrap(), 3 * PAGE);
    // The 33rd is exact: it keeps the pages in RAM (the 3 cleared, page 6
    // touched) and records page 6; from then on 6 are cleared and kept.
    touch_from_top(&stack, 6);
    stack.zero(32 * PAGE).unwrap();
    assert_eq!(stack.resident_bytes().unwrap(), 4 * PAGE);
    touch_from_top(&stack, 5);
    stack.zero(32 * PAGE).unwrap();
    assert_eq!(stack.resident_bytes().unwrap(), 6 * PAGE);
    assert!(all_zero(&stack));
}

#[test]
fn a_stack_of_its_own_zeroes_too() {
    let mut stack = GuardedStack::new(8 * PAGE).unwrap();
    fill(&stack, 4);
    stack.zero(usize::MAX).unwrap();
    assert!(all_zero(&stack));
    assert_eq!(
        stack.resident_bytes().unwrap(),
        8 * PAGE,
        "all kept, cleared in place"
    );
}
