//! A soak: a mixed load for a chosen time, in cycles, checking the counts
//! at every cycle's end and, once the load stops, that idle memory goes
//! back to its floor. Run by `bin/soak.sh` (default 30 minutes).
//!
//! Each cycle (about ten seconds):
//! * worker threads start, run and exit (their caches handed back);
//! * objects flow from producer threads to consumer threads that free them;
//! * a pool with a live limit is shared by more threads than it has
//!   places, which wait for them with timeouts;
//! * a large stack pool is filled and torn down;
//! * a forked child uses the pools and exits;
//! * memory pressure: the cgroup v2 group this runs in, if it has
//!   `memory.high` set, or a critical signal every cycle otherwise.
//!
//! At each cycle's end, with no thread inside the pools, every object made
//! is live, idle, being destroyed or destroyed exactly once (a counting
//! manager's ledger against the pool's stats). After the last cycle the
//! load stops and the soak waits for idle objects and mappings to go back
//! to their floor. It prints one line per cycle and a summary, and exits
//! non-zero on any failure.
//!
//!   cargo run --release -p tidepool --example soak -- MINUTES

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidepool::pressure::Level;
use tidepool::stack::StackPool;
use tidepool::{Manage, Pool};

/// Counts every object made and destroyed, and checks each is destroyed
/// once (a destroyed object is marked; a second destroy panics).
#[derive(Default)]
struct Ledger {
    made: AtomicU64,
    destroyed: AtomicU64,
}

struct Obj {
    alive: bool,
    _payload: [u8; 256],
}

#[derive(Clone)]
struct Counting(Arc<Ledger>);

impl Manage for Counting {
    type Item = Box<Obj>;
    type Error = std::convert::Infallible;

    fn create(&self) -> Result<Box<Obj>, Self::Error> {
        self.0.made.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(Obj {
            alive: true,
            _payload: [7; 256],
        }))
    }

    fn destroy(&self, mut obj: Box<Obj>) {
        assert!(obj.alive, "an object destroyed twice");
        obj.alive = false;
        self.0.destroyed.fetch_add(1, Ordering::Relaxed);
    }
}

const INTERVAL: Duration = Duration::from_millis(500);

fn check(name: &str, pool: &Pool<Counting>, ledger: &Ledger) -> Result<(), String> {
    let s = pool.stats();
    let made = ledger.made.load(Ordering::Relaxed);
    let destroyed = ledger.destroyed.load(Ordering::Relaxed);
    if s.created != made || s.destroyed != destroyed {
        return Err(format!(
            "{name}: stats {s:?} but the ledger made {made}, destroyed {destroyed}"
        ));
    }
    if s.live + s.idle + s.destroying != s.existing() {
        return Err(format!(
            "{name}: live + idle + destroying != existing: {s:?}"
        ));
    }
    Ok(())
}

/// Threads that start, take and give back objects, and exit.
fn churn(pool: &Arc<Pool<Counting>>, until: Instant) {
    while Instant::now() < until {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let held: Vec<_> = (0..8 + t * 16).map(|_| pool.get().unwrap()).collect();
                    drop(held);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}

/// A producer hands objects to a consumer, which drops them.
fn flow(pool: &Arc<Pool<Counting>>, until: Instant) {
    let (tx, rx) = mpsc::sync_channel(64);
    let consumer = std::thread::spawn(move || while rx.recv().is_ok() {});
    while Instant::now() < until {
        for _ in 0..256 {
            tx.send(pool.get_owned().unwrap()).unwrap();
        }
    }
    drop(tx);
    consumer.join().unwrap();
}

/// More threads than places under `max_live`, waiting with timeouts.
fn limited(pool: &Arc<Pool<Counting>>, until: Instant) {
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut timeouts = 0u64;
                while Instant::now() < until {
                    match pool.get_timeout(Duration::from_millis(2)) {
                        Ok(obj) => {
                            std::thread::yield_now();
                            drop(obj);
                        }
                        Err(tidepool::Error::Timeout { .. }) => timeouts += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                timeouts
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A stack pool filled with thousands of stacks, then torn down.
fn teardown() -> Result<(), String> {
    let stacks = StackPool::builder(16 * 1024)
        .reclaim_interval(INTERVAL)
        .build()
        .map_err(|e| e.to_string())?;
    let held: Vec<_> = (0..4096)
        .map(|_| stacks.get())
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    drop(held);
    if !stacks.close(Duration::from_secs(30)) {
        return Err("a stack pool's close timed out".into());
    }
    Ok(())
}

/// A forked child uses the pool and exits 0.
fn fork_child(pool: &Pool<Counting>) -> Result<(), String> {
    // SAFETY: the child only uses the pool (fork-safe: tidepool's atfork
    // handlers) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let held: Vec<_> = (0..32).map(|_| pool.get().unwrap()).collect();
            drop(held);
            pool.stats().live == 0
        }));
        // SAFETY: leaving the child without running the parent's state.
        unsafe { libc::_exit(if matches!(ok, Ok(true)) { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("a forked child failed: status {status:#x}"))
    }
}

/// Whether this process's cgroup v2 group has `memory.high` set: the
/// kernel then applies real pressure, which tidepool's PSI source reads.
fn cgroup_memory_high() -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = table.lines().find_map(|l| l.strip_prefix("0::"))?;
    let high = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.high")).ok()?;
    (high.trim() != "max").then(|| high.trim().to_owned())
}

/// This process's memory areas now (lines of `/proc/self/maps`).
fn vmas() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let minutes: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30.0);
    let end = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let pressure = cgroup_memory_high();
    println!(
        "soak: {minutes} min; pressure from {}",
        pressure
            .as_deref()
            .map_or("a critical signal each cycle".to_owned(), |h| format!(
                "the cgroup's memory.high ({h})"
            ))
    );
    let ledger = Arc::new(Ledger::default());
    let limited_ledger = Arc::new(Ledger::default());
    let pool = Arc::new(
        Pool::builder(Counting(ledger.clone()))
            .reclaim_interval(INTERVAL)
            .purge_delay(INTERVAL / 4)
            .build()
            .unwrap(),
    );
    let capped = Arc::new(
        Pool::builder(Counting(limited_ledger.clone()))
            .max_live(4)
            .batch_size(1)
            .reclaim_interval(INTERVAL)
            .build()
            .unwrap(),
    );
    let rss_start = rss_kib();
    let mut failures = Vec::new();
    let mut cycle = 0u64;
    let mut peak_idle = 0;
    let mut first_vmas = None;
    while Instant::now() < end {
        cycle += 1;
        let until = Instant::now() + Duration::from_secs(2);
        churn(&pool, until);
        let until = Instant::now() + Duration::from_secs(2);
        flow(&pool, until);
        let until = Instant::now() + Duration::from_secs(2);
        limited(&capped, until);
        if let Err(e) = teardown() {
            failures.push(format!("cycle {cycle}: {e}"));
        }
        if let Err(e) = fork_child(&pool) {
            failures.push(format!("cycle {cycle}: {e}"));
        }
        if pressure.is_none() {
            tidepool::pressure::notify(Level::Critical);
        }
        std::thread::sleep(INTERVAL);
        peak_idle = peak_idle.max(pool.stats().idle);
        for (name, p, l) in [
            ("pool", &pool, &ledger),
            ("capped", &capped, &limited_ledger),
        ] {
            if let Err(e) = check(name, p, l) {
                failures.push(format!("cycle {cycle}: {e}"));
            }
        }
        let s = pool.stats();
        let v = vmas();
        let first = *first_vmas.get_or_insert(v);
        // Mappings must not grow from cycle to cycle (a little slack for
        // the allocator's arenas).
        if v > first + 32 {
            failures.push(format!(
                "cycle {cycle}: {v} VMAs, {first} after the first cycle"
            ));
        }
        println!(
            "cycle {cycle}: made {} destroyed {} idle {} rss {} KiB, {v} VMAs; reclaimer {:?}",
            s.created,
            s.destroyed,
            s.idle,
            rss_kib(),
            tidepool::reclaim::status().running
        );
    }
    // The load stops: idle objects go back to their floor (0) within a few
    // intervals, on the reclaimer alone.
    let settle = Instant::now() + INTERVAL * 20;
    while Instant::now() < settle && (pool.stats().idle > 0 || capped.stats().idle > 0) {
        std::thread::sleep(INTERVAL / 5);
    }
    let (s, c) = (pool.stats(), capped.stats());
    if s.idle > 0 || c.idle > 0 {
        failures.push(format!(
            "idle objects left after the load stopped: {} and {}",
            s.idle, c.idle
        ));
    }
    let status = tidepool::reclaim::status();
    if !status.running {
        failures.push("the reclaimer is not running".to_owned());
    }
    for (name, p, l) in [
        ("pool", &pool, &ledger),
        ("capped", &capped, &limited_ledger),
    ] {
        if let Err(e) = check(name, p, l) {
            failures.push(format!("at the end: {e}"));
        }
    }
    println!(
        "soak: {cycle} cycles; {} objects made, {} destroyed, peak idle {peak_idle}, idle at the \
         end {}; RSS {rss_start} KiB at the start, {} KiB at the end; reclaimer running: {}, \
         restarts {}",
        s.created,
        s.destroyed,
        s.idle,
        rss_kib(),
        status.running,
        status.restarts
    );
    if failures.is_empty() {
        println!("soak: ok");
    } else {
        for f in &failures {
            eprintln!("FAIL {f}");
        }
        std::process::exit(1);
    }
}
