//! The guard page really faults. Each test re-runs this test binary as a
//! child process (`--exact <test>` with an environment variable set), the
//! child runs off the bottom of a pooled stack, and the parent checks that
//! the child was killed by `SIGSEGV` right after the step before.
//!
//! Rust's own stack-overflow handler only knows the guard pages of thread
//! stacks: for a fault anywhere else it restores the default action and
//! returns, so the faulting access repeats and the process dies by
//! `SIGSEGV` (not by `SIGABRT` with a "stack overflow" message). macOS and
//! the BSDs may report a `PROT_NONE` page as `SIGBUS` instead.
//!
//! Every case runs in both guard modes: page-table markers
//! (`MADV_GUARD_INSTALL`, where the kernel has them) and `PROT_NONE` pages
//! (`mprotect`, the fallback), including after a purge, a freed slot's
//! reuse and a `fork`.
#![cfg(unix)]

mod common;

use std::os::unix::process::ExitStatusExt;

use common::child::{self, is_child as am_child, ChildOutput};
use tidepool::stack::{GuardMode, StackPool, StackPoolBuilder};
use tidepool::Manage;

/// Runs test `name` of this binary in a child process, as the child.
#[cfg(feature = "corosensei")]
fn run_child(name: &str) -> ChildOutput {
    child::spawn(name, child::TIMEOUT, &[])
}

fn assert_killed_by_sigsegv_after(out: &ChildOutput, last_step: &str) {
    let stderr = &out.stderr;
    assert!(
        stderr.contains(last_step),
        "the child did not get as far as {last_step:?}; status {:?}, stderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("CHILD: survived"), "{stderr}");
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let expected = [libc::SIGSEGV, libc::SIGSEGV];
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let expected = [libc::SIGSEGV, libc::SIGBUS];
    let signal = out.status.and_then(|s| s.signal());
    assert!(
        signal.is_some_and(|s| expected.contains(&s)),
        "status {:?}, stderr:\n{stderr}",
        out.status
    );
}

/// The modes this kernel can run: markers where it has them, and always
/// `PROT_NONE` pages.
fn modes() -> Vec<GuardMode> {
    let mut modes = vec![GuardMode::Protect];
    if GuardMode::markers_supported() {
        modes.push(GuardMode::Markers);
    } else {
        eprintln!("this kernel has no guard markers (MADV_GUARD_INSTALL): Protect only");
    }
    modes
}

/// A child case per mode: `NAME` for `PROT_NONE` guards, `NAME-markers`
/// for guard markers (the suffix is read back by the child).
fn child_mode(name: &str) -> Option<GuardMode> {
    if am_child(name) {
        return Some(GuardMode::Protect);
    }
    std::env::var(child::CHILD_ENV)
        .is_ok_and(|v| v == format!("{name}-markers"))
        .then_some(GuardMode::Markers)
}

/// Runs child case `name` in every mode and checks each died by
/// `SIGSEGV` right after `last_step`.
fn each_mode_dies_after(name: &str, last_step: &str) {
    for mode in modes() {
        let case = match mode {
            GuardMode::Markers => format!("{name}-markers"),
            _ => name.to_string(),
        };
        let out = child::spawn(name, child::TIMEOUT, &[(child::CHILD_ENV, &case)]);
        eprintln!("{mode}: status {:?}", out.status);
        assert_killed_by_sigsegv_after(&out, last_step);
    }
}

fn builder(size: usize, mode: GuardMode) -> StackPoolBuilder {
    StackPool::builder(size).guard_mode(mode)
}

/// Writes the lowest usable byte (fine), then the byte below it: the
/// guard, which must kill the process.
fn overflow(bottom: std::ptr::NonNull<u8>, step: &str) -> ! {
    // SAFETY: the lowest usable byte is ours to write.
    unsafe { bottom.as_ptr().write_volatile(1) };
    eprintln!("{step}");
    // SAFETY: not safe on purpose: this is the guard page, and the write
    // must kill the process before it completes.
    unsafe { bottom.as_ptr().sub(1).write_volatile(1) };
    eprintln!("CHILD: survived the guard page");
    std::process::exit(0);
}

#[test]
fn writing_below_the_bottom_hits_the_guard() {
    const NAME: &str = "writing_below_the_bottom_hits_the_guard";
    if let Some(mode) = child_mode(NAME) {
        let pool = builder(16 * 1024, mode).build().unwrap();
        assert_eq!(pool.manager().guard_mode(), mode);
        // A used and returned stack keeps its guard.
        drop(pool.get().unwrap());
        let stack = pool.get().unwrap();
        assert_eq!(pool.stats().pool.hits, 1);
        overflow(stack.bottom(), "CHILD: bottom writable");
    }
    each_mode_dies_after(NAME, "CHILD: bottom writable");
}

/// In a child: fills one slab of a pool, picks its lowest or highest stack
/// (the first slot, whose guard is the slab's first page, or the last),
/// and writes just below that stack's bottom. The lowest is first freed and
/// carved again from its freed slot, which must keep its guard too (its
/// pages were released with `MADV_DONTNEED` in between).
fn overflow_a_slab_edge(name: &str, highest: bool, mode: GuardMode) -> ! {
    let pool = builder(8 * 1024, mode).batch_size(1).build().unwrap();
    let k = pool.manager().stacks_per_slab();
    assert!(k > 2, "{k}");
    let mut stacks: Vec<_> = (0..k).map(|_| pool.get().unwrap()).collect();
    stacks.sort_by_key(|s| s.bottom());
    assert_eq!(pool.stats().slabs, 1, "one slab");
    let stack = if highest {
        stacks.pop().unwrap()
    } else {
        let lowest = stacks.remove(0);
        let bottom = lowest.bottom();
        lowest.discard(); // the slot is freed, the slab stays
        let again = pool.get().unwrap();
        assert_eq!(again.bottom(), bottom, "the freed slot, reused");
        again
    };
    let s = pool.stats();
    let k = k as u64;
    match mode {
        GuardMode::Markers => assert_eq!(
            (
                s.slabs,
                s.mmap_calls,
                s.mprotect_calls,
                s.guard_calls,
                s.vmas
            ),
            (1, 1, 0, k, 1)
        ),
        _ => assert_eq!(
            (
                s.slabs,
                s.mmap_calls,
                s.mprotect_calls,
                s.guard_calls,
                s.vmas
            ),
            (1, 1, k, 0, 2 * k)
        ),
    }
    overflow(stack.bottom(), &format!("CHILD: {name}: bottom writable"));
}

#[test]
fn the_lowest_stack_of_a_slab_has_its_guard() {
    const NAME: &str = "the_lowest_stack_of_a_slab_has_its_guard";
    if let Some(mode) = child_mode(NAME) {
        overflow_a_slab_edge(NAME, false, mode);
    }
    each_mode_dies_after(
        NAME,
        "CHILD: the_lowest_stack_of_a_slab_has_its_guard: bottom writable",
    );
}

#[test]
fn the_highest_stack_of_a_slab_has_its_guard() {
    const NAME: &str = "the_highest_stack_of_a_slab_has_its_guard";
    if let Some(mode) = child_mode(NAME) {
        overflow_a_slab_edge(NAME, true, mode);
    }
    each_mode_dies_after(
        NAME,
        "CHILD: the_highest_stack_of_a_slab_has_its_guard: bottom writable",
    );
}

/// A purge releases a whole run of adjacent idle stacks, the guards between
/// them included, with one `madvise(MADV_DONTNEED)`: the guards (markers
/// too) must survive it.
#[test]
fn guards_survive_a_purge_of_adjacent_stacks() {
    const NAME: &str = "guards_survive_a_purge_of_adjacent_stacks";
    if let Some(mode) = child_mode(NAME) {
        let pool = builder(8 * 1024, mode).batch_size(1).build().unwrap();
        let mut stacks: Vec<_> = (0..8).map(|_| pool.get().unwrap().detach()).collect();
        stacks.sort_by_key(|s| s.bottom());
        for s in &stacks {
            // SAFETY: the stack's usable bytes are ours to write.
            unsafe { s.bottom().as_ptr().write_bytes(7, s.usable_size()) };
        }
        let before = pool.stats().madvise_calls;
        pool.manager().purge_batch(&mut stacks);
        assert_eq!(
            pool.stats().madvise_calls - before,
            1,
            "one run of adjacent stacks, guards included: one call"
        );
        // SAFETY: reads a usable byte of our own stack.
        let byte = unsafe { stacks[4].bottom().as_ptr().read_volatile() };
        assert_eq!(byte, 0, "purged pages read back as zeros");
        // A stack in the middle of the purged run: its guard was inside it.
        overflow(
            stacks[4].bottom(),
            &format!("CHILD: {NAME}: bottom writable"),
        );
    }
    each_mode_dies_after(NAME, &format!("CHILD: {NAME}: bottom writable"));
}

/// A forked child inherits the stacks' guards (markers are copied with the
/// page tables), also for a slot freed and reused in the child.
#[test]
fn a_forked_child_keeps_the_guards() {
    const NAME: &str = "a_forked_child_keeps_the_guards";
    if let Some(mode) = child_mode(NAME) {
        let pool = builder(8 * 1024, mode).batch_size(1).build().unwrap();
        let stacks: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
        // SAFETY: a usable byte of our own stack.
        unsafe { stacks[1].bottom().as_ptr().write_volatile(42) };
        let inherited = child::fork_and_wait(child::TIMEOUT, || {
            // SAFETY: the copy of our own stack, in the forked child.
            let byte = unsafe { stacks[1].bottom().as_ptr().read_volatile() };
            assert_eq!(byte, 42, "the child sees the parent's stack contents");
            // SAFETY: not safe on purpose: the guard page.
            unsafe { stacks[1].bottom().as_ptr().sub(1).write_volatile(1) };
        });
        assert_eq!(
            inherited,
            Err("forked child killed by signal 11".to_string())
        );
        let reused = child::fork_and_wait(child::TIMEOUT, || {
            // Free a slot in the child and carve it again (its pages
            // released, its guard kept).
            pool.get().unwrap().discard();
            let s = pool.get().unwrap();
            // SAFETY: not safe on purpose: the guard page.
            unsafe { s.bottom().as_ptr().sub(1).write_volatile(1) };
        });
        assert_eq!(reused, Err("forked child killed by signal 11".to_string()));
        drop(stacks);
        // And the parent's guards are still there.
        let stack = pool.get().unwrap();
        overflow(stack.bottom(), &format!("CHILD: {NAME}: bottom writable"));
    }
    each_mode_dies_after(NAME, &format!("CHILD: {NAME}: bottom writable"));
}

#[cfg(feature = "corosensei")]
mod coroutine_overflow {
    use std::hint::black_box;

    use corosensei::{Coroutine, CoroutineResult};

    use super::*;

    /// Recurses `depth` times with a 512-byte frame, smaller than a page,
    /// so the stack cannot step over the guard.
    fn recurse(depth: u64) -> u64 {
        let frame = black_box([depth as u8; 512]);
        if black_box(depth) == 0 {
            return u64::from(frame[0]);
        }
        recurse(depth - 1) + u64::from(frame[1])
    }

    #[test]
    fn deep_recursion_in_a_coroutine_dies_by_sigsegv() {
        const NAME: &str = "coroutine_overflow::deep_recursion_in_a_coroutine_dies_by_sigsegv";
        if am_child(NAME) {
            let pool = StackPool::new(64 * 1024).unwrap();
            // A control: shallow recursion fits (40 frames of ~0.5 KiB).
            let mut ok: Coroutine<u64, (), u64, _> =
                Coroutine::with_stack(pool.get().unwrap(), |_, depth| recurse(depth));
            assert!(matches!(ok.resume(40), CoroutineResult::Return(_)));
            drop(ok);
            eprintln!("CHILD: shallow recursion fits");
            // 1 << 20 frames of 512+ bytes want 512 MiB of a 64 KiB stack.
            let mut deep: Coroutine<u64, (), u64, _> =
                Coroutine::with_stack(pool.get().unwrap(), |_, depth| recurse(depth));
            let _ = deep.resume(1 << 20);
            eprintln!("CHILD: survived the overflow");
            std::process::exit(0);
        }
        let out = run_child(NAME);
        assert_killed_by_sigsegv_after(&out, "CHILD: shallow recursion fits");
    }
}

/// Where the kernel refuses a marker (here: memory locked by `mlockall`,
/// which markers do not support; an older kernel says the same `EINVAL`),
/// the guard is made with `mprotect` instead, the pool switches to
/// `PROT_NONE` guards for good, and the guard still faults.
#[test]
#[cfg(any(target_os = "linux", target_os = "android"))]
fn a_refused_marker_falls_back_to_mprotect() {
    const NAME: &str = "a_refused_marker_falls_back_to_mprotect";
    if child_mode(NAME) == Some(GuardMode::Markers) {
        let pool = builder(8 * 1024, GuardMode::Markers)
            .batch_size(1)
            .background(false)
            .build()
            .unwrap();
        // SAFETY: locks this (child) process's future mappings; nothing
        // else to uphold.
        let rc = unsafe { libc::mlockall(libc::MCL_FUTURE) };
        assert_eq!(rc, 0, "mlockall: {}", std::io::Error::last_os_error());
        let first = pool.get().unwrap();
        let second = pool.get().unwrap();
        let s = pool.stats();
        assert_eq!(pool.manager().guard_mode(), GuardMode::Protect);
        assert_eq!(
            (s.slabs, s.guard_calls, s.mprotect_calls),
            (1, 1, 2),
            "one refused marker, its guard and the next made by mprotect: {s:?}"
        );
        drop(second);
        eprintln!("CHILD: fell back");
        overflow(first.bottom(), &format!("CHILD: {NAME}: bottom writable"));
    }
    if !GuardMode::markers_supported() {
        eprintln!("no guard markers on this kernel: Protect only, nothing to fall back from");
        return;
    }
    let case = format!("{NAME}-markers");
    let out = child::spawn(NAME, child::TIMEOUT, &[(child::CHILD_ENV, &case)]);
    assert_killed_by_sigsegv_after(&out, &format!("CHILD: {NAME}: bottom writable"));
}
