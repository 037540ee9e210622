//! Many short coroutines on pooled stacks, in the shape of QEMU's block I/O
//! (the 2021 coroutine-pool patch): `THREADS` worker threads, each keeping
//! `DEPTH` requests in flight, each request a coroutine that yields a few
//! times (as if waiting for I/O) before it completes. Every request takes a
//! stack from the pool and gives it back when its coroutine is dropped, so
//! after the first `DEPTH` requests per thread no stack is mapped any more.
//!
//! ```text
//! cargo run --release --features corosensei --example coroutines [THREADS] [DEPTH] [TOTAL]
//! ```
//!
//! Defaults: 4 threads, 64 in flight each, 2 000 000 requests in all (a fraction
//! of a second).

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use corosensei::{Coroutine, CoroutineResult};
use tidepool::stack::{PooledStack, StackError, StackPool};

/// Suspensions per request: QEMU's I/O coroutines yield once or twice per
/// request; a few more makes the scheduling visible.
const YIELDS: u64 = 3;
/// Usable bytes per stack: plenty for these coroutines, small enough that
/// thousands fit in little memory.
const STACK_SIZE: usize = 64 * 1024;

struct Args {
    threads: usize,
    depth: usize,
    total: usize,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: coroutines [THREADS] [DEPTH] [TOTAL] (positive integers)";
    let mut values = [4, 64, 2_000_000];
    let given: Vec<String> = std::env::args().skip(1).collect();
    if given.len() > values.len() {
        return Err(usage.to_owned());
    }
    for (slot, text) in values.iter_mut().zip(&given) {
        *slot = match text.parse() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("{text:?} is not a positive integer\n{usage}")),
        };
    }
    let [threads, depth, total] = values;
    Ok(Args {
        threads,
        depth,
        total,
    })
}

/// One request: a coroutine that works a little, yields `YIELDS` times and
/// returns a checksum of its work.
fn request(stack: PooledStack, id: u64) -> Coroutine<(), (), u64, PooledStack> {
    Coroutine::with_stack(stack, move |yielder, ()| {
        let mut acc = id;
        for step in 0..YIELDS {
            acc = acc.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(step);
            yielder.suspend(());
        }
        acc
    })
}

/// Runs `requests` requests, keeping `depth` in flight: each turn of the
/// loop resumes every request once, like an event loop that finds all I/O
/// complete. Returns the XOR of the requests' checksums.
fn worker(
    pool: &StackPool,
    depth: usize,
    first_id: u64,
    requests: usize,
) -> Result<u64, StackError> {
    let mut in_flight = Vec::with_capacity(depth);
    let (mut started, mut done, mut checksum) = (0, 0, 0);
    while done < requests {
        while in_flight.len() < depth && started < requests {
            in_flight.push(request(pool.get()?, first_id + started as u64));
            started += 1;
        }
        let mut i = 0;
        while i < in_flight.len() {
            match in_flight[i].resume(()) {
                CoroutineResult::Yield(()) => i += 1,
                CoroutineResult::Return(sum) => {
                    checksum ^= sum;
                    done += 1;
                    // Dropping the finished coroutine returns its stack.
                    in_flight.swap_remove(i);
                }
            }
        }
    }
    Ok(checksum)
}

fn run(args: &Args) -> Result<(), Box<dyn Error>> {
    let pool = StackPool::new(STACK_SIZE)?;
    let start = Instant::now();
    let checksums: Vec<Result<u64, StackError>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..args.threads)
            .map(|t| {
                let share = args.total / args.threads + usize::from(t < args.total % args.threads);
                let first_id = (t * (args.total / args.threads + 1)) as u64;
                let pool = &pool;
                s.spawn(move || worker(pool, args.depth, first_id, share))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker threads do not panic"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut checksum = 0;
    for result in checksums {
        checksum ^= result?;
    }

    let stats = pool.stats();
    println!(
        "{} requests on {} threads x {} in flight ({} yields each): {:.3} s, {:.0} requests/s (checksum {checksum:#x})",
        args.total,
        args.threads,
        args.depth,
        YIELDS,
        elapsed.as_secs_f64(),
        args.total as f64 / elapsed.as_secs_f64(),
    );
    println!(
        "stacks: {} mapped ({} KiB usable each, {} VMAs), {} gets served from the pool, {} mapped new",
        stats.mapped,
        STACK_SIZE / 1024,
        stats.vmas,
        stats.pool.hits,
        stats.pool.misses,
    );
    println!(
        "idle: {} ({} in the depot, {} in thread caches), at most {} KiB resident; budget {}",
        stats.pool.idle,
        stats.pool.idle_depot,
        stats.pool.idle_cached(),
        stats.idle_resident_max / 1024,
        pool.budget().map_or_else(
            || "none (no map count on this OS)".to_owned(),
            |b| b.to_string()
        ),
    );
    let purged = pool.purge();
    let after = pool.stats();
    println!(
        "purge: {purged} idle stacks released their pages; idle resident now at most {} KiB",
        after.idle_resident_max / 1024
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
