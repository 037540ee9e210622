//! `pool_layout [--pools 20000] [--ops 3000000] [--runs 5] [--spread-bytes 2048]`:
//! what the layout of many pools' state costs a get + put, apart from any
//! pool's code.
//!
//! One thread does get + put on pools picked at random among `--pools`
//! free lists, each a `parking_lot::Mutex<Vec<Box<[u8; 256]>>>` holding one
//! object, the same code in every subject; only where the lists live
//! differs:
//!
//! * `inline`: in one array, 40 bytes each (`many_pools`' baseline);
//! * `dense64`, `dense128`: in one array, on one line, or on a 128-byte
//!   pair of lines, each;
//! * `spread`: each at the head of an allocation of its own, 128-aligned,
//!   of `--spread-bytes` (by default 2,048: about a tidepool pool's
//!   shared state and head together, as if in one allocation per pool);
//! * `tidepool`: tidepool pools (every default, `reclaim_interval` 100 s so
//!   that no pass runs), for comparison: the thread first takes a cache in
//!   2,048 other pools, more than its fill of caches (`MAX_CACHES`), so that
//!   every get + put timed is slot-less, as nearly all are among 20,000
//!   pools.
//!
//! Each subject runs in its own child process, `--runs` times, the
//! subjects alternating; reported: the median ns per get + put over the
//! runs (every run listed), and its ratio to `inline`'s.

use std::hint::black_box;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

type Obj = Box<[u8; 256]>;
type List = Mutex<Vec<Obj>>;
type Make = fn() -> Obj;

fn make() -> Obj {
    Box::new([0u8; 256])
}

const SUBJECTS: [&str; 5] = ["inline", "dense64", "dense128", "spread", "tidepool"];

/// Pools the `tidepool` subject's thread takes a cache in before the
/// timed ones: more than a thread's fill of caches.
const FILL: usize = 2048;

/// The largest `--spread-bytes`: a page's worth of lines per pool is more
/// than any pool's shared state.
const MAX_SPREAD: usize = 1 << 16;

#[repr(C, align(64))]
struct Line(List);

#[repr(C, align(128))]
struct Pair(List);

/// A list at the head of an allocation of `bytes`, as a pool's shared
/// state is allocated.
struct Spread {
    ptr: std::ptr::NonNull<List>,
    layout: std::alloc::Layout,
}

impl Spread {
    fn new(bytes: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(bytes.max(size_of::<List>()), 128)
            .expect("a valid layout");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<List>();
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // SAFETY: `ptr` is valid for writes of a `List` and aligned for it
        // (128 ≥ its alignment).
        unsafe { ptr.as_ptr().write(Mutex::new(Vec::new())) };
        Self { ptr, layout }
    }

    fn list(&self) -> &List {
        // SAFETY: initialised in `new`, dropped only in `drop`.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Spread {
    fn drop(&mut self) {
        // SAFETY: written in `new`, allocated with `self.layout`, and not
        // used after this.
        unsafe {
            self.ptr.as_ptr().drop_in_place();
            std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout);
        }
    }
}

/// xorshift64: the same pool sequence in every subject.
struct Rng(u64);

impl Rng {
    fn next_below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[inline(always)]
fn round_trip(list: &List) {
    let got = list.lock().pop();
    let mut obj = got.unwrap_or_else(make);
    black_box(&mut obj)[0] = 1;
    list.lock().push(obj);
}

/// Warms every pool and then the random sequence once, then times `ops`
/// more: ns per get + put.
fn time(pools: usize, ops: usize, mut one: impl FnMut(usize)) -> f64 {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..pools {
        one(i);
    }
    for _ in 0..ops {
        one(rng.next_below(pools));
    }
    let t = Instant::now();
    for _ in 0..ops {
        one(rng.next_below(pools));
    }
    t.elapsed().as_nanos() as f64 / ops as f64
}

fn child(subject: &str, pools: usize, ops: usize, spread: usize) -> Result<f64, String> {
    Ok(match subject {
        "inline" => {
            let v: Vec<List> = (0..pools).map(|_| Mutex::new(Vec::new())).collect();
            time(pools, ops, |i| round_trip(&v[i]))
        }
        "dense64" => {
            let v: Vec<Line> = (0..pools).map(|_| Line(Mutex::new(Vec::new()))).collect();
            time(pools, ops, |i| round_trip(&v[i].0))
        }
        "dense128" => {
            let v: Vec<Pair> = (0..pools).map(|_| Pair(Mutex::new(Vec::new()))).collect();
            time(pools, ops, |i| round_trip(&v[i].0))
        }
        "spread" => {
            let v: Vec<Spread> = (0..pools).map(|_| Spread::new(spread)).collect();
            time(pools, ops, |i| round_trip(v[i].list()))
        }
        "tidepool" => {
            let build = |n: usize| -> Result<Vec<tidepool::Pool<Make>>, String> {
                (0..n)
                    .map(|_| {
                        tidepool::Pool::builder(make as Make)
                            .reclaim_interval(Duration::from_secs(100))
                            .build()
                            .map_err(|e| e.to_string())
                    })
                    .collect()
            };
            let fill = build(FILL)?;
            for pool in &fill {
                drop(pool.get().expect("an infallible manager"));
            }
            let v = build(pools)?;
            time(pools, ops, |i| {
                let mut g = v[i].get().expect("an infallible manager");
                black_box(&mut g)[0] = 1;
            })
        }
        other => return Err(format!("unknown subject {other:?}")),
    })
}

struct Args {
    pools: usize,
    ops: usize,
    runs: usize,
    spread: usize,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        pools: 20_000,
        ops: 3_000_000,
        runs: 5,
        spread: 2048,
    };
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            let v = it.next().ok_or(format!("{name} needs a value"))?;
            v.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or(format!("{name}: {v:?} is not a positive integer"))
        };
        match flag.as_str() {
            "--pools" => a.pools = value("--pools")?,
            "--ops" => a.ops = value("--ops")?,
            "--runs" => a.runs = value("--runs")?,
            "--spread-bytes" => {
                a.spread = value("--spread-bytes")?;
                if !(size_of::<List>()..=MAX_SPREAD).contains(&a.spread) {
                    return Err(format!(
                        "--spread-bytes: {} is outside {}..={MAX_SPREAD}",
                        a.spread,
                        size_of::<List>()
                    ));
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--child") {
        let v: Vec<String> = args.skip(1).collect();
        let num = |i: usize| v.get(i).and_then(|s| s.parse::<usize>().ok());
        let (Some(subject), Some(pools), Some(ops), Some(spread)) =
            (v.first(), num(1), num(2), num(3))
        else {
            eprintln!("usage: pool_layout --child SUBJECT POOLS OPS SPREAD_BYTES");
            return ExitCode::FAILURE;
        };
        return match child(subject, pools, ops, spread) {
            Ok(ns) => {
                println!("RESULT {ns:.1}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("pool_layout: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("pool_layout: {e}");
            return ExitCode::FAILURE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pool_layout: no path to this program: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} pools, one thread, {} get + put timed per run, {} runs per subject (alternating); spread {} bytes",
        a.pools, a.ops, a.runs, a.spread
    );
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); SUBJECTS.len()];
    for _ in 0..a.runs {
        for (s, subject) in SUBJECTS.iter().enumerate() {
            let out = Command::new(&exe)
                .args(["--child", subject])
                .args([a.pools, a.ops, a.spread].map(|n| n.to_string()))
                .output();
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    eprintln!("pool_layout: could not run the {subject} child: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let parsed = String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("RESULT ")?.trim().parse::<f64>().ok());
            match parsed {
                Some(v) if out.status.success() => ns[s].push(v),
                _ => {
                    eprintln!(
                        "pool_layout: the {subject} child failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let runs: Vec<String> = ns
        .iter()
        .map(|v| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let medians: Vec<f64> = ns.iter_mut().map(|v| median(v)).collect();
    println!(
        "{:>9} {:>8} {:>9}  runs (ns)",
        "subject", "ns/op", "× inline"
    );
    for (s, subject) in SUBJECTS.iter().enumerate() {
        println!(
            "{subject:>9} {:>8.1} {:>9.2}  {}",
            medians[s],
            medians[s] / medians[0],
            runs[s]
        );
    }
    ExitCode::SUCCESS
}
