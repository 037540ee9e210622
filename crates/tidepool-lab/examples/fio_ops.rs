//! The fio scenario's request loop without the harness's clock, for
//! instruction counts: `threads` workers (default 1) each run `rounds`
//! rounds of `depth` requests (submit all, then complete all) on one policy,
//! with the same stacks and the same request code as `tidepool-lab run`.
//!
//! ```text
//! cargo build --release -p tidepool-lab --example fio_ops
//! valgrind --tool=callgrind target/release/examples/fio_ops tidepool 2000 256
//! ```
//!
//! Prints requests completed, the policy's stacks created, and for
//! tidepool its pool statistics (depot exchanges, batch size, passes).

use std::time::Duration;

use tidepool_lab::policy::{PolicyEnv, PolicyKind};
use tidepool_lab::stack::{self, Touch};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = match args.get(1).map(String::as_str) {
        Some("tidepool") | None => PolicyKind::Tidepool,
        Some("qemu-2021") => PolicyKind::Qemu2021,
        Some("qemu-2024") => PolicyKind::Qemu2024,
        Some("qemu-fixed") => PolicyKind::QemuFixed,
        Some(other) => panic!("unknown policy {other}"),
    };
    let arg = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let rounds = arg(2, 2000);
    let depth = arg(3, 256);
    let threads = arg(4, 1);
    // The lab's fio environment: QEMU's 1 MiB stacks, 15 s / 100.
    let env = PolicyEnv {
        stack_size: 1 << 20,
        reclaim_interval: Duration::from_millis(150),
        pressure_hold: tidepool_lab::scenario::scaled_pressure_hold(Duration::from_millis(150)),
        max_map_count: tidepool_lab::procfs::max_map_count().unwrap_or(65530),
        resident_touch: None,
    };
    let policy = kind.build(&env).expect("policy");
    let policy = &*policy;
    let completed: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut local = policy.local();
                    let mut round = Vec::with_capacity(depth);
                    let mut sum = 0u64;
                    let mut done = 0u64;
                    let mut id = (t as u64) << 40;
                    for _ in 0..rounds {
                        for _ in 0..depth {
                            id += 1;
                            let s = local.get().expect("a stack");
                            round.push(stack::start(s, id, Touch::Large));
                        }
                        for req in round.drain(..) {
                            let (x, s) = req.complete();
                            sum = sum.wrapping_add(x);
                            local.put(s);
                            done += 1;
                        }
                        if let Some(d) = local.deadline() {
                            let now = std::time::Instant::now();
                            if d <= now {
                                local.on_timer(now);
                            }
                        }
                    }
                    std::hint::black_box(sum);
                    done
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    println!(
        "{kind}: {completed} requests, {} stacks created",
        policy.counts().created
    );
}
