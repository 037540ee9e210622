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
//! tidepool its pool statistics (batch size, depot exchanges, reclaim
//! passes, idle stacks). `FIO_OPS_SMALL=1` makes each request write 256
//! bytes of frame instead of 16 KiB, so that what the pools themselves cost
//! is not lost in the memory traffic.
//!
//! Where the time goes: hardware counters are not available on the
//! development VM, but the kernel's `cpu-clock` sampling is:
//!
//! ```text
//! FIO_OPS_SMALL=1 perf record -e cpu-clock -F 5000 target/release/examples/fio_ops tidepool 40000 256 4
//! perf annotate --stdio -s '<tidepool_lab::policy::tidepool::TidepoolLocal as tidepool_lab::policy::Local>::get'
//! ```

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
    // FIO_OPS_SMALL=1: a 256-byte frame instead of 16 KiB, so that the
    // pool's own cost is not lost in the memory traffic.
    let touch = if std::env::var_os("FIO_OPS_SMALL").is_some() {
        Touch::Small
    } else {
        Touch::Large
    };
    // The lab's fio environment: QEMU's 1 MiB stacks, 15 s / 100.
    let env = PolicyEnv {
        stack_size: 1 << 20,
        reclaim_interval: Duration::from_millis(150),
        pressure_hold: tidepool_lab::scenario::scaled_pressure_hold(Duration::from_millis(150)),
        max_map_count: tidepool_lab::procfs::max_map_count().unwrap_or(65530),
        resident_touch: None,
        idle_decay: true,
    };
    // tidepool is built by hand so that its pool's statistics can be read.
    let pooled = (kind == PolicyKind::Tidepool)
        .then(|| tidepool_lab::policy::tidepool::Tidepool::new(&env).expect("policy"));
    let built;
    let policy: &dyn tidepool_lab::policy::Policy = match &pooled {
        Some(t) => t,
        None => {
            built = kind.build(&env).expect("policy");
            &*built
        }
    };
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
                            round.push(stack::start(s, id, touch));
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
    if let Some(t) = &pooled {
        let s = t.pool().stats().pool;
        println!(
            "tidepool: batch {}, depot exchanges {}, misses {}, reclaim passes {}, reclaimed {}, \
             destroyed {}, idle {} ({} in the depot), caches taken {}",
            s.batch_size,
            s.depot_exchanges,
            s.misses,
            s.reclaim_passes,
            s.reclaimed,
            s.destroyed,
            s.idle,
            s.idle_depot,
            s.caches_taken
        );
    }
}
