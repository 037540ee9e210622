//! Every kind of kernel call tidepool makes, failing at each of its first
//! few calls with each realistic errno, under a workload that reaches it:
//! the caller gets an error (or the operation degrades as documented),
//! never a panic or an abort; counts stay exact; nothing is unmapped twice.
//! Needs the `fault-injection` feature (`cargo test --all-features`).
#![cfg(all(feature = "fault-injection", target_os = "linux"))]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use tidepool::fault::{self, Call};
use tidepool::region::RegionManager;
use tidepool::stack::{GuardMode, StackPool};
use tidepool::Pool;

const ERRNOS: [i32; 4] = [libc::ENOMEM, libc::EAGAIN, libc::EPERM, libc::EINVAL];

/// Gets, touches and gives back stacks, purges, drains, gets again: every
/// stack call site (map a slab, open a slot, guard it, release, unmap).
fn stack_workload(mode: GuardMode) -> Result<(), String> {
    let pool = StackPool::builder(16 * 1024)
        .guard_mode(mode)
        .batch_size(4)
        .background(false)
        .purge_delay(Duration::MAX)
        .build()
        .map_err(|e| e.to_string())?;
    let mut errors = 0;
    let mut held = Vec::new();
    for _ in 0..12 {
        match pool.get() {
            Ok(stack) => {
                // SAFETY: the top byte of a stack we hold.
                unsafe { stack.top().as_ptr().sub(1).write(1) };
                held.push(stack);
            }
            Err(_) => errors += 1,
        }
    }
    drop(held);
    pool.release_local();
    pool.purge();
    pool.drain_blocking();
    for _ in 0..3 {
        if let Ok(stack) = pool.get() {
            drop(stack);
        }
    }
    pool.reclaim_unused();
    let s = pool.stats();
    if s.pool.live != 0 || s.pool.live + s.pool.idle + s.pool.destroying != s.pool.existing() {
        return Err(format!("counts off: {s:?}"));
    }
    let _ = errors;
    Ok(())
}

/// Regions: reserve, open, write, reset (mincore, release, close), purge,
/// unmap.
fn region_workload() -> Result<(), String> {
    let pool = Pool::builder(RegionManager::new(1 << 20).keep_resident(16 * 1024))
        .batch_size(2)
        .background(false)
        .build()
        .map_err(|e| e.to_string())?;
    for round in 0..4 {
        let Ok(mut region) = pool.get() else { continue };
        if region.set_accessible(64 * 1024).is_ok() {
            // SAFETY: the first bytes of the accessible part.
            unsafe { region.as_ptr().add(round * 4096).write(7) };
        }
        drop(region);
    }
    pool.release_local();
    pool.purge();
    pool.drain_blocking();
    let s = pool.stats();
    if s.live != 0 || s.live + s.idle + s.destroying != s.existing() {
        return Err(format!("counts off: {s:?}"));
    }
    Ok(())
}

fn walk(name: &str, calls: &[Call], workload: impl Fn() -> Result<(), String>) {
    for &call in calls {
        for errno in ERRNOS {
            for n in 1..=6 {
                fault::fail_nth(call, n, errno);
                let outcome = catch_unwind(AssertUnwindSafe(&workload));
                fault::disarm_all();
                match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => panic!("{name}: {call:?} #{n} failing with {errno}: {e}"),
                    Err(_) => panic!("{name}: {call:?} #{n} failing with {errno} panicked"),
                }
                assert_eq!(
                    fault::double_unmaps(),
                    0,
                    "{name}: {call:?} #{n} failing with {errno} unmapped a region twice"
                );
            }
        }
        assert!(
            fault::injected(call) > 0,
            "{name}: the workload never reached {call:?}"
        );
    }
}

/// One test: injected faults are process-wide, so the walks run in turn.
#[test]
fn every_call_site_fails_cleanly() {
    let memory = [Call::Mmap, Call::Mprotect, Call::Munmap];
    walk("stacks (PROT_NONE guards)", &memory, || {
        stack_workload(GuardMode::Protect)
    });
    walk("stacks (default guards)", &[Call::Madvise], || {
        stack_workload(GuardMode::Auto)
    });
    walk(
        "regions",
        &[
            Call::Mmap,
            Call::Mprotect,
            Call::Madvise,
            Call::Munmap,
            Call::Mincore,
        ],
        region_workload,
    );
    // The reclaimer thread cannot start: the pool works without it, and a
    // later operation starts it.
    fault::fail_nth(Call::Spawn, 1, libc::EAGAIN);
    let outcome = catch_unwind(|| {
        let pool = Pool::builder(|| vec![0u8; 64]).build().unwrap();
        drop(pool.get().unwrap());
        pool.stats().idle
    });
    fault::disarm_all();
    assert_eq!(outcome.ok(), Some(1), "a failed spawn must not panic");
    assert_eq!(
        fault::injected(Call::Spawn),
        1,
        "the pool tried to start its reclaimer"
    );
    assert_eq!(fault::double_unmaps(), 0);
}
