//! `core_roundtrip count N` / `core_roundtrip time N RUNS`: the tiny
//! single-thread round trip (`get`, clear and write one byte, drop) on a
//! default `tidepool::Pool` of 64 KiB buffers.
//!
//! Self-contained on purpose: it uses nothing but `Pool::new` and `get`,
//! which every tidepool version has, so the same file builds against the
//! core before adaptive reclaim (commit `1736ccc`) and after it, for the
//! issue's "within 10%" check:
//!
//! ```text
//! git worktree add ../pre-reclaim 1736ccc
//! cp crates/tidepool-bench/src/bin/core_roundtrip.rs \
//!    ../pre-reclaim/crates/tidepool-bench/src/bin/
//! (cd ../pre-reclaim && cargo build --release -p tidepool-bench --bin core_roundtrip)
//! cargo build --release -p tidepool-bench --bin core_roundtrip
//! ```
//!
//! * `count N`: N round trips after one priming round trip, no output; run
//!   under `valgrind --tool=callgrind` with N and with 0, the difference / N
//!   is instructions per round trip.
//! * `time N RUNS`: RUNS timed runs of N round trips; prints ns per round
//!   trip for each run, then the median and the minimum.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

fn new_buf() -> Vec<u8> {
    Vec::with_capacity(64 * 1024)
}

#[inline(never)]
fn round_trips(pool: &tidepool::Pool<fn() -> Vec<u8>>, n: u64) {
    for _ in 0..n {
        let mut g = pool.get().expect("infallible manager");
        let v: &mut Vec<u8> = black_box(&mut g);
        v.clear();
        v.push(1);
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    let pool = tidepool::Pool::new(new_buf as fn() -> Vec<u8>);
    round_trips(&pool, 1);
    match args.first().map(String::as_str) {
        Some("count") => {
            round_trips(&pool, num(1, 1_000_000));
        }
        Some("time") => {
            let n = num(1, 10_000_000).max(1);
            let runs = num(2, 11).max(1);
            // Warm up.
            round_trips(&pool, n / 10);
            let mut ns: Vec<f64> = (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    round_trips(&pool, n);
                    t.elapsed().as_nanos() as f64 / n as f64
                })
                .collect();
            let each: Vec<String> = ns.iter().map(|x| format!("{x:.2}")).collect();
            println!("runs (ns/round trip): {}", each.join(" "));
            ns.sort_by(f64::total_cmp);
            println!("median {:.3} ns, min {:.3} ns", ns[ns.len() / 2], ns[0]);
        }
        _ => {
            eprintln!("usage: core_roundtrip count N | core_roundtrip time N RUNS");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
