//! `many_pools [--pools 100,1000,5000,20000] [--threads 8] [--secs 2]
//! [--interval-ms 100] [--builds 2000] [--default-interval-secs 0]`: a
//! process with many pools, and threads that move between them.
//!
//! `--threads` workers do get + put on pools picked at random among P
//! pools of 256-byte objects (every default but `reclaim_interval`), while
//! a probe thread times get + put on a pool of its own, one sample every
//! 200 µs. Then the workers and the probe exit, and after 3 intervals the
//! pools' idle objects and the process's RSS are read. Each P runs in its
//! own child process (so RSS is its own), once with tidepool and once with
//! the baseline: a `parking_lot::Mutex<Vec<Box<[u8; 256]>>>` free list per
//! pool, unbounded, which is what such code would otherwise use.
//!
//! Reported per P and subject:
//!
//! * `ns/op`: median over the workers of each one's ns per get + put;
//! * `probe p50`, `p99`: the probe's get + put, in ns;
//! * `build`: ns per pool made, first get, and dropped (`--builds` of them,
//!   made while the P pools exist);
//! * `idle`, `above min`: idle objects 3 intervals after the threads
//!   exit (read half an interval later, once the passes due at the third
//!   boundary have run over every pool), and how many pools hold more
//!   than their `min_idle` (0 here);
//!   `idle @17`: the idle objects 17 intervals after the exit, past the
//!   longest working-set window (a pool still in use that had to make again
//!   objects it had reclaimed keeps its idle ones up to 16 intervals; one
//!   nobody uses lets them go after two quiet intervals);
//! * `RSS` at three points: with the P pools made and unused, during the
//!   flow (at its end), and 3 intervals after the threads exit; `per pair`
//!   is (RSS after − RSS of the unused pools) / (pools × threads that
//!   used them), the memory a (pool, thread) pair leaves behind, and
//!   `heap/pair` the same for the live heap: what the pools still hold
//!   for those pairs, apart from what the allocator keeps;
//! * `trim MB`: RSS right after that, once `malloc_trim` (glibc) has
//!   returned the allocator's free pages to the system;
//! * `heap MB b/a`: the bytes allocated and not freed (a counting global
//!   allocator) with the pools built, and after: what RSS holds beyond it
//!   is the allocator's (freed memory it keeps, pages half in use);
//! * `reclaimer`: the `tidepool-reclaim` thread's CPU time over the
//!   child's life, as a share of one core.
//!
//! `--default-interval-secs S` adds one more tidepool child at the largest
//! P with the default `reclaim_interval` (15 s): the flow for `--secs`,
//! then S seconds idle, reporting the reclaimer's share of one core over
//! all of it (the bar: below 1%).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tidepool_bench::status_kib;

/// The system allocator, counting the bytes it has out: the heap the
/// pools and their objects hold, apart from what RSS adds (freed memory
/// the allocator keeps, thread stacks).
struct Counted;

static LIVE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter is
// only statistics.
unsafe impl std::alloc::GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new, Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counted = Counted;

fn heap_kib() -> u64 {
    (LIVE_BYTES.load(Relaxed) / 1024) as u64
}

type Obj = Box<[u8; 256]>;
type Make = fn() -> Obj;

fn make() -> Obj {
    Box::new([0u8; 256])
}

/// What a worker does on one pool of either subject.
trait Subject: Send + Sync + 'static {
    fn build(interval: Option<Duration>) -> Self;
    fn round_trip(&self);
    /// Idle objects held.
    fn idle(&self) -> u64;
    fn created(&self) -> u64;
    /// Reclaim passes run and thread caches taken back (tidepool only).
    fn passes(&self) -> (u64, u64) {
        (0, 0)
    }
}

struct Tidepool(tidepool::Pool<Make>);

impl Subject for Tidepool {
    fn build(interval: Option<Duration>) -> Self {
        let b = tidepool::Pool::builder(make as Make);
        let b = match interval {
            Some(i) => b.reclaim_interval(i),
            None => b,
        };
        Self(b.build().expect("valid settings"))
    }
    #[inline]
    fn round_trip(&self) {
        let mut g = self.0.get().expect("infallible manager");
        black_box(&mut g)[0] = 1;
    }
    fn idle(&self) -> u64 {
        self.0.stats().idle
    }
    fn created(&self) -> u64 {
        self.0.stats().created
    }
    fn passes(&self) -> (u64, u64) {
        let s = self.0.stats();
        (s.reclaim_passes, s.caches_taken)
    }
}

/// The baseline: one locked free list per pool.
#[derive(Default)]
struct MutexVec {
    free: Mutex<Vec<Obj>>,
    created: std::sync::atomic::AtomicU64,
}

impl Subject for MutexVec {
    fn build(_: Option<Duration>) -> Self {
        Self::default()
    }
    #[inline]
    fn round_trip(&self) {
        let popped = self.free.lock().pop();
        let mut o = popped.unwrap_or_else(|| {
            self.created.fetch_add(1, Relaxed);
            make()
        });
        black_box(&mut o)[0] = 1;
        self.free.lock().push(o);
    }
    fn idle(&self) -> u64 {
        self.free.lock().len() as u64
    }
    fn created(&self) -> u64 {
        self.created.load(Relaxed)
    }
}

/// CPU seconds (user + system) of this process's threads named `name`.
fn thread_cpu_secs(name: &str) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !name.starts_with(comm.trim()) || comm.trim().is_empty() {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: state is field 3,
        // utime 14 and stime 15 (1-based, `proc(5)`).
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    ticks as f64 / hz
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

struct Args {
    pools: Vec<usize>,
    threads: usize,
    secs: f64,
    interval: Duration,
    builds: usize,
    default_idle: f64,
}

/// What a child runs: the subject, P, and the pools' reclaim interval
/// (`None`: the default).
type ChildOf = (String, usize, Option<Duration>);

fn parse() -> Result<(Option<ChildOf>, Args), String> {
    let mut a = Args {
        pools: vec![100, 1_000, 5_000, 20_000],
        threads: 8,
        secs: 2.0,
        interval: Duration::from_millis(100),
        builds: 2_000,
        default_idle: 0.0,
    };
    let mut child = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--pools" => {
                a.pools = val()?
                    .split(',')
                    .map(|p| p.parse().map_err(|e| format!("--pools: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--threads" => a.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--secs" => a.secs = val()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--interval-ms" => {
                a.interval = Duration::from_millis(
                    val()?.parse().map_err(|e| format!("--interval-ms: {e}"))?,
                )
            }
            "--builds" => a.builds = val()?.parse().map_err(|e| format!("--builds: {e}"))?,
            "--default-interval-secs" => {
                a.default_idle = val()?
                    .parse()
                    .map_err(|e| format!("--default-interval-secs: {e}"))?
            }
            "--child" => {
                let subject = val()?;
                let p = val()?.parse().map_err(|e| format!("--child: {e}"))?;
                let interval: u64 = val()?.parse().map_err(|e| format!("--child: {e}"))?;
                let interval = (interval != 0).then(|| Duration::from_millis(interval));
                child = Some((subject, p, interval));
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.threads == 0 || a.pools.contains(&0) || a.secs <= 0.0 {
        return Err("--threads, --pools and --secs must be positive".into());
    }
    Ok((child, a))
}

/// One subject at P pools, in this process; prints one `RESULT` line of
/// `key=value` pairs.
fn child<S: Subject>(p: usize, interval: Option<Duration>, a: &Args) {
    let start = Instant::now();
    let rss_base = status_kib("VmRSS:");
    let heap_base = heap_kib();
    let pools: Arc<Vec<S>> = Arc::new((0..p).map(|_| S::build(interval)).collect());
    let rss_built = status_kib("VmRSS:");
    let heap_built = heap_kib();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(a.threads + 2));
    let workers: Vec<_> = (0..a.threads)
        .map(|w| {
            let (pools, stop, ready) = (Arc::clone(&pools), Arc::clone(&stop), Arc::clone(&ready));
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1).wrapping_mul(0xbf58_476d);
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                ready.wait();
                let t = Instant::now();
                let mut ops = 0u64;
                while !stop.load(Relaxed) {
                    for _ in 0..64 {
                        pools[(next() % pools.len() as u64) as usize].round_trip();
                    }
                    ops += 64;
                }
                t.elapsed().as_nanos() as f64 / ops as f64
            })
        })
        .collect();
    let probe = {
        let (stop, ready) = (Arc::clone(&stop), Arc::clone(&ready));
        std::thread::spawn(move || {
            let own = S::build(interval);
            own.round_trip();
            ready.wait();
            let mut ns = Vec::new();
            while !stop.load(Relaxed) {
                let t = Instant::now();
                own.round_trip();
                ns.push(t.elapsed().as_nanos() as f64);
                std::thread::sleep(Duration::from_micros(200));
            }
            ns
        })
    };
    ready.wait();
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    let rss_flow = status_kib("VmRSS:");
    let (passes, taken) = pools
        .iter()
        .map(S::passes)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    stop.store(true, Relaxed);
    let mut per_worker: Vec<f64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let mut probe_ns = probe.join().unwrap();
    // Three intervals after the threads exit (the default interval's, if
    // the pools have it: the run then waits `--default-interval-secs`),
    // and half of one more for the passes due at the third boundary to
    // run: the reclaimer takes them one pool after another, which over
    // 20,000 pools is a good part of an interval's CPU time.
    let wait = match interval {
        Some(i) => i * 3 + i / 2,
        None => Duration::from_secs_f64(a.default_idle),
    };
    std::thread::sleep(wait);
    let idle: u64 = pools.iter().map(S::idle).sum();
    let above = pools.iter().filter(|s| s.idle() > 0).count();
    let rss_after = status_kib("VmRSS:");
    let heap_after = heap_kib();
    // How much of that the allocator holds free (glibc returns it to the
    // OS on `malloc_trim`): not the pools' doing, but it shows in RSS.
    // SAFETY: `malloc_trim` has no preconditions.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
    let rss_trimmed = status_kib("VmRSS:");
    // A pool whose window grew keeps its idle objects longer while it is
    // used (up to 16 intervals): what is left then, if any was left above.
    let (idle_late, above_late) = match interval {
        Some(i) if idle > 0 => {
            std::thread::sleep(i * 14);
            let late: u64 = pools.iter().map(S::idle).sum();
            (late, pools.iter().filter(|s| s.idle() > 0).count())
        }
        _ => (idle, above),
    };
    let created: u64 = pools.iter().map(S::created).sum();
    // Making a pool, its first get, and dropping it, while the P live.
    let t = Instant::now();
    for _ in 0..a.builds {
        let s = S::build(interval);
        s.round_trip();
        drop(black_box(s));
    }
    let build_ns = t.elapsed().as_nanos() as f64 / a.builds.max(1) as f64;
    let reclaimer = thread_cpu_secs("tidepool-reclaim") / start.elapsed().as_secs_f64();
    println!(
        "RESULT ns_op={:.1} probe_p50={:.0} probe_p99={:.0} build_ns={:.0} idle={} above={} \
         created={} rss_base_kib={} rss_built_kib={} rss_flow_kib={} rss_after_kib={} rss_trimmed_kib={} heap_base_kib={} heap_built_kib={} heap_after_kib={} \
         reclaimer={:.5} pairs={} passes={} taken={} idle_late={} above_late={}",
        pct(&mut per_worker, 0.5),
        pct(&mut probe_ns, 0.5),
        pct(&mut probe_ns, 0.99),
        build_ns,
        idle,
        above,
        created,
        rss_base,
        rss_built,
        rss_flow,
        rss_after,
        rss_trimmed,
        heap_base,
        heap_built,
        heap_after,
        reclaimer,
        p * a.threads,
        passes,
        taken,
        idle_late,
        above_late,
    );
}

fn run_child(subject: &str, p: usize, interval_ms: u64, a: &Args) -> BTreeMap<String, f64> {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .args(["--child", subject, &p.to_string(), &interval_ms.to_string()])
        .args(["--threads", &a.threads.to_string()])
        .args(["--secs", &a.secs.to_string()])
        .args(["--builds", &a.builds.to_string()])
        .args(["--default-interval-secs", &a.default_idle.to_string()])
        .output()
        .expect("child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
        eprintln!(
            "{subject} at P={p}: no result (status {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return BTreeMap::new();
    };
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

fn main() -> ExitCode {
    let (child_of, a) = match parse() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("many_pools: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some((subject, p, interval)) = child_of {
        match subject.as_str() {
            "tidepool" => child::<Tidepool>(p, interval, &a),
            "mutex_vec" => child::<MutexVec>(p, interval, &a),
            other => {
                eprintln!("many_pools: unknown subject {other}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    let ms = a.interval.as_millis() as u64;
    println!(
        "{} workers + 1 probe, {} s of flow per run, reclaim_interval {} ms, 256-byte objects",
        a.threads, a.secs, ms
    );
    println!(
        "{:>6} {:<9} {:>8} {:>9} {:>9} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>13} {:>9} {:>9} {:>10}",
        "P",
        "subject",
        "ns/op",
        "probe p50",
        "probe p99",
        "build ns",
        "idle",
        "above min",
        "idle @17",
        "RSS MB",
        "flow MB",
        "after MB",
        "trim MB",
        "heap MB b/a",
        "B/pair",
        "heap/pair",
        "reclaimer"
    );
    for &p in &a.pools {
        for subject in ["tidepool", "mutex_vec"] {
            let r = run_child(subject, p, ms, &a);
            if r.is_empty() {
                return ExitCode::FAILURE;
            }
            let per_pair = (r["rss_after_kib"] - r["rss_built_kib"]) * 1024.0 / r["pairs"];
            let heap_per_pair = (r["heap_after_kib"] - r["heap_built_kib"]) * 1024.0 / r["pairs"];
            println!(
                "{:>6} {:<9} {:>8.1} {:>9.0} {:>9.0} {:>8.0} {:>7} {:>9} {:>8} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>6.1}/{:<6.1} {:>9.0} {:>9.0} {:>9.3}%",
                p,
                subject,
                r["ns_op"],
                r["probe_p50"],
                r["probe_p99"],
                r["build_ns"],
                r["idle"],
                r["above"],
                r["idle_late"],
                r["rss_built_kib"] / 1024.0,
                r["rss_flow_kib"] / 1024.0,
                r["rss_after_kib"] / 1024.0,
                r["rss_trimmed_kib"] / 1024.0,
                r["heap_built_kib"] / 1024.0,
                r["heap_after_kib"] / 1024.0,
                per_pair,
                heap_per_pair,
                r["reclaimer"] * 100.0,
            );
        }
    }
    if a.default_idle > 0.0 {
        let p = *a.pools.iter().max().expect("at least one P");
        let r = run_child("tidepool", p, 0, &a);
        if r.is_empty() {
            return ExitCode::FAILURE;
        }
        println!(
            "default reclaim_interval, P={p}: reclaimer {:.3}% of one core over {} s of flow \
             and {} s idle; idle objects then {}",
            r["reclaimer"] * 100.0,
            a.secs,
            a.default_idle,
            r["idle"],
        );
    }
    ExitCode::SUCCESS
}
