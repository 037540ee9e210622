//! `stack_refill [--quick]`: a refill of a stack batch
//! (`StackManager::create_batch`, one slab) against making the same stacks
//! one by one, each with a mapping of its own (`mmap` + `mprotect` for the
//! guard, what corosensei's `DefaultStack`, QEMU and tidepool before slabs
//! do), in one run, interleaved round by round so the machine's load hits
//! every subject alike. Prints one line per stack size and subject
//! (medians over the rounds, µs per stack) and the system calls per 1,000
//! stacks, then `ratio` lines that `bin/bench.sh` puts in its table.
//!
//! Subjects, each making `k` stacks (one slab's worth) and then tearing
//! them down (timed apart; `total` is both):
//!
//! * `refill`: `create_batch(k)` on a pool with the default
//!   [`GuardMode`] (markers on Linux 6.13+: 1 `mmap` + `k`
//!   `madvise(MADV_GUARD_INSTALL)`), torn down with `destroy_batch` (1
//!   `munmap`).
//! * `refill_protect`: the same with `GuardMode::Protect` (1 `mmap` + `k`
//!   `mprotect`, each splitting the slab's VMA).
//! * `one_by_one`: `k` times `mmap` + `mprotect` of the guard, then `k`
//!   `munmap`s.
//!
//! The stacks are not touched: this is the cost of the address-space work
//! alone (page faults are the same for every subject).
//!
//! System calls are counted where they are made (`StackStats`) for the
//! pool subjects and by construction for `one_by_one`; check either with
//! `strace -f -c -e trace=mmap,mprotect,madvise,munmap`.

use std::process::ExitCode;
use std::ptr;
use std::time::Instant;

use tidepool::stack::{GuardMode, StackPool, StackStats};
use tidepool::Manage;

const PAGE: usize = 4096;

/// One stack mapped on its own: `mmap` of guard + stack, `mprotect` of the
/// guard. What every pooled stack was before slabs.
struct Own {
    base: *mut libc::c_void,
    len: usize,
}

// The baseline makes its own mappings, as the code it stands for does.
#[allow(clippy::disallowed_methods)]
fn own(usable: usize) -> Own {
    let len = usable + PAGE;
    // SAFETY: a fresh private anonymous mapping at an address of the
    // kernel's choosing; nothing aliases it.
    let base = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    // SAFETY: the first page of our own fresh mapping.
    let rc = unsafe { libc::mprotect(base, PAGE, libc::PROT_NONE) };
    assert_eq!(rc, 0, "mprotect");
    Own { base, len }
}

impl Drop for Own {
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        // SAFETY: the whole mapping `own` made; nothing points into it.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Per round, µs per stack: making, tearing down, both.
#[derive(Default)]
struct Times {
    create: Vec<f64>,
    teardown: Vec<f64>,
    total: Vec<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Times {
    fn push(&mut self, create: f64, teardown: f64, k: usize) {
        self.create.push(create / k as f64);
        self.teardown.push(teardown / k as f64);
        self.total.push((create + teardown) / k as f64);
    }

    /// Medians of the three.
    fn medians(&mut self) -> (f64, f64, f64) {
        (
            median(&mut self.create),
            median(&mut self.teardown),
            median(&mut self.total),
        )
    }
}

fn micros(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e6
}

fn pool(usable: usize, mode: GuardMode) -> StackPool {
    StackPool::builder(usable)
        .guard_mode(mode)
        .background(false)
        .build()
        .expect("valid settings")
}

/// `mmap`, `mprotect`, guard `madvise`, other `madvise`, `munmap` per
/// 1,000 stacks.
fn per_1000(s: &StackStats, stacks: usize) -> String {
    let f = |n: u64| n as f64 * 1000.0 / stacks as f64;
    format!(
        "mmap={:.0} mprotect={:.0} guard_madvise={:.0} madvise={:.0} munmap={:.0}",
        f(s.mmap_calls),
        f(s.mprotect_calls),
        f(s.guard_calls),
        f(s.madvise_calls),
        f(s.munmap_calls)
    )
}

fn main() -> ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 60 } else { 300 };
    println!(
        "stack_refill: {rounds} rounds, interleaved; guard markers (MADV_GUARD_INSTALL) {}",
        if GuardMode::markers_supported() {
            "supported: `refill` uses them"
        } else {
            "NOT supported by this kernel: `refill` uses mprotect too"
        }
    );
    for usable in [64 * 1024, 1024 * 1024] {
        let markers = pool(usable, GuardMode::Auto);
        let protect = pool(usable, GuardMode::Protect);
        let k = markers.manager().stacks_per_slab();
        let (mut refill, mut refill_protect, mut one) =
            (Times::default(), Times::default(), Times::default());
        // A warm-up round, not counted.
        for round in 0..=rounds {
            let keep = round > 0;
            for (p, times) in [(&markers, &mut refill), (&protect, &mut refill_protect)] {
                let m = p.manager();
                let t = Instant::now();
                let batch = m.create_batch(k).expect("stacks");
                let create = micros(t);
                assert_eq!(batch.len(), k);
                let t = Instant::now();
                m.destroy_batch(batch);
                let teardown = micros(t);
                if keep {
                    times.push(create, teardown, k);
                }
            }
            let t = Instant::now();
            let stacks: Vec<Own> = (0..k).map(|_| own(usable)).collect();
            let create = micros(t);
            let t = Instant::now();
            drop(stacks);
            let teardown = micros(t);
            if keep {
                one.push(create, teardown, k);
            }
        }
        let kib = usable / 1024;
        let n = (rounds + 1) * k;
        let (oc, ot, o) = one.medians();
        for (name, times, calls) in [
            ("refill", &mut refill, per_1000(&markers.stats(), n)),
            (
                "refill_protect",
                &mut refill_protect,
                per_1000(&protect.stats(), n),
            ),
        ] {
            let (c, t, total) = times.medians();
            println!(
                "size={kib}KiB k={k} subject={name} create_us={c:.3} teardown_us={t:.3} \
                 total_us={total:.3} per_1000_stacks: {calls}"
            );
        }
        println!(
            "size={kib}KiB k={k} subject=one_by_one create_us={oc:.3} teardown_us={ot:.3} \
             total_us={o:.3} per_1000_stacks: mmap=1000 mprotect=1000 guard_madvise=0 \
             madvise=0 munmap=1000"
        );
        let (rc, _, rt) = refill.medians();
        let (pc, _, pt) = refill_protect.medians();
        println!("ratio size={kib}KiB what=create one_by_one/refill={:.2} one_by_one/refill_protect={:.2}", oc / rc, oc / pc);
        println!("ratio size={kib}KiB what=total one_by_one/refill={:.2} one_by_one/refill_protect={:.2}", o / rt, o / pt);
    }
    ExitCode::SUCCESS
}
