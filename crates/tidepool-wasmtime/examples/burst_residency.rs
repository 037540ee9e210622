//! Resident memory after a burst: 512 store-per-request requests in flight
//! at once on the module with a 17-page memory (see `benches/calls.rs`),
//! then nothing; the process's resident anonymous memory (`RssAnon`) above
//! what it held before the burst is sampled for five seconds.
//!
//!   cargo run --release -p tidepool-wasmtime --example burst_residency
//!
//! runs each strategy in a child process of its own and prints a table:
//! `pooled` (this crate's stacks and memories, default settings) and
//! `bounded_queue` (the stack queue of 100 users hand-write, memories
//! mapped and unmapped by wasmtime's default allocator).
//! `burst_residency STRATEGY` runs one and prints its samples.

#[cfg(target_os = "linux")]
#[path = "../benches/support/queue_stacks.rs"]
mod queue_stacks;
#[cfg(target_os = "linux")]
#[path = "../benches/support/requests.rs"]
mod requests;

#[cfg(target_os = "linux")]
mod linux {
    use std::time::{Duration, Instant};

    use crate::requests::{engine, instance_pre, requests};

    const BURST: usize = 512;
    const STRATEGIES: [&str; 2] = ["pooled", "bounded_queue"];
    /// Seconds after the burst at which resident memory is read.
    const AT: [f64; 7] = [0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0];

    /// The process's resident anonymous memory, in KiB.
    fn rss_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("an RssAnon line")
    }

    /// Runs one strategy; prints `KiB` above the pre-burst level at each of
    /// `AT`, space-separated.
    pub fn child(strategy: &str) {
        let pre = instance_pre(&engine(strategy, true), true, true);
        requests(&pre, 1); // warm: code, one stack, one memory
        let before = rss_anon_kib();
        requests(&pre, BURST);
        let end = Instant::now();
        let samples: Vec<String> = AT
            .iter()
            .map(|&t| {
                let due = end + Duration::from_secs_f64(t);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                rss_anon_kib().saturating_sub(before).to_string()
            })
            .collect();
        println!("{}", samples.join(" "));
    }

    pub fn parent() {
        let exe = std::env::current_exe().expect("this example's path");
        println!("resident anonymous memory above the pre-burst level, KiB,");
        println!("after a burst of {BURST} requests with a 1.06 MiB memory each:\n");
        let head: Vec<String> = AT.iter().map(|t| format!("{t} s")).collect();
        println!("| strategy | {} |", head.join(" | "));
        println!("|---|{}", "---:|".repeat(AT.len()));
        for strategy in STRATEGIES {
            let out = std::process::Command::new(&exe)
                .arg(strategy)
                .output()
                .expect("run a child");
            assert!(out.status.success(), "{strategy}: {out:?}");
            let line = String::from_utf8_lossy(&out.stdout);
            let cells: Vec<&str> = line.split_whitespace().collect();
            println!("| {strategy} | {} |", cells.join(" | "));
        }
    }
}

#[cfg(target_os = "linux")]
fn main() {
    match std::env::args().nth(1) {
        Some(strategy) => linux::child(&strategy),
        None => linux::parent(),
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("burst_residency needs Linux");
}
