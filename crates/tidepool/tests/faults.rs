//! Every kind of kernel call tidepool makes, failing at each of its first
//! few calls with each realistic errno, under a workload that reaches it:
//! the caller gets an error (or the operation degrades as documented),
//! never a panic or an abort; counts stay exact; nothing is unmapped twice.
//! Needs the `fault-injection` feature (`cargo test --all-features`).
#![cfg(all(feature = "fault-injection", target_os = "linux"))]

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::child;

use tidepool::fault::{self, Call};
use tidepool::region::RegionManager;
use tidepool::stack::{mapped_vmas, BudgetSource, GuardMode, MapBudget, StackPool};
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
    pool.trim_local();
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
    // A kept part past the pages a reset clears whole with `memset`, so
    // that the pool's first reset asks `mincore` and the later ones release
    // what lies past their depth: every call site is reached.
    let pool = Pool::builder(RegionManager::new(1 << 20).keep_resident(128 * 1024))
        .batch_size(2)
        .background(false)
        .build()
        .map_err(|e| e.to_string())?;
    for round in 0..4 {
        let Ok(mut region) = pool.get() else { continue };
        if region.set_accessible(256 * 1024).is_ok() {
            // SAFETY: the first bytes of the accessible part.
            unsafe { region.as_ptr().add(round * 4096).write(7) };
        }
        drop(region);
    }
    pool.trim_local();
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

/// One test for the memory calls: injected faults are process-wide, so the
/// walks run in turn, in a child process of their own (the other cases of
/// this file arm faults too).
#[test]
fn every_call_site_fails_cleanly() {
    child::run(
        "every_call_site_fails_cleanly",
        every_call_site_fails_cleanly_here,
    );
}

fn every_call_site_fails_cleanly_here() {
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
    walk("stacks (system counts)", &[Call::SystemCount], || {
        stack_workload(GuardMode::Auto)
    });
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

/// Waits (up to 30 s) for `pool` to run `passes` more reclaim passes on
/// the reclaimer thread.
fn reclaimer_runs(pool: &Pool<fn() -> Vec<u8>>, passes: u64) -> bool {
    let start = pool.stats().reclaim_passes;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if pool.stats().reclaim_passes >= start + passes {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn bytes() -> Vec<u8> {
    vec![0u8; 64]
}

/// A background pool whose reclaim interval is short, holding one object.
fn background_pool() -> Pool<fn() -> Vec<u8>> {
    let pool = Pool::builder(bytes as fn() -> Vec<u8>)
        .reclaim_interval(Duration::from_millis(10))
        .build()
        .unwrap();
    drop(pool.get().unwrap());
    pool
}

/// The wake-up descriptor cannot be opened (in a fresh process: it opens
/// once): the reclaimer runs on its timer, passes keep coming.
#[test]
fn no_wake_up_descriptor_the_reclaimer_still_runs() {
    child::run("no_wake_up_descriptor_the_reclaimer_still_runs", || {
        fault::fail_nth(Call::EventFd, 1, libc::EMFILE);
        let pool = background_pool();
        let _held = pool.get().unwrap();
        assert!(reclaimer_runs(&pool, 3), "{:?}", pool.stats());
        assert_eq!(fault::injected(Call::EventFd), 1);
    });
}

/// `poll` fails, three times in a row: the reclaimer naps and goes on.
#[test]
fn a_failing_poll_the_reclaimer_still_runs() {
    child::run("a_failing_poll_the_reclaimer_still_runs", || {
        let pool = background_pool();
        // One object out: the pool has something to look after, so the
        // reclaimer keeps coming back to it.
        let _held = pool.get().unwrap();
        for n in 1..=3 {
            fault::fail_nth(
                Call::Poll,
                1,
                if n == 2 { libc::ENOMEM } else { libc::EINVAL },
            );
            assert!(reclaimer_runs(&pool, 2), "{:?}", pool.stats());
        }
        assert!(fault::injected(Call::Poll) >= 1);
    });
}

/// The fork handlers cannot be installed: logged, and pools work, in the
/// parent and in a forked child.
#[test]
fn no_fork_handlers_pools_still_work() {
    child::run("no_fork_handlers_pools_still_work", || {
        fault::fail_nth(Call::Atfork, 1, libc::ENOMEM);
        let pool = background_pool();
        assert_eq!(fault::injected(Call::Atfork), 1);
        drop(pool.get().unwrap());
        let pool = Arc::new(pool);
        let in_child = pool.clone();
        child::fork_and_wait(Duration::from_secs(30), move || {
            drop(in_child.get().unwrap());
            assert_eq!(in_child.stats().live, 0);
        })
        .unwrap();
        assert_eq!(pool.stats().live, 0);
    });
}

/// `membarrier` fails while another thread's idle cache is being taken: the
/// owner is asked to hand it back instead, and counts stay exact.
#[test]
fn a_failing_membarrier_falls_back_to_asking_the_owner() {
    child::run(
        "a_failing_membarrier_falls_back_to_asking_the_owner",
        || {
            let pool = Arc::new(
                Pool::builder(bytes as fn() -> Vec<u8>)
                    .batch_size(4)
                    .background(false)
                    .build()
                    .unwrap(),
            );
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let (parked, ready) = std::sync::mpsc::channel::<()>();
            let owner = {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let held: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
                    drop(held);
                    parked.send(()).unwrap();
                    wait.recv().unwrap();
                    drop(pool.get().unwrap()); // the next operation hands it back
                })
            };
            ready.recv().unwrap();
            for n in 1..=4 {
                fault::fail_nth(Call::Membarrier, n, libc::EPERM);
                pool.drain();
                fault::disarm_all();
                let s = pool.stats();
                assert_eq!(s.live + s.idle + s.destroying, s.existing(), "{s:?}");
            }
            assert!(fault::injected(Call::Membarrier) > 0, "drain took no cache");
            go.send(()).unwrap();
            owner.join().unwrap();
            pool.drain_blocking();
            let s = pool.stats();
            assert_eq!((s.live, s.idle), (0, 0), "{s:?}");
            assert_eq!(s.created, s.destroyed);
        },
    );
}

/// Each file operation of the default pressure sources (reading
/// `/proc/self/cgroup`, opening and writing PSI triggers, cgroup v1's
/// files) fails in turn, each in a forked child of its own (a forked child
/// opens the default sources again): the failure shows in
/// `pressure::sources()`, pools work, and `notify` still reaches them.
#[test]
fn a_failing_pressure_file_is_reported_and_pools_work() {
    let name = "a_failing_pressure_file_is_reported_and_pools_work";
    // The default sources are on in this child (the harness turns them off).
    child::run_with(
        name,
        Duration::from_secs(300),
        &[("TIDEPOOL_PRESSURE", "auto")],
        || {
            let out =
                std::env::temp_dir().join(format!("tidepool-pressure-file-{}", std::process::id()));
            let mut reached = 0;
            for n in 1..=16u32 {
                let errno =
                    [libc::EACCES, libc::ENOMEM, libc::EINVAL, libc::EAGAIN][n as usize % 4];
                let _ = std::fs::remove_file(&out);
                let out_in_child = out.clone();
                child::fork_and_wait(Duration::from_secs(60), move || {
                    fault::disarm_all();
                    fault::fail_nth(Call::PressureFile, n, errno);
                    let pool = background_pool();
                    assert!(reclaimer_runs(&pool, 2), "{:?}", pool.stats());
                    let fired = fault::injected(Call::PressureFile);
                    if fired == 1 {
                        let text = std::io::Error::from_raw_os_error(errno).to_string();
                        let sources = tidepool::pressure::sources();
                        assert!(
                            sources
                                .iter()
                                .any(|s| s.error.as_deref().is_some_and(|e| e.contains(&text))),
                            "call {n} failed with `{text}`, but no source says so: {sources:?}"
                        );
                    }
                    // The pool works, and a signal still reaches it.
                    drop(pool.get().unwrap());
                    assert!(pool.stats().idle > 0);
                    tidepool::pressure::notify(tidepool::pressure::Level::Critical);
                    let (stats, drained) = child::wait_until(
                        Duration::from_secs(30),
                        || pool.stats(),
                        |s| s.idle == 0,
                    );
                    assert!(drained, "{stats:?}");
                    std::fs::write(&out_in_child, fired.to_string()).unwrap();
                })
                .unwrap_or_else(|e| panic!("failing pressure-file call {n}: {e}"));
                let fired: u64 = std::fs::read_to_string(&out).unwrap().parse().unwrap();
                if fired == 0 {
                    break; // past the last call the default sources make
                }
                reached += 1;
            }
            let _ = std::fs::remove_file(&out);
            assert!(
                reached >= 2,
                "only {reached} pressure-file calls were reached"
            );
        },
    );
}

/// The counts tidepool reads from the system (`vm.max_map_count`, the
/// VMAs in `/proc/self/maps`, the CPU count) failing: each read reaches the
/// injection point and degrades as the fault table says, including while
/// a refused `mmap` is being explained.
#[test]
fn failing_system_counts_degrade() {
    child::run("failing_system_counts_degrade", || {
        fault::fail_nth(Call::SystemCount, 1, libc::EACCES);
        assert_eq!(MapBudget::from_os().source(), BudgetSource::Fallback);
        assert_eq!(MapBudget::from_os().source(), BudgetSource::Os);
        fault::fail_nth(Call::SystemCount, 1, libc::EMFILE);
        let e = mapped_vmas().expect_err("an injected failure");
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
        assert!(mapped_vmas().unwrap() > 0);

        // A refused mmap is explained from both counts; each read failing
        // in turn, the get is retried after the pools give back their idle
        // stacks, and succeeds. (A warm-up first: the process's first
        // stack pool maps a probe. `max_live` 1: a slab of one stack, so
        // that no smaller slab is tried before the failure is explained.)
        let warm = StackPool::builder(16 * 1024).background(false).build();
        drop(warm.unwrap().get().unwrap());
        let before = fault::injected(Call::SystemCount);
        for n in 1..=2u32 {
            let pool = StackPool::builder(16 * 1024)
                .guard_mode(GuardMode::Protect)
                .max_live(1)
                .background(false)
                .build()
                .unwrap();
            let mmaps = fault::injected(Call::Mmap);
            fault::fail_nth(Call::Mmap, 1, libc::ENOMEM);
            fault::fail_nth(Call::SystemCount, n, libc::EACCES);
            let stack = pool.get();
            let mmaps = fault::injected(Call::Mmap) - mmaps;
            fault::disarm_all();
            assert_eq!(mmaps, 1, "the mmap failure was not reached");
            assert!(stack.is_ok(), "{:?}", stack.err());
            drop(stack);
            pool.drain_blocking();
            let s = pool.stats();
            assert_eq!((s.pool.live, s.pool.idle), (0, 0), "{s:?}");
            assert_eq!(s.pool.created, s.pool.destroyed);
        }
        assert_eq!(
            fault::injected(Call::SystemCount),
            before + 2,
            "each read of the explanation reached the injection point"
        );
    });
}
