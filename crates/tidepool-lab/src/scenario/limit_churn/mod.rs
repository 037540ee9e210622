//! `limit-churn` (seed 002): allocation against a live limit far below the
//! keys walked, so that recycling is continuous.
//!
//! Seed 002 (FreeBSD vnodes, 2023): 20 `find(1)`s over 20 trees of 1M files
//! each, with the vnode limit at 8,388,608 and at 400,000. Allocation read
//! a hot global counter under the list lock, wrote a cycle counter every
//! CPU reads, and moved the global count three times (inc, dec, inc) each
//! time it went over the limit; letting a bounded slop persist and skipping
//! the redundant read and write took ~20 s → ~8 s and ~35 s → ~15 s.
//!
//! Here: T threads (1, 2 and the machine's CPUs), each walking its own key
//! space as the `find`s do: it gets an object per key and puts back the one
//! it got [`Sizes::in_flight`] keys earlier, as a `find(1)` releases a vnode
//! where it looked it up. So every thread allocates and releases (the
//! seed's contended counter is written from every CPU). Two limits, in the
//! ratio of the seed's two (8,388,608 / 400,000 ≈ 21): *tight*, just above
//! what the threads hold (`T × (in_flight + LIMIT_SLACK)`), and *loose*,
//! 21 × tight. The FreeBSD policies fill either limit (a released object
//! stays counted as a cache of its key) and then recycle at it on every
//! get; tidepool's puts refill the putting thread's own cache, so it creates
//! only what is held and reaches neither. Policies:
//! [`fbsd`] before and after the patch (recycling off their free list at
//! the limit) and a `tidepool::Pool` with `max_live`, its threads using
//! `get_timeout` (recycle before waiting, then a FIFO wait). Measured: wall time from the start signal to the last
//! thread's end, objects created and reused, tidepool's depot exchanges
//! and caches taken, and the FreeBSD models' writes to shared lines (each
//! counted where it is made); every repeat is kept.

pub mod fbsd;
pub mod probe;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Barrier;
use std::time::Instant;

use crate::policy::PolicyKind;
use crate::report::summary::{times, Ratio};
use crate::report::sweep_plot;
use crate::report::{Claim, Column, Figure, Format, ScenarioReport, Verdict};
use crate::scenario::{param, summarize_counts, Progress, Settings};
use crate::seeds::published;

/// The scenario's id.
pub const ID: &str = "limit-churn";

/// The object handed out per key: a small struct, as a vnode's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    /// The key it currently stands for.
    pub key: u64,
    payload: [u64; 7],
}

impl Obj {
    /// A fresh object for `key`.
    pub fn boxed(key: u64) -> Box<Obj> {
        Box::new(Obj {
            key,
            payload: [key; 7],
        })
    }

    /// The object now stands for `key`.
    pub fn reset(&mut self, key: u64) {
        self.key = key;
        self.payload = [key; 7];
    }
}

/// The two limits, as named in the report: `(tag, seed limit)`. `hi` is
/// the loose one, `lo` the tight one; their ratio is the seed's.
pub const LIMITS: [(&str, u64); 2] = [
    ("hi", published::FREEBSD_RUN_S[0].0),
    ("lo", published::FREEBSD_RUN_S[1].0),
];

/// Objects per thread the tight limit allows beyond those its queue holds:
/// the one in its hands, a FreeBSD release batch ([`fbsd::VDBATCH_SIZE`]),
/// with room to spare — so the FreeBSD free list is rarely empty at the
/// limit and no policy has to pass it.
pub const LIMIT_SLACK: u64 = 16;

/// The thread count the claims are made at.
pub const CLAIM_THREADS: usize = 2;

/// How long a tidepool thread waits at the limit before the run counts a
/// failure (its successor always puts back, so this never expires).
const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The sizes of one run of the scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Objects each thread gets (one per key of its own).
    pub ops_per_thread: u64,
    /// Objects each thread holds at once: it puts back the one it got this
    /// many keys earlier.
    pub in_flight: u64,
    /// The thread counts, ascending: 1, 2 and the machine's CPUs.
    pub threads: Vec<usize>,
}

impl Sizes {
    /// Full or quick sizes, on this machine.
    pub fn new(quick: bool) -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut threads = vec![1, CLAIM_THREADS, cpus];
        threads.sort_unstable();
        threads.dedup();
        Sizes {
            ops_per_thread: if quick { 100_000 } else { 1_000_000 },
            in_flight: 64,
            threads,
        }
    }

    /// The limit at `tag` (`"lo"`: tight, `"hi"`: loose) with `threads`
    /// threads.
    pub fn limit(&self, tag: &str, threads: usize) -> u64 {
        let tight = threads.max(1) as u64 * (self.in_flight + LIMIT_SLACK);
        if tag == LIMITS[1].0 {
            tight
        } else {
            (tight as f64 * LIMITS[0].1 as f64 / LIMITS[1].1 as f64).round() as u64
        }
    }
}

/// The metric key of the run time at limit `tag` with `threads` threads.
pub fn key(tag: &str, threads: usize) -> String {
    format!("ms_{tag}_t{threads}")
}

/// The metric key of count `what` (`created`, `reused`, `exchanges`,
/// `taken`) at limit `tag` with `threads` threads.
pub fn count_key(what: &str, tag: &str, threads: usize) -> String {
    format!("{what}_{tag}_t{threads}")
}

/// What one timed run counted.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    created: u64,
    /// FreeBSD: recycled off the free list; tidepool: gets served by an
    /// existing object.
    reused: u64,
    /// tidepool only: depot exchanges and thread caches taken.
    exchanges: Option<u64>,
    taken: Option<u64>,
    /// Writes (atomic read-modify-writes and stores) to shared counters:
    /// fbsd's `numvnodes` and `vn_alloc_cyclecount`, tidepool's global
    /// `max_live` count (`Stats::limit_folds`).
    counter_writes: u64,
    /// Acquisitions of a shared lock: fbsd's list lock, tidepool's depot
    /// lock (depot exchanges and caches taken).
    locks: u64,
    /// The CPU time of all threads, in ms.
    cpu_ms: f64,
}

/// The CPU time this thread has used, in ms.
fn thread_cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// Runs `threads` threads, each keeping the last `in_flight` objects it got
/// in a FIFO of its own and putting back the oldest as it gets a new one
/// (the `find(1)` shape: released where allocated), each thread timing
/// itself: the wall time in ms from the first start to the last end, and
/// the CPU time the threads used, in ms (stalls on cache lines other CPUs
/// own count; time preempted by other processes does not).
fn own<T: Send>(
    threads: usize,
    in_flight: u64,
    body: &(dyn Fn(u64, &mut Window<T>) + Sync),
) -> (f64, f64) {
    let threads = threads.max(1);
    let start = Barrier::new(threads + 1);
    let spans: Vec<(Instant, Instant, f64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    let c0 = thread_cpu_ms();
                    let mut w = Window(
                        std::collections::VecDeque::with_capacity(in_flight as usize + 1),
                        in_flight as usize,
                    );
                    body(i as u64, &mut w);
                    (t0, Instant::now(), thread_cpu_ms() - c0)
                })
            })
            .collect();
        start.wait();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    let cpu = spans.iter().map(|s| s.2).sum();
    match (first, last) {
        (Some(a), Some(b)) if spans.len() == threads => ((b - a).as_secs_f64() * 1e3, cpu),
        _ => (f64::NAN, f64::NAN),
    }
}

/// One thread's window of held objects: it puts back the oldest as it
/// gets a new one.
#[derive(Debug)]
pub struct Window<T>(std::collections::VecDeque<T>, usize);

impl<T> Window<T> {
    /// Holds `obj`; puts back the oldest once more than the window is held.
    #[inline]
    pub fn send(&mut self, obj: T, put: &mut impl FnMut(T)) {
        self.0.push_back(obj);
        if self.0.len() > self.1 {
            if let Some(x) = self.0.pop_front() {
                put(x);
            }
        }
    }

    /// Puts back everything held.
    pub fn finish(&mut self, put: &mut impl FnMut(T)) {
        while let Some(x) = self.0.pop_front() {
            put(x);
        }
    }
}

/// One timed run: the wall time in ms, and what it counted (the CPU time
/// among it).
fn walk(
    kind: PolicyKind,
    limit: u64,
    threads: usize,
    sizes: &Sizes,
) -> Result<(f64, Counts), String> {
    use std::sync::atomic::AtomicU64;
    let ops = sizes.ops_per_thread;
    let key_of = |t: u64, k: u64| t << 40 | k;
    match kind {
        PolicyKind::FbsdBefore | PolicyKind::Fbsd2023 => {
            let version = if kind == PolicyKind::FbsdBefore {
                fbsd::Version::Before
            } else {
                fbsd::Version::Slop2023
            };
            let v = fbsd::Vnodes::new(version, limit);
            let [created, recycled, writes, locks] = [(); 4].map(|()| AtomicU64::new(0));
            let (ms, cpu) = own(threads, sizes.in_flight, &|t, held| {
                let mut local = v.local();
                for k in 0..ops {
                    let obj = local.alloc(key_of(t, k));
                    held.send(obj, &mut |o| {
                        std::hint::black_box(&o);
                        local.release(o);
                    });
                }
                held.finish(&mut |o| {
                    std::hint::black_box(&o);
                    local.release(o);
                });
                local.flush();
                created.fetch_add(local.created, Ordering::Relaxed);
                recycled.fetch_add(local.recycled, Ordering::Relaxed);
                writes.fetch_add(local.counter_writes, Ordering::Relaxed);
                locks.fetch_add(local.locks, Ordering::Relaxed);
            });
            Ok((
                ms,
                Counts {
                    cpu_ms: cpu,
                    created: created.into_inner(),
                    reused: recycled.into_inner(),
                    counter_writes: writes.into_inner(),
                    locks: locks.into_inner(),
                    ..Counts::default()
                },
            ))
        }
        PolicyKind::Tidepool => {
            let pool = tidepool::Pool::builder(|| Obj::boxed(0))
                .max_live(limit as usize)
                .build()
                .map_err(|e| e.to_string())?;
            let failure = std::sync::Mutex::new(None::<String>);
            let (ms, cpu) = own(threads, sizes.in_flight, &|t, held| {
                let mut put = |o: tidepool::Pooled<'_, _>| {
                    std::hint::black_box(&*o);
                    drop(o);
                };
                for k in 0..ops {
                    match pool.get_timeout(WAIT) {
                        Ok(mut obj) => {
                            obj.reset(key_of(t, k));
                            held.send(obj, &mut put);
                        }
                        Err(e) => {
                            let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                            f.get_or_insert_with(|| format!("get {k} of thread {t}: {e}"));
                            break;
                        }
                    }
                }
                held.finish(&mut put);
            });
            if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(format!("{e} (max_live {limit})"));
            }
            let st = pool.stats();
            Ok((
                ms,
                Counts {
                    cpu_ms: cpu,
                    created: st.created,
                    reused: st.hits,
                    exchanges: Some(st.depot_exchanges),
                    taken: Some(st.caches_taken),
                    counter_writes: st.limit_folds,
                    // Depot exchanges and cache takes each take the depot's
                    // lock once.
                    locks: st.depot_exchanges + st.caches_taken,
                },
            ))
        }
        other => Err(format!("{other} is not a limit-churn policy")),
    }
}

/// `"tight"` for `lo`, `"loose"` for `hi`.
pub fn limit_name(tag: &str) -> &'static str {
    if tag == LIMITS[1].0 {
        "tight"
    } else {
        "loose"
    }
}

/// The policies run: those of [`PolicyKind::LIMIT_CHURN`] `settings`
/// selects.
pub fn policies(settings: &Settings) -> Vec<PolicyKind> {
    PolicyKind::LIMIT_CHURN
        .into_iter()
        .filter(|p| settings.policies.contains(p))
        .collect()
}

/// Runs the scenario.
pub(crate) fn run(settings: &Settings, progress: &dyn Progress) -> ScenarioReport {
    run_sized(settings, &Sizes::new(settings.quick), progress)
}

pub(crate) fn run_sized(
    settings: &Settings,
    sizes: &Sizes,
    progress: &dyn Progress,
) -> ScenarioReport {
    let policies = policies(settings);
    let configs: Vec<(&str, usize)> = LIMITS
        .iter()
        .flat_map(|&(tag, _)| sizes.threads.iter().map(move |&t| (tag, t)))
        .collect();
    progress.scenario(
        ID,
        (policies.len() * settings.repeats * configs.len()) as u64,
    );
    // Warm-up, untimed: the allocator's arenas and the first page faults
    // are paid here, not by whichever policy happens to run first.
    for &kind in &policies {
        let _ = walk(
            kind,
            sizes.limit(LIMITS[1].0, CLAIM_THREADS),
            CLAIM_THREADS,
            sizes,
        );
    }
    let mut records: BTreeMap<PolicyKind, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
    let mut errors = Vec::new();
    for repeat in 0..settings.repeats {
        let mut this: BTreeMap<PolicyKind, BTreeMap<String, f64>> = BTreeMap::new();
        for &(tag, threads) in &configs {
            let limit = sizes.limit(tag, threads);
            // Rotate the order so that no policy always runs first.
            for i in 0..policies.len() {
                let kind = policies[(i + repeat) % policies.len()];
                progress.run(
                    kind,
                    &format!(
                        "repeat {}/{}, limit {limit}, {threads} thread(s)",
                        repeat + 1,
                        settings.repeats
                    ),
                );
                match walk(kind, limit, threads, sizes) {
                    Ok((ms, counts)) => {
                        let m = this.entry(kind).or_default();
                        m.insert(key(tag, threads), ms);
                        let k = |what| count_key(what, tag, threads);
                        m.insert(k("created"), counts.created as f64);
                        m.insert(k("reused"), counts.reused as f64);
                        m.insert(k("cpu"), counts.cpu_ms);
                        if let Some(x) = counts.exchanges {
                            m.insert(k("exchanges"), x as f64);
                        }
                        if let Some(x) = counts.taken {
                            m.insert(k("taken"), x as f64);
                        }
                        let ops = (sizes.ops_per_thread * threads as u64) as f64;
                        m.insert(k("counterw"), counts.counter_writes as f64 / ops);
                        m.insert(k("locks"), counts.locks as f64 / ops);
                        m.insert(
                            k("shared"),
                            (counts.counter_writes + 2 * counts.locks) as f64 / ops,
                        );
                    }
                    Err(e) => {
                        errors.push(format!("{kind}, limit {limit}, {threads} thread(s): {e}"))
                    }
                }
                progress.run_done();
            }
        }
        for (kind, m) in this {
            records.entry(kind).or_default().push(m);
        }
    }
    let (probe_private, probe_shared) = probe::contention();
    progress.scenario_done();
    let headline = key("lo", CLAIM_THREADS);
    let results = summarize_counts(&policies, records, &headline);

    let mut columns = Vec::new();
    for &(tag, _) in &LIMITS {
        let name = limit_name(tag);
        for &t in &sizes.threads {
            let limit = sizes.limit(tag, t);
            let mut c = Column::new(
                &key(tag, t),
                &format!("run time, {name} limit {limit}, {t} threads"),
                Format::Millis,
            );
            if t == CLAIM_THREADS {
                c = c.terminal(&format!("{tag} {t}t"));
            }
            columns.push(c);
            // The other counts (reused, depot exchanges, caches taken,
            // counter writes, lock acquisitions) and every thread count's
            // are in the JSON: a column each would make the table wider
            // than a screen.
            if t != CLAIM_THREADS {
                continue;
            }
            for (what, label, format) in [
                ("created", "created", Format::Count),
                (
                    "shared",
                    "shared-line writes per get: counter writes + 2 × lock acquisitions",
                    Format::Ratio,
                ),
                ("cpu", "CPU time of all threads, ms", Format::Ratio),
            ] {
                columns.push(Column::new(
                    &count_key(what, tag, t),
                    &format!("{label}, {name} limit {limit}, {t} threads"),
                    format,
                ));
            }
        }
    }
    let mut params = BTreeMap::new();
    param(&mut params, "gets per thread", sizes.ops_per_thread);
    param(&mut params, "held per thread (window)", sizes.in_flight);
    param(
        &mut params,
        "threads",
        sizes
            .threads
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    );
    for &(tag, seed) in &LIMITS {
        let per: Vec<String> = sizes
            .threads
            .iter()
            .map(|&t| format!("{} at {t} threads", sizes.limit(tag, t)))
            .collect();
        param(
            &mut params,
            &format!("limit {tag}, {} (seed column {seed})", limit_name(tag)),
            per.join(", "),
        );
    }
    param(&mut params, "object", "64-byte struct, boxed");
    param(&mut params, "VNLRU_COUNT_SLOP", fbsd::VNLRU_COUNT_SLOP);
    param(&mut params, "VDBATCH_SIZE", fbsd::VDBATCH_SIZE);
    param(
        &mut params,
        "contention probe: shared / private atomic add, 2 threads",
        format!("{:.2}×", probe_shared / probe_private),
    );
    let mut notes = vec![
        "each thread gets an object per key and puts back the one it got in_flight keys \
         earlier, as a find(1) releases a vnode where it looked it up. The FreeBSD policies \
         fill either limit (a released object stays counted as a cache of its key) and then \
         recycle off their free list under the list lock on every get; tidepool's puts refill \
         the putting thread's own cache, so it creates only what is held (created column) and \
         reaches neither limit: its gets and puts write no shared line"
            .to_owned(),
        "shared-line writes per get are counted where they are made, not estimated: fbsd \
         models count each read-modify-write or store of numvnodes and vn_alloc_cyclecount \
         and each list-lock acquisition (2 writes: take, release); tidepool counts its \
         writes of the global max_live count (Stats::limit_folds) and its depot-lock \
         acquisitions (depot exchanges and caches taken)"
            .to_owned(),
        format!(
            "contention probe, this run: two threads adding to one shared counter take \
             {:.1} ns per add, to a counter each {:.1} ns ({:.2}×). The seed's gain is the \
             price of a contended line; where that ratio is near 1 (the threads take turns on \
             the CPUs rather than run at once) no policy can gain much from writing fewer \
             shared lines, and the counted writes are the evidence",
            probe_shared,
            probe_private,
            probe_shared / probe_private
        ),
        "run time: wall time from the start signal to the last thread's end; the plot shows \
         every repeat as a dot, the median as the line"
            .to_owned(),
    ];
    notes.extend(errors.into_iter().map(|e| format!("run failed: {e}")));
    let [(l1, b1, a1), (l2, b2, a2)] = published::FREEBSD_RUN_S;
    ScenarioReport {
        id: ID.to_owned(),
        title: "limit-churn: allocation at a live limit, recycling continuously".to_owned(),
        seeds: vec!["002".to_owned()],
        finding: format!(
            "Seed 002: the vnode limit's global counter, read under the list lock, adjusted \
             inc/dec/inc and paired with a cycle counter written every time, made 20 parallel \
             find(1)s slow; a bounded slop and no redundant read or write took ~{b1} s → ~{a1} \
             s at a limit of {l1} and ~{b2} s → ~{a2} s at {l2}."
        ),
        quotes: Vec::new(),
        workload: format!(
            "T threads, each walking keys of its own: it gets {} objects (one per key) and \
             puts back the one it got {} keys earlier, as a find(1) releases a vnode where it \
             looked it up. Live limit tight (T × {}, just above what the threads hold) and \
             loose (21 × tight, the seed's ratio of its two limits). The table shows run times \
             at every thread count and, at 2 threads, objects created, shared-line writes per \
             get and CPU time; every other count is in report.json.",
            sizes.ops_per_thread,
            sizes.in_flight,
            sizes.in_flight + LIMIT_SLACK
        ),
        params,
        reclaim_interval_ms: settings.interval().as_secs_f64() * 1e3,
        columns,
        phases: Vec::new(),
        results,
        claims: Vec::new(),
        plots: vec![figure(&sizes.threads)],
        notes,
    }
}

/// The report's plot: run time against `threads`, a line per limit.
fn figure(threads: &[usize]) -> Figure {
    Figure::Sweep(sweep_plot::Spec {
        title: "Run time against threads (lower is better)".to_owned(),
        x_label: "threads (count)".to_owned(),
        y_label: "run time (ms)".to_owned(),
        xs: threads.to_vec(),
        variants: LIMITS
            .iter()
            .map(|&(tag, _)| sweep_plot::Variant {
                label: format!("{} limit", limit_name(tag)),
                keys: threads.iter().map(|&t| key(tag, t)).collect(),
            })
            .collect(),
    })
}

fn claim(s: &ScenarioReport, claim: String, published: String, detail: String) -> Claim {
    Claim {
        seed: "002".to_owned(),
        scenario: s.id.clone(),
        claim,
        published,
        published_detail: detail,
        measured: "–".to_owned(),
        measured_detail: "a policy was not run, or its runs failed".to_owned(),
        rule: String::new(),
        verdict: Verdict::Unmeasured,
    }
}

/// `slow / fast` run time at limit `tag`, [`CLAIM_THREADS`] threads.
fn speedup(s: &ScenarioReport, fast: PolicyKind, slow: PolicyKind, tag: &str) -> Option<Ratio> {
    Ratio::of(s.result(slow)?, s.result(fast)?, &key(tag, CLAIM_THREADS))
}

/// The counted shared-line writes per get of `kinds` at limit `tag`,
/// [`CLAIM_THREADS`] threads, and the machine's contention probe.
fn writes(s: &ScenarioReport, kinds: &[PolicyKind], tag: &str) -> String {
    let k = count_key("shared", tag, CLAIM_THREADS);
    let each: Vec<String> = kinds
        .iter()
        .filter_map(|&kind| {
            let v = s.result(kind)?.per_run(&k).into_iter().next()?;
            Some(format!("{kind} {v:.4}"))
        })
        .collect();
    let probe = s
        .params
        .iter()
        .find(|(name, _)| name.starts_with("contention probe"))
        .map_or("–", |(_, v)| v.as_str());
    format!(
        "shared-line writes per get (counted): {}; contention probe here: a shared line \
         costs {probe} a private one",
        each.join(", ")
    )
}

/// What the run says about seed 002.
pub(crate) fn claims(s: &ScenarioReport) -> Vec<Claim> {
    let mut out = Vec::new();
    for (i, &(tag, seed)) in LIMITS.iter().enumerate() {
        let (_, before, after) = published::FREEBSD_RUN_S[i];
        let seed_ratio = f64::from(before) / f64::from(after);
        let seed_detail = format!(
            "~{before} s → ~{after} s at a vnode limit of {seed}: {} (seed 002)",
            times(seed_ratio)
        );
        for (fast, slow, what, min) in [
            (
                PolicyKind::Fbsd2023,
                PolicyKind::FbsdBefore,
                "fbsd-2023 vs before",
                1.0,
            ),
            (
                PolicyKind::Tidepool,
                PolicyKind::FbsdBefore,
                "tidepool vs fbsd-before",
                2.5,
            ),
        ] {
            let mut c = claim(
                s,
                format!("{what}, limit {}, {CLAIM_THREADS}t", limit_name(tag)),
                times(seed_ratio),
                seed_detail.clone(),
            );
            c.rule = format!("≥ {}", times(min));
            if let Some(r) = speedup(s, fast, slow, tag) {
                c.measured = r.short();
                c.measured_detail = format!(
                    "{slow} run time / {fast}, {CLAIM_THREADS} threads: {}; {}",
                    r.detail(),
                    writes(s, &[slow, fast], tag)
                );
                c.verdict = Verdict::of(r.median >= min);
            }
            out.push(c);
        }
    }
    let mut c = claim(
        s,
        format!("tidepool vs fbsd-2023, {CLAIM_THREADS}t, both"),
        "–".to_owned(),
        "the seed's fix is the baseline to match".to_owned(),
    );
    c.rule = "≥ 1.00× at both".to_owned();
    let both: Vec<(&str, Ratio)> = LIMITS
        .iter()
        .filter_map(|&(tag, _)| {
            Some((
                tag,
                speedup(s, PolicyKind::Tidepool, PolicyKind::Fbsd2023, tag)?,
            ))
        })
        .collect();
    if both.len() == LIMITS.len() {
        let worst = both
            .iter()
            .map(|(_, r)| r.median)
            .fold(f64::INFINITY, f64::min);
        c.measured = times(worst);
        c.measured_detail = both
            .iter()
            .map(|(tag, r)| format!("limit {}: {}", limit_name(tag), r.detail()))
            .collect::<Vec<_>>()
            .join("; ");
        c.verdict = Verdict::of(worst >= 1.0);
    }
    out.push(c);
    out
}

/// The thread counts a finished run measured, ascending (from its columns).
pub fn threads_of(s: &ScenarioReport) -> Vec<usize> {
    let mut t: Vec<usize> = s
        .columns
        .iter()
        .filter_map(|c| c.key.rsplit_once("_t")?.1.parse().ok())
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}
