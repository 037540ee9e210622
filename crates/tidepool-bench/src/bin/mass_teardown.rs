//! `mass_teardown [--stacks N] [--holders H] [--repeats R]`: seed 004's
//! experiment (DragonFly 2017, mass pipe teardown) on stacks. `H` holder
//! threads together hold `N` guarded 64 KiB stacks (16 KiB of each
//! touched), then all release at once and exit. Meanwhile a probe thread,
//! every millisecond, times a get + put on a *different* stack pool and a
//! 64 KiB `mmap` + `munmap` (what the rest of the process feels).
//!
//! Policies (each in its own child process, so peak RSS is its own):
//!
//! * `dfly-before`: every stack its own mapping (`GuardedStack::new`);
//!   every releasing thread unmaps its own stacks at once, one `munmap`
//!   each, no bound.
//! * `dfly-2017`: stacks carved in slabs (`StackManager::create_batch`);
//!   a releasing thread takes one of `ncpus` permits (a queued, fair lock
//!   per permit) and tears its stacks down with one `destroy_batch` (one
//!   `munmap` per slab, pages and all: `release_step(0)`).
//! * `tidepool`: a `StackPool` with `burst(32)`, `max_idle` one batch;
//!   holders drop their `PooledStack`s and exit; the pool's destroy queue
//!   (at most `ncpus` runners, one chunk per exiting thread, the
//!   reclaimer the rest) tears them down.
//!
//! Reports per policy (median over repeats): teardown wall time (release
//! to every holder gone and nothing left to destroy), probe p50/p99/max at
//! rest and during teardown, peak RSS and VMAs, and `munmap` calls per
//! 1000 stacks (counted: `StackStats::munmap_calls`, or one per dropped
//! own-mapping stack, which is one `munmap` each by construction).

use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use tidepool::stack::{GuardedStack, StackPool};
use tidepool::Manage;
use tidepool_bench::{map_unmap, status_kib};

const STACK: usize = 64 * 1024;
const TOUCH: usize = 16 * 1024;

fn touch(stack: &GuardedStack) {
    // SAFETY: the top `TOUCH` bytes of the usable part are writable and
    // ours alone.
    unsafe {
        stack
            .top()
            .as_ptr()
            .sub(TOUCH)
            .write_bytes(1, TOUCH.min(stack.usable_size()))
    }
}

fn vmas() -> u64 {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |s| s.lines().count() as u64)
}

/// A counting semaphore whose waiters are woken one at a time
/// (`notify_one`): dfly-2017's bound of `ncpus` teardowns at once, without
/// a wake-up storm.
struct Permits {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Permits {
    fn acquire(&self) {
        let mut free = self.free.lock().unwrap();
        while *free == 0 {
            free = self.cv.wait(free).unwrap();
        }
        *free -= 1;
    }
    fn release(&self) {
        *self.free.lock().unwrap() += 1;
        self.cv.notify_one();
    }
}

/// What one probe sample saw: (ms since start, get+put µs, mmap+munmap µs).
type Sample = (f64, f64, f64);

fn probe(stop: Arc<AtomicBool>, start: Instant) -> Vec<Sample> {
    let pool = StackPool::builder(STACK).background(false).build().unwrap();
    drop(pool.get().unwrap());
    let mut samples = Vec::new();
    while !stop.load(SeqCst) {
        let t = Instant::now();
        drop(std::hint::black_box(pool.get().unwrap()));
        let get_put = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        map_unmap(STACK, true);
        let mmap = t.elapsed().as_secs_f64() * 1e6;
        samples.push((start.elapsed().as_secs_f64() * 1e3, get_put, mmap));
        std::thread::sleep(Duration::from_millis(1));
    }
    samples
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Runs one policy in this process; prints one `RESULT` line.
fn child(policy: &str, n: usize, holders: usize) {
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let probe_thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || probe(stop, start))
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let per = n.div_ceil(holders);
    let held = Arc::new(Barrier::new(holders + 1));
    let go = Arc::new(Barrier::new(holders + 1));
    // dfly-2017 unmaps whole slabs with their pages (DragonFly's bulk
    // removal): no release step.
    let step = if policy == "dfly-2017" {
        0
    } else {
        tidepool::DEFAULT_RELEASE_STEP
    };
    let pool = StackPool::builder(STACK)
        .release_step(step)
        .batch_size(32)
        .burst(32)
        .unbounded()
        .max_idle(32)
        .build()
        .unwrap();
    let permits = Arc::new(Permits {
        free: Mutex::new(cpus),
        cv: Condvar::new(),
    });
    // Let the probe see the process at rest first.
    std::thread::sleep(Duration::from_millis(300));
    let rest_end = start.elapsed().as_secs_f64() * 1e3;
    let threads: Vec<_> = (0..holders)
        .map(|_| {
            let (held, go, pool, permits) = (
                Arc::clone(&held),
                Arc::clone(&go),
                pool.clone(),
                Arc::clone(&permits),
            );
            let policy = policy.to_owned();
            std::thread::spawn(move || match policy.as_str() {
                "dfly-before" => {
                    let v: Vec<_> = (0..per)
                        .map(|_| GuardedStack::new(STACK).unwrap())
                        .collect();
                    v.iter().for_each(touch);
                    held.wait();
                    go.wait();
                    drop(v);
                }
                "dfly-2017" => {
                    let m = pool.manager();
                    let mut v = Vec::with_capacity(per);
                    while v.len() < per {
                        v.extend(m.create_batch((per - v.len()).min(32)).unwrap());
                    }
                    v.iter().for_each(touch);
                    held.wait();
                    go.wait();
                    permits.acquire();
                    m.destroy_batch(v);
                    permits.release();
                }
                _ => {
                    let v: Vec<_> = (0..per).map(|_| pool.get().unwrap()).collect();
                    v.iter().for_each(|s| touch(s));
                    held.wait();
                    go.wait();
                    drop(v);
                }
            })
        })
        .collect();
    held.wait();
    let peak_vmas = vmas();
    let hold_rss = status_kib("VmRSS:");
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let release_at = start.elapsed().as_secs_f64() * 1e3;
    go.wait();
    for t in threads {
        t.join().unwrap();
    }
    // Nothing left to destroy (tidepool's queue empties on the reclaimer).
    while pool.stats().pool.destroying > 0 {
        std::thread::sleep(Duration::from_micros(200));
    }
    let wall = t0.elapsed();
    let end_at = start.elapsed().as_secs_f64() * 1e3;
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, SeqCst);
    let samples = probe_thread.join().unwrap();
    let stats = pool.stats();
    let munmaps = match policy {
        // One mapping per stack: one `munmap` per dropped stack.
        "dfly-before" => (per * holders) as u64,
        _ => stats.munmap_calls,
    };
    let mut rest_g: Vec<f64> = Vec::new();
    let mut rest_m = Vec::new();
    let mut dur_g = Vec::new();
    let mut dur_m = Vec::new();
    for &(t, g, m) in &samples {
        if t < rest_end {
            rest_g.push(g);
            rest_m.push(m);
        } else if t >= release_at && t <= end_at {
            dur_g.push(g);
            dur_m.push(m);
        }
    }
    // Per stack torn down (tidepool's bursts may have made a few more than
    // were held; `max_idle` stay pooled).
    let stacks = match policy {
        "tidepool" => stats.pool.destroyed.max(1) as f64,
        _ => (per * holders) as f64,
    };
    println!(
        "RESULT {policy} wall_ms={:.1} munmap_per_1000={:.1} peak_vmas={peak_vmas} \
         peak_rss_mib={:.0} hold_rss_mib={:.0} \
         rest_getput_p50={:.2} rest_getput_p99={:.2} rest_getput_max={:.1} \
         dur_getput_p50={:.2} dur_getput_p99={:.2} dur_getput_max={:.1} \
         rest_mmap_p50={:.2} rest_mmap_p99={:.2} rest_mmap_max={:.1} \
         dur_mmap_p50={:.2} dur_mmap_p99={:.2} dur_mmap_max={:.1} samples_during={}",
        wall.as_secs_f64() * 1e3,
        munmaps as f64 * 1000.0 / stacks,
        status_kib("VmHWM:") as f64 / 1024.0,
        hold_rss as f64 / 1024.0,
        pct(&mut rest_g, 0.5),
        pct(&mut rest_g, 0.99),
        pct(&mut rest_g, 1.0),
        pct(&mut dur_g, 0.5),
        pct(&mut dur_g, 0.99),
        pct(&mut dur_g, 1.0),
        pct(&mut rest_m, 0.5),
        pct(&mut rest_m, 0.99),
        pct(&mut rest_m, 1.0),
        pct(&mut dur_m, 0.5),
        pct(&mut dur_m, 0.99),
        pct(&mut dur_m, 1.0),
        dur_g.len(),
    );
    // The probe's time series, for plotting: t_ms get_put_us mmap_us.
    if std::env::var_os("MASS_TEARDOWN_SERIES").is_some() {
        for (t, g, m) in samples {
            println!("SERIES {policy} {t:.2} {g:.2} {m:.2}");
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (n, holders, repeats) = (
        get("--stacks", 25_000),
        get("--holders", 64),
        get("--repeats", 1),
    );
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], n, holders);
        return ExitCode::SUCCESS;
    }
    println!("# {n} stacks of 64 KiB over {holders} holders, {repeats} repeat(s); times in ms, latencies in µs");
    for repeat in 0..repeats {
        for policy in ["dfly-before", "dfly-2017", "tidepool"] {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--child", policy, "--stacks", &n.to_string()])
                .args(["--holders", &holders.to_string()])
                .output()
                .unwrap();
            if !out.status.success() {
                eprintln!("{policy} failed: {}", String::from_utf8_lossy(&out.stderr));
                return ExitCode::FAILURE;
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.starts_with("RESULT") || line.starts_with("SERIES") {
                    println!("{line} repeat={repeat}");
                }
            }
        }
    }
    ExitCode::SUCCESS
}
