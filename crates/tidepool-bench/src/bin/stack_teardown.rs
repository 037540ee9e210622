//! `stack_teardown MODE N`: makes N guarded 64 KiB stacks, touches them,
//! tears them all down, and prints the system calls counted for them
//! (`StackStats`). For counting the calls of one-stack-per-mapping
//! teardown, which `StackStats` cannot see, run it under
//! `strace -f -c -e trace=mmap,mprotect,madvise,munmap` and subtract the
//! `N = 0` run.
//!
//! Modes:
//!
//! * `pool`: N `StackPool::get`s, all dropped, then `drain` (the pool
//!   destroys one stack at a time today: each stack but a slab's last has
//!   its pages released on its own, one `madvise` each).
//! * `batch`: `StackManager::create_batch` then `destroy_batch`, 32 at a time.
//! * `own`: N `GuardedStack::new`, then dropped: one mapping per stack, what
//!   every pooled stack was before slabs.

use std::process::ExitCode;

use tidepool::stack::{GuardedStack, StackPool};
use tidepool::Manage;

const STACK: usize = 64 * 1024;

fn touch(stack: &GuardedStack) {
    // SAFETY: the usable part is writable and ours alone.
    unsafe { stack.bottom().as_ptr().write_bytes(1, stack.usable_size()) }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(n)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: stack_teardown pool|batch|own N");
        return ExitCode::FAILURE;
    };
    let pool = StackPool::builder(STACK)
        .max_idle(n.max(64))
        .background(false)
        .build()
        .expect("valid settings");
    match mode.as_str() {
        "pool" => {
            let held: Vec<_> = (0..n).map(|_| pool.get().expect("a stack")).collect();
            held.iter().for_each(|s| touch(s));
            drop(held);
            assert_eq!(pool.drain(), n);
        }
        "batch" => {
            let m = pool.manager();
            let mut held = Vec::new();
            let mut made = 0;
            while made < n {
                let batch = m.create_batch((n - made).min(32)).expect("stacks");
                made += batch.len();
                held.push(batch);
            }
            held.iter().flatten().for_each(touch);
            held.into_iter().for_each(|b| m.destroy_batch(b));
        }
        "own" => {
            let held: Vec<_> = (0..n)
                .map(|_| GuardedStack::new(STACK).expect("a stack"))
                .collect();
            held.iter().for_each(touch);
            drop(held);
        }
        _ => {
            eprintln!("unknown mode {mode:?}: pool, batch or own");
            return ExitCode::FAILURE;
        }
    }
    let s = pool.stats();
    println!(
        "mode={mode} stacks={n} stacks_per_slab={} mmap={} mprotect={} guard_madvise={} madvise={} munmap={} \
         slabs_left={} (StackStats; `own` stacks are not the pool's: count them with strace)",
        pool.manager().stacks_per_slab(),
        s.mmap_calls,
        s.mprotect_calls,
        s.guard_calls,
        s.madvise_calls,
        s.munmap_calls,
        s.slabs
    );
    ExitCode::SUCCESS
}
