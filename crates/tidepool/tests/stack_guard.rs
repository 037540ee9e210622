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
#![cfg(unix)]

mod common;

use std::os::unix::process::ExitStatusExt;

use common::child::{self, is_child as am_child, ChildOutput};
use tidepool::stack::StackPool;

/// Runs test `name` of this binary in a child process, as the child.
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

#[test]
fn writing_below_the_bottom_hits_the_guard() {
    const NAME: &str = "writing_below_the_bottom_hits_the_guard";
    if am_child(NAME) {
        let pool = StackPool::new(16 * 1024).unwrap();
        // A used and returned stack keeps its guard.
        drop(pool.get().unwrap());
        let stack = pool.get().unwrap();
        assert_eq!(pool.stats().pool.hits, 1);
        // SAFETY: the lowest usable byte is ours to write.
        unsafe { stack.bottom().as_ptr().write_volatile(1) };
        eprintln!("CHILD: bottom writable");
        // SAFETY: not safe on purpose: this is the guard page, and the write
        // must kill the process before it completes.
        unsafe { stack.bottom().as_ptr().sub(1).write_volatile(1) };
        eprintln!("CHILD: survived the guard page");
        std::process::exit(0);
    }
    let out = run_child(NAME);
    assert_killed_by_sigsegv_after(&out, "CHILD: bottom writable");
}

/// In a child: fills one slab of a pool, picks its lowest or highest stack
/// (the first slot, whose guard is the slab's first page, or the last),
/// and writes just below that stack's bottom. The lowest is first freed and
/// carved again from its freed slot, which must keep its guard too.
fn overflow_a_slab_edge(name: &str, highest: bool) {
    let pool = StackPool::builder(8 * 1024).batch_size(1).build().unwrap();
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
    assert_eq!((s.slabs, s.mmap_calls, s.mprotect_calls), (1, 1, k as u64));
    // SAFETY: the lowest usable byte is ours to write.
    unsafe { stack.bottom().as_ptr().write_volatile(1) };
    eprintln!("CHILD: {name}: bottom writable");
    // SAFETY: not safe on purpose: this is the guard page, and the write
    // must kill the process before it completes.
    unsafe { stack.bottom().as_ptr().sub(1).write_volatile(1) };
    eprintln!("CHILD: survived the guard page");
    std::process::exit(0);
}

#[test]
fn the_lowest_stack_of_a_slab_has_its_guard() {
    const NAME: &str = "the_lowest_stack_of_a_slab_has_its_guard";
    if am_child(NAME) {
        overflow_a_slab_edge(NAME, false);
    }
    let out = run_child(NAME);
    assert_killed_by_sigsegv_after(
        &out,
        "CHILD: the_lowest_stack_of_a_slab_has_its_guard: bottom writable",
    );
}

#[test]
fn the_highest_stack_of_a_slab_has_its_guard() {
    const NAME: &str = "the_highest_stack_of_a_slab_has_its_guard";
    if am_child(NAME) {
        overflow_a_slab_edge(NAME, true);
    }
    let out = run_child(NAME);
    assert_killed_by_sigsegv_after(
        &out,
        "CHILD: the_highest_stack_of_a_slab_has_its_guard: bottom writable",
    );
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
