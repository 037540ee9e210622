//! `teardown_paths [--stacks N] [--regions R] [--repeats K] [--touch KIB]`:
//! the teardowns that happen without a drain or a mass release, and what
//! the rest of the process feels during them.
//!
//! Cases, each in a child process of its own (one after another, in turn,
//! `K` times):
//!
//! * `drop`: a `StackPool` holding `N` idle 256 KiB stacks (the top `KIB`
//!   KiB of each written, default 64) is dropped; the pool's destroy queue
//!   tears them down (a chunk on the dropping thread, the reclaimer the
//!   rest).
//! * `critical`: the same pool, kept, gets `pressure::notify(Critical)`;
//!   the reclaimer destroys its idle stacks down to `min_idle` (0).
//! * `regions`: a `Pool<RegionManager>` (the pool behind
//!   `tidepool-wasmtime`'s memory creator) holding `R` idle regions of
//!   4 MiB, 1 MiB of each written and kept resident, is dropped.
//!
//! Each case also runs with `release_step(0)` (`-whole`: slabs unmapped
//! with their pages, regions unmapped without releasing theirs first), to
//! show what the step buys. A probe thread, about every millisecond, times
//! a get + put on another stack pool and an `mmap` + `munmap` of a 64 KiB
//! region; "rest" is the 300 ms before the teardown starts, "during" from
//! its start until the process's RSS is back within 64 MiB of what it was
//! before the objects were made (a dropped pool has no stats left to ask).
//! Prints one line per run: wall time, p99 during / p99 at rest for both
//! probes, and the `madvise` / `munmap` counts where a pool still answers.

use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidepool::pressure::{self, Level};
use tidepool::region::RegionManager;
use tidepool::stack::StackPool;
use tidepool::Pool;
use tidepool_bench::{map_unmap, status_kib};

const STACK: usize = 256 * 1024;
const REGION: usize = 4 << 20;
const REGION_TOUCH: usize = 1 << 20;
const PROBE_MAP: usize = 64 * 1024;

/// (ms since start, get+put µs, mmap+munmap µs).
type Sample = (f64, f64, f64);

fn probe(stop: Arc<AtomicBool>, start: Instant) -> Vec<Sample> {
    let pool = StackPool::builder(64 * 1024)
        .background(false)
        .build()
        .expect("valid settings");
    drop(pool.get().expect("a stack"));
    let mut samples = Vec::new();
    while !stop.load(SeqCst) {
        let t = Instant::now();
        drop(std::hint::black_box(pool.get()));
        let get_put = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        map_unmap(PROBE_MAP, false);
        let map = t.elapsed().as_secs_f64() * 1e6;
        samples.push((start.elapsed().as_secs_f64() * 1e3, get_put, map));
        std::thread::sleep(Duration::from_millis(1));
    }
    samples
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * 0.99).round() as usize]
}

/// Waits until RSS is within 64 MiB of `base_kib` (or 60 s pass).
fn wait_for_rss(base_kib: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_kib("VmRSS:") > base_kib + 64 * 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Runs one case in this process and prints its `RESULT` line.
fn child(case: &str, stacks: usize, regions: usize, touch: usize) {
    let (kind, whole) = match case.strip_suffix("-whole") {
        Some(kind) => (kind, true),
        None => (case, false),
    };
    let step = if whole {
        0
    } else {
        tidepool::DEFAULT_RELEASE_STEP
    };
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let probe_thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || probe(stop, start))
    };
    std::thread::sleep(Duration::from_millis(50));
    let base_kib = status_kib("VmRSS:");
    let ms = || start.elapsed().as_secs_f64() * 1e3;
    let (t0, t1, calls);
    match kind {
        "drop" | "critical" => {
            let pool = StackPool::builder(STACK)
                .release_step(step)
                .unbounded()
                .burst(32)
                .batch_size(32)
                .purge_delay(Duration::from_secs(3600))
                .build()
                .expect("valid settings");
            let held: Vec<_> = (0..stacks).map(|_| pool.get().expect("a stack")).collect();
            for s in &held {
                let n = touch.min(s.usable_size());
                // SAFETY: the top `n` bytes are writable and ours.
                unsafe { s.top().as_ptr().sub(n).write_bytes(1, n) };
            }
            drop(held);
            // This thread's cache too: every stack idle in the depot.
            pool.trim_local();
            std::thread::sleep(Duration::from_millis(300));
            t0 = ms();
            if kind == "drop" {
                drop(pool);
                wait_for_rss(base_kib);
                t1 = ms();
                calls = None;
            } else {
                pressure::notify(Level::Critical);
                let deadline = Instant::now() + Duration::from_secs(60);
                while (pool.stats().pool.idle > 0 || pool.stats().pool.destroying > 0)
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_micros(200));
                }
                t1 = ms();
                let s = pool.stats();
                calls = Some((s.madvise_calls, s.munmap_calls));
            }
        }
        "regions" => {
            let _ = step;
            let pool = Pool::builder(RegionManager::new(REGION).keep_resident(REGION_TOUCH))
                .maps_per_object(2)
                .max_idle(regions)
                .build()
                .expect("valid settings");
            let mut held = Vec::with_capacity(regions);
            for _ in 0..regions {
                let mut r = pool.get().expect("a region");
                r.set_accessible(REGION_TOUCH).expect("accessible");
                // SAFETY: the first REGION_TOUCH bytes are read-write and
                // ours.
                unsafe { r.as_ptr().write_bytes(1, REGION_TOUCH) };
                held.push(r);
            }
            drop(held);
            pool.trim_local();
            std::thread::sleep(Duration::from_millis(300));
            t0 = ms();
            drop(pool);
            wait_for_rss(base_kib);
            t1 = ms();
            calls = None;
        }
        other => panic!("no case {other}"),
    }
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, SeqCst);
    let samples = probe_thread.join().unwrap_or_default();
    let pick = |from: f64, to: f64, f: fn(&Sample) -> f64| -> Vec<f64> {
        samples
            .iter()
            .filter(|s| s.0 >= from && s.0 <= to)
            .map(f)
            .collect()
    };
    // A teardown shorter than the probe's period still gets the sample
    // that ran across it.
    let to = samples.iter().map(|s| s.0).find(|&t| t >= t1).unwrap_or(t1);
    let rest = (t0 - 300.0, t0);
    let ratio = |f: fn(&Sample) -> f64| p99(pick(t0, to, f)) / p99(pick(rest.0, rest.1, f));
    let (madvise, munmap) = calls.map_or(("-".into(), "-".into()), |(a, u): (u64, u64)| {
        (a.to_string(), u.to_string())
    });
    println!(
        "RESULT case={case} wall_ms={:.1} map_p99_rest_us={:.1} map_p99_during_us={:.1} \
         map_ratio={:.2} get_put_p99_rest_us={:.2} get_put_p99_during_us={:.2} \
         get_put_ratio={:.2} samples_during={} madvise={madvise} munmap={munmap}",
        t1 - t0,
        p99(pick(rest.0, rest.1, |s| s.2)),
        p99(pick(t0, to, |s| s.2)),
        ratio(|s| s.2),
        p99(pick(rest.0, rest.1, |s| s.1)),
        p99(pick(t0, to, |s| s.1)),
        ratio(|s| s.1),
        pick(t0, to, |s| s.1).len(),
    );
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (stacks, regions, repeats, touch) = (
        get("--stacks", 25_000),
        get("--regions", 6_000),
        get("--repeats", 3),
        get("--touch", 64) * 1024,
    );
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], stacks, regions, touch);
        return ExitCode::SUCCESS;
    }
    println!(
        "# {stacks} stacks of 256 KiB (top {} KiB written), {regions} regions of 4 MiB (1 MiB \
         written); {repeats} repeat(s); p99 during / p99 at rest",
        touch / 1024
    );
    let cases = [
        "drop",
        "drop-whole",
        "critical",
        "critical-whole",
        "regions",
    ];
    for _ in 0..repeats {
        for case in cases {
            let out = Command::new(std::env::current_exe().expect("this program"))
                .args(["--child", case])
                .args(["--stacks", &stacks.to_string()])
                .args(["--regions", &regions.to_string()])
                .args(["--touch", &(touch / 1024).to_string()])
                .output();
            match out {
                Ok(out) if out.status.success() => {
                    for line in String::from_utf8_lossy(&out.stdout).lines() {
                        if line.starts_with("RESULT") {
                            println!("{line}");
                        }
                    }
                }
                Ok(out) => {
                    eprintln!("{case} failed: {}", String::from_utf8_lossy(&out.stderr));
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("{case}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
