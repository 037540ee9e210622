//! Measurements: each figure, the machine it was taken on, and the command
//! that reproduces it.
//!
//! This module holds no code. The README's results table quotes the main
//! figures; this page has the rest.
//!
//! # Machines and tools
//!
//! * **EPYC**: a 2-vCPU AMD EPYC VM (family 26), 23 GiB, Rust 1.95.
//! * **Xeon**: a 2-vCPU Intel Xeon VM (family 6, model 167), 23 GiB,
//!   Linux 6.18, Rust 1.95.
//!
//! Both are shared VMs without hardware performance counters, so timings
//! move with the host's load; every ratio below compares two figures from
//! the same run, and ranges are over separate runs of the same command.
//!
//! * `bin/budget.sh`: instructions per operation, counted by callgrind over
//!   the measured loop only. The counts repeat exactly on any machine and
//!   under any load; `.ci/run` fails a change that exceeds
//!   `crates/tidepool-bench/budget.toml` by more than 10 %.
//! * `bin/bench.sh`: the criterion benchmarks of `crates/tidepool-bench`
//!   and the `stack_refill` comparison, printed as one table of targets
//!   (a ratio of two medians from the run, the target, ✓ or ✗) after a
//!   machine line (a bare thread-local `Vec` on 2 threads against 1).
//! * The lab, `cargo run --release -p tidepool-lab -- run` (add
//!   `--scenario NAME` for one scenario): tidepool against the seeds' pool
//!   policies on real guarded stacks, 3 repeats per policy, medians; every
//!   repeat is in `report.html` and `report.json`.
//! * `cargo run --release -p tidepool-lab --example fio_ab -- A B`: two
//!   policies on the lab's `fio` request loop in one process, in
//!   alternating chunks, so that drift between runs cannot favour either.
//!
//! # Instruction counts
//!
//! `bin/budget.sh` (Rust 1.95; one thread, the object always in this
//! thread's cache; the same on every machine):
//!
//! | operation | instructions / op |
//! |---|---|
//! | `Pool::get` + write + drop (`Vec<u8>`) | 103 |
//! | `Pool::get` + drop | 94 |
//! | `Pool::get_owned` + drop | 108 |
//! | `StackPool::get` + drop (1 MiB guarded stack) | 110 |
//! | the same, get and drop each behind a call that is not inlined | 130 |
//! | `StackPool::get` + `StackPool::put` | 101 |
//! | the same, each behind a call that is not inlined (the lab's policy) | 112 |
//! | C: `tidepool_obj_get` + `tidepool_obj_put`, `TIDEPOOL_OBJ_UNCHECKED` | 171 |
//! | C: the same in a checked pool (two lookups in the live set) | 284 |
//!
//! For comparison (`bin/callgrind.sh`): a bare `thread_local!` `Vec` pop +
//! push 68, lockfree-object-pool's `LinearObjectPool` 61, object-pool 86.
//!
//! tidepool's paths execute no lock-prefixed instruction.
//! `LinearObjectPool` executes two per round trip (`lock cmpxchg` to take a
//! slot of its page's bitmask, `lock or` to give it back) and object-pool
//! four (a `parking_lot` lock and unlock, twice). Neither keeps counts,
//! checks for revocation or handles a panicking thread, and
//! `LinearObjectPool` never moves the object (it lends a reference into its
//! own page). Of tidepool's instructions, four per get note the thread
//! cache's low-water mark, which is what lets a reclaim pass trim a busy
//! cache of objects it held through two intervals without needing them.
//!
//! The scoped guard's drop is inlined into its caller: the put fast path
//! works on the loaded batch only and leaves every other case to one cold
//! call. `bin/budget.sh` fails if it stops being inlined. An owned guard's
//! drop (and a [`PooledStack`](crate::stack::PooledStack)'s) is too big to
//! inline; it checks whether the thread is panicking before the put, while
//! only the guard is in registers. A stack given back through a handle the
//! caller holds ([`StackPool::put`](crate::stack::StackPool::put),
//! [`Pool::put`](crate::Pool::put)) never needs the lifetime marker a
//! dropped owned guard may need (see [`implementation`](crate::implementation)).
//!
//! Instructions are not time. The fast path moves an object between its
//! batch and the guard one machine word at a time (`cache/words.rs`): left
//! to the compiler, a 24-byte `Vec` is stored as 16 + 8 bytes and loaded
//! back as 8 + 16, and a load spanning two stores still in the store buffer
//! waits for both (a store-forwarding stall). The word moves cost about 12
//! instructions on a get + drop and make the round trip faster than the
//! bare thread-local `Vec`, which still pays that stall (see the timings).
//!
//! # Timings: `bin/bench.sh`
//!
//! Xeon, the first of three full runs in a row; each of the three held
//! every target:
//!
//! ```text
//! | target                                                 |  ratio | want     |   |   a ns |   b ns |
//! |--------------------------------------------------------|--------|----------|---|--------|--------|
//! | core get+put / bare TLS Vec pop+push                   |  0.50x | <= 1.25x | ✓ |    4.3 |    8.5 |
//! | object-pool / core, 1 thread                           |  5.51x | >= 3x    | ✓ |   23.5 |    4.3 |
//! | LinearObjectPool / core, 1 thread                      |  3.24x | >= 3x    | ✓ |   13.9 |    4.3 |
//! | object-pool / core, 2 threads                          | 43.76x | >= 3x    | ✓ |  225.2 |    5.1 |
//! | LinearObjectPool / core, 2 threads                     | 33.11x | >= 3x    | ✓ |  170.4 |    5.1 |
//! | core 2 threads / 1 thread, per op                      |  1.02x | <= 1.3x  | ✓ |    5.1 |    5.0 |
//! | core forward / LinearObjectPool forward                |  0.85x | <= 1.0x  | ✓ |  154.3 |  182.5 |
//! | StackPool get+drop / core get+drop                     |  1.07x | <= 1.5x  | ✓ |    3.9 |    3.6 |
//! | get_owned+drop / get+drop                              |  1.22x | <= 1.3x  | ✓ |    4.4 |    3.6 |
//! | get+put at max_live / without a limit                  |  0.99x | <= 1.5x  | ✓ |    4.3 |    4.3 |
//! | stack refill: one-by-one / create_batch (64 KiB, k=32) |  3.26x | >= 2x    | ✓ | 1089.0 |  334.0 |
//! ```
//!
//! The other two runs: `get_owned` + drop 1.19x and 1.21x,
//! `LinearObjectPool` / core 3.25x and 3.27x, forward 0.83x and 0.89x,
//! `StackPool` get + drop 1.06x and 1.07x.
//!
//! EPYC, one full run, nothing else running (machine line 1.14×):
//!
//! ```text
//! | target                                                 |  ratio | want     |   |   a ns |   b ns |
//! |--------------------------------------------------------|--------|----------|---|--------|--------|
//! | core get+put / bare TLS Vec pop+push                   |  0.49x | <= 1.25x | ✓ |    3.8 |    7.8 |
//! | object-pool / core, 1 thread                           |  5.63x | >= 3x    | ✓ |   21.5 |    3.8 |
//! | LinearObjectPool / core, 1 thread                      |  2.99x | >= 3x    | ✗ |   11.4 |    3.8 |
//! | object-pool / core, 2 threads                          | 22.09x | >= 3x    | ✓ |  109.8 |    5.0 |
//! | LinearObjectPool / core, 2 threads                     | 14.28x | >= 3x    | ✓ |   71.0 |    5.0 |
//! | core 2 threads / 1 thread, per op                      |  1.04x | <= 1.3x  | ✓ |    5.0 |    4.8 |
//! | core forward / LinearObjectPool forward                |  0.79x | <= 1.0x  | ✓ |   88.4 |  111.9 |
//! | StackPool get+drop / core get+drop                     |  1.03x | <= 1.5x  | ✓ |    3.6 |    3.5 |
//! | get_owned+drop / get+drop                              |  1.44x | <= 1.3x  | ✗ |    5.0 |    3.5 |
//! | get+put at max_live / without a limit                  |  1.02x | <= 1.5x  | ✓ |    3.9 |    3.8 |
//! | stack refill: one-by-one / create_batch (64 KiB, k=32) |  3.72x | >= 2x    | ✓ | 2439.0 |  655.0 |
//! floor: raw TLS array 2.7 ns per round trip; core is 1.41x it, LinearObjectPool 4.21x
//! ```
//!
//! The two ✗ rows are within this VM's run-to-run spread: over four runs
//! `LinearObjectPool` / core read 2.78–2.99× and `get_owned` + drop
//! 1.33–1.48× (1.25–1.55× in eight runs of its criterion group alone,
//! 4.57–5.31 ns against 3.23–3.82). `StackPool::get` + drop read
//! 1.03–1.10× in four runs and 1.02–1.15× in eight runs of its group.
//!
//! * **The floor.** `raw_tls` is a thread-local array and a length, objects
//!   moved a word at a time, no guard, no counts: 2.5–2.7 ns on EPYC. The
//!   core's round trip is 3.7–4.1 ns there (the spread between builds of
//!   the same code, from where the linker puts the benchmark's functions).
//!   What lies between, measured by taking parts out one at a time in a
//!   test build: the check that the thread is not panicking (a guard
//!   dropped while it unwinds destroys its object) 0.35 ns, and the
//!   revocation bracket (the owner publishing that it is inside an access,
//!   so that another thread can take an idle cache without the owner paying
//!   an atomic read-modify-write) about 0.6 ns.
//! * **Two threads on one pool.** `LinearObjectPool`'s bitmask line moves
//!   between the cores: 14–33× slower than tidepool, whose threads share
//!   no line on the fast path.
//! * **forward** (get on one thread, drop on another) is at the scheduler's
//!   mercy on two vCPUs: 0.77–1.15× `LinearObjectPool`'s time over five
//!   EPYC runs, 0.83–0.89× in the three Xeon runs.
//! * **An owned guard** pays its out-of-line drop (a call and a frame) and
//!   the look for parked pools at its end, about 1.2 ns on EPYC.
//!
//! A later full run on the EPYC, at commit d712c7d1 (the head in the
//! arena), load average 0.35 before: 9 of 12 targets hold. Core 2 threads
//! / 1 thread 1.02×; the floor 5.2 ns and the core 1.07× it (the whole VM
//! ran at about half the speed of the run above that day, every subject
//! alike); `object-pool` / core 2.62× and `LinearObjectPool` / core 0.93×,
//! both ✗; forward 1.92× ✗. A run of the forward group alone a minute
//! later read 0.64× (100 ns against 157), and the commit before the head
//! moved (b992b2e0) 91 ns in the same minutes: the scheduler's spread, not
//! the change's.
//!
//! `max_live` costs little where it binds: get + put at `max_live(1)`
//! (every get recycles the one object) against no limit is the `at_limit`
//! row above.
//!
//! # Stacks
//!
//! Guarded 1 MiB stacks from a [`StackPool`](crate::stack::StackPool)
//! against corosensei's `DefaultStack` (a fresh mapping each time), EPYC,
//! `cargo bench -p tidepool-bench --bench stack -- 'stack_get_put|coroutine'`:
//!
//! | | `StackPool` | fresh `DefaultStack` | ratio |
//! |---|---|---|---|
//! | stack get + put | 44–63 ns | 8.1–11.0 µs | 173–185× |
//! | coroutine create + run + drop | 49–69 ns | 9.7–13.5 µs | 195–198× |
//!
//! Stacks are carved from slabs of up to 32: making 1000 pooled 64 KiB
//! stacks takes 32 `mmap`s and 1000 guard calls, and tearing them down 32
//! `munmap`s, instead of 1000 of each (counted by `StackStats`, checked with
//! `strace -c`: `cargo run --release -p tidepool-bench --bin
//! stack_teardown -- batch 1000`). On Linux 6.13+ each guard is a
//! page-table marker (`madvise(MADV_GUARD_INSTALL)`), so a slab stays one
//! VMA; with `mprotect` guards every guard splits it.
//!
//! A `create_batch` refill against making the same stacks one by one
//! (`mmap` + `mprotect` each), rounds interleaved in one run, µs per stack,
//! medians of 300 rounds, three runs on EPYC at load average about 10
//! (`cargo run --release -p tidepool-bench --bin stack_refill`, also a row
//! of `bin/bench.sh`):
//!
//! | | making | making + unmapping | one by one / refill (making) | calls per 1000 stacks |
//! |---|---|---|---|---|
//! | 64 KiB, refill, guard markers | 0.97–0.99 | 1.14–1.16 | **3.71–3.76×** (target ≥ 2×) | 31 `mmap`, 1000 `madvise`, 31 `munmap` |
//! | 64 KiB, refill, `mprotect` guards | 2.79–2.93 | 3.99–4.27 | 1.26–1.29× | 31 `mmap`, 1000 `mprotect`, 31 `munmap` |
//! | 64 KiB, one by one | 3.61–3.70 | 6.48–6.78 | – | 1000 each of `mmap`, `mprotect`, `munmap` |
//! | 1 MiB (7 per 8 MiB slab), refill, markers | 1.86–1.88 | 2.66–2.69 | 1.74–1.75× (2.27–2.29× with unmapping) | 143 `mmap`, 1000 `madvise`, 143 `munmap` |
//!
//! # The lab: `fio` and `fio-cross-thread`
//!
//! Seed 001's load: 4 threads × 256 requests in flight, a 1 MiB pooled
//! stack per request with 16 KiB of frame written and read back, 3 repeats
//! of 1.5 s per policy; each measured run ends with a quiet of four reclaim
//! intervals (600 ms), every thread idle, and "final idle" is counted at its
//! end. In `fio` each thread completes its own requests; in
//! `fio-cross-thread` one I/O thread completes them all. req/s and CPU per
//! request are measured over the load alone.
//!
//! Xeon, four full runs of `cargo run --release -p tidepool-lab -- run`:
//!
//! | run | `fio` req/s: qemu-2021 / qemu-2024 / tidepool | tidepool / best seed (repeats) | CPU per request, tidepool / qemu-2024 | `fio-cross-thread`: tidepool / best seed (repeats) | final idle stacks, cross-thread: tidepool vs qemu-2024 |
//! |---|---|---|---|---|---|
//! | 1 | 1.91M / 1.90M / 1.92M | 1.00× (1.01, 1.01, 1.00) | 1.00× | 1.16× (1.14, 1.18, 1.18) | 0 vs 1,365–1,427 |
//! | 2 | 1.86M / 1.89M / 1.86M | 0.99× (0.99, 0.96, 1.02) | 1.01× | 1.12× (1.08, 1.18, 1.14) | 0 vs 1,355–1,452 |
//! | 3 | 1.88M / 1.89M / 1.87M | 0.99× (0.99, 0.98, 1.00) | 1.01× | 1.15× (1.19, 1.15, 1.15) | 0 vs 1,409–1,449 |
//! | 4 | 1.86M / 1.86M / 1.83M | 0.98× (0.97, 1.00, 0.99) | 1.02× | 1.15× (1.10, 1.19, 1.28) | 0 vs 1,314–1,439 |
//!
//! EPYC, three full runs (noisy stretches: QEMU 2024 against QEMU 2021,
//! the same pool for this load, read 0.93×, 1.07× and 0.91×):
//!
//! | run | `fio` req/s: qemu-2021 / qemu-2024 / tidepool | tidepool / best seed (repeats) | CPU per request, tidepool / qemu-2024 | `fio-cross-thread`: tidepool / best seed (repeats) | final idle stacks, `fio` / cross-thread: tidepool vs qemu-2024 |
//! |---|---|---|---|---|---|
//! | 1 | 5.84M / 5.45M / 5.40M | 0.92× (0.93, 0.85, 0.97) | 1.01× | 1.50× (1.50, 1.32, 1.72) | 0 vs 1,024 / 0 vs 1,369–1,381 |
//! | 2 | 5.31M / 5.71M / 5.38M | 0.94× (0.95, 0.94, 1.02) | 1.05× | 0.88× (1.44, 1.64, 0.88) | 0 vs 1,024 / 0 vs 1,384–1,548 |
//! | 3 | 6.02M / 5.49M / 5.91M | 0.98× (1.00, 1.07, 0.98) | 0.92× | 1.40× (1.82, 1.70, 0.92) | 0 vs 1,024 / 0 vs 1,281–1,492 |
//!
//! **Noise.** On EPYC the same work takes 576 to 1,309 ms of CPU from one
//! run to the next for either policy (`perf stat`: no migrations, a few
//! hundred context switches): the two vCPUs slow each other down below the
//! guest. That moves a 1.5 s repeat by ±15 %. In `fio` the three pools do
//! the same work (every pool keeps the same 1,024 stacks busy, and each
//! request's 16 KiB of frame is where the time goes), so "tidepool at least
//! the best of the two QEMU pools" is a draw of three equal contenders.
//!
//! **Paired chunks** cancel that drift. `fio_ab A B`, B's req/s over A's,
//! median of the pairs of each run:
//!
//! | machine | command | B / A req/s | runs |
//! |---|---|---|---|
//! | EPYC | `fio_ab -- qemu-2024 tidepool` | 0.98–1.01 | 6 |
//! | EPYC | the same, `TIDEPOOL_GUARD_MODE=protect` | 0.985–0.992 | 2 |
//! | EPYC | `fio_ab -- qemu-2024 qemu-2021` (the same work: the noise) | 0.97–1.05 | 3 |
//! | Xeon | `fio_ab -- qemu-2021 tidepool` | 0.987, 0.982, 0.996 | 3 |
//! | Xeon | `fio_ab -- qemu-2021 qemu-2024` (the same work) | 0.978 | 1 |
//! | Xeon | `FIO_AB_FRESH=1 fio_ab -- qemu-2021 tidepool` (a new pool per chunk, as each lab repeat builds one) | 0.985, 0.990 | 2 |
//!
//! A profile of those chunks split by policy (`FIO_AB_TIMELINE=1`, `perf
//! record -k CLOCK_MONOTONIC`, `bin/perf-by-chunk.py`; the recipe is in the
//! example's docs) has tidepool at 1.007× QEMU 2021's samples on Xeon: its
//! get + put 794 samples against 348 of 132,750 (0.34 %), its cold paths
//! (refills, creates) 0.15 %. Guard markers and `PROT_NONE` guards
//! ([`GuardMode`](crate::stack::GuardMode)) read alike in `fio_ab`; to
//! compare on your machine, run it again with `TIDEPOOL_GUARD_MODE=protect`.
//!
//! **Instructions per request** (callgrind over `fio_ops`, 4 threads ×
//! 2,000 rounds of 256 requests, `FIO_OPS_SMALL=1` for 256-byte frames, so
//! that the pools are not lost in the frame writes; the recipe is in the
//! example's docs): tidepool's get + put in the lab's adapter is 130
//! instructions (63 + 67), QEMU 2024's `Vec` pop + push 91 (49 + 42); the
//! whole loop 380 against 334. The difference is what a bare `Vec` does
//! not do: the revocation bracket and the counts (about 10), the low-water
//! mark (4), the panic and waiters checks (8), the thread-local lookup of
//! the cache, and the handle moves around a trait object.
//!
//! **Batch size.** The batch adapts to depot traffic
//! ([`Config::max_batch_size`](crate::Config::max_batch_size)): threads
//! that both take and give back and go to the depot for more than one in
//! eight of their operations double it (32 → 256 by default); a one-way
//! flow (gets on some threads, puts on an I/O thread) doubles it while a
//! cache of two doubled batches is what the flow moves in 10 ms or less;
//! idle objects unused through two intervals halve it. In `fio` it
//! reaches 128 within the first 25 ms sample (`cargo run --release -p
//! tidepool-lab --example fio_ops -- tidepool 1000 256 4` prints the batch
//! size, depot exchanges and reclaim passes). A fresh pool makes a few more
//! stacks than are in flight while its batch grows (1,065–1,149 for 1,024
//! in the four Xeon runs; 1,836–2,078 in `fio-cross-thread`, against
//! QEMU 2024's 1,295–1,458), and trims and reclaims them during the load.
//!
//! **The quiet.** As the load ends every pool holds the 1,024 stacks that
//! were in flight. After the quiet tidepool holds none; QEMU 2024 keeps all
//! 1,024 (1,281–1,548 in `fio-cross-thread`). QEMU 2021's periodic resize
//! gives its stacks back too, 170–310 ms into the quiet, tidepool at
//! 325–475 ms (EPYC): a quiet cache is taken back at the first 150 ms pass,
//! and its objects, idle through the next interval, go at the pass after.
//!
//! # Spike then idle
//!
//! `cargo run --release -p tidepool-lab -- run --scenario spike-then-idle`:
//! a burst of requests, then an idle phase of five reclaim intervals, on the
//! lab's default time scale (EPYC). Resident memory 2 s (scaled) after the
//! burst: tidepool 5.3 MiB (idle pages purged after
//! [`DEFAULT_PURGE_DELAY`](crate::DEFAULT_PURGE_DELAY), idle stacks
//! reclaimed three intervals after their last use), the fixed pool 14.8
//! MiB, QEMU 2021 and QEMU 2024 25 MiB.
//!
//! # Mass teardown
//!
//! Seed 004's experiment, `cargo run --release -p tidepool-lab -- run
//! --scenario mass-teardown,mass-teardown-full`: 64 threads hold 25,000
//! guarded 256 KiB stacks (the top 64 KiB of each written, or all of it),
//! then all release at once and exit, while a probe thread times, every
//! millisecond, a get + put on another pool and an `mmap` + `munmap` of a
//! 64 KiB region of its own. Each ratio is a run's p99 during the teardown
//! over its p99 at rest, the median over 3 runs; EPYC, 2 vCPUs, nothing
//! else running. `dfly-2017` unmaps whole slabs with their pages
//! (`release_step(0)`), `dfly-before` one mapping per stack.
//!
//! | top 64 KiB written | teardown wall | others' `mmap` + `munmap` p99, during / rest | others' get + put p99, during / rest | `munmap` / `madvise` per 1000 stacks |
//! |---|---|---|---|---|
//! | `dfly-before` (own mapping each, every thread at once) | 492 ms | 5,084× (67 ms) | 1.29× | 1000 / 0 |
//! | `dfly-2017` (`ncpus` queued permits, slabs of 31) | 159 ms | 762× (11.8 ms) | 1.77× | 32.3 / 18.2 |
//! | **tidepool** (release step 4 MiB) | **139 ms** (0.87×) | **38×** (0.50 ms; per run 42×, 8.7×, 38×) | **0.76×** | 32.2 / 96.8 |
//! | tidepool without the step (the code before it) | 146 ms | 671× | 1.60× | 32.2 / – |
//!
//! | all 256 KiB written | teardown wall | others' `mmap` + `munmap` p99, during / rest | others' get + put p99, during / rest |
//! |---|---|---|---|
//! | `dfly-before` | 919 ms | 2,523× (103 ms) | 1.75× |
//! | `dfly-2017` | 514 ms | 1,077× (16.4 ms) | 2.01× |
//! | **tidepool** | **336 ms** (0.65×) | **12×** (0.16 ms; per run 5.8×, 12×, 27×) | **1.04×** |
//! | tidepool without the step | 421 ms | 813× | 1.82× |
//!
//! * **What the step buys.** An `munmap` of a slab of touched stacks holds
//!   the address-space lock for write while it frees the pages: 8–16 ms of
//!   every other thread's `mmap` waiting behind it. Released a step at a
//!   time first (`madvise`, which on Linux 6.16+ takes the area's lock, not
//!   the process's), the slab's `munmap` frees nothing and is short: the
//!   others' p99 drops 20–70 fold, and the teardown is no slower (one
//!   `madvise` per 4 MiB; a 1 MiB step measured 1.4× slower with 64 KiB
//!   written, more calls, each flushing the other CPU's TLB).
//! * **What is left: 12–38×, against a target of 2×.** A profile of the
//!   probe (`perf record -g`, a C model of the same teardown) puts its
//!   extra time in `munmap`'s TLB flush, waiting in
//!   `smp_call_function_many_cond` for the CPU that is freeing pages to
//!   answer: while another thread of the process zaps pages
//!   (`mm_tlb_flush_nested`), the kernel makes every `munmap` of the
//!   process flush the TLBs of all its CPUs, and a CPU freeing pages runs
//!   with interrupts off in stretches (`free_pcppages_bulk`, the LRU lock).
//!   On this VM an inter-processor interrupt is a VM exit each way. A step
//!   of 64 KiB or 16 KiB did not help (more calls, the same stretches);
//!   one teardown thread instead of two cut the p99 2–4 fold in the C model, but
//!   made the 64 KiB-written teardown 1.2–1.4× slower than `dfly-2017`; a
//!   `SCHED_IDLE` runner changed the p99 little and made another pool's
//!   get + put worse (6–8×) in one variant. Any teardown that frees pages
//!   in the process while another thread unmaps pays this; only freeing
//!   less at a time (a slower teardown) lowers it.
//! * Another pool's get + put: within 0.76–1.04× of its p99 at rest
//!   (target 1.5×); the runs range 0.61–1.25×.
//!
//! The teardowns that need no mass release, `cargo run --release -p
//! tidepool-bench --bin teardown_paths` (3 runs each, 25,000 idle stacks of
//! 256 KiB with 64 KiB written; 6,000 idle regions of 4 MiB with 1 MiB
//! written and kept resident, as the wasmtime memory creator keeps them):
//!
//! | teardown | wall | others' `mmap` p99, during / rest | others' get + put p99, during / rest |
//! |---|---|---|---|
//! | a `StackPool`'s drop | 184–485 ms | 6.3×, 9.1×, 595× (one run stalled 10 ms; six more: 2.6–12.6×) | 0.69×, 1.11×, 265× (the same run) |
//! | the same, `release_step(0)` | 164–209 ms | 95×, 34×, 132× | 1.00–1.25× |
//! | critical pressure | 173–204 ms | 9.6×, 11.7×, 8.7× | 1.90×, 1.04×, 1.92× |
//! | the same, `release_step(0)` | 154–198 ms | 45×, 57×, 109× | 1.02–1.55× |
//! | a region pool's drop | 602–718 ms | 2.9×, 2.0×, 6.0× | 0.51–1.30× |
//!
//! The step costs the pool's drop and critical pressure 0.95–1.3× in wall
//! time here. Counts come from the pools' stats: critical pressure made
//! 2,484 `madvise` and 808 `munmap` calls with the step, 213 and 808
//! without.
//!
//! # Many pools
//!
//! `cargo run --release -p tidepool-bench --bin many_pools --
//! --secs 2 --builds 2000 --default-interval-secs 31`: 8 threads do get + put
//! on pools picked at random among P pools of 256-byte objects (every
//! default but `reclaim_interval` 100 ms), a probe thread times get + put on
//! a pool of its own every 200 µs; then the threads exit and, 3 intervals
//! later (read half an interval after that, once the passes due at the
//! third boundary have run over every pool), the idle objects, RSS and
//! live heap are read. Each P and subject runs in its own process. The
//! baseline is a `parking_lot::Mutex<Vec<Box<[u8; 256]>>>` per pool,
//! unbounded (it never gives anything back). EPYC VM, 2 vCPUs, nothing else
//! running (load average 0.9 before the run); one of two runs of the same
//! code (commit 39a57348), the other's figures after the table:
//!
//! | P | subject | ns per get + put | probe p50 / p99 | build + get + drop | idle after 3 / 17 intervals (pools above `min_idle`) | RSS built / flow / after | heap built / after | bytes per (pool, thread) | reclaimer CPU |
//! |---|---|---|---|---|---|---|---|---|---|
//! | 100 | tidepool | 72 | 40 / 411 ns | 1.02 µs | 0 / 0 (0) | 2.9 / 4.3 / 4.3 MB | 0.2 / 0.4 MB | 1,900 | 0.0 % |
//! | 100 | `Mutex<Vec>` | 342 | 50 / 201 ns | 80 ns | 326 | 2.3 / 2.7 / 2.9 MB | 0.0 / 0.2 MB | 763 | – |
//! | 1,000 | tidepool | 111 | 60 / 430 ns | 1.66 µs | 0 / 0 (0) | 4.7 / 16.3 / 8.8 MB | 2.1 / 2.7 MB | 535 | 2.1 % |
//! | 1,000 | `Mutex<Vec>` | 364 | 50 / 450 ns | 76 ns | 2,182 | 2.4 / 3.2 / 3.3 MB | 0.0 / 0.7 MB | 119 | – |
//! | 5,000 | tidepool | 480 | 80 / 471 ns | 0.98 µs | 0 / 0 (0) | 13.3 / 30.7 / 30.7 MB | 10.7 / 13.0 MB | 455 | 5.5 % |
//! | 5,000 | `Mutex<Vec>` | 109 | 70 / 210 ns | 45 ns | 10,109 | 2.5 / 5.7 / 5.8 MB | 0.2 / 2.9 MB | 88 | – |
//! | 20,000 | tidepool | 413 | 130 / 540 ns | 0.95 µs | 0 / 0 (0) | 45.5 / 73.4 / 73.8 MB | 42.8 / 51.6 MB | 186 | 14.8 % |
//! | 20,000 | `Mutex<Vec>` | 121 | 80 / 471 ns | 43 ns | 24,590 | 3.0 / 10.7 / 10.8 MB | 0.8 / 7.4 MB | 51 | – |
//!
//! * The other run, a minute before, ns per get + put, tidepool /
//!   `Mutex<Vec>`: 72 / 426 at 100 pools, 113 / 357 at 1,000, 561 / 356
//!   at 5,000, 715 / 405 at 20,000; building a pool 0.96–1.94 µs
//!   (`Mutex<Vec>` 45–71 ns); idle objects 0 at every P; RSS after 4.3 /
//!   9.1 / 30.4 / 73.9 MB; the reclaimer 16.0 % of a core at 20,000 pools.
//!   The `Mutex<Vec>` itself swings between about 110 and 400 ns from one
//!   run to the next (most likely where the 8 threads land on the
//!   2 vCPUs), so the
//!   paired runs below say more than either table.
//! * With the default interval (15 s), 20,000 pools: the reclaimer used
//!   0.125 % of one core over 2 s of flow and 30 s idle (0.094 % in the
//!   other run; 0.12–0.27 % in earlier ones).
//! * Up to about `MAX_CACHES` pools a thread keeps a cache in each, and a
//!   get + put stays within 2× of its cost at 100 pools. Past it, most gets
//!   and puts go through the depot (the slot-less path). A thread at its
//!   fill refuses new caches with a thread-local countdown, remembers the
//!   table where it found no slot, and the depot counts its gets and
//!   returns under its lock (`implementation`, many pools per thread): a
//!   slot-less get + drop of a boxed object is 218 instructions
//!   (`bin/budget.sh`, `slotless_get_drop`), 653 at commit 9817261c,
//!   before these three changes, and 318 at commit 91802f8c, before the
//!   pool's `slotted` word let the get skip the slot table and the get and
//!   put with no cache went straight to the depot. It touches two lines of
//!   the pool, one 128-byte pair, and the object; four lines before commit
//!   f97ddb93, and the table's lines too before the `slotted` word (the
//!   layout in `implementation`, many pools per thread).
//! * The `slotted` word and the short slot-less frames against commit
//!   91802f8c, built apart and alternating, ns per get + put, medians:
//!   `pool_layout` (one thread, 20,000 pools), 191 → 117 and 193 → 107
//!   (two runs of 3 each); `many_pools --child tidepool 20000 100 --secs 1
//!   --builds 0`, one thread 290 → 215 (1.35×), 8 threads 1,406 → 969
//!   (1.45×), 4 runs each, spread 171–293 and 727–1,662 ns in the new
//!   code. The `Mutex<Vec>` took 128–468 ns with 8 threads in the same
//!   minutes.
//! * Paired runs against that code (`many_pools --child tidepool P 100
//!   --secs 1 --builds 0 --threads T`, commit 9817261c built apart,
//!   alternating, 5 each; ns per get + put, medians): one thread, 5,000
//!   pools, 112 → 66 (1.71×); one thread, 20,000 pools, 710 → 359
//!   (1.98×); 8 threads, 5,000 pools, 1,229 → 786 (1.56×); 8 threads,
//!   20,000 pools, 2,334 → 1,803 (1.29×), where the `Mutex<Vec>` took
//!   167–259 ns in the same minutes.
//! * The two-line layout against commit 246d3bfa (four lines), built
//!   apart and alternating, ns per get + put, medians: one thread, 20,000
//!   pools, 214 → 146 (1.46×, 6 runs each) and 325 → 280 (1.16×, 4 each,
//!   a slower hour); 8 threads, 20,000 pools, 1,473 → 1,421 and, with
//!   `--secs 3`, 1,892 → 1,831 (6 each): no change; 8 threads, 100 pools
//!   (every thread cached), 60 → 59 and 50 → 57 (4 each): within the
//!   VM's spread. With 8 threads on 2 cores the first touch of each pool
//!   still takes most of the samples.
//! * What is left is memory, not instructions. `perf annotate` (8 threads,
//!   20,000 pools) puts 70 % of the inlined get's samples at its first load
//!   from the pool (the table's id) and most of the slot-less put's at the
//!   depot's unlock, which waits for the object's store to drain.
//!   Cachegrind (one thread, 20,000 pools, a 2 MiB last level) counted 298
//!   instructions, 5.2 first-level and 2.8 last-level misses per slot-less
//!   get + put at commit 0e73f5c7, against 69, 3.4 and 0.9 for the
//!   baseline; callgrind now counts 167 instructions of tidepool's per
//!   round trip in `pool_layout` (its loop and clock apart).
//! * Huge pages show how much of it the TLB is. With glibc's heap on
//!   transparent huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, the
//!   machine's THP in `madvise` mode; 40 MB of the child's heap was on huge
//!   pages), `many_pools --child tidepool 20000 100 --secs 1 --builds 0`,
//!   alternating with the default, 3–4 runs each: one thread 89–124 ns
//!   against 162–212 (about 1.6×), 8 threads 369–545 against 409–823; the
//!   `Mutex<Vec>`, 8 threads, 121–135 against 152–224. Each pool's shared
//!   state is an allocation of its own (2,048 bytes), so 20,000 pools span
//!   about 44 MB, one 4 KiB page per pool, more than the TLB reaches; a
//!   slot-less get + put costs a page walk. tidepool does not advise the
//!   application's heap itself: that is the application's (or its
//!   allocator's) choice.
//! * The layout accounts for most of it. `cargo run --release -p
//!   tidepool-bench --bin pool_layout` runs the baseline's own code, a
//!   `Mutex<Vec>` per pool, with the lists laid out in different ways, one
//!   thread, 20,000 pools, each subject in its own process, 5 runs
//!   alternating. Three such runs in a row (load average 1.6 before them),
//!   ns per get + put, the three runs' medians, and the range of all 15
//!   runs:
//!
//!   | where each pool's list lives | ns | range | × inline |
//!   |---|---|---|---|
//!   | one array, 40 bytes each (the baseline) | 29, 28, 31 | 22–43 | 1.00 |
//!   | one array, one 64-byte line each | 26, 31, 34 | 25–52 | 0.88–1.11 |
//!   | one array, one 128-byte pair of lines each | 31, 42, 47 | 23–119 | 1.04–1.52 |
//!   | its own 128-aligned allocation of 2,560 bytes (a pool's shared state) | 102, 176, 174 | 69–252 | 3.5–6.2 |
//!   | tidepool, every get + put slot-less | 226, 213, 217 | 169–272 | 7.1–7.7 |
//!
//!   The same lock, pop and push cost 3.5 to 6 times as much once each
//!   list sits where a pool's shared state does (2,560 bytes: `size_of`
//!   of `Shared` for these objects at commit 0e73f5c7; `--spread-bytes`
//!   sets it); an allocation of its own of 192 bytes cost 4.1 times as
//!   much in one run (203 ns against 50 inline). Packed in one array, a
//!   line or a pair of lines per pool stays near the baseline in most
//!   runs. Runs vary more than the medians show: the pair of lines is
//!   bimodal (23–35 or 90–150 ns; an earlier run of 5 had a median of 137),
//!   most likely with where the kernel placed the pages, which decides
//!   which lines compete for the same sets of the L2 (1 MiB per core
//!   here). tidepool's slot-less get + put costs 1.2 to 2.1 times the
//!   baseline's code laid out like it. So a get + put near the baseline's
//!   cost at 20,000 pools needs each pool's slot-less state (lock, lone
//!   object, counts, and the id a thread checks) on one line, or a pair,
//!   those packed in one array apart from the rest of the pools' state,
//!   and the handle pointing there; a pool that is an allocation of its
//!   own, down to 192 bytes as measured, stays near the `spread` row.
//!   At commit a10404e1 (the `slotted` word, the short slot-less frames,
//!   a 2,048-byte shared state and `--spread-bytes` 2048 by default), one
//!   run of 5 (load average 0.3 before it): inline 23 ns (22–35), one
//!   line 28, a pair 37 (30–98), `spread` 79 (56–186), tidepool 92
//!   (78–168), 3.9× inline and 1.17× `spread`.
//! * On the Xeon (2 vCPUs, a 260 MB last level; commit ed9d9252, load
//!   average 0.6 before), the gap at 20,000 pools has three parts.
//!   `many_pools --child S 20000 100 --secs 2 --builds 0 --threads T`:
//!   one thread, tidepool 69–77 ns per get + put against 29 for the
//!   `Mutex<Vec>`; 8 threads, 446–499 against 206–218. A pair of runs
//!   with the interval at 100 ms and at 100 s (no passes), taken one after
//!   the other: one thread 73 and 66 ns, 8 threads 392 and 326. At 100 ms
//!   over 20,000 pools the passes, 200,000 a second, use 22–26 % of a
//!   core, which the 8 threads lose.
//!   `pool_layout --runs 3 --spread-bytes B`, B from 2,048 down to 128:
//!   inline 27–28, one pair of lines each 31–37, `spread` 47 at 2,048
//!   bytes and 38–41 at 128 to 512, tidepool 55–63. So the layout is
//!   about 15 ns of tidepool's 55, and its code about as much again:
//!   callgrind counts 168 instructions per slot-less round trip
//!   (`get_slow` 77, `put_other_from` 44, `put_slotless` 47). Huge pages
//!   (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`) changed nothing there: 70
//!   against 72 ns, one thread. A get + put at the `Mutex<Vec>`'s cost
//!   needs all three: the slot-less pair packed in one array with the
//!   handle pointing there, a shorter slot-less path, and cheaper passes
//!   over pools no thread touched since the last.
//! * On an AMD EPYC VM (2 vCPUs, 2 MiB of L2 per core, a 32 MiB L3;
//!   commit 1423fee1, nothing else running, load average below 0.8) the
//!   gap is wider, and runs swing by about 2× from one minute to the next.
//!   `many_pools --secs 2 --builds 0`, three runs (one of them at every
//!   P), 8 threads, ns per get + put: 100 pools, tidepool 97–106 against
//!   137–269 for the `Mutex<Vec>`; 1,000, 163 against 192; 5,000, 360–838
//!   against 115–372; 20,000, 953–1,369 against 173–485. `pool_layout`,
//!   one thread, 20,000 pools: inline 25–38 ns, tidepool 88–246; at 100
//!   pools 11–13 and 24–29.
//!   Cachegrind over `pool_layout --child S 20000 N 2048` (N 200,000 and
//!   400,000, the difference per get + put) with a 64 KiB first level and
//!   a 2 MiB last one, the size of this machine's L2: the first-level
//!   misses are alike (inline 6.8, `spread` 7.9, tidepool 7.9), but the
//!   L2-sized level misses about 0 times for inline, 1.7 for one pair of
//!   lines per pool packed in an array, 3.7 for `spread` and 3.3 for
//!   tidepool. The baseline's working set at 20,000 pools (the lists,
//!   their buffers, a line of each object) is about the L2's size, and
//!   every further line a pool's get + put touches is a miss to L3 or
//!   memory here. So on this machine too, bar 1 needs each pool's
//!   slot-less state on one line, packed apart from the rest.
//!   At commit d24c9bc1 the passes cost fewer instructions (the table
//!   walks are plain loops, and a tick that takes nothing from the depot
//!   leaves its list of batches alone). Under callgrind, `many_pools
//!   --child tidepool 20000 100 --secs 8 --builds 0 --threads 1`: 3,922
//!   instructions per pool tick on the reclaimer thread at commit
//!   1423fee1, 2,714 after (`background_tick` inclusive, over its calls).
//!   In the 8-thread flow the reclaimer's share of a core did not move
//!   beyond the runs' spread (16–26 % before, 25–26 % after, three runs
//!   each, alternating): at this rate its cost is misses on 20,000 pools'
//!   lines more than instructions.
//! * The head apart (`shared/head.rs`, at the commit that moved it): each
//!   pool's waiters' count, table id, `slotted`, lone counts and depot
//!   live in a 384-byte cell of a dense store, the handle points there,
//!   and the slot-less get and put read nothing else of the pool. On the
//!   AMD EPYC VM, `pool_layout --child tidepool 20000 2000000 2048`, 12
//!   runs of each build alternating: 89–202 ns per get + put, median 151,
//!   against 137–292, median 236, before (1.56×); `inline` 25–46 in the
//!   same minutes. Cachegrind (a 2 MiB last level, as above) counts about
//!   the same last-level misses per get + put as before (1.9 against 1.7:
//!   the handle is two words now), so the gain is the TLB's, which
//!   cachegrind does not model: 20,000 heads span about 7.5 MB of dense
//!   cells where the pools' states spanned 40 MB. In the 8-thread flow
//!   (`many_pools --child S 20000 100 --secs 2 --builds 0 --threads 8`,
//!   four runs of each alternating) tidepool did not move beyond the runs'
//!   spread: 1,045–1,566 ns against 895–1,571 before, the `Mutex<Vec>`
//!   217–464. There the other costs lead: a get on one of the thread's
//!   1,024 cached pools that is not the one it remembers looks its slot up
//!   in the pool's table (the shared state's line, the slot's, a batch's:
//!   `get_refill` holds about a tenth of the samples), and the reclaimer,
//!   over 20,000 pools at 100 ms, takes about a quarter of a core. Bar 1
//!   of the scale issue is still not met on this machine. The whole
//!   `many_pools --default-interval-secs 30` at that commit (load average
//!   1.1 before it), tidepool against the `Mutex<Vec>`, ns per get + put:
//!   100 pools 120 against 171, 1,000 161 against 129, 5,000 315 against
//!   125, 20,000 955 against 139; a build, first get and drop 1.2–1.8 µs;
//!   no idle object left 3 intervals after the exit at any P; the
//!   reclaimer 26 % of a core at 20,000 pools and 100 ms, 0.125 % with the
//!   default interval (2 s of flow, 30 s idle).
//! * Idle objects 3 intervals after the exit: none. During the flow the
//!   depot's level swings as threads without a cache take and return, so
//!   many pools see a reclaim undone and lengthen their working-set window
//!   (up to 16 intervals); once nobody uses a pool for two whole intervals
//!   (and for longer than any pause it came back from), its pass ticks with
//!   the window of two, and its idle objects go to `min_idle`
//!   (`implementation`, reclaim). Before that (commit 0b9d7d1f and
//!   earlier), 240–483 and 901–1,154 objects were left at 5,000 and 20,000
//!   pools, gone by 17 intervals.
//! * Memory after the exit, on the Xeon (load average 0.7 before the run;
//!   the same command, slots freed at their threads' exit, the
//!   depot's unused emptied batches and the passes' per-id records let go),
//!   RSS built / after / after `malloc_trim` and live heap built / after:
//!
//!   | P | RSS built | RSS after | after, trimmed | heap built / after | heap left per (pool, thread) | RSS left per (pool, thread) |
//!   |---|---|---|---|---|---|---|
//!   | 100 | 2.8 MB | 4.2 MB (1.5×) | 4.1 MB | 0.2 / 0.3 MB | 145 B | 1,787 B |
//!   | 1,000 | 4.7 MB | 7.7 MB (1.64×) | 6.6 MB (1.40×) | 2.1 / 2.6 MB | 69 B | 394 B |
//!   | 5,000 | 13.2 MB | 32.1 MB (2.43×) | 23.8 MB (1.80×) | 10.7 / 12.7 MB | 53 B | 496 B |
//!   | 20,000 | 45.3 MB | 82.3 MB (1.82×) | 65.9 MB (1.45×) | 42.6 / 50.4 MB | 51 B | 243 B |
//!
//!   The same run: ns per get + put 106 / 139 / 460 / 643 (`Mutex<Vec>`
//!   507 / 328 / 281 / 313), building a pool 2.1–2.3 µs (`Mutex<Vec>`
//!   131–164 ns; 2.2–2.6 µs for the code before, built apart, on the same
//!   machine), no idle objects left, the reclaimer 0.18 % of one core with
//!   the default interval at 20,000 pools. Before (commit 433b6aa0, the
//!   EPYC): RSS after 1.5×, 3.4×, 2.3×, 1.8×, the live heap 3×, 2.5×,
//!   1.56×, 1.32× (one slot of 256 bytes per (pool, thread) pair ever
//!   used stayed, and each pool's emptied batches); the same binary on the
//!   Xeon: 16.3 MB after at 1,000 pools (5.4 MB of heap), 32.2 at 5,000
//!   (17.1), 80.3 at 20,000. What the pools hold now follows what is
//!   held: 51–145 bytes per pair stay in the heap (the passes' records of
//!   the thread ids that still have slots elsewhere, and buffers that
//!   last an interval more). RSS beyond it is glibc's: freed memory in
//!   pages that other live chunks keep, `malloc_trim` returning a part;
//!   at 5,000 pools it stays above 2× the built RSS. tidepool does not
//!   call `malloc_trim` itself: it walks and locks every arena of the
//!   process, a stall proportional to the whole heap that a pool library
//!   has no business imposing.
//! * Bytes per (pool, thread) pair: RSS (or heap) after the threads exit
//!   less RSS (heap) with the pools built and unused, over P × 8. While a
//!   thread caches in a pool, the pair costs its slot (256 bytes) and its
//!   two batches' buffers.
//! * Where the 20,000-pool gap lies (AMD EPYC VM, nothing else running,
//!   at commit d712c7d1). On one thread (`many_pools --child S 20000 100
//!   --secs 2 --builds 0 --threads 1`, five runs of each, alternating)
//!   tidepool costs 63–81 ns per get + put, median 76, against the
//!   `Mutex<Vec>`'s 21–23: 3.5×. Under callgrind a slot-less get + drop
//!   (`roundtrip slotless_get_drop`) runs 238 instructions and the
//!   `Mutex<Vec>`'s round trip 68: the same ratio. Both touch three lines
//!   (the head's first line, the depot's line and the object, against the
//!   list's lock line, its buffer and the object), so on one thread the
//!   gap is the instructions: `get_slow`'s slot-less branch about 75, the
//!   put's two cold calls about 100 between them (`recycle` behind its
//!   `catch_unwind`, the panicking and absent checks, the lone counts,
//!   the low-water marks, the fence before the look at the waiters), and
//!   the inlined get and drop the rest. Two layouts tried in test builds
//!   did not move it: the lone counts taken off the head's first line (so
//!   that a slot-less get + put writes no line but the depot's), median
//!   71 against 76 on one thread and inside the spread on eight; and the
//!   heads' chunks made 2 MiB with `MADV_HUGEPAGE` (transparent huge
//!   pages in use, `AnonHugePages` 8 MB), `pool_layout --child tidepool`
//!   47–94 ns against 45–91. So neither the line the counts write nor the
//!   TLB over the heads is what bar 1 lacks. On eight threads, seven runs
//!   alternating: tidepool 797–1,621 ns, median 825, the `Mutex<Vec>`
//!   127–400, median 134. Later, four runs of each alternating: tidepool
//!   at a reclaim interval of 2 s 285–677 ns, at 100 ms 474–881, the
//!   `Mutex<Vec>` 125–425 in the same minutes. So the reclaimer's passes
//!   over 20,000 pools are a part of the eight-thread cost, and the
//!   instructions the rest.
//! * The passes, taken apart at commit 789aad5a (8 threads, 20,000 pools,
//!   `many_pools --child S 20000 I --secs 2 --builds 0 --threads 8`, runs
//!   alternating): with the interval at 100 s, so that no pass runs,
//!   tidepool cost 298 and 320 ns per get + put, against 578–953 at
//!   100 ms and the `Mutex<Vec>`'s 229–391 in the same minutes. A profile
//!   (`perf record --call-graph dwarf`) of the reclaimer put a `futex`
//!   wake per pool ticked (the end of each tick woke whoever waited to
//!   drop a pool, waiter or not), the deadline heap's pops (each touching
//!   its deep levels), and the depot tick moving the loose object onto a
//!   new batch each interval (an allocation, and a batch the next
//!   slot-less get had to reach) at the top. With the three gone (commit
//!   39a57348), five runs of each alternating: the reclaimer 14.5–22.4 %
//!   of a core, median 16.9 %, against 24.1–27.8 %, median 26.0 %; a
//!   get + put 327–1,298 ns, median 489, against 623–971, median 748. The
//!   rest of a pass is mostly misses on the pool's own state (its reclaim
//!   lock and records, the slot table, the counters). What bar 1 of issue
//!   43 still lacks is that, and the slot-less path's instructions (218
//!   against the `Mutex<Vec>`'s 68), which count four times over in the
//!   per-thread cost with 8 threads on 2 vCPUs.
//!
//! # Limit churn
//!
//! Seed 002's experiment, `cargo run --release -p tidepool-lab -- run
//! --scenario limit-churn`: T threads (1, 2 and the machine's CPUs), each
//! getting 1M objects, one per key of its own, and putting back the one it
//! got 64 keys earlier, as `find(1)` releases a vnode where it looked it
//! up. The FreeBSD models fill the limit and then recycle under the list
//! lock on every get; tidepool's puts refill the putting thread's cache, so
//! it creates 65 per thread and reaches neither limit. Shared cache lines
//! written per get, counted where the write is made (the same in every
//! run):
//!
//! | per get, at the limit | `fbsd-before` | `fbsd-2023` | tidepool |
//! |---|---|---|---|
//! | shared counter writes (`numvnodes`, `vn_alloc_cyclecount`; tidepool: [`Stats::limit_folds`](crate::Stats::limit_folds)) | 4.00 | 2.00 | 0.00003 |
//! | shared lock acquisitions (list lock; tidepool: depot lock) | 1.125 | 1.125 | 0 |
//! | shared-line writes (counter writes + 2 × locks) | 6.25 | 4.25 | 0.00004 |
//!
//! Run time, 2 threads, EPYC with both vCPUs free (3 repeats each, medians;
//! the slower policy's time over the faster's; the full lab run, then two
//! `--scenario limit-churn` runs):
//!
//! | 2 threads | loose limit | tight limit |
//! |---|---|---|
//! | tidepool vs `fbsd-before` (target 2.5×) | 7.45×, 17.8×, 6.2× ✓ | 10.8×, 11.2×, 14.5× ✓ |
//! | tidepool vs `fbsd-2023` (target 1.0×) | 8.29×, 12.9×, 8.0× ✓ | 8.32×, 12.3×, 11.3× ✓ |
//! | `fbsd-2023` vs `fbsd-before` (seed: 2.5×, 2.3×) | 0.90×, 1.38×, 0.77× | 1.30×, 0.91×, 1.28× |
//!
//! For example `fbsd-before` 167 ms, `fbsd-2023` 186 ms, tidepool 22 ms at
//! the loose limit. The lab's contention probe (two threads adding to one
//! shared counter against each to its own) read 8.27× in the full run: a
//! contended line costs what the seed says it does. The FreeBSD patch
//! itself gains little with two CPUs; the seed measured it with 20. With
//! five builds running (load 8–12) the probe read 1.06–1.77× (the two
//! threads mostly take turns) and tidepool against `fbsd-before` 1.16–1.76×;
//! the counted writes do not change.
//!
//! # Cross-thread hand-off
//!
//! `cargo run --release -p tidepool-lab -- run --scenario handoff` (tests in
//! `crates/tidepool/tests/cross_thread_flow.rs`): a producer thread gets
//! objects one at a time and sends them 8 at a time to a consumer thread
//! that keeps the last 16 and frees the rest, 1M objects a round, 9 rounds
//! with the policies interleaved. EPYC, medians in ns per object:
//!
//! | | `fbsd-before` | `fbsd-2023` | locked `Mutex<Vec>` list | tidepool |
//! |---|---|---|---|---|
//! | `max_live(64)` | 49.6 | 45.5 | 123.0 | 77.5 |
//! | no limit | 54.9 | 52.3 | 128.6 | 82.9 |
//!
//! tidepool took no thread cache at the limit (0.00 per 10,000 objects):
//! the default batch under `max_live` leaves room for the threads that take.
//! The channel between the two threads spins. The FreeBSD models pass the
//! limit when their free list is empty, as FreeBSD does; without a limit
//! they make a new object per get.
//!
//! # Memory pressure
//!
//! `cargo run --release -p tidepool-lab -- run --scenario fio-pressure`:
//! `fio` after a burst, `notify(Critical)` mid-run; tidepool on EPYC, 5
//! runs, medians. The idle stacks' resident floor (measured by `mincore` over the
//! pool's slabs, less what live requests touched) falls 96 % (runs
//! 86–100 %), 245 stacks are created again in the 500 ms window, and the
//! requests per CPU-second in the window are 1.15× the steady state's.
//! Wall-clock throughput in the window is 0.93× steady (runs 0.69–3.0×: the
//! machine is shared, and the seed policies, which ignore the signal, swing
//! as much). Per level, in the same scenario:
//!
//! | reaction | idle resident floor | stacks created in the window |
//! |---|---|---|
//! | `Medium`: reclaim to the working set, purge the depot | −98 % | 119 |
//! | `Critical`: drain to `min_idle`, no hold for a single signal | −95 %, −96 % | 598, 245 (two series) |
//! | `Critical` with a fixed 2 s `pressure_hold` | −100 % | 3,207 |
//!
//! A delivered critical signal brings 2000 idle objects (four parked
//! threads' caches included) down to `min_idle` in 0.09 ms (median of 20; 7
//! ms the first time, which includes registering `membarrier`; EPYC): `cargo run
//! --release -p tidepool-bench --bin reclaim_timeline -- pressure`.
//!
//! # wasmtime
//!
//! Per request (a new `Store`, `instantiate_async`, one `call_async`,
//! drop), `cargo bench -p tidepool-wasmtime --bench calls`, one run on EPYC
//! with nothing else running (the crate's README has every group):
//!
//! | µs per request | pooled (tidepool) | wasmtime on-demand | pooling allocator, defaults (1,024 slots) | pooling allocator, tuned | bounded queue of 100 stacks |
//! |---|---|---|---|---|---|
//! | stacks, 64 in flight | 2.06 | 19.36 (9.42×) | 2.30 (1.12×) | 2.26 (1.10×) | 2.52 (1.23×) |
//! | stacks, 512 in flight | 3.09 | 28.85 (9.35×) | 3.47 (1.13×) | 2.62 (0.85×) | 17.25 (5.59×) |
//! | with a 1 MiB memory, 64 in flight | 20.69 | 90.72 (4.38×) | 39.51 (1.91×) | 77.02 (3.72×) | 71.34 (3.45×) |
//! | with a 1 MiB memory, 512 in flight | 26.82 | 77.97 (2.91×) | 45.75 (1.71×) | 71.81 (2.68×) | 74.18 (2.77×) |
//!
//! "Tuned" is the pooling allocator as its documentation advises for a
//! store per request: `linear_memory_keep_resident` of 1 MiB (what
//! tidepool's memory creator keeps) and decommits batched 32 at a time. For
//! this module (17 pages, 15 of them touched) it clears the whole kept 1 MiB
//! with `memset` at every release, where a pooled region clears the 15
//! touched pages, so it is slower than its defaults here.
//!
//! With every kept page not in RAM released at an exact reset (a
//! swapped-out page still holds its data), one run of `-- memory_` for
//! pooled / tuned: 22.8 / 37.2, 29.7 / 61.2, 37.7 / 58.3 µs at 1 / 64 /
//! 512 in flight.
//!
//! Data segments reverse it: pooled memories copy them in at every
//! instantiation (copy-on-write images need wasmtime's own mappings), the
//! pooling allocator maps them copy-on-write. One run (`-- module_`), µs
//! per request at 1 / 64 / 512 in flight, pooled against the pooling
//! allocator (defaults; tuned): one page, no data 2.77 / 3.63 / 5.68
//! against 7.71 / 7.64 / 10.67 (4.00 / 4.28 / 7.99); 17 pages and a 512 KiB
//! segment 27.4 / 96.2 / 89.6 against 13.5 / 14.5 / 20.3 (58.2 / 65.4 /
//! 64.4); 129 pages and an 8 MiB segment, in an earlier run, 4,019 / 4,356
//! against 15.9 / 16.7 (75.5 / 90.4). The 1-page module against tuned in
//! five runs: 0.89×–1.44× at 1 in flight (four ahead), 0.84×–1.18× at 64
//! (three ahead), 1.41×–2.26× at 512, where it was 0.83×–0.87× while every
//! reset asked `mincore` or cleared the kept part whole: a region pool's
//! resets now clear as deep as its instances reach and release the rest in
//! one call, asking `mincore` once in 32 (and every time where the pages
//! in RAM are sparse). The crate's README says where each fits.
//!
//! With `async_stack_zeroing(true)`, pooled stacks are zeroed to the depth
//! their pool's fibers reach (one zeroing in 32 measures it with `mincore`;
//! the others `memset` that many top pages and release the rest in one
//! `madvise`); three runs (`cargo bench -p tidepool-wasmtime --bench calls
//! -- zeroing`), µs per request, pooled / pooling allocator / the same with
//! decommits batched 32 at a time: 3.55 / 4.66 / 4.61, 3.01 / 4.27 / 3.60,
//! 3.79 / 5.01 / 3.68 at 1 in flight; 4.27 / 6.70 / 4.35, 4.24 / 5.52 /
//! 4.56, 5.19 / 5.99 / 4.57 at 64; 4.11 / 9.04 / 7.49, 4.72 / 8.14 / 11.72,
//! 6.74 / 11.86 / 10.44 at 512. Ahead of the pooling allocator in every run;
//! of the batched one at 512 in every run and at 1 and 64 in two of three.
//!
//! Two seconds after a burst of 512, the pooled stacks and memories hold
//! less resident memory than the bounded queue (2,996 against 3,832 KiB;
//! `cargo run --release -p tidepool-wasmtime --example burst_residency`),
//! their mappings kept for reuse.
//!
//! # The C ABI and QEMU's coroutine pool
//!
//! `bin/budget.sh` (instruction counts) and
//! `crates/tidepool-ffi/examples/c/qemu_coroutine_pool.c` (nesting, 5
//! interleaved runs, EPYC): a get + put in an unchecked object pool is 171
//! instructions; a create + enter + terminate is 470 against 484 with a
//! QEMU-style two-level pool. Depth-1000 nesting × 1000 takes 0.835 s
//! against 0.846 s (medians) with the QEMU-style pool given the same room,
//! and 0.84 s against 10.5–14.2 s (1,001 coroutines made against 640,361)
//! with QEMU's default pool size.
