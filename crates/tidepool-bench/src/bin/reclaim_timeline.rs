//! Adaptive reclaim, measured (issue #4).
//!
//! `reclaim_timeline spike [INTERVAL_MS] [SAMPLE_MS] [DURATION_MS]`
//!   A burst, then idleness: 4 threads each hold 500 objects at once, give
//!   them back, and stay alive doing nothing. Two pools run the same burst
//!   side by side: `tidepool` (reclaim interval INTERVAL_MS, default 200) and
//!   `never` (the same pool with reclaim effectively off: a 3600 s
//!   interval). Prints a CSV of idle objects in each every SAMPLE_MS
//!   (default 100) for DURATION_MS (default 2000) after the burst.
//!
//! `reclaim_timeline pressure [REPS]`
//!   Time from `pressure::notify(Level::Critical)` to observing
//!   `idle == min_idle` on a background pool holding 2000 idle objects (4
//!   parked threads' caches included), REPS times (default 20); prints each,
//!   then the median and the maximum. The target: under 50 ms.
//!
//! Both set `TIDEPOOL_PRESSURE=manual`, so no system source (PSI, cgroup)
//! adds signals of its own.

use std::process::ExitCode;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tidepool::pressure::{self, Level};
use tidepool::Pool;

type Buf = Vec<u8>;
type P = Pool<fn() -> Buf>;

const THREADS: usize = 4;
const PER_THREAD: usize = 500;

fn new_buf() -> Buf {
    Vec::with_capacity(4096)
}

fn pool(interval: Duration, min_idle: usize, hold: Duration) -> Arc<P> {
    Arc::new(
        Pool::builder(new_buf as fn() -> Buf)
            .max_idle(4096)
            .min_idle(min_idle)
            .reclaim_interval(interval)
            .pressure_hold(hold)
            .build()
            .expect("valid settings"),
    )
}

/// Threads that stay alive between commands, each running "hold `n`
/// objects of every pool at once, then give them back" when told.
struct Workers {
    cmds: Vec<Sender<usize>>,
    done: Receiver<()>,
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    fn spawn(pools: Vec<Arc<P>>) -> Self {
        let (done_tx, done) = channel();
        let barrier = Arc::new(Barrier::new(THREADS));
        let mut cmds = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..THREADS {
            let (tx, rx) = channel::<usize>();
            let pools = pools.clone();
            let done_tx = done_tx.clone();
            let barrier = Arc::clone(&barrier);
            cmds.push(tx);
            handles.push(std::thread::spawn(move || {
                while let Ok(n) = rx.recv() {
                    let held: Vec<Vec<_>> = pools
                        .iter()
                        .map(|p| (0..n).map(|_| p.get().unwrap()).collect())
                        .collect();
                    // Everyone holds its share at once: a real peak.
                    barrier.wait();
                    drop(held);
                    done_tx.send(()).unwrap();
                }
            }));
        }
        Self {
            cmds,
            done,
            handles,
        }
    }

    fn burst(&self, n: usize) {
        for c in &self.cmds {
            c.send(n).unwrap();
        }
        for _ in 0..THREADS {
            self.done.recv().unwrap();
        }
    }

    fn exit(self) {
        drop(self.cmds);
        for h in self.handles {
            h.join().unwrap();
        }
    }
}

fn spike(interval_ms: u64, sample_ms: u64, duration_ms: u64) {
    let tide = pool(
        Duration::from_millis(interval_ms),
        0,
        Duration::from_secs(2),
    );
    let never = pool(Duration::from_secs(3600), 0, Duration::from_secs(2));
    let workers = Workers::spawn(vec![Arc::clone(&tide), Arc::clone(&never)]);
    workers.burst(PER_THREAD);
    let start = Instant::now();
    println!("# {THREADS} threads x {PER_THREAD} objects, then idle (threads alive)");
    println!("# tidepool: reclaim_interval {interval_ms} ms; never: 3600 s");
    println!("t_ms,tidepool_idle,never_idle,tidepool_reclaimed,tidepool_caches_taken");
    let mut next = Duration::ZERO;
    while next <= Duration::from_millis(duration_ms) {
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let (t, n) = (tide.stats(), never.stats());
        println!(
            "{},{},{},{},{}",
            start.elapsed().as_millis(),
            t.idle,
            n.idle,
            t.reclaimed,
            t.caches_taken
        );
        next += Duration::from_millis(sample_ms);
    }
    workers.exit();
}

fn pressure_latency(reps: usize) {
    const MIN_IDLE: usize = 16;
    let hold = Duration::from_millis(20);
    let p = pool(Duration::from_secs(3600), MIN_IDLE, hold);
    let workers = Workers::spawn(vec![Arc::clone(&p)]);
    let mut ms = Vec::with_capacity(reps);
    for rep in 0..reps {
        // Refill after the previous hold is over (puts during it would be
        // destroyed).
        std::thread::sleep(hold * 3);
        workers.burst(PER_THREAD);
        let before = p.stats();
        assert!(before.idle as usize > MIN_IDLE * 10, "refilled: {before:?}");
        let t = Instant::now();
        pressure::notify(Level::Critical);
        loop {
            let s = p.stats();
            if s.pressure_critical > before.pressure_critical && s.idle as usize == MIN_IDLE {
                break;
            }
            // A bound on the wait, not a speed check: a pool that never
            // responds must end the benchmark with a message, not hang it.
            if t.elapsed() > Duration::from_secs(30) {
                eprintln!("no response to the pressure signal after 30 s: {s:?}");
                std::process::exit(1);
            }
            std::thread::yield_now();
        }
        let took = t.elapsed();
        ms.push(took.as_secs_f64() * 1e3);
        println!(
            "rep {rep:2}: {:8.3} ms  ({} idle -> {MIN_IDLE})",
            took.as_secs_f64() * 1e3,
            before.idle
        );
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "notify(Critical) -> idle == min_idle over {reps} reps: median {:.3} ms, max {:.3} ms (target < 50 ms)",
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
    workers.exit();
}

fn main() -> ExitCode {
    std::env::set_var("TIDEPOOL_PRESSURE", "manual");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    match args.first().map(String::as_str) {
        Some("spike") => spike(num(1, 200), num(2, 100), num(3, 2000)),
        Some("pressure") => pressure_latency(num(1, 20) as usize),
        _ => {
            eprintln!(
                "usage: reclaim_timeline spike [INTERVAL_MS] [SAMPLE_MS] [DURATION_MS]\n       reclaim_timeline pressure [REPS]"
            );
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
