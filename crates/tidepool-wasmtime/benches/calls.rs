//! Instance-call throughput: wasmtime async calls on pooled fiber stacks
//! and pooled linear memories against wasmtime's own allocators, in the
//! same run.
//!
//! Each request is what a store-per-request server does: a new `Store`,
//! `instantiate_async` from an `InstancePre`, one `call_async` (which
//! suspends once in an async host function when many are in flight), drop
//! the store. Subjects (criterion ids `group/subject`):
//!
//! * `pooled`: this crate: `Config::pooled_stacks(StackPool)`, and for
//!   modules with a memory `Config::pooled_memories(PooledMemoryCreator)`;
//! * `on_demand`: wasmtime's default allocator: a fresh `mmap` + `mprotect`
//!   per stack and per memory, an `munmap` when the store drops;
//! * `pooling_allocator`: wasmtime's pooling instance allocator, sized for
//!   the largest load here (1,024 instances, stacks and memories), its
//!   defaults otherwise;
//! * `pooling_tuned`: the same, as its documentation advises for this
//!   load: a released memory's first 1 MiB cleared with `memset` and kept
//!   resident (`linear_memory_keep_resident`, what tidepool's memory
//!   creator keeps), decommits batched 32 at a time
//!   (`decommit_batch_size`); copy-on-write images on (its default);
//! * `bounded_queue`: the stack pool wasmtime users hand-write, a
//!   `StackCreator` over a `Mutex<Vec>` of at most 100 guarded stacks
//!   (memories on demand).
//!
//! Groups: `request` (one request at a time), `concurrent_64` and
//! `concurrent_512` (that many in flight; time per batch), for a module
//! without memory, and the same three with a `memory_` prefix for a module
//! with a 17-page (1.06 MiB) memory whose call touches 15 pages of it and
//! recurses 50 deep. The `zeroing_` groups run the module without memory
//! with `async_stack_zeroing(true)`, the multi-tenant setting, for
//! `pooled`, `pooling_allocator` and `pooling_batched` (its decommits
//! batched 32 at a time), both pools keeping the top 64 KiB of a stack
//! resident and clearing it with `memset`. The `module_` groups run
//! `pooled`, `pooling_allocator` and `pooling_tuned` on modules whose call
//! stores one word in its memory and reads the last byte of a data segment:
//! `page1` (one wasm page, no data), `data16k` to `data256k` (16, 64, 128
//! and 256 KiB segments in the fewest pages that hold them; 1 and 64 in
//! flight), `data512k` (17 pages, a 512 KiB data segment) and `data8m` (129
//! pages, an 8 MiB segment; 1 and 64 in flight), where the pooling
//! allocator maps the segment copy-on-write and a pooled memory has it
//! copied in at every instantiation.
//!
//! After the run, the bench prints each group's medians per request and the
//! ratios to `pooled` (from criterion's `estimates.json`).
//! `TIDEPOOL_BENCH_QUICK=1` shortens every measurement.

#[cfg(target_os = "linux")]
#[path = "support/queue_stacks.rs"]
mod queue_stacks;
#[cfg(target_os = "linux")]
#[path = "support/requests.rs"]
mod requests;

#[cfg(target_os = "linux")]
mod linux {
    use std::path::PathBuf;
    use std::time::Duration;

    use criterion::{BenchmarkId, Criterion, Throughput};

    use crate::requests::{
        data_wat, engine, engine_with, instance_pre, instance_pre_wat, requests,
    };

    const SUBJECTS: [&str; 5] = [
        "pooled",
        "on_demand",
        "pooling_allocator",
        "pooling_tuned",
        "bounded_queue",
    ];
    /// Named loads: requests in flight.
    type Loads = &'static [(&'static str, usize)];
    /// The memory modules of the `module_` groups: name, wasm pages, data
    /// segment bytes, loads. The small segments (16 to 256 KiB, in the
    /// fewest pages that hold them) find where copying a segment at every
    /// instantiation starts to lose to mapping it copy-on-write.
    const MODULES: [(&str, u32, usize, Loads); 7] = [
        ("page1", 1, 0, &LOADS),
        ("data16k", 1, 16 << 10, &LOADS_1_64),
        ("data64k", 2, 64 << 10, &LOADS_1_64),
        ("data128k", 3, 128 << 10, &LOADS_1_64),
        ("data256k", 5, 256 << 10, &LOADS_1_64),
        ("data512k", 17, 512 << 10, &LOADS),
        ("data8m", 129, 8 << 20, &LOADS_1_64),
    ];
    /// One and 64 requests in flight.
    const LOADS_1_64: [(&str, usize); 2] = [("request", 1), ("concurrent_64", 64)];
    /// The subjects of the `module_` groups.
    const MODULE_SUBJECTS: [&str; 3] = ["pooled", "pooling_allocator", "pooling_tuned"];
    /// The subjects of the `zeroing_` groups.
    const ZEROING_SUBJECTS: [&str; 3] = ["pooled", "pooling_allocator", "pooling_batched"];
    /// Requests in flight per group.
    const LOADS: [(&str, usize); 3] = [
        ("request", 1),
        ("concurrent_64", 64),
        ("concurrent_512", 512),
    ];

    pub fn benches(c: &mut Criterion) {
        for memory in [false, true] {
            for (name, n) in LOADS {
                let group = if memory {
                    format!("memory_{name}")
                } else {
                    name.to_owned()
                };
                let mut g = c.benchmark_group(&group);
                g.throughput(Throughput::Elements(n as u64));
                for subject in SUBJECTS {
                    let pre = instance_pre(&engine(subject, memory), n > 1, memory);
                    requests(&pre, n); // the first stacks, outside the measurement
                    g.bench_function(BenchmarkId::from_parameter(subject), |b| {
                        b.iter(|| requests(&pre, n))
                    });
                }
                g.finish();
            }
        }
        for (module, pages, data, loads) in MODULES {
            let wat = data_wat(pages, data);
            for &(name, n) in loads {
                let mut g = c.benchmark_group(format!("module_{module}_{name}"));
                g.throughput(Throughput::Elements(n as u64));
                for subject in MODULE_SUBJECTS {
                    let pre = instance_pre_wat(&engine(subject, true), n > 1, &wat);
                    requests(&pre, n);
                    g.bench_function(BenchmarkId::from_parameter(subject), |b| {
                        b.iter(|| requests(&pre, n))
                    });
                }
                g.finish();
            }
        }
        for (name, n) in LOADS {
            let mut g = c.benchmark_group(format!("zeroing_{name}"));
            g.throughput(Throughput::Elements(n as u64));
            for subject in ZEROING_SUBJECTS {
                let pre = instance_pre(&engine_with(subject, false, true), n > 1, false);
                requests(&pre, n);
                g.bench_function(BenchmarkId::from_parameter(subject), |b| {
                    b.iter(|| requests(&pre, n))
                });
            }
            g.finish();
        }
    }

    pub fn config() -> Criterion {
        let quick =
            std::env::var_os("TIDEPOOL_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
        let (warm_up, measure) = if quick {
            (Duration::from_millis(300), Duration::from_secs(1))
        } else {
            (Duration::from_secs(1), Duration::from_secs(3))
        };
        Criterion::default()
            .warm_up_time(warm_up)
            .measurement_time(measure)
            .configure_from_args()
    }

    /// `target/criterion`, found from this binary's path
    /// (`target/<profile>/deps/calls-*`).
    fn criterion_dir() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        Some(exe.parent()?.parent()?.parent()?.join("criterion"))
    }

    /// The median of `group/subject` in ns per iteration, if it was run.
    fn median_ns(dir: &std::path::Path, group: &str, subject: &str) -> Option<f64> {
        let path = dir.join(group).join(subject).join("new/estimates.json");
        let json = std::fs::read_to_string(path).ok()?;
        // `{"mean":{...},"median":{"confidence_interval":{...},"point_estimate":N,...`
        let median = &json[json.find("\"median\"")?..];
        let point = &median[median.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
        let end = point.find([',', '}'])?;
        point[..end].trim().parse().ok()
    }

    /// Medians per request and ratios to `pooled`, as in the README.
    pub fn summary() {
        let Some(dir) = criterion_dir() else { return };
        println!("\nmedian µs per request (ratio to pooled):");
        println!("| | {} | pooling_batched |", SUBJECTS.join(" | "));
        println!("|---|{}", "---|".repeat(SUBJECTS.len() + 1));
        let groups = LOADS.iter().flat_map(|&(name, n)| {
            let modules = MODULES
                .iter()
                .filter(move |(_, _, _, loads)| loads.iter().any(|&(l, _)| l == name))
                .map(move |(module, ..)| (format!("module_{module}_{name}"), n));
            [
                (name.to_owned(), n),
                (format!("memory_{name}"), n),
                (format!("zeroing_{name}"), n),
            ]
            .into_iter()
            .chain(modules)
        });
        for (group, n) in groups {
            let group = group.as_str();
            let per = n as f64;
            let Some(base) = median_ns(&dir, group, "pooled") else {
                continue;
            };
            let cells: Vec<String> = SUBJECTS
                .iter()
                .chain(["pooling_batched"].iter())
                .map(|s| match median_ns(&dir, group, s) {
                    Some(ns) => format!("{:.2} ({:.2}×)", ns / per / 1000.0, ns / base),
                    None => "–".to_owned(),
                })
                .collect();
            println!("| {group} | {} |", cells.join(" | "));
        }
    }
}

#[cfg(target_os = "linux")]
fn main() {
    let mut c = linux::config();
    linux::benches(&mut c);
    c.final_summary();
    linux::summary();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("wasmtime stack benchmarks need Linux");
}
