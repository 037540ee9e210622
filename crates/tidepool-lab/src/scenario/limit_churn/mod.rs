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
//! Here: P pairs of threads (2 threads, and the machine's CPUs rounded up to
//! a pair). In each pair a producer gets an object per key and sends it
//! down a bounded channel holding [`Sizes::in_flight`] objects; a consumer
//! takes it off and puts it back. Gets on one thread and puts on another
//! are what make a limit bind for every policy: a put-back object is not in
//! the getting thread's hands, so each get past the limit must recycle. The
//! channel costs every policy the same. Two limits, in the ratio of the
//! seed's two (8,388,608 / 400,000 ≈ 21): *tight*, just above the objects
//! the pairs can hold in flight (`pairs × (in_flight + LIMIT_SLACK)`), so
//! creates hit it continuously for every policy; *loose*, 21 × tight, which
//! the FreeBSD policies fill (a released object stays counted as a cache of
//! its key) and then recycle at, and which tidepool rarely reaches. Policies:
//! [`fbsd`] before and after the patch (recycling off their free list at
//! the limit) and a `tidepool::Pool` with `max_live`, its producers using
//! `get_owned_timeout` (recycle before waiting, then a FIFO wait) and
//! sending the owned guard across. Measured: wall time from the start
//! signal to the last thread's end, objects created and reused, and
//! tidepool's depot exchanges and caches taken; every repeat is kept.

pub mod fbsd;

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::Instant;

use crate::policy::PolicyKind;
use crate::report::summary::{times, Ratio};
use crate::report::{Claim, Column, Format, RunRecord, ScenarioReport, Verdict};
use crate::scenario::{param, summarize, Progress, Settings};
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

/// Objects per pair the tight limit allows beyond those in the channel:
/// the two in the producer's and the consumer's hands, and a FreeBSD
/// release batch ([`fbsd::VDBATCH_SIZE`]), with room to spare — so the
/// FreeBSD free list is never empty at the limit and no policy has to
/// pass it.
pub const LIMIT_SLACK: u64 = 16;

/// The thread count the claims are made at (one pair).
pub const CLAIM_THREADS: usize = 2;

/// How long a tidepool producer waits at the limit before the run counts
/// a failure (the consumer always puts back, so this never expires).
const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The sizes of one run of the scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Objects each producer gets (and its consumer puts back).
    pub ops_per_pair: u64,
    /// The channel's capacity: objects in flight between a pair.
    pub in_flight: u64,
    /// The thread counts, ascending, each even (producer + consumer pairs).
    pub threads: Vec<usize>,
}

impl Sizes {
    /// Full or quick sizes, on this machine.
    pub fn new(quick: bool) -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut threads = vec![CLAIM_THREADS, cpus.max(2).next_multiple_of(2)];
        threads.sort_unstable();
        threads.dedup();
        Sizes {
            ops_per_pair: if quick { 100_000 } else { 1_000_000 },
            in_flight: 64,
            threads,
        }
    }

    /// The limit at `tag` (`"lo"`: tight, `"hi"`: loose) with `threads`
    /// threads.
    pub fn limit(&self, tag: &str, threads: usize) -> u64 {
        let pairs = (threads / 2).max(1) as u64;
        let tight = pairs * (self.in_flight + LIMIT_SLACK);
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
}

/// Runs `threads / 2` producer/consumer pairs joined by channels of
/// `in_flight`, each thread timing itself (the main thread may be scheduled
/// late on a busy machine); the wall time in ms from the first start to the
/// last end.
fn paired<T: Send>(
    threads: usize,
    in_flight: u64,
    produce: &(dyn Fn(u64, std::sync::mpsc::SyncSender<T>) + Sync),
    consume: &(dyn Fn(std::sync::mpsc::Receiver<T>) + Sync),
) -> f64 {
    let pairs = (threads / 2).max(1);
    let start = Barrier::new(2 * pairs + 1);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for p in 0..pairs {
            let (tx, rx) = std::sync::mpsc::sync_channel::<T>(in_flight as usize);
            let start = &start;
            handles.push(s.spawn(move || {
                start.wait();
                let t0 = Instant::now();
                produce(p as u64, tx);
                (t0, Instant::now())
            }));
            handles.push(s.spawn(move || {
                start.wait();
                let t0 = Instant::now();
                consume(rx);
                (t0, Instant::now())
            }));
        }
        start.wait();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    match (first, last) {
        (Some(a), Some(b)) if spans.len() == 2 * pairs => (b - a).as_secs_f64() * 1e3,
        _ => f64::NAN,
    }
}

/// One timed run: the wall time in ms, and what it counted.
fn walk(
    kind: PolicyKind,
    limit: u64,
    threads: usize,
    sizes: &Sizes,
) -> Result<(f64, Counts), String> {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let ops = sizes.ops_per_pair;
    let key_of = |p: u64, k: u64| p << 40 | k;
    match kind {
        PolicyKind::FbsdBefore | PolicyKind::Fbsd2023 => {
            let version = if kind == PolicyKind::FbsdBefore {
                fbsd::Version::Before
            } else {
                fbsd::Version::Slop2023
            };
            let v = fbsd::Vnodes::new(version, limit);
            let (created, recycled) = (AtomicU64::new(0), AtomicU64::new(0));
            let ms = paired(
                threads,
                sizes.in_flight,
                &|p, tx| {
                    let mut local = v.local();
                    for k in 0..ops {
                        let obj = local.alloc(key_of(p, k));
                        if tx.send(obj).is_err() {
                            break;
                        }
                    }
                    created.fetch_add(local.created, Relaxed);
                    recycled.fetch_add(local.recycled, Relaxed);
                },
                &|rx| {
                    let mut local = v.local();
                    for obj in rx {
                        std::hint::black_box(&obj);
                        local.release(obj);
                    }
                    created.fetch_add(local.created, Relaxed);
                    recycled.fetch_add(local.recycled, Relaxed);
                },
            );
            Ok((
                ms,
                Counts {
                    created: created.into_inner(),
                    reused: recycled.into_inner(),
                    ..Counts::default()
                },
            ))
        }
        PolicyKind::Tidepool => {
            let pool = std::sync::Arc::new(
                tidepool::Pool::builder(|| Obj::boxed(0))
                    .max_live(limit as usize)
                    .build()
                    .map_err(|e| e.to_string())?,
            );
            let failure = std::sync::Mutex::new(None::<String>);
            let ms = paired(
                threads,
                sizes.in_flight,
                &|p, tx| {
                    for k in 0..ops {
                        match pool.get_owned_timeout(WAIT) {
                            Ok(mut obj) => {
                                obj.reset(key_of(p, k));
                                if tx.send(obj).is_err() {
                                    break;
                                }
                            }
                            Err(e) => {
                                let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                                f.get_or_insert_with(|| format!("get {k} of pair {p}: {e}"));
                                break;
                            }
                        }
                    }
                },
                &|rx| {
                    for obj in rx {
                        std::hint::black_box(&*obj);
                        drop(obj);
                    }
                },
            );
            if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(format!("{e} (max_live {limit})"));
            }
            let st = pool.stats();
            Ok((
                ms,
                Counts {
                    created: st.created,
                    reused: st.hits,
                    exchanges: Some(st.depot_exchanges),
                    taken: Some(st.caches_taken),
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
                        if let Some(x) = counts.exchanges {
                            m.insert(k("exchanges"), x as f64);
                        }
                        if let Some(x) = counts.taken {
                            m.insert(k("taken"), x as f64);
                        }
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
    progress.scenario_done();
    let headline = key("lo", CLAIM_THREADS);
    let results = policies
        .iter()
        .filter_map(|&kind| {
            let runs: Vec<RunRecord> = records
                .remove(&kind)?
                .into_iter()
                .map(|mut metrics| {
                    metrics.insert("failures".into(), 0.0);
                    RunRecord {
                        metrics,
                        series: Default::default(),
                        first_failure: None,
                        pressure: Default::default(),
                    }
                })
                .collect();
            Some(summarize(kind, runs, &headline))
        })
        .collect();

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
            for (what, label) in [
                ("created", "created"),
                ("reused", "reused (fbsd: recycled; tidepool: hits)"),
                ("exchanges", "tidepool depot exchanges"),
                ("taken", "tidepool caches taken"),
            ] {
                columns.push(Column::new(
                    &count_key(what, tag, t),
                    &format!("{label}, {name} limit {limit}, {t} threads"),
                    Format::Count,
                ));
            }
        }
    }
    let mut params = BTreeMap::new();
    param(&mut params, "gets per pair", sizes.ops_per_pair);
    param(&mut params, "in flight per pair (channel)", sizes.in_flight);
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
    let mut notes = vec![
        "gets on one thread, puts on another: at the tight limit every policy creates up to \
         the limit and then reuses (fbsd: recycles off its free list under the list lock; \
         tidepool: takes a batch from the depot, takes the consumer's cache, or waits in \
         get_owned_timeout). At the loose limit the FreeBSD policies still fill it (a released \
         object stays counted as a cache of its key) and then recycle every get; tidepool \
         creates only what is in flight and rarely reaches it. The created, reused, exchanges \
         and taken columns show where the limit binds"
            .to_owned(),
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
            "P producer/consumer pairs: the producer gets {} objects and sends each down a \
             channel holding {}; the consumer puts it back. Live limit tight (pairs × {}, just \
             above what is in flight: binds continuously) and loose (21 × tight, the seed's \
             ratio of its two limits).",
            sizes.ops_per_pair,
            sizes.in_flight,
            sizes.in_flight + LIMIT_SLACK
        ),
        params,
        reclaim_interval_ms: settings.interval().as_secs_f64() * 1e3,
        columns,
        phases: Vec::new(),
        results,
        claims: Vec::new(),
        notes,
    }
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
                    "{slow} run time / {fast}, {CLAIM_THREADS} threads: {}",
                    r.detail()
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
