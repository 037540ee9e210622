//! The QEMU 2024 failure, reproduced for real: enough guarded stacks run a
//! process into `vm.max_map_count`. With its caps off a pool must report
//! that as an error (no abort, nothing leaked); with its defaults it must
//! keep a spiky workload under the limit.
//!
//! The limit is reached with `PROT_NONE` guards (two VMAs per stack, the
//! QEMU case). With guard markers a slab of up to 32 stacks is one VMA, so
//! the default caps count one VMA per stack (the worst case, slabs of one)
//! and the spiky workload is checked in both modes.
//!
//! These tests push the whole process to its VMA limit, so they live in a
//! binary of their own and take turns (`SERIAL`). Stacks are one page, so
//! ~30 000 of them cost little memory and time. While at the limit the tests
//! allocate nothing large: a big allocation is itself an `mmap`, which would
//! fail there too.
#![cfg(target_os = "linux")]

use std::sync::{Barrier, Mutex, MutexGuard, PoisonError};

use tidepool::stack::{mapped_vmas, GuardMode, MapBudget, StackError, StackPool, VMAS_PER_STACK};

const PAGE: usize = 4096;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// VMAs a test may leave behind or add besides stacks: allocator arenas,
/// thread stacks of the test harness.
const SLACK_VMAS: usize = 64;

/// Gets stacks from `pool` into `held` until the first error, and returns it.
fn get_until_error(pool: &StackPool, held: &mut Vec<tidepool::stack::PooledStack>) -> StackError {
    loop {
        assert!(
            held.len() < held.capacity(),
            "no error after {} stacks",
            held.len()
        );
        match pool.get() {
            Ok(stack) => held.push(stack),
            Err(e) => return e,
        }
    }
}

#[test]
fn an_unbounded_pool_hits_the_map_count_with_an_error_and_leaks_nothing() {
    let _turn = serial();
    let max_map_count = MapBudget::from_os().max_map_count();
    let mut held = Vec::with_capacity(max_map_count);
    let pool = StackPool::builder(PAGE)
        .unbounded()
        .batch_size(16)
        .max_idle(16)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    // Warm up, so the pool's own bookkeeping is allocated before the limit.
    held.extend((0..64).map(|_| pool.get().unwrap()));
    held.clear();
    pool.drain();
    let baseline = mapped_vmas().unwrap();

    let err = get_until_error(&pool, &mut held);
    let created = held.len();
    let vmas_at_limit = mapped_vmas().unwrap();
    let stats = pool.stats();
    held.clear();
    pool.drain();
    eprintln!("after {created} stacks ({baseline} VMAs before them): {err}");

    let StackError::MapCountReached {
        vmas,
        max_map_count: max,
        call,
    } = err
    else {
        panic!("expected MapCountReached, got {err:?}: {err}");
    };
    assert_eq!(max, max_map_count);
    assert!(vmas + 64 >= max, "{vmas} of {max}");
    assert!(call == "mmap" || call == "mprotect", "{call}");
    let msg = err.to_string();
    assert!(msg.starts_with("vm.max_map_count reached ("), "{msg}");
    assert!(msg.contains(&format!("mapped of {max})")), "{msg}");
    assert!(
        created * VMAS_PER_STACK + baseline + SLACK_VMAS >= max_map_count,
        "only {created} stacks before the error (baseline {baseline} VMAs)"
    );
    assert!(
        vmas_at_limit + SLACK_VMAS >= max_map_count,
        "{vmas_at_limit}"
    );
    assert_eq!(stats.reclaim_retries, 1, "the failure was retried once");
    assert_eq!(
        stats.mapped, created as u64,
        "the failed stack is not counted"
    );

    // Nothing leaked: not the failed half-built stack, not the others.
    let stats = pool.stats();
    assert_eq!((stats.mapped, stats.pool.live, stats.pool.idle), (0, 0, 0));
    assert_eq!(stats.unmap_failures, 0);
    let after = mapped_vmas().unwrap();
    assert!(
        after <= baseline + SLACK_VMAS,
        "VMAs: {baseline} before, {vmas_at_limit} at the limit, {after} after"
    );
    // And the pool works again.
    assert!(pool.get().is_ok());
}

#[test]
fn at_the_limit_idle_stacks_of_other_pools_are_reclaimed_and_the_get_retried() {
    let _turn = serial();
    let max_map_count = MapBudget::from_os().max_map_count();
    let mut held = Vec::with_capacity(max_map_count);
    let hoarder = StackPool::builder(PAGE)
        .unbounded()
        .batch_size(256)
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    let other = StackPool::builder(PAGE)
        .unbounded()
        .guard_mode(GuardMode::Protect)
        .build()
        .unwrap();
    held.extend((0..1024).map(|_| hoarder.get().unwrap()));
    held.clear(); // warm up: the hoarder's depot bookkeeping is allocated
    hoarder.drain();

    let err = get_until_error(&hoarder, &mut held);
    assert!(matches!(err, StackError::MapCountReached { .. }), "{err:?}");
    // Free 100 stacks' worth of VMAs, then give the rest to the hoarder's
    // depot, where they stay mapped but idle.
    held.drain(..100).for_each(|s| s.discard());
    held.clear();
    let hoarded = hoarder.stats().pool.idle;
    let destroyed_before = hoarder.stats().pool.destroyed;
    assert!(hoarded > 1000, "{hoarded}");

    // The other pool uses up the freed room, then hits the limit: it must
    // reclaim the hoarder's idle stacks and succeed on the retry.
    let mut mine = Vec::with_capacity(1024);
    while other.stats().reclaim_retries == 0 {
        assert!(mine.len() < 1000, "the limit never came back");
        mine.push(other.get().expect("reclaim made room, the retry succeeded"));
    }
    assert!(
        mine.len() >= 90,
        "{} stacks from the freed room",
        mine.len()
    );
    let h = hoarder.stats();
    assert_eq!((h.mapped, h.pool.idle), (0, 0), "the hoarder was drained");
    assert_eq!(h.pool.destroyed - destroyed_before, hoarded);
    drop(mine);
    assert_eq!(other.stats().pool.live, 0);
}

#[test]
fn default_caps_keep_a_spiky_workload_under_the_map_count() {
    let _turn = serial();
    spiky_workload(GuardMode::Protect);
    if GuardMode::markers_supported() {
        spiky_workload(GuardMode::Markers);
    }
}

fn spiky_workload(mode: GuardMode) {
    let os = MapBudget::from_os();
    // The defaults, on the usual 65530. A machine configured far higher
    // would make this test slow; there the same budget is given explicitly.
    let builder = StackPool::builder(PAGE).guard_mode(mode);
    let pool = if os.stacks() > 40_000 {
        builder.map_budget(MapBudget::with_max_map_count(65530))
    } else {
        builder
    }
    .build()
    .unwrap();
    let budget = pool.budget().expect("Linux has a map count");
    let max_live = budget.stacks_with(mode);
    assert_eq!(pool.config().max_live(), Some(max_live));
    let vmas_per_stack = match mode {
        GuardMode::Markers => 1,
        _ => VMAS_PER_STACK,
    };
    assert_eq!(mode.vmas_per_stack(), vmas_per_stack);

    const THREADS: usize = 4;
    const SPIKES: usize = 3;
    // Together the threads want a third more stacks than the budget.
    let want = max_live / 3 + 1;
    let baseline = mapped_vmas().unwrap();
    let peak = Barrier::new(THREADS);
    let results: Vec<(usize, usize, Vec<String>, usize)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut held = Vec::with_capacity(want);
                    let (mut exhausted, mut max_vmas, mut other) = (0, 0, Vec::new());
                    let mut max_mapped = 0;
                    for _ in 0..SPIKES {
                        for _ in 0..want {
                            match pool.get() {
                                Ok(stack) => held.push(stack),
                                Err(StackError::Exhausted { .. }) => exhausted += 1,
                                Err(e) => other.push(e.to_string()),
                            }
                        }
                        peak.wait(); // every thread at its peak
                        max_vmas = max_vmas.max(mapped_vmas().unwrap());
                        max_mapped = max_mapped.max(pool.stats().mapped as usize);
                        peak.wait();
                        held.clear();
                    }
                    (exhausted, max_vmas, other, max_mapped)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    let exhausted: usize = results.iter().map(|r| r.0).sum();
    let max_vmas = results.iter().map(|r| r.1).max().unwrap();
    let max_mapped = results.iter().map(|r| r.3).max().unwrap();
    let other: Vec<_> = results.iter().flat_map(|r| r.2.iter()).collect();
    assert!(other.is_empty(), "errors other than the cap: {other:?}");
    assert!(exhausted > 0, "the spike never reached the cap");
    assert!(
        max_mapped <= max_live,
        "{max_mapped} stacks mapped > {max_live}"
    );
    assert!(
        max_vmas <= baseline + max_live * vmas_per_stack + SLACK_VMAS,
        "{mode}: peak {max_vmas} VMAs, baseline {baseline}, budget {max_live} stacks"
    );
    if mode == GuardMode::Markers {
        // What markers buy: a VMA per slab of up to 32, not two per stack.
        let slabs = max_mapped.div_ceil(tidepool::stack::MAX_STACKS_PER_SLAB);
        assert!(
            max_vmas <= baseline + 2 * slabs + SLACK_VMAS,
            "peak {max_vmas} VMAs, baseline {baseline}, {max_mapped} stacks"
        );
    }
    assert!(
        max_vmas < budget.max_map_count(),
        "peak {max_vmas} VMAs reached vm.max_map_count {}",
        budget.max_map_count()
    );
    let s = pool.stats();
    assert_eq!(s.pool.live, 0);
    assert_eq!(s.reclaim_retries, 0, "the kernel never refused a mapping");
}
